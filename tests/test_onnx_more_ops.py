"""ONNX converters for losses (catenc/onnx/losses.py), sequence-model operators (sequence.py) and
recurrent layers (recurrent.py): a model of many nodes per family, compiled once and compared with
onnx.reference.ReferenceEvaluator, or with onnxruntime for the recurrent attributes the reference
does not implement (activations, clip, input_forget)."""

from __future__ import annotations

import numpy as np
import onnxruntime  # the reference of the recurrent test: a test dependency (the dev extra), a failure when missing
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from catenc.diagnostics import CatencError
from catenc.onnx.importer import import_proto
from tests.conftest import compile_file
from tests.test_onnx_import import check_against_reference, make_model, save, tensor

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
RNG = np.random.default_rng(5)


def node(op: str, inputs: list[str], outputs: list[str], **attrs) -> object:
    return helper.make_node(op, inputs, outputs, **attrs)


def init(name: str, values, dtype) -> object:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def test_losses_and_sequence_ops_against_the_reference(tmp_path):
    n, c, d = 5, 4, 3
    feeds = {
        "x": RNG.standard_normal((n, c, d)).astype(np.float32),
        "t32": RNG.integers(0, c, (n, d)).astype(np.int32),
        "t64": np.where(RNG.random((n, d)) < 0.3, -1, RNG.integers(0, c, (n, d))).astype(np.int64),
        "ties": RNG.integers(0, 3, (4, 7)).astype(np.float32),  # many equal values: lower index first
        "ints": RNG.integers(-50, 50, (3, 9)).astype(np.int32),
        "cp": RNG.uniform(0.5, 1.5, (3, 5)).astype(np.float32),
        "q": RNG.standard_normal((2, 5, 12)).astype(np.float32),
        "pos": RNG.integers(0, 8, (2, 5)).astype(np.int64),
        "a": RNG.standard_normal((3, 4)).astype(np.float32),
        "b": RNG.standard_normal((3, 4)).astype(np.float32),
    }
    angles = RNG.uniform(0, 6, (8, 2)).astype(np.float32)
    inits = [
        init("w", RNG.uniform(0.2, 2, c), np.float32),
        init("k3", [3], np.int64),
        init("k5", [5], np.int64),
        init("axis1", 1, np.int64),
        init("cos", np.cos(angles), np.float32),
        init("sin", np.sin(angles), np.float32),
    ]
    nodes = [
        node("NegativeLogLikelihoodLoss", ["x", "t32", "w"], ["nll_mean"], ignore_index=2),
        node("NegativeLogLikelihoodLoss", ["x", "t64"], ["nll_none"], reduction="none", ignore_index=-1),
        # (the reference divides by every position when ignore_index is -1 and there is no weight: not the
        # operator's definition, which divides by the weights applied, as ignore_index=1 shows)
        node("NegativeLogLikelihoodLoss", ["x", "t32"], ["nll_mean_ii"], ignore_index=1),
        node("SoftmaxCrossEntropyLoss", ["x", "t64", "w"], ["sce_sum", "log_prob"], reduction="sum", ignore_index=-1),
        node("SoftmaxCrossEntropyLoss", ["x", "t32"], ["sce_mean"]),
        node("TopK", ["ties", "k3"], ["small_v", "small_i"], axis=0, largest=0),
        node("TopK", ["ints", "k5"], ["top_v", "top_i"]),
        node("CumProd", ["cp", "axis1"], ["cumprod"], exclusive=1, reverse=1),
        node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["rotated"], num_heads=2, rotary_embedding_dim=4),
        node(
            "RotaryEmbedding",
            ["q", "cos", "sin", "pos"],
            ["rot_pairs"],
            num_heads=2,
            rotary_embedding_dim=4,
            interleaved=1,
        ),
        node("SwiGLU", ["a", "b"], ["swiglu"], alpha=1.7),
    ]
    shapes = {"x": ["N", c, d], "t32": ["N", d], "t64": ["N", d]}
    ins = [
        tensor(name, helper.np_dtype_to_tensor_dtype(v.dtype), shapes.get(name, list(v.shape)))
        for name, v in feeds.items()
    ]
    outs = [tensor(o, 0, None) for nd in nodes for o in nd.output]
    model = make_model(nodes, ins, outs, inits, opset=28)
    check_against_reference(model, tmp_path, feeds, rtol=1e-5, atol=1e-6)


