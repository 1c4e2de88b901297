"""einsum, tril and triu against numpy."""

import numpy as np
import pytest

from tests.conftest import assert_close, randn

TEXT = """
[composite.mm]
inputs = ["a: f32[M, K]", "b: f32[K, N]"]
outputs = ["y: f32[M, N]"]
body = 'y = einsum("ij,jk->ik", a, b)'

[composite.batched]
inputs = ["a: f64[B, M, K]", "b: f64[B, K, N]"]
outputs = ["y: f64[B, N, M]"]
body = 'y = einsum("bik,bkj->bji", a, b)'

[composite.implicit]
inputs = ["a: f32[M, K]", "b: f32[K, N]"]
outputs = ["y: f32[M, N]", "t: f32", "o: f32[M, K, N]"]
body = '''
y = einsum("ij,jk", a, b)
t = einsum("ij,ij->", a, a)
o = einsum("ij,kl->ijl", a, b)
'''

[composite.triangles]
types = { T = ["f32", "i32"] }
inputs = ["x: T[B, M, N]"]
outputs = ["l: T[B, M, N]", "u: T[B, M, N]", "l1: T[B, M, N]", "um: T[B, M, N]"]
body = '''
l = tril(x)
u = triu(x)
l1 = tril(x, 1)
um = triu(x, k=-2)
'''
"""


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(TEXT)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (37, 3, 1)])
def test_matmul_spelling(lib, m, k, n):
    a, b = randn((m, k)), randn((k, n), seed=1)
    assert_close(lib["mm"](a, b), np.einsum("ij,jk->ik", a, b), rtol=1e-5, atol=1e-5)
    y, t, o = lib["implicit"](a, b)
    assert_close(y, np.einsum("ij,jk", a, b), rtol=1e-5, atol=1e-5)
    assert_close(t, np.einsum("ij,ij->", a, a), rtol=1e-5, atol=1e-5)
    assert_close(o, np.einsum("ij,kl->ijl", a, b), rtol=1e-5, atol=1e-5)


def test_batched_with_permuted_output(lib):
    a, b = randn((3, 4, 5), np.float64), randn((3, 5, 2), np.float64, seed=2)
    assert_close(lib["batched"](a, b), np.einsum("bik,bkj->bji", a, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 5, 7), (1, 7, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_tril_triu_with_offsets(lib, shape, dtype):
    x = (randn(shape) * 10).astype(dtype)
    lower, upper, lower1, upper_m2 = lib["triangles"](x)
    expected = (np.tril(x), np.triu(x), np.tril(x, 1), np.triu(x, -2))
    for got, want in zip((lower, upper, lower1, upper_m2), expected):
        assert_close(got, want, rtol=0, atol=0)


def test_tril_of_a_bool_tensor_is_a_causal_mask(compile_composites):
    """np.tril on bool keeps False above the diagonal; the fill literal 0 took dtype bool and
    was refused ('the number 0 cannot take dtype bool')."""
    lib = compile_composites(
        """
        [composite.masked]
        inputs = ["s: f32[H, T, T]"]
        outputs = ["y: f32[H, T, T]"]
        body = "y = where(tril(ones([T, T], bool))[None, :, :], s, -inf)"
        """
    )
    s = randn((2, 5, 5))
    want = np.where(np.tril(np.ones((5, 5), bool))[None], s, -np.inf)
    np.testing.assert_array_equal(lib["masked"](s), want)
