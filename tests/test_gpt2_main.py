"""samples/gpt2/main.c, the C program `make gpt2` builds: compiled against the composite's
libgpt2.so, it generates the same greedy continuation as the PyTorch reference reading the same
weights, and refuses a broken weights file with a message (exit 1, no crash)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "gpt2"
sys.path.insert(0, str(SAMPLE))

import reference  # noqa: E402  (samples/gpt2/reference.py)
import weights  # noqa: E402  (samples/gpt2/weights.py)

PROMPT = [464, 2068, 7586]
NEW_TOKENS = 8  # with the seed-0 weights the continuation changes token at the 7th


def c_compiler() -> str:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    pytest.fail("no C compiler (cc, gcc or clang) on PATH")


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """build/gpt2/gpt2 as `make gpt2` builds it, in a temporary directory."""
    out = tmp_path_factory.mktemp("gpt2_main")
    compiled = run([sys.executable, "-m", "catenc", "compile", SAMPLE / "gpt2.toml", "-o", out])
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert (out / "gpt2.h").is_file() and (out / "libgpt2.so").is_file()
    exe = out / "gpt2"
    cc = [c_compiler(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", f"-I{out}", SAMPLE / "main.c"]
    built = run([*cc, "-o", exe, f"-L{out}", "-lgpt2", "-lm", "-Wl,-rpath,$ORIGIN"])
    assert built.returncode == 0, built.stdout + built.stderr
    return exe


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpt2_weights") / "weights.safetensors"
    weights.write(path, weights.random_weights(0))
    return path


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")  # torch over the mmap
def test_main_generates_the_reference_continuation(program, weights_file):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # the rpath finds libgpt2.so
    args = [program, weights_file, "-n", NEW_TOKENS, "-p", " ".join(map(str, PROMPT))]
    result = run(args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    got = [int(t) for t in lines[0].split()]
    want = reference.Gpt2(weights.read(weights_file)).generate(np.array(PROMPT), NEW_TOKENS)
    assert got == want
    assert lines[1].startswith(f"prefill: {len(PROMPT)} tokens in ")
    assert lines[2].startswith(f"decode: {NEW_TOKENS - 1} tokens in ") and lines[2].endswith(" tokens/s")


def header_end(path: Path) -> int:
    with open(path, "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")


@pytest.mark.parametrize(
    "keep, message",
    [
        ("header+1MiB", "truncated"),  # the data cut short: a tensor ends past the end of the file
        ("100", "the header claims"),  # the JSON header cut short
        ("0", "too short"),
    ],
)
def test_a_truncated_weights_file_is_refused(program, weights_file, tmp_path, keep, message):
    size = header_end(weights_file) + (1 << 20) if keep == "header+1MiB" else int(keep)
    broken = tmp_path / "broken.safetensors"
    with open(weights_file, "rb") as f:
        broken.write_bytes(f.read(size))
    result = run([program, broken, "-n", 2])
    assert result.returncode == 1, (result.returncode, result.stderr)  # not a signal: no crash
    assert result.stdout == ""
    assert "error:" in result.stderr and message in result.stderr and str(broken) in result.stderr


def test_a_wrong_dtype_is_refused(program, weights_file, tmp_path):
    """A header naming F16 for a tensor (the rest of the file as it was)."""
    data = bytearray(weights_file.read_bytes()[: header_end(weights_file)])
    at = data.index(b'"wpe":{"dtype":"F32"')
    data[at : at + 20] = b'"wpe":{"dtype":"F16"'
    broken = tmp_path / "f16.safetensors"
    broken.write_bytes(bytes(data))
    result = run([program, broken])
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "tensor 'wpe' has dtype F16" in result.stderr
