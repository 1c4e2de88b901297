"""Loading composite files with the position of every key, value and string character."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from catenc.diagnostics import CatencError, Loc
from catenc.frontend.source import SourceFile, load_source


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return str(path)


def load(tmp_path: Path, name: str, text: str | bytes) -> SourceFile:
    return load_source(write(tmp_path, name, text), display_path=name)


def pos(text: str, needle: str, occurrence: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the ``occurrence``-th ``needle`` in ``text``, by lines."""
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        col = line.find(needle)
        while col >= 0:
            seen += 1
            if seen == occurrence:
                return number, col + 1
            col = line.find(needle, col + 1)
    raise AssertionError(f"{needle!r} not in text")


def at(source: SourceFile, needle: str, occurrence: int = 1) -> Loc:
    return Loc(source.path, *pos(source.text, needle, occurrence))


def assert_token(source: SourceFile, keypath: tuple, token: str, occurrence: int = 1) -> None:
    """``token`` inside the string at ``keypath`` is reported where it is written in the file."""
    value = source.data
    for key in keypath:
        value = value[key]
    offset = -1
    for _ in range(occurrence):
        offset = value.index(token, offset + 1)
    assert source.string_loc(keypath, offset) == at(source, token, occurrence)


# --------------------------------------------------------------------------- #
# TOML strings
# --------------------------------------------------------------------------- #

BODY = ("composite", "f", "body")


def test_toml_basic_string_escapes(tmp_path: Path) -> None:
    text = '[composite.f]\nbody = "say \\"hi\\"\\tto xx; caf\\u00e9 yy \\\\ zz"\n'
    src = load(tmp_path, "m.toml", text)
    body = src.data["composite"]["f"]["body"]
    assert body == 'say "hi"\tto xx; café yy \\ zz'
    for token in ("say", "hi", "to", "xx", "yy", "zz"):
        assert_token(src, BODY, token)
    # an escaped character maps to its backslash
    assert src.string_loc(BODY, body.index('"')) == at(src, '\\"')
    assert src.string_loc(BODY, body.index("\t")) == at(src, "\\t")
    assert src.string_loc(BODY, body.index("é")) == at(src, "\\u00e9")
    assert src.string_loc(BODY, body.index("\\")) == at(src, "\\\\")
    # past the end: just after the last character (the closing quote)
    assert src.string_loc(BODY, 10_000) == Loc("m.toml", 2, text.split("\n")[1].rindex('"') + 1)
    assert src.loc(BODY) == at(src, '"say')


def test_toml_literal_string(tmp_path: Path) -> None:
    src = load(tmp_path, "m.toml", "[composite.f]\nbody = 'y = xx \\n zz'\n")
    assert src.data["composite"]["f"]["body"] == "y = xx \\n zz"
    assert_token(src, BODY, "xx")
    assert_token(src, BODY, "zz")
    assert src.string_loc(BODY, 0) == at(src, "y = xx")


def test_toml_multiline_basic_trims_first_newline(tmp_path: Path) -> None:
    text = '[composite.f]\nbody = """\nh = relu(x)\n\ty = xx + h  # "quoted"\n"""\n'
    src = load(tmp_path, "m.toml", text)
    body = src.data["composite"]["f"]["body"]
    assert body.startswith("h = relu")
    assert src.string_loc(BODY, 0) == Loc("m.toml", 3, 1)
    for token in ("relu", "xx", "h  #", '"quoted"'):
        assert_token(src, BODY, token)
    assert src.string_loc(BODY, body.index("\t")) == Loc("m.toml", 4, 1)
    assert src.string_loc(BODY, len(body)) == Loc("m.toml", 5, 1)


