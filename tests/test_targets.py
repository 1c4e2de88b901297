"""Both vector widths and both compilers, on whatever machine runs the suite.

VECTOR_WIDTH=auto resolves to the widest vectors the compiler targets (queried from it, never
assumed), and a sample builds for AVX2 (x86-64-v3, 8 f32 lanes) and AVX-512 (x86-64-v4, 16 lanes)
with clang and with gcc; its --test runs wherever this CPU has the features (/proc/cpuinfo).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_text
from toolchains import (
    COMPILERS,
    MARCH_LANES,
    MARCHES,
    c_runtime,
    cpu_flags,
    cpu_runs,
    require,
    runnable_marches,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("compiler", COMPILERS)
def test_auto_width_is_what_the_target_has(compiler: str, march: str) -> None:
    require(compiler)
    runtime = c_runtime()
    config = runtime.validate_config({"CC": compiler, "MARCH": march})
    assert runtime.vector_lanes(config) == MARCH_LANES[march]
    flags = runtime.flags(config, "2")
    assert f"-march={march}" in flags
    assert ("-mprefer-vector-width=512" in flags) == (MARCH_LANES[march] == 16)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_native_width_is_this_cpus(compiler: str) -> None:
    require(compiler)
    runtime = c_runtime()
    lanes = runtime.vector_lanes(runtime.validate_config({"CC": compiler, "MARCH": "native"}))
    flags = cpu_flags()
    assert lanes == (16 if "avx512f" in flags else 8 if "avx" in flags else 4), sorted(flags)


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("compiler", COMPILERS)
def test_sample_builds_for_each_width(tmp_path: Path, compiler: str, march: str) -> None:
    """The softmax sample at the target's width: tested against numpy where this CPU runs it."""
    require(compiler)
    command = [sys.executable, "-m", "catenc", "compile", str(ROOT / "samples" / "softmax.toml"), "-o", str(tmp_path)]
    command += ["--config", f"CC={compiler},MARCH={march}"]
    if cpu_runs(march):
        command += ["--test", "N=33,D=100"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "softmax.manifest.json").read_text())
    build = manifest["build"]["commands"][0]
    assert build[0] == compiler and f"-march={march}" in build, build
    # the row reductions keep two vectors of partial results per row
    source = (tmp_path / "softmax.c").read_text()
    assert re.search(rf"catenc_lanes\[\d+\]\[{2 * MARCH_LANES[march]}\]", source), "reduction lanes do not match"


INT_SUM = """
[composite.colsum]
inputs = ["x: i64[A, B, C]"]
outputs = ["y: i64[B, C]"]
body = "y = sum(x, axis=0)"
"""


@pytest.mark.parametrize("opt", ["2", "3"])
@pytest.mark.parametrize("march", runnable_marches())
@pytest.mark.parametrize("compiler", COMPILERS)
def test_integer_reduction_remainders(tmp_path: Path, compiler: str, march: str, opt: str) -> None:
    """gcc 12.2 -O3 -march=x86-64-v3 (and -O2 with the dynamic cost model) miscompiled the
    remainder loop of this reduction (fewer rows than lanes) until the runtime added
    -fno-tree-pre for gcc."""
    require(compiler)
    lib = compile_text(tmp_path, INT_SUM, name="colsum", opt=opt, config={"CC": compiler, "MARCH": march})
    rng = np.random.default_rng(1)
    for shape in [(2, 7, 13), (2, 3, 4), (5, 3, 37), (9, 2, 8)]:
        x = rng.integers(-(2**62), 2**62, size=shape, dtype=np.int64)
        np.testing.assert_array_equal(lib.colsum(x), x.sum(axis=0), err_msg=str(shape))
