"""Hostile ONNX models (issue 25): the importer checks the model once, up front
(catenc/onnx/validate.py, docs/onnx.md "What the importer refuses"), so a malformed or invalid
model is a `model.onnx: error:` and exit 1, never an internal error, and no file outside the model
is ever read. One test per item of the issue; test_onnx_mutation_fuzz.py throws random ones at it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from catenc.cli import main
from catenc.diagnostics import CatencError
from catenc.onnx.importer import import_model
from tests.conftest import compile_file

F, I64 = TensorProto.FLOAT, TensorProto.INT64
SENTINEL = b"catenc-sentinel:7f3a9c21e4b6d058"  # 32 bytes that appear nowhere else


def model_of(nodes, initializers=(), outputs=("y",), opsets=(("", 17),), inputs=(("x", [4]),), sparse=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        initializer=list(initializers),
        sparse_initializer=list(sparse),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def errors_of(data: bytes, directory: Path) -> list[str]:
    """The messages of the error importing these bytes as model.onnx (it must fail with a CatencError)."""
    path = directory / "model.onnx"
    path.write_bytes(data)
    with pytest.raises(CatencError) as info:
        import_model(str(path), "model.onnx")
    return [str(e) for e in (info.value, *info.value.more)]


def cli(cwd: Path, *argv: str):
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(argv))
    finally:
        os.chdir(previous)


def check_refused(model: onnx.ModelProto | bytes, directory: Path, message: str) -> None:
    """Importing the model fails with `message`; compiling and importing it exit 1 with that
    diagnostic and write nothing."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    errors = errors_of(data, directory)
    assert any(message in e for e in errors), errors
    for argv in (["compile", "model.onnx", "-o", "out"], ["import", "model.onnx", "-o", "m.toml"]):
        result = cli(directory, *argv)
        assert result.exit_code == 1, result.output
        assert "model.onnx: error: " in result.output and message in result.output, result.output
        assert sorted(p.name for p in directory.iterdir()) == ["model.onnx"]


# ---- item 1: external data is refused wherever a tensor is, and never read ------------------


def external(location: str, data_location: bool = True, name: str = "") -> TensorProto:
    """A float tensor of 8 elements whose data is said to be the 32 bytes at `location`."""
    tensor = TensorProto(name=name, data_type=F, dims=[8])
    if data_location:
        tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(len(SENTINEL)))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def pointing_at(place: str, location: str) -> tuple[onnx.ModelProto, str]:
    """A model with a tensor at `place` whose data is said to be at `location`, and what the error names."""
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    x8 = (("x", [8]),)
    if place == "initializer":
        return model_of([add], [external(location, name="c")], inputs=x8), "initializer 'c'"
    if place == "external_data entries only":
        return model_of([add], [external(location, False, "c")], inputs=x8), "initializer 'c'"
    if place == "Constant":
        const = helper.make_node("Constant", [], ["c"], name="k", value=external(location))
        return model_of([const, add], inputs=x8), "node 'k' (Constant, opset 17), attribute 'value'"
    if place == "ConstantOfShape":
        fill = external(location)
        del fill.dims[:]
        fill.dims.append(1)
        shape = numpy_helper.from_array(np.array([8], np.int64), "shape")
        cos = helper.make_node("ConstantOfShape", ["shape"], ["c"], name="fill", value=fill)
        return model_of([cos, add], [shape], inputs=x8), "node 'fill' (ConstantOfShape, opset 17), attribute 'value'"
    if place == "TENSORS attribute":
        node = helper.make_node("Fancy", ["x"], ["y"], name="custom", domain="com.example")
        node.attribute.append(helper.make_attribute("tables", [external(location)]))
        model = model_of([node], inputs=x8, opsets=(("", 17), ("com.example", 1)))
        return model, "node 'custom' (com.example.Fancy, opset 1), attribute 'tables'"
    if place == "subgraph":
        const = helper.make_node("Constant", [], ["inner"], name="deep", value=external(location))
        branch = helper.make_graph([const], "b", [], [helper.make_tensor_value_info("inner", F, [8])])
        cond = numpy_helper.from_array(np.array(True), "cond")
        node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch)
        return model_of(
            [node], [cond], inputs=x8
        ), "node 'if' (If, opset 17), attribute 'else_branch', node 'deep' (Constant), attribute 'value'"
    assert place == "sparse initializer"
    sparse = helper.make_sparse_tensor(external(location, name="v"), numpy_helper.from_array(np.arange(8)), [8])
    return model_of([helper.make_node("Relu", ["x"], ["y"])], sparse=[sparse], inputs=x8), "sparse initializer 'v'"