def test_toml_multiline_basic_line_ending_backslash(tmp_path: Path) -> None:
    text = '[composite.f]\nbody = """first \\\n       \n      second xx \\   \n  third\\tyy"" """\n'
    src = load(tmp_path, "m.toml", text)
    body = src.data["composite"]["f"]["body"]
    assert body == 'first second xx third\tyy"" '
    for token in ("first", "second", "xx", "third", "yy"):
        assert_token(src, BODY, token)
    line, col = pos(src.text, 'yy""')
    assert src.string_loc(BODY, body.index('""')) == Loc("m.toml", line, col + 2)


def test_toml_multiline_basic_quotes_before_closing_delimiter(tmp_path: Path) -> None:
    src = load(tmp_path, "m.toml", '[composite.f]\nbody = """a "q"""""\n')
    body = src.data["composite"]["f"]["body"]
    assert body == 'a "q""'
    line = src.text.split("\n")[1]
    assert src.string_loc(BODY, 5) == Loc("m.toml", 2, line.index('"q"') + 4)
    assert src.string_loc(BODY, 6) == Loc("m.toml", 2, line.index('"q"') + 5)


def test_toml_multiline_literal(tmp_path: Path) -> None:
    text = "[composite.f]\nbody = '''\n  y = xx \\n\n    z = 'yy'\n'''\n"
    src = load(tmp_path, "m.toml", text)
    assert src.data["composite"]["f"]["body"] == "  y = xx \\n\n    z = 'yy'\n"
    assert src.string_loc(BODY, 0) == Loc("m.toml", 3, 1)
    assert_token(src, BODY, "xx")
    assert_token(src, BODY, "'yy'")


def test_toml_crlf_and_bom(tmp_path: Path) -> None:
    text = '\ufeff[composite.f]\r\nbody = """\r\nab\r\n  xx"""\r\n'
    src = load(tmp_path, "m.toml", text.encode("utf-8"))
    assert src.data["composite"]["f"]["body"] == "ab\n  xx"
    assert src.key_loc(("composite",)) == Loc("m.toml", 1, 2)  # the BOM is not a column
    assert src.string_loc(BODY, 0) == Loc("m.toml", 3, 1)
    assert src.string_loc(BODY, 2) == Loc("m.toml", 3, 3)  # the line break
    assert src.string_loc(BODY, 5) == Loc("m.toml", 4, 3)


MODEL_TOML = """\
include = ["ops.toml"]

[composite.gemm]
doc = "C = A @ B"
inputs = ["A: f32[M, K]",
          "B: f32[K, N]"]   # B
outputs = ["C: f32[M, N]"]
types = { T = ["f32", "f64"] }
test.sizes = { M = 4, "K" = 8 }
  "quoted key" . inner = 1

[[composite.gemm.cases]]
m = 1
[[composite.gemm.cases]]
m = 2

[composite.relu]
body = "y = relu(x)"
"""


def test_toml_key_and_value_locations(tmp_path: Path) -> None:
    src = load(tmp_path, "m.toml", MODEL_TOML)
    gemm = ("composite", "gemm")
    assert src.loc(()) == Loc("m.toml", 1, 1)
    assert src.key_loc(gemm) == at(src, "gemm")  # where `gemm` is written in the header
    assert src.loc(gemm) == Loc("m.toml", 3, 1)
    assert src.key_loc(("composite",)) == at(src, "composite")
    assert src.key_loc(("composite", "relu")) == at(src, "relu]")
    assert src.loc(("include", 0)) == at(src, '"ops.toml"')
    assert src.key_loc(gemm + ("doc",)) == at(src, "doc")
    assert src.loc(gemm + ("doc",)) == at(src, '"C = A')
    assert src.loc(gemm + ("inputs",)) == at(src, '["A')
    assert src.loc(gemm + ("inputs", 1)) == at(src, '"B: f32')
    assert src.key_loc(gemm + ("inputs", 1)) == at(src, '"B: f32')
    assert_token(src, gemm + ("inputs", 1), "K, N")
    # inline tables
    assert src.loc(gemm + ("types",)) == at(src, "{ T")
    assert src.key_loc(gemm + ("types", "T")) == at(src, "T =")
    assert src.loc(gemm + ("types", "T", 1)) == at(src, '"f64"')
    # dotted keys, quoted keys
    assert src.key_loc(gemm + ("test",)) == at(src, "test.")
    assert src.key_loc(gemm + ("test", "sizes")) == at(src, "sizes")
    assert src.key_loc(gemm + ("test", "sizes", "K")) == at(src, '"K"')
    assert src.loc(gemm + ("test", "sizes", "K")) == at(src, "8")
    assert src.key_loc(gemm + ("quoted key", "inner")) == at(src, "inner")
    line, col = pos(src.text, "inner = 1")
    assert src.loc(gemm + ("quoted key", "inner")) == Loc("m.toml", line, col + len("inner = "))
    # arrays of tables
    assert src.data["composite"]["gemm"]["cases"] == [{"m": 1}, {"m": 2}]
    assert src.loc(gemm + ("cases", 1)) == at(src, "[[composite", 2)
    line, col = pos(src.text, "m = 2")
    assert src.loc(gemm + ("cases", 1, "m")) == Loc("m.toml", line, col + len("m = "))
    assert src.key_loc(gemm + ("cases", 0, "m")) == at(src, "m = 1")


