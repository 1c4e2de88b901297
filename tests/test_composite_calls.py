"""Composite calls (docs/language.md): callees in the same file, includes and -I directories;
multiple outputs, keyword params, inferred symbols and dtype variables, rank-polymorphic
callees (`x: T[..., N]`) called at several ranks, index-form callee bodies with `...`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, compile_text, rng

from catenc.loader import CatencStatusError

F32 = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-12, atol=1e-12)

SOURCE = '''
# ------------------------------------------------------------------ callees

[composite.scale_shift]
inputs = ["x: f32[N]", "s: f32"]
outputs = ["y: f32[N]"]
params = { alpha = 1.0, bias = 0 }
body = "y = x * s * alpha + bias"

[composite.moments]
inputs = ["x: T[M, N]"]
outputs = ["mu: T[M]", "var: T[M]"]
types = { T = ["f32", "f64"] }
body = """
mu = mean(x, axis=1)
d = x - reshape(mu, [M, 1])
var = mean(d * d, axis=1)
"""

[composite.matvec]
inputs = ["a: T[R, C]", "v: T[C]"]
outputs = ["y: T[R]"]
types = { T = ["f32", "f64"] }
body = "y[r] = sum[c](a[r, c] * v[c])"

[composite.axpy]
inputs = ["a: T", "x: T[N]", "y: T[N]"]
outputs = ["z: T[N]"]
types = { T = ["f32", "f64"] }
body = "z = a * x + y"

[composite.twice_axpy]
inputs = ["x: T[N]", "y: T[N]"]
outputs = ["z: T[N]"]
types = { T = ["f32", "f64"] }
body = """
t = axpy(2.0, x, y)
z = axpy(-1.0, t, x)
"""

[composite.first]
inputs = ["x: f32[N]"]
outputs = ["y: f32"]
where = ["N >= 1"]
body = "y = x[0]"

[composite.rowsum]
inputs = ["x: T[..., N]"]
outputs = ["y: T[...]"]
types = { T = ["f32", "f64"] }
body = "y = sum(x, axis=-1)"

[composite.softmax_b]
inputs = ["x: T[..., N]"]
outputs = ["y: T[..., N]"]
types = { T = ["f32", "f64"] }
body = """
e = exp(x - max(x, axis=-1, keepdims=True))
y = e / sum(e, axis=-1, keepdims=True)
"""

[composite.scale_ix]
inputs = ["x: T[..., N]", "w: T[N]"]
outputs = ["y: T[..., N]"]
types = { T = ["f32", "f64"] }
body = "y[..., i] = x[..., i] * w[i] + 1.0"

[composite.rowmax_ix]
inputs = ["x: T[..., N]"]
outputs = ["y: T[...]"]
types = { T = ["f32", "f64"] }
body = "y[...] = max[k](x[..., k]) - min[k](x[..., k])"

[composite.rev_ix]
inputs = ["x: T[..., N]"]
outputs = ["y: T[..., N]"]
types = { T = ["f32", "f64"] }
body = "y[..., i] = x[..., N - 1 - i] - x[..., i]"

[composite.add_b]
inputs = ["x: T[..., N]", "y: T[..., N]"]
outputs = ["z: T[..., N]"]
types = { T = ["f32", "f64"] }
body = "z = x * 2.0 + y"

[composite.expand4]
inputs = ["x: f32[N]"]
outputs = ["y: f32[H]"]
where = ["H = 4*N"]
params = { flag = true }
body = "y = where(flag, concat([x, x, x, x], 0), 0.0)"

[composite.call_broadcast]
inputs = ["x: f32[B, M, N]", "y: f32[N]", "w: f32[M, N]", "xd: f64[N]", "yd: f64[N]"]
outputs = ["a: f32[B, M, N]", "b: f32[B, M, N]", "c: f32[4*N]", "d: f32[4*N]", "e: f32[N]", "f: f64[N]"]
body = """
a = add_b(x, y)
b = add_b(x, w)
c = expand4(y)
d = expand4(y, flag=False)
e = axpy(2.0, y, y)
f = axpy(2.0, xd, yd)
"""

[composite.call_views]
inputs = ["x: f32[M, N]"]
outputs = ["a: f32[N, M]", "b: f32[M, N]"]
where = ["M >= 1"]
body = """
a = add_b(x.T, x[::-1].T)
b = add_b(x[:, ::-1], expand(x[0:1], [M, N]))
"""

# ------------------------------------------------------------------ callers

[composite.call_kw]
inputs = ["x: f32[N]"]
outputs = ["a: f32[N]", "b: f32[N]", "c: f32[N]"]
body = """
a = scale_shift(x, 3.0)
b = scale_shift(x, 0.5, alpha=2.0)
c = scale_shift(x, -1.0, alpha=0.25, bias=4)
"""

[composite.call_multi]
inputs = ["x: f32[A, B]"]
outputs = ["mu: f32[A]", "var: f32[A]", "z: f32[A, B]"]
body = """
mu, var = moments(x)
z = (x - reshape(mu, [A, 1])) * reshape(rsqrt(var + 1e-5), [A, 1])
"""

[composite.call_multi_f64]
inputs = ["x: f64[A, B]"]
outputs = ["mu: f64[A]", "var: f64[A]"]
body = "mu, var = moments(x)"

[composite.call_inferred]
inputs = ["x: f32[M, K]", "v: f32[K]"]
outputs = ["y: f32[M]", "z: f32[M-1]", "w: f32[K]"]
where = ["M >= 1"]
body = """
y = matvec(x, v)
z = matvec(x[1:], v)
w = matvec(x.T, y)
"""

[composite.call_dtype_f32]
inputs = ["x: f32[N]", "y: f32[N]"]
outputs = ["z: f32[N]"]
body = "z = twice_axpy(x, y)"

[composite.call_dtype_f64]
inputs = ["x: f64[N]", "y: f64[N]"]
outputs = ["z: f64[N]", "w: f64[N]"]
body = """
z = twice_axpy(x, y)
w = axpy(0.1, x, z)
"""

[composite.call_runtime_check]
inputs = ["x: f32[N]"]
outputs = ["y: f32"]
body = "y = first(x) * 2.0"

[composite.poly_r1]
inputs = ["x: f32[N]", "w: f32[N]"]
outputs = ["s: f32", "p: f32[N]", "q: f32[N]", "r: f32[N]", "m: f32"]
body = """
m = rowmax_ix(x)
s = rowsum(x)
p = softmax_b(x)
q = scale_ix(x, w)
r = rev_ix(x)
"""

[composite.poly_r2]
inputs = ["x: f32[M, N]", "w: f32[N]"]
outputs = ["s: f32[M]", "p: f32[M, N]", "q: f32[M, N]", "r: f32[M, N]", "m: f32[M]"]
body = """
m = rowmax_ix(x)
s = rowsum(x)
p = softmax_b(x)
q = scale_ix(x, w)
r = rev_ix(x)
"""

[composite.poly_r3]
inputs = ["x: f64[B, M, N]", "w: f64[N]"]
outputs = ["s: f64[B, M]", "p: f64[B, M, N]", "q: f64[B, M, N]", "r: f64[B, M, N]", "m: f64[B, M]"]
body = """
m = rowmax_ix(x)
s = rowsum(x)
p = softmax_b(x)
q = scale_ix(x, w)
r = rev_ix(x)
"""

[composite.poly_chain]
inputs = ["x: f32[B, M, N]", "w: f32[N]"]
outputs = ["y: f32[B, M]"]
body = "y = rowsum(softmax_b(scale_ix(x, w)) * 3.0)"
'''


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="calls", opt=request.param)


def randn(shape, dtype=np.float32, seed=0):
    return rng(seed).standard_normal(shape).astype(dtype)


def test_callees_are_entries_but_batched_ones_are_not(lib):
    assert "scale_shift" in lib and "moments" in lib and "poly_r3" in lib
    for batched in ("rowsum", "softmax_b", "scale_ix", "rev_ix"):
        assert batched not in lib


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_keyword_params(lib, n):
    x = randn(n)
    a, b, c = lib["call_kw"](x)
    f = np.float32
    assert_close(a, x * f(3) * f(1) + f(0), **F32)
    assert_close(b, x * f(0.5) * f(2), **F32)
    assert_close(c, x * f(-1) * f(0.25) + f(4), **F32)


@pytest.mark.parametrize("ab", [(1, 1), (7, 13), (13, 1), (3, 37), (0, 4)])
def test_multiple_outputs(lib, ab):
    x = randn(ab)
    mu, var, z = lib["call_multi"](x)
    x64 = x.astype(np.float64)
    assert_close(mu, x64.mean(axis=1), **F32)
    assert_close(var, x64.var(axis=1), **F32)
    expected = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    assert_close(z, expected, rtol=1e-4, atol=1e-4)
    x = x64
    mu, var = lib["call_multi_f64"](x)
    assert mu.dtype == np.float64
    assert_close(mu, x.mean(axis=1), **F64)
    assert_close(var, x.var(axis=1), **F64)


@pytest.mark.parametrize("mk", [(1, 1), (7, 13), (13, 1), (2, 37), (3, 0)])
def test_inferred_symbols(lib, mk):
    m, k = mk
    x, v = randn(mk), randn(k, seed=1)
    y, z, w = lib["call_inferred"](x, v)
    x64, v64 = x.astype(np.float64), v.astype(np.float64)
    assert_close(y, x64 @ v64, **F32)
    assert_close(z, x64[1:] @ v64, **F32)
    assert_close(w, x64.T @ y.astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_inferred_dtype_variables(lib, n):
    x, y = randn(n, seed=2), randn(n, seed=3)
    t = np.float32(2) * x + y
    assert_close(lib["call_dtype_f32"](x, y), np.float32(-1) * t + x, **F32)
    x, y = x.astype(np.float64), y.astype(np.float64)
    z, w = lib["call_dtype_f64"](x, y)
    assert z.dtype == np.float64 and w.dtype == np.float64
    zz = -1.0 * (2.0 * x + y) + x
    assert_close(z, zz, **F64)
    assert_close(w, 0.1 * x + zz, **F64)  # 0.1 is a double here


def test_callee_constraint_checked_at_run_time(lib):
    x = randn(5)
    assert_close(lib["call_runtime_check"](x), x[0] * np.float32(2), rtol=0, atol=0)
    with pytest.raises(CatencStatusError) as info:
        lib["call_runtime_check"](randn(0))
    assert info.value.code == "CATENC_E_SHAPE"


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _poly_expected(x, w):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    spread = x64.max(axis=-1) - x64.min(axis=-1)
    return x64.sum(axis=-1), _softmax(x64), x64 * w64 + 1.0, x64[..., ::-1] - x64, spread


@pytest.mark.parametrize("n", [1, 7, 13, 37])
def test_rank_polymorphic_rank1(lib, n):
    x, w = randn(n), randn(n, seed=1)
    got = lib["poly_r1"](x, w)
    assert got[0].shape == ()
    for actual, expected in zip(got, _poly_expected(x, w), strict=True):
        assert_close(actual, expected, **F32)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (3, 37), (0, 5)])
def test_rank_polymorphic_rank2(lib, mn):
    x, w = randn(mn), randn(mn[1], seed=1)
    for actual, expected in zip(lib["poly_r2"](x, w), _poly_expected(x, w), strict=True):
        assert_close(actual, expected, **F32)


@pytest.mark.parametrize("bmn", [(1, 1, 1), (2, 7, 13), (3, 13, 1), (2, 3, 37), (0, 2, 3), (2, 0, 3)])
def test_rank_polymorphic_rank3(lib, bmn):
    x, w = randn(bmn, np.float64), randn(bmn[2], np.float64, seed=1)
    for actual, expected in zip(lib["poly_r3"](x, w), _poly_expected(x, w), strict=True):
        assert actual.dtype == np.float64
        assert_close(actual, expected, **F64)


@pytest.mark.parametrize("bmn", [(1, 1, 1), (2, 7, 13), (3, 13, 1), (2, 3, 37)])
def test_rank_polymorphic_chain(lib, bmn):
    x, w = randn(bmn), randn(bmn[2], seed=1)
    x64 = x.astype(np.float64) * w + 1.0
    expected = (_softmax(x64) * 3.0).sum(axis=-1)
    assert_close(lib["poly_chain"](x, w), expected, **F32)


@pytest.mark.parametrize("bmn", [(1, 1, 1), (2, 7, 13), (3, 13, 1), (2, 3, 37), (0, 2, 3)])
def test_batch_dims_broadcast_between_inputs(lib, bmn):
    """`...` inputs of one call broadcast; one callee at two dtypes in one body; a derived
    output symbol and a bool keyword param in the callee."""
    b, m, n = bmn
    x, y, w = randn(bmn), randn(n, seed=1), randn((m, n), seed=2)
    xd, yd = randn(n, np.float64, seed=3), randn(n, np.float64, seed=4)
    a, bb, c, d, e, f = lib["call_broadcast"](x, y, w, xd, yd)
    two = np.float32(2)
    assert_close(a, x * two + y, rtol=0, atol=0)
    assert_close(bb, x * two + w, rtol=0, atol=0)
    assert_close(c, np.tile(y, 4), rtol=0, atol=0)
    assert_close(d, np.zeros(4 * n, np.float32), rtol=0, atol=0)
    assert_close(e, two * y + y, rtol=0, atol=0)
    assert f.dtype == np.float64
    assert_close(f, 2.0 * xd + yd, rtol=0, atol=0)


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (3, 37)])
def test_views_as_arguments(lib, mn):
    x = randn(mn)
    a, b = lib["call_views"](x)
    two = np.float32(2)
    assert_close(a, x.T * two + x[::-1].T, rtol=0, atol=0)
    assert_close(b, x[:, ::-1] * two + x[0:1], rtol=0, atol=0)


# ---------------------------------------------------------------- includes and -I

INCLUDED = """
include = ["deeper/more.toml"]

