"""ONNX converters of the neural-network families (catenc/onnx/nn.py, normalization.py, reduce.py):
one model per family and opset form, many nodes each, compiled once and compared with
onnx.reference.ReferenceEvaluator."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.onnx.importer import import_proto
from catenc.plan import Options
from tests.conftest import compile_file, runtime
from tests.test_onnx_import import check_against_reference, make_model, save, tensor

F = TensorProto.FLOAT
I64 = TensorProto.INT64
RNG = np.random.default_rng(7)


def weights(name: str, *shape: int) -> object:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def node(op: str, inputs: list[str], output: str, **attrs) -> object:
    return helper.make_node(op, inputs, [output], **attrs)


def run(nodes, inputs, initializers, opset, tmp_path, kinds=None, rtol=1e-4, atol=1e-5):
    kinds = kinds or {}
    outs = [o for n in nodes for o in n.output if o]
    model = make_model(
        nodes,
        [tensor(name, F, list(a.shape)) for name, a in inputs.items()],
        [tensor(o, kinds.get(o, F), None) for o in outs],
        initializers,
        opset=opset,
    )
    check_against_reference(model, tmp_path, inputs, rtol=rtol, atol=atol)
    return model


def test_convolutions_and_pooling(tmp_path):
    # (a grouped ConvTranspose has no bias here: the reference adds B[0..K/G) to every group)
    nodes = [
        node("Conv", ["x", "w", "b"], "conv_asym", pads=[1, 0, 2, 1], strides=[2, 1]),
        node("Conv", ["x", "w_dw", "b_dw"], "conv_depthwise", group=4, pads=[1, 1, 1, 1]),  # 2 filters a channel
        node("Conv", ["x", "w_dw2"], "conv_depthwise_s2", group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
        node("Conv", ["x", "w_g"], "conv_grouped", group=2, dilations=[2, 1], auto_pad="SAME_UPPER"),
        node("Conv", ["x", "w"], "conv_same_lower", auto_pad="SAME_LOWER", strides=[2, 2]),
        node("Conv", ["x", "w_1x1"], "conv_valid_1x1", auto_pad="VALID", strides=[2, 3]),
        node("Conv", ["x1", "w1", "b1"], "conv_1d", pads=[1, 2], strides=[2]),
        node("Conv", ["x1", "w1_dw"], "conv_1d_depthwise_valid", group=4),  # reads x1[n, k, ol + 0]: 8 of 10
        node("Conv", ["x3", "w3"], "conv_3d", pads=[1, 1, 0, 1, 1, 0], kernel_shape=[3, 3, 2]),
        node("ConvTranspose", ["x", "wt"], "convt_grouped", group=4, strides=[2, 2], pads=[1, 0, 0, 1]),
        node(
            "ConvTranspose",
            ["x", "wt2", "bt2"],
            "convt_padding",
            strides=[2, 3],
            output_padding=[1, 2],
            dilations=[2, 1],
        ),
        node("ConvTranspose", ["x", "wt2"], "convt_shape", strides=[2, 2], output_shape=[19, 17]),
        node("ConvTranspose", ["x1", "wt1"], "convt_same", strides=[2], auto_pad="SAME_UPPER"),
        node("MaxPool", ["x"], "max_ceil", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1),
        node("MaxPool", ["x"], "max_dilated", kernel_shape=[2, 2], dilations=[2, 2], auto_pad="SAME_UPPER"),
        node("MaxPool", ["x3"], "max_3d", kernel_shape=[2, 2, 2]),
        helper.make_node(
            "MaxPool", ["x"], ["max_i", "argmax_i"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]
        ),
        node("AveragePool", ["x"], "avg_exclude", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node(
            "AveragePool",
            ["x"],
            "avg_include_ceil",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            count_include_pad=1,
            ceil_mode=1,
        ),
        node("AveragePool", ["x1"], "avg_1d", kernel_shape=[3], strides=[1], pads=[0, 2]),
        node("LpPool", ["x"], "lp3", kernel_shape=[2, 2], strides=[2, 2], p=3),
        node("LpPool", ["x"], "lp2", kernel_shape=[3, 2], pads=[1, 0, 1, 0]),
        node("GlobalAveragePool", ["x"], "gap"),
        node("Resize", ["x", "", "twice"], "nearest_2x", mode="nearest", coordinate_transformation_mode="asymmetric"),
        node("Resize", ["x", "", "", "size_odd"], "nearest_sizes", nearest_mode="round_prefer_ceil"),
        node(
            "Resize",
            ["x", "", "scale_odd"],
            "linear_pytorch",
            mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
        node(
            "Resize",
            ["x", "", "", "size_odd"],
            "linear_corners",
            mode="linear",
            coordinate_transformation_mode="align_corners",
        ),
        node("Resize", ["x", "", "", "size_axes"], "cubic_axes", mode="cubic", axes=[3, 2], exclude_outside=1),
        node("Resize", ["x", "", "shrink"], "linear_antialias", mode="linear", antialias=1),
        node("Resize", ["x", "", "shrink"], "cubic_antialias", mode="cubic", antialias=1),
        node(
            "Resize",
            ["x", "roi", "", "size_odd"],
            "crop",
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-3.0,
        ),
        node("GlobalMaxPool", ["x"], "gmp"),
    ]
    inits = [
        weights("w", 5, 4, 3, 3),
        weights("b", 5),
        weights("w_dw", 8, 1, 3, 3),
        weights("b_dw", 8),
        weights("w_dw2", 4, 1, 3, 3),
        weights("w_g", 6, 2, 3, 2),
        weights("w_1x1", 3, 4, 1, 1),
        weights("w1", 3, 4, 3),
        weights("b1", 3),
        weights("w3", 3, 2, 3, 3, 2),
        weights("wt", 4, 1, 3, 3),
        weights("bt2", 2),
        weights("wt2", 4, 2, 3, 2),
        weights("wt1", 4, 2, 4),
        weights("w1_dw", 4, 1, 3),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "twice"),
        numpy_helper.from_array(np.array([1, 1, 0.6, 1.7], np.float32), "scale_odd"),
        numpy_helper.from_array(np.array([2, 4, 5, 13], np.int64), "size_odd"),
        numpy_helper.from_array(np.array([11, 4], np.int64), "size_axes"),
        numpy_helper.from_array(np.array([1, 1, 0.6, 0.4], np.float32), "shrink"),
        numpy_helper.from_array(np.array([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], np.float32), "roi"),
    ]
    inputs = {
        "x": RNG.standard_normal((2, 4, 9, 8)).astype(np.float32),
        "x1": RNG.standard_normal((2, 4, 10)).astype(np.float32),
        "x3": RNG.standard_normal((1, 2, 5, 6, 4)).astype(np.float32),
    }
    model = run(nodes, inputs, inits, 19, tmp_path, kinds={"argmax_i": I64})
    text = import_proto(model, "m.onnx").text
    # a convolution is one contraction statement with its bias, read at the channel it writes
    assert "conv_asym[n < 2, k < 5, oh < 5, ow < 7] = sum[c < 4, r < 3, s < 3](" in text
    assert "* w[k, c, r, s]) + b[k]" in text
    # depthwise: the input channel read directly, tap by tap (a vector loop along the row)
    assert "where(oh >= 1, x[n, k // 2, oh - 1, ow], 0.0) * w_dw[k, 0, 0, 1] + where((oh >= 1) & (ow < 7)," in text
    assert "where((2*oh >= 1) & (2*ow >= 1), x[n, k, 2*oh - 1, 2*ow - 1], 0.0) * w_dw2[k, 0, 0, 0] + " in text
    assert "conv_grouped_groups[n < 2, g < 2, j < 3, oh < 9, ow < 8]" in text
    assert "nearest_2x[i0 < 2, i1 < 4, i2 < 18, i3 < 16] = x[i0, i1, i2 // 2, i3 // 2]" in text  # a repeat, no take


def test_normalizations(tmp_path):
    nodes = [
        node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], "bn_folded", epsilon=1e-3),
        node("BatchNormalization", ["x", "s_in", "b_in", "m_in", "v_in"], "bn_inputs"),
        helper.make_node(
            "BatchNormalization",
            ["x", "scale", "bias", "mean", "var"],
            ["bn_train", "running_mean", "running_var"],
            training_mode=1,
            momentum=0.8,
        ),
        helper.make_node(
            "LayerNormalization", ["x", "ln_s", "ln_b"], ["ln_axis1", "ln_mean", "ln_inv"], axis=1, epsilon=1e-4
        ),
        node("LayerNormalization", ["x", "ln_s_last", "ln_b_last"], "ln_last"),
        node("LayerNormalization", ["x", "ln_s_last"], "ln_no_bias", axis=-1),
        node("GroupNormalization", ["x", "gn_s", "gn_b"], "gn_per_group", num_groups=2, epsilon=1e-3),
        node("InstanceNormalization", ["x", "scale", "bias"], "instance"),
        node("Softmax", ["x"], "softmax_axis1", axis=1),
        node("Softmax", ["x"], "softmax_last"),
        node("LogSoftmax", ["x"], "logsoftmax_axis2", axis=2),
        node("Hardmax", ["x"], "hardmax_axis1", axis=1),
        node("LpNormalization", ["xpos"], "l1_axis1", axis=1, p=1),  # (the reference's L1 norm forgets abs)
        node("LpNormalization", ["x"], "l2_last"),
        node("MeanVarianceNormalization", ["x"], "mvn"),
    ]
    positive = np.abs(RNG.standard_normal(4)).astype(np.float32) + 0.5
    inits = [
        weights("scale", 4),
        weights("bias", 4),
        weights("mean", 4),
        numpy_helper.from_array(positive, "var"),
        weights("ln_s", 4, 5, 6),
        weights("ln_b", 4, 5, 6),
        weights("ln_s_last", 6),
        weights("ln_b_last", 6),
        weights("gn_s", 2),
        weights("gn_b", 2),
    ]
    inputs = {
        "x": RNG.standard_normal((2, 4, 5, 6)).astype(np.float32),
        "s_in": RNG.standard_normal(4).astype(np.float32),
        "b_in": RNG.standard_normal(4).astype(np.float32),
        "m_in": RNG.standard_normal(4).astype(np.float32),
        "v_in": positive,
        "xpos": np.abs(RNG.standard_normal((2, 4, 5, 6))).astype(np.float32),
    }
    model = run(nodes, inputs, inits, 18, tmp_path)  # opset 18: GroupNormalization's scale per group
    text = import_proto(model, "m.onnx").text
    assert "ln_last = layernorm(x, ln_s_last, ln_b_last, eps=1e-05)" in text
    assert "softmax_last = softmax(x)" in text
    assert "bn_folded[n < 2, c < 4, i2 < 5, i3 < 6] = x[n, c, i2, i3] * scale_folded[c] + bias_folded[c]" in text


def local_response_norm(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN as the ONNX operator text defines it (onnx's ReferenceEvaluator sums over the wrong
    axis: its loop runs over N, not C)."""
    squares = np.zeros_like(x, dtype=np.float64)
    for c in range(x.shape[1]):
        window = x[:, max(0, c - (size - 1) // 2) : c + size // 2 + 1].astype(np.float64)
        squares[:, c] = (window**2).sum(axis=1)
    return (x / (bias + alpha / size * squares) ** beta).astype(x.dtype)


@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (1, 7, 9), (1, 5, 2, 3, 4)])
def test_local_response_norm(tmp_path, shape):
    attrs = [
        {"size": 3},
        {"size": 4, "alpha": 0.02, "beta": 0.6, "bias": 2.0},  # one channel more after c than before
        {"size": 1, "alpha": 0.3},
        {"size": 2 * shape[1] + 1, "alpha": 0.5, "beta": 1.0},  # wider than the channels
    ]
    nodes = [node("LRN", ["x"], f"lrn{k}", **a) for k, a in enumerate(attrs)]
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    model = make_model(nodes, [tensor("x", F, list(shape))], [tensor(f"lrn{k}", F, None) for k in range(4)], [], 13)
    library = compile_file(save(model, tmp_path), tmp_path / "out")
    got = next(iter(library.entries.values()))(x)
    for k, a in enumerate(attrs):
        np.testing.assert_allclose(got[k], local_response_norm(x, **a), rtol=2e-6, atol=1e-6, err_msg=str(a))
    if len(shape) == 4:  # onnxruntime's LRN takes 4-D input and odd sizes only
        odd = [k for k, a in enumerate(attrs) if a["size"] % 2]
        outputs = [tensor(f"lrn{k}", F, None) for k in odd]
        theirs = make_model([nodes[k] for k in odd], [tensor("x", F, list(shape))], outputs, [], 13)
        session = onnxruntime.InferenceSession(theirs.SerializeToString(), providers=["CPUExecutionProvider"])
        for k, want in zip(odd, session.run(None, {"x": x})):
            np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6)