def _recurrent_nodes(t: int, b: int, i: int, h: int) -> tuple[list, list]:
    """The nodes (the GRU first) and their initializers."""

    def weights(name: str, shape: tuple[int, ...]) -> object:
        return init(name, RNG.standard_normal(shape) * 0.5, np.float32)

    inits = [weights("gw", (2, 3 * h, i)), weights("gr", (2, 3 * h, h)), weights("gb", (2, 6 * h))]
    inits += [weights("lw", (1, 4 * h, i)), weights("lr", (1, 4 * h, h)), weights("lb", (1, 8 * h))]
    inits += [weights("lp", (1, 3 * h)), weights("rw", (1, h, i)), weights("rr", (1, h, h))]
    inits.append(init("lens", [t, 2, 3][:b], np.int32))  # shorter sequences: past the end, zeros and the state kept
    nodes = [
        # bidirectional, batch first, an initial state, the reset applied after the product
        node(
            "GRU",
            ["xb", "gw", "gr", "gb", "", "h0b"],
            ["gru_y", "gru_h"],
            hidden_size=h,
            direction="bidirectional",
            layout=1,
            linear_before_reset=1,
        ),
        node(
            "LSTM",
            ["x", "lw", "lr", "lb", "lens", "", "", "lp"],
            ["lstm_y", "lstm_h", "lstm_c"],
            hidden_size=h,
            clip=0.9,
            input_forget=1,
            activations=["HardSigmoid", "Tanh", "Softsign"],
            activation_alpha=[0.3],
            activation_beta=[0.4],
        ),
        node(
            "RNN",
            ["x", "rw", "rr", "", "lens"],
            ["rnn_y", "rnn_h"],
            hidden_size=h,
            direction="reverse",
            activations=["LeakyRelu"],
            activation_alpha=[0.2],
        ),
    ]
    return nodes, inits


def test_recurrent_layers_against_the_reference_and_onnxruntime(tmp_path):
    t, b, i, h = 4, 3, 5, 6
    nodes, inits = _recurrent_nodes(t, b, i, h)
    ins = [tensor("x", F, [t, b, i]), tensor("xb", F, [b, t, i]), tensor("h0b", F, [b, 2, h])]

    def model(chosen: list) -> object:
        return make_model(chosen, ins, [tensor(o, F, None) for nd in chosen for o in nd.output if o], inits, opset=22)

    feeds = {
        "x": RNG.standard_normal((t, b, i)).astype(np.float32),
        "xb": RNG.standard_normal((b, t, i)).astype(np.float32),
        "h0b": RNG.standard_normal((b, 2, h)).astype(np.float32),
    }
    library = compile_file(save(model(nodes), tmp_path), tmp_path / "out")
    got = next(iter(library.entries.values()))(*feeds.values())
    # onnxruntime has no batch-first layout; the reference ignores activations, clip and input_forget
    want = ReferenceEvaluator(model(nodes[:1])).run(None, feeds)
    session = onnxruntime.InferenceSession(model(nodes[1:]).SerializeToString(), providers=["CPUExecutionProvider"])
    want += session.run(None, feeds)
    names = [o.name for o in model(nodes).graph.output]
    for g, w, name in zip(got, want, names, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    ("op", "inputs", "outputs", "attrs", "message"),
    [
        ("TopK", ["x", "k"], ["y", "indices"], {}, r"k \(input 1\) must be known when the model is compiled"),
        ("RNN", ["x", "w", "r"], ["y"], {"hidden_size": 2}, "a sequence length computed at run time"),
        ("NegativeLogLikelihoodLoss", ["x", "k"], ["y"], {"reduction": "max"}, "invalid node: the input must be"),
    ],
)
def test_what_must_be_known_is_reported(op, inputs, outputs, attrs, message):
    shapes = {"x": ["T", 1, 3], "k": [1], "w": [1, 2, 3], "r": [1, 2, 2]}
    types = {"k": I64}
    ins = [tensor(name, types.get(name, F), shapes[name]) for name in inputs]
    model = make_model([node(op, inputs, outputs, **attrs)], ins, [tensor(o, 0, None) for o in outputs], opset=22)
    with pytest.raises(CatencError, match=message):
        import_proto(model, "m.onnx")
