"""Names that collide: every name a backend reserves (its renderer's `reserved`, the tables of
catenc/codegen/names.py) works as an input, output and symbol name of a composite.

Generated code renames such a user name (`new` -> `new_1`); the manifest, the loader and the
entry keep the user's name, and model.h, which C++ includes through `extern "C"`, compiles under
gcc and g++ alike. Since issue 16 a C keyword or C library name (`int`, `exp`, `errno`, and `cos`
and `sin` as rotary embeddings name their inputs) is such a name too: a body cannot mistake one
for C, as generated code renames it. A name the frontend rejects outright (a Python keyword,
which a body cannot use, or a name C reserves for its implementation or catenc for itself) stays
a diagnostic, as does a composite named like C (its name is the entry's C symbol). The names are
batched, a hundred or so to a composite, so that each backend's check is one compile: gcc and g++
for C, nvcc for CUDA (part of this machine's toolchain: the test fails without it), the OpenCL
driver (PoCL) for OpenCL.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catenc.build import BuildRequest, build
from catenc.codegen.c import CRenderer
from catenc.codegen.gpu import CudaRenderer, OpenCLRenderer
from catenc.codegen.names import C_LOCALS, CUDA_LOCALS
from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.frontend.composites import check_name
from catenc.loader import load
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime
from catenc.runtime.device_host import build_opencl

ROOT = Path(__file__).resolve().parent.parent
RENDERERS = {"clang": CRenderer, "cuda": CudaRenderer, "opencl": OpenCLRenderer}
# The names issue 14 found shadowing a built-in or breaking the build, per backend.
FOUND = {
    "clang": "M_PI need SIZE_MAX linux j0 gamma LITTLE_ENDIAN".split(),
    "cuda": """threadIdx blockIdx M_PI stream new this template private xor typename namespace cudaSuccess
    cudaTextureType2D groups count""".split(),
    "opencl": "local kernel constant private half read_only image2d_t get_local_id CLK_LOCAL_MEM_FENCE float4".split(),
}
BATCH = 120
# Declarations in generated code: a type, then the declared name (not a function's).
DECLARED = re.compile(
    r"\b(?:u?int(?:8|16|32|64)_t|float|double|size_t|half|char|int|void|struct CUstream_st)\*?\s+"
    r"(?:restrict\s+|__restrict__\s+)?([A-Za-z_]\w*)\b(?!\s*\()"
)
# What model.h may meet before it in a C or C++ program.
HEADERS = ["math.h", "stdint.h", "stddef.h", "float.h", "limits.h", "stdio.h", "stdlib.h", "errno.h", "assert.h"]


def accepted(name: str) -> bool:
    """Whether the frontend takes name as a tensor or symbol name."""
    try:
        check_name(name, "tensor", None)
    except CatencError:
        return False
    return True


def batches(runtime: str) -> list[list[str]]:
    names = [n for n in sorted(RENDERERS[runtime].reserved.names | set(FOUND[runtime])) if accepted(n)]
    return [names[i : i + BATCH] for i in range(0, len(names), BATCH)]


def composites(names: list[str], k: int) -> str:
    """Three composites over names: as inputs, as outputs and as symbols."""
    q = json.dumps
    inputs = [f"{n}: f32[N]" for n in names]
    outputs = [f"{n}: f32[N]" for n in names]
    total = "y = " + " + ".join(names)
    made = "\n".join(f"{n} = x * {i + 1}.0" for i, n in enumerate(names))
    sized_in = [f"p{i}: f32[{n}]" for i, n in enumerate(names)]
    sized_out = [f"q{i}: f32[{n}]" for i, n in enumerate(names)]
    doubled = "\n".join(f"q{i} = p{i} * 2.0" for i in range(len(names)))
    return "\n".join(
        [
            f"[composite.inputs{k}]\ninputs = {q(inputs)}\noutputs = ['y: f32[N]']\nbody = {q(total)}",
            f"[composite.outputs{k}]\ninputs = ['x: f32[N]']\noutputs = {q(outputs)}\nbody = {q(made)}",
            f"[composite.symbols{k}]\ninputs = {q(sized_in)}\noutputs = {q(sized_out)}\nbody = {q(doubled)}",
            "",
        ]
    )


def emit_sources(directory: Path, runtime: str, text: str, opt: str = "2") -> dict[str, str]:
    """Compile text as model.toml in-process with `-S`; kind -> path of what was written."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.toml"
    path.write_text(text)
    rt = load_runtime(runtime)
    options = Options(rt, config=rt.validate_config({}), opt=opt)
    return build(
        plan_file(str(path), options), options, BuildRequest(str(path), str(directory / "out"), ("c", "h", "manifest"))
    )


def run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stderr.splitlines() if "error" in line][:20]
    assert done.returncode == 0, f"{' '.join(argv)}:\n" + "\n".join(errors or done.stderr.splitlines()[:20])