PLACES = (
    "initializer",
    "external_data entries only",
    "Constant",
    "ConstantOfShape",
    "TENSORS attribute",
    "subgraph",
    "sparse initializer",
)


def test_item1_external_data_anywhere_is_refused_and_never_read(tmp_path):
    secret, models = tmp_path / "secret", tmp_path / "models"
    secret.mkdir()
    models.mkdir()
    (secret / "sentinel.bin").write_bytes(SENTINEL)
    (models / "link.bin").symlink_to(secret / "sentinel.bin")
    locations = ("sentinel.bin", "../secret/sentinel.bin", str(secret / "sentinel.bin"), "link.bin")
    for place in PLACES:
        for location in locations:
            model, where = pointing_at(place, location)
            path = models / "model.onnx"
            onnx.save(model, str(path))
            for cwd in (secret, Path("/"), models):
                out = tmp_path / "out"
                for argv in (["compile", str(path), "-o", str(out)], ["import", str(path), "-o", str(out / "m.toml")]):
                    result = cli(cwd, *argv)
                    assert result.exit_code == 1, (place, location, cwd, result.output)
                    first = result.output.splitlines()[0]
                    assert first.startswith(f"{path}: error: {where}: its data is in an external file"), first
                    assert repr(location) in first, first
                    assert not out.exists()
    for file in tmp_path.rglob("*"):
        if file.is_file() and not file.is_symlink() and file != secret / "sentinel.bin":
            assert SENTINEL not in file.read_bytes(), file


# ---- item 2: malformed models are errors, not internal errors -------------------------------


def gemm_model(**attrs) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    gemm = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", **attrs)
    return model_of([gemm], [w], inputs=(("x", [2, 4]),))


def add_of(tensor: TensorProto) -> onnx.ModelProto:
    return model_of([helper.make_node("Add", ["x", tensor.name], ["y"], name="add")], [tensor])


def constant_of_shape(shape: list[int]) -> onnx.ModelProto:
    target = numpy_helper.from_array(np.array(shape, np.int64), "shape")
    cos = helper.make_node("ConstantOfShape", ["shape"], ["c"], name="fill")
    return model_of([cos, helper.make_node("Add", ["x", "c"], ["y"])], [target])


def range_of(start, limit, delta, dtype=np.int64) -> onnx.ModelProto:
    bounds = [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (("a", start), ("b", limit), ("d", delta))]
    arange = helper.make_node("Range", ["a", "b", "d"], ["r"], name="range")
    return model_of([arange, helper.make_node("Cast", ["r"], ["y"], to=F)], bounds)


def expand_to(shape: list[int], known: bool) -> onnx.ModelProto:
    """x expanded to `shape`: x a known [1] (the expansion folds at import) or the graph's input."""
    target = numpy_helper.from_array(np.array(shape, np.int64), "shape")
    one = [numpy_helper.from_array(np.ones(1, np.float32), "one")] if known else []
    expand = helper.make_node("Expand", ["one" if known else "x", "shape"], ["y"], name="expand")
    return model_of([expand], [target, *one], inputs=(("x", [1]),))


def non_utf8_name() -> bytes:
    data = model_of([helper.make_node("Relu", ["x"], ["y"], name="NAMENAME")]).SerializeToString()
    return data.replace(b"NAMENAME", b"NAM\xff\xfeAME")


def wrong_count() -> onnx.ModelProto:
    return add_of(TensorProto(name="w", data_type=F, dims=[4], float_data=[1.0, 2.0, 3.0]))


def short_raw_data() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.raw_data = w.raw_data[:-2]
    return add_of(w)


def segmented() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.segment.begin, w.segment.end = 0, 4
    return add_of(w)


def undefined_type() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.data_type = TensorProto.UNDEFINED
    return add_of(w)


def untyped_attribute() -> onnx.ModelProto:
    model = gemm_model()
    model.graph.node[0].attribute.add(name="transB", i=1)  # its type field left 0 (UNDEFINED)
    return model


def untyped_conv_attribute() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    conv.attribute.add(name="pads", ints=[1, 1, 1, 1])  # type UNDEFINED: nn._ints crashed on it
    return model_of([conv], [w], inputs=(("x", [1, 1, 5, 5]),))


