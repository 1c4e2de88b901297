"""ONNX import (docs/onnx.md): compile and import .onnx files, names and symbols, folding, errors.

Models are built with onnx.helper and checked against onnx's own reference evaluator; the
families of operators have their own files (test_onnx_nn.py, test_onnx_shape_quant.py), the
ONNX node tests run through `catenc test-runtime --suite onnx` (test_onnx_node_suite.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from catenc.onnx.importer import import_model
from tests.conftest import compile_file

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="net"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save(model, directory: Path, stem: str = "model") -> Path:
    path = directory / f"{stem}.onnx"
    onnx.save(model, str(path))
    return path


def catenc(cwd: Path, *args: str, seed: str = "0") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    return subprocess.run(
        [sys.executable, "-m", "catenc", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def check_against_reference(model, directory: Path, feeds: dict[str, np.ndarray], rtol=1e-5, atol=1e-6, **dims):
    library = compile_file(save(model, directory), directory / "out")
    entry = next(iter(library.entries.values()))
    got = entry(*feeds.values(), **dims)
    got = got if isinstance(got, tuple) else (got,)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w, out in zip(got, want, model.graph.output, strict=True):
        assert g.dtype == w.dtype, out.name
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=out.name)
    return library


# ---- errors ---------------------------------------------------------------------------------


def test_every_unsupported_node_is_reported_at_once(tmp_path):
    nodes = [
        helper.make_node("DeformConv", ["x", "w", "off"], ["y"], name="Conv_12"),
        helper.make_node("Relu", ["y"], ["z"]),  # after an unsupported node: not reported again
        helper.make_node("Fancy", ["z"], ["q"], name="custom_1", domain="com.example"),
        helper.make_node("Unique", ["x"], ["u"], name=""),
    ]
    ins = [tensor(n, F, [1, 2, 3, 3]) for n in ("x", "w", "off")]
    model = helper.make_model(
        helper.make_graph(nodes, "g", ins, [tensor("q", F, None), tensor("u", F, None)]),
        opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.example", 1)],
    )
    save(model, tmp_path)
    result = catenc(tmp_path, "compile", "model.onnx", "-o", "out")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "model.onnx: error: node 'Conv_12' (DeformConv, opset 19): operator not supported",
        "model.onnx: error: node 'custom_1' (com.example.Fancy, opset 1): operator not supported",
        "model.onnx: error: node 'Unique_3' (Unique, opset 19): operator not supported",
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("truncated", "not an ONNX model, or a truncated one"),
        (b"hello, world\n", "not an ONNX model, or a truncated one"),
        (b"", "not an ONNX model: the file has no graph or no opset"),
    ],
)
def test_files_that_are_not_onnx_models(tmp_path, content, message):
    if content == "truncated":
        x = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
        model = make_model(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", F, [2, 64])], [tensor("y", F, [2, 64])], [x]
        )
        content = model.SerializeToString()[:-100]
    (tmp_path / "m.onnx").write_bytes(content)
    for command in (["compile", "m.onnx", "-o", "out"], ["import", "m.onnx"]):
        result = catenc(tmp_path, *command)
        assert result.returncode == 1
        assert result.stderr.startswith(f"m.onnx: error: {message}"), result.stderr
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# ---- names, symbols, constants ----------------------------------------------------------------


def mlp_model(batch="batch"):
    w1 = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32), "fc1.weight")
    b1 = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32), "fc1.bias")
    w2 = numpy_helper.from_array(np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32), "fc2.weight")
    nodes = [
        helper.make_node("MatMul", ["input.1", "fc1.weight"], ["/fc1/MatMul_output_0"]),
        helper.make_node("Add", ["/fc1/MatMul_output_0", "fc1.bias"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "fc2.weight"], ["logits"], transB=1, alpha=0.5),
    ]
    return make_model(nodes, [tensor("input.1", F, [batch, 8])], [tensor("logits", F, [batch, 4])], [w1, b1, w2])


def test_entry_named_after_graph_with_symbols_and_baked_weights(tmp_path):
    model = mlp_model()
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    library = check_against_reference(model, tmp_path, {"input.1": x})
    entry = library.entries["net"]
    assert [a["name"] for a in library.manifest["entries"][0]["args"] if a["role"] != "workspace_bytes"] == [
        "input_1",
        "logits",
        "batch",
        "workspace",
    ]
    np.testing.assert_allclose(entry(x[:1]), ReferenceEvaluator(model).run(None, {"input.1": x[:1]})[0], rtol=1e-5)


def test_import_writes_a_readable_file_that_compiles_to_the_same_code(tmp_path):
    save(mlp_model(), tmp_path)
    result = catenc(tmp_path, "import", "model.onnx", "-o", "imported/model.toml", "--composite", "mlp")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "imported/model.toml").read_text()
    assert 'weights = "model.safetensors"' in text
    assert '"fc1_weight: f32[8, 16]"' in text and '"fc2_weight_T: f32[16, 4]"' in text  # transposed at import
    assert "fc1_MatMul = input_1 @ fc1_weight" in text
    assert "logits = 0.5 * (r @ fc2_weight_T)" in text
    assert catenc(tmp_path, "compile", "imported/model.toml", "-S", "-o", "a").returncode == 0
    assert catenc(tmp_path, "compile", "model.onnx", "--composite", "mlp", "-S", "-o", "b").returncode == 0
    a, b = (tmp_path / "a/model.c").read_text(), (tmp_path / "b/model.c").read_text()
    assert a.split("\n", 1)[1] == b.split("\n", 1)[1]  # the same program; only the banner names the source


def test_import_is_byte_identical_under_any_hash_seed(tmp_path):
    save(mlp_model(), tmp_path)
    texts = []
    for seed in ("0", "1", "4242"):
        assert catenc(tmp_path, "import", "model.onnx", "-o", f"m{seed}.toml", seed=seed).returncode == 0
        texts.append((tmp_path / f"m{seed}.toml").read_text().replace(f"m{seed}.safetensors", ""))
        texts.append((tmp_path / f"m{seed}.safetensors").read_bytes())
    assert texts[0::2] == [texts[0]] * 3 and texts[1::2] == [texts[1]] * 3


def test_unnamed_dynamic_dims_get_stable_names_and_D_pins_them(tmp_path):
    model = make_model(
        [helper.make_node("Softplus", ["x"], ["y"])], [tensor("x", F, [None, 3])], [tensor("y", F, [None, 3])]
    )
    text = import_model(str(save(model, tmp_path))).text
    assert '"x: f32[x_dim0, 3]"' in text
    assert catenc(tmp_path, "compile", "model.onnx", "-D", "x_dim0=4", "-o", "out", "--test", "").returncode == 0
    header = (tmp_path / "out/model.h").read_text()
    assert "int net(const float* x, float* y, void* workspace, size_t workspace_bytes);" in header


def test_shape_arithmetic_folds_to_one_reshape(tmp_path):
    """The chain torch exports for x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat, Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Mul", ["flat", "flat"], ["y"]),
    ]
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    model = make_model(nodes, [tensor("x", F, ["N", 3, 4])], [tensor("y", F, ["N", 12])], [axes])
    text = import_model(str(save(model, tmp_path))).text
    body = text.split("body = '''\n", 1)[1].split("'''", 1)[0]
    assert body.splitlines() == ["flat = reshape(x, [N, 12])", "y = flat * flat"]
    x = np.random.default_rng(0).standard_normal((6, 3, 4)).astype(np.float32)
    check_against_reference(model, tmp_path, {"x": x})


