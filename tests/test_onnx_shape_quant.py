"""ONNX converters for slices, pads, gathers and the other data movement (catenc/onnx/indexing.py),
Einsum and Attention (einsum.py) and quantisation (quantization.py): one model per opset form,
many nodes each, compiled once and compared with onnx.reference.ReferenceEvaluator."""

from __future__ import annotations

import numpy as np
import onnxruntime  # the reference of the QDQ test: a test dependency (the dev extra), a failure when missing
import pytest
from onnx import TensorProto, helper, numpy_helper

from catenc.diagnostics import CatencError
from catenc.onnx.importer import import_proto
from tests.conftest import compile_file
from tests.test_onnx_import import check_against_reference, make_model, save, tensor

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)
BIG = np.iinfo(np.int64).max


def const(name: str, values, dtype=np.int64) -> object:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def node(op: str, inputs: list[str], outputs: str | list[str], **attrs) -> object:
    return helper.make_node(op, inputs, [outputs] if isinstance(outputs, str) else outputs, **attrs)


def elem(array: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def run(nodes, feeds, initializers, opset, tmp_path, shapes=None, hidden=(), rtol=1e-5, atol=1e-6, **dims):
    """Compile a model of `nodes` (its outputs: every node output but `hidden`) and compare it with the reference."""
    shapes = shapes or {}
    outputs = [o for n in nodes for o in n.output if o and o not in hidden]
    ins = [tensor(name, elem(a), shapes.get(name, list(a.shape))) for name, a in feeds.items()]
    model = make_model(nodes, ins, [tensor(o, 0, None) for o in outputs], initializers, opset=opset)
    check_against_reference(model, tmp_path, feeds, rtol=rtol, atol=atol, **dims)
    return model


def test_slices_pads_and_gathers_opset13(tmp_path):
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    m = RNG.standard_normal((5, 7)).astype(np.float32)
    ids = RNG.integers(-4, 4, (3, 6, 5)).astype(np.int64)
    nd = np.array([[[0, 1], [3, 2]], [[1, 0], [2, 4]], [[5, 4], [0, 0]], [[2, 2], [1, 3]]], dtype=np.int64)
    fill = np.array(2.5, np.float32)
    classes = np.array([[1, -1, 7], [0, 4, 2]], dtype=np.int64)
    nodes = [
        node("Slice", ["x", "s0", "e0", "a0", "st0"], "slice_steps"),  # negative step, clamped, INT64 max
        node("Slice", ["x", "s1", "e1"], "slice_default_axes"),
        node("Slice", ["x", "s2", "e2", "a2"], "slice_negative_axis"),
        node("Split", ["x", "sp"], ["split_a", "split_b"], axis=1),
        node("Split", ["x"], ["third_a", "third_b", "third_c"], axis=1),  # equal parts
        node("Tile", ["m", "reps"], "tiled"),
        node("Pad", ["x", "pads", "cv"], "pad_constant"),
        node("Pad", ["m", "pads2"], "pad_reflect", mode="reflect"),
        node("Pad", ["m", "pads2"], "pad_edge", mode="edge"),
        node("Pad", ["m", "pads2", "fill"], "pad_runtime_value"),
        node("GatherElements", ["x", "ids"], "gathered", axis=0),
        node("GatherND", ["m", "nd"], "gathered_nd"),
        node("GatherND", ["x", "nd_b"], "gathered_nd_batch", batch_dims=1),
        node("OneHot", ["classes", "depth", "onoff"], "onehot", axis=1),
        node("CumSum", ["m", "axis1"], "cumsum_rev_excl", exclusive=1, reverse=1),
        node("CumSum", ["x", "axis0"], "cumsum"),
        node("EyeLike", ["m"], "eye", k=2),
        node("Compress", ["x", "keep"], "compressed", axis=1),
    ]
    n, k = 3, 2
    nodes += [
        node("DepthToSpace", ["img"], "d2s_dcr", blocksize=k),
        node("DepthToSpace", ["img"], "d2s_crd", blocksize=k, mode="CRD"),
        node("SpaceToDepth", ["img"], "s2d", blocksize=k),
    ]
    img = RNG.standard_normal((1, n * k * k, 4, 6)).astype(np.float32)
    inits = [
        const("s0", [BIG, 1]),
        const("e0", [-BIG, 100]),
        const("a0", [1, 2]),
        const("st0", [-2, 2]),
        const("s1", [1, -5, 0]),
        const("e1", [-1, 5, 3]),
        const("s2", [-3]),
        const("e2", [BIG]),
        const("a2", [-1]),
        const("sp", [2, 4]),
        const("reps", [2, 3]),
        const("pads", [1, 0, 2, 0, 3, 1]),
        const("cv", 0.5, np.float32),
        const("pads2", [2, 1, 1, 3]),
        const("nd", [[0, 6], [4, -1]]),
        const("nd_b", nd),
        const("depth", 8),
        const("onoff", [-1.0, 3.0], np.float32),
        const("axis1", 1),
        const("axis0", -3),
        const("keep", [True, False, True, True], np.bool_),
    ]
    feeds = {"x": x, "m": m, "ids": ids, "fill": fill, "classes": classes, "img": img}
    run(nodes, feeds, inits, 13, tmp_path)


def test_attribute_forms_of_older_opsets(tmp_path):
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    nodes = [
        node("Slice", ["x"], "slice_attrs", starts=[1, -4], ends=[1000, -1], axes=[0, 2]),
        node("Split", ["x"], ["a", "b", "c"], axis=1, split=[1, 2, 3]),
        node("Pad", ["x"], "padded", pads=[0, 1, 0, 2, 0, 1], value=-1.5),
    ]
    run(nodes, {"x": x}, [], 9, tmp_path)


def test_opset18_forms_and_symbolic_sizes(tmp_path):
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    nodes = [
        node("Split", ["x"], ["part_a", "part_b", "part_c"], axis=1, num_outputs=3),  # 3, 3, 1
        node("Pad", ["x", "pads", "", "axes"], "wrapped", mode="wrap"),
        node("Slice", ["x", "s", "e", "a", "st"], "sliced"),  # x[1:-1, ::-2] with N rows
        node("Tile", ["x", "reps"], "tiled"),
        node("CenterCropPad", ["x", "crop_pad"], "centred", axes=[1]),  # 7 -> 10: padded 1, 2
        node("CenterCropPad", ["x", "crop"], "cropped", axes=[-1]),  # 7 -> 4: x[:, 1:5]
        node("Shape", ["x"], "shape"),  # sizes computed from the symbolic N: x[:N - 1], a row tiled N times
        node("Slice", ["shape", "zero", "one"], "rows"),
        node("Sub", ["rows", "one"], "rows_less"),
        node("Slice", ["x", "zero", "rows_less", "zero"], "all_but_last"),
        node("Concat", ["rows", "one"], "row_reps", axis=0),
        node("Tile", ["row", "row_reps"], "row_tiled"),
        node("Slice", ["buffer", "zero", "rows", "zero"], "buffer_rows"),  # take(buffer, arange(N), 0): N <= 8
    ]
    inits = [
        const("zero", [0]),
        const("one", [1]),
        const("row", RNG.standard_normal((1, 7)), np.float32),
        const("buffer", RNG.standard_normal((8, 3)), np.float32),
        const("pads", [2, 1]),
        const("crop_pad", [10]),
        const("crop", [4]),
        const("axes", [-1]),
        const("s", [1, -1]),
        const("e", [-1, -BIG]),
        const("a", [0, 1]),
        const("st", [1, -2]),
        const("reps", [2, 1]),
    ]
    hidden = ("shape", "rows", "rows_less", "row_reps")
    run(nodes, {"x": x}, inits, 18, tmp_path, shapes={"x": ["N", 7]}, hidden=hidden, N=5)


def test_scatters_reverse_sequence_and_diagonals(tmp_path):
    data = RNG.standard_normal((4, 5)).astype(np.float32)
    ids = np.array([[1, -1, 0, 3, 3], [1, 2, 0, 0, 3]], dtype=np.int64)  # duplicates: the last one wins
    ups = RNG.standard_normal((2, 5)).astype(np.float32)
    nd_ids = np.array([[[0], [2]], [[2], [-4]]], dtype=np.int64)  # rows 2 and 0 twice
    nd_ups = RNG.standard_normal((2, 2, 5)).astype(np.float32)
    seq = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    nodes = [
        node("ScatterElements", ["data", "ids", "ups"], "scattered", axis=0),
        node("ScatterElements", ["data", "ids", "ups"], "scattered_add", axis=0, reduction="add"),
        node("ScatterElements", ["data", "ids_t", "ups_t"], "scattered_max", axis=1, reduction="max"),
        node("ScatterND", ["data", "nd_ids", "nd_ups"], "scattered_nd"),
        node("ScatterND", ["data", "nd_ids", "nd_ups"], "scattered_nd_mul", reduction="mul"),
        node("ReverseSequence", ["seq", "lens"], "reversed_time"),
        node("ReverseSequence", ["seq_b", "lens_b"], "reversed_batch", batch_axis=0, time_axis=1),
        node("Trilu", ["data", "k"], "upper_runtime_k"),
        node("Trilu", ["data", "k"], "lower_runtime_k", upper=0),
        node("Trilu", ["data", "known_k"], "upper"),  # Trilu is of opset 14 on
        node("Trilu", ["seq"], "lower", upper=0),  # a batch of matrices
    ]
    feeds = {"data": data, "ids": ids, "ups": ups, "ids_t": ids.T[:4, :2] % 5, "ups_t": ups.T[:4, :2].copy()}
    feeds |= {"nd_ids": nd_ids, "nd_ups": nd_ups, "seq": seq, "lens": np.array([4, 1, 2], np.int64)}
    feeds |= {"seq_b": seq, "lens_b": np.array([3, 1, 2, 0], np.int64), "k": np.array(-1, np.int64)}
    run(nodes, feeds, [const("known_k", -1)], 18, tmp_path)


def test_negative_pads_crop(tmp_path):
    # onnx's reference evaluator refuses negative pads (numpy.pad does): numpy slicing and padding instead
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    nodes = [
        node("Pad", ["x", "pads"], "cropped", mode="constant"),
        node("Pad", ["x", "pads"], "cropped_edge", mode="edge"),
    ]
    inits = [const("pads", [-1, 2, 0, 0, -2, -1])]
    outs = [tensor(o, F, None) for o in ("cropped", "cropped_edge")]
    model = make_model(nodes, [tensor("x", F, [4, 6, 5])], outs, inits, opset=13)
    library = compile_file(save(model, tmp_path), tmp_path / "out")
    cropped, edge = next(iter(library.entries.values()))(x)
    inner = x[1:, :-2, :-1]  # pads: (-1, 0), (2, -2), (0, -1)
    np.testing.assert_array_equal(cropped, np.pad(inner, [(0, 0), (2, 0), (0, 0)]))
    np.testing.assert_array_equal(edge, np.pad(inner, [(0, 0), (2, 0), (0, 0)], mode="edge"))


def test_einsum_forms(tmp_path):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    sq = RNG.standard_normal((3, 4, 4)).astype(np.float32)
    v = RNG.standard_normal(4).astype(np.float32)
    nodes = [
        node("Einsum", ["a", "b"], "bmm", equation="bij, bjk -> bik"),
        node("Einsum", ["a"], "summed", equation="bij->i"),
        node("Einsum", ["sq"], "diagonal", equation="...ii->...i"),
        node("Einsum", ["a", "v"], "implicit", equation="...j,j"),
        node("Einsum", ["v", "v"], "inner", equation="i,i"),
        node("Einsum", ["square"], "trace", equation="ii"),  # a scalar through index form
        node("Einsum", ["square", "square"], "upper_letters", equation="Ij,jK"),  # implicit: IK
    ]
    feeds = {"a": a, "b": b, "sq": sq, "v": v, "square": sq[0]}
    run(nodes, feeds, [], 13, tmp_path, rtol=1e-5, atol=1e-5)


def test_attention_forms(tmp_path):
    b, s, past, length, d = 2, 3, 2, 4, 4
    q3 = RNG.standard_normal((b, s, 4 * d)).astype(np.float32)  # 4 query heads
    k3 = RNG.standard_normal((b, length, 2 * d)).astype(np.float32)  # 2 key/value heads
    v3 = RNG.standard_normal((b, length, 2 * 6)).astype(np.float32)
    mask = RNG.standard_normal((s, past + length - 1)).astype(np.float32)  # padded with -inf to the keys
    past_k = RNG.standard_normal((b, 2, past, d)).astype(np.float32)
    past_v = RNG.standard_normal((b, 2, past, 6)).astype(np.float32)
    q4 = RNG.standard_normal((b, 2, s, d)).astype(np.float32)
    k4 = RNG.standard_normal((b, 2, length, d)).astype(np.float32)
    v4 = RNG.standard_normal((b, 2, length, d)).astype(np.float32)
    keep = RNG.random((s, length)) > 0.3
    keep[1] = False  # a fully masked row gives 0
    nodes = [
        node(
            "Attention",
            ["q3", "k3", "v3", "mask", "past_k", "past_v"],
            ["y3", "present_k", "present_v", "qk"],
            is_causal=1,
            q_num_heads=4,
            kv_num_heads=2,
            softcap=2.0,
            qk_matmul_output_mode=2,
        ),
        node("Attention", ["q4", "k4", "v4", "keep"], ["y_bool", "", "", "probs"], qk_matmul_output_mode=3),
        node("Attention", ["q4", "k4", "v4"], "y_library", is_causal=1),
        node("Attention", ["q4", "k4", "v4"], "y_scaled", scale=0.3),
        node("TensorScatter", ["k4", "past_k", "writes"], "cache_linear"),  # a KV cache written at positions
        node("TensorScatter", ["k4", "past_k", "writes_circular"], "cache_circular", mode="circular"),
    ]
    feeds = {"q3": q3, "k3": k3, "v3": v3, "mask": mask, "past_k": past_k, "past_v": past_v}
    feeds |= {"q4": q4, "k4": k4, "v4": v4, "keep": keep}
    feeds |= {"writes": np.array([0, 2], np.int64), "writes_circular": np.array([3, 1], np.int64)}
    run(nodes, feeds, [], 24, tmp_path, rtol=1e-5, atol=1e-5)


def test_quantization_forms(tmp_path):
    x = (RNG.standard_normal((2, 3, 4)) * 4).astype(np.float32)
    x[0, 0, :2] = [0.5, 1.5]  # halves round to even
    a = RNG.integers(-128, 128, (3, 5)).astype(np.int8)
    bm = RNG.integers(-128, 128, (5, 4)).astype(np.int8)
    ua = RNG.integers(0, 256, (2, 3, 5)).astype(np.uint8)
    ub = RNG.integers(0, 256, (5, 2)).astype(np.uint8)
    q16 = RNG.integers(-30000, 30000, (2, 3, 4)).astype(np.int16)
    nodes = [
        node("QuantizeLinear", ["x", "scale", "zp_u8"], "q_tensor"),
        node("QuantizeLinear", ["x", "scale"], "q_default_u8"),
        node("QuantizeLinear", ["x", "scales3", "zps3"], "q_axis", axis=1),
        node("QuantizeLinear", ["x", "block_scales", "block_zps"], "q_blocked", axis=2, block_size=3),
        node("QuantizeLinear", ["x", "scale", "zp_i16"], "q_i16"),
        node("DequantizeLinear", ["q_axis", "scales3", "zps3"], "dq_axis", axis=1),
        node("DequantizeLinear", ["q_tensor", "scale", "zp_u8"], "dq_tensor"),
        node("DequantizeLinear", ["q16", "scale"], "dq_i16"),
        node("DynamicQuantizeLinear", ["x"], ["dyn_y", "dyn_scale", "dyn_zp"]),
        node("MatMulInteger", ["a", "bm", "azp", "bzp"], "mm_int"),
        node("MatMulInteger", ["ua", "ub"], "mm_int_batched"),
        node("QLinearMatMul", ["a", "sa", "azp", "bm", "sb", "bzp", "sy", "yzp"], "qmm"),
        node("DequantizeLinear", ["w_q", "w_scales", "w_zps"], "w_axis", axis=1),  # known: folded at import
        node("DequantizeLinear", ["w_q", "w_block_scales"], "w_blocked", axis=0, block_size=3),
        node("MatMul", ["x", "w_axis"], "qdq_matmul"),
    ]
    inits = [
        const("scale", 0.05, np.float32),
        const("zp_u8", 128, np.uint8),
        const("scales3", [0.1, 0.02, 0.5], np.float32),
        const("zps3", [0, 10, 250], np.uint8),
        const("block_scales", RNG.uniform(0.01, 0.2, (2, 3, 2)), np.float32),
        const("block_zps", RNG.integers(-5, 5, (2, 3, 2)), np.int8),
        const("zp_i16", -300, np.int16),
        const("azp", 3, np.int8),
        const("bzp", -2, np.int8),
        const("sa", 0.02, np.float32),
        const("sb", 0.03, np.float32),
        const("sy", 0.4, np.float32),
        const("yzp", -5, np.int8),
        const("w_q", RNG.integers(-128, 128, (4, 3)), np.int8),
        const("w_scales", [0.1, 0.01, 0.05], np.float32),
        const("w_zps", [0, -3, 7], np.int8),
        const("w_block_scales", RNG.uniform(0.01, 0.1, (2, 3)), np.float32),  # rows 0-2 and 3
    ]
    feeds = {"x": x, "a": a, "bm": bm, "ua": ua, "ub": ub, "q16": q16}
    run(nodes, feeds, inits, 21, tmp_path)


def test_integer_convolutions(tmp_path):
    x = RNG.integers(0, 256, (1, 2, 5, 6)).astype(np.uint8)
    w = RNG.integers(0, 256, (3, 2, 3, 2)).astype(np.uint8)
    nodes = [
        node("ConvInteger", ["x", "w", "xzp", "wzps"], "conv_int", pads=[1, 0, 1, 1], strides=[1, 2]),
        node("QLinearConv", ["x", "xs", "xzp", "w", "wss", "wzps", "ys", "yzp", "bias"], "qconv", pads=[1, 1, 1, 1]),
    ]
    inits = [
        const("xzp", 120, np.uint8),
        const("wzps", [100, 130, 128], np.uint8),
        const("xs", 0.02, np.float32),
        const("wss", [0.01, 0.03, 0.002], np.float32),
        const("ys", 0.5, np.float32),
        const("yzp", 100, np.uint8),
        const("bias", [-500, 0, 2000], np.int32),
    ]
    run(nodes, {"x": x, "w": w}, inits, 10, tmp_path)


def test_qdq_convolution_matches_onnxruntime(tmp_path):
    """A QDQ network as onnxruntime's quantizer writes them: activations quantised and dequantised
    around a float Conv whose int8 weight (per output channel) is dequantised at import."""
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    nodes = [
        node("QuantizeLinear", ["x", "xs", "xz"], "xq"),
        node("DequantizeLinear", ["xq", "xs", "xz"], "xd"),
        node("DequantizeLinear", ["wq", "ws", "wz"], "wd", axis=0),
        node("Conv", ["xd", "wd", "b"], "conv", pads=[1, 1, 1, 1]),
        node("Relu", ["conv"], "relu"),
        node("QuantizeLinear", ["relu", "ys", "yz"], "yq"),
        node("DequantizeLinear", ["yq", "ys", "yz"], "y"),
    ]
    inits = [
        const("xs", 0.02, np.float32),
        const("xz", 128, np.uint8),
        const("wq", RNG.integers(-127, 128, (4, 3, 3, 3)), np.int8),
        const("ws", [0.01, 0.02, 0.005, 0.03], np.float32),
        const("wz", [0, 0, 0, 0], np.int8),
        const("b", RNG.standard_normal(4) * 0.1, np.float32),
        const("ys", 0.01, np.float32),
        const("yz", 0, np.uint8),
    ]
    model = make_model(nodes, [tensor("x", F, [1, 3, 6, 6])], [tensor("y", F, None)], inits, opset=19)
    library = compile_file(save(model, tmp_path), tmp_path / "out")
    got = next(iter(library.entries.values()))(x)
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=0.0101)  # at most one step of the output's quantum


