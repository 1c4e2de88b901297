"""Every example in docs/ works as written.

Each ```toml / ```yaml block of docs/language.md is a whole composite file: it is compiled and run
with `--test` at its own `test.sizes` (exit 0), or, when an `<!-- expect-error: MESSAGE -->` line
comes before it, it must fail with exit 1 and that message, and the ```text block after it must be
the diagnostic exactly as printed. The C program of docs/abi.md is compiled against the header
catenc emits for the composite before it and run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from catenc.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
EXPECT = re.compile(r"<!-- expect-error: (.*?) -->\n\Z")


@dataclass(frozen=True)
class Example:
    """One fenced block: its language, text, line in the doc, and what it must do."""

    lang: str
    text: str
    line: int
    expect_error: str | None
    shown: str | None  # the ```text block right after an error example

    @property
    def id(self) -> str:
        return f"line{self.line}"

    @property
    def name(self) -> str:
        """The first composite's name, which the diagnostic shown in the doc uses as the file name."""
        found = re.search(r"^\[composite\.(\w+)\]|^  (\w+):$", self.text, re.M)
        return next(g for g in found.groups() if g)


def examples(doc: str, langs: tuple[str, ...]) -> list[Example]:
    text = (DOCS / doc).read_text()
    blocks = list(FENCE.finditer(text))
    found = []
    for k, block in enumerate(blocks):
        if block.group(1) not in langs:
            continue
        expect = EXPECT.search(text, 0, block.start())
        following = blocks[k + 1] if k + 1 < len(blocks) else None
        shown = None
        if expect and following and following.group(1) == "text" and not text[block.end() : following.start()].strip():
            shown = following.group(2)
        line = text.count("\n", 0, block.start()) + 1
        found.append(Example(block.group(1), block.group(2), line, expect.group(1) if expect else None, shown))
    return found


LANGUAGE = examples("language.md", ("toml", "yaml"))


def run_catenc(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def test_the_reference_has_examples_of_both_kinds():
    assert sum(e.expect_error is None for e in LANGUAGE) >= 15
    assert sum(e.lang == "yaml" for e in LANGUAGE) >= 2
    assert all(e.shown for e in LANGUAGE if e.expect_error), "every error example shows its diagnostic"


@pytest.mark.parametrize("example", [e for e in LANGUAGE if e.expect_error is None], ids=lambda e: e.id)
def test_language_example_compiles_and_matches_its_reference(example: Example, tmp_path: Path):
    path = tmp_path / f"example.{example.lang}"
    path.write_text(example.text)
    code, output = run_catenc(["compile", str(path), "-o", str(tmp_path / "out"), "--test", ""])
    assert code == 0, f"docs/language.md:{example.line}\n{output}"
    assert " ok" in output and "MISMATCH" not in output, output


@pytest.mark.parametrize("example", [e for e in LANGUAGE if e.expect_error], ids=lambda e: e.id)
def test_language_error_example_prints_the_diagnostic_shown(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    name = f"{example.name}.{example.lang}"
    Path(name).write_text(example.text)
    code, output = run_catenc(["compile", name, "-o", "out", "-S"])
    assert code == 1, output
    assert f"error: {example.expect_error}" in output
    assert output.strip() == example.shown.strip(), f"docs/language.md:{example.line}"
    assert not Path("out").exists(), "nothing is written after an error"


def test_abi_c_example_runs(tmp_path: Path):
    (composite,) = [e for e in examples("abi.md", ("toml",)) if "[composite.rmsnorm]" in e.text]
    (program,) = [e for e in examples("abi.md", ("c",)) if '"rmsnorm.h"' in e.text]
    (tmp_path / "rmsnorm.toml").write_text(composite.text)
    (tmp_path / "main.c").write_text(program.text)
    code, output = run_catenc(["compile", str(tmp_path / "rmsnorm.toml"), "-o", str(tmp_path), "-S"])
    assert code == 0, output
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler is required"
    build = [cc, "-std=c99", "-O2", "-o", str(tmp_path / "main"), str(tmp_path / "main.c"), str(tmp_path / "rmsnorm.c")]
    subprocess.run([*build, "-lm"], check=True, cwd=tmp_path)
    done = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok"), done.stdout


MODEL = """
include = ["part.toml"]
[composite.model]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = twice(x) + 1.0"
"""
PART = """
[composite.twice]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 2.0"
"""


def test_cli_makefile_example_rebuilds_only_when_an_input_changes(tmp_path: Path):
    """The first Makefile of docs/cli.md: its depfile names the included file, and a rebuild
    whose outputs did not change still leaves them newer than the inputs, so Make settles."""
    (makefile, *_) = examples("cli.md", ("make",))
    (tmp_path / "Makefile").write_text(makefile.text)
    (tmp_path / "model.toml").write_text(MODEL)
    (tmp_path / "part.toml").write_text(PART)
    catenc = f"CATENC={sys.executable} -m catenc"

    def make(*args: str) -> int:
        return subprocess.run(["make", catenc, *args], cwd=tmp_path, capture_output=True, timeout=300).returncode

    assert make() == 0
    assert (tmp_path / "build/model/libmodel.so").is_file()
    assert make("-q") == 0, "nothing to do right after a build"
    an_hour_ago = time.time() - 3600
    for path in (tmp_path / "build/model").iterdir():
        os.utime(path, (an_hour_ago, an_hour_ago))
    os.utime(tmp_path / "part.toml", (an_hour_ago + 60, an_hour_ago + 60))
    assert make("-q") == 1, "an included file newer than the library makes it out of date"
    assert make() == 0
    assert make("-q") == 0, "the rebuild (same content) leaves every output newer than its inputs"
