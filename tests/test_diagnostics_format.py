"""gcc-style rendering of CatencError (catenc.diagnostics)."""

from __future__ import annotations

from pathlib import Path

from catenc.diagnostics import (
    CatencError,
    Loc,
    SourceCache,
    format_diagnostic,
    read_source_line,
    remember_source,
)

MODEL = """\
[composite.f]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = \"\"\"
y = xx + 1
\"\"\"
"""


def reader(files: dict[str, str]):
    """A read_line over in-memory files."""

    def read_line(path: str, line: int) -> str | None:
        lines = files[path].split("\n") if path in files else []
        return lines[line - 1] if 1 <= line <= len(lines) else None

    return read_line


def test_error_with_note_exact_output() -> None:
    error = CatencError(
        "unknown name 'xx'",
        Loc("model.toml", 5, 5),
        notes=[("'x' declared here", Loc("model.toml", 2, 12))],
    )
    expected = (
        "model.toml:5:5: error: unknown name 'xx'\n"
        "y = xx + 1\n"
        "    ^\n"
        "model.toml:2:12: note: 'x' declared here\n"
        'inputs = ["x: f32[N]"]\n'
        "           ^"
    )
    assert format_diagnostic(error, reader({"model.toml": MODEL})) == expected


def test_attributes() -> None:
    loc = Loc("a.toml", 1, 2)
    error = CatencError("boom", loc, [("see", None)])
    assert error.message == "boom"
    assert error.loc == loc
    assert error.notes == (("see", None),)
    assert str(loc) == "a.toml:1:2"
    assert str(error) == "a.toml:1:2: boom"
    assert str(CatencError("plain")) == "plain"


def test_no_location() -> None:
    error = CatencError("no composite named 'gemm'", None, [("defined elsewhere", None)])
    assert format_diagnostic(error, reader({})) == (
        "catenc: error: no composite named 'gemm'\ncatenc: note: defined elsewhere"
    )


def test_missing_source_line_prints_header_only() -> None:
    error = CatencError("bad", Loc("gone.toml", 3, 1), [("here", Loc("model.toml", 99, 1))])
    assert format_diagnostic(error, reader({"model.toml": MODEL})) == (
        "gone.toml:3:1: error: bad\nmodel.toml:99:1: note: here"
    )


def test_caret_keeps_tabs_of_the_source_line() -> None:
    files = {"t.yaml": "a:\n\t\tb = x  +\ty\n"}
    error = CatencError("bad operand", Loc("t.yaml", 2, 12))  # the 'y'
    assert format_diagnostic(error, reader(files)) == (
        "t.yaml:2:12: error: bad operand\n\t\tb = x  +\ty\n\t\t        \t^"
    )


def test_caret_past_end_of_line() -> None:
    error = CatencError("expected ']'", Loc("m.toml", 1, 6))
    assert format_diagnostic(error, reader({"m.toml": "a = ["})) == ("m.toml:1:6: error: expected ']'\na = [\n     ^")


def test_default_reader_reads_file_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "model.toml"
    path.write_bytes(b"a = 1\r\nbb = \xff2\r\n")
    error = CatencError("invalid value", Loc(str(path), 2, 6))
    assert format_diagnostic(error) == (f"{path}:2:6: error: invalid value\nbb = \ufffd2\n     ^")


def test_remembered_source_wins_over_disk() -> None:
    remember_source("virtual/model.yaml", "a: 1\nb: [x\n")
    assert read_source_line("virtual/model.yaml", 2) == "b: [x"
    error = CatencError("unclosed '['", Loc("virtual/model.yaml", 2, 4))
    assert format_diagnostic(error) == ("virtual/model.yaml:2:4: error: unclosed '['\nb: [x\n   ^")


def test_source_cache_reads_each_file_once(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("first\nsecond\n")
    cache = SourceCache()
    assert cache.read_line(str(path), 2) == "second"
    path.write_text("changed\n")
    assert cache.read_line(str(path), 1) == "first"
    assert cache.read_line(str(path), 3) == ""  # after the final newline
    assert cache.read_line(str(path), 4) is None
    assert cache.read_line(str(tmp_path / "missing.toml"), 1) is None
    cache.clear()
    assert cache.read_line(str(path), 1) == "changed"
