"""Reductions down a strided axis run with the reduction outside the last row loop
(catenc/schedule/interchange.py): numpy's results, the plain loop's results bit for bit, and the
decision only where it applies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import runtime

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.loader import load
from catenc.plan import Options

POOL = """
[composite.pool]
inputs = ["x: {dtype}[B, T, D]"]
outputs = ["y: {dtype}[B, D]"]
body = "y = {body}"
"""

CASES = {
    "mean": ("x.mean(axis=1) * 2.0 + 1.0", lambda x: x.mean(axis=1) * 2 + 1),
    "sum": ("sum(x, axis=1)", lambda x: x.sum(axis=1)),
    "max": ("max(x, axis=1)", lambda x: x.max(axis=1)),
    "min": ("min(x, axis=1)", lambda x: x.min(axis=1)),
    "prod": ("prod(x * 0.5 + 0.75, axis=1)", lambda x: (x * 0.5 + 0.75).prod(axis=1)),
}


def built(tmp_path: Path, text: str, disabled: tuple[str, ...] = ()):
    """The plan and the loaded library of a composite file, with `disabled` passes skipped."""
    path = tmp_path / "pool.toml"
    path.write_text(text)
    options = Options(runtime("clang"), opt="2", disabled_passes=disabled)
    plan = plan_file(str(path), options)
    out = tmp_path / ("out" + "".join(f"_{d}" for d in disabled))
    written = build(plan, options, BuildRequest(str(path), str(out), ("c", "h", "manifest", "so")))
    return plan, load(written["manifest"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_strided_reduction_matches_numpy_and_the_plain_loop(tmp_path: Path, name: str):
    body, reference = CASES[name]
    text = POOL.format(dtype="f32", body=body)
    plan, lib = built(tmp_path, text)
    (kernel,) = plan.entries[0].schedule.kernels
    assert kernel.decisions.interchange and len(kernel.outer) == 1  # rows over b, d inside t
    # the plain loop combines in the order of t too once it has no vector lanes
    _, plain = built(tmp_path, text, ("interchange-reductions", "vector-reductions"))
    rng = np.random.default_rng(7)
    for shape in [(3, 17, 33), (1, 1, 1), (2, 64, 5), (0, 4, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        if x.size:
            x.flat[0] = np.nan if name in ("max", "min") else x.flat[0]  # NaN propagates
        got = lib["pool"](x)
        np.testing.assert_allclose(got, reference(x.astype(np.float64)), rtol=2e-5, atol=1e-5)
        np.testing.assert_array_equal(got, plain["pool"](x))  # same order of combining: same bits


def test_not_for_contiguous_reductions_nor_a_half_accumulator(tmp_path: Path):
    text = '[composite.rows]\ninputs = ["x: f32[B, D]"]\noutputs = ["y: f32[B]"]\nbody = "y = sum(x, axis=1)"\n'
    plan, lib = built(tmp_path, text)  # contiguous: its vector lanes serve it
    assert not any(k.decisions.interchange for k in plan.entries[0].schedule.kernels)
    x = np.random.default_rng(1).standard_normal((2, 40)).astype(np.float32)
    np.testing.assert_allclose(lib["rows"](x), x.sum(axis=1), rtol=1e-5, atol=1e-5)
    half = tmp_path / "half"
    half.mkdir()
    plan, lib = built(half, POOL.format(dtype="f16", body="sum(x, axis=1)"))  # f32 sums, f16 storage
    assert not any(k.decisions.interchange for k in plan.entries[0].schedule.kernels)
    x16 = np.random.default_rng(2).standard_normal((2, 9, 5)).astype(np.float16)
    np.testing.assert_allclose(lib["pool"](x16), x16.astype(np.float64).sum(axis=1), rtol=2e-3, atol=2e-3)