def test_toml_missing_keypath_falls_back_to_ancestor(tmp_path: Path) -> None:
    src = load(tmp_path, "m.toml", MODEL_TOML)
    gemm = ("composite", "gemm")
    assert src.loc(gemm + ("outputs", 7)) == src.loc(gemm + ("outputs",))
    assert src.loc(gemm + ("body",)) == src.loc(gemm)
    assert src.key_loc(gemm + ("nope", "deeper")) == src.key_loc(gemm)
    assert src.string_loc(gemm + ("body",), 3) == src.loc(gemm)
    assert src.loc(("nothing",)) == Loc("m.toml", 1, 1)
    # not a string: string_loc is where the value starts
    assert src.string_loc(gemm + ("cases", 0, "m"), 0) == src.loc(gemm + ("cases", 0, "m"))


def test_toml_syntax_error_location(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "bad.toml", "[composite.f]\ninputs = []\nbody x = 1\n")
    error = info.value
    assert error.loc == Loc("bad.toml", 3, 6)
    assert error.message == "invalid TOML: Expected '=' after a key in a key/value pair"


def test_toml_error_at_end_of_document(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "bad.toml", "a = [1,\n  2")
    assert info.value.message.startswith("invalid TOML: ")
    assert "(at" not in info.value.message
    assert info.value.loc == Loc("bad.toml", 2, 4)


def test_toml_redefined_table_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "bad.toml", "[a]\nx = 1\n[a]\n")
    assert info.value.loc is not None and info.value.loc.line == 3


# --------------------------------------------------------------------------- #
# YAML strings
# --------------------------------------------------------------------------- #

YAML_BODY = ("composite", "f", "body")


def test_yaml_double_quoted(tmp_path: Path) -> None:
    text = 'composite:\n  f:\n    body: "say \\"hi\\" xx\\t\\u00e9 yy\n\n      zz  \\\n      ww"\n'
    src = load(tmp_path, "m.yaml", text)
    body = src.data["composite"]["f"]["body"]
    assert body == 'say "hi" xx\té yy\nzz  ww'
    for token in ("say", "hi", "xx", "yy", "zz", "ww"):
        assert_token(src, YAML_BODY, token)
    assert src.string_loc(YAML_BODY, body.index("é")) == at(src, "\\u00e9")
    assert src.loc(YAML_BODY) == at(src, '"say')
    assert src.key_loc(YAML_BODY) == at(src, "body")


