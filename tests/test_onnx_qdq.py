"""Quantised models in integers (docs/onnx.md, Quantised models): `fuse_qdq` (catenc/onnx/rewrite.py)
turns the QDQ groups onnxruntime's quantiser writes into QLinearConv / QLinearMatMul, which
quantization.py computes as products of the raw 8-bit values in i32.

Small float models are quantised by onnxruntime.quantization.quantize_static (QDQ, per channel, u8
activations, int8 weights), their last DequantizeLinear dropped so that the outputs are u8, and
compared with onnxruntime's int8 session: equal bit for bit (a fused group requantises in f32, as
onnxruntime does). The QLinear nodes alone are compared exactly with numpy's integer arithmetic.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from catenc.onnx.importer import import_proto
from catenc.onnx.rewrite import fuse_qdq
from tests.conftest import compile_file
from tests.test_onnx_import import make_model, save, tensor

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
RNG = np.random.default_rng(7)


def weight(name: str, shape: tuple[int, ...], scale: float = 0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def const(name: str, values, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


class Batches(CalibrationDataReader):
    """A few random inputs for the quantiser's calibration."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.batches = iter([{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def quantized(model: onnx.ModelProto, shape: tuple[int, ...], tmp_path) -> onnx.ModelProto:
    """The model as quantize_static writes it (QDQ, per channel, u8/s8), its outputs left as u8."""
    source, target = save(model, tmp_path, "float"), tmp_path / "quantized.onnx"
    options = dict(quant_format=QuantFormat.QDQ, per_channel=True)
    options.update(activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    quantize_static(str(source), str(target), Batches(model.graph.input[0].name, shape), **options)
    return u8_outputs(onnx.load(str(target)))


def u8_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the DequantizeLinear nodes that write its outputs removed: it outputs their u8 input."""
    outputs = {o.name for o in model.graph.output}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] in outputs]
    for node in last:
        model.graph.node.remove(node)
    del model.graph.output[:]
    model.graph.output.extend(tensor(n.input[0], U8, None) for n in last)
    return model


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def accumulators(text: str) -> list[str]:
    """The statements of the imported text that compute the QLinear nodes' sums (not the reshape of
    a grouped one's)."""
    sums = (line for line in text.splitlines() if re.match(r"\w+_acc(_groups)?( =|\[)", line))
    return [line for line in sums if not re.search(r"= \w+_acc_groups\[", line)]


def assert_integer_form(text: str, count: int, unless: str = "-", fused: bool = True) -> None:
    """`count` sums (those not starting with `unless`), each of products of 8-bit values cast to
    i32 (`cast(x, i32) * cast(w, i32)`, `cast(a, i32) @ cast(b, i32)`) or, a depthwise one written tap
    by tap, to f32 (exact: quantization.py `_exact_in_f32`), with no f64 in them; `fused` (QDQ
    groups): requantised in f32 as onnxruntime does, `round(cast(acc, f32) * ...)`, no f64 at all."""
    sums = [line for line in accumulators(text) if not line.startswith(unless)]
    assert len(sums) == count, sums
    for line in sums:
        exact_taps = "sum[" not in line and re.search(r", f32\) \* cast\(\w+\[k, 0, ", line)
        assert (re.search(r", i32\) [*@] cast\(", line) or exact_taps) and "f64" not in line, line
        if fused:
            acc = re.match(r"(\w+?_acc)(_groups)?\b", line)[1]
            assert re.search(rf"round\(cast\({acc}, f32\) \*", text), acc
    assert not fused or "f64" not in text


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds: list[np.ndarray], tmp_path, weights="baked") -> str:
    """catenc's u8 outputs equal onnxruntime's (the weights as `--weights`); returns the C source."""
    library = compile_file(save(model, tmp_path, "model"), tmp_path / "out", weights=weights)
    entry = next(iter(library.entries.values()))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    for x in feeds:
        got = entry(x)
        for g, w in zip(got if isinstance(got, tuple) else (got,), session.run(None, {name: x}), strict=True):
            assert g.dtype == w.dtype == np.uint8 and np.array_equal(g, w)
    return (library.path.parent / "model.c").read_text()


