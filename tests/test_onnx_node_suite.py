"""`catenc test-runtime --suite onnx` (catenc/testing/onnx_nodes.py): the ONNX backend node tests,
classified pass / fail / error / unsupported, over a handful of tests picked with a pattern.

The classification tests stand in a small importer of their own (a few elementwise ops), so they
check the runner, not the importer's coverage; one test runs the real importer on test_abs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from catenc.cli import main
from catenc.diagnostics import CatencError, Loc
from catenc.runtime.descriptor import load_runtime
from catenc.testing import onnx_nodes

PICKED = "test_abs,test_relu,test_add_bcast,test_asin"  # test_relu_expanded_ver18 too: an unsupported body
BODIES = {"Abs": "abs(x)", "Relu": "relu(x)", "Add": "x + y"}
DTYPES = {onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.DOUBLE: "f64", onnx.TensorProto.INT32: "i32"}


class Imported:
    def __init__(self, text: str, name: str) -> None:
        self.text, self.constants, self.name = text, {}, name


def stand_in(path: str, display: str | None = None, name: str | None = None) -> Imported:
    """A one-node importer: Abs, Relu and Add of f32, f64 or i32 tensors; Abs of f64 computes
    twice its value (a wrong result); anything else is an unsupported operator."""
    model = onnx.load(path)
    node = model.graph.node[0]
    types = [v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]]
    if len(model.graph.node) != 1 or node.op_type not in BODIES or not all(t in DTYPES for t in types):
        raise CatencError(
            f"node '{node.name}' ({node.op_type}, opset 21): operator not supported", Loc(display or path, 0, 0)
        )

    def decl(value) -> str:
        tensor = value.type.tensor_type
        dims = ", ".join(str(d.dim_value) for d in tensor.shape.dim)
        return f'"{value.name}: {DTYPES[tensor.elem_type]}[{dims}]"'

    body = BODIES[node.op_type].replace("x", node.input[0]).replace("y", node.input[-1])
    if node.op_type == "Abs" and types[0] == onnx.TensorProto.DOUBLE:
        body += f" + {body}"
    lines = [
        f"[composite.{name}]",
        f"inputs = [{', '.join(decl(v) for v in model.graph.input)}]",
        f"outputs = [{', '.join(decl(v) for v in model.graph.output)}]",
        f'body = "{node.output[0]} = {body}"',
    ]
    return Imported("\n".join(lines) + "\n", name)


@pytest.fixture(scope="module")
def report():
    runtime = load_runtime("clang")
    return onnx_nodes.run_node_tests(runtime, runtime.validate_config({}), pattern=PICKED, import_model=stand_in)


def test_classification(report):
    by_name = {r.name: r for r in report.results}
    assert by_name["test_abs"].status == "pass" and by_name["test_abs"].op == "Abs"
    assert by_name["test_abs"].max_rel_error == 0.0
    assert by_name["test_relu"].status == "pass"
    assert by_name["test_add_bcast"].status == "pass"
    unsupported = by_name["test_asin"]
    assert unsupported.status == "unsupported" and unsupported.blockers == ("Asin",)
    assert unsupported.detail == "Asin: operator not supported"
    assert all(r.status != "error" for r in report.results), [r for r in report.results if r.status == "error"]


def test_wrong_values_fail_with_the_error_measured():
    test = onnx_nodes.collect_tests(pattern="test_abs")[0]
    x = test.inputs[0].astype(np.float64)
    wrong = onnx_nodes.NodeTest("test_abs_f64", "Abs", _retyped(test.model), (x,), (np.abs(x),), 1e-3, 1e-7)
    result = _run_one(wrong)
    assert (result.status, result.max_rel_error) == ("fail", 1.0)
    largest = f"{np.abs(x).max():.3g}"
    assert result.detail == f"output 'y': max abs err {largest}, max rel err 1 (rtol 0.001, atol 1e-07)"


def test_a_batch_that_does_not_build_is_split_to_find_the_culprit(monkeypatch):
    real = onnx_nodes.build
    built = []

    def build(plan, options, request):
        names = [entry.name for entry in plan.entries]
        built.append(names)
        if "test_relu" in names:
            raise onnx_nodes.InternalError("the C toolchain rejected the generated code: clang ...\nmore")
        return real(plan, options, request)

    monkeypatch.setattr(onnx_nodes, "build", build)
    runtime = load_runtime("clang")
    report = onnx_nodes.run_node_tests(
        runtime, runtime.validate_config({}), pattern="test_abs,test_add_bcast,test_relu", import_model=stand_in
    )
    statuses = {r.name: (r.status, r.detail) for r in report.results}
    assert statuses["test_relu"] == ("error", "build: the C toolchain rejected the generated code: clang ...")
    assert statuses["test_abs"] == statuses["test_add_bcast"] == ("pass", "")
    assert built == [["test_abs", "test_add_bcast", "test_relu"], ["test_abs"], ["test_add_bcast", "test_relu"],
                     ["test_add_bcast"], ["test_relu"]]  # fmt: skip


def test_a_crash_in_the_entry_is_an_error_row(monkeypatch):
    """The tests run in a forked child: one that dies by a signal is its test's error."""
    monkeypatch.setattr(onnx_nodes, "check_test", lambda test, entry: os.kill(os.getpid(), signal.SIGSEGV))
    test = onnx_nodes.collect_tests(pattern="test_abs")[0]
    result = _run_one(test)
    assert (result.status, result.detail) == ("error", "run: the entry crashed or did not finish")


