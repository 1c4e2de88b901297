"""The `catenc` command line as a user drives it (docs/cli.md): options, output files, exit codes.

Every test runs catenc as a subprocess (`python -m catenc` or the `catenc` console script) in a
temporary directory and checks what it prints and writes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import catenc

MODEL = """\
[composite.gemm]
doc = "Matrix product C = A @ B."
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"

[composite.scale2]
doc = "Scale a vector and sum the result."
inputs = ["x: f32[L]", "alpha: f32"]
outputs = ["y: f32[L]", "s: f32"]
body = \"\"\"
y = x * alpha
s = sum(y)
\"\"\"
"""

SIZES = "M=5,N=7,K=3,L=11"
ENTRIES = {"gemm": ["C"], "scale2": ["y", "s"]}
DEFAULT_FILES = {"model.c", "model.h", "model.manifest.json", "libmodel.so"}
SOURCE_FILES = {"model.c", "model.h", "model.manifest.json"}


def console_script() -> str:
    here = Path(sysconfig.get_path("scripts")) / "catenc"
    return str(here) if here.is_file() else (shutil.which("catenc") or "catenc")


def catenc_run(cwd: Path, *args: str, env: dict | None = None, script: bool = False) -> subprocess.CompletedProcess:
    command = [console_script()] if script else [sys.executable, "-m", "catenc"]
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=full_env)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result


def user_error(result: subprocess.CompletedProcess) -> str:
    """Exit 1, a message, no traceback and no blame on catenc; returns stderr."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip(), "an error must say what is wrong"
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal compiler error" not in result.stderr, result.stderr
    return result.stderr


