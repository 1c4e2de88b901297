"""catenc test-runtime: the coverage report, its cells, expectations and exit codes (docs/cli.md)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from catenc.runtime.descriptor import load_runtime
from catenc.testing.coverage import library_ops, make_cases, render_json, render_markdown, run_coverage, summary_line

GOOD_AND_BAD = """
[composite.zz_twice]
doc = "x * 2"
types = { T = ["f32", "f64", "i32"] }
inputs = ["x: T[..., N]"]
outputs = ["y: T[..., N]"]
body = "y = x * 2"
test.reference = "def reference(x, **_):\\n    return x * 2"

[composite.zz_wrong]
doc = "a reference that disagrees"
types = { T = ["f32"] }
inputs = ["x: T[N]"]
outputs = ["y: T[N]"]
body = "y = x + 1"
test.reference = "def reference(x, **_):\\n    return x + 2"

[composite.zz_broken]
doc = "does not type-check"
types = { T = ["f32"] }
inputs = ["x: T[N]"]
outputs = ["y: T[N]"]
body = "y = x + undefined_name"
"""


def catenc(*args, cwd):
    return subprocess.run([sys.executable, "-m", "catenc", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture()
def ops_dir(tmp_path):
    directory = tmp_path / "myops"
    directory.mkdir()
    (directory / "mine.toml").write_text(GOOD_AND_BAD)
    return directory


def test_cells_tell_pass_fail_and_error_apart(ops_dir):
    runtime = load_runtime("clang")
    coverage = run_coverage(runtime, runtime.validate_config({}), (str(ops_dir),), None, "zz_*", primitives=False)
    rows = {row.name: row for row in coverage.rows}
    assert {d: c.status for d, c in rows["zz_twice"].cells.items()} == {"f32": "pass", "f64": "pass", "i32": "pass"}
    assert rows["zz_twice"].cells["i32"].max_rel_error == 0
    assert rows["zz_wrong"].cells["f32"].status == "fail"
    assert rows["zz_broken"].cells["f32"].status == "error"
    assert "undefined_name" in rows["zz_broken"].cells["f32"].reason
    assert coverage.regressed
    text = render_markdown(coverage)
    assert "# Op coverage: runtime `clang`" in text and "catenc: 0.1.0" in text
    assert "| zz_twice | pass (0.0e+00) | pass (0.0e+00) |" in text
    assert summary_line(coverage).startswith(f"{coverage.counts()['pass']} passed, 1 failed, 1 error")
    data = json.loads(render_json(coverage))
    assert data["schema"] == "catenc.coverage/1"
    assert data["summary"]["fail"] == 1 and data["summary"]["error"] == 1


def test_cli_report_filters_and_exit_codes(tmp_path, ops_dir):
    result = catenc("test-runtime", "--ops", str(ops_dir), "-k", "zz_twice", "--dtypes", "f32,i32", "--no-primitives",
                    "-o", "R.md", "--json", "R.json", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "R.md").read_text()
    assert "| zz_twice | pass" in report and "f64" not in report
    data = json.loads((tmp_path / "R.json").read_text())
    assert [op["name"] for op in data["ops"]] == ["zz_twice"]
    assert set(data["ops"][0]["cells"]) == {"f32", "i32"}
    failing = catenc(
        "test-runtime", "--ops", str(ops_dir), "-k", "zz_wrong", "--no-primitives", "-o", "F.md", cwd=tmp_path
    )
    assert failing.returncode == 3
    assert "0 passed, 1 failed" in failing.stdout


def _runtime_file(tmp_path: Path, body: str, expect: str | None = None) -> Path:
    path = tmp_path / "myrt.py"
    path.write_text(textwrap.dedent(body))
    if expect is not None:
        (tmp_path / "myrt.expect.toml").write_text(textwrap.dedent(expect))
    return path


def test_expected_failures_are_xfail_and_fixed_ones_xpass(tmp_path, ops_dir):
    runtime = _runtime_file(
        tmp_path,
        """
        from catenc.runtime.descriptor import CRuntime
        RUNTIME = CRuntime(name="myrt", compilers=("gcc", "cc"))
        """,
        """
        [[expect]]
        op = "zz_wrong"
        dtype = "f32"
        status = "xfail"
        reason = "the reference is off by one on purpose"
        """,
    )
    result = catenc("test-runtime", "--runtime", str(runtime), "--ops", str(ops_dir), "-k", "zz_wrong",
                    "--no-primitives", "-o", "R.md", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| zz_wrong | xfail |" in (tmp_path / "R.md").read_text()
    assert "the reference is off by one on purpose" in (tmp_path / "R.md").read_text()
    (tmp_path / "myrt.expect.toml").write_text('[[expect]]\nop = "zz_twice"\ndtype = "f32"\nreason = "was broken"\n')
    result = catenc("test-runtime", "--runtime", str(runtime), "--ops", str(ops_dir), "-k", "zz_twice",
                    "--dtypes", "f32", "--no-primitives", "-o", "R.md", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 3
    assert "xpass" in (tmp_path / "R.md").read_text()


def test_unsupported_and_compiled_cells(tmp_path, ops_dir):
    runtime = _runtime_file(
        tmp_path,
        """
        from catenc.runtime.descriptor import CRuntime
        RUNTIME = CRuntime(name="myrt", dtypes=frozenset({"f32", "i32"}), can_run=False)
        """,
    )
    result = catenc("test-runtime", "--runtime", str(runtime), "--ops", str(ops_dir), "-k", "zz_twice",
                    "--no-primitives", "-o", "R.md", "--json", "R.json", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    cells = json.loads((tmp_path / "R.json").read_text())["ops"][0]["cells"]
    assert {d: c["status"] for d, c in cells.items()} == {"f32": "compiled", "f64": "unsupported", "i32": "compiled"}


def test_language_rows_pass_on_clang(tmp_path):
    runtime = load_runtime("clang")
    coverage = run_coverage(runtime, runtime.validate_config({}), (), None, "prim_*", primitives=True)
    assert len(coverage.rows) > 50
    assert not coverage.regressed, summary_line(coverage)


def test_bad_arguments_are_user_errors(tmp_path):
    result = catenc("test-runtime", "--dtypes", "f33", cwd=tmp_path)
    assert result.returncode == 1 and "unknown dtype 'f33'" in result.stderr
    result = catenc("test-runtime", "--ops", "nowhere", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr


# The dtypes whose kernels differ: f64's and i64's take f32's and i32's code paths at half the lanes.
KERNEL_DTYPES = {"f32", "f16", "bf16", "i32", "i8", "u8"}


def test_a_fast_subset_of_the_library_is_clean_on_clang():
    runtime = load_runtime("clang")
    config = runtime.validate_config({})
    for pattern in ("*softmax", "layernorm", "conv2d", "embedding", "quantize_linear", "reduce_argmax"):
        coverage = run_coverage(runtime, config, (), KERNEL_DTYPES, pattern, primitives=False)
        assert coverage.rows, pattern
        assert not coverage.regressed, (pattern, summary_line(coverage))
        assert all(c.status == "pass" for row in coverage.rows for c in row.cells.values())


def test_the_example_runtime_gcc_avx2_is_clean():
    """docs/runtimes.md's worked example: gcc, AVX2 flags, 8 lanes (6x16 gemm tiles), in f32, the
    dtype its tiles are chosen for, and f16 (F16C conversions)."""
    runtime = load_runtime(str(Path(__file__).parent.parent / "runtimes" / "examples" / "gcc_avx2.py"))
    config = runtime.validate_config({})
    assert config["VECTOR_WIDTH"] == "8" and runtime.vector_lanes(config) == 8
    for pattern in ("gemm", "softmax", "layernorm", "conv2d", "attention"):
        coverage = run_coverage(runtime, config, (), {"f32", "f16"}, pattern, primitives=False)
        assert coverage.rows, pattern
        assert not coverage.regressed, (pattern, summary_line(coverage))
        assert all(c.status == "pass" for row in coverage.rows for c in row.cells.values())


def test_an_op_whose_reference_exits_is_an_error_cell(tmp_path):
    """A reference calling sys.exit made the whole run exit 0 with no report."""
    ops = tmp_path / "exiting"
    ops.mkdir()
    (ops / "exits.toml").write_text(
        GOOD_AND_BAD.split("[composite.zz_wrong]")[0].replace("return x * 2", "raise SystemExit(0)")
    )
    result = catenc("test-runtime", "--ops", str(ops), "-k", "zz_twice", "--dtypes", "f32", "--no-primitives",
                    "-o", "R.md", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 3, result.stdout + result.stderr
    report = (tmp_path / "R.md").read_text()
    assert "| zz_twice | error |" in report and "SystemExit" in report


def test_k_keeps_the_ops_matching_any_of_several_comma_separated_patterns():
    ops = library_ops((), True)
    chosen = {case.op.name for case in make_cases(ops, None, "softmax,prim_ad*")}
    wanted = {op.name for _, op, _ in ops if "softmax" in op.name or op.name.startswith("prim_ad")}
    assert chosen == wanted and {"softmax", "prim_add"} <= chosen
    assert not make_cases(ops, None, "no_such_op,nor_this")