def test_yaml_single_quoted(tmp_path: Path) -> None:
    text = "composite:\n  f:\n    body: 'it''s xx\n      folded yy'\n"
    src = load(tmp_path, "m.yaml", text)
    body = src.data["composite"]["f"]["body"]
    assert body == "it's xx folded yy"
    assert_token(src, YAML_BODY, "xx")
    assert_token(src, YAML_BODY, "yy")
    assert src.string_loc(YAML_BODY, body.index("'")) == at(src, "''")
    assert src.string_loc(YAML_BODY, body.index("s xx")) == at(src, "s xx")


def test_yaml_plain_scalars(tmp_path: Path) -> None:
    text = "composite:\n  f:\n    body: y = xx + 1\n    doc: a plain\n       continued yy\n"
    src = load(tmp_path, "m.yaml", text)
    assert_token(src, YAML_BODY, "xx")
    assert src.string_loc(YAML_BODY, 0) == at(src, "y = xx")
    assert src.string_loc(YAML_BODY, 100) == Loc("m.yaml", 3, len("    body: y = xx + 1") + 1)
    assert src.data["composite"]["f"]["doc"] == "a plain continued yy"
    assert_token(src, ("composite", "f", "doc"), "yy")


def test_yaml_literal_block_maps_every_character(tmp_path: Path) -> None:
    text = (
        "composite:\n"
        "  f:\n"
        "    inputs: []\n"
        "    body: |  # the program\n"
        "      h = relu(x)\n"
        "\n"
        '        y[i] = xx[i] \t+ h  # "c"\n'
        "    doc: x\n"
    )
    src = load(tmp_path, "m.yaml", text)
    body = src.data["composite"]["f"]["body"]
    assert body == 'h = relu(x)\n\n  y[i] = xx[i] \t+ h  # "c"\n'
    lines = text.split("\n")
    first_line = 5
    for offset, char in enumerate(body):
        loc = src.string_loc(YAML_BODY, offset)
        k = body.count("\n", 0, offset)
        column = offset - (body.rindex("\n", 0, offset) + 1 if k else 0)
        assert loc.line == first_line + k
        if char == "\n":  # the line break of the source line
            assert loc.col == len(lines[loc.line - 1]) + 1
        else:
            assert loc.col == 6 + column + 1
            assert lines[loc.line - 1][loc.col - 1] == char
    assert_token(src, YAML_BODY, "xx")


@pytest.mark.parametrize("indicator", ["|-", "|+", "|1", ">", ">-"])
def test_yaml_block_scalar_line_starts(tmp_path: Path, indicator: str) -> None:
    text = (
        "composite:\n"
        "  f:\n"
        f"    body: {indicator}\n"
        "      alpha one\n"
        "      beta two\n"
        "\n"
        "        gamma\n"
        "      delta\n"
        "\n"
        "    doc: x\n"
    )
    src = load(tmp_path, "m.yaml", text)
    body = src.data["composite"]["f"]["body"]
    for token in ("alpha", "one", "beta", "two", "gamma", "delta"):
        assert_token(src, YAML_BODY, token)
    if indicator == "|1":  # content indentation is 4 + 1: one space is part of the value
        assert body.startswith(" alpha")
        assert src.string_loc(YAML_BODY, 0) == Loc("m.yaml", 4, 6)
    else:
        assert src.string_loc(YAML_BODY, 0) == at(src, "alpha")


def test_yaml_flow_collections(tmp_path: Path) -> None:
    text = "composite:\n  f: {inputs: [\"x: f32[N]\", 'w: f32[N]'], outputs: [y: f32]}\n"
    src = load(tmp_path, "m.yaml", text)
    f = ("composite", "f")
    assert src.data["composite"]["f"] == {
        "inputs": ["x: f32[N]", "w: f32[N]"],
        "outputs": [{"y": "f32"}],
    }
    assert src.loc(f + ("inputs", 1)) == at(src, "'w")
    assert src.key_loc(f + ("outputs",)) == at(src, "outputs")
    assert src.key_loc(f + ("outputs", 0, "y")) == at(src, "y:")
    assert_token(src, f + ("inputs", 0), "N")


