"""What every `catenc` command pays before it compiles: the compiler's answers to catenc's probes
(its predefined macros, whether it links OpenMP) kept in the user cache directory for the next
command (catenc/toolchain_memo.py, docs/cli.md "Compile cache"), and no YAML parser loaded for a
TOML file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MODEL = """\
[composite.scale]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 2"
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "model.toml").write_text(MODEL)
    return tmp_path


def fake_compiler(directory: Path, links_openmp: bool = True) -> Path:
    """A `cc` that logs each call's arguments, then runs the real C compiler (or refuses to link
    OpenMP, as clang without libomp does)."""
    real = next(p for p in ("clang", "gcc", "cc") if any(Path(d, p).exists() for d in os.environ["PATH"].split(":")))
    script = directory / "bin" / "cc"
    script.parent.mkdir()
    refuse = "" if links_openmp else 'case "$*" in *-fopenmp*) exit 1;; esac\n'
    script.write_text(f'#!/bin/sh\necho "$*" >> "{directory}/calls.log"\n{refuse}exec {real} "$@"\n')
    script.chmod(0o755)
    return script


def compile_with(work: Path, compiler: Path, *extra: str) -> list[str]:
    """Run `catenc compile -S` with `compiler`; the compiler calls it made."""
    log = work / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "CC": str(compiler), "CATENC_CACHE_DIR": str(work / "cache"), "CATENC_NO_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "model.toml", "-S", "-o", "out", *extra],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines() if log.exists() else []


def probes(calls: list[str]) -> list[str]:
    return [c for c in calls if "-dM -E" in c or "-fopenmp" in c]


def test_the_second_command_asks_the_compiler_nothing(work):
    compiler = fake_compiler(work)
    first = compile_with(work, compiler)
    assert any("-dM -E" in c for c in first) and any("-fopenmp" in c for c in first), first
    assert probes(compile_with(work, compiler)) == []
    assert probes(compile_with(work, compiler, "--config", "MARCH=")) != [], "other flags: asked again"


def test_a_changed_compiler_is_asked_again(work):
    compiler = fake_compiler(work)
    compile_with(work, compiler)
    stat = compiler.stat()
    os.utime(compiler, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert any("-dM -E" in c for c in compile_with(work, compiler))


def test_a_compiler_without_openmp_is_asked_every_time(work):
    """Installing the OpenMP runtime later must take effect: only a yes is kept."""
    compiler = fake_compiler(work, links_openmp=False)
    compile_with(work, compiler)
    second = compile_with(work, compiler)
    assert any("-fopenmp" in c for c in second) and not any("-dM -E" in c for c in second), second


def test_damaged_answers_are_asked_again_and_cache_clear_forgets_them(work):
    compiler = fake_compiler(work)
    compile_with(work, compiler)
    memo = work / "cache" / "toolchain"
    answers = sorted(memo.iterdir())
    assert len(answers) == 2
    for path in answers:
        path.write_text('{"key": 1, "answer": "garbage"')
    assert len(probes(compile_with(work, compiler))) == 2
    for path in answers:  # the right key, an answer of the other question's kind
        record = json.loads(path.read_text())
        record["answer"] = ["_LP64"] if record["answer"] is True else True
        path.write_text(json.dumps(record))
    assert len(probes(compile_with(work, compiler))) == 2
    env = {**os.environ, "CATENC_CACHE_DIR": str(work / "cache")}
    subprocess.run([sys.executable, "-m", "catenc", "cache", "clear"], env=env, check=True, capture_output=True)
    assert not memo.exists()
    assert len(probes(compile_with(work, compiler))) == 2


def test_a_toml_compile_loads_no_yaml_parser(work):
    script = textwrap.dedent(
        """
        import sys
        from catenc.cli import main
        try:
            main(["compile", "model.toml", "-S", "-o", "out"])
        except SystemExit as done:
            assert done.code == 0, done.code
        print("yaml" in sys.modules)
        """
    )
    env = {**os.environ, "CATENC_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
