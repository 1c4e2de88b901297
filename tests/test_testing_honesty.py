"""`--test` and `test-runtime` tell the truth: tolerances that scale with the reduction length
and dtype (and are printed), user mistakes as diagnostics with exit 1 (never "a bug in
catenc"), and no pass where nothing was checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catenc.build import BuildRequest, build
from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.frontend.composites import load_composite_file
from catenc.loader import load
from catenc.plan import Options
from catenc.runtime.descriptor import load_runtime
from catenc.testing.check import check_entries, reduction_rounding
from catenc.testing.reference import run_program

ROOT = Path(__file__).resolve().parent.parent


def catenc(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def build_plan(path: Path, out: Path):
    """The plan and loaded library of a composite file, compiled by the clang runtime."""
    runtime = load_runtime("clang")
    options = Options(runtime, config=runtime.validate_config({}), opt="2")
    plan = plan_file(str(path), options)
    written = build(plan, options, BuildRequest(str(path), str(out), ("c", "h", "manifest", "so")))
    return plan, load(written["manifest"])


def run_test(tmp_path: Path, text: str, sizes: dict[str, int]):
    """check_entries on a composite file of this text (each in a fresh library: dlopen caches by path)."""
    path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.toml"
    path.write_text(text)
    plan, library = build_plan(path, tmp_path / path.stem)
    return check_entries(plan, library, sizes)


GEMM = """
[composite.mm]
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"
"""
ROW_SUMS = """
[composite.row_sums]
inputs = ["x: T[R, N]"]
outputs = ["y: T[R]"]
types = { T = ["f64", "f32", "f16", "bf16", "i32"] }
body = "y = sum(x, axis=1)"
"""


# ---- tolerances ----------------------------------------------------------------------------------


def test_a_long_reduction_passes_and_prints_its_tolerance(tmp_path):
    """samples/gemm.toml at K=100000 reported a false MISMATCH (max abs err 6e-4 against a fixed
    atol of 2e-5, at outputs near zero)."""
    plan, library = build_plan(ROOT / "samples" / "gemm.toml", tmp_path / "gemm")
    checks, lines = check_entries(plan, library, {"M": 100, "N": 64, "K": 100000})
    assert checks and all(c.ok for c in checks), lines
    for check, line in zip(checks, lines):
        assert check.atol > 2e-5 and check.rtol > 2e-4  # widened for K = 1e5 terms
        assert f"(atol {check.atol:.2e})" in line and f"(rtol {check.rtol:.2e})" in line, line
        assert 0 < check.worst <= 1 and f"worst {check.worst:.0%} of atol+rtol*|want|" in line, line


CONTRACTIONS = """
[composite.mm]
inputs = ["a: f64[M, K]", "b: f64[K, N]"]
outputs = ["y: f64[M, N]"]
body = "y[i, j] = sum[k](a[i, k] * b[k, j])"

[composite.outer]
inputs = ["x: f64[M, K]", "w: f64[N]"]
outputs = ["y: f64[M]"]
body = "y[i] = sum[k, j](x[i, k] * w[j])"

