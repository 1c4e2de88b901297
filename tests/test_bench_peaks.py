"""catenc/peaks/fma_peak.c builds for AVX2 and for AVX-512 with both compilers, measures at the
width it was built for, and runs wherever this CPU has the features."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from toolchains import COMPILERS, MARCH_LANES, MARCHES, cpu_runs, require

SOURCE = Path(__file__).resolve().parents[1] / "catenc" / "peaks" / "fma_peak.c"


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("compiler", COMPILERS)
def test_fma_peak_builds_at_the_targets_width(tmp_path: Path, compiler: str, march: str) -> None:
    binary = tmp_path / "fma_peak"
    command = [require(compiler), "-O3", f"-march={march}", "-fopenmp", str(SOURCE), "-o", str(binary)]
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    if cpu_runs(march):
        out = subprocess.run([str(binary), "1000", "1"], capture_output=True, text=True, timeout=60).stdout
        assert re.search(rf"^vector_bits {32 * MARCH_LANES[march]}$", out, re.M), out
        assert re.search(r"^fma 1$", out, re.M) and re.search(r"^fma_gflops [0-9.]+$", out, re.M), out