def test_yaml_key_and_value_locations(tmp_path: Path) -> None:
    text = (
        "include:\n"
        "  - ops.yaml\n"
        "composite:\n"
        "  gemm:\n"
        "    inputs:\n"
        "      - 'A: f32[M, K]'\n"
        "      - &b 'B: f32[K, N]'\n"
        "    where: [*b]\n"
        "    params: {eps: 1e-5}\n"
    )
    src = load(tmp_path, "m.yaml", text)
    gemm = ("composite", "gemm")
    assert src.key_loc(gemm) == at(src, "gemm")
    assert src.loc(("include", 0)) == at(src, "ops.yaml")
    assert src.key_loc(gemm + ("inputs", 1)) == at(src, "&b")
    assert_token(src, gemm + ("inputs", 1), "K, N")
    assert src.data["composite"]["gemm"]["where"] == ["B: f32[K, N]"]
    assert src.loc(gemm + ("where", 0)) == at(src, "&b")  # an alias points at its anchor
    assert src.loc(gemm + ("params", "eps")) == at(src, "1e-5")
    assert src.key_loc(gemm + ("params", "eps")) == at(src, "eps")
    assert src.loc(gemm + ("params", "nope")) == at(src, "{eps")
    assert src.loc(gemm + ("inputs", 5)) == src.loc(gemm + ("inputs",))


# --------------------------------------------------------------------------- #
# YAML 1.2 core schema
# --------------------------------------------------------------------------- #


def test_yaml_core_schema_resolution(tmp_path: Path) -> None:
    text = (
        "strings: [yes, no, on, off, Yes, y, n, 'true', \"1\", 1_000, 0b1, 1:20, .5.5, inf]\n"
        "bools: [true, True, TRUE, false, False, FALSE]\n"
        "nulls: [null, Null, NULL, ~, ]\n"
        "empty:\n"
        "ints: [0, -7, +3, 017, 0o17, 0x1F, 123456789012345678901234567890]\n"
        "floats: [1.5, -.5, 1., 1e3, 2.5E-3, .inf, -.Inf, +.INF, .nan]\n"
        "tagged: [!!str 12, !!float 3, !!int '4', !!null '', !!bool 'true']\n"
        "1: one\n"
        "true: key\n"
    )
    data = load(tmp_path, "m.yaml", text).data
    assert data["strings"] == ["yes", "no", "on", "off", "Yes", "y", "n", "true", "1"] + [
        "1_000",
        "0b1",
        "1:20",
        ".5.5",
        "inf",
    ]
    assert data["bools"] == [True, True, True, False, False, False]
    assert data["nulls"] == [None, None, None, None]
    assert data["empty"] is None
    assert data["ints"] == [0, -7, 3, 17, 15, 31, 123456789012345678901234567890]
    assert all(type(v) is int for v in data["ints"])
    floats = data["floats"]
    assert floats[:5] == [1.5, -0.5, 1.0, 1000.0, 0.0025]
    assert floats[5:8] == [math.inf, -math.inf, math.inf]
    assert math.isnan(floats[8])
    assert data["tagged"] == ["12", 3.0, 4, None, True]
    assert data["1"] == "one"  # non-string keys become strings
    assert data["True"] == "key"


def test_yaml_duplicate_key(tmp_path: Path) -> None:
    text = "composite:\n  f:\n    inputs: []\n    body: a\n    inputs: [x]\n"
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.yaml", text)
    error = info.value
    assert "duplicate key 'inputs'" in error.message
    assert error.loc == Loc("m.yaml", 5, 5)
    assert [loc for _, loc in error.notes] == [Loc("m.yaml", 3, 5)]