def test_opset_12_forms(tmp_path):
    """Before opset 13 Softmax, LogSoftmax and Hardmax work on the input flattened to 2-D at `axis`;
    reductions take their axes as an attribute. onnxruntime is the reference: onnx's evaluator
    applies the opset-13 form, and counts MaxPool's indices row-major whatever the storage_order."""
    nodes = [
        node("Softmax", ["x"], "softmax_flat"),  # axis 1: over the last two dims together
        node("LogSoftmax", ["x"], "logsoftmax_flat", axis=0),
        node("Hardmax", ["x"], "hardmax_flat"),
        node("ReduceSum", ["x"], "sum_attr", axes=[0, 2], keepdims=0),
        node("ReduceMean", ["x"], "mean_all"),
        node("ReduceMax", ["x"], "max_neg", axes=[-1]),
        node("ArgMax", ["x"], "argmax_last", axis=1, keepdims=0, select_last_index=1),
        node("ArgMin", ["x"], "argmin_first", axis=-1),
        helper.make_node("MaxPool", ["img"], ["max_c", "argmax_c"], kernel_shape=[2, 2], storage_order=1),
    ]
    x = np.round(RNG.standard_normal((3, 4, 5)) * 2).astype(np.float32)  # ties for select_last_index
    img = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    kinds = {"argmax_last": I64, "argmin_first": I64, "argmax_c": I64}
    outs = [tensor(o, kinds.get(o, F), None) for n in nodes for o in n.output]
    model = make_model(nodes, [tensor("x", F, [3, 4, 5]), tensor("img", F, [2, 3, 5, 4])], outs, opset=12)
    got = compile_file(save(model, tmp_path), tmp_path / "out").entries["net"](x, img)
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x, "img": img})
    for g, w, out in zip(got, want, outs, strict=True):
        assert g.dtype == w.dtype, out.name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=out.name)


