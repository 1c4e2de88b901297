"""Padded windows read a padded copy of their plane (catenc/lower/pad.py): depthwise convolutions
and pools of any stride lose their guards, compute what numpy computes and the same bits as
without the pass; a guard that is not the plane's bounds, a plane written in the same loops, or
a plane too large keeps its guarded reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from catenc.ir.nodes import Where, walk
from catenc.lower.loops import For, PaddedPlane, iter_stmts, stmt_values
from catenc.lower.pad import PLANE_BYTES
from catenc.lower.verify import verify_loops
from tests.conftest import randn
from tests.test_guarded_loops import RNG, C, H, built_mobile, mobile_model
from tests.test_interchange import built

DEPTHWISE = """
[composite.dw]
inputs = ["x: {t}[{c}, {h}, {w}]", "k: {t}[{c}, {r}, {r}]", "b: {t}[{c}]"]
outputs = ["y: {t}[{c}, {oh}, {ow}]"]
body = '''
t[c, i < {oh}, j < {ow}] = sum[r < {r}, s < {r}](
    where((i*{s} + r >= {p}) & (i*{s} + r < {h} + {p}) & (j*{s} + s >= {p}) & (j*{s} + s < {w} + {p}),
          x[c, i*{s} + r - {p}, j*{s} + s - {p}], 0.0) * k[c, r, s]) + b[c]
y[c, i, j] = t[c, i, j] * sigmoid(t[c, i, j])
'''
"""


def _depthwise(c: int, h: int, w: int, r: int, s: int, p: int, t: str = "f32") -> str:
    oh, ow = (h + 2 * p - r) // s + 1, (w + 2 * p - r) // s + 1
    return DEPTHWISE.format(c=c, h=h, w=w, r=r, s=s, p=p, oh=oh, ow=ow, t=t)


def _depthwise_reference(x, k, b, s: int, p: int) -> np.ndarray:
    c, h, w = x.shape
    r = k.shape[1]
    xp = np.pad(x.astype(np.float64), ((0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - r) // s + 1, (w + 2 * p - r) // s + 1
    t = np.zeros((c, oh, ow)) + b[:, None, None]
    for i in range(r):
        for j in range(r):
            t += xp[:, i : i + s * (oh - 1) + 1 : s, j : j + s * (ow - 1) + 1 : s] * k[:, i, j, None, None]
    return t / (1 + np.exp(-t))


def _kernels(plan):
    (entry,) = plan.entries
    return entry.kernels


def _planes(plan) -> list[PaddedPlane]:
    return [s for k in _kernels(plan) for s in iter_stmts(k.body) if isinstance(s, PaddedPlane)]


def _serial_extents(kernel) -> list[int]:
    """The extents of the kernel's loops that run on one thread, outermost first."""
    return [s.extent.value for s in iter_stmts(kernel.body) if isinstance(s, For) and not s.parallel]


def _guarded_reads(plan) -> int:
    return sum(
        isinstance(n, Where)
        for k in _kernels(plan)
        for s in iter_stmts(k.body)
        for v in stmt_values(s)
        for n in walk(v)
    )


@pytest.mark.parametrize(
    "c,h,w,r,s,p,t",
    [
        (5, 14, 14, 3, 1, 1, "f32"),  # a row shorter than a vector
        (3, 28, 28, 5, 1, 2, "f32"),  # rows of 16 and an overlapping last block
        (4, 7, 7, 5, 1, 2, "f32"),  # most of the plane is padding
        (3, 56, 56, 3, 2, 1, "f32"),  # stride 2: two column phases
        (2, 15, 13, 5, 2, 2, "f32"),  # odd sizes, stride 2
        (2, 20, 23, 3, 3, 1, "f32"),  # stride 3
        (3, 21, 21, 3, 2, 1, "f64"),  # doubles: half the lanes per vector
    ],
)
def test_depthwise_reads_a_padded_copy(tmp_path: Path, c, h, w, r, s, p, t) -> None:
    source = _depthwise(c, h, w, r, s, p, t)
    plan, library = built(tmp_path, source)
    planes = _planes(plan)
    assert len(planes) == 1 and planes[0].phases == s
    assert _guarded_reads(plan) == 0  # every tap reads the copy unguarded
    dtype = np.dtype(t.replace("f", "float"))
    x, k, b = randn((c, h, w), dtype, seed=1), randn((c, r, r), dtype, seed=2), randn((c,), dtype, seed=3)
    y = library.entries["dw"](x, k, b)
    np.testing.assert_allclose(y, _depthwise_reference(x, k, b, s, p), rtol=2e-5, atol=2e-6)
    _, plain = built(tmp_path, source, ("pad-windows",))
    want = plain.entries["dw"](x, k, b)
    assert y.tobytes() == want.tobytes()