def check_header(header: Path) -> None:
    """model.h compiles in C and in C++ after the standard headers a program is likely to include."""
    for compiler, lang, extra in (("gcc", "c", ["complex.h", "stdbool.h"]), ("g++", "c++", [])):
        unit = header.parent / f"use_{lang.replace('+', 'x')}.{lang.replace('+', 'p')}"
        unit.write_text("".join(f"#include <{h}>\n" for h in HEADERS + extra) + f'#include "{header.name}"\n')
        run([compiler, "-fsyntax-only", "-Wall", "-Werror", "-x", lang, unit.name], header.parent)


def check_source(runtime: str, written: dict[str, str]) -> None:
    source = Path(written["c"])
    if runtime == "clang":
        run(["gcc", "-fsyntax-only", "-fopenmp", source.name], source.parent)
        check_header(Path(written["h"]))
    elif runtime == "cuda":
        assert shutil.which("nvcc"), "nvcc (the CUDA toolkit) is part of this machine's toolchain"
        run(["nvcc", "-std=c++17", "--ptx", "-arch=sm_90", "-o", "/dev/null", source.name], source.parent)
    else:
        build_opencl(source.read_text(), source.name)


@pytest.mark.parametrize("runtime", sorted(RENDERERS))
def test_every_reserved_name_as_input_output_and_symbol(tmp_path: Path, runtime: str) -> None:
    reserved = RENDERERS[runtime].reserved
    assert all(name in reserved for name in FOUND[runtime])
    groups = batches(runtime)
    text = "".join(composites(names, k) for k, names in enumerate(groups))
    written = emit_sources(tmp_path, runtime, text)
    check_source(runtime, written)

    # No user name that the backend reserves is declared in the entries' code (only the
    # scaffolding's own parameters and locals are); the manifest keeps every user name.
    entries_code = Path(written["c"]).read_text().split("/* ---- inputs0 ---- */", 1)[1]
    source = re.sub(r"/\*.*?\*/|//[^\n]*", "", entries_code, flags=re.S)
    declared = {m.group(1) for m in DECLARED.finditer(source)} - C_LOCALS - CUDA_LOCALS
    assert not [name for name in declared if name in reserved], sorted(n for n in declared if n in reserved)
    manifest = json.loads(Path(written["manifest"]).read_text())
    entries = {e["name"]: e for e in manifest["entries"]}
    for k, names in enumerate(groups):
        assert [a["name"] for a in entries[f"inputs{k}"]["args"] if a["role"] == "input"] == names
        assert [a["name"] for a in entries[f"outputs{k}"]["args"] if a["role"] == "output"] == names
        assert [a["name"] for a in entries[f"symbols{k}"]["args"] if a["role"] == "dim"] == names
    if runtime != "opencl":
        header = " ".join(Path(written["h"]).read_text().split())
        for entry in manifest["entries"]:
            assert " ".join(entry["prototype"].split()) + ";" in header


def test_names_the_frontend_rejects_stay_diagnostics(tmp_path: Path) -> None:
    """A reserved name the frontend refuses (`and`, `__syncthreads`, `_Bool`, ...) is a located
    error as an input, an output and a symbol, never a crash or a rename; C's keywords and library
    names are not among them."""
    names = sorted({n for r in RENDERERS.values() for n in r.reserved.names if not accepted(n)})
    assert {"and", "not", "__syncthreads", "__kernel", "_Bool", "_Complex"} <= set(names)
    assert not {"int", "float", "exp", "expf", "sqrtf", "cos", "sin", "errno", "printf", "NULL"} & set(names)
    rt = load_runtime("clang")
    options = Options(rt, config=rt.validate_config({}))
    for name in names:
        for line, inputs, outputs in (
            (2, f"{name}: f32[N]", "y: f32[N]"),
            (3, "x: f32[N]", f"{name}: f32[N]"),
            (2, f"x: f32[{name}]", "y: f32[N]"),
        ):
            path = tmp_path / "model.toml"
            path.write_text(
                f"[composite.c]\ninputs = [{json.dumps(inputs)}]\noutputs = [{json.dumps(outputs)}]\nbody = 'y = x'\n"
            )
            with pytest.raises(CatencError) as error:
                plan_file(str(path), options)
            assert error.value.loc is not None and error.value.loc.line == line, (name, str(error.value))


COLLIDING = """
[composite.collide]
inputs = ["threadIdx: f32[blockIdx, local]", "kernel: f32[local]", "M_PI: f32", "new: f32[blockIdx]",
          "new_1: f32[blockIdx]"]
outputs = ["half: f32[blockIdx, local]", "private: f32[blockIdx]", "this: f32[blockIdx]"]
body = '''
constant = threadIdx * kernel + M_PI
need = exp(constant - max(constant, axis=1, keepdims=True))
half = need / sum(need, axis=1, keepdims=True)
private = sum(constant, axis=1) + new
this = max(threadIdx, axis=1) * new_1 - new
'''
"""