def usage_error(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr


def files_in(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.exists() else set()


def elf_type(path: Path) -> int:
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(data[16:18], "little")


def manifest(directory: Path, stem: str = "model") -> dict:
    return json.loads((directory / f"{stem}.manifest.json").read_text())


def declarations(header: str) -> dict[str, str]:
    """Function name -> parameter list text, for every prototype of the header."""
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    found = {}
    for match in re.finditer(r"\b(?:int|size_t|void)\s+(\w+)\s*\(([^)]*)\)\s*;", text):
        found[match[1]] = " ".join(match[2].split())
    return found


def defined_dynamic_symbols(library: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def global_object_symbols(obj: Path) -> set[str]:
    out = subprocess.run(["nm", "-g", "--defined-only", str(obj)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "model.toml").write_text(MODEL)
    return tmp_path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A default compile (no -S/-c) into an output directory that did not exist."""
    root = tmp_path_factory.mktemp("built")
    (root / "model.toml").write_text(MODEL)
    result = ok(catenc_run(root, "compile", "model.toml", "-o", "deep/er/out"))
    assert result.stdout == "" and result.stderr == "", "a successful compile prints nothing"
    return root / "deep" / "er" / "out"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dumps")
    (root / "model.toml").write_text(MODEL)
    ok(catenc_run(root, "compile", "model.toml", "-o", "out", "--emit", "c,h,manifest,ir,schedule,loops"))
    return root / "out"


# --------------------------------------------------------------------------- #
# version, help, python -m
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_version(tmp_path: Path, script: bool) -> None:
    result = ok(catenc_run(tmp_path, "--version", script=script))
    assert catenc.__version__ in result.stdout
    assert "catenc" in result.stdout


def test_help_lists_the_compile_subcommand(tmp_path: Path) -> None:
    # `test-runtime` (docs/cli.md) arrives with the op library (issue 3); then assert it here too.
    result = ok(catenc_run(tmp_path, "--help", script=True))
    assert "compile" in result.stdout


def test_compile_help_lists_the_options(tmp_path: Path) -> None:
    text = ok(catenc_run(tmp_path, "compile", "--help")).stdout
    for option in (
        "-o", "--runtime", "-D", "-I", "--config", "-O", "--composite", "--prefix",
        "-S", "-c", "--emit", "--test", "--debug", "-MD", "-MF", "-MT", "-MP", "-v", "-q",
    ):  # fmt: skip
        assert re.search(rf"(^|[\s,]){re.escape(option)}\b", text), option


def test_help_shows_each_command_description_whole(tmp_path: Path) -> None:
    from catenc.cli import main

    text = " ".join(ok(catenc_run(tmp_path, "--help", script=True)).stdout.split())
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands, commands
    assert "compile Compile FILE (.toml, .yaml) into C sources, a header, a manifest and a shared library." in commands
    for name, command in main.commands.items():
        first_sentence = " ".join(re.split(r"\.\s", command.help)[0].split())
        assert f"{name} {first_sentence}" in commands, (name, commands)


def test_compile_help_says_the_defaults_runtimes_config_keys_debug_levels_and_exit_codes(tmp_path: Path) -> None:
    text = ok(catenc_run(tmp_path, "compile", "--help")).stdout
    flat = " ".join(text.split())
    assert re.search(r"-O \[0\|1\|2\|3\|fast\] .*\[default: 2\]", flat), text
    assert "Bundled: clang, cuda, opencl (default: clang)" in flat and "descriptor file" in flat, text
    for key in ("OMP=1", "MARCH=native", "VECTOR_WIDTH=auto", "CFLAGS="):
        assert re.search(rf"^\s+{re.escape(key)}\s", text, re.M), (key, text)
    assert "--runtime NAME --help" in flat
    debug = text.split("Debug levels (--debug N", 1)[1].split("Exit codes", 1)[0]
    assert [line.split()[0] for line in debug.splitlines()[1:] if line.strip()] == ["0", "1", "2", "3", "4"], debug
    codes = text.split("Exit codes", 1)[1]
    assert [line.split()[0] for line in codes.splitlines()[1:] if line.strip() and line[2] != " "] == list("01234")
    assert "--test mismatch" in codes and "internal compiler error" in codes


@pytest.mark.parametrize("runtime", ["opencl", "cuda"])
def test_compile_help_shows_the_config_keys_of_the_runtime_named(tmp_path: Path, runtime: str) -> None:
    from catenc.runtime.descriptor import load_runtime

    text = ok(catenc_run(tmp_path, "compile", "--runtime", runtime, "--help")).stdout
    section = text.split(f"Config keys of runtime '{runtime}'", 1)[1].split("Debug levels (", 1)[0]
    for key, spec in load_runtime(runtime).config_keys.items():
        assert f"{key}={spec.default}" in section, (key, section)
    assert "OMP=" not in section


def test_python_m_catenc_without_arguments_shows_usage(tmp_path: Path) -> None:
    result = catenc_run(tmp_path)
    assert result.returncode in (0, 2), result
    assert "compile" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_console_script_compiles(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "-S", script=True))
    assert files_in(work / "out") == SOURCE_FILES


# --------------------------------------------------------------------------- #
# what `compile` writes
# --------------------------------------------------------------------------- #


def test_compile_writes_the_four_files(built: Path) -> None:
    assert files_in(built) == DEFAULT_FILES
    assert elf_type(built / "libmodel.so") == 3  # ET_DYN
    protos = declarations((built / "model.h").read_text())
    assert set(protos) == {f"{e}{s}" for e in ("gemm", "scale2") for s in ("", "_workspace_bytes", "_set_num_threads")}
    roles = {f["path"]: f["role"] for f in manifest(built)["files"]}
    assert roles["libmodel.so"] == "shared_library"


def test_yaml_file_stem_names_the_outputs(tmp_path: Path) -> None:
    (tmp_path / "net.yml").write_text(
        'composite:\n  twice:\n    inputs: ["x: f32[N]"]\n    outputs: ["y: f32[N]"]\n    body: |\n      y = x * 2\n'
    )
    ok(catenc_run(tmp_path, "compile", "net.yml", "-o", "out", "-S"))
    assert files_in(tmp_path / "out") == {"net.c", "net.h", "net.manifest.json"}


def test_S_writes_sources_only(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-S", "-o", "out"))
    assert files_in(work / "out") == SOURCE_FILES
    assert "shared_library" not in {f["role"] for f in manifest(work / "out")["files"]}


def test_c_stops_at_an_object_file(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-c", "-o", "out"))
    assert files_in(work / "out") == SOURCE_FILES | {"model.o"}
    assert elf_type(work / "out" / "model.o") == 1  # ET_REL
    roles = {f["path"]: f["role"] for f in manifest(work / "out")["files"]}
    assert roles.get("model.o") == "object"


def test_emit_dumps(dumps: Path) -> None:
    assert files_in(dumps) == {
        "model.c", "model.h", "model.manifest.json",
        "model.ir.txt", "model.schedule.txt", "model.loops.txt",
    }  # fmt: skip
    kernels = [k["name"] for e in manifest(dumps)["entries"] for k in e["kernels"]]
    assert kernels
    for kind in ("ir", "schedule", "loops"):
        text = (dumps / f"model.{kind}.txt").read_text()
        assert len(text.strip().splitlines()) >= 2, text
        for entry in ENTRIES:
            assert entry in text, (kind, entry, text)
        if kind == "ir":
            for name in ("A", "B", "C", "x", "alpha", "y", "s"):
                assert re.search(rf"\b{name}\b", text), (name, text)
        else:
            for kernel in kernels:
                assert kernel in text, (kind, kernel, text)
        if kind == "loops":
            assert re.search(r"\bfor\b", text), text


def test_emit_dumps_come_beside_the_default_outputs(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--emit", "ir,loops"))
    assert files_in(work / "out") == DEFAULT_FILES | {"model.ir.txt", "model.loops.txt"}
    ok(catenc_run(work, "compile", "model.toml", "-o", "src", "-S", "--emit", "schedule"))
    assert files_in(work / "src") == SOURCE_FILES | {"model.schedule.txt"}


def test_emit_artifact_kinds_replace_the_defaults(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--emit", "c,h"))
    assert files_in(work / "out") == {"model.c", "model.h"}
    ok(catenc_run(work, "compile", "model.toml", "-o", "both", "--emit", "h,loops"))
    assert files_in(work / "both") == {"model.h", "model.loops.txt"}


def test_emit_archive_and_object(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--emit", "h,a,o,so,manifest"))
    out = work / "out"
    assert {"model.h", "libmodel.a", "model.o", "libmodel.so"} <= files_in(out)
    assert (out / "libmodel.a").read_bytes().startswith(b"!<arch>\n")
    assert elf_type(out / "model.o") == 1
    # the archive holds the object asked for: the source is compiled once for both
    commands = manifest(out)["build"]["commands"]
    assert sum("-c" in command for command in commands) == 1, commands
    assert ["ar", "rcs", "libmodel.a", "model.o"] in commands, commands


# --------------------------------------------------------------------------- #
# --composite, --prefix
# --------------------------------------------------------------------------- #


def test_composite_selects_entries(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "one", "--composite", "scale2"))
    one = work / "one"
    scale2 = {"scale2", "scale2_workspace_bytes", "scale2_set_num_threads"}
    assert set(declarations((one / "model.h").read_text())) == scale2
    assert [e["name"] for e in manifest(one)["entries"]] == ["scale2"]
    assert defined_dynamic_symbols(one / "libmodel.so") == scale2

    args = ("--composite", "scale2", "--composite", "gemm")
    ok(catenc_run(work, "compile", "model.toml", "-o", "two", "-S", *args))
    assert set(declarations((work / "two" / "model.h").read_text())) == {
        "gemm", "gemm_workspace_bytes", "gemm_set_num_threads", *scale2,
    }  # fmt: skip


def test_composite_unknown_name(work: Path) -> None:
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", "--composite", "nosuch"))
    assert "nosuch" in err
    assert files_in(work / "out") == set()


def test_prefix_applies_to_every_exported_symbol(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--prefix", "p_", "--test", SIZES))
    out = work / "out"
    exported = defined_dynamic_symbols(out / "libmodel.so")
    assert exported == {
        "p_gemm", "p_gemm_workspace_bytes", "p_gemm_set_num_threads",
        "p_scale2", "p_scale2_workspace_bytes", "p_scale2_set_num_threads",
    }  # fmt: skip
    assert all(name.startswith("p_") for name in declarations((out / "model.h").read_text()))
    entries = {e["name"]: e for e in manifest(out)["entries"]}
    assert entries["gemm"]["symbol"] == "p_gemm"
    assert entries["gemm"]["workspace_symbol"] == "p_gemm_workspace_bytes"

    ok(catenc_run(work, "compile", "model.toml", "-o", "obj", "--prefix", "p_", "-c"))
    symbols = global_object_symbols(work / "obj" / "model.o")
    assert symbols and all(name.startswith("p_") for name in symbols), symbols


# --------------------------------------------------------------------------- #
# optimisation levels, --config, --runtime, CC
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("level", ["-O0", "-O1", "-O2", "-O3", "-Ofast"])
def test_optimisation_levels(work: Path, level: str) -> None:
    result = ok(catenc_run(work, "compile", "model.toml", "-o", "out", level, "--test", SIZES))
    assert "MISMATCH" not in result.stdout


def test_no_fast_math_unless_asked(built: Path) -> None:
    commands = manifest(built)["build"]["commands"]
    assert commands
    flat = [arg for command in commands for arg in command]
    assert "-ffast-math" not in flat and "-Ofast" not in flat, flat


def test_config_omp(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--config", "OMP=1", "--test", SIZES))
    assert manifest(work / "out")["runtime"]["config"]["OMP"] == "1"


def test_config_unknown_key_names_the_valid_keys(work: Path) -> None:
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", "--config", "FOO=1"))
    assert "FOO" in err and "OMP" in err
    assert files_in(work / "out") == set()


def test_config_bad_value(work: Path) -> None:
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", "--config", "OMP=2"))
    assert "OMP" in err


def test_bad_user_cflags_are_not_an_internal_error(work: Path) -> None:
    """A flag the user passed that the C compiler rejects is the user's error (exit 1)."""
    (work / "crash").mkdir()  # where a reproducer would go, if catenc wrongly blamed itself
    result = catenc_run(
        work,
        "compile", "model.toml", "-o", "out", "--config", "CFLAGS=-fno-such-flag-xyz",
        env={"TMPDIR": str(work / "crash")},
    )  # fmt: skip
    err = user_error(result)
    assert "-fno-such-flag-xyz" in err
    assert files_in(work / "out") == set()


def test_unknown_runtime(work: Path) -> None:
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", "--runtime", "nosuch"))
    assert "nosuch" in err


def test_runtime_descriptor_file(work: Path) -> None:
    (work / "rt").mkdir()
    (work / "rt" / "mycc.py").write_text(
        'from catenc.runtime import CRuntime\nRUNTIME = CRuntime(name="mycc", compilers=("gcc",))\n'
    )
    args = ("--runtime", "rt/mycc.py", "--test", SIZES)
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", *args, env={"CC": None}))
    data = manifest(work / "out")
    assert data["runtime"]["name"] == "mycc"
    assert Path(data["build"]["commands"][0][0]).name == "gcc"
    assert "rt/mycc.py" in [i["path"] for i in data["inputs"]]


def test_runtime_descriptor_that_fails_to_load(work: Path) -> None:
    (work / "broken.py").write_text('raise RuntimeError("boom in descriptor")\n')
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", "--runtime", "./broken.py"))
    assert "boom in descriptor" in err


@pytest.mark.parametrize(
    "body, raised",
    [
        ("import sys\nsys.exit(0)\n", "SystemExit(0)"),
        ("raise SystemExit\n", "SystemExit()"),
        ("raise KeyboardInterrupt\n", "KeyboardInterrupt()"),
    ],
    ids=["sys.exit(0)", "SystemExit", "KeyboardInterrupt"],
)
def test_runtime_descriptor_that_exits_is_an_error(work: Path, body: str, raised: str) -> None:
    (work / "quits.py").write_text(body)
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", "--runtime", "quits.py"))
    line = body.count("\n")
    assert err.startswith(f"quits.py:{line}:1: error: runtime descriptor raised {raised} while loading"), err
    assert files_in(work / "out") == set()


def test_c_compiler_killed_by_a_signal_is_a_user_error(work: Path) -> None:
    script = work / "killed-cc"
    real = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    script.write_text(f'#!/bin/sh\ncase " $* " in *" -shared "*) kill -KILL $$;; esac\nexec {real} "$@"\n')
    script.chmod(0o755)
    args = ("--config", "OMP=0")
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "out", *args, env={"CC": str(script)}))
    assert "killed by SIGKILL" in err, err
    assert files_in(work / "out") == set()


def test_output_directory_that_is_a_file(work: Path) -> None:
    (work / "taken").write_text("not a directory\n")
    err = user_error(catenc_run(work, "compile", "model.toml", "-o", "taken", "-S"))
    assert err.strip() == "catenc: error: -o taken: not a directory", err
    assert (work / "taken").read_text() == "not a directory\n"


def test_runtime_from_catenc_runtime_path(work: Path) -> None:
    (work / "rts").mkdir()
    (work / "rts" / "mygcc.py").write_text(
        'from catenc.runtime import CRuntime\nRUNTIME = CRuntime(name="mygcc", compilers=("gcc",))\n'
    )
    env = {"CATENC_RUNTIME_PATH": str(work / "rts"), "CC": None}
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--runtime", "mygcc", env=env))
    assert manifest(work / "out")["runtime"]["name"] == "mygcc"


def test_cc_is_honoured(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--test", SIZES, env={"CC": "gcc"}))
    commands = manifest(work / "out")["build"]["commands"]
    assert Path(commands[0][0]).name == "gcc", commands


def test_missing_c_compiler(work: Path) -> None:
    result = catenc_run(work, "compile", "model.toml", "-o", "out", env={"CC": "/nonexistent/cc"})
    err = user_error(result)
    assert "no c compiler" in err.lower(), err
    assert files_in(work / "out") == set()


# --------------------------------------------------------------------------- #
# -D
# --------------------------------------------------------------------------- #


def test_define_fixes_a_symbol(work: Path) -> None:
    ok(catenc_run(work, "compile", "model.toml", "-o", "out", "-D", "N=64", "--test", "M=3,K=5,L=4"))
    out = work / "out"
    protos = declarations((out / "model.h").read_text())
    assert protos["gemm"] == (
        "const float* A, const float* B, float* C, int64_t M, int64_t K, void* workspace, size_t workspace_bytes"
    )
    assert protos["gemm_workspace_bytes"] == "int64_t M, int64_t K"
    entry = next(e for e in manifest(out)["entries"] if e["name"] == "gemm")
    assert entry["specialized"] == {"N": 64}
    assert [a["name"] for a in entry["args"] if a["role"] == "dim"] == ["M", "K"]
    b = next(a for a in entry["args"] if a["name"] == "B")
    assert b["shape"] == ["K", 64]


MLP = """\
composite:
  mlp:
    inputs: ["x: f32[B, D]", "w1: f32[D, H]", "w2: f32[H, D]"]
    outputs: ["y: f32[B, D]"]
    where:
      - "D % 4 == 0"
      - "H = 4*D"
    body: |
      y = relu(x @ w1) @ w2
"""


def test_define_of_a_derived_symbol_names_the_where_line(tmp_path: Path) -> None:
    (tmp_path / "mlp.yaml").write_text(MLP)
    err = user_error(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "-S", "-D", "H=100"))
    first = err.splitlines()[0]
    assert re.fullmatch(r"mlp\.yaml:7:\d+: error: -D H=100: 'H' is derived by 'where' \(H = 4\*D\).*", first), err
    assert '"H = 4*D"' in err.splitlines()[1]
    assert files_in(tmp_path / "out") == set()


def test_define_of_an_unknown_name_suggests_the_closest(tmp_path: Path) -> None:
    (tmp_path / "mlp.yaml").write_text(MLP)
    err = user_error(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "-S", "-D", "BB=4"))
    assert "-D BB=4" in err and "did you mean 'B'?" in err, err


def test_define_given_twice(tmp_path: Path) -> None:
    (tmp_path / "mlp.yaml").write_text(MLP)
    err = user_error(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "-S", "-D", "D=64", "-D", "D=32"))
    assert "-D D" in err and "64" in err and "32" in err, err
    ok(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "-S", "-D", "D=64", "-D", "D=64"))
    assert json.loads((tmp_path / "out" / "mlp.manifest.json").read_text())["entries"][0]["specialized"] == {"D": 64}


