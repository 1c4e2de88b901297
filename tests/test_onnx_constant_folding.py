"""Constant subgraphs of ONNX models computed once, at import (docs/onnx.md, "Constants computed at
import"; issue 26, item 1): a model whose weights come from ConstantOfShape fills, a Transpose or
a Mul of initializers, a Cast, does the work of the same model with initializers, and gives
onnxruntime's outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import compile_file, runtime
from onnx import TensorProto, helper, numpy_helper

from catenc.driver import plan_file
from catenc.onnx.folding import FOLD_CAP
from catenc.onnx.importer import import_model
from catenc.plan import Options
from catenc.schedule.kernels import schedule_cost

F = TensorProto.FLOAT
RNG = np.random.default_rng(26)
W1 = np.full((8, 3, 3, 3), 0.05, np.float32)  # a ConstantOfShape fill
B1 = np.full((8,), 0.1, np.float32)  # a ConstantOfShape fill, as a bias
W2 = RNG.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.2  # [kh, kw, cin, cout]: transposed to [16, 8, 3, 3]
S2 = RNG.uniform(0.5, 1.5, (16, 1, 1, 1)).astype(np.float32)  # multiplied into W2
FC1 = RNG.standard_normal((1040, 16 * 8 * 8)).astype(np.float32) * 0.02  # [out, in]: 1064960 elements > 2**20
G1 = RNG.uniform(0.5, 1.5, (1040, 1)).astype(np.float32)  # multiplied into FC1
FC2 = RNG.standard_normal((1040, 10)) * 0.1  # float64: cast to float32


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _fill(out: str, shape: tuple[int, ...], value: float) -> tuple[onnx.NodeProto, onnx.TensorProto]:
    node = helper.make_node(
        "ConstantOfShape", [f"{out}_shape"], [out], value=numpy_helper.from_array(np.array([value], np.float32))
    )
    return node, _init(f"{out}_shape", np.array(shape, np.int64))


def conv_net(constant: bool) -> onnx.ModelProto:
    """x[1, 3, 16, 16] -> conv 8 -> relu -> conv 16 (stride 2) -> relu -> fc 1040 -> relu -> fc 10: its
    weights initializers, or (`constant`) computed by nodes from constants only."""
    if constant:
        (n1, s1), (n2, s2) = _fill("w1", W1.shape, 0.05), _fill("b1", B1.shape, 0.1)
        weights = [
            n1,
            n2,
            helper.make_node("Transpose", ["w2_raw"], ["w2_t"], perm=[3, 2, 0, 1]),
            helper.make_node("Mul", ["w2_t", "s2"], ["w2"]),
            helper.make_node("Mul", ["fc1_raw", "g1"], ["fc1_scaled"]),
            helper.make_node("Transpose", ["fc1_scaled"], ["fc1"]),
            helper.make_node("Cast", ["fc2_64"], ["fc2"], to=F),
        ]
        inits = [s1, s2, _init("w2_raw", W2), _init("s2", S2), _init("fc1_raw", FC1), _init("g1", G1)]
        inits.append(_init("fc2_64", FC2))
    else:
        weights = []
        inits = [_init("w1", W1), _init("b1", B1), _init("w2", W2.transpose(3, 2, 0, 1) * S2)]
        inits += [_init("fc1", np.ascontiguousarray((FC1 * G1).T)), _init("fc2", FC2.astype(np.float32))]
    inits.append(_init("flat", np.array([1, -1], np.int64)))
    nodes = [
        *weights,
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Reshape", ["r2", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "fc1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r3"]),
        helper.make_node("MatMul", ["r3", "fc2"], ["y"]),
    ]
    x, y = helper.make_tensor_value_info("x", F, [1, 3, 16, 16]), helper.make_tensor_value_info("y", F, [1, 10])
    graph = helper.make_graph(nodes, "net", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _work(path: Path) -> tuple[int, object]:
    """The entry's kernels and its cost (flops, bytes read and written), planned without a C compiler."""
    (entry,) = plan_file(str(path), Options(runtime("clang"))).entries
    return len(entry.kernels), schedule_cost(entry.schedule)


