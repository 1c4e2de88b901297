"""Innermost loops that read or write at a stride stay scalar (catenc/lower/strided.py): a stride-2
max pool and an average pool without padding, and a strided copy, are marked and rendered with the
prelude's CATENC_SCALAR_LOOP before them, compute what numpy computes and the same bits as without
the pass; a contiguous loop, and a strided one that calls a transcendental, keep their vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from catenc.lower.loops import For, iter_stmts
from tests.test_interchange import built

SOURCE = """
[composite.maxpool]
inputs = ["x: f32[C, H, W]"]
outputs = ["y: f32[C, (H - 3) // 2 + 1, (W - 3) // 2 + 1]"]
body = "y[c, i, j] = max[r < 3, s < 3](x[c, 2*i + r, 2*j + s])"

[composite.avgpool]
inputs = ["x: f32[C, H, W]"]
outputs = ["y: f32[C, H // 2, W // 2]"]
body = "y[c, i, j] = sum[r < 2, s < 2](x[c, 2*i + r, 2*j + s]) * 0.25"

[composite.every_third]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N // 3]"]
body = "y[i] = x[3*i] + 1.0"

[composite.contiguous]
inputs = ["x: f32[C, H, W]"]
outputs = ["y: f32[C, H, W]"]
body = "y = x * 2.0 + 1.0"

[composite.strided_exp]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N // 2]"]
body = "y[i] = exp(x[2*i])"
"""

MARKED = {"maxpool": True, "avgpool": True, "every_third": True, "contiguous": False, "strided_exp": False}


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    if name == "maxpool":
        c, h, w = x.shape
        oh, ow = (h - 3) // 2 + 1, (w - 3) // 2 + 1
        return np.max([x[:, r : r + 2 * oh - 1 : 2, s : s + 2 * ow - 1 : 2] for r in range(3) for s in range(3)], 0)
    if name == "avgpool":
        c, h, w = x.shape
        oh, ow = h // 2, w // 2
        return sum(x[:, r : r + 2 * oh : 2, s : s + 2 * ow : 2] for r in range(2) for s in range(2)) * 0.25
    if name == "every_third":
        return x[: 3 * (x.size // 3) : 3] + 1.0
    if name == "contiguous":
        return x * 2.0 + 1.0
    return np.exp(x[: 2 * (x.size // 2) : 2])


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    path = tmp_path_factory.mktemp("strided")
    return built(path, SOURCE), built(path, SOURCE, ("scalar-strided-loops",))


def _scalar_loops(plan, name: str) -> int:
    (entry,) = [e for e in plan.entries if e.name == name]
    return sum(isinstance(s, For) and s.scalar for k in entry.kernels for s in iter_stmts(k.body))


@pytest.mark.parametrize("name", sorted(MARKED))
def test_strided_loops_are_scalar_and_compute_the_same(builds, name: str, tmp_path: Path):
    (plan, lib), (plain_plan, plain) = builds
    assert (_scalar_loops(plan, name) > 0) == MARKED[name]
    assert _scalar_loops(plain_plan, name) == 0
    rng = np.random.default_rng(3)
    shapes = [(37,), (2,), (96,)] if name in ("every_third", "strided_exp") else [(3, 17, 33), (2, 56, 56), (1, 3, 3)]
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        got = lib[name](x)
        np.testing.assert_allclose(got, _reference(name, x), rtol=2e-6, atol=1e-6)
        np.testing.assert_array_equal(got, plain[name](x))


def test_the_mark_is_the_preludes_pragma_before_the_loop(builds):
    (plan, lib), _ = builds
    source = next(Path(lib.path).parent.glob("*.c")).read_text()
    assert '#define CATENC_SCALAR_LOOP _Pragma("clang loop vectorize(disable)")' in source
    lines = source.splitlines()
    marked = [lines[k + 1].strip() for k, line in enumerate(lines) if line.strip() == "CATENC_SCALAR_LOOP"]
    assert marked and all(line.startswith("for (int64_t ") for line in marked)
