"""`--config MARCH=` takes what gcc and clang take for -march= (docs/cli.md, docs/runtimes.md)
and refuses what a shell or the compiler's command line would split or read as a flag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import runtime

from catenc.diagnostics import CatencError

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = str(ROOT / "samples/softmax.toml")
GOOD = ("armv8.2-a+fp16+dotprod", "x86-64-v3", "rv64gcv", "native", "znver4", "armv8.2-a", "rv64imafdc_zicsr")
BAD = ("x86-64 -mavx512f", "-mavx2", "+fp16", "x86-64-v3=1", "native'", 'native"', "native;rm", "$(id)", "a/b")


def catenc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "catenc", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("march", GOOD)
def test_compiler_spellings_are_one_march_flag(march: str) -> None:
    rt = runtime()
    config = rt.validate_config({"MARCH": march})
    assert rt.target_flags(config) == [f"-march={march}"]


@pytest.mark.parametrize("march", BAD)
def test_injection_is_refused(march: str) -> None:
    with pytest.raises(CatencError, match=r"^--config MARCH=.*: invalid value \(target CPU for -march="):
        runtime().validate_config({"MARCH": march})


def test_compile_takes_an_arm_march(tmp_path: Path) -> None:
    done = catenc("compile", SOFTMAX, "--config", "MARCH=armv8.2-a+fp16+dotprod", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out/softmax.manifest.json").read_text())
    assert manifest["runtime"]["config"]["MARCH"] == "armv8.2-a+fp16+dotprod"


@pytest.mark.parametrize("march", ["x86-64 -mavx512f", "-mavx2", "native;rm -rf x"])
def test_compile_refuses_an_injected_march(tmp_path: Path, march: str) -> None:
    done = catenc("compile", SOFTMAX, "--config", f"MARCH={march}", "-S", "-o", "out", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith(f"catenc: error: --config MARCH={march}: invalid value (target CPU for -march=")
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
