"""The convolution and pooling ops of the op library (ops/conv.toml), called from wrapper
composites with concrete shapes, against numpy computed here (NCHW).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randn

from catenc.loader import CatencStatusError

NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16}
TOL = {"f32": dict(rtol=1e-5, atol=3e-5), "f64": dict(rtol=1e-12, atol=1e-12), "f16": dict(rtol=1e-3, atol=2e-3)}

# name -> (stride, padding, dilation, groups)
CONV = {"plain": (1, 0, 1, 1), "s2p1": (2, 1, 1, 1), "d2p2": (1, 2, 2, 1), "g2": (2, 1, 2, 2)}


def _conv_wrappers(dt: str) -> str:
    out = []
    for tag, (s, p, d, g) in CONV.items():
        oh = f"(H + {2 * p} - {d}*(R - 1) - 1) // {s} + 1"
        ow = f"(W + {2 * p} - {d}*(S - 1) - 1) // {s} + 1"
        ol = f"(H + {2 * p} - {d}*(R - 1) - 1) // {s} + 1"
        kw = f"stride={s}, padding={p}, dilation={d}, groups={g}"
        out.append(f'''
[composite.t_conv2d_{tag}_{dt}]
inputs = ["x: {dt}[N, C, H, W]", "w: {dt}[K, C // {g}, R, S]", "b: {dt}[K]"]
outputs = ["y: {dt}[N, K, {oh}, {ow}]", "z: {dt}[N, K, {oh}, {ow}]"]
body = """
y = conv2d(x, w, {kw})
z = conv2d_bias(x, w, b, {kw})
"""

[composite.t_conv1d_{tag}_{dt}]
inputs = ["x: {dt}[N, C, H]", "w: {dt}[K, C // {g}, R]"]
outputs = ["y: {dt}[N, K, {ol}]"]
body = "y = conv1d(x, w, {kw})"
''')
    return "".join(out)


SOURCE = (
    _conv_wrappers("f32")
    + _conv_wrappers("f64")
    + '''
[composite.t_conv2d_f16]
inputs = ["x: f16[N, C, H, W]", "w: f16[K, C, R, S]"]
outputs = ["y: f16[N, K, H - R + 1, W - S + 1]"]
body = "y = conv2d(x, w)"

[composite.t_depthwise_f32]
inputs = ["x: f32[N, C, H, W]", "w: f32[C, 1, R, S]"]
outputs = [
    "y: f32[N, C, H - R + 1, W - S + 1]",
    "z: f32[N, C, (H + 4 - 2*(R - 1) - 1) // 2 + 1, (W + 4 - 2*(S - 1) - 1) // 2 + 1]",
]
body = """
y = depthwise_conv2d(x, w)
z = depthwise_conv2d(x, w, stride=2, padding=2, dilation=2)
"""

[composite.t_depthwise_f16]
inputs = ["x: f16[N, C, H, W]", "w: f16[C, 1, R, S]"]
outputs = ["y: f16[N, C, (H + 2 - R) // 2 + 1, (W + 2 - S) // 2 + 1]"]
body = "y = depthwise_conv2d(x, w, stride=2, padding=1)"

[composite.t_convt_f32]
inputs = ["x: f32[N, C, H, W]", "w: f32[C, K, R, S]"]
outputs = [
    "y: f32[N, K, H + R - 1, W + S - 1]",
    "z: f32[N, K, (H - 1)*2 + 2*(R - 1) + 1 - 2, (W - 1)*2 + 2*(S - 1) + 1 - 2]",
]
body = """
y = conv_transpose2d(x, w)
z = conv_transpose2d(x, w, stride=2, padding=1, dilation=2)
"""

[composite.t_pool_f32]
inputs = ["x: f32[N, C, H, W]"]
outputs = [
    "mx: f32[N, C, (H - 2) // 2 + 1, (W - 2) // 2 + 1]",
    "mx3: f32[N, C, (H + 2 - 2*2 - 1) // 2 + 1, (W + 2 - 2*2 - 1) // 2 + 1]",
    "av: f32[N, C, (H - 2) // 2 + 1, (W - 2) // 2 + 1]",
    "av3: f32[N, C, (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1]",
    "av3x: f32[N, C, (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1]",
    "gav: f32[N, C, 1, 1]",
    "gmx: f32[N, C, 1, 1]",
    "up: f32[N, C, 2*H, 2*W]",
    "up3: f32[N, C, 3*H, 3*W]",
]
body = """
mx = max_pool2d(x)
mx3 = max_pool2d(x, kernel=3, stride=2, padding=1, dilation=2)
av = avg_pool2d(x)
av3 = avg_pool2d(x, kernel=3, stride=2, padding=1)
av3x = avg_pool2d(x, kernel=3, stride=2, padding=1, count_include_pad=False)
gav = global_avg_pool2d(x)
gmx = global_max_pool2d(x)
up = upsample_nearest2d(x)
up3 = upsample_nearest2d(x, scale=3)
"""

[composite.t_pool_f16]
inputs = ["x: f16[N, C, H, W]"]
outputs = [
    "mx: f16[N, C, (H + 2 - 3) // 1 + 1, (W + 2 - 3) // 1 + 1]",
    "av: f16[N, C, (H + 2 - 3) // 1 + 1, (W + 2 - 3) // 1 + 1]",
    "gav: f16[N, C, 1, 1]",
]
body = """
mx = max_pool2d(x, kernel=3, stride=1, padding=1)
av = avg_pool2d(x, kernel=3, stride=1, padding=1, count_include_pad=False)
gav = global_avg_pool2d(x)
"""
'''
)


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


# ------------------------------------------------------------------ numpy, by sliding windows


def _windows(x, kernel, stride, padding, dilation, value=0.0):
    """Windows of x padded with value: (N, C, OH, OW, R, S) for rank 4, (N, C, OL, R) for rank 3.

    kernel: an int (the same in every dim) or a tuple of the kernel dims.
    """
    spatial = x.ndim - 2
    kernel = (kernel,) * spatial if isinstance(kernel, int) else tuple(kernel)
    pad = [(0, 0), (0, 0)] + [(padding, padding)] * spatial
    xp = np.pad(x.astype(np.float64), pad, constant_values=value)
    spans = tuple(dilation * (k - 1) + 1 for k in kernel)
    view = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(2, 2 + spatial)))
    view = view[(...,) + (slice(None, None, dilation),) * spatial]  # dilate
    return view[(slice(None), slice(None)) + (slice(None, None, stride),) * spatial]


def np_conv(x, w, stride=1, padding=0, dilation=1, groups=1):
    """Grouped convolution of rank 3 or 4 inputs."""
    k, cg = w.shape[:2]
    kg = k // groups
    win = _windows(x, w.shape[2:], stride, padding, dilation)
    if x.ndim == 3:
        return np.concatenate(
            [
                np.einsum("nclr,kcr->nkl", win[:, g * cg : (g + 1) * cg], w[g * kg : (g + 1) * kg])
                for g in range(groups)
            ],
            axis=1,
        )
    return np.concatenate(
        [
            np.einsum("nchwrs,kcrs->nkhw", win[:, g * cg : (g + 1) * cg], w[g * kg : (g + 1) * kg])
            for g in range(groups)
        ],
        axis=1,
    )


def np_conv_transpose(x, w, stride=1, padding=0, dilation=1):
    """Transposed convolution as a convolution of the zero-stuffed input with the flipped kernel."""
    n, c, h, wd = x.shape
    r, s = w.shape[2:]
    stuffed = np.zeros((n, c, (h - 1) * stride + 1, (wd - 1) * stride + 1))
    stuffed[:, :, ::stride, ::stride] = x
    flipped = np.ascontiguousarray(np.transpose(w, (1, 0, 2, 3))[:, :, ::-1, ::-1])
    pad_h, pad_w = dilation * (r - 1) - padding, dilation * (s - 1) - padding
    padded = np.pad(stuffed, ((0, 0), (0, 0), (pad_h, pad_h), (pad_w, pad_w)))
    return np_conv_rect(padded, flipped, dilation)


def np_conv_rect(x, w, dilation):
    r, s = w.shape[2:]
    out_h = x.shape[2] - dilation * (r - 1)
    out_w = x.shape[3] - dilation * (s - 1)
    y = np.zeros((x.shape[0], w.shape[0], out_h, out_w))
    for i in range(r):
        for j in range(s):
            patch = x[:, :, i * dilation : i * dilation + out_h, j * dilation : j * dilation + out_w]
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
    return y


# ------------------------------------------------------------------ tests

CONV_SIZES = [  # N, C, H, W, K, R, S
    (1, 2, 5, 5, 2, 1, 1),
    (2, 2, 7, 9, 4, 3, 3),
    (1, 4, 11, 13, 6, 3, 2),
    (3, 2, 13, 5, 2, 2, 3),
]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("tag", list(CONV))
@pytest.mark.parametrize("n,c,h,w_,k,r,s", CONV_SIZES)
def test_conv2d_and_conv1d(lib, dt, tag, n, c, h, w_, k, r, s):
    stride, padding, dilation, groups = CONV[tag]
    x = randn((n, c, h, w_), NP[dt], seed=1)
    w = randn((k, c // groups, r, s), NP[dt], seed=2)
    b = randn((k,), NP[dt], seed=3)
    y, z = lib[f"t_conv2d_{tag}_{dt}"](x, w, b)
    want = np_conv(x.astype(np.float64), w.astype(np.float64), stride, padding, dilation, groups)
    assert_close(y, want, dtype=NP[dt], **TOL[dt])
    assert_close(z, want + b.astype(np.float64)[None, :, None, None], dtype=NP[dt], **TOL[dt])
    x1, w1 = x[:, :, :, 0], np.ascontiguousarray(w[:, :, :, 0])
    y1 = lib[f"t_conv1d_{tag}_{dt}"](np.ascontiguousarray(x1), w1)
    want1 = np_conv(x1.astype(np.float64), w1.astype(np.float64), stride, padding, dilation, groups)
    assert_close(y1, want1, dtype=NP[dt], **TOL[dt])


def test_conv2d_f16(lib):
    x, w = randn((2, 3, 7, 5), np.float16, 1), randn((4, 3, 3, 2), np.float16, 2)
    y = lib["t_conv2d_f16"](x, w)
    assert_close(y, np_conv(x.astype(np.float64), w.astype(np.float64)), dtype=np.float16, **TOL["f16"])


def test_conv2d_too_small_input_is_a_shape_error(lib):
    x, w = randn((1, 2, 2, 5), seed=1), randn((2, 2, 3, 3), seed=2)
    with pytest.raises(CatencStatusError) as info:
        lib["t_conv2d_plain_f32"](x, w, randn((2,)))
    assert info.value.code == "CATENC_E_SHAPE"


@pytest.mark.parametrize("n,c,h,w_,r,s", [(1, 1, 3, 3, 1, 1), (2, 3, 7, 11, 3, 3), (1, 5, 13, 9, 3, 2)])
def test_depthwise_conv2d(lib, n, c, h, w_, r, s):
    x, w = randn((n, c, h, w_), seed=1), randn((c, 1, r, s), seed=2)
    y, z = lib["t_depthwise_f32"](x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    assert_close(y, np_conv(x64, w64, groups=c), **TOL["f32"])
    assert_close(z, np_conv(x64, w64, stride=2, padding=2, dilation=2, groups=c), **TOL["f32"])
    xh, wh = x.astype(np.float16), w.astype(np.float16)
    want = np_conv(xh.astype(np.float64), wh.astype(np.float64), stride=2, padding=1, groups=c)
    assert_close(lib["t_depthwise_f16"](xh, wh), want, dtype=np.float16, **TOL["f16"])


@pytest.mark.parametrize("n,c,h,w_,k,r,s", [(1, 1, 1, 2, 1, 2, 2), (2, 3, 5, 7, 4, 3, 2), (1, 2, 7, 3, 3, 2, 3)])
def test_conv_transpose2d(lib, n, c, h, w_, k, r, s):
    x, w = randn((n, c, h, w_), seed=1), randn((c, k, r, s), seed=2)
    y, z = lib["t_convt_f32"](x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    assert_close(y, np_conv_transpose(x64, w64), **TOL["f32"])
    assert_close(z, np_conv_transpose(x64, w64, stride=2, padding=1, dilation=2), **TOL["f32"])


def _np_max_pool(x, k, stride, padding, dilation=1):
    return _windows(x, k, stride, padding, dilation, value=-np.inf).max(axis=(-2, -1))


def _np_avg_pool(x, k, stride, padding, include_pad):
    total = _windows(x, k, stride, padding, 1).sum(axis=(-2, -1))
    if include_pad:
        return total / (k * k)
    count = _windows(np.ones((1, 1) + x.shape[2:]), k, stride, padding, 1).sum(axis=(-2, -1))
    return total / count


@pytest.mark.parametrize("n,c,h,w_", [(1, 1, 3, 3), (2, 3, 7, 5), (1, 2, 13, 11), (3, 1, 5, 37)])
def test_pooling_and_upsampling(lib, n, c, h, w_):
    x = randn((n, c, h, w_), seed=4)
    mx, mx3, av, av3, av3x, gav, gmx, up, up3 = lib["t_pool_f32"](x)
    tol = TOL["f32"]
    assert_close(mx, _np_max_pool(x, 2, 2, 0), rtol=0, atol=0)
    assert_close(mx3, _np_max_pool(x, 3, 2, 1, dilation=2), rtol=0, atol=0)
    assert_close(av, _np_avg_pool(x, 2, 2, 0, True), **tol)
    assert_close(av3, _np_avg_pool(x, 3, 2, 1, True), **tol)
    assert_close(av3x, _np_avg_pool(x, 3, 2, 1, False), **tol)
    assert_close(gav, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), **tol)
    assert_close(gmx, x.max(axis=(2, 3), keepdims=True), rtol=0, atol=0)
    assert_close(up, x.repeat(2, axis=2).repeat(2, axis=3), rtol=0, atol=0)
    assert_close(up3, x.repeat(3, axis=2).repeat(3, axis=3), rtol=0, atol=0)


@pytest.mark.parametrize("n,c,h,w_", [(1, 1, 1, 1), (2, 3, 7, 5)])
def test_pooling_f16(lib, n, c, h, w_):
    x = randn((n, c, h, w_), np.float16, seed=5)
    mx, av, gav = lib["t_pool_f16"](x)
    x64 = x.astype(np.float64)
    assert_close(mx, _np_max_pool(x64, 3, 1, 1), dtype=np.float16, rtol=0, atol=0)
    assert_close(av, _np_avg_pool(x64, 3, 1, 1, False), dtype=np.float16, **TOL["f16"])
    assert_close(gav, x64.mean(axis=(2, 3), keepdims=True), dtype=np.float16, **TOL["f16"])
