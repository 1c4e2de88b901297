"""Internal compiler errors: exit 4, a message that blames catenc, a reproducer, no partial output.

catenc itself is not changed to provoke one: a runtime descriptor file (`--runtime bad.py`, user
code that catenc loads and trusts) supplies a renderer whose method raises, a renderer whose C
the toolchain rejects, or build commands that raise. Each run goes through the real command
line with `TMPDIR` pointing into the test's directory, so the reproducer lands there.

The contract (docs/cli.md): exit code 4; the message says it is catenc's fault and where a
reproducer was saved; that directory holds the input file(s) and the command line; no Python
traceback on the terminal; and (the atomic-output rule) no output file is left behind, while
outputs of an earlier successful run stay as they were.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MODEL = """
[composite.scale]
doc = "y = 2 x"
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 2"
"""

RAISING = """
from catenc.codegen.c import CRenderer
from catenc.runtime.descriptor import CRuntime


class BadRenderer(CRenderer):
    def kernel(self, *args, **kwargs):
        raise ZeroDivisionError("raised on purpose by the test's renderer")


RUNTIME = CRuntime(name="bad", renderer=BadRenderer)
"""

RAISING_LITERAL = """
from catenc.codegen.c import CRenderer
from catenc.runtime.descriptor import CRuntime


class BadRenderer(CRenderer):
    def literal(self, value, dtype):
        raise KeyError("raised on purpose by the test's renderer")


RUNTIME = CRuntime(name="badliteral", renderer=BadRenderer)
"""

INVALID_C = """
from catenc.codegen.c import CRenderer
from catenc.runtime.descriptor import CRuntime


class BadRenderer(CRenderer):
    kernel_qualifier = "static void @@ not C @@"


RUNTIME = CRuntime(name="badc", renderer=BadRenderer)
"""

RAISING_BUILD = """
from dataclasses import dataclass

from catenc.runtime.descriptor import CRuntime


@dataclass(frozen=True)
class BadToolchain(CRuntime):
    def build_commands(self, source, output, config, opt, kind):
        raise RuntimeError("raised on purpose by the test's toolchain")