[composite.inc_double]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = inc_plus(x, 1.0) * 2.0"
"""

DEEPER = """
[composite.inc_plus]
inputs = ["x: f32[N]", "c: f32"]
outputs = ["y: f32[N]"]
body = "y = x + c"

[composite.inc_norm]
inputs = ["x: T[..., N]"]
outputs = ["y: T[..., N]"]
types = { T = ["f32", "f64"] }
body = "y = x / sqrt(sum(x * x, axis=-1, keepdims=True) + 1e-12)"
"""

IDIR = """
[composite.idir_cube]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
params = { k = 1.0 }
body = "y = x * x * x * k"

[composite.shadowed]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 100.0"
"""

IDIR_OTHER = """
[composite.idir_sub]
inputs = ["x: f32[N]", "y: f32[N]"]
outputs = ["z: f32[N]"]
body = "z = idir_cube(x) - y"
"""

MAIN = """
include = ["inc/first.toml"]

[composite.use_include]
inputs = ["x: f32[M, N]"]
outputs = ["a: f32[N]", "b: f32[M, N]"]
where = ["M >= 1"]
body = '''
a = inc_double(x[0])
b = inc_norm(x)
'''

[composite.use_idir]
inputs = ["x: f32[N]", "y: f32[N]"]
outputs = ["a: f32[N]", "b: f32[N]", "c: f32[N]"]
body = '''
a = idir_cube(x, k=0.5)
b = idir_sub(x, y)
c = shadowed(x)
'''

