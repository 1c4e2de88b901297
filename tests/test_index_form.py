"""Index-form statements (SPEC section 2) against numpy: affine accesses, indices as values,
guarded accesses, inferred intermediates, symbols/params as values, `where` derivations and
constraints, and symbols fixed at compile time.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, rng

from catenc.loader import CatencStatusError, ShapeError

EXACT = dict(rtol=0, atol=0)
F32 = dict(rtol=1e-5, atol=1e-5)

SOURCE = '''
[composite.shift]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N-1]"]
where = ["N >= 1"]
body = "y[i] = x[i + 1] * 2.0 + x[N - 1 - i]"

[composite.strided]
inputs = ["x: f32[2*N]"]
outputs = ["odd: f32[N]", "even: f32[N]"]
body = """
odd[i] = x[2*i + 1]
even[i] = x[2*i]
"""

[composite.upsample]
inputs = ["x: f32[N]"]
outputs = ["y: f32[2*N]"]
body = "y[i] = x[i // 2]"

[composite.modulo]
inputs = ["x: f32[4, M]", "y: f32[N, M]"]
outputs = ["z: f32[N, M]"]
body = "z[i, j] = y[i, j] + x[i % 4, j]"

[composite.window]
inputs = ["x: f64[N]", "k: f64[3]"]
outputs = ["y: f64[N-2, 3]", "s: f64[N-2]"]
where = ["N >= 2"]
body = """
y[i, r] = x[i + r] * cast(r + 1, f64)
s[i] = sum[r](x[i + r] * k[2 - r] * k[r])
"""

[composite.transpose_ix]
inputs = ["x: f32[M, N]", "a: f32[M]", "b: f32[N]"]
outputs = ["y: f32[N, M]", "o: f32[M, N]"]
body = """
y[j, i] = x[i, j]
o[i, j] = a[i] * b[j]
"""

[composite.index_values]
inputs = ["x: f32[M, N]"]
outputs = ["p: i64[M, N]", "q: f32[M, N]", "r: i64[M]"]
body = """
p[i, j] = i * 10 - j
q[i, j] = x[i, j] * cast(i + j, f32)
r[i] = i * i - 3
"""

[composite.causal_mask]
inputs = ["s: f32[T, T]"]
outputs = ["m: f32[T, T]", "u: f32[T, T]"]
body = """
m[i, j] = where(j <= i, s[i, j], -inf)
u[i, j] = where(j > i, s[i, j], 0.0)
"""

[composite.guarded_pad]
inputs = ["x: f32[N]"]
outputs = ["l: f32[N]", "r: f32[N]", "c: f32[N]"]
body = """
l[i] = where(i >= 1, x[i - 1], 0.0)
r[i] = where(i + 1 < N, x[i + 1], -1.0)
c[i] = where((i >= 1) & (i + 1 <= N - 1), x[i - 1] + x[i + 1], x[i])
"""

[composite.conv1d]
inputs = ["x: f32[C, N]", "w: f32[K, C, 3]"]
outputs = ["y: f32[K, N]"]
body = """
y[k, n] = sum[c, r](where((n + r >= 1) & (n + r <= N), x[c, n + r - 1], 0.0) * w[k, c, r])
"""

[composite.inferred]
inputs = ["a: f32[M, K]", "b: f32[K]"]
outputs = ["y: f32[M]", "z: f32[M, K]"]
body = """
t[i, k] = a[i, k] * b[k]
y[i] = sum[k](t[i, k])
z = t * 2.0 + 1.0
"""

[composite.mixed]
inputs = ["x: f32[M, K]", "w: f32[K, N]", "b: f32[N]"]
outputs = ["y: f32[M, N]"]
body = """
h = x @ w
g[i, j] = h[i, j] + b[j]
y = relu(g) - mean(g, axis=1, keepdims=True)
"""

[composite.symbols_as_values]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]", "z: f32[N]", "c: i64"]
params = { scale = 0.5, k = 3, flag = true }
body = """
y[i] = x[i] * cast(N - i, f32) + scale
z = where(flag, x * k, x) + cast(N, f32)
c = N * k + 1
"""

[composite.derived]
inputs = ["x: f32[N, D]", "w: f32[D, H]"]
outputs = ["y: f32[N, H]", "z: f32[N, D]"]
where = ["H = 4*D"]
body = """
y[n, h] = sum[d](x[n, d] * w[d, h])
z[n, d] = x[n, d] * cast(H, f32) + w[d, 4*d + 3]
"""

[composite.constrained]
inputs = ["x: f32[N, K]"]
outputs = ["y: f32[N, K]"]
where = ["K % 4 == 0", "N <= 100"]
body = "y[n, k] = x[n, k] * 2.0 + cast(K // 4, f32)"

[composite.affine_dims]
inputs = ["x: f32[N, 4*Q]"]
outputs = ["y: f32[N, Q]"]
body = "y[n, q] = x[n, 4*q] + x[n, 4*q + 3]"
'''


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="index_form", opt=request.param)


def randn(shape, dtype=np.float32, seed=0):
    return rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("n", [1, 2, 7, 13, 37])
def test_shift(lib, n):
    x = randn(n)
    assert_close(lib["shift"](x), x[1:] * np.float32(2) + x[::-1][:-1], **EXACT)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_strided(lib, n):
    x = randn(2 * n)
    odd, even = lib["strided"](x)
    assert_close(odd, x[1::2], **EXACT)
    assert_close(even, x[0::2], **EXACT)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_upsample_floordiv(lib, n):
    x = randn(n)
    assert_close(lib["upsample"](x), np.repeat(x, 2), **EXACT)


@pytest.mark.parametrize("nm", [(1, 1), (7, 13), (13, 1), (37, 5), (0, 3)])
def test_modulo_index(lib, nm):
    n, m = nm
    x = randn((4, m))
    y = randn((n, m), seed=1)
    expected = y + x[np.arange(n) % 4]
    assert_close(lib["modulo"](x, y), expected, **EXACT)


@pytest.mark.parametrize("n", [2, 3, 7, 13, 37])
def test_window(lib, n):
    x = randn(n, np.float64)
    k = randn(3, np.float64, seed=1)
    y, s = lib["window"](x, k)
    idx = np.arange(n - 2)[:, None] + np.arange(3)[None, :]
    assert_close(y, x[idx] * np.arange(1, 4), rtol=1e-15, atol=0)
    expected = np.sum(x[idx] * k[::-1] * k, axis=1)
    assert_close(s, expected, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (37, 5), (0, 3)])
def test_transpose_and_outer(lib, mn):
    m, n = mn
    x, a, b = randn(mn), randn(m, seed=1), randn(n, seed=2)
    y, o = lib["transpose_ix"](x, a, b)
    assert_close(y, x.T, **EXACT)
    assert_close(o, np.outer(a, b), **EXACT)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (37, 5), (0, 3)])
def test_indices_as_values(lib, mn):
    m, n = mn
    x = randn(mn)
    p, q, r = lib["index_values"](x)
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    assert_close(p, i * 10 - j, dtype=np.int64)
    assert_close(q, x * (i + j).astype(np.float32), **EXACT)
    assert_close(r, np.arange(m) ** 2 - 3, dtype=np.int64)


@pytest.mark.parametrize("t", [0, 1, 7, 13, 37])
def test_causal_mask(lib, t):
    s = randn((t, t))
    m, u = lib["causal_mask"](s)
    lower = np.tril(np.ones((t, t), bool))
    assert_close(m, np.where(lower, s, -np.inf), **EXACT)
    assert_close(u, np.where(~lower, s, 0.0), **EXACT)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13, 37])
def test_guarded_padding(lib, n):
    x = randn(n)
    left, right, c = lib["guarded_pad"](x)
    assert_close(left, np.concatenate([[0.0], x[:-1]])[:n], **EXACT)
    assert_close(right, np.concatenate([x[1:], [-1.0]])[:n], **EXACT)
    expected = x.copy()
    expected[1:-1] = x[:-2] + x[2:]
    assert_close(c, expected, **EXACT)


@pytest.mark.parametrize("ckn", [(1, 1, 1), (2, 3, 7), (3, 5, 13), (1, 2, 37), (2, 2, 0)])
def test_conv1d_padding(lib, ckn):
    c, k, n = ckn
    x = randn((c, n))
    w = randn((k, c, 3), seed=1)
    xp = np.pad(x.astype(np.float64), [[0, 0], [1, 1]])
    expected = np.zeros((k, n))
    for r in range(3):
        expected += np.einsum("cn,kc->kn", xp[:, r : r + n], w[:, :, r].astype(np.float64))
    assert_close(lib["conv1d"](x, w), expected, **F32)


@pytest.mark.parametrize("mk", [(1, 1), (7, 13), (13, 1), (37, 5), (0, 3), (3, 0)])
def test_inferred_intermediate(lib, mk):
    a = randn(mk)
    b = randn(mk[1], seed=1)
    y, z = lib["inferred"](a, b)
    t = a * b
    assert_close(y, t.astype(np.float64).sum(axis=1), **F32)
    assert_close(z, t * np.float32(2) + np.float32(1), **EXACT)


@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 13, 5), (13, 37, 7), (3, 0, 2)])
def test_mixed_forms(lib, mkn):
    m, k, n = mkn
    x, w, b = randn((m, k)), randn((k, n), seed=1), randn(n, seed=2)
    g = x.astype(np.float64) @ w.astype(np.float64) + b
    expected = np.maximum(g, 0) - g.mean(axis=1, keepdims=True)
    assert_close(lib["mixed"](x, w, b), expected, **F32)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_symbols_and_params_as_values(lib, n):
    x = randn(n)
    y, z, c = lib["symbols_as_values"](x)
    assert_close(y, x * (n - np.arange(n)).astype(np.float32) + np.float32(0.5), **EXACT)
    assert_close(z, x * np.float32(3) + np.float32(n), **EXACT)
    assert c.shape == ()
    assert int(c) == n * 3 + 1


@pytest.mark.parametrize("nd", [(1, 1), (7, 13), (13, 1), (5, 37), (0, 2)])
def test_where_derivation(lib, nd):
    n, d = nd
    x, w = randn((n, d)), randn((d, 4 * d), seed=1)
    y, z = lib["derived"](x, w)
    assert_close(y, x.astype(np.float64) @ w.astype(np.float64), **F32)
    assert_close(z, x * np.float32(4 * d) + w[np.arange(d), 4 * np.arange(d) + 3], **EXACT)
    assert "H" not in lib["derived"].dims
    with pytest.raises(ShapeError):
        lib["derived"](x, randn((d, 4 * d + 1)))


@pytest.mark.parametrize("nk", [(1, 4), (7, 16), (13, 4), (100, 36), (0, 8), (3, 0)])
def test_constraints_hold(lib, nk):
    n, k = nk
    x = randn(nk)
    assert_close(lib["constrained"](x), x * np.float32(2) + np.float32(k // 4), **EXACT)


@pytest.mark.parametrize("nq", [(1, 1), (7, 13), (13, 1), (2, 37), (0, 2), (3, 0)])
def test_affine_declared_dims(lib, nq):
    n, q = nq
    x = randn((n, 4 * q))
    assert_close(lib["affine_dims"](x), x[:, 0::4] + x[:, 3::4], **EXACT)
    assert lib["affine_dims"].bind(x)["Q"] == q


FLOORDIV_BOUND = """
[composite.quarter]
inputs = ["x: f32[N, K]"]
outputs = ["y: f32[N, K // 4]"]
where = ["K % 4 == 0"]
body = "y[n, k] = x[n, 4*k] + x[n, 4*k + 3]"
"""


def test_bounds_proof_through_floordiv(compile_composites):
    """k < K // 4 proves 4*k + 3 < K (and K % 4 == 0 makes it exact)."""
    lib = compile_composites(FLOORDIV_BOUND)
    for n, k in [(1, 4), (7, 16), (3, 0), (2, 36)]:
        x = randn((n, k))
        assert_close(lib["quarter"](x), x[:, 0::4] + x[:, 3::4], **EXACT)