# ---- quantised models against onnxruntime ---------------------------------------------------------


def conv_stack() -> onnx.ModelProto:
    """Conv (stride 2, padded) + Relu, a grouped Conv + Relu and a depthwise Conv + Relu, on 8x8 images."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Relu", ["c3"], ["y"]),
    ]
    inits = [weight("w1", (8, 3, 3, 3)), weight("w2", (8, 4, 3, 3)), weight("w3", (8, 1, 3, 3))]
    inits += [weight(f"b{k}", (8,), 0.1) for k in (1, 2, 3)]
    return make_model(nodes, [tensor("x", F, [2, 3, 8, 8])], [tensor("y", F, None)], inits, opset=17)


@pytest.mark.parametrize("weights", ["baked", "packed"])
def test_a_quantised_conv_stack_computes_in_integers_and_matches_onnxruntime(tmp_path, weights):
    """Baked, the int8 filters are the gemms' A panels in the library; packed, the pack function packs
    them at load (8-bit panels in groups of depth steps)."""
    model = quantized(conv_stack(), (2, 3, 8, 8), tmp_path)
    fused = fuse_qdq(model)
    assert ops(fused).count("QLinearConv") == 3 and "Conv" not in ops(fused)
    assert "DequantizeLinear" not in ops(fused)  # every one fed a fused group only
    assert_integer_form(import_proto(model, "model.onnx").text, 3)
    feeds = [RNG.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(8)]
    source = assert_matches_onnxruntime(model, feeds, tmp_path, weights)
    assert ("gemm A panels */" in source) == (weights == "packed")


def dense_layers() -> onnx.ModelProto:
    """MatMul, Gemm with transB=1 and a bias (a torch Linear), Gemm without a bias."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Relu", ["m1"], ["r1"]),
        helper.make_node("Gemm", ["r1", "w2", "b2"], ["g2"], transB=1),
        helper.make_node("Relu", ["g2"], ["r2"]),
        helper.make_node("Gemm", ["r2", "w3"], ["y"]),
    ]
    inits = [weight("w1", (16, 24)), weight("w2", (12, 24), 0.2), weight("b2", (12,), 0.1), weight("w3", (12, 6))]
    return make_model(nodes, [tensor("x", F, [4, 16])], [tensor("y", F, None)], inits, opset=17)


def test_quantised_matmul_and_gemm_compute_in_integers_and_match_onnxruntime(tmp_path):
    model = quantized(dense_layers(), (4, 16), tmp_path)
    fused = fuse_qdq(model)
    # a Gemm with a bias is a 1x1 QLinearConv between Reshapes (the bias added to the i32 sums)
    assert ops(fused).count("QLinearMatMul") == 2 and ops(fused).count("QLinearConv") == 1
    assert not {"MatMul", "Gemm", "DequantizeLinear"} & set(ops(fused))
    text = import_proto(model, "model.onnx").text
    assert_integer_form(text, 3)
    assert len(re.findall(r"cast\(\w+, i32\) @ cast\(\w+, i32\)", text)) == 2
    feeds = [RNG.standard_normal((4, 16)).astype(np.float32) for _ in range(16)]
    assert_matches_onnxruntime(model, feeds, tmp_path)


# ---- QLinearConv and QLinearMatMul nodes against numpy's integers -----------------------------------