[composite.scaled]
inputs = ["x: f64[M, K]"]
outputs = ["y: f64[M]"]
body = "y[i] = sum[k](x[i, k] * 2.0) + max[k](x[i, k] * x[i, k])"
"""


@pytest.mark.parametrize("sizes", [{"M": 3, "K": 5, "N": 4}, {"M": 1, "K": 0, "N": 1}, {"M": 2, "K": 1, "N": 0}])
def test_the_reference_contracts_a_sum_of_products_as_numpy_does(tmp_path, sizes):
    """The interpreter's einsum path for `sum[k](a * b)` (no product grid) gives numpy's sums,
    with empty and unit extents; other reductions keep the grid."""
    path = tmp_path / "c.toml"
    path.write_text(CONTRACTIONS)
    plan = plan_file(str(path), Options(load_runtime("clang"), opt="0"))
    m, k, n = sizes["M"], sizes["K"], sizes["N"]
    g = np.random.default_rng(5)
    a, b, w = g.standard_normal((m, k)), g.standard_normal((k, n)), g.standard_normal(n)
    inputs = {"mm": {"a": a, "b": b}, "outer": {"x": a, "w": w}, "scaled": {"x": a}}
    square = np.max(a * a, axis=1, initial=-np.inf)
    expected = {"mm": a @ b, "outer": a.sum(axis=1) * w.sum(), "scaled": 2.0 * a.sum(axis=1) + square}
    for entry in plan.entries:
        (got,) = run_program(entry.program, inputs[entry.name], sizes).values()
        np.testing.assert_allclose(got, expected[entry.name], rtol=1e-12, atol=1e-12)


def test_a_wrong_reference_fails_at_every_size(tmp_path):
    """An off-by-one reduction (the last term left out) is a mismatch at K=37 and at K=100000."""
    wrong = GEMM + 'test.reference = "def reference(A, B, **_):\\n    return A[:, :-1] @ B[:-1]"\n'
    for k in (37, 100000):
        checks, lines = run_test(tmp_path, wrong, {"M": 100, "N": 64, "K": k})
        assert [c.ok for c in checks] == [False], lines
        assert "MISMATCH" in lines[0] and checks[0].worst > 1, lines
    checks, lines = run_test(tmp_path, f32_only(ROW_SUMS), {"R": 64, "N": 100000})
    assert all(c.ok for c in checks), lines
    wrong = f32_only(ROW_SUMS) + 'test.reference = "def reference(x, **_):\\n    return x[:, 1:].sum(axis=1)"\n'
    for n in (37, 100000):
        checks, lines = run_test(tmp_path, wrong, {"R": 64, "N": n})
        assert [c.ok for c in checks] == [False], lines


def f32_only(text: str) -> str:
    return text.replace('types = { T = ["f64", "f32", "f16", "bf16", "i32"] }\n', "").replace("T[", "f32[")


def test_user_tolerances_override_the_defaults(tmp_path):
    checks, lines = run_test(tmp_path, GEMM + "test.rtol = 0\ntest.atol = 0\n", {"M": 100, "N": 64, "K": 100000})
    assert [(c.ok, c.rtol, c.atol) for c in checks] == [(False, 0.0, 0.0)], lines
    assert "(atol 0.00e+00)" in lines[0] and "MISMATCH" in lines[0]


def test_the_rounding_allowance_follows_reduction_length_and_dtype(tmp_path):
    path = tmp_path / "rows.toml"
    path.write_text(ROW_SUMS)
    runtime = load_runtime("clang")
    env = {"R": 3, "N": 10000}
    expected = {"f64": np.finfo(np.float64).eps * 100, "f32": np.finfo(np.float32).eps * 100, "i32": 0.0}
    expected["f16"] = expected["bf16"] = expected["f32"]  # half types accumulate in f32
    for dtype, want in expected.items():
        options = Options(runtime, runtime.validate_config({}), opt="2", defines={"T": dtype})
        (entry,) = plan_file(str(path), options).entries
        assert reduction_rounding(entry.program, env) == pytest.approx(want), dtype
    checks, lines = run_test(tmp_path, f32_only(ROW_SUMS).replace("f32[", "i32["), {"R": 4, "N": 1000})
    assert checks[0].ok and "(exact)" in lines[0], lines


def test_the_cli_prints_the_tolerance_beside_the_error(tmp_path):
    done = catenc("compile", str(ROOT / "samples" / "gemm.toml"), "-o", "out", "--test", "M=100,N=64,K=100000",
                  cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MISMATCH" not in done.stdout and "(atol " in done.stdout and "(rtol " in done.stdout


# ---- user errors are diagnostics -------------------------------------------------------------------


def test_sizes_too_large_to_allocate_are_a_user_error(tmp_path):
    with pytest.raises(CatencError, match=r"the reference's grid for 'C' of 'mm' \(f32\[100, 64, 99999999999\]\)"):
        run_test(tmp_path, GEMM, {"M": 100, "N": 64, "K": 99999999999})
    done = catenc("compile", str(ROOT / "samples" / "gemm.toml"), "-o", "out", "--test", "K=99999999999", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PiB" in done.stderr and "give smaller sizes" in done.stderr
    assert "internal compiler error" not in done.stderr and "Traceback" not in done.stderr


def test_a_huge_zeros_under_test_is_a_user_error(tmp_path):
    output = "[composite.f]\ninputs = ['x: f32[N]']\noutputs = ['y: f32[N, N]']\nbody = 'y = zeros([N, N]) + x'\n"
    with pytest.raises(CatencError, match=r"output 'y' of 'f' \(f32\[1000000, 1000000\]\) takes 3.6 TiB"):
        run_test(tmp_path, output, {"N": 1000000})
    inside = (
        "[composite.f]\ninputs = ['x: f32[N]']\noutputs = ['y: f32[N]']\n"
        "body = '''\nt = zeros([N, N]) + x\ny = sum(t, axis=0)\n'''\n"
    )
    with pytest.raises(CatencError, match=r"a value the reference computes of 'f' \(f32\[3000000, 3000000\]\)") as err:
        run_test(tmp_path, inside, {"N": 3000000})
    assert (err.value.loc.line, err.value.loc.col) == (5, 5)  # at `zeros([N, N]) + x`
    (tmp_path / "z.toml").write_text(inside)
    done = catenc("compile", "z.toml", "-o", "out", "--test", "N=3000000", cwd=tmp_path)
    assert done.returncode == 1 and "z.toml:5:5: error:" in done.stderr, done.stderr


def test_a_range_bound_that_is_no_symbol_is_located(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(GEMM + 'test.ranges = { A = ["a", 3] }\n')
    with pytest.raises(CatencError, match="test range of 'A': 'a' is not a symbol of 'mm'") as err:
        load_composite_file(str(path))
    assert (err.value.loc.line, err.value.loc.col) == (6, 22)
    path.write_text(GEMM + "test.ranges = { Z = [0, 3] }\n")
    with pytest.raises(CatencError, match="test.ranges: 'Z' is not an input of 'mm'"):
        load_composite_file(str(path))
    path.write_text(GEMM + 'test.ranges = { A = ["a", 3] }\n')
    done = catenc("compile", "r.toml", "-o", "out", "--test", "M=2,N=2,K=2", cwd=tmp_path)
    assert done.returncode == 1 and "r.toml:6:22: error:" in done.stderr, done.stderr


TWICE = """
[composite.f]
inputs = ["x: f32[N]"]
outputs = ["y: f32[N]", "z: f32[N]"]
body = '''
y = x * 2
z = x + 1
'''
test.sizes = { N = 4 }
"""


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("'hello', x", r"returned a str for output 'y'; expected f32 values of shape \(4,\)"),
        ("x * 2", r"returned 1 value\(s\); expected 2, one per output \(y, z\)"),
        ("x * 2, x[:3] + 1", r"returned shape \(3,\) for output 'z'; expected f32 values of shape \(4,\)"),
        ("x * 2, (x + 1j)", r"returned complex\d+ values for output 'z'"),
    ],
)
def test_a_reference_returning_the_wrong_thing_names_the_output(tmp_path, returns, message):
    text = TWICE + f'test.reference = "def reference(x, **_):\\n    return {returns}"\n'
    with pytest.raises(CatencError, match=message) as err:
        run_test(tmp_path, text, {"N": 4})
    assert err.value.loc.line == 10


# ---- no false passes -------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["raise SystemExit(0)", "def reference(x, **_):\\n    raise SystemExit(0)", "x = 1"])
def test_a_reference_that_exits_or_defines_nothing_fails_loudly(tmp_path, code):
    (tmp_path / "f.toml").write_text(TWICE + f'test.reference = "{code}"\n')
    done = catenc("compile", "f.toml", "-o", "out", "--test", "N=4", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "f.toml:10:18: error: test.reference of 'f'" in done.stderr
    assert "SystemExit" in done.stderr or "defines no function 'reference'" in done.stderr


def test_test_runtime_that_selects_nothing_is_an_error(tmp_path):
    done = catenc("test-runtime", "-k", "nomatch", "-o", "R.md", cwd=tmp_path)
    assert done.returncode == 1 and "no op matches 'nomatch'" in done.stderr, done.stdout + done.stderr
    done = catenc("test-runtime", "--ops", "/nonexistent", "-o", "R.md", cwd=tmp_path)
    assert done.returncode == 1 and "--ops /nonexistent: no such directory" in done.stderr
    (tmp_path / "empty").mkdir()
    done = catenc("test-runtime", "--ops", "empty", "-o", "R.md", cwd=tmp_path)
    assert done.returncode == 1 and "no op file" in done.stderr
    assert not (tmp_path / "R.md").exists()


@pytest.mark.parametrize(
    ("blocker", "reason", "advice"),
    [("driver", "no OpenCL device", "pocl-opencl-icd"), ("pyopencl", "pyopencl missing", "catenc[opencl]")],
)
def test_opencl_without_a_driver_or_pyopencl_is_not_run(tmp_path, blocker, reason, advice):
    """Simulated: an empty OpenCL vendor directory (the ICD loader finds no driver), or a pyopencl
    that fails to import. Cells said `compiled` and the exit code was 0."""
    env = {"OCL_ICD_VENDORS": str(tmp_path)}
    if blocker == "pyopencl":
        (tmp_path / "block").mkdir()
        (tmp_path / "block" / "pyopencl.py").write_text("raise ImportError('blocked by the test')\n")
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "block"), os.environ.get("PYTHONPATH")]))}
    done = catenc("test-runtime", "--runtime", "opencl", "-k", "layernorm", "--no-primitives", "-o", "R.md",
                  "--json", "R.json", cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"4 of 4 cells not run: {reason}" in done.stderr and advice in done.stderr
    report = (tmp_path / "R.md").read_text()
    assert f"| layernorm |{f' not run: {reason} |' * 4}" in report
    assert f"4 not run ({reason})" in report and advice in report and "compiled |" not in report
    cells = json.loads((tmp_path / "R.json").read_text())["ops"][0]["cells"]
    assert {c["status"] for c in cells.values()} == {"not_run"}


def test_compile_only_builds_and_runs_nothing(tmp_path):
    done = catenc("test-runtime", "--compile-only", "-k", "layernorm", "--no-primitives", "-o", "R.md", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| layernorm | compiled | compiled | compiled | compiled |" in (tmp_path / "R.md").read_text()
