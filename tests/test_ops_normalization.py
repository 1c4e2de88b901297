"""The normalisation ops of the op library (ops/normalization.toml), called from wrapper
composites with concrete shapes, against numpy computed here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randn, uniform

from catenc.loader import CatencStatusError

DIMS = {"f64": "N", "f32": "B, N", "f16": "A, B, N"}
NP_DTYPE = {"f64": np.float64, "f32": np.float32, "f16": np.float16}
SHAPES = {
    "f64": [(1,), (13,), (37,)],
    "f32": [(1, 1), (7, 13), (3, 37)],
    "f16": [(1, 1, 1), (2, 7, 13), (3, 1, 37)],
}
# f16 results go through a few f16 intermediates (the statistics), so a looser tolerance.
TOL = {"f64": dict(rtol=1e-12, atol=1e-12), "f32": dict(rtol=2e-5, atol=2e-5), "f16": dict(rtol=4e-3, atol=4e-3)}


def _wrapper(dt: str) -> str:
    d = DIMS[dt]
    batch = d.rsplit(",", 1)[0] if "," in d else ""
    red = f"{dt}[{batch}]"
    one = f"{dt}[{batch + ', ' if batch else ''}1]"
    return f'''
[composite.t_norm_{dt}]
inputs = ["x: {dt}[{d}]", "g: {dt}[N]", "b: {dt}[N]"]
outputs = ["sm: {dt}[{d}]", "lsm: {dt}[{d}]", "lse: {red}", "l2: {dt}[{d}]", "rms: {dt}[{d}]",
           "ln: {dt}[{d}]", "mu: {one}", "var: {one}"]
where = ["N >= 1"]
body = """
sm = softmax(x)
lsm = log_softmax(x)
lse = logsumexp(x)
l2 = l2_normalize(x)
rms = rmsnorm(x, g)
ln = layernorm(x, g, b)
mu, var = moments(x)
"""
'''


SOURCE = (
    "".join(_wrapper(dt) for dt in DIMS)
    + '''
[composite.t_params]
inputs = ["x: f32[B, N]", "g: f32[N]", "b: f32[N]"]
outputs = ["ln: f32[B, N]", "rms: f32[B, N]"]
body = """
ln = layernorm(x, g, b, eps=0.5)
rms = rmsnorm(x, g, eps=0.25)
"""

[composite.t_batchnorm_f32]
inputs = ["x: f32[N, H, C]", "m: f32[C]", "v: f32[C]", "g: f32[C]", "b: f32[C]"]
outputs = ["y: f32[N, H, C]"]
body = "y = batchnorm(x, m, v, g, b)"

[composite.t_batchnorm_f64]
inputs = ["x: f64[N, C]", "m: f64[C]", "v: f64[C]", "g: f64[C]", "b: f64[C]"]
outputs = ["y: f64[N, C]"]
body = "y = batchnorm(x, m, v, g, b, eps=0.001)"

[composite.t_batchnorm_nchw_f32]
inputs = ["x: f32[N, C, L]", "m: f32[C]", "v: f32[C]", "g: f32[C]", "b: f32[C]"]
outputs = ["y: f32[N, C, L]"]
body = "y = batchnorm_nchw(x, m, v, g, b)"

[composite.t_groupnorm_f32]
inputs = ["x: f32[N, C, L]", "g: f32[C]", "b: f32[C]"]
outputs = ["y: f32[N, C, L]"]
body = "y = groupnorm(x, g, b)"

[composite.t_groupnorm3_f64]
inputs = ["x: f64[N, C, L]", "g: f64[C]", "b: f64[C]"]
outputs = ["y: f64[N, C, L]"]
body = "y = groupnorm(x, g, b, groups=3)"

[composite.t_groupnorm_f16]
inputs = ["x: f16[N, 4, L]", "g: f16[4]", "b: f16[4]"]
outputs = ["y: f16[N, 4, L]"]
body = "y = groupnorm(x, g, b)"
'''
)


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def _layernorm(x, g, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _expected(x, g, b):
    m = x.max(axis=-1, keepdims=True)
    mu = x.mean(axis=-1, keepdims=True)
    return [
        _softmax(x),
        x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True)),
        np.log(np.exp(x - m).sum(axis=-1)) + m[..., 0],
        x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), 1e-12),
        x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * g,
        _layernorm(x, g, b, 1e-5),
        mu,
        ((x - mu) ** 2).mean(axis=-1, keepdims=True),
    ]


NAMES = ("softmax", "log_softmax", "logsumexp", "l2_normalize", "rmsnorm", "layernorm", "mean", "var")


@pytest.mark.parametrize("dtype", list(DIMS))
def test_row_normalizations(lib, dtype):
    np_dtype = NP_DTYPE[dtype]
    for seed, shape in enumerate(SHAPES[dtype]):
        n = shape[-1]
        x = (randn(shape, np.float64, seed=seed) * 2 + 0.5).astype(np_dtype)
        g = randn(n, np.float64, seed=seed + 10).astype(np_dtype)
        b = randn(n, np.float64, seed=seed + 20).astype(np_dtype)
        got = lib[f"t_norm_{dtype}"](x, g, b)
        want = _expected(x.astype(np.float64), g.astype(np.float64), b.astype(np.float64))
        for name, a, e in zip(NAMES, got, want):
            assert_close(a, e, dtype=np_dtype, err_msg=f"{name} {dtype} {shape}", **TOL[dtype])


def test_softmax_large_logits(lib):
    """Subtracting the maximum keeps softmax and logsumexp finite for large logits."""
    x = np.array([[1000.0, 999.0, -1000.0], [-1e4, -1e4 + 1, -1e4 + 2]], dtype=np.float32)
    g, b = np.ones(3, np.float32), np.zeros(3, np.float32)
    sm, lsm, lse, *_ = lib["t_norm_f32"](x, g, b)
    x64 = x.astype(np.float64)
    assert_close(sm, _softmax(x64))
    assert_close(lse, np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1)) + x64.max(-1), rtol=1e-6)
    assert np.all(np.isfinite(lsm[:, :2]))


def test_normalization_params(lib):
    x, g, b = randn((7, 13), seed=1), randn(13, seed=2), randn(13, seed=3)
    ln, rms = lib["t_params"](x, g, b)
    x64 = x.astype(np.float64)
    assert_close(ln, _layernorm(x64, g, b, 0.5), rtol=2e-5, atol=2e-5)
    assert_close(rms, x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 0.25) * g, rtol=2e-5, atol=2e-5)


def _bn(x, m, v, g, b, eps):
    return (x - m) / np.sqrt(v + eps) * g + b


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 7, 13), (3, 5, 37)])
def test_batchnorm(lib, shape):
    n, h, c = shape
    x = randn(shape, seed=1)
    m, g, b = randn(c, seed=2), randn(c, seed=3), randn(c, seed=4)
    v = uniform(c, 0.1, 3.0, seed=5)
    assert_close(lib["t_batchnorm_f32"](x, m, v, g, b), _bn(x.astype(np.float64), m, v, g, b, 1e-5), rtol=2e-5)
    x2 = randn((n * h, c), np.float64, seed=6)
    m2, g2, b2, v2 = (a.astype(np.float64) for a in (m, g, b, v))
    assert_close(lib["t_batchnorm_f64"](x2, m2, v2, g2, b2), _bn(x2, m2, v2, g2, b2, 1e-3), dtype=np.float64)
    # channels first: the statistics broadcast over the last axis
    xc = randn((n, c, h), seed=7)
    col = [a[:, None].astype(np.float64) for a in (m, v, g, b)]
    assert_close(lib["t_batchnorm_nchw_f32"](xc, m, v, g, b), _bn(xc.astype(np.float64), *col, 1e-5), rtol=2e-5)


def _groupnorm(x, g, b, groups, eps=1e-5):
    n, c, length = x.shape
    xg = x.reshape(n, groups, -1)
    mu = xg.mean(axis=-1, keepdims=True)
    var = ((xg - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((xg - mu) / np.sqrt(var + eps)).reshape(n, c, length)
    return y * g[:, None] + b[:, None]


@pytest.mark.parametrize("shape", [(1, 2, 1), (2, 6, 13), (3, 10, 37)])
def test_groupnorm(lib, shape):
    x = randn(shape, seed=1) * 3 + 1
    c = shape[1]
    g, b = randn(c, seed=2), randn(c, seed=3)
    want = _groupnorm(x.astype(np.float64), g.astype(np.float64), b.astype(np.float64), 2)
    assert_close(lib["t_groupnorm_f32"](x, g, b), want, rtol=5e-5, atol=5e-5)


@pytest.mark.parametrize("shape", [(1, 3, 1), (2, 9, 13), (3, 12, 7)])
def test_groupnorm_groups_param(lib, shape):
    x = randn(shape, np.float64, seed=4)
    c = shape[1]
    g, b = randn(c, np.float64, seed=5), randn(c, np.float64, seed=6)
    assert_close(lib["t_groupnorm3_f64"](x, g, b), _groupnorm(x, g, b, 3), dtype=np.float64)


def test_groupnorm_f16(lib):
    x = randn((3, 4, 13), seed=7).astype(np.float16)
    g, b = randn(4, seed=8).astype(np.float16), randn(4, seed=9).astype(np.float16)
    want = _groupnorm(*(a.astype(np.float64) for a in (x, g, b)), 2)
    assert_close(lib["t_groupnorm_f16"](x, g, b), want, dtype=np.float16, rtol=4e-3, atol=4e-3)


def test_groupnorm_channels_not_divisible(lib):
    """C % groups != 0 is a shape error of the entry (CATENC_E_SHAPE)."""
    x = randn((2, 5, 3), seed=1)
    with pytest.raises(CatencStatusError):
        lib["t_groupnorm_f32"](x, randn(5, seed=2), randn(5, seed=3))
