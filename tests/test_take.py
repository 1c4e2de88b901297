"""take(x, indices, axis): gather by an integer tensor; out-of-range indices return CATENC_E_INDEX."""

import numpy as np
import pytest

from catenc.loader import CatencStatusError
from tests.conftest import assert_close, randint, randn

TAKE = """
[composite.rows]
inputs = ["table: f32[V, D]", "ids: i64[B, T]"]
outputs = ["y: f32[B, T, D]"]
body = "y = take(table, ids, 0)"

[composite.cols]
types = { T = ["f64", "i32"] }
inputs = ["x: T[M, N, K]", "ids: i32[J]"]
outputs = ["y: T[M, J, K]"]
body = "y = take(x, ids, 1)"

[composite.of_expression]
inputs = ["x: f32[M, N]", "ids: i64[J]"]
outputs = ["y: f32[J, M]"]
body = "y = take((x * 2).T, ids, 0) + 1"

[composite.computed_indices]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
where = ["N >= 1"]
body = "y = take(x, N - 1 - arange(N), 0)"
"""


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(TAKE)


@pytest.mark.parametrize("v,d,b,t", [(1, 1, 1, 1), (7, 3, 2, 5), (13, 17, 3, 1)])
def test_rows_with_negative_indices(lib, v, d, b, t):
    table = randn((v, d))
    ids = randint((b, t), -v, v - 1, np.int64)  # hi inclusive
    assert_close(lib["rows"](table, ids), table[ids], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_inner_axis(lib, dtype):
    x = randn((3, 7, 5)).astype(dtype)
    ids = np.array([6, 0, -1, 3], dtype=np.int32)
    assert_close(lib["cols"](x, ids), np.take(x, ids, axis=1), rtol=0, atol=0)


def test_gather_from_a_view_of_an_expression(lib):
    x = randn((5, 4))
    ids = np.array([3, 0, 3, -4])
    assert_close(lib["of_expression"](x, ids), np.take((x * 2).T, ids, axis=0) + 1, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n", [1, 2, 13])
def test_indices_computed_in_the_body(lib, n):
    x = randn(n)
    assert_close(lib["computed_indices"](x), x[::-1], rtol=0, atol=0)


@pytest.mark.parametrize("bad", [7, -8, 100, np.iinfo(np.int64).min])
def test_out_of_range_index_returns_catenc_e_index(lib, bad):
    table = randn((7, 3))
    ids = np.array([[0, bad, 1]])
    with pytest.raises(CatencStatusError) as info:
        lib["rows"](table, ids)
    assert info.value.status == 3
