"""Ranges declared on the left of an index-form statement (docs/language.md, section 9):
`dw[n, c, oh < OH, ow < OW] = ...` gives an intermediate its shape where an index appears only in
affine subscripts. Checked against numpy (depthwise-separable convolution, strided and dilated,
zero-padded with where-guards, a 1-D full convolution, per-group statistics) and, for the errors,
through `catenc compile` as a user runs it: exact FILE:LINE:COL, message and note.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, rng
from numpy.lib.stride_tricks import sliding_window_view

F32 = dict(rtol=1e-5, atol=1e-5)

SOURCE = '''
[composite.dws]
inputs = ["x: f32[N, C, H, W]", "wd: f32[C, KH, KW]", "wp: f32[O, C]"]
outputs = ["y: f32[N, O, OH, OW]"]
where = ["H >= KH", "W >= KW", "OH = H - KH + 1", "OW = W - KW + 1"]
body = """
dw[n, c < C, oh < OH, ow < OW] = sum[r, s](x[n, c, oh + r, ow + s] * wd[c, r, s])
y[n, o, oh, ow] = sum[c](dw[n, c, oh, ow] * wp[o, c])
"""

[composite.dws_inline]
inputs = ["x: f32[N, C, H, W]", "wd: f32[C, KH, KW]", "wp: f32[O, C]"]
outputs = ["y: f32[N, O, H - KH + 1, W - KW + 1]"]
where = ["H >= KH", "W >= KW"]
body = """
dw[n, c, oh < H - KH + 1, ow < W - KW + 1] = sum[r, s](x[n, c, oh + r, ow + s] * wd[c, r, s])
y[n, o, oh < H - KH + 1, ow] = sum[c](dw[n, c, oh, ow] * wp[o, c])
"""

[composite.dws_strided]
inputs = ["x: f32[N, C, H, W]", "wd: f32[C, KH, KW]", "wp: f32[O, C]"]
outputs = ["y: f32[N, O, OH, OW]"]
params = { stride = 2, dilation = 3 }
where = [
    "H >= dilation*(KH - 1) + 1",
    "W >= dilation*(KW - 1) + 1",
    "OH = (H - dilation*(KH - 1) - 1) // stride + 1",
    "OW = (W - dilation*(KW - 1) - 1) // stride + 1",
    "OH >= 0",
    "OW >= 0",
]
body = """
dw[n, c, oh < OH, ow < OW] = sum[r, s](x[n, c, oh*stride + r*dilation, ow*stride + s*dilation] * wd[c, r, s])
y[n, o, oh, ow] = sum[c](dw[n, c, oh, ow] * wp[o, c])
"""

[composite.dws_padded]
inputs = ["x: f32[N, C, H, W]", "wd: f32[C, KH, KW]", "wp: f32[O, C]"]
outputs = ["y: f32[N, O, H + 2*P - KH + 1, W + 2*P - KW + 1]"]
params = { P = 1 }
where = ["H + 2*P >= KH", "W + 2*P >= KW"]
body = """
dw[n, c, oh < H + 2*P - KH + 1, ow < W + 2*P - KW + 1] = sum[r, s](
    where((oh + r >= P) & (oh + r < H + P) & (ow + s >= P) & (ow + s < W + P),
          x[n, c, oh + r - P, ow + s - P], 0.0) * wd[c, r, s])
y[n, o, oh, ow] = sum[c](dw[n, c, oh, ow] * wp[o, c])
"""

[composite.full_diff]
inputs = ["x: f64[N]", "w: f64[K]"]
outputs = ["d: f64[N + K - 2]"]
where = ["N + K >= 2"]
body = """
full[i < N + K - 1] = sum[k](where((i - k >= 0) & (i - k < N), x[i - k], 0.0) * w[k])
d[i] = full[i + 1] - full[N + K - 2 - i]
"""

[composite.group_stats]
inputs = ["x: f64[N, C, L]"]
outputs = ["mu: f64[N, G]", "centred: f64[N, C, L]"]
params = { G = 3 }
where = ["C % G == 0", "D = C // G"]
body = """
mu[n, g < G] = mean[d < D, l](x[n, g * D + d, l])
mu_c[n, c < C] = sum[g < G](where(c // D == g, mu[n, g], 0.0))
centred[n, c, l] = x[n, c, l] - mu_c[n, c]
"""
'''


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="declared_ranges", opt=request.param)


def randn(shape, seed=0, dtype=np.float32):
    return rng(seed).standard_normal(shape).astype(dtype)


def depthwise_separable(x, wd, wp, stride=1, dilation=1, padding=0):
    """numpy: a depthwise convolution (no flip), then a 1x1 convolution across channels."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    _, kh, kw = wd.shape
    span = (dilation * (kh - 1) + 1, dilation * (kw - 1) + 1)
    windows = sliding_window_view(x, span, axis=(2, 3))[:, :, ::stride, ::stride, ::dilation, ::dilation]
    dw = np.einsum("ncijrs,crs->ncij", windows, wd.astype(np.float64))
    return np.einsum("ncij,oc->noij", dw, wp.astype(np.float64))


# (N, C, H, W, KH, KW, O)
SHAPES = [(1, 1, 3, 3, 3, 3, 1), (2, 3, 9, 7, 3, 2, 5), (2, 16, 13, 11, 3, 3, 8)]


def inputs(n, c, h, w, kh, kw, o):
    return randn((n, c, h, w)), randn((c, kh, kw), 1), randn((o, c), 2)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("entry", ["dws", "dws_inline"])
def test_depthwise_separable(lib, entry, shape):
    x, wd, wp = inputs(*shape)
    assert_close(lib[entry](x, wd, wp), depthwise_separable(x, wd, wp), **F32)


@pytest.mark.parametrize("shape", [(1, 2, 7, 7, 3, 3, 3), (2, 3, 12, 15, 3, 2, 4), (1, 4, 20, 9, 2, 3, 2)])
def test_strided_dilated(lib, shape):
    x, wd, wp = inputs(*shape)
    y = lib["dws_strided"](x, wd, wp)
    assert_close(y, depthwise_separable(x, wd, wp, stride=2, dilation=3), **F32)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 3, 3, 1), (2, 3, 9, 7, 3, 2, 5), (1, 5, 6, 8, 1, 3, 2)])