def expected(threadIdx, kernel, M_PI, new, new_1):
    constant = threadIdx * kernel + M_PI
    need = np.exp(constant - constant.max(axis=1, keepdims=True))
    return need / need.sum(axis=1, keepdims=True), constant.sum(axis=1) + new, threadIdx.max(axis=1) * new_1 - new


@pytest.mark.parametrize("opt", ["0", "2"])
@pytest.mark.parametrize("runtime", ["clang", "opencl"])
def test_colliding_names_run_end_to_end(tmp_path: Path, runtime: str, opt: str) -> None:
    """`--test` passes; the loader calls the entry by the user's names and gets numpy's values;
    the header (C) declares renamed parameters, which the manifest's prototype shows."""
    (tmp_path / "model.toml").write_text(COLLIDING)
    done = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "model.toml", "-o", "out", f"-O{opt}", "--runtime", runtime,
         "--test", "blockIdx=5,local=37"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.count(" ok") == 3, done.stdout

    manifest = json.loads((tmp_path / "out" / "model.manifest.json").read_text())
    (entry,) = manifest["entries"]
    assert [a["name"] for a in entry["args"] if a["role"] in ("input", "output", "dim")] == [
        "threadIdx", "kernel", "M_PI", "new", "new_1", "half", "private", "this", "blockIdx", "local"
    ]  # fmt: skip
    rng = np.random.default_rng(14)
    args = [rng.standard_normal(shape).astype(np.float32) for shape in [(5, 37), (37,), (), (5,), (5,)]]
    outputs = load(str(tmp_path / "out" / "model.manifest.json")).collide(*args)
    for got, want in zip(outputs, expected(*args)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    if runtime == "clang":
        header = (tmp_path / "out" / "model.h").read_text()
        assert "float* this_1, int64_t blockIdx, int64_t local" in header  # C++: `this`; not `new_1`'s name
        assert "const float* new_2, const float* new_1" in header
        assert entry["prototype"] + ";" in header
        check_header(tmp_path / "out" / "model.h")


def test_an_entry_cannot_take_a_reserved_name(tmp_path: Path) -> None:
    """The entry's name is the user's, so a reserved one is a diagnostic (for C too: model.h is
    C++ as well); --prefix makes it a valid name."""
    for runtime, name in (("clang", "new"), ("clang", "M_PI"), ("cuda", "threadIdx"), ("cuda", "template")):
        path = tmp_path / "model.toml"
        path.write_text(f"[composite.{name}]\ninputs = ['x: f32[N]']\noutputs = ['y: f32[N]']\nbody = 'y = x'\n")
        done = subprocess.run(
            [sys.executable, "-m", "catenc", "compile", "model.toml", "-S", "-o", "out", "--runtime", runtime],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1 and done.stderr.startswith("model.toml:1:"), done.stderr
        assert f"'{name}' is reserved" in done.stderr and "--prefix" in done.stderr
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "model.toml", "-S", "-o", "out", "--runtime", "cuda",
         "--prefix", "q_"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 'extern "C" int q_template(' in (tmp_path / "out" / "model.cu").read_text()


def test_a_tensor_named_like_a_function_of_the_file(tmp_path: Path) -> None:
    """Kernels and their helpers are functions named after the entry; a tensor of that name
    would hide one where it is called."""
    text = "[composite.probe]\ninputs = ['probe_k0: f32[N]', 'probe_k0_row0: f32[N]']\noutputs = ['probe: f32[N]']\n"
    text += "body = 'probe = probe_k0 * 2.0 + probe_k0_row0'\n"
    written = emit_sources(tmp_path, "clang", text)
    run(["gcc", "-fsyntax-only", "-fopenmp", "model.c"], tmp_path / "out")
    assert "probe_k0_1" in Path(written["c"]).read_text()


def test_renaming_is_deterministic_and_keeps_unreserved_names(tmp_path: Path) -> None:
    """Only reserved names change, each to the first free `name_k`, the same in every build."""
    text = COLLIDING
    first = Path(emit_sources(tmp_path / "a", "cuda", text)["c"]).read_text()
    again = Path(emit_sources(tmp_path / "b", "cuda", text)["c"]).read_text()
    assert first == again
    (params,) = re.findall(r'extern "C" int collide\(([^)]*)\)', first)
    assert params.split(", ")[:5] == [
        "const float* threadIdx_1", "const float* kernel", "float M_PI_1", "const float* new_2", "const float* new_1"
    ]  # fmt: skip


def test_the_header_renames_only_what_breaks_a_declaration(tmp_path: Path) -> None:
    """A parameter may take a function's name in a declaration: model.h keeps layernorm's `gamma`
    (a glibc <math.h> function, which the source's kernels rename) and renames only keywords,
    macros and types."""
    written = emit_sources(tmp_path, "clang", (ROOT / "samples" / "layernorm.toml").read_text())
    assert "const float* gamma," in Path(written["h"]).read_text()
    assert "const float* restrict gamma_1," in Path(written["c"]).read_text()
