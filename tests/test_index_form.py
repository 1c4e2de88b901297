"""Index-form statements (docs/language.md) against numpy: affine accesses, indices as values,
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

[composite.index_arith]
inputs = ["x: f32[N]"]
outputs = ["q: i64[N]", "r: i64[N]", "s: i64[N]", "t: i64[N]", "y: f32[N]"]
body = """
q[i] = (i - 5) // 3
r[i] = (i - 5) % 3
s[i] = (N - 10 - i) // -4
t[i] = (N - 10 - i) % -4
y[i] = where(i % 2 == 0, x[i], -x[i]) * cast(i - 2, f32)
"""

[composite.outer_reduction]
inputs = ["x: f32[M, N]", "s: f32[N, N]"]
outputs = ["c: f32[N]", "d: f32[N]"]
body = """
c[j] = sum[i](x[i, j])
d[i] = s[i, i] * 2.0
"""

[composite.guards]
inputs = ["x: f32[N]"]
outputs = ["a: f32[N]", "b: f32[N]", "c: f32[N]", "d: f32[N]", "e: f32[2*N]", "f: f32[N]"]
body = """
a[i] = where((i < 1) | (i > N - 2), 0.0, x[i - 1] + x[i + 1])
b[i] = where(~(i >= 1), 0.0, x[i - 1])
c[i] = where(i >= 1, where(i + 1 < N, x[i - 1] + x[i + 1], x[i - 1]), x[i])
d[i] = where(i < N - 1, x[i + 1], 0)
e[i] = where(i % 2 == 0, x[i // 2], 0.0)
f[i] = where(x[i] > 0.0, x[i], 0.0) + where((i >= 2) & (x[i] < 0.0), x[i - 2], 0.0)
"""

[composite.aligned]
inputs = ["x: f32[M, N]", "w: f32[N, K]", "b: f32[K]"]
outputs = ["y: f32[M, K]", "s: f32[M]", "e: f32[M, N]"]
where = ["N % 16 == 0", "K % 8 == 0"]
body = """
y = relu(x @ w + b)
s = max(x, axis=1) + sum(x, axis=-1)
e = exp(x - max(x, axis=-1, keepdims=True))
"""

[composite.derive_chain]
inputs = ["x: f32[N, M]", "w: f32[H]"]
outputs = ["y: f32[G]", "z: f32[N, M]", "n: i64"]
where = ["H = 4*M", "G = H + 1"]
body = """
y = concat([w, zeros([1], f32)], 0) + cast(G, f32)
z = x / cast(N * M, f32)
n = N * M - H
"""

[composite.stencil_on_intermediate]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = """
t = exp(x) * 2.0
y[i] = where(i >= 1, t[i - 1], 0.0) + t[i] + where(i + 1 < N, t[i + 1], 0.0)
"""

[composite.two_consumers]
inputs = ["x: f32[M, N]"]
outputs = ["a: f32[M, N]", "b: f32[N, M]", "c: f32[N]"]
body = """
t = tanh(x) + 1.0
a = t * 2.0
b = t.T - 1.0
c = sum(t, axis=0)
"""

[composite.red_of_red]
inputs = ["x: f32[A, B, C]"]
outputs = ["y: f32[A]", "z: f32[A, B]"]
where = ["C >= 1"]
body = """
m = max(x, axis=2)
y = sum(m - mean(m, axis=1, keepdims=True), axis=1)
z = m / sum(exp(x), axis=-1)
"""

[composite.gather_like]
inputs = ["x: f32[N, N]"]
outputs = ["d: f32[N]", "u: f32[N, N]"]
body = """
t = x + x.T
d[i] = t[i, i]
u[i, j] = where(j >= i, t[i, j], t[j, i])
"""

[composite.matmul_chain]
inputs = ["a: f32[M, K]", "b: f32[K, N]", "c: f32[N, P]"]
outputs = ["y: f32[M, P]", "z: f32[P, M]"]
body = """
t = relu(a @ b)
y = t @ c
z = (t @ c).T * 2.0
"""

[composite.broadcast_reduce]
inputs = ["x: f32[M, 1]", "y: f32[N]"]
outputs = ["s: f32[M]", "t: f32[N]"]
body = """
p = x * y
s = sum(p, axis=1)
t = max(p, axis=0)
"""

[composite.index_array_index]
inputs = ["x: f32[M, N]"]
outputs = ["y: f32[M]"]
where = ["N >= 1"]
body = """
s[i, j] = x[i, j] * cast(j + 1, f32)
e = exp(s - max(s, axis=1, keepdims=True))
y[i] = sum[j](e[i, j] * x[i, j]) / sum[j](e[i, j])
"""

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


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_index_arithmetic_floor_semantics(lib, n):
    """Index and symbol values are i64 with floor // and %, also when negative."""
    x = randn(n)
    q, r, s, t, y = lib["index_arith"](x)
    i = np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(q, (i - 5) // 3)
    np.testing.assert_array_equal(r, (i - 5) % 3)
    np.testing.assert_array_equal(s, (n - 10 - i) // -4)
    np.testing.assert_array_equal(t, (n - 10 - i) % -4)
    assert_close(y, np.where(i % 2 == 0, x, -x) * (i - 2).astype(np.float32), **EXACT)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (37, 5), (0, 3)])
def test_reduction_over_outer_index_and_diagonal(lib, mn):
    m, n = mn
    x, s = randn(mn), randn((n, n), seed=1)
    c, d = lib["outer_reduction"](x, s)
    assert_close(c, x.astype(np.float64).sum(axis=0), **F32)
    assert_close(d, np.diag(s) * np.float32(2), **EXACT)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 13, 37])