def test_test_sizes_must_name_symbols_of_the_tested_composites(tmp_path: Path) -> None:
    (tmp_path / "mlp.yaml").write_text(MLP)
    err = user_error(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "--test", "B=4,D=8,Q=3"))
    assert "--test Q=3" in err and "B, D" in err, err
    assert files_in(tmp_path / "out") == set(), "a bad --test is found before anything is built"


def test_test_sizes_agree_with_where_and_defines(tmp_path: Path) -> None:
    (tmp_path / "mlp.yaml").write_text(MLP)
    err = user_error(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "--test", "B=4,D=8,H=33"))
    assert re.match(r"mlp\.yaml:7:\d+: error: --test H=33: 'H' is derived by 'where' \(H = 4\*D\)", err), err
    assert "32" in err
    err = user_error(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "-D", "D=8", "--test", "B=4,D=12"))
    assert "--test D=12" in err and "fixed to 8 by -D" in err, err
    ok(catenc_run(tmp_path, "compile", "mlp.yaml", "-o", "out", "-D", "D=8", "--test", "B=4,D=8,H=32"))


def test_define_picks_a_dtype_variable(tmp_path: Path) -> None:
    (tmp_path / "t.toml").write_text(
        '[composite.neg]\ninputs = ["x: T[N]"]\noutputs = ["y: T[N]"]\n'
        'types = { T = ["f32", "f64"] }\nbody = "y = -x"\n'
    )
    ok(catenc_run(tmp_path, "compile", "t.toml", "-o", "a", "-S"))
    ok(catenc_run(tmp_path, "compile", "t.toml", "-o", "b", "-S", "-D", "T=f64"))
    assert declarations((tmp_path / "a" / "t.h").read_text())["neg"].startswith("const float* x, float* y")
    assert declarations((tmp_path / "b" / "t.h").read_text())["neg"].startswith("const double* x, double* y")


