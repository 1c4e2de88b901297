"""The ONNX converters' typed expression builder (catenc/onnx/builder.py), the Emitter's index
names and statements, and the registry's normalisation of older opsets (registry.normalize)."""

from __future__ import annotations

import numpy as np
import pytest

from catenc.onnx import families  # noqa: F401  (registers every converter)
from catenc.onnx.builder import (
    ALL,
    ELLIPSIS,
    NEW_AXIS,
    BuildError,
    Group,
    Index,
    Lit,
    Ref,
    Scaled,
    Text,
    affine,
    call,
    cast,
    lit,
    matmul,
    num,
    poly,
    read,
    reduce,
    render,
    size,
    span,
    subscript,
    where,
)
from catenc.onnx.emitter import Emitter, Names
from catenc.onnx.errors import Unsupported
from catenc.onnx.registry import CONVERTERS, OnnxNode, normalize
from catenc.onnx.values import Value, dims, known_value
from catenc.symbolic import const, sym

X = Ref("x", "f32", dims((2, 3)))
Y = Ref("y", "f32", dims((3,)))
N = Ref("n", "i64", dims((2, 3)))


def test_rendering_is_exact() -> None:
    assert render((X - Y) * call("rsqrt", Y + 1e-05) * Y + Y) == "(x - y) * rsqrt(y + 1e-05) * y + y"
    assert render(0.5 * call("log", (1.0 + X) / (1.0 - X))) == "0.5 * log((1.0 + x) / (1.0 - x))"
    fix = where((N % 2).ne(0) & (N < 0).ne(lit(2, "i64") < 0), N // 2 + 1, N // 2)
    assert render(fix) == "where((n % 2 != 0) & ((n < 0) != (2 < 0)), n // 2 + 1, n // 2)"
    assert render(X - (Y - X)) == "x - (y - x)"  # an equal operator on the right keeps its parentheses
    assert render(Group(X + Y) / 2.0) == "(x + y) / 2.0"
    assert render(-num(-0.5)) == "--0.5"
    assert render(cast(call("isnan", X) | Lit("True", "bool"), "u8")) == "cast(isnan(x) | True, u8)"


def test_index_form_and_reductions_render_exactly() -> None:
    n, c, r = Index("n"), Index("c"), Index("r")
    size = Ref("w", "f32", dims((4, 3)))
    body = reduce("sum", [(r, 3)], where(2 * n + r - 1 >= 0, X[n, c], 0.0) * size[c, r])
    assert render(body) == "sum[r < 3](where(2 * n + r - 1 >= 0, x[n, c], 0.0) * w[c, r])"
    names = Names()
    emit = Emitter(names)
    emit.outputs = ("y",)
    value = emit.out_index([n, c], reduce("sum", [(r, 3)], X[n, r] * size[c, r]), "f32", dims((2, sym("K") + 1)))
    assert emit.lines == ["y[n < 2, c < (K + 1)] = sum[r < 3](x[n, r] * w[c, r])"]
    assert value.shape == dims((2, sym("K") + 1))


def test_malformed_expressions_raise_in_the_converter() -> None:
    with pytest.raises(BuildError, match="takes 3..3 arguments"):
        call("where", X, Y)
    with pytest.raises(BuildError, match="of f32 and i64 operands"):
        X + N
    with pytest.raises(BuildError, match="condition is f32"):
        where(X, X, Y)
    with pytest.raises(BuildError, match="no function"):
        call("frobnicate", X)
    with pytest.raises(BuildError, match="needs its dtype and shape"):
        call("reshape", X, Y)
    emit = Emitter(Names())
    emit.outputs = ("y",)
    with pytest.raises(BuildError, match="index j is used outside"):
        emit.out_index([Index("i")], X[Index("i"), Index("j")], "f32", dims((2,)))
    with pytest.raises(BuildError, match="index i is used outside"):
        emit.out(X[Index("i"), 0], "f32", ())
    assert emit.lines == []  # nothing half-written


def test_index_names_clash_with_no_tensor_and_are_one_scheme() -> None:
    names = Names()
    names.fresh("i0")
    emit = Emitter(names)
    first = emit.index_names()
    assert [i.name for i in first.numbered(2)] == ["i0_", "i1"]
    assert first("n").name == "n" and first("n").name == "n_"  # one statement: distinct
    assert emit.index_names()("n").name == "n"  # another statement may reuse its indices
    assert names.fresh("i1") == "i1_2"  # an index name is reserved from tensors


def _node(op: str, opset: int, inputs: tuple, **attrs) -> OnnxNode:
    return OnnxNode(op, op, opset, inputs, ("out",), attrs)


def test_older_opsets_are_normalized_to_the_newest_form() -> None:
    x = Value("f32", dims((2, 3)), "x")
    clip = normalize(_node("Clip", 6, (x,), min=-1.0, max=2.5))
    assert clip.opset == 11 and clip.attrs == {}
    assert [v.known.item() for v in clip.inputs[1:]] == [-1.0, 2.5] and clip.inputs[1].dtype == "f32"
    reduce_node = normalize(_node("ReduceMean", 13, (x,), axes=[1], keepdims=0))
    assert reduce_node.inputs[1].known.tolist() == [1] and reduce_node.attrs == {"keepdims": 0}
    assert normalize(_node("ReduceSum", 13, (x, None))).inputs == (x, None)  # already its newest form
    split = normalize(_node("Split", 11, (x,), split=[]))
    assert split.inputs == (x,)  # an empty `split` is none
    scales = known_value(np.array([1.0, 2.0], np.float32), "f32")
    upsample = normalize(_node("Upsample", 9, (x, scales), mode="nearest"))
    assert upsample.op == "Resize" and upsample.inputs == (x, None, scales)
    assert upsample.attrs["coordinate_transformation_mode"] == "asymmetric" and upsample.label(2) == "input 1"


def test_a_normalized_node_converts_as_its_newest_form() -> None:
    """Clip-6 with attributes writes what Clip-13 with inputs writes."""
    x = Value("f32", dims((2, 3)), "x")
    texts = []
    for node in (
        _node("Clip", 6, (x,), min=-1.0, max=2.5),
        _node("Clip", 13, (x, known_value(np.float32(-1.0), "f32"), known_value(np.float32(2.5), "f32"))),
    ):
        emit = Emitter(Names())
        emit.outputs = ("out",)
        CONVERTERS["Clip"](node, emit)
        texts.append(emit.lines)
    assert texts[0] == texts[1] == ["out = minimum(maximum(x, -1.0), 2.5)"]


def test_affine_subscripts_render_tight() -> None:
    oh, r, g = Index("oh"), Index("r"), Index("g")
    assert render(affine([(2, oh), (1, r)], -1)) == "2*oh + r - 1"
    assert render(affine([(1, oh), (-2, r)], 1)) == "oh - 2*r + 1"
    assert render(affine([(-2, oh)])) == "-2*oh" and render(affine([], -3)) == "-3"
    assert render(affine([(1, oh)], sym("H") + 2)) == "oh + (H + 2)"
    assert render(Group(affine([(1, oh), (-1, r)])) // 2 >= 0) == "(oh - r) // 2 >= 0"
    assert render(Scaled(g, 3, factor_last=True) + r) == "g*3 + r"


def _convert(node: OnnxNode) -> list[str]:
    emit = Emitter(Names())
    emit.outputs = node.outputs
    CONVERTERS[node.op](node, emit)
    return emit.lines


def test_softmax_before_opset_13_is_a_variant_of_its_own() -> None:
    """Softmax-11 coerces x to 2-D at axis 1; Softmax-13 works along axis 1 only."""
    x = Value("f32", dims((2, 3, 4)), "x")
    assert _convert(_node("Softmax", 11, (x,), axis=1)) == [
        "out = reshape(x, [2, 12])",
        "out_2d = softmax(out)",
        "out_2 = reshape(out_2d, [2, 3, 4])",
    ]
    assert _convert(_node("Softmax", 13, (x,), axis=1)) == [
        "out_max = max(x, axis=1, keepdims=True)",
        "out_exp = exp(x - out_max)",
        "out = out_exp / sum(out_exp, axis=1, keepdims=True)",
    ]


def test_batch_norm_is_test_is_normalized() -> None:
    """BatchNormalization-6 with is_test=1 writes what BatchNormalization-7 writes; is_test=0
    (the batch's statistics) has no newer form and is refused by the registry."""
    x = Value("f32", dims((2, 3)), "x")
    params = tuple(Value("f32", dims((3,)), name) for name in ("s", "b", "m", "v"))
    assert _convert(_node("BatchNormalization", 6, (x, *params), is_test=1)) == _convert(
        _node("BatchNormalization", 7, (x, *params))
    )
    with pytest.raises(Unsupported, match="is_test=0 .BatchNormalization before opset 7"):
        _convert(_node("BatchNormalization", 6, (x, *params)))


def test_top_k_before_opset_10_takes_k_as_an_input() -> None:
    x = Value("f32", dims((2, 5)), "x")
    old = normalize(_node("TopK", 1, (x,), k=2))
    assert old.opset == 10 and old.attrs == {} and old.inputs[1].known.tolist() == 2 and old.label(1) == "attribute k"
    k = known_value(np.array([2], np.int64), "i64")
    assert _convert(_node("TopK", 1, (x,), k=2)) == _convert(_node("TopK", 11, (x, k)))


def test_subscripts_render_as_numpy_writes_them() -> None:
    """Slices, markers and index arrays; trailing `:` items are left out, and nothing left is x itself."""
    assert render(subscript(X, [span(1, -1), span(None, None, -2)], dims((0, 2)))) == "x[1:-1, ::-2]"
    assert render(subscript(X, [span(None, size(sym("H") + 1)), ALL], dims((2, 3)))) == "x[:(H + 1)]"
    assert subscript(X, [ALL, span()], X.shape) is X
    positions = call("arange", 4, dtype="i64", shape=dims((4,)))
    assert render(read(positions, [ALL, NEW_AXIS], dims((4, 1)))) == "arange(4)[:, None]"
    assert render(read(X, [ELLIPSIS, span(0, 3, 2)], dims((2, 2)))) == "x[..., 0:3:2]"
    with pytest.raises(BuildError, match="a slice bound of type f64"):
        span(0.5)
    with pytest.raises(BuildError, match="needs its result's shape"):
        read(X, [ALL, 0])


def test_polynomial_positions_render_as_sizes_and_are_scope_checked() -> None:
    """An index polynomial writes what symbolic.Expr writes, and its indices are in scope or refused."""
    u, v = Index("u"), Index("v")
    assert render(poly([(u, 4), (v, 1)])) == "(4*u + v)"
    assert render(poly([(u, -1)], sym("W") * 2 - 2, bare=True)) == "2*W - u - 2"
    assert render(poly([], const(3), bare=True)) == "3"
    emit = Emitter(Names())
    emit.outputs = ("y",)
    emit.out_index([u], X[0, poly([(u, 1)], -1, bare=True)], "f32", dims((3,)))
    assert emit.lines == ["y[u < 3] = x[0, u - 1]"]
    with pytest.raises(BuildError, match="index v is used outside"):
        emit.out_index([u], where(poly([(u, 2), (v, 1)]) < 3, X[0, u], 0.0), "f32", dims((3,)))


def test_matmul_renders_with_the_precedence_of_a_product() -> None:
    a = Ref("a", "f32", dims((2, 3)))
    b = Ref("b", "f32", dims((3, 4)))
    assert render(matmul(a, b, dims((2, 4))) + 1.0) == "a @ b + 1.0"
    assert render(matmul(Group(a - 1.0), b, dims((2, 4))) * 2.0) == "(a - 1.0) @ b * 2.0"
    with pytest.raises(BuildError, match="@ of f32 and i64 operands"):
        matmul(a, N, dims((2, 3)))


def test_eye_like_takes_its_index_names_from_the_emitter() -> None:
    """EyeLike wrote fixed indices `i` and `j`, which clashed with a tensor of the body named i."""
    names = Names()
    names.fresh("i")
    emit = Emitter(names)
    emit.outputs = ("out",)
    x = Value("f32", (sym("N"), sym("M")), "x")
    CONVERTERS["EyeLike"](_node("EyeLike", 9, (x,), k=1), emit)
    assert emit.lines == ["out[i_ < N, j < M] = cast(j - i_ == 1, f32)"]


def test_string_arguments_are_quoted_and_are_no_operands() -> None:
    """einsum's equation is a Text argument; a quote in one, or a Text as an operand, is refused."""
    a = Ref("a", "f32", dims((2, 3)))
    b = Ref("b", "f32", dims((3, 4)))
    product = call("einsum", Text("ij,jk->ik"), a, b, dtype="f32", shape=dims((2, 4)))
    assert render(product) == 'einsum("ij,jk->ik", a, b)'
    assert render(call("transpose", a, dtype="f32", shape=dims((3, 2)))) == "transpose(a)"
    with pytest.raises(BuildError, match="quote or backslash"):
        Text('ij"')
    with pytest.raises(BuildError, match="a str is not an operand of \\+"):
        Text("ij") + a