def test_guard_conditions(lib, n):
    """Guards with | ~ nested where, symbols, modulo, and data-dependent conditions."""
    x = randn(n)
    a, b, c, d, e, f = lib["guards"](x)
    i = np.arange(n)
    xm1 = np.concatenate([[0.0], x[:-1]])[:n].astype(np.float32)  # x[i - 1]
    xp1 = np.concatenate([x[1:], [0.0]])[:n].astype(np.float32)  # x[i + 1]
    xm2 = np.concatenate([[0.0, 0.0], x[:-2]])[:n].astype(np.float32)
    assert_close(a, np.where((i < 1) | (i > n - 2), 0.0, xm1 + xp1), **EXACT)
    assert_close(b, np.where(i >= 1, xm1, 0.0), **EXACT)
    assert_close(c, np.where(i >= 1, np.where(i + 1 < n, xm1 + xp1, xm1), x), **EXACT)
    assert_close(d, np.where(i < n - 1, xp1, 0.0), **EXACT)
    e_expected = np.zeros(2 * n, np.float32)
    e_expected[0::2] = x
    assert_close(e, e_expected, **EXACT)
    expected_f = np.where(x > 0, x, 0) + np.where((i >= 2) & (x < 0), xm2, 0)
    assert_close(f, expected_f, **EXACT)


EQUALITY_GUARDS = """
[composite.eq_guards]
inputs = ["x: f32[N]"]
outputs = ["a: f32[N]", "b: f32[N]"]
body = '''
a[i] = where(i == 0, 0.0, x[i - 1])
b[i] = where(i != 0, x[i - 1], 0.0)
'''
"""


def test_guard_with_equality(compile_composites):
    """The false branch of i == 0 (and the true one of i != 0), with 0 <= i, proves i >= 1."""
    lib = compile_composites(EQUALITY_GUARDS)
    for n in (0, 1, 7, 13):
        x = randn(n)
        a, b = lib["eq_guards"](x)
        expected = np.concatenate([[0.0], x[:-1]])[:n]
        assert_close(a, expected, **EXACT)
        assert_close(b, expected, **EXACT)