# --------------------------------------------------------------------------- #
# --debug, -v, -q
# --------------------------------------------------------------------------- #


def lines_of(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def test_debug_levels(work: Path, dumps: Path) -> None:
    quiet = ok(catenc_run(work, "compile", "model.toml", "-o", "out", "-S", "--debug", "0"))
    assert quiet.stderr == ""
    kernels = [k["name"] for e in manifest(dumps)["entries"] for k in e["kernels"]]
    stages = {
        2: lines_of(dumps / "model.ir.txt"),
        3: lines_of(dumps / "model.schedule.txt") + lines_of(dumps / "model.loops.txt"),
    }
    previous = ""
    for level in (1, 2, 3, 4):
        result = ok(catenc_run(work, "compile", "model.toml", "-o", "out", "-S", "--debug", str(level)))
        err = result.stderr
        assert len(err) > len(previous), f"--debug {level} prints no more than --debug {level - 1}"
        for kernel in kernels:
            assert kernel in err, (level, kernel)
        for stage, lines in stages.items():
            shown = all(line in err for line in lines)
            assert shown == (level >= stage), (level, stage, err)
        source = (work / "out" / "model.c").read_text()
        has_source = all(line in err for line in lines_of(work / "out" / "model.c"))
        assert has_source == (level >= 4), (level, source[:200])
        previous = err


def test_verbose_and_quiet(work: Path) -> None:
    verbose = ok(catenc_run(work, "compile", "model.toml", "-o", "out", "-S", "-v"))
    assert "model.c" in verbose.stdout + verbose.stderr
    quiet = ok(catenc_run(work, "compile", "model.toml", "-o", "out", "-q", "--test", SIZES))
    assert quiet.stdout == "" and quiet.stderr == ""


def test_a_closed_stdout_stops_like_sigpipe(work: Path) -> None:
    """`catenc compile -v | head -0`: the reader is gone before catenc writes; exit 128 + SIGPIPE,
    no traceback, no internal error (was: internal compiler error: BrokenPipeError)."""
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "catenc", "compile", "model.toml", "-o", "out", "-S", "-v"],
        cwd=work,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(read_end)
    os.close(write_end)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGPIPE, (process.returncode, err)
    assert err == ""


