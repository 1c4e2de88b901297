"""Nested loops collapsed into one (catenc/lower/collapse.py): an elementwise kernel over a 28x28
plane runs one loop of 784 where every element it reads and writes steps alike, keeps its two loops
where one does not (a transposed read), and computes the same bits either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catenc.lower.loops import For, iter_stmts
from tests.conftest import randn
from tests.test_interchange import built

SOURCE = """
[composite.planes]
inputs = ["x: f32[C, 28, 28]", "b: f32[C]"]
outputs = ["y: f32[C, 28, 28]", "t: f32[C, 28, 28]"]
body = '''
y[c, h, w] = maximum(x[c, h, w] * 2.0 + b[c], 0.0)
t[c, h, w] = x[c, w, h] + b[c]
'''
"""


def _extents(plan) -> list[list[int]]:
    """Per kernel, the constant extents of its serial loops."""
    (entry,) = plan.entries
    return [
        [s.extent.value for s in iter_stmts(k.body) if isinstance(s, For) and not s.parallel and s.extent.is_const]
        for k in entry.kernels
    ]


def test_a_plane_read_and_written_as_stored_is_one_loop(tmp_path: Path) -> None:
    plan, library = built(tmp_path, SOURCE)
    entry = library.entries["planes"]
    extents = _extents(plan)
    assert [784] in extents  # y: one loop over the plane
    assert any(28 in e for e in extents)  # t reads x transposed: its rows stay
    x, b = randn((5, 28, 28), seed=1), randn((5,), seed=2)
    y, t = entry(x, b)
    np.testing.assert_array_equal(y, np.maximum(x * np.float32(2.0) + b[:, None, None], np.float32(0.0)))
    np.testing.assert_array_equal(t, x.transpose(0, 2, 1) + b[:, None, None])
    _, uncollapsed = built(tmp_path, SOURCE, ("collapse-loops",))
    for got, want in zip(uncollapsed.entries["planes"](x, b), (y, t), strict=True):
        assert got.tobytes() == want.tobytes()