def test_padded_by_guards(lib, shape):
    x, wd, wp = inputs(*shape)
    assert_close(lib["dws_padded"](x, wd, wp), depthwise_separable(x, wd, wp, padding=1), **F32)


@pytest.mark.parametrize("nk", [(1, 1), (1, 2), (7, 3), (13, 13), (37, 5)])
def test_full_convolution(lib, nk):
    x, w = randn(nk[0], 0, np.float64), randn(nk[1], 1, np.float64)
    full = np.convolve(x, w, "full")
    assert_close(lib["full_diff"](x, w), full[1:] - full[::-1][:-1], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("ncl", [(1, 3, 1), (2, 6, 13), (3, 12, 7), (0, 3, 4)])
def test_group_statistics(lib, ncl):
    n, c, length = ncl
    x = randn(ncl, 0, np.float64)
    mu, centred = lib["group_stats"](x)
    expected = x.reshape(n, 3, (c // 3) * length).mean(axis=-1)
    assert_close(mu, expected, rtol=1e-13, atol=1e-13)
    assert_close(centred, x - np.repeat(expected, c // 3, axis=1)[:, :, None], rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------------------- errors

HEAD = """\
[composite.f]
inputs = ["x: f32[N, C, H, W]", "wd: f32[C, KH, KW]", "wp: f32[O, C]"]
outputs = ["y: f32[N, O, OH, OW]"]
where = ["H >= KH", "W >= KW", "OH = H - KH + 1", "OW = W - KW + 1"]
body = \"\"\"
"""
POINTWISE = "y[n, o, oh, ow] = sum[c](dw[n, c, oh, ow] * wp[o, c])\n"
DEPTHWISE = "sum[r, s](x[n, c, oh + r, ow + s] * wd[c, r, s])\n"

ERRORS = {
    "undeclared": (
        "dw[n, c, oh, ow] = " + DEPTHWISE + POINTWISE,
        "6:10: error: cannot infer the range of index 'oh': declare it on the left, as "
        "`dw[n, c, oh < EXTENT, ow]`, or use it alone in some position of an access",
        None,
    ),
    "undeclared_in_reduction": (
        "dw[n, c, oh < OH, ow < OW] = sum[r, s, q](x[n, c, oh + r, ow + s] * wd[c, r, s])\n" + POINTWISE,
        "6:30: error: cannot infer the range of index 'q': declare it in the brackets, as "
        "`sum[r, s, q < EXTENT](...)`, or use it alone in some position of an access",
        None,
    ),
    "disagrees_with_rhs": (
        "dw[n, c < C + 1, oh < OH, ow < OW] = " + DEPTHWISE + POINTWISE,
        "6:53: error: index 'c' ranges over C + 1 here but over C in x",
        "6:11: note: first range given here",
    ),
    "disagrees_downstream": (
        "dw[n, c, oh < H - KH, ow < OW] = " + DEPTHWISE + POINTWISE,
        "7:35: error: index 'oh' ranges over H - KH + 1 here but over H - KH in dw",
        "7:9: note: first range given here",
    ),
    "disagrees_with_output": (
        "dw[n, c, oh < OH, ow < OW] = " + DEPTHWISE + POINTWISE.replace("oh,", "oh < OH + 1,", 1),
        "7:14: error: index 'oh' is bounded by H - KH + 2 but 'y' is declared with H - KH + 1 in axis 2",
        None,
    ),
    "too_large_to_prove": (
        "dw[n, c, oh < H, ow < OW] = " + DEPTHWISE + POINTWISE,
        "6:47: error: access to 'x' may be out of bounds in axis 2: cannot prove 0 <= oh + r < H; "
        "guard it with where(condition, ..., ...)",
        None,
    ),
    "negative": (
        "dw[n, c, oh < KH - H, ow < OW] = " + DEPTHWISE + POINTWISE,
        "6:15: error: the range -H + KH of index 'oh' may be negative; add the 'where' constraint `KH - H >= 0`",
        None,
    ),
    "depends_on_index": (
        "dw[n, c, oh < OH, ow < OW] = sum[r < oh, s](x[n, c, oh + r, ow + s] * wd[c, r, s])\n" + POINTWISE,
        "6:38: error: the range of index 'r' cannot depend on index 'oh': "
        "give it as an expression of symbols and integer params",
        None,
    ),
    "not_an_index": (
        "dw[n, c, oh <= OH, ow < OW] = " + DEPTHWISE + POINTWISE,
        "6:10: error: left-hand indices must be distinct index names, each `i` or `i < EXTENT`",
        None,
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(tmp_path: Path, case: str):
    body, error, note = ERRORS[case]
    (tmp_path / "f.toml").write_text(HEAD + body + '"""\n')
    result = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "f.toml", "-o", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"f.toml:{error}", textwrap.indent(result.stderr, "  ")
    assert "Traceback" not in result.stderr
    assert (f"f.toml:{note}" in lines) if note else ("note:" not in result.stderr), result.stderr
    assert not (tmp_path / "out").exists()