def test_readable_import_uses_the_library_and_basic_indexing():
    x = tensor("x", F, ["N", 8])
    nodes = [
        node("Slice", ["x", "s", "e", "a", "st"], "y"),
        node("QuantizeLinear", ["y", "scale", "zp"], "q"),
        node("Attention", ["q4", "q4", "q4"], "att", is_causal=1),
    ]
    inits = [const("s", [1, 7]), const("e", [BIG, 0]), const("a", [0, 1]), const("st", [1, -3])]
    inits += [const("scale", 0.1, np.float32), const("zp", 0, np.int8)]
    outs = [tensor(o, 0, None) for o in ("y", "q", "att")]
    model = make_model(nodes, [x, tensor("q4", F, [1, 2, 3, 4])], outs, inits, opset=23)
    text = import_proto(model, "m.onnx").text
    assert "y = x[1:, :0:-3]" in text
    assert "q = quantize_linear(y, 0.1, cast(0, i8))" in text  # the f32 scale in its shortest form
    assert "att = attention(q4, q4, q4, causal=True)" in text
    # a quantised weight is dequantised at import: the product reads a float constant
    weight = [const("wq", [[1, -2], [3, 4]], np.int8), const("ws", 0.5, np.float32)]
    nodes = [node("DequantizeLinear", ["wq", "ws"], "w"), node("MatMul", ["v", "w"], "out")]
    model = make_model(nodes, [tensor("v", F, [3, 2])], [tensor("out", F, None)], weight, opset=13)
    imported = import_proto(model, "m.onnx")
    assert "out = v @ w" in imported.text and "dequantize" not in imported.text
    np.testing.assert_array_equal(imported.constants["w"], [[0.5, -1.0], [1.5, 2.0]])