[composite.shadowed]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 2.0"
"""


@pytest.fixture(scope="module")
def inc_lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("includes")
    idir = root / "idir"
    idir.mkdir()
    (idir / "cube.toml").write_text(IDIR)
    (idir / "other.toml").write_text(IDIR_OTHER)
    (idir / "notes.txt").write_text("not a composite file")
    return compile_text(
        Path(root) / "src",
        MAIN,
        name="main",
        include_dirs=(str(idir),),
        extra_files={"inc/first.toml": INCLUDED, "inc/deeper/more.toml": DEEPER},
    )


def test_included_composites_are_not_entries(inc_lib):
    assert set(inc_lib) == {"use_include", "use_idir", "shadowed"}


@pytest.mark.parametrize("mn", [(1, 1), (7, 13), (13, 1), (2, 37)])
def test_include(inc_lib, mn):
    x = randn(mn)
    a, b = inc_lib["use_include"](x)
    assert_close(a, (x[0] + np.float32(1)) * np.float32(2), rtol=0, atol=0)
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64 * x64).sum(axis=-1, keepdims=True) + 1e-12)
    assert_close(b, expected, **F32)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 37])
def test_include_dirs(inc_lib, n):
    x, y = randn(n), randn(n, seed=1)
    a, b, c = inc_lib["use_idir"](x, y)
    assert_close(a, x * x * x * np.float32(0.5), **F32)
    assert_close(b, x * x * x - y, **F32)
    assert_close(c, x * np.float32(2), rtol=0, atol=0)  # the file's own composite wins
    assert_close(inc_lib["shadowed"](x), x * np.float32(2), rtol=0, atol=0)


def test_gelu_callee_uses_erf(compile_composites):
    """A callee using erf, called at two ranks and both float dtypes."""
    text = """