def test_reductions_with_axes_inputs(tmp_path):
    axes = numpy_helper.from_array(np.array([1, -1], np.int64), "axes")
    empty = numpy_helper.from_array(np.array([], np.int64), "empty")
    nodes = [
        node("ReduceSum", ["x", "axes"], "sum"),
        node("ReduceSum", ["x", "empty"], "sum_noop", noop_with_empty_axes=1),
        node("ReduceSum", ["x"], "sum_all", keepdims=0),
        node("ReduceMean", ["x", "axes"], "mean", keepdims=0),
        node("ReduceMin", ["x", "axes"], "min"),
        node("ReduceProd", ["x", "axes"], "prod"),
        node("ReduceL1", ["x", "axes"], "l1"),
        node("ReduceL2", ["x", "axes"], "l2", keepdims=0),
        node("ReduceLogSum", ["xp", "axes"], "logsum"),
        node("ReduceLogSumExp", ["x", "axes"], "logsumexp", keepdims=0),
        node("ReduceLogSumExp", ["x"], "logsumexp_all"),
        node("ReduceSumSquare", ["x", "axes"], "sumsquare"),
        node("ReduceMax", ["i", "axes"], "max_int", keepdims=0),
        node("ReduceMean", ["i", "axes"], "mean_int"),
    ]
    inputs = {
        "x": RNG.standard_normal((2, 3, 4)).astype(np.float32),
        "xp": np.abs(RNG.standard_normal((2, 3, 4))).astype(np.float32) + 0.1,
    }
    ints = RNG.integers(-50, 50, (2, 3, 4)).astype(np.int32)
    model = make_model(
        nodes,
        [tensor("x", F, [2, 3, 4]), tensor("xp", F, [2, 3, 4]), tensor("i", TensorProto.INT32, [2, 3, 4])],
        [tensor(o, TensorProto.INT32 if o.endswith("_int") else F, None) for n in nodes for o in n.output],
        [axes, empty],
        opset=18,
    )
    check_against_reference(model, tmp_path, inputs | {"i": ints}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "op, inputs, attrs, message",
    [
        ("Resize", ["x", "", "scales"], {"mode": "nearest", "antialias": 1}, "antialias=1 with mode='nearest'"),
        # Conv's schema takes floating-point types only: the validator refuses an int32 input
        (
            "Conv",
            ["i", "w"],
            {},
            r"input 0 \(X\) is a tensor\(int32\); Conv takes tensor\(float16\), tensor\(float\) or",
        ),
        # valid ONNX (ReduceLogSumExp takes int32) that catenc computes in floating point only
        ("ReduceLogSumExp", ["i"], {}, "input of type i32: ReduceLogSumExp is computed on floating-point tensors only"),
        (
            "Resize",
            ["x", "", "run_time_scales"],
            {},
            r"the scales \(input 2\) must be known when the model is compiled",
        ),
    ],
)
def test_unsupported_forms_are_reported(op, inputs, attrs, message):
    model = make_model(
        [helper.make_node(op, inputs, ["y"], **attrs)],
        [tensor("x", F, [1, 2, 4, 4]), tensor("i", TensorProto.INT32, [1, 2, 4, 4]), tensor("run_time_scales", F, [4])],
        [tensor("y", 0, None)],
        [numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "scales"), weights("w", 3, 2, 1, 1)],
        opset=19,
    )
    with pytest.raises(CatencError, match=message):
        import_proto(model, "m.onnx")