def test_a_row_ends_in_one_overlapping_block(tmp_path: Path) -> None:
    plan, _ = built(tmp_path, _depthwise(64, 29, 29, 5, 1, 2))  # 29: a remainder for 4, 8 or 16 lanes
    (kernel,) = _kernels(plan)
    lanes = kernel.decisions.vector_lanes
    assert lanes >= 4
    columns = _serial_extents(kernel)
    assert columns[-3:] == [29, 29 - 29 % lanes, lanes]  # rows; whole vectors, then the last one again


U8_TAPS = """
[composite.dw]
inputs = ["x: u8[8, 29, 29]", "k: f32[8, 5, 5]"]
outputs = ["y: f32[8, 29, 29]"]
body = '''
y[c, i < 29, j < 29] = sum[r < 5, s < 5](
    cast(where((i + r >= 2) & (i + r < 31) & (j + s >= 2) & (j + s < 31), x[c, i + r - 2, j + s - 2], cast(0, u8)), f32)
    * k[c, r, s])
'''
"""


def test_a_u8_plane_multiplied_in_f32_ends_its_rows_in_f32_vectors(tmp_path: Path) -> None:
    """The blocks are as wide as the vectors of the type the row computes in (f32), not of the
    plane's bytes: 64 u8 lanes would be wider than the row and leave it a scalar remainder."""
    plan, library = built(tmp_path, U8_TAPS)
    (plane,) = _planes(plan)
    assert plane.value.dtype.name == "u8"
    (kernel,) = _kernels(plan)
    lanes = kernel.decisions.vector_lanes
    columns = _serial_extents(kernel)
    assert columns[-3:] == [29, 29 - 29 % lanes, lanes]
    x = np.random.default_rng(4).integers(0, 256, (8, 29, 29)).astype(np.uint8)
    k = randn((8, 5, 5), np.float32, seed=5)
    padded = np.pad(x.astype(np.float64), ((0, 0), (2, 2), (2, 2)))
    want = sum(padded[:, r : r + 29, s : s + 29] * k[:, r, s, None, None] for r in range(5) for s in range(5))
    np.testing.assert_allclose(library.entries["dw"](x, k), want, rtol=1e-5, atol=1e-3)


POOL = """
[composite.pool]
inputs = ["x: f32[3, 30, 30]"]
outputs = ["y: f32[3, 15, 15]"]
body = '''
y[c, i < 15, j < 15] = max[r < 3, s < 3](
    where((2*i + r >= 1) & (2*i + r < 31) & (2*j + s >= 1) & (2*j + s < 31), x[c, 2*i + r - 1, 2*j + s - 1], -inf))
'''
"""