def _retyped(model):
    """The model with every f32 tensor f64."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in [*copy.graph.input, *copy.graph.output]:
        value.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    return copy


def _run_one(test):
    runtime = load_runtime("clang")
    options = onnx_nodes.Options(runtime, runtime.validate_config({}))
    with tempfile.TemporaryDirectory() as scratch:
        planned = onnx_nodes.plan_test(test, options, Path(scratch), stand_in)
        built, errors = onnx_nodes.build_batch(Path(scratch) / "b", [planned], options)
        assert not errors
        return onnx_nodes.run_built(*built[0])[0]


def test_a_crashing_importer_is_an_error_row():
    def crash(path, display=None, name=None):
        raise RuntimeError("boom\nsecond line")

    runtime = load_runtime("clang")
    report = onnx_nodes.run_node_tests(runtime, runtime.validate_config({}), pattern="test_abs", import_model=crash)
    assert [(r.name, r.status, r.detail) for r in report.results] == [
        ("test_abs", "error", "import: internal error: RuntimeError: boom")
    ]


def test_expanded_tests_name_the_op_they_expand():
    tests = {t.name: t for t in onnx_nodes.collect_tests(pattern="test_softmax_axis_0*")}
    assert tests["test_softmax_axis_0_expanded"].op == "Softmax"
    assert len(tests["test_softmax_axis_0_expanded"].model.graph.node) > 1


def test_report_formats(report):
    markdown = onnx_nodes.render_markdown(report)
    assert markdown.startswith("# ONNX node tests: runtime `clang`")
    summary = onnx_nodes.summary_line(report)
    assert f"**{summary}**" in markdown
    assert "| test_abs | Abs | pass (0.0e+00) |  |" in markdown
    assert "| Asin | 0 | 0 | 2 | yes |" in markdown  # test_asin, test_asin_example
    assert "| test_relu_expanded_ver18 | Relu | unsupported | Constant: operator not supported |" in markdown
    data = json.loads(onnx_nodes.render_json(report))
    assert data["schema"] == "catenc.onnx-node-tests/1"
    assert data["summary"]["pass"] == sum(t["status"] == "pass" for t in data["tests"])
    passed, listed = report.issue_counts()
    assert summary.endswith(f"{passed}/{listed} pass ({100 * passed / listed:.0f}%)")


def test_import_diagnostics_name_what_blocks():
    """Every diagnostic of a failed import: the node's op (with its domain), an input's element type."""
    test = onnx_nodes.collect_tests(pattern="test_abs")[0]
    err = CatencError(
        "node 'A_0' (ai.onnx.preview.training.Adam, opset 1): operator not supported",
        more=[CatencError("graph input 'X': type STRING is not supported (tensors of numbers or bool only)")],
    )
    result = onnx_nodes._import_failure(test, err)
    assert result.status == "unsupported"
    assert result.blockers == ("ai.onnx.preview.training.Adam", "input type STRING")
    assert result.detail == (
        "ai.onnx.preview.training.Adam: operator not supported; "
        "graph input 'X': type STRING is not supported (tensors of numbers or bool only)"
    )


def test_node_dir(tmp_path):
    """--node-dir: test folders (model.onnx, test_data_set_0/*.pb) as onnx's source tree holds them."""
    from onnx import numpy_helper

    for test in onnx_nodes.collect_tests(pattern="test_abs,test_add_bcast"):
        data = tmp_path / test.name / "test_data_set_0"
        data.mkdir(parents=True)
        onnx.save(test.model, str(tmp_path / test.name / "model.onnx"))
        for kind, values in (("input", test.inputs), ("output", test.outputs)):
            for n, value in enumerate(values):
                (data / f"{kind}_{n}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    runtime = load_runtime("clang")
    report = onnx_nodes.run_node_tests(
        runtime, runtime.validate_config({}), str(tmp_path), "test_a*", import_model=stand_in
    )
    assert [(r.name, r.op, r.status) for r in report.results] == [
        ("test_abs", "Abs", "pass"),
        ("test_add_bcast", "Add", "pass"),
    ]
    assert report.source == str(tmp_path)


def test_cli_suite_onnx(tmp_path):
    """The real importer through the command line: test_abs passes, the training op Adam is
    unsupported (not a regression: exit 0), and the report and JSON are written."""
    out, js = tmp_path / "onnx.md", tmp_path / "onnx.json"
    result = CliRunner().invoke(
        main, ["test-runtime", "--suite", "onnx", "-k", "test_abs,test_adam", "-o", str(out), "--json", str(js)]
    )
    assert result.exit_code == 0, result.output
    assert "1 passed, 0 failed, 0 error, 2 unsupported of 3 node tests" in result.output
    tests = {t["name"]: t for t in json.loads(js.read_text())["tests"]}
    assert tests["test_abs"]["status"] == "pass"
    assert tests["test_adam_multiple"]["blockers"] == ["ai.onnx.preview.training.Adam"]
    assert "| test_abs | Abs | pass (0.0e+00) |  |" in out.read_text()


def test_cli_refuses_ops_options_with_suite_onnx():
    result = CliRunner().invoke(main, ["test-runtime", "--suite", "onnx", "--dtypes", "f32"])
    assert result.exit_code == 1
    assert "--dtypes applies to --suite ops only" in result.output


def test_bf16_outputs_are_held_to_two_ulps_as_onnx_does():
    """onnx's backend runner widens a bf16 output's rtol to 2**-6 (two ulps); below that bf16
    cannot round-trip the test's float reference."""
    import ml_dtypes

    from catenc.dtypes import DTYPES, f32_to_bf16

    test = onnx_nodes.NodeTest("t", "Op", None, (), (), 1e-3, 1e-7)
    want = np.array([1.0, 2.0, 3.0], dtype=ml_dtypes.bfloat16)
    one_ulp = f32_to_bf16(np.array([1.0078125, 2.0, 3.0], dtype=np.float32))  # 1 + 2**-7
    assert onnx_nodes._compare_output("y", DTYPES["bf16"], one_ulp, want, test) == (2**-7, "")
    four_ulps = f32_to_bf16(np.array([1.03125, 2.0, 3.0], dtype=np.float32))
    rel, problem = onnx_nodes._compare_output("y", DTYPES["bf16"], four_ulps, want, test)
    assert rel == 2**-5 and problem == "output 'y': max abs err 0.0312, max rel err 0.0312 (rtol 0.015625, atol 1e-07)"


def test_freeze_shape_inputs():
    """The node tests give a Reshape its shape at run time; the importer needs it at compile time
    (unsupported), unless the runner makes it a constant of the model (freeze), as exports do."""
    runtime = load_runtime("clang")
    config = runtime.validate_config({})
    plain = onnx_nodes.run_node_tests(runtime, config, pattern="test_reshape_reordered_all_dims")
    (result,) = plain.results
    assert result.status == "unsupported" and "(input 1) must be known when the model is compiled" in result.detail
    frozen = onnx_nodes.run_node_tests(runtime, config, pattern="test_reshape_reordered_all_dims", freeze=True)
    (result,) = frozen.results
    assert (result.status, result.frozen) == ("pass", ("shape",))
    assert "| test_reshape_reordered_all_dims | Reshape | pass (0.0e+00) | constant shape |" in (
        onnx_nodes.render_markdown(frozen)
    )
    assert onnx_nodes.summary_line(frozen).endswith("; 1 with inputs made constants")


def test_without_the_onnx_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    result = CliRunner().invoke(main, ["test-runtime", "--suite", "onnx", "-k", "test_abs"])
    assert result.exit_code == 1
    assert "error: --suite onnx needs the onnx package: pip install 'catenc[onnx]'" in result.output
