"""Elementwise operators: arithmetic, math functions, activations, comparisons, logic, Cast, Where.

Each maps onto a built-in function or operator of the body language with numpy broadcasting
(ONNX's multidirectional broadcasting is numpy's). Nodes whose inputs are all known fold here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from catenc.dtypes import DTYPES
from catenc.onnx.model import type_name
from catenc.onnx.registry import ModelError, OnnxNode, Unsupported, converter, known_ints, need_float
from catenc.onnx.values import FLOATS, NUMPY, ONNX_DTYPES, Value, broadcast, known_value
from catenc.onnx.values import literal as lit

FOLD_LIMIT = 1 << 20  # elements: larger results are computed by the library, not at import


def result_shape(node: OnnxNode, values: list[Value]):
    shape = values[0].shape
    for v in values[1:]:
        shape = broadcast(shape, v.shape)
        if shape is None:
            got = " and ".join(f"[{', '.join(map(str, v.shape))}]" for v in values)
            raise ModelError(f"input shapes {got} do not broadcast")
    return shape


def fold(node: OnnxNode, values: list[Value], fn: Callable, dtype: str) -> Value | None:
    """fn over the known inputs, when all are known and the result is small."""
    if not all(v.is_known for v in values):
        return None
    arrays = [v.known for v in values]
    if any(a.dtype == object for a in arrays) and not getattr(fn, "symbolic", False):
        return None
    size = np.broadcast_shapes(*(a.shape for a in arrays))
    if int(np.prod(size)) > FOLD_LIMIT:
        return None
    with np.errstate(all="ignore"):
        return known_value(np.asarray(fn(*arrays)), dtype)


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


# ONNX op -> (body template over {0}, {1}, ...; numpy folding function)
_UNARY = {
    "Abs": ("abs({0})", np.abs),
    "Neg": ("-{0}", symbolic(np.negative)),
    "Exp": ("exp({0})", np.exp),
    "Log": ("log({0})", np.log),
    "Sqrt": ("sqrt({0})", np.sqrt),
    "Reciprocal": ("reciprocal({0})", np.reciprocal),
    "Sin": ("sin({0})", np.sin),
    "Cos": ("cos({0})", np.cos),
    "Tan": ("tan({0})", np.tan),
    "Tanh": ("tanh({0})", np.tanh),
    "Sinh": ("sinh({0})", np.sinh),
    "Cosh": ("cosh({0})", np.cosh),
    "Asin": ("asin({0})", np.arcsin),
    "Acos": ("acos({0})", np.arccos),
    "Atan": ("atan({0})", np.arctan),
    "Asinh": ("log({0} + sqrt({0} * {0} + 1.0))", np.arcsinh),
    "Acosh": ("log({0} + sqrt({0} * {0} - 1.0))", np.arccosh),
    "Atanh": ("0.5 * log((1.0 + {0}) / (1.0 - {0}))", np.arctanh),
    "Erf": ("erf({0})", None),
    "Floor": ("floor({0})", np.floor),
    "Ceil": ("ceil({0})", np.ceil),
    "Round": ("round({0})", np.round),
    "Sign": ("sign({0})", np.sign),
    "Relu": ("relu({0})", lambda x: np.maximum(x, 0)),
    "Sigmoid": ("sigmoid({0})", None),
    "Softplus": ("softplus({0})", None),
    "Softsign": ("{0} / (1.0 + abs({0}))", None),
    "Mish": ("{0} * tanh(softplus({0}))", None),
    "IsNaN": ("isnan({0})", np.isnan),
    "Not": ("~{0}", np.logical_not),
    "BitwiseNot": ("~{0}", np.invert),
}
_FLOAT_ONLY = frozenset(_UNARY) - {"Abs", "Neg", "Sign", "Relu", "Not", "BitwiseNot"}


@converter(*_UNARY)
def unary(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    template, fn = _UNARY[node.op]
    if node.op in _FLOAT_ONLY and node.op != "IsNaN":
        need_float(node, x)
    dtype = "bool" if node.op == "IsNaN" else x.dtype
    if fn is not None and (folded := fold(node, [x], fn, dtype)):
        return [folded]
    return [emit.out(template.format(emit.text(x)), dtype, x.shape)]


@converter("Identity")
def identity(node: OnnxNode, emit) -> list[Value]:
    return [node.need(0)]


# ONNX op -> (body operator or function, numpy folding function)
_BINARY = {
    "Add": ("{0} + {1}", symbolic(np.add)),
    "Sub": ("{0} - {1}", symbolic(np.subtract)),
    "Mul": ("{0} * {1}", symbolic(np.multiply)),
    "Equal": ("{0} == {1}", symbolic(np.equal)),
    "Less": ("{0} < {1}", np.less),
    "LessOrEqual": ("{0} <= {1}", np.less_equal),
    "Greater": ("{0} > {1}", np.greater),
    "GreaterOrEqual": ("{0} >= {1}", np.greater_equal),
    "And": ("{0} & {1}", np.logical_and),
    "Or": ("{0} | {1}", np.logical_or),
    "Xor": ("{0} ^ {1}", np.logical_xor),
    "BitwiseAnd": ("{0} & {1}", np.bitwise_and),
    "BitwiseOr": ("{0} | {1}", np.bitwise_or),
    "BitwiseXor": ("{0} ^ {1}", np.bitwise_xor),
}
_COMPARISONS = frozenset(("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"))


@converter(*_BINARY)
def binary(node: OnnxNode, emit) -> list[Value]:
    a, b = node.need(0), node.need(1)
    template, fn = _BINARY[node.op]
    dtype = "bool" if node.op in _COMPARISONS else a.dtype
    shape = result_shape(node, [a, b])
    if folded := fold(node, [a, b], fn, dtype):
        return [folded]
    return [emit.out(template.format(emit.text(a), emit.text(b)), dtype, shape)]


@converter("Div")
def div(node: OnnxNode, emit) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    if a.is_float:
        if folded := fold(node, [a, b], np.true_divide, a.dtype):
            return [folded]
        return [emit.out(f"{emit.text(a)} / {emit.text(b)}", a.dtype, shape)]
    if folded := fold(node, [a, b], symbolic(_int_div), a.dtype):
        return [folded]
    # integer division truncates toward zero in ONNX; the body's // floors (docs/language.md)
    ta, tb = emit.text(a), emit.text(b)
    q = f"{ta} // {tb}"
    if a.dtype.startswith("u"):
        return [emit.out(q, a.dtype, shape)]
    fix = f"where(({ta} % {tb} != 0) & (({ta} < 0) != ({tb} < 0)), {q} + 1, {q})"
    return [emit.out(fix, a.dtype, shape)]


@converter("Mod")
def mod(node: OnnxNode, emit) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    ta, tb = emit.text(a), emit.text(b)
    if node.attr("fmod", 0):  # the sign of the dividend, as C's fmod
        if a.is_float:
            return [emit.out(f"{ta} - {tb} * trunc({ta} / {tb})", a.dtype, shape)]
        r = f"{ta} % {tb}"
        return [emit.out(f"where(({r} != 0) & (({ta} < 0) != ({tb} < 0)), {r} - {tb}, {r})", a.dtype, shape)]
    if folded := fold(node, [a, b], symbolic(lambda x, y: x % y), a.dtype):
        return [folded]
    return [emit.out(f"{ta} % {tb}", a.dtype, shape)]


@converter("BitShift")
def bit_shift(node: OnnxNode, emit) -> list[Value]:
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
    x, y = emit.text(a), emit.text(b)
    bits = DTYPES[dtype].bits
    valid = f"({y} >= 0) & ({y} < {bits})"
    unsigned = "u" + str(bits)

    def power(of: str) -> str:
        return f"cast(exp2(cast(where({valid}, {y}, 0), f64)), {of})"

    if direction == "LEFT":
        shifted = f"cast(cast({x}, {unsigned}) * {power(unsigned)}, {dtype})"
        return [emit.out(f"where({valid}, {shifted}, 0)", dtype, shape)]
    if dtype.startswith("u"):
        return [emit.out(f"where({valid}, {x} // {power(dtype)}, 0)", dtype, shape)]
    shifted = f"cast(cast({x}, i64) // {power('i64')}, {dtype})"
    return [emit.out(f"where({valid}, {shifted}, where({x} < 0, -1, 0))", dtype, shape)]


@converter("Pow")
def power(node: OnnxNode, emit) -> list[Value]:
    a, b = node.need(0), node.need(1)
    shape = result_shape(node, [a, b])
    if folded := fold(node, [a, b], np.power, a.dtype):
        return [folded]
    if b.is_known and b.known.ndim == 0 and b.known.dtype != object and float(b.known) == 2.0:
        return [emit.out(f"{emit.text(a)} * {emit.text(a)}", a.dtype, shape)]
    exponent = emit.text(b)
    if b.dtype != a.dtype and not (b.is_known and b.known.ndim == 0):
        exponent = f"cast({exponent}, {a.dtype})"
    return [emit.out(f"pow({emit.text(a)}, {exponent})", a.dtype, shape)]


@converter("Max", "Min", "Sum", "Mean")
def variadic(node: OnnxNode, emit) -> list[Value]:
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
    texts = [emit.text(v) for v in values]
    if node.op in ("Max", "Min"):
        fn = "maximum" if node.op == "Max" else "minimum"
        expr = texts[0]
        for t in texts[1:]:
            expr = f"{fn}({expr}, {t})"
    else:
        expr = " + ".join(texts)
        if node.op == "Mean":
            expr = f"({expr}) / {float(len(texts))!r}"
    return [emit.out(expr, dtype, shape)]


@converter("LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Shrink", "Gelu")
def activation(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    need_float(node, x)
    t = emit.text(x)
    a = node.attr
    if node.op == "LeakyRelu":
        expr = f"where({t} >= 0.0, {t}, {a('alpha', 0.01)!r} * {t})"
    elif node.op == "Elu":
        expr = f"where({t} > 0.0, {t}, {a('alpha', 1.0)!r} * expm1({t}))"
    elif node.op == "Selu":
        alpha, gamma = a("alpha", 1.67326319217681884765625), a("gamma", 1.05070102214813232421875)
        expr = f"{gamma!r} * where({t} > 0.0, {t}, {alpha!r} * expm1({t}))"
    elif node.op == "Celu":
        alpha = a("alpha", 1.0)
        expr = f"maximum({t}, 0.0) + minimum(0.0, {alpha!r} * expm1({t} / {alpha!r}))"
    elif node.op == "ThresholdedRelu":
        expr = f"where({t} > {a('alpha', 1.0)!r}, {t}, 0.0)"
    elif node.op == "HardSigmoid":
        expr = f"clip({a('alpha', 0.2)!r} * {t} + {a('beta', 0.5)!r}, 0.0, 1.0)"
    elif node.op == "HardSwish":
        expr = f"{t} * clip({t} / 6.0 + 0.5, 0.0, 1.0)"
    elif node.op == "Shrink":
        bias, lambd = a("bias", 0.0), a("lambd", 0.5)
        expr = f"where({t} < -{lambd!r}, {t} + {bias!r}, where({t} > {lambd!r}, {t} - {bias!r}, 0.0))"
    else:
        approximate = a("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise Unsupported(f"approximate='{approximate}'")
        expr = f"gelu({t})" if approximate == "none" else f"gelu_tanh({t})"
    return [emit.out(expr, x.dtype, x.shape)]


@converter("PRelu")
def prelu(node: OnnxNode, emit) -> list[Value]:
    x, slope = node.need(0), node.need(1)
    shape = result_shape(node, [x, slope])
    t = emit.text(x)
    return [emit.out(f"where({t} < 0.0, {emit.text(slope)} * {t}, {t})", x.dtype, shape)]


@converter("Clip")
def clip(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    if node.opset < 11:
        low, high = node.attr("min"), node.attr("max")
        bounds = [None if b is None else lit(b, x.dtype) for b in (low, high)]
    else:
        bounds = [None if v is None else emit.text(v) for v in (node.input(1), node.input(2))]
    expr = emit.text(x)
    if bounds[0] is not None:
        expr = f"maximum({expr}, {bounds[0]})"
    if bounds[1] is not None:
        expr = f"minimum({expr}, {bounds[1]})"
    if bounds == [None, None]:
        return [x]
    return [emit.out(expr, x.dtype, x.shape)]


@converter("IsInf")
def isinf(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    t = emit.text(x)
    negative, positive = node.attr("detect_negative", 1), node.attr("detect_positive", 1)
    expr = {(1, 1): f"isinf({t})", (1, 0): f"{t} == -inf", (0, 1): f"{t} == inf"}.get((negative, positive))
    return [emit.out(expr or f"isinf({t}) & False", "bool", x.shape)]


@converter("Where")
def where(node: OnnxNode, emit) -> list[Value]:
    c, a, b = node.need(0), node.need(1), node.need(2)
    shape = result_shape(node, [c, a, b])
    if folded := fold(node, [c, a, b], symbolic(np.where), a.dtype):
        return [folded]
    ta, tb = emit.text(a), emit.text(b)
    if a.name is None and b.name is None and a.rank == 0 and b.rank == 0:
        ta = f"cast({ta}, {a.dtype})"
    return [emit.out(f"where({emit.text(c)}, {ta}, {tb})", a.dtype, shape)]


def cast_to(node: OnnxNode, x: Value, dtype: str, emit) -> Value:
    if dtype == x.dtype:
        return x
    if x.is_known:
        if x.known.dtype == object:
            if dtype in ("i64", "i32"):
                return Value(dtype, x.shape, known=x.known)
        elif dtype != "bf16":
            with np.errstate(all="ignore"):
                return known_value(x.known.astype(NUMPY[dtype]), dtype)
    return emit.out(f"cast({emit.text(x)}, {dtype})", dtype, x.shape)


@converter("Cast")
def cast(node: OnnxNode, emit) -> list[Value]:
    to = node.attr("to")
    dtype = ONNX_DTYPES.get(to)
    if dtype is None:
        raise Unsupported(f"to={type_name(to)}: catenc has no such element type")
    return [cast_to(node, node.need(0), dtype, emit)]


@converter("CastLike")
def cast_like(node: OnnxNode, emit) -> list[Value]:
    return [cast_to(node, node.need(0), node.need(1).dtype, emit)]


@converter("Dropout")
def dropout(node: OnnxNode, emit) -> list[Value]:
    """Inference: the input unchanged, and a mask of all True where one is asked for."""
    x = node.need(0)
    training, ratio = node.input(2), node.input(1)
    trains = training is not None and any(known_ints(training, "the training_mode (input 2)"))
    if trains and (ratio is None or float(known_ints(ratio, "the ratio (input 1)")[0]) != 0.0):  # 0 keeps all
        raise Unsupported("training_mode (random dropout) is not supported; export the model in eval mode")
    if len(node.outputs) > 1 and node.outputs[1]:
        return [x, emit.out(f"isnan({emit.text(x)}) | True", "bool", x.shape, k=1)]
    return [x]


@converter("Swish")
def swish(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    t = emit.text(x)
    alpha = float(node.attr("alpha", 1.0))
    expr = f"silu({t})" if alpha == 1.0 else f"{t} * sigmoid({lit(alpha, x.dtype)} * {t})"
    return [emit.out(expr, x.dtype, x.shape)]