@pytest.fixture(scope="module")
def nets(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("constant_folding")
    paths = {}
    for kind in ("initializers", "constant"):
        paths[kind] = directory / f"{kind}.onnx"
        onnx.save(conv_net(kind == "constant"), str(paths[kind]))
    return paths


def test_constant_weights_do_the_work_of_initializers(nets):
    """The same kernels, flops and bytes: no weight is computed per call (before, the Mul and
    Transpose of FC1's 1064960 elements ran in the entry, as two more kernels)."""
    assert _work(nets["constant"]) == _work(nets["initializers"])


def test_constant_weights_match_onnxruntime(nets, tmp_path):
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    for kind, path in nets.items():
        got = compile_file(path, tmp_path / kind)["net"](x)
        (want,) = _ort(path, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(want))), err_msg=kind)


def _graph(nodes, inits, inputs, outputs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fill_read_elementwise_stays_code_and_a_matmul_operand_is_stored(tmp_path):
    """A broadcast read elementwise is repeated where it is read (no 4 MiB constant); the same
    size read by a MatMul is stored. --debug 1 prints both decisions."""
    add, add_shape = _fill("fill", (1, 1100, 1000), 1.0)
    weight, weight_shape = _fill("w", (1000, 1100), 0.5)
    nodes = [add, weight, helper.make_node("Add", ["x", "fill"], ["a"]), helper.make_node("MatMul", ["a", "w"], ["y"])]
    x = helper.make_tensor_value_info("x", F, [1, 1100, 1000])
    y = helper.make_tensor_value_info("y", F, [1, 1100, 1100])
    path = tmp_path / "fills.onnx"
    onnx.save(_graph(nodes, [add_shape, weight_shape], [x], [y]), str(path))
    imported = import_model(str(path))
    assert list(imported.constants) == ["w"] and imported.constants["w"].shape == (1000, 1100)
    assert "fill = full([1, 1100, 1000], 1.0, f32)\na = x + fill\n" in imported.text
    result = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", str(path), "-o", str(tmp_path / "out"), "-S", "--debug", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "[catenc] fill f32[1, 1100, 1000], read by Add: computed by the library on each call" in result.stderr
    assert "[catenc] w f32[1000, 1100], read by MatMul: computed at import (1100000 elements" in result.stderr


def test_a_node_no_converter_folds_is_evaluated_at_import(tmp_path):
    """Sigmoid and Conv of initializers (no numpy folding in their converters): computed by
    onnx's reference evaluator at import, so the body is one product."""
    w = RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)
    k = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Sigmoid", ["w"], ["ws"]),
        helper.make_node("Conv", ["ws", "k"], ["wk"], pads=[1, 1, 1, 1]),  # [4, 1, 3, 3]
        helper.make_node("Flatten", ["wk"], ["wf"]),  # [4, 9]
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    x, y = helper.make_tensor_value_info("x", F, [2, 4]), helper.make_tensor_value_info("y", F, [2, 9])
    model = _graph(nodes, [_init("w", w), _init("k", k)], [x], [y])
    path = tmp_path / "evaluated.onnx"
    onnx.save(model, str(path))
    imported = import_model(str(path))
    assert imported.text.split("body = '''\n")[1] == "y = x @ wf\n'''\n"
    feed = RNG.standard_normal((2, 4)).astype(np.float32)
    got = compile_file(path, tmp_path / "out")["g"](feed)
    np.testing.assert_allclose(got, _ort(path, {"x": feed})[0], rtol=1e-5, atol=1e-6)


def test_past_the_cap_a_fill_stays_code_and_the_decision_says_why(tmp_path):
    """A fill of more than FOLD_CAP elements is never made (no memory taken): it stays `full`."""
    side = 1 << 14  # 2**28 elements > FOLD_CAP
    fill, fill_shape = _fill("big", (side, side), 2.0)
    nodes = [fill, helper.make_node("Sigmoid", ["big"], ["s"]), helper.make_node("Add", ["x", "s"], ["y"])]
    x, y = helper.make_tensor_value_info("x", F, [1, 1]), helper.make_tensor_value_info("y", F, [side, side])
    path = tmp_path / "cap.onnx"
    onnx.save(_graph(nodes, [fill_shape], [x], [y]), str(path))
    imported = import_model(str(path))
    assert f"big = full([{side}, {side}], 2.0, f32)\n" in imported.text and not imported.constants
    assert f"computed by the library on each call ({side * side} elements, more than the {FOLD_CAP}" in imported.text