MALFORMED = {
    "non-UTF-8 name": (non_utf8_name, "node 'NAM\\xff\\xfeAME' (Relu, opset 17): its name b'NAM\\xff\\xfeAME'"),
    "dims disagree with the data": (wrong_count, "initializer 'w': dims [4] make 4 elements, its float_data holds 3"),
    "raw_data cut short": (short_raw_data, "initializer 'w': raw_data holds 14 bytes; dims [4] of FLOAT need 16"),
    "segment": (segmented, "initializer 'w': a segment of a tensor"),
    "data_type 0": (undefined_type, "initializer 'w': no element type (data_type 0, UNDEFINED)"),
    "ConstantOfShape [-2]": (
        lambda: constant_of_shape([-2]),
        "node 'fill' (ConstantOfShape, opset 17): invalid node: the shape [-2] has a negative dimension",
    ),
    "ConstantOfShape [2**40, 2**40]": (
        lambda: constant_of_shape([2**40, 2**40]),
        "node 'fill' (ConstantOfShape, opset 17): a tensor of 1208925819614629174706176 elements",
    ),
    # a Range or an Expand past 2**36 elements, counted in Python ints (np.prod wrapped past 2**63)
    "Range to 2**62": (
        lambda: range_of(0, 2**62, 1),
        "node 'range' (Range, opset 17): a tensor of 4611686018427387904",
    ),
    "f32 Range to 1e12": (
        lambda: range_of(0, 1e12, 1, np.float32),
        "node 'range' (Range, opset 17): a tensor of 999999995904 elements, more than the 68719476736",
    ),
    "f32 Range of a tiny delta": (
        lambda: range_of(-3e38, 3e38, 1e-30, np.float32),
        "node 'range' (Range, opset 17): a tensor of 599999999196905043519653005907563960556537568616227777821857",
    ),
    "Range of delta 0": (
        lambda: range_of(0, 10, 0),
        "node 'range' (Range, opset 17): invalid node: delta (input 2) is 0",
    ),
    "Range to inf": (
        lambda: range_of(0, np.inf, 1, np.float32),
        "node 'range' (Range, opset 17): invalid node: start 0.0, limit inf and delta 1.0 must be finite",
    ),
    "Expand to 2**68 (2**64 wrapped to 0)": (
        lambda: expand_to([2**32, 2**32, 16], known=True),
        "node 'expand' (Expand, opset 17): a tensor of 295147905179352825856 elements, more than the 68719476736",
    ),
    "Expand an input to [2**40, 2**40]": (
        lambda: expand_to([2**40, 2**40], known=False),
        "node 'expand' (Expand, opset 17): a tensor of 1208925819614629174706176 elements",
    ),
    "Expand to [-3, 2]": (
        lambda: expand_to([-3, 2], known=True),
        "node 'expand' (Expand, opset 17): invalid node: the shape [-3, 2] has a negative dimension",
    ),
    "Gemm alpha as a string": (
        lambda: gemm_model(alpha="2"),
        "node 'fc' (Gemm, opset 17): attribute 'alpha' is a STRING; Gemm takes a FLOAT",
    ),
    "attribute of type UNDEFINED": (untyped_attribute, "node 'fc' (Gemm, opset 17): attribute 'transB' has no type"),
    "Conv attribute of type UNDEFINED": (untyped_conv_attribute, "node 'conv' (Conv, opset 17): attribute 'pads'"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_item2_malformed_models_are_errors_not_internal_errors(tmp_path, case):
    make, message = MALFORMED[case]
    check_refused(make(), tmp_path, message)


def test_item2_a_known_range_past_the_fold_limit_is_computed_by_the_library(tmp_path):
    """Under the limit, a known Range too large to fold (2**20 values) is start + i * delta in the
    library, as ONNX writes it; it was folded into the weights, 8 bytes a value."""
    ranges = {"i64": (5, 3_000_005, 2, np.int64), "i32": (7, -1_500_000, -1, np.int32)}
    ranges["f32"] = (3.0, 750_003.0, 0.5, np.float32)
    nodes, bounds = [], []
    for name, (*values, dtype) in ranges.items():
        names = [f"{name}_{part}" for part in ("start", "limit", "delta")]
        bounds += [numpy_helper.from_array(np.array(v, dtype), n) for n, v in zip(names, values, strict=True)]
        nodes += [
            helper.make_node("Range", names, [f"{name}_r"]),
            helper.make_node("Cast", [f"{name}_r"], [name], to=F),
        ]
    nodes.append(helper.make_node("Concat", list(ranges), ["joined"], axis=0))
    nodes.append(helper.make_node("Add", ["joined", "x"], ["y"]))
    model = model_of(nodes, bounds, inputs=(("x", [1]),))
    onnx.save(model, str(tmp_path / "model.onnx"))
    imported = import_model(str(tmp_path / "model.onnx"), "m")
    assert imported.constants == {}
    for made in ("arange(1500000, dtype=i64) * 2 + 5", "arange(1500007, dtype=i32) * -1 + 7", "f32) * 0.5 + 3.0"):
        assert made in imported.text
    library = compile_file(tmp_path / "model.onnx", tmp_path / "out")
    x = np.array([0.25], np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(library.entries["g"](x), want)
    assert not list((tmp_path / "out").glob("*.safetensors"))


# ---- item 5: invalid models are refused, not accepted silently ------------------------------


def ml_only() -> onnx.ModelProto:
    binarizer = helper.make_node("Binarizer", ["x"], ["y"], name="b", domain="ai.onnx.ml", threshold=1.0)
    return model_of([binarizer], opsets=(("ai.onnx.ml", 1),))


def relu_with_opsets(*opsets) -> onnx.ModelProto:
    return model_of([helper.make_node("Relu", ["x"], ["y"], name="r")], opsets=opsets)


def duplicate_inputs() -> onnx.ModelProto:
    return model_of([helper.make_node("Add", ["x", "x"], ["y"])], inputs=(("x", [4]), ("x", [4])))


def duplicate_outputs_of_nodes() -> onnx.ModelProto:
    relu = helper.make_node("Relu", ["x"], ["y"], name="first")
    again = helper.make_node("Neg", ["x"], ["y"], name="second")
    return model_of([relu, again])


def negative_dims() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    w.dims[1] = -4
    return model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [w], inputs=(("x", [2, 8]),))


def two_values() -> onnx.ModelProto:
    const = helper.make_node("Constant", [], ["c"], name="k", value_float=1.0, value_int=2)
    return model_of([const, helper.make_node("Add", ["x", "c"], ["y"])])


def output_twice() -> onnx.ModelProto:
    model = model_of([helper.make_node("Relu", ["x"], ["y"], name="r")])
    model.graph.output.append(model.graph.output[0])
    return model


INVALID = {
    "opset 99": (
        lambda: relu_with_opsets(("", 99)),
        "opset 99 of the default ONNX domain: catenc reads opsets 7 to 28",
    ),
    "opset 1": (lambda: relu_with_opsets(("", 1)), "opset 1 of the default ONNX domain: catenc reads opsets 7 to 28"),
    "only another domain": (
        lambda: relu_with_opsets(("com.example", 3)),
        "the model imports no opset of the default ONNX domain",
    ),
    # valid ONNX: a model of another domain's operators only needs no default opset; its operator is what is missing
    "only ai.onnx.ml operators": (
        ml_only,
        "node 'b' (ai.onnx.ml.Binarizer, opset 1): operator not supported",
    ),
    "two graph inputs of one name": (duplicate_inputs, "graph input 'x' is declared twice"),
    "a node output defined twice": (
        duplicate_outputs_of_nodes,
        "node 'second' (Neg, opset 17): output 'y' is already defined by node 'first'",
    ),
    "negative initializer dims": (negative_dims, "initializer 'w': a negative dimension in its dims [8, -4]"),
    "Constant with two values": (two_values, "node 'k' (Constant, opset 17): invalid node: a Constant has one value"),
    "Gemm transB=7": (lambda: gemm_model(transB=7), "node 'fc' (Gemm, opset 17): attribute 'transB' is 7"),
    "a graph output listed twice": (output_twice, "graph output 'y' is listed twice"),
}


@pytest.mark.parametrize("case", INVALID)
def test_item5_invalid_models_are_refused(tmp_path, case):
    make, message = INVALID[case]
    check_refused(make(), tmp_path, message)


@pytest.mark.parametrize("name", ['a"b.toml', "a b.toml", "a\nb.toml", "a'b.toml", "a\\b.toml", "-a.toml"])
def test_item5_import_refuses_an_output_name_compile_would_refuse(tmp_path, name):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    onnx.save(add_of(w), str(tmp_path / "model.onnx"))
    result = cli(tmp_path, "import", "model.onnx", "-o", name)
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "rename" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_item5_an_imported_file_names_a_weights_file_that_exists_and_compiles(tmp_path):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    onnx.save(add_of(w), str(tmp_path / "model.onnx"))
    (tmp_path / "sub dir").mkdir()
    result = cli(tmp_path, "import", "model.onnx", "-o", "sub dir/a-b.c+d.toml")
    assert result.exit_code == 0, result.output
    assert 'weights = "a-b.c+d.safetensors"' in (tmp_path / "sub dir" / "a-b.c+d.toml").read_text()
    compiled = cli(tmp_path, "compile", "sub dir/a-b.c+d.toml", "-o", "out")
    assert compiled.exit_code == 0, compiled.output