def test_graph_output_that_is_an_input_or_a_constant(tmp_path):
    c = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    model = make_model(
        [helper.make_node("Identity", ["c"], ["k"])],
        [tensor("x", F, [2, 3])],
        [tensor("x", F, [2, 3]), tensor("k", F, [2, 3])],
        [c],
    )
    x = np.ones((2, 3), np.float32)
    library = compile_file(save(model, tmp_path), tmp_path / "out")
    got_x, got_k = library.entries["net"](x)
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_k, np.arange(6, dtype=np.float32).reshape(2, 3))


# ---- the elementwise family and Gemm, against onnx's reference evaluator ------------------------


def test_elementwise_family(tmp_path):
    nodes = [
        helper.make_node("Div", ["i", "j"], ["div_i"]),  # integer division truncates toward zero
        helper.make_node("Mod", ["i", "j"], ["mod_i"]),
        helper.make_node("Mod", ["i", "j"], ["fmod_i"], fmod=1),
        helper.make_node("Mod", ["x", "y"], ["fmod_x"], fmod=1),
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("Max", ["x", "y", "half"], ["mx"]),
        helper.make_node("Mean", ["x", "y"], ["mean"]),
        helper.make_node("Clip", ["x", "lo", ""], ["clipped"]),
        helper.make_node("Greater", ["x", "y"], ["gt"]),
        helper.make_node("Not", ["gt"], ["le"]),
        helper.make_node("Where", ["le", "x", "y"], ["sel"]),
        helper.make_node("Cast", ["y"], ["xi"], to=TensorProto.INT32),  # (inf to int is undefined)
        helper.make_node("LeakyRelu", ["x"], ["lrelu"], alpha=0.1),
        helper.make_node("HardSigmoid", ["x"], ["hsig"]),
        helper.make_node("HardSwish", ["x"], ["hswish"]),
        helper.make_node("Elu", ["x"], ["elu"], alpha=0.7),
        helper.make_node("Selu", ["x"], ["selu"]),
        helper.make_node("Gelu", ["x"], ["gelu"], approximate="tanh"),
        helper.make_node("Erf", ["x"], ["erf"]),
        helper.make_node("PRelu", ["x", "slope"], ["prelu"]),
        helper.make_node("Softsign", ["x"], ["softsign"]),
        helper.make_node("Sign", ["x"], ["sign"]),
        helper.make_node("IsInf", ["x"], ["isinf"], detect_negative=0),
    ]
    consts = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(-0.25, np.float32), "lo"),
        numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.4, 0.5], np.float32), "slope"),
    ]
    outs = [n.output[0] for n in nodes]
    kinds = {
        "div_i": TensorProto.INT32,
        "mod_i": TensorProto.INT32,
        "fmod_i": TensorProto.INT32,
        "xi": TensorProto.INT32,
    }
    kinds |= {"gt": B, "le": B, "isinf": B}
    model = make_model(
        nodes,
        [
            tensor("x", F, [3, 5]),
            tensor("y", F, [3, 5]),
            tensor("i", TensorProto.INT32, [3, 5]),
            tensor("j", TensorProto.INT32, [5]),
        ],
        [tensor(o, kinds.get(o, F), None) for o in outs],
        consts,
        opset=20,  # Gelu
    )
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5)) * 3).astype(np.float32)
    x[0, 0] = np.inf
    feeds = {
        "x": x,
        "y": (rng.standard_normal((3, 5)) * 3).astype(np.float32),
        "i": rng.integers(-20, 20, (3, 5)).astype(np.int32),
        "j": np.array([3, -4, 5, -7, 2], np.int32),
    }
    check_against_reference(model, tmp_path, feeds, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("trans_a, trans_b, beta", [(0, 0, 1.0), (1, 1, 0.5), (1, 0, 0.0)])
def test_gemm_forms(tmp_path, trans_a, trans_b, beta):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 6) if not trans_a else (6, 4)).astype(np.float32)
    b = numpy_helper.from_array(rng.standard_normal((6, 5) if not trans_b else (5, 6)).astype(np.float32), "b")
    c = numpy_helper.from_array(rng.standard_normal((5,)).astype(np.float32), "c")
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=1.5, beta=beta)
    model = make_model([node], [tensor("a", F, list(a.shape))], [tensor("y", F, [4, 5])], [b, c])
    check_against_reference(model, tmp_path, {"a": a}, rtol=1e-5, atol=1e-5)


