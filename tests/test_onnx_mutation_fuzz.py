"""A mutation fuzzer over small real ONNX graphs (issue 25): each mutant of a CNN, an MLP and an
attention block (a data type, dims, an attribute's kind or value, a name's bytes, raw_data, a
duplicate name, an opset, external data, a node's inputs, the file's bytes) is imported in
process, as `catenc compile` and `catenc import` import it: it converts, or it is a CatencError
(`model.onnx: error:`, exit 1), never another exception (an internal error, exit 4). Seeded, so
every run throws the same mutants; a few also go through the real CLI.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from catenc.diagnostics import CatencError
from catenc.onnx.importer import import_proto
from catenc.onnx.model import parse_model

F = TensorProto.FLOAT
MUTANTS_PER_MODEL = 150


def init(rng: np.random.Generator, name: str, shape, dtype=np.float32) -> TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def ints(name: str, values) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"], name="fc1", transB=1, alpha=1.0),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], name="fc2", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    inits = [init(rng, "w1", (16, 12)), init(rng, "b1", (16,)), init(rng, "w2", (4, 16)), init(rng, "b2", (4,))]
    return model_of(nodes, [("x", ["batch", 3, 4])], inits)


def cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["bn"], name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Shape", ["p"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["p", "target"], ["flat"], name="reshape"),
        helper.make_node(
            "ConstantOfShape", ["ten"], ["ones"], name="fill", value=numpy_helper.from_array(np.ones(1, np.float32))
        ),
        helper.make_node("MatMul", ["flat", "fw"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "ones"], ["y"], name="add"),
    ]
    inits = [
        init(rng, "cw", (4, 2, 3, 3)),
        init(rng, "cb", (4,)),
        init(rng, "g", (4,)),
        init(rng, "be", (4,)),
        init(rng, "m", (4,)),
        numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype(np.float32) + 0.5, "v"),
        ints("zero", 0),
        ints("axes", [0]),
        ints("minus1", [-1]),
        ints("ten", [10]),
        init(rng, "fw", (64, 10)),
    ]
    return model_of(nodes, [("x", [1, 2, 8, 8])], inits)


def attention() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        helper.make_node("Constant", [], ["scale"], name="scale", value=numpy_helper.from_array(np.float32(0.25))),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="mul"),
        helper.make_node("Softmax", ["scaled"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["ctx"], name="ctx"),
        helper.make_node("ReduceMean", ["ctx", "last"], ["mean"], name="mean", keepdims=1),
        helper.make_node("Sub", ["ctx", "mean"], ["centred"], name="sub"),
        helper.make_node("LayerNormalization", ["centred", "gamma", "beta"], ["y"], name="ln", axis=-1),
    ]
    inits = [init(rng, "wq", (8, 8)), init(rng, "wk", (8, 8)), init(rng, "gamma", (8,))]
    inits += [init(rng, "beta", (8,)), ints("last", [-1])]
    return model_of(nodes, [("x", ["batch", "seq", 8])], inits, opset=18)


def model_of(nodes, inputs, inits, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


MODELS = {"mlp": mlp, "cnn": cnn, "attention": attention}

# ---- mutations: each changes one thing of a copy of the model, and says what -------------------

BAD_BYTES = b"\xff\xfe"
DATA_TYPES = list(TensorProto.DataType.values())
ATTRIBUTE_TYPES = list(AttributeProto.AttributeType.values())  # protobuf refuses others
ODD_INTS = [-(2**40), -7, -2, -1, 0, 1, 2, 3, 7, 2**31, 2**40]


def tensors(model) -> list[TensorProto]:
    inside = [a.t for n in model.graph.node for a in n.attribute if a.type == AttributeProto.TENSOR]
    return [*model.graph.initializer, *inside]


def attributes(model) -> list[AttributeProto]:
    return [a for n in model.graph.node for a in n.attribute]


def flip_data_type(model, rng) -> str:
    t = pick(rng, tensors(model))
    t.data_type = int(pick(rng, DATA_TYPES))
    return f"tensor '{t.name}' data_type {t.data_type}"


def change_dims(model, rng) -> str:
    t = pick(rng, tensors(model))
    if len(t.dims) and rng.random() < 0.7:
        t.dims[int(rng.integers(len(t.dims)))] = int(pick(rng, ODD_INTS))
    else:
        t.dims.append(int(pick(rng, [1, 2, -1])))
    return f"tensor '{t.name}' dims {list(t.dims)}"


def truncate_raw_data(model, rng) -> str:
    t = pick(rng, [t for t in tensors(model) if t.raw_data] or tensors(model))
    t.raw_data = t.raw_data[: int(rng.integers(len(t.raw_data) + 1))] if t.raw_data else b"\x00"
    return f"tensor '{t.name}' raw_data of {len(t.raw_data)} bytes"


def external_data(model, rng) -> str:
    t = pick(rng, tensors(model))
    t.external_data.add(key="location", value=str(pick(rng, ["w.bin", "../w.bin", "/etc/hostname"])))
    if rng.random() < 0.5:
        t.data_location = TensorProto.EXTERNAL
    return f"tensor '{t.name}' external data"


def segment(model, rng) -> str:
    t = pick(rng, tensors(model))
    t.segment.begin, t.segment.end = 0, 1
    return f"tensor '{t.name}' segment"


def attribute_type(model, rng) -> str:
    a = pick(rng, attributes(model))
    a.type = int(pick(rng, ATTRIBUTE_TYPES))
    return f"attribute '{a.name}' type {a.type}"


def attribute_value(model, rng) -> str:
    a = pick(rng, attributes(model))
    if a.type == AttributeProto.INT:
        a.i = int(pick(rng, ODD_INTS))
    elif a.type == AttributeProto.INTS:
        a.ints[:] = [int(pick(rng, ODD_INTS)) for _ in range(int(rng.integers(0, 5)))]
    elif a.type == AttributeProto.FLOAT:
        a.f = float(pick(rng, [np.nan, np.inf, -1.0, 0.0, 1e30]))
    else:
        a.ClearField("t")
    return f"attribute '{a.name}' value"


def node_of(model, rng):
    return pick(rng, list(model.graph.node))


def remove_attribute(model, rng) -> str:
    node = node_of(model, rng)
    if node.attribute:
        del node.attribute[int(rng.integers(len(node.attribute)))]
    else:
        node.attribute.add(name="bogus", type=AttributeProto.INT, i=1)
    return f"node '{node.name}' attributes {[a.name for a in node.attribute]}"


def bad_name(model, rng) -> tuple[bytes, str]:
    data = model.SerializeToString()
    names = sorted({n.name for n in model.graph.node} | {i.name for i in model.graph.initializer} - {""})
    name = pick(rng, names).encode()
    bad = (name[:1] + BAD_BYTES + name[3:])[: len(name)]  # as long as the name: the lengths before it hold
    return data.replace(name, bad, 1), f"name '{name.decode()}' with bad bytes"


def duplicate_name(model, rng) -> str:
    node = node_of(model, rng)
    taken = [i.name for i in model.graph.input] + [t.name for t in model.graph.initializer]
    taken += [o for n in model.graph.node for o in n.output]
    name = pick(rng, taken)
    node.output[:1] = [name]
    return f"node '{node.name}' output renamed '{name}'"


def bogus_opset(model, rng) -> str:
    entry = model.opset_import[0]
    if rng.random() < 0.2:
        entry.domain = pick(rng, ["com.example", "ai.onnx.ml"])
    else:
        entry.version = int(pick(rng, [-1, 0, 1, 6, 29, 99, 2**40]))
    return f"opset {entry.domain!r} {entry.version}"


def node_inputs(model, rng) -> str:
    node = node_of(model, rng)
    choice = rng.integers(4)
    if choice == 0 and node.input:
        del node.input[int(rng.integers(len(node.input)))]
    elif choice == 1 and node.input:
        node.input.append(node.input[int(rng.integers(len(node.input)))])
    elif choice == 2 and node.input:
        node.input[int(rng.integers(len(node.input)))] = ""
    else:
        node.input.append(pick(rng, [t.name for t in model.graph.initializer]))
    return f"node '{node.name}' inputs {list(node.input)}"


def node_outputs(model, rng) -> str:
    node = node_of(model, rng)
    if rng.random() < 0.5 and len(node.output):
        del node.output[:]
    else:
        node.output.append(f"{node.name}_extra")
    return f"node '{node.name}' outputs {list(node.output)}"


def op_type(model, rng) -> str:
    node = node_of(model, rng)
    ops = sorted({n.op_type for name in MODELS for n in MODELS[name]().graph.node} | {"Gemm", "Expand", "Slice"})
    node.op_type = pick(rng, ops)
    return f"node '{node.name}' is a {node.op_type}"


def drop_node(model, rng) -> str:
    index = int(rng.integers(len(model.graph.node)))
    name = model.graph.node[index].name
    del model.graph.node[index]
    return f"node '{name}' deleted"


def graph_io(model, rng) -> str:
    graph = model.graph
    choice = rng.integers(3)
    if choice == 0:
        graph.input.append(graph.input[0])
    elif choice == 1:
        graph.output.append(graph.output[0])
    else:
        graph.input[0].type.tensor_type.shape.dim[0].dim_value = int(pick(rng, [-3, 0, 2**40]))
    return f"graph inputs {[i.name for i in graph.input]}, outputs {[o.name for o in graph.output]}"


def file_bytes(model, rng) -> tuple[bytes, str]:
    data = bytearray(model.SerializeToString())
    if rng.random() < 0.5:
        cut = int(rng.integers(len(data)))
        return bytes(data[:cut]), f"file cut to {cut} bytes"
    for _ in range(3):
        data[int(rng.integers(len(data)))] = int(rng.integers(256))
    return bytes(data), "three bytes of the file changed"


MUTATIONS: tuple[Callable, ...] = (
    flip_data_type,
    change_dims,
    truncate_raw_data,
    external_data,
    segment,
    attribute_type,
    attribute_value,
    remove_attribute,
    bad_name,
    duplicate_name,
    bogus_opset,
    node_inputs,
    node_outputs,
    op_type,
    drop_node,
    graph_io,
    file_bytes,
)


def pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def mutants(name: str, n: int, seed: int):
    """n mutants of the model `name`: (the file's bytes, what was changed); one to three changes each."""
    rng = np.random.default_rng(seed)
    base = MODELS[name]()
    for _ in range(n):
        model = onnx.ModelProto()
        model.CopyFrom(base)
        done = []
        for _ in range(int(rng.integers(1, 4))):
            mutate = pick(rng, MUTATIONS)
            result = mutate(model, rng)
            if isinstance(result, tuple):  # a mutation of the bytes: the last one
                data, what = result
                done.append(what)
                break
            done.append(result)
        else:
            data = model.SerializeToString()
        yield data, "; ".join(done)


def outcome(data: bytes) -> str:
    """'ok' or 'error' (a CatencError); anything else raises: the importer's bug."""
    try:
        import_proto(parse_model(data, "model.onnx"), "model.onnx")
    except CatencError:
        return "error"
    return "ok"


@pytest.mark.parametrize("name", MODELS)
def test_no_mutant_is_an_internal_error(name):
    seed = sorted(MODELS).index(name)
    assert outcome(MODELS[name]().SerializeToString()) == "ok"
    seen = {"ok": 0, "error": 0}
    for data, what in mutants(name, MUTANTS_PER_MODEL, seed):
        try:
            seen[outcome(data)] += 1
        except Exception as error:  # any other exception is the bug this test looks for
            pytest.fail(f"{name} mutant ({what}): {type(error).__name__}: {error}")
    assert seen["error"] > MUTANTS_PER_MODEL // 2 and seen["ok"] > 0, seen


def test_mutants_through_the_cli_exit_0_or_1(tmp_path):
    for index, (data, what) in enumerate(mutants("cnn", 4, 7)):
        (tmp_path / "model.onnx").write_bytes(data)
        result = subprocess.run(
            [sys.executable, "-m", "catenc", "import", "model.onnx", "-o", f"m{index}.toml"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode in (0, 1), (what, result.stderr)
        assert "internal compiler error" not in result.stderr and "Traceback" not in result.stderr, what
        if result.returncode == 1:
            assert result.stderr.startswith("model.onnx: error: "), (what, result.stderr)