# --------------------------------------------------------------------------- #
# --test
# --------------------------------------------------------------------------- #

NUMBER = r"\d+(\.\d+)?([eE][-+]?\d+)?"


def test_test_prints_a_line_per_output(work: Path) -> None:
    result = ok(catenc_run(work, "compile", "model.toml", "-o", "out", "--test", SIZES))
    lines = result.stdout.splitlines()
    for entry, outputs in ENTRIES.items():
        for output in outputs:
            hits = [line for line in lines if re.search(rf"\b{entry}\b", line) and re.search(rf"\b{output}\b", line)]
            assert len(hits) == 1, (entry, output, result.stdout)
            assert re.search(NUMBER, hits[0]), hits[0]


REFERENCE_MODEL = """\
[composite.dbl]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]"]
body = "y = x * 2"

[composite.dbl.test]
reference = \"\"\"
import numpy as np
def reference(x, **kw):
    return x * FACTOR
\"\"\"
"""


@pytest.mark.parametrize("factor, code", [(2, 0), (3, 3)])
def test_test_against_a_user_reference(tmp_path: Path, factor: int, code: int) -> None:
    (tmp_path / "r.toml").write_text(REFERENCE_MODEL.replace("FACTOR", str(factor)))
    result = catenc_run(tmp_path, "compile", "r.toml", "-o", "out", "--test", "N=10")
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "dbl" in result.stdout + result.stderr


