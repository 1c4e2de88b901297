"""Convolution patches packed as masked rows (lower/gemm.py MaskedRow): a padded window whose patch
row reads the input plane contiguously packs each panel row as one masked copy, with the guard
kept per panel as a byte mask for each combination of the window indices it reads. Checked against
numpy at planes narrower and wider than a panel and not a multiple of it, windows of 3x3 (9
masks), 5x5 and 7x7 (49), and against the runs it replaces (MASKS = 0): the same results, bit for
bit. A window of more combinations than MASKS (9x9: 81) keeps its runs. An int8 convolution's
patches (bytes, padded with the activation's zero point) pack the same way, a chunk of panels at a
time, and stay exact."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, compile_text, randn
from test_packed_conv_and_threads import np_conv

from catenc.lower import gemm

WINDOWS = {3: 1, 5: 2, 7: 3, 9: 4}  # kernel size -> the padding that keeps the plane's size
ZERO_POINT = 7  # what the int8 convolution's padding reads


def _source() -> str:
    return (
        "".join(
            f"""
[composite.conv{r}]
inputs = ["x: f32[N, C, H, W]", "w: f32[K, C, {r}, {r}]"]
outputs = ["y: f32[N, K, H, W]"]
body = "y = conv2d(x, w, padding={p})"
"""
            for r, p in WINDOWS.items()
        )
        + QCONV
    )


QCONV = f"""
[composite.qconv]
inputs = ["x: u8[C, H, W]", "w: i8[F, C, 3, 3]"]
outputs = ["y: i32[F, H, W]"]
body = '''
y[f, h, v] = sum[c, r, s](cast(where((h + r >= 1) & (h + r <= H) & (v + s >= 1) & (v + s <= W),
                                    x[c, h + r - 1, v + s - 1], cast({ZERO_POINT}, u8)), i32)
                          * cast(w[f, c, r, s], i32))
'''
"""


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """The convolutions built as they are, and with masked rows off (MASKS = 0: runs)."""
    masked = compile_text(tmp_path_factory.mktemp("masked"), _source(), name="convs")
    patch = pytest.MonkeyPatch()
    patch.setattr(gemm, "MASKS", 0)
    try:
        runs = compile_text(tmp_path_factory.mktemp("runs"), _source(), name="convs")
    finally:
        patch.undo()
    return masked, runs


def _pack_b(library, r: int) -> str:
    source = (library.path.parent / "convs.c").read_text()
    return source.split(f"static void conv{r}_k0_g0_pack_b(")[1].split("\n}\n")[0]


def test_windows_up_to_the_mask_limit_pack_as_masked_rows(libraries):
    masked, runs = libraries
    for r in WINDOWS:
        combinations = r * r
        if combinations <= gemm.MASKS:
            assert f"unsigned char catenc_mask[{combinations}][" in _pack_b(masked, r), r
            assert "catenc_lo" not in _pack_b(masked, r), r
        else:
            assert "catenc_mask" not in _pack_b(masked, r) and "catenc_lo" in _pack_b(masked, r), r
        assert "catenc_mask" not in _pack_b(runs, r), r


# (N, C, H, W, K): planes of one position, under one panel, across panels and rows, wider than a
# panel, and a depth past one k-slice (C * 49 > 512)
SIZES = [(1, 1, 1, 1, 1), (2, 3, 5, 7, 4), (1, 4, 13, 11, 7), (1, 2, 3, 70, 6), (1, 12, 9, 9, 5)]


@pytest.mark.parametrize("r", list(WINDOWS))
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_masked_rows_match_numpy_and_the_runs_bit_for_bit(libraries, r, size):
    masked, runs = libraries
    n, c, h, w_, k = size
    x, w = randn((n, c, h, w_), seed=1), randn((k, c, r, r), seed=2)
    got = masked[f"conv{r}"](x, w)
    want = np_conv(x, w, 1, WINDOWS[r], 1)
    assert_close(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))
    assert np.array_equal(got, runs[f"conv{r}"](x, w))


def test_int8_patches_pack_as_masked_rows_and_stay_exact(libraries):
    masked, runs = libraries
    source = (masked.path.parent / "convs.c").read_text()
    assert "unsigned char catenc_mask[9][" in source.split("static void qconv_k0_g0_pack_b(")[1].split("\n}\n")[0]
    x = np.random.default_rng(1).integers(0, 256, (40, 9, 23), dtype=np.uint8)
    w = np.random.default_rng(2).integers(-128, 128, (13, 40, 3, 3), dtype=np.int8)
    got = masked["qconv"](x, w)
    padded = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)), constant_values=ZERO_POINT)
    want = sum(
        np.einsum("fc,chw->fhw", w[:, :, r, s].astype(np.int64), padded[:, r : r + 9, s : s + 23])
        for r in range(3)
        for s in range(3)
    )
    assert np.array_equal(got, want)
    assert np.array_equal(got, runs["qconv"](x, w))