def checked_schedule_notes(model, tmp_path, name: str, x_shape: tuple[int, ...]) -> str:
    """The model's results checked against the reference on a random `x`, then its -O2 schedule notes."""
    check_against_reference(model, tmp_path, {"x": RNG.standard_normal(x_shape).astype(np.float32)}, rtol=1e-5)
    plan = plan_file(str(save(model, tmp_path, name)), Options(runtime("clang"), opt="2"))
    return "\n".join(plan.entries[0].schedule.notes)


def test_convolution_under_a_global_pool_keeps_its_gemm_kernel(tmp_path):
    """A convolution read only by a global average pool stays a contraction of its own (inlined into
    the pool's reduction it would be plain loops: ResNet-18's last block took 56 ms instead of 4),
    with its bias and activation fused in at batch 1."""
    nodes = [
        node("Conv", ["x", "w", "b"], "conv", pads=[1, 1, 1, 1]),
        node("Relu", ["conv"], "act"),
        node("GlobalAveragePool", ["act"], "pooled"),
    ]
    model = make_model(
        nodes,
        [tensor("x", F, [1, 8, 6, 6])],
        [tensor("pooled", F, None)],
        [weights("w", 16, 8, 3, 3), weights("b", 16)],
    )
    notes = checked_schedule_notes(model, tmp_path, "pool", (1, 8, 6, 6))
    assert "materialised (a contraction read inside a reduction (it keeps its gemm kernel))" in notes
    # batch 1: the unit axis read at 0 does not keep the bias and relu out of the gemm's epilogue
    assert (
        "act: contraction (1 x [16 x 8*3*3] @ [8*3*3 x 6*6]), a packed gemm kernel, its elementwise epilogue" in notes
    )


