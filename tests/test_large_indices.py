"""64-bit indexing: one tensor with more than 2**31 elements, compiled and run.

The input is a u8 tensor of N = R * C = 65537 * 32769 = 2**31 + 98305 elements (about 2 GiB,
allocated once; every call passes it without a copy), seen both as a vector `x: u8[N]` and as
a matrix `x: u8[R, C]` whose last rows start past 2**31. The entries reduce over all of it
(a sum into i64, a max, row sums whose flat index r*C + c passes 2**31) and write small outputs
read from its very end (an array-form slice `x[N-5:] + 1` and an index-form access
`x[R - 1, C - 5 + k]`). Everything is checked against numpy; a 32-bit index anywhere would
wrap to a negative offset and crash or give wrong sums.

The emitted C is checked too: loop indices, symbols and kernel size parameters are int64_t, and
no subscript narrows its index with a cast.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import compile_text

R, C = 65537, 32769
N = R * C
assert N > 2**31

TEXT = """
[composite.big1d]
doc = "Sum and max of a long u8 vector, and its last five elements plus one."
inputs = ["x: u8[N]"]
outputs = ["total: i64", "top: u8", "tail: u8[5]"]
where = ["N >= 5"]
body = '''
total = sum(cast(x, i64))
top = max(x)
tail = x[N-5:] + 1
'''

[composite.big2d]
doc = "Row sums of a u8 matrix with more than 2**31 elements, and the end of its last row."
inputs = ["x: u8[R, C]"]
outputs = ["rows: i64[R]", "last: u8[5]"]
where = ["R >= 1", "C >= 5"]
body = '''
rows = sum(cast(x, i64), axis=1)
last[k] = x[R - 1, C - 5 + k] + 1
'''
"""


def _available_memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return compile_text(tmp_path_factory.mktemp("large"), TEXT, name="large")


@pytest.fixture(scope="module")
def big_input():
    # The project's machines have 24 GiB: too little free memory is a failure, never a skip.
    assert _available_memory_bytes() >= 3 * N, f"needs about {3 * N >> 30} GiB of free memory"
    # A pseudo-random period of a prime length tiled over N bytes: one allocation of N bytes.
    period = np.random.default_rng(7).integers(0, 256, size=1_000_003, dtype=np.uint8)
    x = np.resize(period, N)
    # Recognisable values around 2**31 and at the very end (wraparound of u8 + 1 included).
    x[2**31 - 2 : 2**31 + 2] = [250, 251, 252, 253]
    x[-5:] = [0, 1, 254, 255, 7]
    return x


def test_emitted_c_indexes_with_int64(library):
    source = library.manifest_path.with_name("large.c").read_text()
    body = source[source.index("/* ---- big1d ---- */") :]
    loops = re.findall(r"for \(([^;]*);", body)
    assert loops, "no loops found"
    assert all(loop.startswith("int64_t ") for loop in loops), loops
    # every kernel's size parameters are int64_t
    for params in re.findall(r"static void \w+\(([^)]*)\)", body):
        for param in params.split(","):
            param = param.strip()
            if "*" not in param:
                assert param.startswith("int64_t "), params
    # no subscript narrows its index
    narrowing = re.compile(r"\[[^\[\]]*\(\s*(?:int|unsigned|int32_t|uint32_t|long|short)\s*\)[^\[\]]*\]")
    assert not narrowing.findall(body)
    for entry in ("big1d", "big2d"):
        assert re.search(rf"int {entry}\(const uint8_t\* x, .*int64_t", source), entry


def test_vector_of_more_than_2_31_elements(library, big_input):
    x = big_input
    total, top, tail = library["big1d"](x)
    assert int(total) == int(x.sum(dtype=np.int64))
    assert int(top) == int(x.max()) == 255
    np.testing.assert_array_equal(tail, np.array([1, 2, 255, 0, 8], dtype=np.uint8))
    assert tail.dtype == np.uint8


def test_matrix_whose_flat_index_passes_2_31(library, big_input):
    x = big_input.reshape(R, C)  # a view: no copy
    assert np.shares_memory(x, big_input)
    rows, last = library["big2d"](x)
    expected = x.sum(axis=1, dtype=np.int64)
    np.testing.assert_array_equal(rows, expected)
    assert rows.dtype == np.int64 and rows.shape == (R,)
    np.testing.assert_array_equal(last, np.array([1, 2, 255, 0, 8], dtype=np.uint8))
    # the rows that lie entirely past 2**31 are there and right
    first_row_past = -(-(2**31) // C)
    assert first_row_past < R - 1
    np.testing.assert_array_equal(rows[first_row_past:], expected[first_row_past:])