@pytest.mark.parametrize("nk", [(1, 5), (7, 18), (101, 4)])
def test_constraints_fail(lib, nk):
    with pytest.raises(CatencStatusError) as info:
        lib["constrained"](randn(nk))
    assert info.value.status == 1
    assert info.value.code == "CATENC_E_SHAPE"


FIXED = """
[composite.fixed]
inputs = ["x: f32[M, N]", "b: f32[N]"]
outputs = ["y: f32[M, N]", "s: f32[M]"]
params = { alpha = 1.0 }
body = '''
y[i, j] = x[i, j] * alpha + b[j] + cast(N, f32)
s[i] = sum[j](x[i, j])
'''
"""


@pytest.fixture(scope="module")
def fixed_lib(compile_composites):
    return compile_composites(FIXED, name="fixed", defines={"N": 8, "alpha": 2.5})


def test_defined_symbol_leaves_signature(fixed_lib):
    entry = fixed_lib["fixed"]
    assert "N" not in entry.dims
    assert "M" in entry.dims


@pytest.mark.parametrize("m", [0, 1, 7, 13, 37])
def test_defined_symbol_and_param(fixed_lib, m):
    x = randn((m, 8))
    b = randn(8, seed=1)
    y, s = fixed_lib["fixed"](x, b)
    assert_close(y, x * np.float32(2.5) + b + np.float32(8), **F32)
    assert_close(s, x.astype(np.float64).sum(axis=1), **F32)
    with pytest.raises(ShapeError):
        fixed_lib["fixed"](randn((m, 7)), randn(7))