@pytest.mark.parametrize(
    "op, shapes, attrs, message",
    [
        ("Split", [[]], {}, "the input is a scalar: it has no axis"),
        ("Slice", [[2, 3], [3], [3]], {}, "3 starts for an input of rank 2"),
        ("OneHot", [[3], [], [1]], {}, "depth must be one value and values two"),
        ("Attention", [[1, 2, 3, 4], [2, 3, 4], [2, 3, 4]], {}, "Q, K and V of ranks 4, 3, 3"),
        ("Compress", [[3], [5]], {"axis": 0}, "the condition keeps entry 4 of an axis of size 3"),
        ("DepthToSpace", [[1, 4, 2, 2]], {"blocksize": 0}, "blocksize=0"),
    ],
)
def test_invalid_nodes_get_diagnostics(op, shapes, attrs, message):
    """Known inputs (all but the first) hold ones: a bad form is the model's error, never a crash."""
    names = [f"in{k}" for k in range(len(shapes))]
    kind = np.float32 if op == "Attention" else np.int64
    inits = [const(n, np.ones(s), kind) for n, s in zip(names[1:], shapes[1:], strict=True)]
    if op == "Compress":
        inits = [const("in1", [0, 0, 0, 0, 1], np.bool_)]
    opset = 23 if op == "Attention" else 17  # Attention is of opset 23 on
    ins, outs = [tensor("in0", F, shapes[0])], [tensor("y", 0, None)]
    model = make_model([node(op, names, "y", **attrs)], ins, outs, inits, opset=opset)
    with pytest.raises(CatencError, match=message):
        import_proto(model, "m.onnx")
