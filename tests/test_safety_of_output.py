"""Nothing from the input reaches the emitted files unescaped, and nothing is run through a shell.

* A `doc` with `*/`, `/*`, line breaks of every kind, control characters and non-ASCII text stays
  inside the header's comment: the header compiles (C and C++, `-Wall -Werror`), the
  preprocessed header holds none of it, and the manifest keeps the doc exactly.
* Names are validated: C keywords, C library functions and catenc's reserved names are
  diagnostics; names that would collide with a macro or a type of the headers the emitted code
  includes (`NAN`, `INFINITY`, `CATENC_OK`, `int64_t`, ...) give either a working library or a
  diagnostic, never broken C (exit 4). The model's file name is input too.
* Float literals are rendered exactly: computed values are compared bit for bit with numpy (body
  literals, params and `-D` overrides; f64, f32, f16; subnormals, extremes, `-0.0`, values that
  round to infinity), and integer literals at the ends of their types.
* The toolchain runs from argv lists: shell syntax in `--config CFLAGS`, in `CC`, in file names,
  in `test.reference` or a YAML tag never runs (a file it would create never appears).
* Include cycles are errors.
* No output holds an absolute path of the build machine (every file, the `.so` and `.a`
  included; the Make depfile is exempt, as gcc's are).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catenc.build import BuildRequest, InternalError, build
from catenc.diagnostics import CatencError, format_diagnostic
from catenc.driver import plan_file
from catenc.loader import Library, load
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime

ROOT = Path(__file__).resolve().parent.parent
DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.+)$")
CC = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
CXX = shutil.which("clang++") or shutil.which("g++")


def catenc(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "TMPDIR": str(cwd), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )


def composite(name="c", inputs='["x: f32[N]"]', outputs='["y: f32[N]"]', body="y = x + 1", extra="") -> str:
    return f"[composite.{name}]\ninputs = {inputs}\noutputs = {outputs}\nbody = {json.dumps(body)}\n{extra}\n"


def compile_in_process(directory: Path, text: str, defines: dict | None = None) -> Library | CatencError:
    """Compile model.toml holding text, as `catenc compile` would, in-process (faster than the
    command line): the loaded library, or the user error. An internal error fails the test."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.toml"
    path.write_text(text)
    runtime = load_runtime("clang")
    options = Options(runtime, config=runtime.validate_config({}), defines=dict(defines or {}))
    try:
        plan = plan_file(str(path), options)
        written = build(plan, options, BuildRequest(str(path), str(directory / "out"), ("c", "h", "manifest", "so")))
    except CatencError as err:
        rendered = format_diagnostic(err)
        assert rendered.startswith((f"{path}:", "catenc: error: ")), rendered
        return err
    except InternalError as err:
        internal = str(err)
    else:
        return load(written["manifest"])
    errors = [line for line in internal.splitlines() if "error" in line][:4]
    pytest.fail("internal error (exit 4) on user input:\n" + "\n".join(errors) + f"\ninput:\n{text}", pytrace=False)


def assert_no_crash(result: subprocess.CompletedProcess) -> None:
    output = (result.stdout + result.stderr)[:2000]
    assert "Traceback" not in output, output
    assert result.returncode != 4 and "internal compiler error" not in output, output
    assert result.returncode in (0, 1), output


def assert_diagnostic(result: subprocess.CompletedProcess, file: str, line: int | None = None) -> re.Match:
    assert_no_crash(result)
    assert result.returncode == 1, result.stderr
    first = result.stderr.splitlines()[0]
    m = DIAG_RE.match(first)
    assert m and m["file"] == file, first
    if line is not None:
        assert int(m["line"]) == line, first
    return m


# --------------------------------------------------------------------------- #
# doc comments
# --------------------------------------------------------------------------- #

NASTY_DOC = (
    "Ends early */ int evil_decl; /* and again */ #define evil_macro 1\n"
    "/* nested /* */ // evil_line_comment\n"
    "line two \\\n"
    "*/ evil_after_newline();\r\n"
    "carriage\rreturn, form\ffeed, vertical\x0btab, nul\x00byte, escape\x1b[31m, del\x7f\n"
    "unicode separators: LS\u2028PS\u2029NEL\x85 and bidi \u202eevil_bidi\u202c\n"
    "trigraph ??/\n"
    "*??/\n"
    "/ evil_trigraph_close\n"
    "non-ASCII: é ü ß 日本語 🚀 «quoted» — end */"
)