def test_yaml_syntax_error_location(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.yaml", "composite:\n  f:\n    a: 1\n   b: 2\n")
    assert info.value.loc == Loc("m.yaml", 4, 4)
    assert info.value.message.startswith("invalid YAML: ")
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.yaml", 'a: "unterminated\n')
    assert info.value.message == "invalid YAML: found unexpected end of stream"
    assert info.value.notes == (("while scanning a quoted scalar", Loc("m.yaml", 1, 4)),)


def test_yaml_flow_nesting_past_the_limit_is_refused_where_it_passes(tmp_path: Path) -> None:
    """Flow collections 257 deep are refused at the 257th bracket, before PyYAML's scanner (whose
    time grows with the square of the depth) sees them; 256 deep still load, and brackets in
    quoted scalars and comments do not count."""
    deep = "a: " + "[" * 256 + "]" * 256 + "\n"
    nested: list = []
    for _ in range(255):
        nested = [nested]
    assert load(tmp_path, "ok.yaml", deep).data["a"] == nested
    quoted = "a: '" + "[" * 300 + "'\nb: \"" + "{" * 300 + '"  # ' + "[" * 300 + "\n"
    assert load(tmp_path, "quoted.yaml", quoted).data["a"] == "[" * 300
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.yaml", "x: 1\na: " + "{b: " * 10_000 + "1" + "}" * 10_000 + "\n")
    assert info.value.message == "values are nested too deeply (more than 256 levels)"
    assert info.value.loc == Loc("m.yaml", 2, 4 + 4 * 256)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &x [*x]\n", "recursive YAML alias"),
        ("a: !custom 1\n", "unsupported YAML tag '!custom'"),
        ("a: !!int x\n", "invalid !!int value 'x'"),
        ("? [a]\n: 1\n", "a mapping key must be a scalar"),
        ("a: 1\n---\nb: 2\n", "invalid YAML: expected a single document"),
        ("a: \x01\n", "invalid YAML: unacceptable character #x0001"),
    ],
)
def test_yaml_invalid_documents(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.yaml", text)
    assert info.value.message.startswith(message)
    assert info.value.loc is not None


def test_yaml_alias_bomb_is_rejected(tmp_path: Path) -> None:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 9):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    with pytest.raises(CatencError, match="too many values"):
        load(tmp_path, "m.yaml", text)


# --------------------------------------------------------------------------- #
# Files
# --------------------------------------------------------------------------- #


def test_display_path_defaults_to_path_as_given(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yml", "a: 1\n")
    src = load_source(path)
    assert src.path == path
    assert src.loc(("a",)) == Loc(path, 1, 4)


def test_not_utf8(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.toml", b"a = 1\n# caf\xc3\xa9 \xff\n")
    assert info.value.loc == Loc("m.toml", 2, 8)
    assert "not valid UTF-8" in info.value.message


def test_unsupported_extension(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.json", "{}")
    assert info.value.loc is None
    assert "unsupported file type '.json'" in info.value.message
    assert "m.json" in info.value.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CatencError) as info:
        load_source(tmp_path / "nope.toml", display_path="nope.toml")
    assert info.value.loc is None
    assert "nope.toml" in info.value.message


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just text\n", ""])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    with pytest.raises(CatencError) as info:
        load(tmp_path, "m.yaml", text)
    assert info.value.loc == Loc("m.yaml", 1, 1)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.toml", "a = " + "[" * 5000),
        ("deep.yaml", "a: " + "[" * 5000),
        ("inline.toml", "a = " + "{b = " * 3000 + "1" + "}" * 3000),
        ("big.toml", "a = " + "1" * 5000),
        ("big.yaml", "a: " + "1" * 5000),
        ("garbage.toml", b'\x00[\xc3]]]"""\''),
        ("garbage.yaml", b"{[\x00: &&& *"),
    ],
)
def test_hostile_input_raises_only_catenc_error(tmp_path: Path, name: str, text: str) -> None:
    with pytest.raises(CatencError):
        load(tmp_path, name, text)


def test_huge_integer_is_a_python_int(tmp_path: Path) -> None:
    src = load(tmp_path, "m.toml", "a = 123456789012345678901234567890\n")
    assert src.data["a"] == 123456789012345678901234567890