RUNTIME = BadToolchain(name="badbuild")
"""

CRASHES = {
    "renderer_kernel_raises": (RAISING, "ZeroDivisionError"),
    "renderer_literal_raises": (RAISING_LITERAL, "KeyError"),
    "renderer_emits_invalid_c": (INVALID_C, "toolchain"),
    "build_commands_raise": (RAISING_BUILD, "RuntimeError"),
}

SAVED_RE = re.compile(r"reproducer (?:was )?saved (?:in|to|at) (?P<dir>\S+?)\.?$", re.M)


def catenc(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    crashes = cwd / "crashes"
    crashes.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(crashes)}
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    (tmp_path / "model.toml").write_text(textwrap.dedent(MODEL))
    return tmp_path


def write_runtime(work: Path, text: str) -> str:
    (work / "bad.py").write_text(textwrap.dedent(text))
    return "bad.py"


def reproducer_dir(result: subprocess.CompletedProcess, work: Path) -> Path:
    """The directory the message names, checked to exist (inside TMPDIR)."""
    m = SAVED_RE.search(result.stderr)
    assert m, f"no 'reproducer was saved in DIR' in:\n{result.stderr}"
    directory = Path(m["dir"])
    if not directory.is_absolute():
        directory = work / directory
    assert directory.is_dir(), f"{directory} does not exist"
    assert work / "crashes" in directory.parents, f"{directory} is not under TMPDIR"
    return directory


def assert_internal_error(result: subprocess.CompletedProcess, detail: str) -> None:
    stderr = result.stderr
    assert result.returncode == 4, f"exit {result.returncode}\n{stderr}"
    assert "internal compiler error" in stderr, stderr
    assert "bug in catenc" in stderr or "catenc's fault" in stderr, stderr
    assert detail in stderr, stderr
    assert "Traceback (most recent call last)" not in stderr, stderr
    assert "Traceback" not in result.stdout


def files_in(directory: Path) -> list[str]:
    """Every entry below directory (hidden ones included), relative."""
    if not directory.exists():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.mark.parametrize("crash", list(CRASHES))
def test_compile_crash_exits_4_with_a_reproducer(work: Path, crash: str) -> None:
    runtime_text, detail = CRASHES[crash]
    runtime = write_runtime(work, runtime_text)
    result = catenc(work, "compile", "model.toml", "-o", "out", "--runtime", runtime)
    assert_internal_error(result, detail)
    saved = reproducer_dir(result, work)
    # the input file, byte for byte
    assert (saved / "model.toml").read_bytes() == (work / "model.toml").read_bytes()
    # the command line, as run
    command_files = [p for p in saved.iterdir() if "command" in p.name or p.name in ("cmdline", "argv.txt")]
    assert command_files, f"no command line in {files_in(saved)}"
    command = command_files[0].read_text()
    words = shlex.split(command)
    for arg in ("compile", "model.toml", "-o", "out", "--runtime", runtime):
        assert arg in words, (arg, command)
    # nothing was left in the output directory: no outputs, no staging directory
    assert files_in(work / "out") == [], files_in(work / "out")
    assert not [p for p in work.iterdir() if p.suffix in (".c", ".h", ".so", ".json")]


def test_reproducer_is_saved_whatever_the_mode(work: Path) -> None:
    runtime = write_runtime(work, RAISING)
    for mode in (["-S"], ["-c"], ["--emit", "c,h"], ["-O0"], ["--test", "N=5"]):
        result = catenc(work, "compile", "model.toml", "-o", "out", "--runtime", runtime, *mode)
        assert_internal_error(result, "ZeroDivisionError")
        reproducer_dir(result, work)
        assert files_in(work / "out") == [], (mode, files_in(work / "out"))


def test_crash_keeps_earlier_outputs_intact(work: Path) -> None:
    good = catenc(work, "compile", "model.toml", "-o", "out")
    assert good.returncode == 0, good.stderr
    before = {name: (work / "out" / name).read_bytes() for name in files_in(work / "out")}
    assert "model.c" in before and "libmodel.so" in before
    runtime = write_runtime(work, INVALID_C)
    result = catenc(work, "compile", "model.toml", "-o", "out", "--runtime", runtime)
    assert_internal_error(result, "toolchain")
    after = {name: (work / "out" / name).read_bytes() for name in files_in(work / "out")}
    assert after == before  # no partial file, no leftover staging directory, nothing rewritten


def test_reproducer_holds_included_files_and_the_runtime_descriptor(work: Path) -> None:
    """Everything the failed run read is needed to reproduce it: the includes, and the runtime
    descriptor (the manifest lists it among the inputs too, docs/abi.md)."""
    (work / "lib").mkdir()
    (work / "lib" / "helpers.toml").write_text(
        textwrap.dedent("""
        [composite.twice]
        inputs = ["x: f32[N]"]
        outputs = ["y: f32[N]"]
        body = "y = x * 2"
        """)
    )
    (work / "model.toml").write_text(
        'include = ["lib/helpers.toml"]\n'
        + textwrap.dedent("""
        [composite.quad]
        inputs = ["x: f32[N]"]
        outputs = ["y: f32[N]"]
        body = "y = twice(twice(x))"
        """)
    )
    runtime = write_runtime(work, RAISING)
    result = catenc(work, "compile", "model.toml", "-o", "out", "--runtime", runtime)
    assert_internal_error(result, "ZeroDivisionError")
    saved = reproducer_dir(result, work)
    names = {p.name: p for p in saved.rglob("*") if p.is_file()}
    assert "model.toml" in names, sorted(names)
    assert "helpers.toml" in names, sorted(names)
    assert names["helpers.toml"].read_bytes() == (work / "lib" / "helpers.toml").read_bytes()
    assert "bad.py" in names, f"the runtime descriptor that crashed is not in the reproducer: {sorted(names)}"
    # and it reproduces: the saved command, run in the reproducer directory, crashes the same way
    command = next(p for p in saved.iterdir() if "command" in p.name).read_text()
    args = shlex.split(command)[1:]  # argv[0] is catenc's own path
    rerun = catenc(saved, *args)
    assert rerun.returncode == 4 and "ZeroDivisionError" in rerun.stderr, (args, rerun.stderr)


def test_test_runtime_crash_exits_4_with_a_reproducer(work: Path) -> None:
    runtime = write_runtime(work, RAISING)
    result = catenc(work, "test-runtime", "--runtime", runtime, "-k", "cumsum", "--no-primitives", "-o", "R.md")
    assert_internal_error(result, "ZeroDivisionError")
    saved = reproducer_dir(result, work)
    command = next(p for p in saved.iterdir() if "command" in p.name).read_text()
    assert "test-runtime" in shlex.split(command)
    assert not (work / "R.md").exists()


def test_user_errors_are_not_internal_errors(work: Path) -> None:
    # the other side of the line: a runtime descriptor that does not load, and bad input, exit 1
    (work / "broken.py").write_text("raise ImportError('no such thing')\n")
    result = catenc(work, "compile", "model.toml", "-o", "out", "--runtime", "broken.py")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("broken.py:1:1: error: runtime descriptor raised ImportError")
    assert "internal" not in result.stderr
    (work / "bad.toml").write_text('[composite.c]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = "\n')
    result = catenc(work, "compile", "bad.toml", "-o", "out")
    assert result.returncode == 1, result.stderr
    assert re.match(r"bad\.toml:\d+:\d+: error: ", result.stderr), result.stderr
    assert files_in(work / "crashes") == []  # no reproducer for user errors