[composite.gelu_b]
inputs = ["x: T[..., N]"]
outputs = ["y: T[..., N]"]
types = { T = ["f32", "f64"] }
body = "y = x * 0.5 * (1.0 + erf(x * 0.7071067811865476))"

[composite.g1]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = gelu_b(x) - gelu(x)"

[composite.g2]
inputs = ["x: f64[M, N]"]
outputs = ["y: f64[M, N]"]
body = "y = gelu_b(x)"
"""
    lib = compile_composites(text)
    erf = np.vectorize(math.erf)
    for n in (1, 7, 37):
        x = randn(n)
        assert_close(lib["g1"](x), np.zeros(n), rtol=0, atol=1e-6)
        x = randn((3, n), np.float64)
        assert_close(lib["g2"](x), x * 0.5 * (1.0 + erf(x / math.sqrt(2.0))), **F64)


OP_LIBRARY_CALLS = """
[composite.use_ops]
inputs = ["x: f32[M, N]", "g: f32[N]", "b: f32[N]"]
outputs = ["s: f32[M, N]", "l: f32[M, N]", "r: f32[M, N]"]
where = ["N >= 1"]
body = '''
s = softmax(x)
l = layernorm(x, g, b, eps=1e-3)
r = rmsnorm(x, g)
'''

