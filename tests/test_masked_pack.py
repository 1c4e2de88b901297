"""Convolution patches packed as masked rows (lower/gemm.py MaskedRow): a padded window whose patch
row reads the input plane contiguously packs each panel row as one masked copy, with the guard
kept per panel as a byte mask for each combination of the window indices it reads. Checked against
numpy at planes narrower and wider than a panel and not a multiple of it, windows of 3x3 (9
masks), 5x5 and 7x7 (49), and against the runs it replaces (MASKS = 0): the same results, bit for
bit. A window of more combinations than MASKS (9x9: 81) keeps its runs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, compile_text, randn
from test_packed_conv_and_threads import np_conv

from catenc.lower import gemm

WINDOWS = {3: 1, 5: 2, 7: 3, 9: 4}  # kernel size -> the padding that keeps the plane's size


def _source() -> str:
    return "".join(
        f"""
[composite.conv{r}]
inputs = ["x: f32[N, C, H, W]", "w: f32[K, C, {r}, {r}]"]
outputs = ["y: f32[N, K, H, W]"]
body = "y = conv2d(x, w, padding={p})"
"""
        for r, p in WINDOWS.items()
    )


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
