"""User errors, reported gcc-style by the `catenc compile` command (docs/cli.md).

Every case writes a composite file into a temporary directory and runs catenc as a user
would (a subprocess, from that directory). The first line of stderr must be
`FILE:LINE:COL: error: MESSAGE`, followed by the offending source line and a caret under
the column; the exit code is 1 and there is never a Python traceback.

Most cases are written once as data and rendered both as TOML (bodies as `\"\"\"` strings) and as
YAML (bodies as `|` blocks, indented), so a position inside a multi-line body must map back to
the line and column of the file itself. The expected place is given as a piece of text that
names the line (`at`) and a token of that line (`token`); the column must point inside the
token (or at its first character, where the place is not a judgement call).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")
NOTE_RE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): note: (?P<msg>.+)$")


def catenc(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --------------------------------------------------------------------------- #
# rendering composites as TOML and YAML
# --------------------------------------------------------------------------- #


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def to_toml(comps: dict, top: dict | None = None) -> str:
    lines = [f"{key} = {toml_value(value)}" for key, value in (top or {}).items()]
    for name, definition in comps.items():
        lines += ["", f"[composite.{name}]"]
        for key, value in definition.items():
            if key == "body":
                lines.append('body = """')
                lines += value.strip("\n").split("\n")
                lines.append('"""')
            else:
                lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def to_yaml(comps: dict, top: dict | None = None) -> str:
    # JSON flow values are valid YAML; bodies are literal blocks indented by six spaces.
    lines = [f"{key}: {json.dumps(value)}" for key, value in (top or {}).items()]
    lines.append("composite:")
    for name, definition in comps.items():
        lines.append(f"  {name}:")
        for key, value in definition.items():
            if key == "body":
                lines.append("    body: |")
                lines += ["      " + line if line else "" for line in value.strip("\n").split("\n")]
            else:
                lines.append(f"    {key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


RENDER = {"toml": to_toml, "yaml": to_yaml}


def header(name: str) -> tuple[str, str]:
    """The `at` of a composite's own line: `[composite.NAME]` in TOML, `  NAME:` in YAML."""
    return ("header", name)


def find_line(text: str, at) -> int:
    """1-based number of the one line of text that contains `at`."""
    lines = text.split("\n")
    if isinstance(at, tuple):
        _, name = at
        hits = [n for n, line in enumerate(lines, 1) if line.strip() in (f"[composite.{name}]", f"{name}:")]
    else:
        hits = [n for n, line in enumerate(lines, 1) if at in line]
    assert len(hits) == 1, f"{at!r} must name exactly one line of\n{text}"
    return hits[0]


def token_span(line_text: str, token: str) -> tuple[int, int]:
    """1-based first column of `token` in the line, and one past its last."""
    start = line_text.find(token)
    assert start >= 0, f"{token!r} not in {line_text!r}"
    return start + 1, start + 1 + len(token)


# --------------------------------------------------------------------------- #
# checking one diagnostic
# --------------------------------------------------------------------------- #


@dataclass
class Diagnostic:
    file: str
    line: int
    col: int
    message: str
    lines: list[str]


def parse_error(result: subprocess.CompletedProcess) -> Diagnostic:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal compiler error" not in result.stderr, result.stderr
    lines = result.stderr.rstrip("\n").split("\n")
    match = DIAG_RE.match(lines[0])
    assert match, f"first line is not FILE:LINE:COL: error: ...\n{result.stderr}"
    return Diagnostic(match["file"], int(match["line"]), int(match["col"]), match["msg"], lines)


def check_source_and_caret(diag: Diagnostic, source_line: str, first: int = 1) -> None:
    """After the diagnostic line `first - 1`: the source line, then a caret under the column."""
    assert len(diag.lines) > first + 1, "\n".join(diag.lines)
    assert diag.lines[first] == source_line, "\n".join(diag.lines)
    caret = diag.lines[first + 1]
    assert caret[: diag.col - 1].strip() == "", "\n".join(diag.lines)
    assert caret[diag.col - 1 : diag.col] == "^", "\n".join(diag.lines)


def check_at(
    diag: Diagnostic,
    file: str,
    text: str,
    at,
    token: str | None = None,
    exact: bool = False,
) -> None:
    line = find_line(text, at)
    source_line = text.split("\n")[line - 1]
    if token is None:
        token = at[1] if isinstance(at, tuple) else at
    start, end = token_span(source_line, token)
    where = f"{file}:{line}:{start}..{end - 1}"
    shown = "\n".join(diag.lines)
    assert diag.file == file, f"expected {where}\n{shown}"
    assert diag.line == line, f"expected {where}\n{shown}"
    if exact:
        assert diag.col == start, f"expected {file}:{line}:{start}\n{shown}"
    else:
        assert start <= diag.col < end, f"expected {where}\n{shown}"
    check_source_and_caret(diag, source_line)


def notes(diag: Diagnostic) -> list[tuple[str, int, int, str]]:
    found = []
    for line in diag.lines[1:]:
        match = NOTE_RE.match(line)
        if match:
            found.append((match["file"], int(match["line"]), int(match["col"]), match["msg"]))
    return found


# --------------------------------------------------------------------------- #
# the cases, each in TOML and in YAML
# --------------------------------------------------------------------------- #

XN = {"inputs": ["x: f32[N]"], "outputs": ["y: f32[N]"]}


@dataclass
class Case:
    id: str
    comps: dict
    at: object
    words: tuple[str, ...]
    token: str | None = None
    exact: bool = False
    top: dict = field(default_factory=dict)
    args: tuple[str, ...] = ()
    note_at: object = None  # a note must point at this line


CASES = [
    Case(
        "unknown_top_level_key",
        {"f": {**XN, "body": "y = x"}},
        at="composites",
        top={"composites": 3},
        words=("composites", "composite", "include"),
        exact=True,
    ),
    Case(
        "unknown_composite_key",
        {"f": {"inputs": ["x: f32[N]"], "outptus": ["y: f32[N]"], "body": "y = x"}},
        at="outptus",
        words=("outptus", "outputs"),
        exact=True,
    ),
    Case(
        "missing_outputs",
        {"f": {"inputs": ["x: f32[N]"], "body": "y = x"}},
        at=header("f"),
        words=("outputs",),
    ),
    Case(
        "bad_declaration",
        {"f": {"inputs": ["x f32[N]"], "outputs": ["y: f32[N]"], "body": "y = x"}},
        at="x f32[N]",
        words=("x f32[N]",),
    ),
    Case(
        "unknown_dtype",
        {"f": {"inputs": ["x: f31[N]"], "outputs": ["y: f32[N]"], "body": "y = x"}},
        at="x: f31[N]",
        words=("f31",),
    ),
    Case(
        "unknown_name",
        {"f": {**XN, "body": "t = x * 2\n\ny = xx + t"}},
        at="y = xx + t",
        token="xx",
        exact=True,
        words=("xx",),
    ),
    Case(
        "unknown_function",
        {"f": {**XN, "body": "t = x * 2\ny = frobnicate(t)"}},
        at="y = frobnicate(t)",
        token="frobnicate",
        exact=True,
        words=("frobnicate",),
    ),
    Case(
        "dtype_mismatch_suggests_cast",
        {
            "f": {
                "inputs": ["x: f32[N]", "i: i32[N]"],
                "outputs": ["y: f32[N]"],
                "body": "t = x * 2\ny = x + i",
            }
        },
        at="y = x + i",
        token="x + i",
        words=("f32", "i32", "cast"),
    ),
    Case(
        "true_division_of_integers",
        {
            "f": {
                "inputs": ["i: i32[N]", "j: i32[N]"],
                "outputs": ["y: i32[N]"],
                "body": "t = i + j\ny = t / j",
            }
        },
        at="y = t / j",
        token="t / j",
        words=("//", "cast"),
    ),
    Case(
        "broadcast_shape_mismatch",
        {
            "f": {
                "inputs": ["x: f32[N]", "z: f32[M]"],
                "outputs": ["y: f32[N]"],
                "body": "t = x * 2\ny = t + z",
            }
        },
        at="y = t + z",
        token="t + z",
        words=("N", "M"),
    ),
    Case(
        "matmul_inner_dim_mismatch",
        {
            "f": {
                "inputs": ["A: f32[M, K]", "B: f32[N, K]"],
                "outputs": ["C: f32[M, K]"],
                "body": "D = A * 2\nC = D @ B",
            }
        },
        at="C = D @ B",
        token="D @ B",
        words=("K", "N"),
    ),
    Case(
        "assigned_twice",  # in one statement: a name may be assigned again in the next (docs/language.md §4)
        {"f": {**XN, "body": "t = x + 1\nm, m = moments(t)\ny = t"}},
        at="m, m = moments",
        token="m, m",
        words=("m", "twice"),
    ),
    Case(
        "output_never_assigned",
        {"f": {"inputs": ["x: f32[N]"], "outputs": ["y: f32[N]", "z: f32[N]"], "body": "y = x"}},
        at="z: f32[N]",
        words=("z",),
    ),
    Case(
        "index_out_of_bounds",
        {"f": {**XN, "body": "t = x * 2\ny[i] = x[i + 1]"}},
        at="y[i] = x[i + 1]",
        token="i + 1",
        words=("x",),
    ),
    Case(
        "index_extents_disagree",
        {
            "f": {
                "inputs": ["x: f32[N]", "z: f32[M]"],
                "outputs": ["y: f32[N]"],
                "body": "t = x * 2\ny[i] = t[i] + z[i]",
            }
        },
        at="y[i] = t[i] + z[i]",
        token="z[i]",
        words=("N", "M"),
        note_at="y[i] = t[i] + z[i]",
    ),
    Case(
        "unbound_index",
        {"f": {**XN, "body": "t = x * 2\ny[i] = t[i] * x[j]"}},
        at="y[i] = t[i] * x[j]",
        token="j",
        exact=True,
        words=("j",),
    ),
    Case(
        "wrong_arity",
        {"f": {**XN, "body": "t = x * 2\ny = exp(t, t)"}},
        at="y = exp(t, t)",
        token="exp(t, t)",
        words=("exp",),
    ),
    Case(
        "float_function_of_integers",
        {"f": {"inputs": ["i: i32[N]"], "outputs": ["y: f32[N]"], "body": "t = i * 2\ny = erfc(t)"}},
        at="y = erfc(t)",
        token="erfc(t)",
        words=("erfc", "float", "i32", "cast"),
    ),
    Case(
        "unknown_keyword_argument",
        {
            "f": {
                "inputs": ["x: f32[N, D]"],
                "outputs": ["y: f32[N]"],
                "body": "t = x * 2\ny = sum(t, axs=1)",
            }
        },
        at="y = sum(t, axs=1)",
        token="axs",
        words=("axs",),
    ),
    Case(
        "composite_call_wrong_number_of_inputs",
        {
            "g": {
                "inputs": ["a: f32[N]", "b: f32[N]"],
                "outputs": ["c: f32[N]"],
                "body": "c = a + b",
            },
            "f": {**XN, "body": "t = x * 2\ny = g(t)"},
        },
        at="y = g(t)",
        token="g(t)",
        words=("g",),
    ),
    Case(
        "rank_polymorphic_composite_named",
        {
            "sm": {
                "inputs": ["x: f32[..., N]"],
                "outputs": ["y: f32[..., N]"],
                "body": "y = x * 2",
            },
            "f": {**XN, "body": "y = sm(x)"},
        },
        at=header("sm"),
        args=("--composite", "sm"),
        words=("sm",),
    ),
    Case(
        "constraint_never_holds",
        {"f": {**XN, "where": ["N < 0"], "body": "y = x"}},
        at="N < 0",
        words=("N < 0",),
    ),
    Case(
        "test_sizes_missing_a_symbol",
        {"f": {**XN, "body": "y = x * 2"}},
        at=header("f"),
        args=("--test", ""),
        words=("N",),
    ),
]


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_user_error(tmp_path: Path, case: Case, fmt: str) -> None:
    name = f"model.{fmt}"
    text = RENDER[fmt](case.comps, case.top)
    (tmp_path / name).write_text(text)
    args = case.args if "--test" in case.args else ("-S", *case.args)
    diag = parse_error(catenc(tmp_path, "compile", name, "-o", "out", *args))
    check_at(diag, name, text, case.at, case.token, case.exact)
    for word in case.words:
        assert word in diag.message, f"{word!r} not in: {diag.message}"
    if case.note_at is not None:
        line = find_line(text, case.note_at)
        assert any(f == name and n == line for f, n, _, _ in notes(diag)), "\n".join(diag.lines)
    if case.id == "unknown_composite_key":
        assert re.search(r"(mean|closest)\W[^;]*'?outputs", diag.message), diag.message
    if case.id == "rank_polymorphic_composite_named":
        assert "..." in diag.message or "rank" in diag.message, diag.message


# --------------------------------------------------------------------------- #
# cases that need more than one file or hand-written text
# --------------------------------------------------------------------------- #


TOML_SYNTAX = """\
[composite.f]
inputs = ["x: f32[N]"]
outputs = = ["y: f32[N]"]
body = "y = x"
"""

YAML_SYNTAX = """\
composite:
  f:
    inputs: ["x: f32[N]"]
     outputs: ["y: f32[N]"]
    body: "y = x"
"""


def test_invalid_toml_syntax(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(TOML_SYNTAX)
    diag = parse_error(catenc(tmp_path, "compile", "bad.toml", "-S", "-o", "out"))
    check_at(diag, "bad.toml", TOML_SYNTAX, "outputs = =", token="= [")
    assert "TOML" in diag.message


def test_invalid_yaml_syntax(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(YAML_SYNTAX)
    diag = parse_error(catenc(tmp_path, "compile", "bad.yaml", "-S", "-o", "out"))
    check_at(diag, "bad.yaml", YAML_SYNTAX, "     outputs", token="outputs:")
    assert "YAML" in diag.message


def test_unterminated_toml_body_string(tmp_path: Path) -> None:
    text = '[composite.f]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x\n'
    (tmp_path / "bad.toml").write_text(text)
    diag = parse_error(catenc(tmp_path, "compile", "bad.toml", "-S", "-o", "out"))
    assert diag.file == "bad.toml" and diag.line == 4, "\n".join(diag.lines)


def test_single_line_toml_body_column(tmp_path: Path) -> None:
    """A body on the key's own line: the column counts from the start of the file line."""
    text = '[composite.f]\ninputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nbody = "y = x + xx"\n'
    (tmp_path / "m.toml").write_text(text)
    diag = parse_error(catenc(tmp_path, "compile", "m.toml", "-S", "-o", "out"))
    check_at(diag, "m.toml", text, "body =", token="xx", exact=True)


def test_body_position_with_toml_escapes_and_comments(tmp_path: Path) -> None:
    text = (
        "[composite.f]\n"
        'inputs = ["x: f32[N]"]\n'
        'outputs = ["y: f32[N]"]\n'
        'body = """\\\n'  # a line-ending backslash: the body starts on the next line
        "    # a comment line\n"
        "t = x * 2   # \\u00e9\n"
        "y = t + zz\n"
        '"""\n'
    )
    (tmp_path / "m.toml").write_text(text)
    diag = parse_error(catenc(tmp_path, "compile", "m.toml", "-S", "-o", "out"))
    check_at(diag, "m.toml", text, "y = t + zz", token="zz", exact=True)


def test_yaml_block_body_with_deeper_indentation(tmp_path: Path) -> None:
    text = (
        "composite:\n"
        "    f:\n"
        '        inputs: ["x: f32[N]"]\n'
        '        outputs: ["y: f32[N]"]\n'
        "        body: |\n"
        "            t = x * 2\n"
        "\n"
        "            # comment\n"
        "            y = t + zz\n"
    )
    (tmp_path / "m.yaml").write_text(text)
    diag = parse_error(catenc(tmp_path, "compile", "m.yaml", "-S", "-o", "out"))
    check_at(diag, "m.yaml", text, "y = t + zz", token="zz", exact=True)


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_composite_defined_twice_across_include(tmp_path: Path, fmt: str) -> None:
    g = {"inputs": ["a: f32[N]"], "outputs": ["b: f32[N]"], "body": "b = a"}
    main = RENDER[fmt]({"g": g, "f": {**XN, "body": "y = g(x)"}}, {"include": [f"inc.{fmt}"]})
    inc = RENDER[fmt]({"g": g})
    (tmp_path / f"main.{fmt}").write_text(main)
    (tmp_path / f"inc.{fmt}").write_text(inc)
    diag = parse_error(catenc(tmp_path, "compile", f"main.{fmt}", "-S", "-o", "out"))
    assert "g" in diag.message
    places = {f"main.{fmt}": main, f"inc.{fmt}": inc}
    assert diag.file in places, "\n".join(diag.lines)
    check_at(diag, diag.file, places[diag.file], header("g"))
    other = next(p for p in places if p != diag.file)
    note_places = [(f, n) for f, n, _, _ in notes(diag)]
    assert (other, find_line(places[other], header("g"))) in note_places, "\n".join(diag.lines)


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_include_cycle(tmp_path: Path, fmt: str) -> None:
    g = {"inputs": ["a: f32[N]"], "outputs": ["b: f32[N]"], "body": "b = a"}
    a = RENDER[fmt]({"f": {**XN, "body": "y = x"}}, {"include": [f"b.{fmt}"]})
    b = RENDER[fmt]({"g": g}, {"include": [f"a.{fmt}"]})
    (tmp_path / f"a.{fmt}").write_text(a)
    (tmp_path / f"b.{fmt}").write_text(b)
    diag = parse_error(catenc(tmp_path, "compile", f"a.{fmt}", "-S", "-o", "out"))
    assert "cycle" in diag.message or "circular" in diag.message, diag.message
    places = {f"a.{fmt}": (a, f"b.{fmt}"), f"b.{fmt}": (b, f"a.{fmt}")}
    assert diag.file in places, "\n".join(diag.lines)
    text, included = places[diag.file]
    check_at(diag, diag.file, text, "include", token=f'"{included}"')


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_missing_include(tmp_path: Path, fmt: str) -> None:
    text = RENDER[fmt]({"f": {**XN, "body": "y = x"}}, {"include": ["nope.toml"]})
    (tmp_path / f"m.{fmt}").write_text(text)
    diag = parse_error(catenc(tmp_path, "compile", f"m.{fmt}", "-S", "-o", "out"))
    check_at(diag, f"m.{fmt}", text, "include", token='"nope.toml"')
    assert "nope.toml" in diag.message


def test_error_in_included_file_is_reported_there(tmp_path: Path) -> None:
    main = to_toml({"f": {**XN, "body": "y = g(x)"}}, {"include": ["lib/inc.toml"]})
    inc = to_toml({"g": {"inputs": ["a: f32[N]"], "outputs": ["b: f32[N]"], "body": "b = a + qq"}})
    (tmp_path / "lib").mkdir()
    (tmp_path / "main.toml").write_text(main)
    (tmp_path / "lib" / "inc.toml").write_text(inc)
    diag = parse_error(catenc(tmp_path, "compile", "main.toml", "-S", "-o", "out"))
    check_at(diag, "lib/inc.toml", inc, "b = a + qq", token="qq", exact=True)


# --------------------------------------------------------------------------- #
# command-line mistakes that are user errors (exit 1), not usage errors
# --------------------------------------------------------------------------- #


def first_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal compiler error" not in result.stderr, result.stderr
    return result.stderr.split("\n")[0]


def test_define_of_unknown_name(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(to_toml({"f": {**XN, "body": "y = x"}}))
    line = first_line(catenc(tmp_path, "compile", "m.toml", "-S", "-o", "out", "-D", "Q=3"))
    # not a place in the file: `catenc: error:` (or `m.toml: error:`) and the name
    assert re.match(r"^(catenc|m\.toml)(:\d+:\d+)?: error: ", line), line
    assert "Q" in line
    assert not (tmp_path / "out" / "m.c").exists()


def test_missing_input_file(tmp_path: Path) -> None:
    line = first_line(catenc(tmp_path, "compile", "nope.toml", "-S", "-o", "out"))
    assert re.match(r"^(catenc|nope\.toml): error: ", line), line
    assert "nope.toml" in line
    assert "no such file" in line.lower() or "not found" in line.lower()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