def test_gemm_of_one_row_keeps_the_weight_as_given(tmp_path):
    """A classifier at batch 1 (transB=1, one row of A) reads its weight row by row: `a @ b.T`, no transposed copy."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 6)).astype(np.float32)
    b = numpy_helper.from_array(rng.standard_normal((5, 6)).astype(np.float32), "b")
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)
    model = make_model([node], [tensor("a", F, [1, 6])], [tensor("y", F, [1, 5])], [b])
    text = import_model(str(save(model, tmp_path))).text
    assert "y = a @ b.T" in text and "b: f32[5, 6]" in text
    check_against_reference(model, tmp_path, {"a": a}, rtol=1e-5, atol=1e-5)


def test_a_shape_with_symbols_as_an_output(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"])]
    model = make_model(nodes, [tensor("x", F, ["N", 3])], [tensor("s", I64, [2]), tensor("n", I64, [])])
    library = compile_file(save(model, tmp_path), tmp_path / "out")
    shape, size = library.entries["net"](np.zeros((5, 3), np.float32))
    np.testing.assert_array_equal(shape, [5, 3])
    assert size == 15 and size.dtype == np.int64


def test_a_converter_constraint_becomes_a_where_entry_checked_at_run_time(tmp_path, monkeypatch):
    from catenc.onnx import registry

    relu = registry.CONVERTERS["Relu"]

    def needs_three(node, emit):
        emit.require("H >= 3")
        return relu(node, emit)

    monkeypatch.setitem(registry.CONVERTERS, "Relu", needs_three)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", F, ["H"])], [tensor("y", F, ["H"])])
    text = import_model(str(save(model, tmp_path))).text
    assert 'where = ["H >= 3"]' in text
    library = compile_file(tmp_path / "model.onnx", tmp_path / "out")
    np.testing.assert_array_equal(library.entries["net"](np.array([-1, 2, 3], np.float32)), [0, 2, 3])
    with pytest.raises(Exception, match="CATENC_E_SHAPE"):
        library.entries["net"](np.array([1, 2], np.float32))


def test_docs_list_exactly_the_operators_catenc_converts():
    from catenc.onnx.families import FAMILIES
    from catenc.onnx.registry import _VARIANTS, CONVERTERS

    # the module of each operator's converters (CONVERTERS holds a dispatch by opset over them)
    modules = {op: {fn.__module__ for _, fn in variants} for op, variants in _VARIANTS.items()}
    assert sorted(modules) == sorted(CONVERTERS)
    docs = (Path(__file__).parent.parent / "docs/onnx.md").read_text()
    for family in FAMILIES:
        ops = sorted(op for op, module in modules.items() if module == {family.__name__})
        assert f"| `{family.__name__.split('.')[-1]}` | {', '.join(ops)} |" in docs
    assert sum(module <= {f.__name__ for f in FAMILIES} for module in modules.values()) == len(CONVERTERS)


def test_external_weights_are_one_argument_that_the_loader_maps_from_the_weights_file(tmp_path):
    from catenc.loader import load
    from catenc.weights import read_weights, weights_bytes

    model = mlp_model()
    save(model, tmp_path)
    assert catenc(tmp_path, "compile", "model.onnx", "--weights", "external", "-o", "out").returncode == 0
    header = (tmp_path / "out/model.h").read_text()
    assert "int net(const float* input_1, const void* weights, float* logits, " in header
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"input.1": x})[0]
    np.testing.assert_allclose(load(tmp_path / "out").entries["net"](x), want, rtol=1e-5, atol=1e-6)
    tensors = read_weights(str(tmp_path / "out/model.safetensors"))
    zeros = {key: (t.dtype, np.zeros_like(t.data)) for key, t in tensors.items()}
    (tmp_path / "zeros.safetensors").write_bytes(weights_bytes(zeros))  # the same layout, other values
    library = load(tmp_path / "out", weights=tmp_path / "zeros.safetensors")
    np.testing.assert_array_equal(library.entries["net"](x), np.zeros((3, 4), np.float32))


def test_an_error_in_the_imported_program_says_where_to_see_it(tmp_path):
    save(mlp_model(), tmp_path)
    result = catenc(tmp_path, "compile", "model.onnx", "--runtime", "cuda", "-S", "-o", "out")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("model.onnx:3:12: error: 'net' has constants, which cannot be baked into cuda")
    assert lines[-1] == (
        "catenc: note: model.onnx:3:12 is a place in the composite file catenc imports the model as; "
        "`catenc import model.onnx` writes that file"
    )
    assert catenc(tmp_path, "compile", "model.onnx", "--runtime", "cuda", "--weights", "external", "-S").returncode == 0


def test_attention_heads_merged_by_a_reshape_keep_their_gemm(tmp_path):
    """The exporter's `(p @ v).transpose(1, 2).reshape(B, T, C)`: the product stays a packed gemm
    (its output written transposed); read through the reshape it was a division-indexed loop."""
    from catenc.driver import plan_file
    from catenc.plan import Options
    from tests.conftest import runtime

    text = """
[composite.heads]
inputs = ["p: f32[1, 4, 32, 32]", "v: f32[1, 4, 32, 16]", "w: f32[64, 64]"]
outputs = ["y: f32[1, 32, 64]"]
body = '''
o = p @ v
merged = reshape(transpose(o, [0, 2, 1, 3]), [1, 32, 64])
y = merged @ w
'''
"""
    (tmp_path / "heads.toml").write_text(text)
    entry = plan_file(str(tmp_path / "heads.toml"), Options(runtime())).entries[0]
    gemms = [note for note in entry.schedule.notes if "a packed gemm kernel" in note]
    assert len(gemms) == 2, entry.schedule.notes
    assert any("1*4 x [32 x 32] @ [32 x 16]" in note for note in gemms)
    library = compile_file(tmp_path / "heads.toml", tmp_path / "out")
    rng = np.random.default_rng(0)
    p, v, w = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 32, 32), (1, 4, 32, 16), (64, 64)))
    want = (p @ v).transpose(0, 2, 1, 3).reshape(1, 32, 64) @ w
    np.testing.assert_allclose(library.entries["heads"](p, v, w), want, rtol=1e-4, atol=1e-4)
