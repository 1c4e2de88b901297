"""Reductions split into vector lanes (LaneReduce): exact at every boundary of the lane blocks.

At -O2 a reduction loop keeps one partial accumulator per lane (32 for f32 on AVX-512, 64 at
most) and combines them at the end; the tail past the last full block runs one element at a
time. Sizes around multiples of every possible lane count, NaN in a lane block and in the tail,
and integer wrap-around must all give numpy's answer.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import randint, randn, runtime

from catenc.driver import plan_file
from catenc.lower.loops import LaneReduce, iter_stmts
from catenc.plan import Options

SOURCE = """
[composite.rows_f32]
inputs = ["x: f32[N, D]"]
outputs = ["s: f32[N]", "hi: f32[N]", "lo: f32[N]", "p: f32[N]"]
body = '''
s = sum(x, axis=-1)
hi = max(x, axis=-1)
lo = min(x, axis=-1)
p = prod(x, axis=-1)
'''

[composite.rows_f64]
inputs = ["x: f64[N, D]"]
outputs = ["s: f64[N]"]
body = "s = sum(x, axis=-1)"

[composite.rows_i32]
inputs = ["x: i32[N, D]"]
outputs = ["s: i32[N]", "hi: i32[N]"]
body = '''
s = sum(x, axis=-1)
hi = max(x, axis=-1)
'''

[composite.dot_sq]
inputs = ["x: f32[D]", "y: f32[D]"]
outputs = ["d: f32"]
body = "d = sum((x - y) * (x - y))"
"""

SIZES = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000)


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE, name="lanes")


def test_reductions_are_lane_split(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(SOURCE)
    rt = runtime()
    entries = plan_file(str(path), Options(rt, config=rt.validate_config({}))).entries
    for entry in entries:
        assert any(isinstance(s, LaneReduce) for k in entry.kernels for s in iter_stmts(k.body)), entry.name


@pytest.mark.parametrize("d", SIZES)
def test_float_rows(lib, d):
    x = randn((3, d), seed=d)
    x64 = x.astype(np.float64)
    s, hi, lo, p = lib.rows_f32(x)
    np.testing.assert_allclose(s, x64.sum(-1), rtol=1e-5, atol=1e-5 * np.sqrt(d))
    np.testing.assert_array_equal(hi, x.max(-1))
    np.testing.assert_array_equal(lo, x.min(-1))
    xp = (1 + x / 64).astype(np.float32)
    np.testing.assert_allclose(lib.rows_f32(xp)[3], xp.astype(np.float64).prod(-1), rtol=1e-5)
    np.testing.assert_allclose(lib.rows_f64(x64), x64.sum(-1), rtol=1e-12)


@pytest.mark.parametrize("d", (33, 64, 65, 1000))
@pytest.mark.parametrize("where", ("first", "block", "tail"))
def test_nan_propagates_from_any_lane_and_the_tail(lib, d, where):
    x = randn((2, d), seed=1)
    position = {"first": 0, "block": min(d - 1, 37) if d > 32 else 0, "tail": d - 1}[where]
    x[1, position] = np.nan
    s, hi, lo, p = lib.rows_f32(x)
    assert np.isnan(s[1]) and np.isnan(hi[1]) and np.isnan(lo[1]) and np.isnan(p[1])
    assert not np.isnan(hi[0]) and hi[0] == x[0].max() and lo[0] == x[0].min()


@pytest.mark.parametrize("d", (1, 33, 64, 65, 1000))
def test_integer_sums_wrap_and_max(lib, d):
    x = randint((2, d), -(2**31), 2**31 - 1, np.int32, seed=d)
    s, hi = lib.rows_i32(x)
    np.testing.assert_array_equal(s, x.sum(-1, dtype=np.int32))
    np.testing.assert_array_equal(hi, x.max(-1))


@pytest.mark.parametrize("d", (0, 1, 31, 32, 33, 1000, 4097))
def test_whole_array_reduction(lib, d):
    x, y = randn((d,), seed=2), randn((d,), seed=3)
    want = float(((x.astype(np.float64) - y) ** 2).sum())
    assert abs(float(lib.dot_sq(x, y)) - want) <= 1e-5 * max(1.0, want)