def quoted(text: str) -> str:
    """A TOML basic string, also a YAML double-quoted one: quotes, backslashes, control
    characters and Unicode line breaks escaped, the rest (non-ASCII included) as is."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _doc_model(doc: str) -> str:
    return (
        f"[composite.c]\ndoc = {quoted(doc)}\n"
        'inputs = ["x: f32[N]"]\noutputs = ["y: f32[N]"]\nwhere = ["N >= 1"]\nbody = "y = x + 1"\n'
    )


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_doc_cannot_break_the_header_comment(tmp_path: Path, fmt: str) -> None:
    if fmt == "toml":
        (tmp_path / "model.toml").write_text(_doc_model(NASTY_DOC))
    else:
        (tmp_path / "model.yaml").write_text(
            "composite:\n  c:\n"
            f"    doc: {quoted(NASTY_DOC)}\n"
            '    inputs: ["x: f32[N]"]\n    outputs: ["y: f32[N]"]\n    where: ["N >= 1"]\n    body: "y = x + 1"\n'
        )
    result = catenc(tmp_path, "compile", f"model.{fmt}", "-o", "out")
    assert result.returncode == 0, result.stderr
    header = tmp_path / "out" / "model.h"
    raw = header.read_bytes()
    text = raw.decode("utf-8")  # valid UTF-8
    # no line break but \n, no control character: nothing a tool could read as a line break
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\x85\u2028\u2029\u202a-\u202e]", text), [
        c for c in text if ord(c) < 32 and c != "\n" or ord(c) in (0x7F, 0x85, 0x2028, 0x2029)
    ]
    # the readable parts of the doc are there, in the comment
    for piece in ("Ends early", "line two", "non-ASCII:"):
        assert piece in text, piece
    # compiles as C (and C++), warnings as errors, trigraphs on (C99 has them)
    for compiler, lang, extra in ((CC, "c", ["-std=c99", "-trigraphs"]), (CXX, "c++", ["-std=c++11"])):
        if compiler is None:
            continue
        check = subprocess.run(
            [compiler, "-x", lang, *extra, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", str(header)],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr
        # after preprocessing (comments gone), nothing of the doc is left
        pre = subprocess.run(
            [compiler, "-x", lang, *extra, "-E", "-P", str(header)], capture_output=True, text=True
        ).stdout
        assert "evil" not in pre, [line for line in pre.splitlines() if "evil" in line]
        assert "Ends early" not in pre
    # the source compiles too (the library was built), and holds nothing of the doc outside comments
    source = tmp_path / "out" / "model.c"
    pre = subprocess.run([CC, "-std=c99", "-E", "-P", "-I", str(tmp_path / "out"), str(source)],
                         capture_output=True, text=True).stdout  # fmt: skip
    assert "evil" not in pre
    # the manifest keeps the doc exactly (JSON escapes it)
    manifest = json.loads((tmp_path / "out" / "model.manifest.json").read_text())
    doc = manifest["entries"][0].get("doc")
    if doc is not None:
        assert doc in (NASTY_DOC, NASTY_DOC.strip())
    # and the library works
    lib = load(tmp_path / "out" / "model.manifest.json")
    np.testing.assert_array_equal(lib["c"](np.arange(3, dtype=np.float32)), np.arange(1, 4, dtype=np.float32))


# --------------------------------------------------------------------------- #
# names
# --------------------------------------------------------------------------- #

# docs/language.md rejects these composite names: C keywords, C standard library functions, and the
# names catenc reserves for the emitted code.
REJECTED_COMPOSITE_NAMES = ["int", "for", "exp", "main", "catenc_x", "workspace", "printf", "malloc", "expf",
                            "sqrtf", "fabsf", "powf", "rintf", "fmaxf", "erff", "memcpy", "signbit"]  # fmt: skip
# These collide with a macro or a type of the headers the emitted code includes; a working
# library (catenc renames) or a diagnostic are both fine, broken C is not.
COLLIDING_NAMES = ["NAN", "INFINITY", "CATENC_OK", "CATENC_E_SHAPE", "int64_t", "uint8_t", "size_t", "uintptr_t",
                   "__LINE__", "_Pragma", "errno", "EOF", "M_PI", "FLT_MAX", "stdin"]  # fmt: skip


@pytest.mark.parametrize("name", REJECTED_COMPOSITE_NAMES)
def test_composite_name_is_validated(tmp_path: Path, name: str) -> None:
    err = compile_in_process(tmp_path, composite(name))
    assert isinstance(err, CatencError), f"composite '{name}' was accepted"
    assert err.loc is not None and err.loc.line == 1, format_diagnostic(err)
    assert name in err.message
    assert not (tmp_path / "out" / "model.c").exists()


@pytest.mark.parametrize(
    ("inputs", "outputs", "body", "line"),
    [
        ('["x-y: f32[N]"]', '["y: f32[N]"]', "y = x", 2),
        ('["x y: f32[N]"]', '["y: f32[N]"]', "y = x", 2),
        ('["x: f32[N]"]', '["y: f32[for]"]', "y = x", 3),
        ('["x: f32[for]"]', '["y: f32[for]"]', "y = x", 2),
        ('["class: f32[N]"]', '["y: f32[N]"]', "y = x", 2),  # a Python keyword; `int` is a valid name now
        ('["x: f32[N]"]', '["workspace: f32[N]"]', "workspace = x", 3),
        ('["x: f32[catenc_n]"]', '["y: f32[catenc_n]"]', "y = x", 2),
    ],
)
def test_tensor_and_symbol_names_are_validated(tmp_path: Path, inputs, outputs, body, line) -> None:
    err = compile_in_process(tmp_path, composite(inputs=inputs, outputs=outputs, body=body))
    assert isinstance(err, CatencError), "accepted"
    assert err.loc is not None and err.loc.line == line, format_diagnostic(err)


def test_tensor_name_is_validated_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "model.toml").write_text(composite(inputs='["x-y: f32[N]"]'))
    assert_diagnostic(catenc(tmp_path, "compile", "model.toml", "-o", "out"), "model.toml", 2)


@pytest.mark.parametrize("name", COLLIDING_NAMES)
def test_names_that_collide_with_c_macros_and_types(tmp_path: Path, name: str) -> None:
    x = np.arange(4, dtype=np.float32)
    texts = {
        "composite": composite(name),
        "tensor": composite(inputs=f'["{name}: f32[N]"]', body=f"y = {name} + 1"),
        "symbol": composite(inputs=f'["x: f32[{name}]"]', outputs=f'["y: f32[{name}]"]'),
        "intermediate": composite(body=f"{name} = x + 1\ny = {name}"),
    }
    broken = []
    for kind, text in texts.items():
        try:
            result = compile_in_process(tmp_path / kind, text)  # a diagnostic is fine, exit 4 is not
        except pytest.fail.Exception as failure:
            broken.append(f"a {kind} named {name}: {failure.msg.splitlines()[1]}")
            continue
        if isinstance(result, Library):
            np.testing.assert_array_equal(result[name if kind == "composite" else "c"](x), x + 1)
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    "filename",
    [
        "-x.toml",
        "-shared.toml",
        'we"ird.toml',
        "new\nline.toml",
        "a b.toml",
        "$(touch PWNED).toml",
        "é.toml",
        "q'uote.toml",
        "back\\slash.toml",
        "int.toml",
        "1model.toml",
        "star*.toml",
    ],  # fmt: skip
)
def test_the_model_file_name_is_input_too(tmp_path: Path, filename: str) -> None:
    """The stem names the outputs and is written into the source (#include) and the build
    commands; odd names give a working library or a diagnostic, never broken C or an argv
    option (a file named -x.toml is not `clang -x`)."""
    (tmp_path / filename).write_text(composite())
    result = catenc(tmp_path, "compile", f"./{filename}", "-o", "out")
    assert_no_crash(result)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out" / "PWNED").exists()
    if result.returncode == 0:
        manifests = list((tmp_path / "out").glob("*.manifest.json"))
        assert len(manifests) == 1
        lib = load(manifests[0])
        x = np.arange(3, dtype=np.float32)
        np.testing.assert_array_equal(lib["c"](x), x + 1)


# --------------------------------------------------------------------------- #
# float literals, bit for bit
# --------------------------------------------------------------------------- #

F64_LITERALS = ["0.1", "1e-30", "3.4028234663852886e38", "5e-324", "2.5e-324", "-0.0", "1.7976931348623157e308",
                "2.2250738585072014e-308", "2.225073858507201e-308", "0.30000000000000004", "0.3333333333333333",
                "9007199254740993", "1e308", "-1e-300", "123456789.12345679"]  # fmt: skip
F32_LITERALS = ["0.1", "1e-30", "3.4028234663852886e38", "3.4028235677973366e38", "1e39", "-1e39", "1e-45",
                "7e-46", "1e-46", "1.17549435e-38", "-0.0", "16777217", "0.3333333333333333", "5e-324",
                "1.0000001"]  # fmt: skip
F16_LITERALS = ["0.1", "65504", "65519", "65520", "1e-7", "6e-8", "2e-8", "-0.0", "0.3333"]

STORAGE = {"f64": (np.float64, np.uint64), "f32": (np.float32, np.uint32), "f16": (np.float16, np.uint16)}


def _expected(dtype: str, literal: str) -> np.ndarray:
    """numpy's value of -0.0 + literal in dtype (the literal rounded once from its decimal text)."""
    ftype, _ = STORAGE[dtype]
    with np.errstate(over="ignore"):
        value = ftype(float(literal)) if dtype != "f16" else np.float16(np.float32(float(literal)))
        return (np.full(4, -0.0, dtype=ftype) + value).astype(ftype)


def _bits(a: np.ndarray, dtype: str) -> list[int]:
    return np.asarray(a).view(STORAGE[dtype][1]).tolist()


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16"])
def test_float_literals_are_rendered_exactly(tmp_path: Path, dtype: str) -> None:
    literals = {"f64": F64_LITERALS, "f32": F32_LITERALS, "f16": F16_LITERALS}[dtype]
    outs = [f"b{i}: {dtype}[N]" for i in range(len(literals))] + [f"p{i}: {dtype}[N]" for i in range(len(literals))]
    outs += [f"f{i}: {dtype}[N]" for i in range(len(literals))]
    body = [f"b{i} = x + {lit}" for i, lit in enumerate(literals)]  # a body literal
    body += [f"p{i} = x + k{i}" for i in range(len(literals))]  # a param
    body += [f"f{i} = full([N], {lit}, {dtype})" for i, lit in enumerate(literals)]  # a literal alone
    params = ", ".join(f"k{i} = {lit if '.' in lit or 'e' in lit else lit + '.0'}" for i, lit in enumerate(literals))
    text = composite("lits", f'["x: {dtype}[N]"]', json.dumps(outs), "\n".join(body), f"params = {{ {params} }}")
    (tmp_path / "model.toml").write_text(text)
    result = catenc(tmp_path, "compile", "model.toml", "-o", "out")
    assert result.returncode == 0, result.stderr
    lib = load(tmp_path / "out" / "model.manifest.json")
    x = np.full(4, -0.0, dtype=STORAGE[dtype][0])
    values = lib["lits"](x)
    wrong = []
    n = len(literals)
    for i, literal in enumerate(literals):
        expected = _bits(_expected(dtype, literal), dtype)
        for kind, got in (("body", values[i]), ("param", values[n + i]), ("full", values[2 * n + i])):
            want = expected
            if kind == "full":  # no -0.0 + in front: the literal itself
                ftype = STORAGE[dtype][0]
                with np.errstate(over="ignore"):
                    v = ftype(float(literal)) if dtype != "f16" else np.float16(np.float32(float(literal)))
                want = _bits(np.full(4, v, dtype=ftype), dtype)
            if _bits(got, dtype) != want:
                wrong.append(
                    f"{kind} {literal}: got {np.asarray(got)[:1]} bits {_bits(got, dtype)[:1]}, want {want[:1]}"
                )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_defined_params_are_rendered_exactly(tmp_path: Path, dtype: str) -> None:
    text = composite("d", f'["x: {dtype}[N]"]', f'["y: {dtype}[N]"]', "y = x + k", "params = { k = 1.0 }")
    for i, literal in enumerate(["0.1", "1e-30", "5e-324", "-0.0", "3.4028234663852886e38", "1e39"]):
        lib = compile_in_process(tmp_path / f"d{i}", text, {"k": float(literal)})
        assert isinstance(lib, Library), format_diagnostic(lib)
        got = lib["d"](np.full(4, -0.0, dtype=STORAGE[dtype][0]))
        assert _bits(got, dtype) == _bits(_expected(dtype, literal), dtype), literal


@pytest.mark.parametrize(
    ("dtype", "literal"),
    [
        ("i64", "9223372036854775807"),
        ("i64", "-9223372036854775808"),
        ("u64", "18446744073709551615"),
        ("i32", "-2147483648"),
        ("i32", "2147483647"),
        ("u32", "4294967295"),
        ("i8", "-128"),
        ("u8", "255"),
        ("i16", "-32768"),
    ],  # fmt: skip
)
def test_integer_literals_at_the_ends_of_their_types(tmp_path: Path, dtype: str, literal: str) -> None:
    lib = compile_in_process(tmp_path, composite("k", f'["x: {dtype}[N]"]', f'["y: {dtype}[N]"]', f"y = x + {literal}"))
    assert isinstance(lib, Library), format_diagnostic(lib)
    x = np.zeros(3, dtype=np.dtype(dtype.replace("i", "int").replace("u", "uint")))
    np.testing.assert_array_equal(lib["k"](x), np.full(3, int(literal), dtype=x.dtype))


# --------------------------------------------------------------------------- #
# no shell
# --------------------------------------------------------------------------- #


def test_cflags_with_shell_syntax_never_run(tmp_path: Path) -> None:
    (tmp_path / "model.toml").write_text(composite())
    target = tmp_path / "PWNED"
    payloads = [
        f"-DX=$(touch${{IFS}}{target}1)",
        f"-DX=`touch${{IFS}}{target}2`",
        f"-DX;touch${{IFS}}{target}3",
        f"-DX|touch${{IFS}}{target}4",
        f"-DX&&touch${{IFS}}{target}5",
        f"-DX>{target}6",
        f"-O1 $(touch {target}7)",
        f"-O1; touch {target}8",
        f"-O1 && touch {target}9",
    ]
    for n, payload in enumerate(payloads):
        out = f"out{n}"
        result = catenc(tmp_path, "compile", "model.toml", "-o", out, "--config", f"CFLAGS={payload}")
        assert_no_crash(result)
        if result.returncode == 0:  # passed to the compiler as one argv item each
            manifest = json.loads((tmp_path / out / "model.manifest.json").read_text())
            commands = manifest["build"]["commands"]
            assert any(all(piece in command for piece in payload.split()) for command in commands), commands
        else:
            assert result.stderr.startswith("catenc: error: "), result.stderr
    for n, payload in enumerate(["native;touch PWNED", "native$(touch PWNED)", "x86-64 -DX"]):
        result = catenc(tmp_path, "compile", "model.toml", "-o", f"march{n}", "--config", f"MARCH={payload}")
        assert_no_crash(result)
        assert result.returncode == 1, result.stderr
    leftovers = sorted(p.name for p in tmp_path.rglob("PWNED*"))
    assert leftovers == [], leftovers


def test_cc_with_shell_syntax_never_runs(tmp_path: Path) -> None:
    (tmp_path / "model.toml").write_text(composite())
    target = tmp_path / "PWNED_CC"
    for n, cc in enumerate([f"clang;touch {target}", f"$(touch {target})", f"clang && touch {target}"]):
        result = catenc(tmp_path, "compile", "model.toml", "-o", f"out{n}", env={"CC": cc})
        assert_no_crash(result)
    assert not target.exists()


def test_reference_code_and_yaml_tags_never_run_during_compile(tmp_path: Path) -> None:
    target = tmp_path / "PWNED_REF"
    reference = f"import os\nos.system('touch {target}')\ndef reference(x, **_):\n    return x + 1\n"
    (tmp_path / "model.toml").write_text(composite(extra=f"test.reference = {json.dumps(reference)}"))
    result = catenc(tmp_path, "compile", "model.toml", "-o", "out")
    assert result.returncode == 0, result.stderr
    assert not target.exists(), "test.reference ran during compile"
    tag = tmp_path / "PWNED_YAML"
    (tmp_path / "tag.yaml").write_text(f"composite: !!python/object/apply:os.system ['touch {tag}']\n")
    assert_no_crash(catenc(tmp_path, "compile", "tag.yaml", "-o", "out2"))
    assert not tag.exists(), "a YAML python tag was constructed"
    body = tmp_path / "PWNED_BODY"
    (tmp_path / "body.toml").write_text(composite(body=f"y = x + __import__('os').system('touch {body}')"))
    assert_diagnostic(catenc(tmp_path, "compile", "body.toml", "-o", "out3"), "body.toml")
    assert not body.exists(), "the body was executed"


# --------------------------------------------------------------------------- #
# include cycles
# --------------------------------------------------------------------------- #


def test_include_cycles_are_errors(tmp_path: Path) -> None:
    (tmp_path / "self.toml").write_text('include = ["self.toml"]\n' + composite())
    m = assert_diagnostic(catenc(tmp_path, "compile", "self.toml", "-o", "out"), "self.toml", 1)
    assert "cycle" in m["msg"] or "includes" in m["msg"]
    (tmp_path / "a.toml").write_text('include = ["b.toml"]\n' + composite("a"))
    (tmp_path / "b.toml").write_text('include = ["a.toml"]\n' + composite("b"))
    result = catenc(tmp_path, "compile", "a.toml", "-o", "out")
    assert_no_crash(result)
    assert result.returncode == 1
    m = DIAG_RE.match(result.stderr.splitlines()[0])
    assert m and m["file"] in ("a.toml", "b.toml") and m["line"] == "1", result.stderr
    assert "cycle" in m["msg"] or "includes" in m["msg"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.toml").write_text('include = ["../c.toml"]\n' + composite("c2"))
    (tmp_path / "c.toml").write_text('include = ["./sub/c.toml"]\n' + composite("c1"))
    result = catenc(tmp_path, "compile", "c.toml", "-o", "out")
    assert_no_crash(result)
    assert result.returncode == 1 and DIAG_RE.match(result.stderr.splitlines()[0]), result.stderr


# --------------------------------------------------------------------------- #
# no absolute paths in the outputs
# --------------------------------------------------------------------------- #


def test_outputs_hold_no_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "rt").mkdir()
    (tmp_path / "lib" / "helpers.toml").write_text(composite("twice", body="y = x * 2"))
    (tmp_path / "inc" / "extra.toml").write_text(composite("plus1", body="y = x + 1"))
    (tmp_path / "rt" / "myrt.py").write_text("from catenc.runtime import CRuntime\nRUNTIME = CRuntime(name='myrt')\n")
    (tmp_path / "model.toml").write_text(
        'include = ["lib/helpers.toml"]\n'
        + composite("m", '["x: f32[N]"]', '["y: f32[N]"]', "y = softmax(plus1(twice(x)))")
    )
    emit = "c,h,manifest,so,o,a,ir,schedule,loops"
    forbidden = {str(tmp_path), str(tmp_path.resolve()), str(ROOT), str(Path(sys.prefix)), str(Path.home())}
    forbidden = {f for f in forbidden if len(f) > 1}
    for out, runtime in (("out", "clang"), (str(tmp_path / "abs_out"), "rt/myrt.py")):
        result = catenc(tmp_path, "compile", "model.toml", "-o", out, "-I", "inc", "--runtime", runtime,
                        "--emit", emit, "-MD", "-MF", "deps/model.d")  # fmt: skip
        assert result.returncode == 0, result.stderr
        out_dir = Path(out) if Path(out).is_absolute() else tmp_path / out
        files = sorted(p for p in out_dir.rglob("*") if p.is_file())
        names = {p.name for p in files}
        assert {"model.c", "model.h", "model.manifest.json", "libmodel.so", "model.o", "libmodel.a"} <= names, names
        for path in files:
            data = path.read_bytes()
            for text in forbidden:
                assert text.encode() not in data, f"{path.name} holds {text}"
        manifest = json.loads((out_dir / "model.manifest.json").read_text())
        for item in manifest["inputs"] + manifest["files"]:
            assert not Path(item["path"]).is_absolute(), item
        shown = [i["path"] for i in manifest["inputs"]]
        assert "model.toml" in shown and "lib/helpers.toml" in shown, shown
        assert any(p.startswith("catenc:ops/") for p in shown), shown
    # the depfile (gcc -MD style) is exempt: it names files as make must find them
    assert (tmp_path / "deps" / "model.d").is_file()
