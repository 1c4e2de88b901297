"""Layers written the way a user writes them (tests/data/written_layers.toml: multi-head attention
with a tril mask, SwiGLU, conv + batch norm + relu, embeddings + layer norm, cross-entropy,
rotary by einsum, pooling, masked fill, causal conv1d, op-library calls), each entry checked
against the independent numpy reference at its test sizes, at -O0 and -O2 and on OpenCL."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import runtime

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.loader import load
from catenc.plan import Options
from catenc.testing.check import check_entries

LAYERS = Path(__file__).resolve().parent / "data" / "written_layers.toml"


@pytest.mark.parametrize(("runtime_name", "opt"), [("clang", "0"), ("clang", "2"), ("opencl", "2")])
def test_written_layers_match_the_reference(tmp_path: Path, runtime_name: str, opt: str) -> None:
    rt = runtime(runtime_name)
    options = Options(rt, rt.validate_config({}), opt=opt)
    plan = plan_file(str(LAYERS), options)
    assert len(plan.entries) == 11
    written = build(plan, options, BuildRequest(str(LAYERS), str(tmp_path), ("c", "h", "manifest", "so")))
    checks, lines = check_entries(plan, load(written["manifest"]), {})
    assert checks and all(c.ok for c in checks), "\n".join(lines)
