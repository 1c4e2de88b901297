"""The vector math inside emitted kernels: every loop that calls a vecmath routine is vectorised
by clang and by gcc, for AVX2 (x86-64-v3) and for AVX-512 (x86-64-v4), under catenc's own flags
(compiled only, so any machine checks both widths); softmax's exp(x - max) is the cheaper
routine for arguments <= 0 and stays exact on the edge cases numpy has.

tests/test_vector_math.py checks the routines on their own; here they are inside catenc's
loops (lane-split reductions, stores of reduced values), where a compiler may see them
differently."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_text
from toolchains import COMPILERS, MARCHES, require, runtime_flags

from catenc.build import BuildRequest, build
from catenc.driver import plan_file
from catenc.lower.lanes import FULL
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime

KERNELS = """
[composite.softmax_rows]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = "y = softmax(x)"

[composite.log_softmax_rows]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = "y = log_softmax(x)"

[composite.activations]
inputs = ["x: f32[N]"]
outputs = ["g: f32[N]", "t: f32[N]", "s: f32[N]"]
body = '''
g = gelu(x)
t = tanh(x)
s = sigmoid(x)
'''
"""

# compiler -> (the flag that reports vectorised loops, the report's pattern with the loop's line)
VECTORISE = {
    "clang": ("-Rpass=loop-vectorize", r":(\d+):\d+: remark: vectorized loop"),
    "gcc": ("-fopt-info-vec-optimized", r":(\d+):\d+: optimized: loop vectorized"),
}
VECMATH_CALL = re.compile(r"\bcatenc_v\w+_f32\(")


def emit_c(directory: Path, compiler: str, march: str) -> Path:
    """The C source catenc emits for KERNELS at -O2 for this compiler and target (no OpenMP)."""
    path = directory / "kernels.toml"
    path.write_text(KERNELS)
    runtime = load_runtime("clang")
    options = Options(runtime, runtime.validate_config({"CC": compiler, "MARCH": march, "OMP": "0"}), opt="2")
    written = build(plan_file(str(path), options), options, BuildRequest(str(path), str(directory), ("c", "h")))
    return Path(written["c"])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def loops_calling_vecmath(lines: list[str]) -> set[int]:
    """The (1-based) `for` line of each innermost loop that calls a vecmath routine per element:
    not a reduction's tail past its last full vector (a scalar sum of fewer elements than the
    lanes: summing it in vectors would reassociate) and not a call on a row's scalar in an outer
    loop."""
    loops = set()
    for i, line in enumerate(lines):
        if not VECMATH_CALL.search(line) or line.startswith("CATENC_VMATH") or not line[:1].isspace():
            continue
        for j in range(i - 1, -1, -1):
            above = lines[j]
            if not above[:1].isspace():  # left the function: a call outside any loop
                break
            if above.lstrip().startswith("for (") and _indent(above) < _indent(line):
                end = next(
                    k for k in range(j + 1, len(lines)) if _indent(lines[k]) <= _indent(above) and lines[k].strip()
                )
                innermost = not any(x.lstrip().startswith("for (") for x in lines[j + 1 : end])
                if innermost and f"= {FULL};" not in above:
                    loops.add(j + 1)
                break
    return loops


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("compiler", COMPILERS)
def test_kernel_loops_with_vector_math_vectorise(tmp_path, compiler, march):
    """Every loop of softmax, log_softmax, gelu, tanh and sigmoid that calls a vecmath routine
    is vectorised, and no call is left in the code (gcc 12 kept these loops scalar before
    -fno-trapping-math; tests/test_vector_math.py says why)."""
    require(compiler)
    source = emit_c(tmp_path, compiler, march)
    lines = source.read_text().splitlines()
    loops = loops_calling_vecmath(lines)
    assert len(loops) >= 5, "expected the exp, log, erf, tanh and sigmoid loops"
    report, pattern = VECTORISE[compiler]
    flags = runtime_flags(compiler, march)
    command = [compiler, *flags, report, "-fPIC", "-S", "-o", str(tmp_path / "kernels.s"), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=tmp_path)
    vectorised = {int(m.group(1)) for m in re.finditer(pattern, done.stderr)}
    missing = sorted(loops - vectorised)
    assert not missing, f"{compiler} {march}: scalar loops at " + ", ".join(
        f"{n}: {lines[n - 1].strip()}" for n in missing
    )
    assembly = (tmp_path / "kernels.s").read_text()
    called = re.findall(r"^\s*(?:call|jmp)\s+([A-Za-z_]\w*)(?:@PLT)?\s*$", assembly, re.M)
    assert not [c for c in called if c.startswith("catenc_v") or c.rstrip("f") in ("exp", "log", "erf", "tanh")]


def test_softmax_exp_takes_the_nonpositive_routine(tmp_path):
    """exp(x - max(x)) of a row is exp_le0 in softmax and log_softmax; an exp whose argument can
    be positive (a shift by another row's max, or by less than the max) keeps the full exp."""
    text = (
        KERNELS
        + """
[composite.other_max]
inputs = ["x: f32[N, D]", "z: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = "y = exp(x - max(z, axis=-1, keepdims=True))"

[composite.smaller_shift]
inputs = ["x: f32[N, D]"]
outputs = ["y: f32[N, D]"]
body = "y = exp(x - max(x, axis=-1, keepdims=True) + 1.0) / sum(x, axis=-1, keepdims=True)"
"""
    )
    path = tmp_path / "k.toml"
    path.write_text(text)
    runtime = load_runtime("clang")
    options = Options(runtime, runtime.validate_config({"MARCH": "x86-64-v3"}), opt="2")
    source = Path(build(plan_file(str(path), options), options, BuildRequest(str(path), str(tmp_path), ("c",)))["c"])
    code = source.read_text()
    functions = dict(re.findall(r"\nstatic void (\w+)\(.*?\n\{\n(.*?)\n\}\n", code, re.S))

    def calls(prefix: str) -> set[str]:
        return {c for name, body in functions.items() if name.startswith(prefix) for c in VECMATH_CALL.findall(body)}

    assert calls("softmax_rows") == {"catenc_vexp_le0_f32("}
    assert "catenc_vexp_le0_f32(" in calls("log_softmax_rows")
    assert calls("other_max") == {"catenc_vexp_f32("}
    assert calls("smaller_shift") == {"catenc_vexp_f32("}


def softmax64(x: np.ndarray) -> np.ndarray:
    """Softmax in float64 of the float32 shifted logits x - max (the float32 subtraction is the
    kernel's too; its rounding moves exp by up to |x - max| * 2^-24, beyond the exp's own error)."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp((x - x.max(axis=-1, keepdims=True)).astype(np.float64))
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_softmax_edge_rows(tmp_path, compiler):
    """Rows with huge, tiny (subnormal exp) and -inf logits, an all -inf row (NaN, as numpy)
    and a NaN row, through the exp_le0 path: within a few ulp of float64 numpy."""
    require(compiler)
    lib = compile_text(tmp_path, KERNELS, name="edges", config={"CC": compiler, "OMP": "0"}, defines={"D": 100})
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 100)) * 30).astype(np.float32)
    x[1] += 3e38 / 2  # huge logits: the shift keeps exp finite
    x[2, ::3] = -np.inf
    x[3, :] = -np.inf
    x[4, 7] = np.nan
    x[5] = np.linspace(-120, 0, 100, dtype=np.float32)  # subnormal and zero terms
    x[6, 0] = np.inf
    assert "catenc_vexp_le0_f32(" in (tmp_path / "out_edges_O2" / "edges.c").read_text()
    got = lib["softmax_rows"](x)
    want = softmax64(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=3e-7, atol=2.0**-148)


SIGMOIDS = """
[composite.sigmoids]
inputs = ["x: f32[N]"]
outputs = ["s: f32[N]", "w: f32[N]"]
body = '''
s = sigmoid(x)
w = silu(x)
'''
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_sigmoid_is_one_routine(tmp_path, compiler):
    """sigmoid and SiLU (x*sigmoid(x)) call catenc_vsigmoid_f32, not 1/(1 + exp(-x)) through the
    general exp: within the routine's 2.5 ulp of float64 everywhere, the tail of subnormal
    results included (where 1/(1 + exp(-x)) gave 0 once exp(-x) overflowed)."""
    require(compiler)
    lib = compile_text(tmp_path, SIGMOIDS, name="sig", config={"CC": compiler, "OMP": "0"}, defines={"N": 4000})
    code = (tmp_path / "out_sig_O2" / "sig.c").read_text()
    body = code[code.index("static void sigmoids_k0") :]
    assert set(VECMATH_CALL.findall(body)) == {"catenc_vsigmoid_f32("}
    x = np.concatenate(
        [np.linspace(-110, 30, 3990, dtype=np.float32), np.float32([-88.72, -np.inf, np.inf, np.nan, -0.0, 0.0, 3e38])]
    )
    x = np.concatenate([x, np.zeros(4000 - x.size, np.float32)])
    s, w = lib["sigmoids"](x)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_array_equal(np.isnan(s), np.isnan(want))
    ok = ~np.isnan(want)
    ulp = np.spacing(np.maximum(np.abs(want[ok]), 2.0**-126).astype(np.float32)).astype(np.float64)
    assert (np.abs(s[ok] - want[ok]) / ulp).max() <= 2.5
    with np.errstate(invalid="ignore"):  # -inf * 0
        np.testing.assert_array_equal(w[ok], x[ok] * s[ok])