def test_a_convolution_after_a_max_pool_keeps_its_gemm_kernel(tmp_path):
    """VGG's pattern: a 2x2 max pool read by a padded 3x3 convolution is stored, not inlined into
    the convolution's taps (there it loaded four elements per tap and took the convolution off its
    packed gemm: VGG-19's four such layers ran at 11% of the peak)."""
    nodes = [
        node("MaxPool", ["x"], "pooled", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["pooled", "w", "b"], "conv", pads=[1, 1, 1, 1]),
        node("Relu", ["conv"], "act"),
    ]
    model = make_model(
        nodes,
        [tensor("x", F, [1, 8, 12, 12])],
        [tensor("act", F, None)],
        [weights("w", 16, 8, 3, 3), weights("b", 16)],
    )
    notes = checked_schedule_notes(model, tmp_path, "vgg", (1, 8, 12, 12))
    assert "pooled: materialised (would recompute pooled per element of act" in notes, notes
    assert "act: contraction (1 x [16 x 8*3*3] @ [8*3*3 x 6*6]), a packed gemm kernel" in notes, notes


def test_dynamic_spatial_dims(tmp_path):
    """Windows over symbolic H and W: guards where the prover cannot bound them, a uniform divisor
    where every window lies inside the padded input."""
    nodes = [
        node("Conv", ["x", "w"], "conv_same", pads=[1, 1, 1, 1]),
        node("AveragePool", ["conv_same"], "avg_same", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        node("MaxPool", ["avg_same"], "max_same", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    model = make_model(
        nodes, [tensor("x", F, ["N", 2, "H", "W"])], [tensor("max_same", F, None)], [weights("w", 3, 2, 3, 3)]
    )
    x = RNG.standard_normal((2, 2, 5, 7)).astype(np.float32)
    check_against_reference(model, tmp_path, {"x": x}, rtol=1e-5, atol=1e-5, N=2, H=5, W=7)


def test_if_on_a_known_condition_runs_its_branch(tmp_path):
    """torch.onnx writes nn.LocalResponseNorm with an If on the input's rank (AlexNet, GoogLeNet): a
    condition known at import takes its branch's nodes in place, outer values and its own
    initializers read as they are. (Before: 'If: operator not supported'.)"""
    then_ = helper.make_graph(
        [node("Squeeze", ["pooled", "axis0"], "squeezed")], "then", [], [tensor("squeezed", F, None)]
    )
    else_ = helper.make_graph(
        [node("Mul", ["pooled", "three"], "scaled")],
        "else",
        [],
        [tensor("scaled", F, None)],
        [numpy_helper.from_array(np.array(3.0, np.float32), "three")],
    )
    nodes = [
        node("Unsqueeze", ["x", "axis0"], "pooled"),
        node("Shape", ["x"], "shape"),
        node("Size", ["shape"], "rank"),
        node("Equal", ["rank", "four"], "is4"),
        node("Equal", ["rank", "three_i"], "is3"),
        node("If", ["is4"], "if_true", then_branch=then_, else_branch=else_),
        node("If", ["is3"], "if_false", then_branch=then_, else_branch=else_),
    ]
    ints = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("four", 4), ("three_i", 3))]
    ints.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    model = make_model(
        nodes, [tensor("x", F, [2, 3, 4, 5])], [tensor(o, F, None) for o in ("if_true", "if_false")], ints
    )
    check_against_reference(model, tmp_path, {"x": x})


def test_a_convolution_an_if_branch_also_reads_is_not_folded_into_its_batchnorm(tmp_path):
    """The branch reads the raw convolution by name: folding the BatchNormalization into the Conv
    (its only reader in the main graph) would hand the branch normalised values."""
    branch = helper.make_graph([node("Neg", ["conv"], "negated")], "b", [], [tensor("negated", F, None)])
    nodes = [
        node("Conv", ["x", "w"], "conv", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["conv", "scale", "bias", "mean", "var"], "normed"),
        node("If", ["yes"], "branch_out", then_branch=branch, else_branch=branch),
    ]
    positive = np.abs(RNG.standard_normal(4)).astype(np.float32) + 0.5
    inits = [weights("w", 4, 3, 3, 3), weights("scale", 4), weights("bias", 4), weights("mean", 4)]
    inits += [numpy_helper.from_array(positive, "var"), numpy_helper.from_array(np.array(True), "yes")]
    outputs = [tensor("normed", F, None), tensor("branch_out", F, None)]
    model = make_model(nodes, [tensor("x", F, [1, 3, 5, 5])], outputs, inits)
    check_against_reference(model, tmp_path, {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)}, rtol=1e-5)