def test_a_padded_max_pool_pads_with_minus_infinity(tmp_path: Path) -> None:
    plan, library = built(tmp_path, POOL)
    (plane,) = _planes(plan)
    assert plane.fill.value == -np.inf and plane.phases == 2
    x = -np.abs(randn((3, 30, 30), seed=4))  # all negative: a zero fill would show
    y = library.entries["pool"](x)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.max([xp[:, i : i + 29 : 2, j : j + 29 : 2] for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_array_equal(y, want)


UNPADDED_POOL = """
[composite.pool]
inputs = ["x: f32[3, 31, 29]"]
outputs = ["y: f32[3, 15, 14]"]
body = 'y[c, i < 15, j < 14] = max[r < 3, s < 3](x[c, 2*i + r, 2*j + s])'
"""

# the same pool over the concatenation of two planes' channels: a select picks which buffer each
# channel reads
POOL_OF_CONCAT = """
[composite.pool]
inputs = ["a: f32[2, 31, 29]", "b: f32[3, 31, 29]"]
outputs = ["y: f32[5, 15, 14]"]
body = '''
x = concat([a, b], axis=0)
y[c, i < 15, j < 14] = max[r < 3, s < 3](x[c, 2*i + r, 2*j + s])
'''
"""


def _pool_reference(x: np.ndarray) -> np.ndarray:
    return np.max([x[:, i : i + 29 : 2, j : j + 27 : 2] for i in range(3) for j in range(3)], axis=0)


def test_an_unpadded_strided_pool_reads_a_copy_in_phases(tmp_path: Path) -> None:
    """SqueezeNet's 3x3 stride-2 max pools: their taps read every other column, which kept them scalar
    (0.55 ms for the first one, one thread); from a copy split into two column phases each tap reads
    consecutive columns (0.17 ms)."""
    plan, library = built(tmp_path, UNPADDED_POOL)
    (plane,) = _planes(plan)
    assert plane.phases == 2 and plane.offset == (0, 0)
    x = randn((3, 31, 29), seed=10)
    y = library.entries["pool"](x)
    np.testing.assert_array_equal(y, _pool_reference(x))
    _, plain = built(tmp_path, UNPADDED_POOL, ("pad-windows",))
    assert plain.entries["pool"](x).tobytes() == y.tobytes()


def test_a_pool_whose_reads_a_select_picks_copies_nothing(tmp_path: Path) -> None:
    """A copy of each side's plane would read channels the select never reads there (outside the
    smaller buffer), so the reads stay as they are."""
    plan, library = built(tmp_path, POOL_OF_CONCAT)
    assert _planes(plan) == []
    a, b = randn((2, 31, 29), seed=11), randn((3, 31, 29), seed=12)
    np.testing.assert_array_equal(library.entries["pool"](a, b), _pool_reference(np.concatenate([a, b])))


NOT_BOUNDS = """
[composite.cut]
inputs = ["x: f32[2, 12, 12]", "k: f32[3, 3]"]
outputs = ["y: f32[2, 12, 12]"]
body = '''
y[c, i < 12, j < 12] = sum[r < 3, s < 3](
    where((i + r >= 1) & (i + r < 12) & (j + s >= 1) & (j + s < 13), x[c, i + r - 1, j + s - 1], 0.0) * k[r, s])
'''
"""


def test_a_guard_that_cuts_inside_the_plane_keeps_its_reads(tmp_path: Path) -> None:
    # i + r < 12 leaves out row 11 of x, which a padded copy would hold
    plan, library = built(tmp_path, NOT_BOUNDS)
    assert _planes(plan) == []
    x, k = randn((2, 12, 12), seed=5), randn((3, 3), seed=6)
    y = library.entries["cut"](x, k)
    xp = np.pad(x[:, :11].astype(np.float64), ((0, 0), (1, 2), (1, 1)))
    want = sum(xp[:, i : i + 12, j : j + 12] * k[i, j] for i in range(3) for j in range(3))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_a_plane_too_large_for_the_stack_keeps_its_guards(tmp_path: Path) -> None:
    side = int((PLANE_BYTES / 4) ** 0.5)  # padded by 2, past the limit
    plan, library = built(tmp_path, _depthwise(1, side, side, 3, 1, 1))
    assert _planes(plan) == []
    x, k, b = randn((1, side, side), seed=7), randn((1, 3, 3), seed=8), randn((1,), seed=9)
    y = library.entries["dw"](x, k, b)
    np.testing.assert_allclose(y, _depthwise_reference(x, k, b, 1, 1), rtol=2e-5, atol=2e-6)


def test_the_mobile_networks_windows_read_padded_copies(tmp_path: Path) -> None:
    """A depthwise 3x3 with ReLU6, a stride-2 5x5 with SiLU, an average pool counting its padding
    and a max pool, imported from ONNX: each reads one padded copy, unguarded."""
    plan, entry = built_mobile(tmp_path)
    _, plain = built_mobile(tmp_path, ("pad-windows",))
    assert [p.phases for p in _planes(plan)] == [1, 2, 2, 2]
    assert _guarded_reads(plan) == 0
    x = RNG.standard_normal((1, C, H, H)).astype(np.float32)
    got = entry(x)
    for g, w in zip(got, ReferenceEvaluator(mobile_model()).run(None, {"x": x}), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    for g, u in zip(got, plain(x), strict=True):
        assert g.tobytes() == u.tobytes()


def test_the_verifier_knows_a_copy_only_after_it_is_made(tmp_path: Path) -> None:
    plan, _ = built(tmp_path, _depthwise(64, 14, 14, 3, 1, 1))
    (entry,) = plan.entries
    (kernel,) = entry.kernels
    buffers = entry.schedule.graph.buffers
    assert verify_loops((kernel,), buffers) == []
    (outer,) = kernel.body  # the loop over channels: the copy, then the nest that reads it
    copy, *nest = outer.body
    assert isinstance(copy, PaddedPlane)
    late = replace(kernel, body=(replace(outer, body=(*nest, copy)),))
    problems = verify_loops((late,), buffers)
    assert problems and all("reads unknown buffer catenc_plane0" in p for p in problems)


@pytest.mark.parametrize("phases", [1, 2, 3])
def test_a_padded_plane_fills_exactly_what_its_values_leave(phases):
    """codegen/c.py plane_border: the padding runs and the plane's values (written as the renderer's copy
    places them) are disjoint and cover the whole array, for every padding of 0 to 2 on each side,
    planes of 1 to 5 a side, and 1 to 3 phases."""
    from catenc.codegen.c import plane_border
    from catenc.dtypes import DTYPES
    from catenc.ir.nodes import Const

    f32 = DTYPES["f32"]
    for top, bottom, left, right in np.ndindex(3, 3, 3, 3):
        for height, width in ((1, 1), (2, 5), (5, 3), (4, 4)):
            rows, cols = top + height + bottom, -(-(left + width + right) // phases)
            plane = PaddedPlane(
                "p", Const(f32, 1.0), (height, width), (rows, cols), (top, left), Const(f32, 0.0), phases
            )
            values = {
                ((column + left) % phases * rows + r + top) * cols + (column + left) // phases
                for r in range(height)
                for column in range(width)
            }
            border = [
                start + n * stride + c
                for start, length, count, stride in plane_border(plane)
                for n in range(count)
                for c in range(length)
            ]
            assert len(border) == len(set(border)) and not set(border) & values
            assert set(border) | values == set(range(phases * rows * cols)), (top, bottom, left, right, height, width)