def conv_sums(x, x_zero, w, w_zero, bias, pads, strides, group):
    """sum((x - x_zero) * (w - w_zero)) + bias in int64, x padded with zeros after the shift (2-D, no dilation)."""
    shifted = x.astype(np.int64) - x_zero
    shifted = np.pad(shifted, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    w = w.astype(np.int64) - np.reshape(w_zero, (-1, 1, 1, 1))
    (n, _, h, wd), (k, c, r, s) = shifted.shape, w.shape
    out_h, out_w = (h - r) // strides[0] + 1, (wd - s) // strides[1] + 1
    sums = np.zeros((n, k, out_h, out_w), np.int64)
    per_group = k // group
    for g, i, j in np.ndindex(group, r, s):
        window = shifted[
            :, g * c : (g + 1) * c, i : i + strides[0] * out_h : strides[0], j : j + strides[1] * out_w : strides[1]
        ]
        outs = slice(g * per_group, (g + 1) * per_group)
        sums[:, outs] += np.einsum("nchw,kc->nkhw", window, w[outs, :, i, j])
    return sums + np.reshape(0 if bias is None else bias, (-1, 1, 1))


def requantized(sums, factor, y_zero):
    """round(sums * factor + y_zero) in f64, saturated to u8 (the factor as the reference makes it, in f32)."""
    return np.clip(np.rint(sums * factor.astype(np.float64) + y_zero), 0, 255).astype(np.uint8)


CONVS = {  # output: (x zero point, weight zero points, bias?, pads, strides, group)
    "padded": (126, 0, True, [1, 1, 1, 1], [2, 2], 1),
    "grouped": (126, 0, False, [1, 0, 1, 1], [1, 1], 2),
    "depthwise": (3, 0, True, [1, 1, 1, 1], [1, 1], 4),
    "shifted_weights": (126, [2, -3, 0, 5], True, [1, 1, 1, 1], [2, 2], 1),  # weight zero points: the f64 path
}


def qlinear_conv(name: str, x_zero, w_zero, bias: bool, pads, strides, group):
    """A QLinearConv node on x (u8 [2, 4, 8, 8]) of 4 output channels, and its initializers."""
    w = RNG.integers(-128, 128, (4, 4 // group, 3, 3)).astype(np.int8)
    inits = [
        const(f"{name}_xz", x_zero, np.uint8),
        const(f"{name}_w", w, np.int8),
        const(f"{name}_wz", np.broadcast_to(w_zero, (4,)), np.int8),
        const(f"{name}_ws", RNG.uniform(0.001, 0.01, 4), np.float32),
        const(f"{name}_b", RNG.integers(-3000, 3000, 4), np.int32),
    ]
    inputs = ["x", "xs", f"{name}_xz", f"{name}_w", f"{name}_ws", f"{name}_wz", "ys", "yz"]
    inputs += [f"{name}_b"] if bias else []
    node = helper.make_node("QLinearConv", inputs, [name], pads=pads, strides=strides, group=group)
    return node, inits


def test_qlinear_conv_sums_in_i32_exactly_as_numpy(tmp_path):
    nodes, inits = [], [const("xs", 0.02, np.float32), const("ys", 0.15, np.float32), const("yz", 100, np.uint8)]
    for name, form in CONVS.items():
        node, params = qlinear_conv(name, *form)
        nodes.append(node)
        inits += params
    model = make_model(nodes, [tensor("x", U8, [2, 4, 8, 8])], [tensor(n, U8, None) for n in CONVS], inits, opset=13)
    text = import_proto(model, "model.onnx").text
    assert_integer_form(text, 3, unless="shifted_weights", fused=False)
    assert (
        "cast(where((2*oh + r >= 1) & (2*ow + s >= 1), x[n, c, 2*oh + r - 1, 2*ow + s - 1], cast(126, u8)), i32)"
        in text
    )
    assert "shifted_weights_x = cast(x, f64) - cast(cast(126, u8), f64)" in text  # weight zero points: in f64
    x = RNG.integers(0, 256, (2, 4, 8, 8)).astype(np.uint8)
    got = next(iter(compile_file(save(model, tmp_path), tmp_path / "out").entries.values()))(x)
    arrays = {t.name: numpy_helper.to_array(t) for t in inits}
    for (name, (x_zero, _, bias, pads, strides, group)), out in zip(CONVS.items(), got, strict=True):
        p = {key: arrays[f"{name}_{key}"] for key in ("w", "wz", "ws", "b")}
        sums = conv_sums(x, x_zero, p["w"], p["wz"], p["b"] if bias else None, pads, strides, group)
        factor = np.float32(0.02) * p["ws"] / np.float32(0.15)
        np.testing.assert_array_equal(out, requantized(sums, factor.reshape(-1, 1, 1), 100), err_msg=name)


def test_a_depthwise_qlinear_conv_sums_in_f32_only_below_two_to_the_24(tmp_path):
    """5x5 taps of full-range weights sum exactly in f32 (255 * 25 * 128 < 2^24); a bias near 2^24
    would leave f32's integers, so that convolution sums in i32. Both equal numpy's int64 sums."""
    w = RNG.choice(np.array([-128, 127], np.int8), (4, 1, 5, 5))
    biases = {"small": RNG.integers(-3000, 3000, 4), "large": np.array([1 << 24, -5, 7, -(1 << 24)])}
    inits = [const(n, v, t) for n, v, t in (("xs", 0.02, np.float32), ("ys", 40.0, np.float32), ("yz", 100, np.uint8))]
    inits += [const("xz", 255, np.uint8), const("w", w, np.int8), const("wz", np.zeros(4), np.int8)]
    inits += [const("ws", RNG.uniform(0.001, 0.01, 4), np.float32)]
    inits += [const(f"b_{name}", bias, np.int32) for name, bias in biases.items()]
    params = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    nodes = [helper.make_node("QLinearConv", [*params, f"b_{n}"], [n], pads=[2] * 4, group=4) for n in biases]
    model = make_model(nodes, [tensor("x", U8, [1, 4, 9, 9])], [tensor(n, U8, None) for n in biases], inits, opset=13)
    sums = dict(zip(biases, accumulators(import_proto(model, "model.onnx").text), strict=True))
    assert "cast(i32)" not in sums["small"] and sums["small"].count(", f32) * cast(w[k, 0, ") == 25, sums["small"]
    assert sums["large"].count(", i32) * cast(w[k, 0, ") == 25 and "f32" not in sums["large"], sums["large"]
    x = RNG.integers(0, 256, (1, 4, 9, 9)).astype(np.uint8)
    x[0, 0] = 255  # the largest sums: every tap at the largest input
    got = next(iter(compile_file(save(model, tmp_path), tmp_path / "out").entries.values()))(x)
    factor = (np.float32(0.02) * numpy_helper.to_array(inits[6]) / np.float32(40.0)).reshape(-1, 1, 1)
    for (name, bias), out in zip(biases.items(), got, strict=True):
        want = requantized(conv_sums(x, 255, w, 0, bias, [2] * 4, [1, 1], 4), factor, 100)
        np.testing.assert_array_equal(out, want, err_msg=name)


def test_qlinear_matmul_sums_in_i32_exactly_as_numpy(tmp_path):
    """Per-column and per-tensor b scales; a zero point of b (the f64 form of (a - a_zero) @ (b - b_zero))."""
    b = RNG.integers(-128, 128, (16, 6)).astype(np.int8)
    inits = [
        const("as", 0.05, np.float32),
        const("az", 131, np.uint8),
        const("b", b, np.int8),
        const("bs", RNG.uniform(0.001, 0.01, 6), np.float32),
        const("bs1", 0.004, np.float32),
        const("bz", 0, np.int8),
        const("bz_shifted", -7, np.int8),
        const("ys", 0.2, np.float32),
        const("yz", 120, np.uint8),
    ]
    nodes = [
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["per_column"]),
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs1", "bz_shifted", "ys", "yz"], ["shifted"]),
    ]
    outs = [tensor(n, U8, None) for n in ("per_column", "shifted")]
    model = make_model(nodes, [tensor("a", U8, [5, 16])], outs, inits, opset=13)
    text = import_proto(model, "model.onnx").text
    assert "per_column_acc = cast(a, i32) @ cast(b, i32) + per_column_correction" in text
    assert "shifted_acc = (cast(a, i32) - cast(cast(131, u8), i32)) @ (cast(b, i32) - cast(cast(-7, i8), i32))" in text
    a = RNG.integers(0, 256, (5, 16)).astype(np.uint8)
    per_column, shifted = next(iter(compile_file(save(model, tmp_path), tmp_path / "out").entries.values()))(a)
    sums = (a.astype(np.int64) - 131) @ b.astype(np.int64)
    scales = numpy_helper.to_array(inits[3])
    np.testing.assert_array_equal(per_column, requantized(sums, np.float32(0.05) * scales / np.float32(0.2), 120))
    shifted_sums = (a.astype(np.int64) - 131) @ (b.astype(np.int64) + 7)
    factor = np.float32(0.05) * np.float32(0.004) / np.float32(0.2)
    np.testing.assert_array_equal(shifted, requantized(shifted_sums, factor, 120))


# ---- what fuse_qdq leaves alone -------------------------------------------------------------------


def qdq_conv(x_type=np.uint8, w_zero=0, bias_scale=None, extra_output=None) -> onnx.ModelProto:
    """DQ(x), DQ(w), DQ(bias) -> Conv -> Q written by hand; the arguments break one condition each."""
    x_scale, w_scale = np.float32(0.02), np.array([0.01, 0.03], np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["conv", "ys", "yz"], ["y"]),
    ]
    inits = [
        const("xz", 0, x_type),
        const("xs", x_scale, np.float32),
        const("wq", RNG.integers(-128, 128, (2, 3, 3, 3)), np.int8),
        const("ws", w_scale, np.float32),
        const("wz", np.broadcast_to(w_zero, (2,)), np.int8),
        const("bq", [100, -200], np.int32),
        const("bs", x_scale * w_scale if bias_scale is None else bias_scale, np.float32),
        const("ys", 0.1, np.float32),
        const("yz", 0, np.uint8),
    ]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(x_type))
    outs = [tensor("y", U8, None)] + ([tensor(extra_output, 0, None)] if extra_output else [])
    return make_model(nodes, [tensor("xq", elem, [1, 3, 6, 6])], outs, inits, opset=13)


