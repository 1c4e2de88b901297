"""Elementwise operators: arithmetic, math functions, activations, comparisons, logic, Cast, Where.

Each maps onto a built-in function or operator of the body language with numpy broadcasting
(ONNX's multidirectional broadcasting is numpy's). Nodes whose inputs are all known fold here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from catenc.dtypes import DTYPES
from catenc.onnx import builder as B
from catenc.onnx.builder import Group, Lit, Node, call, cast, lit, num, where
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.folding import compact, computable
from catenc.onnx.model import type_name
from catenc.onnx.registry import OnnxNode, converter, known_ints, need_float
from catenc.onnx.values import FLOATS, NUMPY, ONNX_DTYPES, Value, broadcast, known_value


def result_shape(node: OnnxNode, values: list[Value]):
    shape = values[0].shape
    for v in values[1:]:
        shape = broadcast(shape, v.shape)
        if shape is None:
            got = " and ".join(f"[{', '.join(map(str, v.shape))}]" for v in values)
            raise ModelError(f"input shapes {got} do not broadcast")
    return shape


def fold(node: OnnxNode, values: list[Value], fn: Callable, dtype: str) -> Value | None:
    """fn over the known inputs, when all are known and the result may be computed at import
    (folding.computable): on the data of broadcast inputs, so that a fill stays a broadcast."""
    if not all(v.is_known for v in values):
        return None
    arrays = [v.known for v in values]
    if any(a.dtype == object for a in arrays) and not getattr(fn, "symbolic", False):
        return None
    size = np.broadcast_shapes(*(a.shape for a in arrays))
    if not computable(size):
        return None
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*(compact(a) for a in arrays)))
    return known_value(np.broadcast_to(result, size) if result.shape != size else result, dtype)


def symbolic(fn: Callable) -> Callable:
    """Mark a folding function as safe on arrays of symbolic sizes (integer arithmetic on shapes)."""
    fn.symbolic = True
    return fn


def _int_div(a, b):
    if a.dtype == object or b.dtype == object:
        return a // b  # sizes: non-negative, where floor and truncation agree
    with np.errstate(all="ignore"):
        q = np.trunc(np.true_divide(a, np.where(b == 0, 1, b)))
    return np.where(b == 0, 0, q).astype(a.dtype)


# ONNX op -> (the body expression of x; numpy folding function)
_UNARY: dict[str, tuple[Callable[[Node], Node], Callable | None]] = {
    "Abs": (lambda x: call("abs", x), np.abs),
    "Neg": (lambda x: -x, symbolic(np.negative)),
    "Exp": (lambda x: call("exp", x), np.exp),
    "Log": (lambda x: call("log", x), np.log),
    "Sqrt": (lambda x: call("sqrt", x), np.sqrt),
    "Reciprocal": (lambda x: call("reciprocal", x), np.reciprocal),
    "Sin": (lambda x: call("sin", x), np.sin),
    "Cos": (lambda x: call("cos", x), np.cos),
    "Tan": (lambda x: call("tan", x), np.tan),
    "Tanh": (lambda x: call("tanh", x), np.tanh),
    "Sinh": (lambda x: call("sinh", x), np.sinh),
    "Cosh": (lambda x: call("cosh", x), np.cosh),
    "Asin": (lambda x: call("asin", x), np.arcsin),
    "Acos": (lambda x: call("acos", x), np.arccos),
    "Atan": (lambda x: call("atan", x), np.arctan),
    "Asinh": (lambda x: call("log", x + call("sqrt", x * x + 1.0)), np.arcsinh),
    "Acosh": (lambda x: call("log", x + call("sqrt", x * x - 1.0)), np.arccosh),
    "Atanh": (lambda x: 0.5 * call("log", (1.0 + x) / (1.0 - x)), np.arctanh),
    "Erf": (lambda x: call("erf", x), None),
    "Floor": (lambda x: call("floor", x), np.floor),
    "Ceil": (lambda x: call("ceil", x), np.ceil),
    "Round": (lambda x: call("round", x), np.round),
    "Sign": (lambda x: call("sign", x), np.sign),
    "Relu": (lambda x: call("relu", x), lambda x: np.maximum(x, 0)),
    "Sigmoid": (lambda x: call("sigmoid", x), None),
    "Softplus": (lambda x: call("softplus", x), None),
    "Softsign": (lambda x: x / (1.0 + call("abs", x)), None),
    "Mish": (lambda x: x * call("tanh", call("softplus", x)), None),
    "IsNaN": (lambda x: call("isnan", x), np.isnan),
    "Not": (lambda x: ~x, np.logical_not),
    "BitwiseNot": (lambda x: ~x, np.invert),
}
_FLOAT_ONLY = frozenset(_UNARY) - {"Abs", "Neg", "Sign", "Relu", "Not", "BitwiseNot"}


@converter(*_UNARY)
def unary(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    build, fn = _UNARY[node.op]
    if node.op in _FLOAT_ONLY and node.op != "IsNaN":
        need_float(node, x)
    dtype = "bool" if node.op == "IsNaN" else x.dtype
    if fn is not None and (folded := fold(node, [x], fn, dtype)):
        return [folded]
    return [emit.out(build(emit.ref(x)), dtype, x.shape)]


@converter("Identity")
def identity(node: OnnxNode, emit: Emitter) -> list[Value]:
    return [node.need(0)]


# ONNX op -> (body operator, numpy folding function)
_BINARY = {
    "Add": ("+", symbolic(np.add)),
    "Sub": ("-", symbolic(np.subtract)),
    "Mul": ("*", symbolic(np.multiply)),
    "Equal": ("==", symbolic(np.equal)),
    "Less": ("<", np.less),
    "LessOrEqual": ("<=", np.less_equal),
    "Greater": (">", np.greater),
    "GreaterOrEqual": (">=", np.greater_equal),
    "And": ("&", np.logical_and),
    "Or": ("|", np.logical_or),
    "Xor": ("^", np.logical_xor),
    "BitwiseAnd": ("&", np.bitwise_and),
    "BitwiseOr": ("|", np.bitwise_or),
    "BitwiseXor": ("^", np.bitwise_xor),
}
_COMPARISONS = frozenset(("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"))


@converter(*_BINARY)
def binary(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b = node.need(0), node.need(1)
    op, fn = _BINARY[node.op]
    dtype = "bool" if node.op in _COMPARISONS else a.dtype
    shape = result_shape(node, [a, b])
    if folded := fold(node, [a, b], fn, dtype):
        return [folded]
    return [emit.out(B.binary(op, emit.ref(a), emit.ref(b)), dtype, shape)]


@converter("Div")
def div(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    if a.is_float:
        if folded := fold(node, [a, b], np.true_divide, a.dtype):
            return [folded]
        return [emit.out(emit.ref(a) / emit.ref(b), a.dtype, shape)]
    if folded := fold(node, [a, b], symbolic(_int_div), a.dtype):
        return [folded]
    # integer division truncates toward zero in ONNX; the body's // floors (docs/language.md)
    ta, tb = emit.ref(a), emit.ref(b)
    q = ta // tb
    if a.dtype.startswith("u"):
        return [emit.out(q, a.dtype, shape)]
    fix = where((ta % tb).ne(0) & (ta < 0).ne(tb < 0), q + 1, q)
    return [emit.out(fix, a.dtype, shape)]


@converter("Mod")
def mod(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    ta, tb = emit.ref(a), emit.ref(b)
    if node.attr("fmod", 0):  # the sign of the dividend, as C's fmod
        if a.is_float:
            return [emit.out(ta - tb * call("trunc", ta / tb), a.dtype, shape)]
        r = ta % tb
        return [emit.out(where(r.ne(0) & (ta < 0).ne(tb < 0), r - tb, r), a.dtype, shape)]
    if folded := fold(node, [a, b], symbolic(lambda x, y: x % y), a.dtype):
        return [folded]
    return [emit.out(ta % tb, a.dtype, shape)]


@converter("BitShift")
def bit_shift(node: OnnxNode, emit: Emitter) -> list[Value]:
    """x << y as x * 2**y in the unsigned type of x's width (wrapping), x >> y as x // 2**y
    (floor: an arithmetic shift); a shift below 0 or not below the width gives 0, or -1 for a
    negative x shifted right, as ONNX's node tests define."""
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    dtype = a.dtype
    if dtype not in NUMPY or dtype in FLOATS or dtype == "bool":
        raise ModelError(f"BitShift takes integers, not {dtype}")
    direction = node.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ModelError(f"direction '{direction}' (LEFT or RIGHT)")
    x, y = emit.ref(a), emit.ref(b)
    bits = DTYPES[dtype].bits
    valid = (y >= 0) & (y < bits)
    unsigned = "u" + str(bits)

    def power(of: str) -> Node:
        return cast(call("exp2", cast(where(valid, y, 0), "f64")), of)

    if direction == "LEFT":
        shifted = cast(cast(x, unsigned) * power(unsigned), dtype)
        return [emit.out(where(valid, shifted, 0), dtype, shape)]
    if dtype.startswith("u"):
        return [emit.out(where(valid, x // power(dtype), 0), dtype, shape)]
    shifted = cast(cast(x, "i64") // power("i64"), dtype)
    return [emit.out(where(valid, shifted, where(x < 0, -1, 0)), dtype, shape)]


@converter("Pow")
def power(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    if folded := fold(node, [a, b], np.power, a.dtype):
        return [folded]
    base = emit.ref(a)
    if b.is_known and b.known.ndim == 0 and b.known.dtype != object and float(b.known) == 2.0:
        return [emit.out(base * base, a.dtype, shape)]
    exponent = emit.ref(b)
    if b.dtype != a.dtype and not (b.is_known and b.known.ndim == 0):
        exponent = cast(exponent, a.dtype)
    return [emit.out(call("pow", base, exponent), a.dtype, shape)]


@converter("Max", "Min", "Sum", "Mean")
def variadic(node: OnnxNode, emit: Emitter) -> list[Value]:
    values = [v for v in node.inputs if v is not None]
    if not values:
        raise ModelError("needs at least one input")
    shape = result_shape(node, values)
    dtype = values[0].dtype
    if len(values) == 1 and node.op != "Mean":
        return values
    if node.op != "Mean" and all(v.is_known and v.known.dtype != object for v in values):
        combine = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}[node.op]
        folded = values[0]
        for v in values[1:]:
            folded = fold(node, [folded, v], combine, dtype)
            if folded is None:
                break
        if folded is not None:
            return [folded]
    first, *rest = (emit.ref(v) for v in values)
    expr = first
    pick = {"Max": "maximum", "Min": "minimum"}.get(node.op)
    for term in rest:
        expr = call(pick, expr, term) if pick else expr + term
    if node.op == "Mean":
        expr = Group(expr) / float(len(values))
    return [emit.out(expr, dtype, shape)]


# ONNX op -> (its attributes' defaults, the body expression of x and the attributes)
_ACTIVATIONS: dict[str, tuple[dict[str, object], Callable[[Node, dict], Node]]] = {
    "LeakyRelu": ({"alpha": 0.01}, lambda x, a: where(x >= 0.0, x, a["alpha"] * x)),
    "Elu": ({"alpha": 1.0}, lambda x, a: where(x > 0.0, x, a["alpha"] * call("expm1", x))),
    "Selu": (
        {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
        lambda x, a: a["gamma"] * where(x > 0.0, x, a["alpha"] * call("expm1", x)),
    ),
    "Celu": (
        {"alpha": 1.0},
        lambda x, a: call("maximum", x, 0.0) + call("minimum", 0.0, a["alpha"] * call("expm1", x / a["alpha"])),
    ),
    "ThresholdedRelu": ({"alpha": 1.0}, lambda x, a: where(x > a["alpha"], x, 0.0)),
    "HardSigmoid": ({"alpha": 0.2, "beta": 0.5}, lambda x, a: call("clip", a["alpha"] * x + a["beta"], 0.0, 1.0)),
    "HardSwish": ({}, lambda x, a: x * call("clip", x / 6.0 + 0.5, 0.0, 1.0)),
    "Shrink": (
        {"bias": 0.0, "lambd": 0.5},
        lambda x, a: where(x < -num(a["lambd"]), x + a["bias"], where(x > a["lambd"], x - a["bias"], 0.0)),
    ),
    "Gelu": ({"approximate": "none"}, lambda x, a: call(_GELU[a["approximate"]], x)),
}
_GELU = {"none": "gelu", "tanh": "gelu_tanh"}
# The operators that read each input element by element (a broadcast input stays one: folding.place).
ELEMENTWISE_OPS = frozenset((*_UNARY, *_BINARY, *_ACTIVATIONS))
ELEMENTWISE_OPS |= {"Div", "Mod", "BitShift", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Clip", "IsInf"}
ELEMENTWISE_OPS |= {"Where", "Cast", "CastLike", "Swish"}


@converter(*_ACTIVATIONS)
def activation(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    need_float(node, x)
    defaults, build = _ACTIVATIONS[node.op]
    attrs = {name: node.attr(name, default) for name, default in defaults.items()}
    if attrs.get("approximate", "none") not in _GELU:
        raise Unsupported(f"approximate='{attrs['approximate']}'")
    return [emit.out(build(emit.ref(x), attrs), x.dtype, x.shape)]


@converter("PRelu")
def prelu(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, slope = node.need(0), node.need(1)
    shape = result_shape(node, [x, slope])
    t = emit.ref(x)
    return [emit.out(where(t < 0.0, emit.ref(slope) * t, t), x.dtype, shape)]


@converter("Clip")
def clip(node: OnnxNode, emit: Emitter) -> list[Value]:
    """min and max are inputs (registry.py turns opset 6's attributes into them)."""
    x = node.need(0)
    low, high = node.input(1), node.input(2)
    if low is None and high is None:
        return [x]
    expr = emit.ref(x)
    if low is not None:
        expr = call("maximum", expr, emit.ref(low))
    if high is not None:
        expr = call("minimum", expr, emit.ref(high))
    return [emit.out(expr, x.dtype, x.shape)]


@converter("IsInf")
def isinf(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    t = emit.ref(x)
    negative, positive = node.attr("detect_negative", 1), node.attr("detect_positive", 1)
    tests = {(1, 1): call("isinf", t), (1, 0): t.eq(Lit("-inf", x.dtype)), (0, 1): t.eq(Lit("inf", x.dtype))}
    expr = tests.get((negative, positive), call("isinf", t) & Lit("False", "bool"))
    return [emit.out(expr, "bool", x.shape)]


@converter("Where")
def where_op(node: OnnxNode, emit: Emitter) -> list[Value]:
    c, a, b = node.need(0), node.need(1), node.need(2)
    shape = result_shape(node, [c, a, b])
    if folded := fold(node, [c, a, b], symbolic(np.where), a.dtype):
        return [folded]
    ta, tb = emit.ref(a), emit.ref(b)
    if a.name is None and b.name is None and a.rank == 0 and b.rank == 0:
        ta = cast(ta, a.dtype)
    return [emit.out(where(emit.ref(c), ta, tb), a.dtype, shape)]


def cast_to(node: OnnxNode, x: Value, dtype: str, emit: Emitter) -> Value:
    if dtype == x.dtype:
        return x
    if x.is_known:
        if x.known.dtype == object:
            if dtype in ("i64", "i32"):
                return Value(dtype, x.shape, known=x.known)
        elif dtype != "bf16":
            with np.errstate(all="ignore"):
                return known_value(x.known.astype(NUMPY[dtype]), dtype)
    return emit.out(cast(emit.ref(x), dtype), dtype, x.shape)


@converter("Cast")
def cast_op(node: OnnxNode, emit: Emitter) -> list[Value]:
    to = node.attr("to")
    dtype = ONNX_DTYPES.get(to)
    if dtype is None:
        raise Unsupported(f"to={type_name(to)}: catenc has no such element type")
    return [cast_to(node, node.need(0), dtype, emit)]


@converter("CastLike")
def cast_like(node: OnnxNode, emit: Emitter) -> list[Value]:
    return [cast_to(node, node.need(0), node.need(1).dtype, emit)]


@converter("Dropout")
def dropout(node: OnnxNode, emit: Emitter) -> list[Value]:
    """Inference: the input unchanged, and a mask of all True where one is asked for (the ratio
    and training_mode are inputs: registry.py turns older opsets' attributes into them)."""
    x = node.need(0)
    training, ratio = node.input(2), node.input(1)
    trains = training is not None and any(known_ints(training, "the training_mode (input 2)"))
    if trains and (ratio is None or float(known_ints(ratio, "the ratio (input 1)")[0]) != 0.0):  # 0 keeps all
        raise Unsupported("training_mode (random dropout) is not supported; export the model in eval mode")
    if len(node.outputs) > 1 and node.outputs[1]:
        return [x, emit.out(call("isnan", emit.ref(x)) | Lit("True", "bool"), "bool", x.shape, k=1)]
    return [x]


@converter("Swish")
def swish(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    t = emit.ref(x)
    alpha = float(node.attr("alpha", 1.0))
    expr = call("silu", t) if alpha == 1.0 else t * call("sigmoid", lit(alpha, x.dtype) * t)
    return [emit.out(expr, x.dtype, x.shape)]
