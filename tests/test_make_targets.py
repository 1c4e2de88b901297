"""`make demo` and `make gpt2` compile nothing when nothing changed, and recompile when an input did.

Cheap: the Makefile runs in a scratch tree holding only the files its rules name, with mtimes set
by hand (inputs old, build stamps new), under `make -n` / `make -q`, so nothing is built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_FILES = ["gemm.toml", "mlp.yaml", "softmax.toml", "layernorm.toml", "attention.toml", "conv2d.toml"]
INPUTS = [
    "pyproject.toml",
    "catenc/driver.py",
    "catenc/codegen/templates/vecmath.c.j2",
    "ops/activations.toml",
    "runtimes/clang.py",
    "samples/gpt2/gpt2.toml",
    "samples/gpt2/main.c",
    *(f"samples/{name}" for name in SAMPLE_FILES),
]
STAMPS = [".venv/.setup-stamp", "build/gpt2.compiled", "build/gpt2/gpt2", "build/gpt2/weights.safetensors"]
STAMPS += [f"build/samples/{name.split('.')[0]}.tested" for name in SAMPLE_FILES]
OLD, NEW = 1_000_000_000, 1_000_000_100


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A scratch tree: the Makefile, its inputs (old) and what a finished build leaves (new)."""
    assert shutil.which("make"), "make is a precondition"
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for name, stamp in [(n, OLD) for n in INPUTS] + [(n, NEW) for n in STAMPS]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        os.utime(path, (stamp, stamp))
    return tmp_path


def make(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=tree, capture_output=True, text=True)


BUILT = ["build/gpt2.compiled", "build/gpt2/gpt2", *(s for s in STAMPS if s.endswith(".tested"))]


def test_nothing_to_rebuild_when_nothing_changed(tree: Path) -> None:
    assert make(tree, "-q", *BUILT).returncode == 0
    planned = make(tree, "-n", "gpt2").stdout
    assert "catenc compile" not in planned and "main.c" not in planned, planned
    assert "build/gpt2/gpt2 build/gpt2/weights.safetensors -n 32" in planned  # generating is the point


@pytest.mark.parametrize(
    "changed, rebuilt",
    [
        ("ops/activations.toml", BUILT),
        ("catenc/codegen/templates/vecmath.c.j2", BUILT),
        ("samples/gpt2/main.c", ["build/gpt2/gpt2"]),
        ("samples/mlp.yaml", ["build/samples/mlp.tested"]),
    ],
)
def test_a_changed_input_rebuilds_what_depends_on_it(tree: Path, changed: str, rebuilt: list[str]) -> None:
    os.utime(tree / changed, (NEW + 100, NEW + 100))
    for target in BUILT:
        assert make(tree, "-q", target).returncode == (1 if target in rebuilt else 0), target