[composite.use_ops3]
inputs = ["x: f64[B, M, N]"]
outputs = ["s: f64[B, M, N]", "t: f64[B, M, N]"]
where = ["N >= 1"]
body = "s = softmax(x); t = log_softmax(x)"
"""


@pytest.mark.parametrize("bmn", [(1, 1, 1), (2, 7, 13), (3, 13, 1), (2, 3, 37)])
def test_bundled_op_library(compile_composites, bmn):
    """Composites the file does not define come from the bundled op library (ops/)."""
    lib = compile_composites(OP_LIBRARY_CALLS)
    b, m, n = bmn
    x, g, bias = randn((m, n)), randn(n, seed=1), randn(n, seed=2)
    s, ln, r = lib["use_ops"](x, g, bias)
    x64 = x.astype(np.float64)
    assert_close(s, _softmax(x64), **F32)
    mu = x64.mean(axis=-1, keepdims=True)
    var = x64.var(axis=-1, keepdims=True)
    assert_close(ln, (x64 - mu) / np.sqrt(var + 1e-3) * g + bias, rtol=1e-4, atol=1e-4)
    rms = np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + 1e-6)
    assert_close(r, x64 / rms * g, rtol=1e-4, atol=1e-4)
    x3 = randn(bmn, np.float64, seed=3)
    s3, t3 = lib["use_ops3"](x3)
    assert_close(s3, _softmax(x3), **F64)
    shifted = x3 - x3.max(axis=-1, keepdims=True)
    assert_close(t3, shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True)), **F64)


def test_callee_arguments_with_fewer_batch_dims_broadcast(compile_composites):
    """All '...' arguments of one call share the broadcast batch (docs/language.md), concat included."""
    lib = compile_composites(
        """
[composite.cc]
inputs = ["a: f32[..., N]", "b: f32[..., K]"]
outputs = ["y: f32[..., N + K]"]
body = "y = concat([a, b], -1)"

[composite.t_cc]
inputs = ["a: f32[B, N]", "b: f32[K]"]
outputs = ["y: f32[B, N + K]"]
body = "y = cc(a, b)"
"""
    )
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(lib["t_cc"](a, b), np.concatenate([a, np.broadcast_to(b, (2, 4))], -1))