@pytest.mark.parametrize("mnk", [(1, 16, 8), (7, 32, 24), (3, 48, 8), (13, 16, 40), (2, 0, 0)])
def test_alignment_constraints_used_as_facts(lib, mnk):
    """With N % 16 == 0 and K % 8 == 0 the compiler may drop remainder loops: still exact."""
    m, n, k = mnk
    x, w, b = randn((m, n)), randn((n, k), seed=1), randn(k, seed=2)
    y, s, e = lib["aligned"](x, w, b)
    x64 = x.astype(np.float64)
    assert_close(y, np.maximum(x64 @ w.astype(np.float64) + b, 0), rtol=1e-5, atol=1e-4)
    if n:
        assert_close(s, x64.max(axis=1) + x64.sum(axis=-1), rtol=1e-5, atol=1e-4)
        assert_close(e, np.exp(x64 - x64.max(axis=-1, keepdims=True)), **F32)
    with pytest.raises(CatencStatusError):
        lib["aligned"](randn((m, n + 1)), randn((n + 1, k)), b)


@pytest.mark.parametrize("nm", [(1, 1), (7, 13), (13, 1), (2, 37), (0, 3)])
def test_derivation_chain_and_symbol_values(lib, nm):
    n, m = nm
    x, w = randn(nm), randn(4 * m, seed=1)
    y, z, c = lib["derive_chain"](x, w)
    assert_close(y, np.concatenate([w, np.zeros(1, np.float32)]) + np.float32(4 * m + 1), **EXACT)
    assert_close(z, x / np.float32(n * m) if n * m else x, **EXACT)
    assert int(c) == n * m - 4 * m


# ------------------------------------------------- producers fused into consumers (O2)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13, 37])
def test_stencil_on_intermediate(lib, n):
    x = randn(n)
    t = np.exp(x.astype(np.float64)) * 2
    p = np.pad(t, 1)
    assert_close(lib["stencil_on_intermediate"](x), p[:-2] + p[1:-1] + p[2:], **F32)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (3, 37), (0, 2)])
def test_intermediate_with_two_consumers(lib, mn):
    x = randn(mn)
    a, b, c = lib["two_consumers"](x)
    t = np.tanh(x.astype(np.float64)) + 1
    assert_close(a, t * 2, **F32)
    assert_close(b, t.T - 1, **F32)
    assert_close(c, t.sum(axis=0), **F32)


@pytest.mark.parametrize("abc", [(1, 1, 1), (2, 7, 13), (3, 13, 1), (2, 1, 37), (0, 2, 2)])
def test_reduction_of_reduction(lib, abc):
    x = randn(abc)
    y, z = lib["red_of_red"](x)
    x64 = x.astype(np.float64)
    m = x64.max(axis=2)
    assert_close(y, (m - m.mean(axis=1, keepdims=True)).sum(axis=1), **F32)
    assert_close(z, m / np.exp(x64).sum(axis=-1), **F32)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_diagonal_and_symmetric_reads(lib, n):
    x = randn((n, n))
    d, u = lib["gather_like"](x)
    t = x + x.T
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert_close(d, np.diag(t), **EXACT)
    assert_close(u, np.where(j >= i, t, t.T), **EXACT)


@pytest.mark.parametrize("mknp", [(1, 1, 1, 1), (7, 13, 37, 5), (13, 5, 1, 7), (2, 0, 3, 4)])
def test_matmul_chain(lib, mknp):
    m, k, n, p = mknp
    a, b, c = randn((m, k)), randn((k, n), seed=1), randn((n, p), seed=2)
    y, z = lib["matmul_chain"](a, b, c)
    t = np.maximum(a.astype(np.float64) @ b, 0) @ c
    assert_close(y, t, rtol=1e-4, atol=1e-4)
    assert_close(z, t.T * 2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (3, 37)])
def test_broadcast_then_reduce(lib, mn):
    m, n = mn
    x, y = randn((m, 1)), randn(n, seed=1)
    s, t = lib["broadcast_reduce"](x, y)
    p = x * y
    assert_close(s, p.astype(np.float64).sum(axis=1), **F32)
    assert_close(t, p.max(axis=0), **EXACT)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (3, 37), (0, 4)])
def test_index_array_index(lib, mn):
    x = randn(mn)
    x64 = x.astype(np.float64)
    s = x64 * (np.arange(mn[1]) + 1)
    e = np.exp(s - s.max(axis=1, keepdims=True)) if mn[0] else s
    assert_close(lib["index_array_index"](x), (e * x64).sum(axis=1) / e.sum(axis=1), **F32)


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