def test_models_without_a_fusable_group_are_returned_as_they_are():
    unchanged = [
        conv_stack(),  # a float model
        qdq_conv(x_type=np.int8),  # int8 activations
        qdq_conv(w_zero=[0, 1]),  # a weight zero point that is not zero
        qdq_conv(bias_scale=[0.0002, 0.0007]),  # a bias of another scale than x_scale * w_scale
        qdq_conv(extra_output="conv"),  # the float result is an output too
    ]
    for model in unchanged:
        assert fuse_qdq(model) is model
    assert ops(fuse_qdq(qdq_conv())) == ["QLinearConv"]  # as written: fused, its DequantizeLinear nodes dropped


def test_a_dequantized_input_read_elsewhere_is_kept():
    model = qdq_conv(extra_output="xd")
    fused = fuse_qdq(model)
    assert ops(fused) == ["DequantizeLinear", "QLinearConv"] and ops(model)[3] == "Conv"
    assert list(fused.graph.node[1].input) == ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "bq"]


def test_a_dynamically_quantised_matmul_is_an_int8_gemm(tmp_path):
    """quantize_dynamic's DynamicQuantizeLinear -> MatMulInteger (its zero point computed when the model
    runs) multiplies the raw bytes, the zero point times the weight's column sums subtracted after."""
    from onnxruntime.quantization import quantize_dynamic

    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model = make_model(nodes, [tensor("x", F, [3, 40, 64])], [tensor("y", F, None)], [weight("w", (64, 48))], opset=17)
    source, target = save(model, tmp_path, "float"), tmp_path / "dynamic.onnx"
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    quantised = onnx.load(str(target))
    assert "MatMulInteger" in ops(quantised) and "DynamicQuantizeLinear" in ops(quantised)
    library = compile_file(target, tmp_path / "out")
    assert re.search(r"catenc_gemm_call_u8s8\(", (tmp_path / "out" / "dynamic.c").read_text())
    entry = next(iter(library.entries.values()))
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    for _ in range(4):
        x = RNG.standard_normal((3, 40, 64)).astype(np.float32)
        np.testing.assert_allclose(entry(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