def test_if_on_a_run_time_condition_is_reported():
    branch = helper.make_graph([node("Neg", ["x"], "y")], "b", [], [tensor("y", F, None)])
    model = make_model(
        [node("If", ["c"], "out", then_branch=branch, else_branch=branch)],
        [tensor("x", F, [3]), tensor("c", TensorProto.BOOL, [])],
        [tensor("out", F, None)],
    )
    with pytest.raises(CatencError, match="the condition must be one value known when the model is compiled"):
        import_proto(model, "m.onnx")


def test_channel_shuffle_between_convolutions(tmp_path):
    """ShuffleNet's unit: a grouped 1x1 Conv, the channel shuffle (Reshape to [N, G, C/G, H, W],
    Transpose, Reshape back), a padded depthwise Conv. A split or merge of the channel axis ahead
    of kept H, W is written per axis: as a flat reshape, the padded taps' row offsets went into
    the channel's index and the IR verifier could not bound it ('cannot prove ... < 3 on axis 1')."""
    nodes = [
        node("Conv", ["x", "w_g", "b_g"], "grouped", group=3),
        node("Reshape", ["grouped", "split"], "split_groups"),
        node("Transpose", ["split_groups"], "swapped", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["swapped", "merge"], "shuffled"),
        node("Conv", ["shuffled", "w_dw"], "y", group=6, pads=[1, 1, 1, 1]),
    ]
    inits = [weights("w_g", 6, 2, 1, 1), weights("b_g", 6), weights("w_dw", 6, 1, 3, 3)]
    inits += [
        numpy_helper.from_array(np.array(s, np.int64), n)
        for n, s in (("split", [1, 3, 2, 5, 5]), ("merge", [1, 6, 5, 5]))
    ]
    x = RNG.standard_normal((1, 6, 5, 5)).astype(np.float32)
    model = make_model(nodes, [tensor("x", F, [1, 6, 5, 5])], [tensor("y", F, None)], inits)
    check_against_reference(model, tmp_path, {"x": x}, rtol=1e-4, atol=1e-5)
