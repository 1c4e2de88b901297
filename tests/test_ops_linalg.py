"""The linear-algebra ops of the op library (ops/linalg.toml), called from wrapper composites
with concrete shapes, against numpy computed here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randint, randn

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "i64": np.int64}
TOL = {
    "f32": dict(rtol=1e-5, atol=2e-5),
    "f64": dict(rtol=1e-12, atol=1e-12),
    "f16": dict(rtol=1e-3, atol=1e-3),
    "i32": {},
    "i64": {},
}


def _per_dtype(dt: str) -> str:
    return f'''
[composite.t_matmul_{dt}]
inputs = ["a: {dt}[M, K]", "b: {dt}[K, N]"]
outputs = ["y: {dt}[M, N]", "z: {dt}[M, N]"]
body = """
y = matmul(a, b)
z = mm(a, b)
"""

[composite.t_bmm_{dt}]
inputs = ["a: {dt}[B, M, K]", "b: {dt}[B, K, N]"]
outputs = ["y: {dt}[B, M, N]", "z: {dt}[B, M, N]"]
body = """
y = bmm(a, b)
z = matmul(a, b)
"""

[composite.t_vec_{dt}]
inputs = ["a: {dt}[M, N]", "u: {dt}[M]", "v: {dt}[N]"]
outputs = ["outer: {dt}[M, N]", "dot: {dt}", "mv: {dt}[M]"]
body = """
outer = outer(u, v)
dot = dot(v, v)
mv = mv(a, v)
"""
'''


SOURCE = (
    "".join(_per_dtype(dt) for dt in ("f32", "f64", "f16", "i32", "i64"))
    + '''
[composite.t_matmul_broadcast]
inputs = ["a: f32[B, M, K]", "b: f32[K, N]", "c: f16[A, B, M, K]", "d: f16[B, K, N]"]
outputs = ["y: f32[B, M, N]", "z: f16[A, B, M, N]"]
body = """
y = matmul(a, b)
z = matmul(c, d)
"""

[composite.t_linear_f32]
inputs = ["x: f32[B, T, I]", "w: f32[O, I]", "b: f32[O]"]
outputs = ["y: f32[B, T, O]", "z: f32[B, T, O]"]
body = """
y = linear(x, w, b)
z = linear_nobias(x, w)
"""

[composite.t_linear_f16]
inputs = ["x: f16[I]", "w: f16[O, I]", "b: f16[O]"]
outputs = ["y: f16[O]", "z: f16[O]"]
body = """
y = linear(x, w, b)
z = linear_nobias(x, w)
"""

[composite.t_gemm_f64]
inputs = ["a: f64[M, K]", "b: f64[K, N]", "at: f64[K, M]", "bt: f64[N, K]", "c: f64[M, N]"]
outputs = ["nn: f64[M, N]", "nt: f64[M, N]", "tn: f64[M, N]", "tt: f64[M, N]", "plain: f64[M, N]"]
body = """
nn = gemm(a, b, c, alpha=0.5, beta=-2.0)
nt = gemm_nt(a, bt, c, alpha=1.5)
tn = gemm_tn(at, b, c, beta=0.0)
tt = gemm_tt(at, bt, c, alpha=-1.0, beta=3.0)
plain = gemm(a, b, c)
"""

[composite.t_gemm_f32]
inputs = ["a: f32[M, K]", "bt: f32[N, K]", "c: f32[M, N]"]
outputs = ["y: f32[M, N]"]
body = "y = gemm_nt(a, bt, c, alpha=2.0, beta=0.5)"
'''
)

SIZES = [(1, 1, 1), (7, 13, 1), (1, 37, 11), (13, 7, 37)]  # (M, K, N)


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def _rand(shape, dt, seed):
    if dt in ("i32", "i64"):
        return randint(shape, -100, 100, NP[dt], seed=seed)
    return randn(shape, NP[dt], seed=seed)


def _f64(a):
    return np.asarray(a).astype(np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a).astype(np.int64)


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "i32", "i64"])
@pytest.mark.parametrize("m,k,n", SIZES)
def test_matmul_and_mm(lib, dt, m, k, n):
    a, b = _rand((m, k), dt, 1), _rand((k, n), dt, 2)
    y, z = lib[f"t_matmul_{dt}"](a, b)
    want = _f64(a) @ _f64(b)
    assert_close(y, want, dtype=NP[dt], **TOL[dt])
    assert_close(z, want, dtype=NP[dt], **TOL[dt])


@pytest.mark.parametrize("dt", ["f32", "f16", "i64"])
@pytest.mark.parametrize("bsz,m,k,n", [(1, 1, 1, 1), (3, 7, 13, 5), (2, 1, 37, 11)])
def test_bmm(lib, dt, bsz, m, k, n):
    a, b = _rand((bsz, m, k), dt, 3), _rand((bsz, k, n), dt, 4)
    y, z = lib[f"t_bmm_{dt}"](a, b)
    want = np.einsum("bik,bkj->bij", _f64(a), _f64(b))
    assert_close(y, want, dtype=NP[dt], **TOL[dt])
    assert_close(z, want, dtype=NP[dt], **TOL[dt])


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "i32"])
@pytest.mark.parametrize("m,n", [(1, 1), (7, 13), (37, 3)])
def test_outer_dot_mv(lib, dt, m, n):
    a, u, v = _rand((m, n), dt, 5), _rand((m,), dt, 6), _rand((n,), dt, 7)
    outer, dot, mv = lib[f"t_vec_{dt}"](a, u, v)
    assert_close(outer, np.outer(_f64(u), _f64(v)), dtype=NP[dt], **TOL[dt])
    assert_close(dot, np.dot(_f64(v), _f64(v)), dtype=NP[dt], **TOL[dt])
    assert_close(mv, _f64(a) @ _f64(v), dtype=NP[dt], **TOL[dt])


@pytest.mark.parametrize("a_,b_,m,k,n", [(1, 1, 1, 1, 1), (2, 3, 7, 13, 5), (3, 1, 11, 2, 17)])
def test_matmul_broadcasts_batch_dims(lib, a_, b_, m, k, n):
    a, b = randn((b_, m, k), seed=1), randn((k, n), seed=2)
    c, d = randn((a_, b_, m, k), np.float16, seed=3), randn((b_, k, n), np.float16, seed=4)
    y, z = lib["t_matmul_broadcast"](a, b, c, d)
    assert_close(y, np.matmul(_f64(a), _f64(b)), **TOL["f32"])
    assert_close(z, np.matmul(_f64(c), _f64(d)), dtype=np.float16, **TOL["f16"])


@pytest.mark.parametrize("bsz,t,i,o", [(1, 1, 1, 1), (2, 7, 13, 5), (3, 5, 37, 11)])
def test_linear(lib, bsz, t, i, o):
    x, w, b = randn((bsz, t, i), seed=1), randn((o, i), seed=2), randn((o,), seed=3)
    y, z = lib["t_linear_f32"](x, w, b)
    assert_close(y, _f64(x) @ _f64(w).T + _f64(b), **TOL["f32"])
    assert_close(z, _f64(x) @ _f64(w).T, **TOL["f32"])
    xh, wh, bh = x[0, 0].astype(np.float16), w.astype(np.float16), b.astype(np.float16)
    yh, zh = lib["t_linear_f16"](xh, wh, bh)
    assert_close(yh, _f64(wh) @ _f64(xh) + _f64(bh), dtype=np.float16, **TOL["f16"])
    assert_close(zh, _f64(wh) @ _f64(xh), dtype=np.float16, **TOL["f16"])


@pytest.mark.parametrize("m,k,n", SIZES)
def test_gemm_variants(lib, m, k, n):
    a, b, c = randn((m, k), np.float64, 1), randn((k, n), np.float64, 2), randn((m, n), np.float64, 3)
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    nn, nt, tn, tt, plain = lib["t_gemm_f64"](a, b, at, bt, c)
    tol = TOL["f64"]
    assert_close(nn, 0.5 * (a @ b) - 2.0 * c, **tol)
    assert_close(nt, 1.5 * (a @ b) + c, **tol)
    assert_close(tn, a @ b, **tol)
    assert_close(tt, -(a @ b) + 3.0 * c, **tol)
    assert_close(plain, a @ b + c, **tol)
    y = lib["t_gemm_f32"](a.astype(np.float32), bt.astype(np.float32), c.astype(np.float32))
    want = 2.0 * (_f64(a.astype(np.float32)) @ _f64(b.astype(np.float32))) + 0.5 * _f64(c.astype(np.float32))
    assert_close(y, want, **TOL["f32"])