def test_reference_never_runs_during_compile(tmp_path: Path) -> None:
    text = REFERENCE_MODEL.replace("import numpy as np", "import no_such_module_for_catenc")
    (tmp_path / "r.toml").write_text(text)
    ok(catenc_run(tmp_path, "compile", "r.toml", "-o", "out"))


# --------------------------------------------------------------------------- #
# usage errors (exit 2)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "args",
    [
        ("compile",),
        ("compile", "model.toml", "--no-such-option"),
        ("no-such-command",),
        ("compile", "model.toml", "--debug", "5"),
        ("compile", "model.toml", "-O4"),
        ("compile", "model.toml", "-S", "-c"),
        ("compile", "model.toml", "--emit", "bogus"),
    ],
    ids=["no-file", "unknown-option", "unknown-command", "debug-5", "O4", "S-and-c", "emit-bogus"],
)
def test_usage_errors(work: Path, args: tuple[str, ...]) -> None:
    usage_error(catenc_run(work, *args, "-o", "out") if args[0] == "compile" else catenc_run(work, *args))
    assert files_in(work / "out") == set()


def test_emitting_source_needs_no_compiler(work):
    """-S writes the C and header on a machine without a C compiler (CC names none here)."""
    ok(catenc_run(work, "compile", "model.toml", "-S", "-o", "src", env={"CC": str(work / "no-such-cc")}))
    assert (work / "src" / "model.c").is_file() and (work / "src" / "model.h").is_file()
    assert manifest(work / "src")["runtime"]["config"]["OMP"] == "1"
