"""Quantisation operators: QuantizeLinear, DequantizeLinear (per tensor, per axis, per block),
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv, with the integer
types catenc has (int8, uint8, int16, uint16; float8 and 4-bit types are not among them).

Per-tensor quantisation of f32 calls the op library's `quantize_linear` / `dequantize_linear`
(ops/quantization.toml); the other forms are written out with the same arithmetic: x / scale
rounded half to even, the zero point added, saturated to the integer type by `cast`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from catenc.onnx import builder as B
from catenc.onnx import nn
from catenc.onnx.builder import ALL, NEW_AXIS, Group, Node, call, cast, matmul, read
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.indexing import small
from catenc.onnx.linalg import matmul_shape
from catenc.onnx.model import type_name
from catenc.onnx.registry import OnnxNode, axis_of, converter
from catenc.onnx.rewrite import REQUANTIZE_F32
from catenc.onnx.values import NUMPY, ONNX_DTYPES, Value, known_value
from catenc.symbolic import const

_INTEGERS = ("i8", "u8", "i16", "u16")  # the types ops/quantization.toml's composites take too


def _scalar(value: Value) -> bool:
    return value.rank == 0 or (value.rank == 1 and value.shape[0].is_const and value.shape[0].value == 1)


def _scalar_param(value: Value, emit: Emitter) -> Node:
    """A per-tensor scale or zero point (rank 0 or one element) as a rank-0 expression."""
    if value.is_known and value.known.dtype != object:
        literal = B.lit(value.known.reshape(-1)[0], value.dtype)
        # a literal alone is f32 or i64 (docs/language.md, section 5): other types are cast
        return literal if value.dtype in ("f32", "i64") else cast(literal, value.dtype)
    ref = emit.ref(value)
    return ref if value.rank == 0 else ref[0]


def _along(value: Value, axis: int, rank: int, emit: Emitter) -> Node:
    """A vector laid along `axis` of a rank-`rank` tensor (`v[:, None, None]`)."""
    trailing = rank - 1 - axis
    ref = emit.ref(value)
    if not trailing:
        return ref
    return read(ref, [ALL] + [NEW_AXIS] * trailing, value.shape + (const(1),) * trailing)


def _layout(node: OnnxNode, param: Value, x: Value) -> tuple[int, int] | None:
    """How a scale or zero point spreads over x: None per tensor, else (axis, block size or 0)."""
    if _scalar(param):
        return None
    axis = axis_of(node.attr("axis", 1), x.rank)
    block = node.attr("block_size", 0)
    if block:
        if param.rank != x.rank or block < 1:
            raise ModelError(f"a blocked {param.rank}-D scale or zero point for a {x.rank}-D input")
    elif param.rank != 1 or x.rank == 0 or param.shape[0] != x.shape[axis]:
        raise ModelError(f"a per-axis scale or zero point of shape {list(param.shape)} for axis {axis}")
    return axis, block


def broadcast_param(node: OnnxNode, param: Value, x: Value, emit: Emitter) -> Node:
    """A scale or zero point as an expression that broadcasts against x: per tensor, per axis, per block."""
    layout = _layout(node, param, x)
    if layout is None:
        return _scalar_param(param, emit)
    axis, block = layout
    if block:
        ref = emit.ref(param)
        idx = emit.index_names().numbered(x.rank)
        blocks = ref[tuple(i // block if k == axis else i for k, i in enumerate(idx))]
        return emit.ref(emit.index_temp(idx, blocks, param.dtype, x.shape, "blocks"))
    return _along(param, axis, x.rank, emit)


def _param_array(node: OnnxNode, param: Value, x: Value) -> np.ndarray:
    """A known scale or zero point laid out to broadcast against the known x (as broadcast_param)."""
    layout = _layout(node, param, x)
    if layout is None:
        return param.known.reshape(-1)[0]
    axis, block = layout
    if block:
        return np.repeat(param.known, block, axis=axis).take(range(x.known.shape[axis]), axis=axis)
    return param.known.reshape([-1 if k == axis else 1 for k in range(x.rank)])


def _quantized_type(node: OnnxNode, zero_point: Value | None) -> str:
    if zero_point is not None:
        dtype = zero_point.dtype
    else:
        to = node.attr("output_dtype", 0)
        dtype = ONNX_DTYPES.get(to, type_name(to)) if to else "u8"
    if dtype not in _INTEGERS:
        raise Unsupported(f"quantisation to {dtype} (catenc quantises to int8, uint8, int16 and uint16)")
    return dtype


@converter("QuantizeLinear")
def quantize_linear(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, scale, zero_point = node.need(0), node.need(1), node.input(2)
    q = _quantized_type(node, zero_point)
    if not x.is_float or not scale.is_float:
        raise ModelError(f"x of type {x.dtype} and scale of type {scale.dtype}")
    if node.attr("precision"):
        raise Unsupported("the precision attribute")
    per_tensor = _scalar(scale) and (zero_point is None or _scalar(zero_point))
    zp = cast(0, q) if zero_point is None else broadcast_param(node, zero_point, x, emit)
    s = broadcast_param(node, scale, x, emit)
    if per_tensor and x.dtype == "f32" and scale.dtype == "f32":
        return [emit.out(call("quantize_linear", emit.ref(x), s, zp, dtype=q, shape=x.shape), q, x.shape)]
    ratio = emit.ref(x) / s
    if x.dtype != "f32":  # numpy rounds the quotient to x's type before rounding it to an integer
        ratio = emit.ref(emit.temp(ratio, x.dtype, x.shape, "ratio"))
    return [emit.out(cast(call("round", cast(ratio, "f32")) + cast(zp, "f32"), q), q, x.shape)]


@converter("DequantizeLinear")
def dequantize_linear(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, scale, zero_point = node.need(0), node.need(1), node.input(2)
    if x.dtype not in (*_INTEGERS, "i32"):
        raise Unsupported(f"dequantisation of {x.dtype}")
    if not scale.is_float:
        raise ModelError(f"a scale of type {scale.dtype}")
    to = node.attr("output_dtype", 0)
    out = ONNX_DTYPES.get(to) if to else scale.dtype
    if out is None:
        raise Unsupported(f"output_dtype={to}")
    params = [scale] if zero_point is None else [scale, zero_point]
    if small(x) and out != "bf16" and all(v.is_known and v.known.dtype != object for v in [x, *params]):
        # a quantised weight (QDQ models): dequantised at import, as the reference computes it, in f32
        shifted = x.known.astype(np.float32)
        if zero_point is not None:
            shifted = shifted - _param_array(node, zero_point, x).astype(np.float32)
        return [known_value((shifted * _param_array(node, scale, x).astype(np.float32)).astype(NUMPY[out]), out)]
    per_tensor = _scalar(scale) and (zero_point is None or _scalar(zero_point))
    s = broadcast_param(node, scale, x, emit)
    zp = None if zero_point is None else broadcast_param(node, zero_point, x, emit)
    if per_tensor and out == "f32" and scale.dtype == "f32":
        point = zp if zp is not None else cast(0, x.dtype)
        return [emit.out(call("dequantize_linear", emit.ref(x), s, point, dtype=out, shape=x.shape), out, x.shape)]
    shifted = cast(emit.ref(x), "f32")
    if zp is not None:
        shifted = shifted - cast(zp, "f32")
    scaled = Group(shifted) * (s if scale.dtype == "f32" else cast(s, "f32"))
    return [emit.out(scaled if out == "f32" else cast(scaled, out), out, x.shape)]


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.dtype != "f32":
        raise ModelError(f"x of type {x.dtype}")
    t = emit.ref(x)
    high = emit.ref(emit.temp(call("maximum", call("max", t, dtype="f32", shape=()), 0.0), "f32", (), "max"))
    low = emit.ref(emit.temp(call("minimum", call("min", t, dtype="f32", shape=()), 0.0), "f32", (), "min"))
    span = B.where(high.eq(low), 1.0, high - low)
    scale = emit.out(span / 255.0, "f32", (), 1)
    s = emit.ref(scale)
    zp = emit.ref(emit.temp(call("round", call("clip", 0.0 - low / s, 0.0, 255.0)), "f32", (), "zp"))
    y = emit.out(cast(call("round", t / s) + zp, "u8"), "u8", x.shape, 0)
    return [y, scale, emit.out(cast(zp, "u8"), "u8", (), 2)]


def _zero_point_rows(zero_point: Value, rows: bool, emit: Emitter) -> Node:
    """A zero point of a matrix product's operand: per tensor, per row of a, or per column of b."""
    if _scalar(zero_point):
        return _scalar_param(zero_point, emit)
    if zero_point.rank != 1:
        raise Unsupported(f"a zero point of rank {zero_point.rank}")
    return _along(zero_point, 0, 2 if rows else 1, emit)


def _centred(operand: Value, zero_point: Value | None, rows: bool, emit: Emitter) -> Node:
    wide = cast(emit.ref(operand), "i32")
    if zero_point is None:
        return wide
    return Group(wide - cast(_zero_point_rows(zero_point, rows, emit), "i32"))


def _product(a: Value, a_zero: Value | None, b: Value, b_zero: Value | None, shape, emit: Emitter) -> Node:
    """(a - a_zero) @ (b - b_zero) in i32."""
    return matmul(_centred(a, a_zero, True, emit), _centred(b, b_zero, False, emit), shape)


@converter("MatMulInteger")
def matmul_integer(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b, a_zero, b_zero = node.need(0), node.need(1), node.input(2), node.input(3)
    shape = matmul_shape(a.shape, b.shape)
    if a.dtype not in ("i8", "u8") or b.dtype not in ("i8", "u8"):
        raise ModelError(f"operands of types {a.dtype} and {b.dtype}")
    if _raw_operands(a, a_zero, b, b_zero, runtime_zero=True) and b.rank == 2:  # an int8 gemm
        return [emit.out(_raw_product(node, a, a_zero, b, shape, emit), "i32", shape)]
    library = a.rank == b.rank == 2 and a.dtype == b.dtype and a_zero is not None and b_zero is not None
    if library and _scalar(a_zero) and _scalar(b_zero):
        args = (emit.ref(a), emit.ref(b), _scalar_param(a_zero, emit), _scalar_param(b_zero, emit))
        return [emit.out(call("matmul_integer", *args, dtype="i32", shape=shape), "i32", shape)]
    return [emit.out(_product(a, a_zero, b, b_zero, shape, emit), "i32", shape)]


# ---- products of raw 8-bit values: u8 activations times a known int8 weight, summed in i32 ----


def _known_zero(zero_point: Value | None) -> int | None:
    """A per-tensor zero point known at import as an int (0 when absent), else None."""
    if zero_point is None:
        return 0
    if not (zero_point.is_known and zero_point.known.dtype != object and _scalar(zero_point)):
        return None
    return int(zero_point.known.reshape(-1)[0])


def _raw_operands(x: Value, x_zero: Value | None, w: Value, w_zero: Value | None, runtime_zero: bool = False) -> bool:
    """Whether x (u8, a zero point known per tensor; `runtime_zero`: or one computed when the model
    runs, DynamicQuantizeLinear's) and w (a known int8 weight whose zero points are all zero) can be
    multiplied as their raw 8-bit values, the zero point corrected after."""
    weight_centred = w_zero is None or (w_zero.is_known and w_zero.known.dtype != object and not w_zero.known.any())
    known = w.is_known and w.known.dtype != object
    zero = _known_zero(x_zero) is not None or (runtime_zero and _scalar(x_zero))
    return x.dtype == "u8" and w.dtype == "i8" and known and zero and weight_centred


def _correction(node: OnnxNode, values: np.ndarray, emit: Emitter, dtype: str = "i32") -> Value:
    """The constant vector added to a raw product (`<output>_correction`), computed at import."""
    correction = known_value(values.astype(NUMPY[dtype]), dtype)
    emit.hint(correction, f"{node.outputs[0]}_correction")
    return correction


def _raw_product(node: OnnxNode, a: Value, a_zero: Value | None, b: Value, shape, emit: Emitter) -> Node:
    """(a - a_zero) @ b as `cast(a, i32) @ cast(b, i32) + correction[n]`, correction = -a_zero * colsum(b)
    computed at import; a zero point known only when the model runs is multiplied by colsum(b) then."""
    product = matmul(cast(emit.ref(a), "i32"), cast(emit.ref(b), "i32"), shape)
    zero, sums = _known_zero(a_zero), b.known.astype(np.int64).sum(axis=0)
    if zero == 0:
        return product
    if zero is not None:
        return product + emit.ref(_correction(node, -zero * sums, emit))
    return product - cast(_scalar_param(a_zero, emit), "i32") * emit.ref(_correction(node, sums, emit))


def _column_scale(b_scale: Value, b: Value, emit: Emitter) -> Node:
    """b's scale: one per tensor, or one per column of b (along its last axis)."""
    if _scalar(b_scale):
        return _scalar_param(b_scale, emit)
    if b_scale.rank != 1 or b_scale.shape[0] != b.shape[-1]:
        raise ModelError(f"a scale of shape {list(b_scale.shape)} for b of shape {list(b.shape)}")
    return emit.ref(b_scale)


@converter("QLinearMatMul")
def qlinear_matmul(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, a_scale, a_zero = node.need(0), node.need(1), node.input(2)
    b, b_scale, b_zero = node.need(3), node.need(4), node.input(5)
    y_scale, y_zero = node.need(6), node.input(7)
    shape = matmul_shape(a.shape, b.shape)
    q = a.dtype if y_zero is None else y_zero.dtype
    if q not in ("i8", "u8"):
        raise ModelError(f"an output of type {q}")
    if not (_scalar(a_scale) and _scalar(y_scale)):
        raise Unsupported("per-row scales of a or y")
    if _raw_operands(a, a_zero, b, b_zero) and b.rank == 2:
        sums = _raw_product(node, a, a_zero, b, shape, emit)
    else:
        sums = _product(a, a_zero, b, b_zero, shape, emit)
    acc = emit.ref(emit.temp(sums, "i32", shape, "acc"))
    # the reference multiplies in the scales' type, then the i32 products by that factor in f64
    ft = a_scale.dtype
    scales = _scalar_param(a_scale, emit) * _column_scale(b_scale, b, emit)
    product = emit.ref(emit.temp(scales, ft, scales.shape, "scales"))
    factor = emit.ref(emit.temp(product / _scalar_param(y_scale, emit), ft, scales.shape, "factor"))
    return [emit.out(_requantized(acc, factor, y_zero, q, emit, bool(node.attr(REQUANTIZE_F32))), q, shape)]


def _requantized(acc: Node, factor: Node, y_zero: Value | None, q: str, emit: Emitter, f32: bool = False) -> Node:
    """`cast(round(acc * factor + y_zero), q)`, computed in f64; `f32`: `cast(round(acc * factor) +
    y_zero, q)` in f32 (a fused QDQ group, rewrite.py REQUANTIZE_F32)."""
    if f32:
        rounded = call("round", cast(acc, "f32") * cast(factor, "f32"))
        return cast(rounded if y_zero is None else rounded + cast(_scalar_param(y_zero, emit), "f32"), q)
    expr = (acc if acc.dtype == "f64" else cast(acc, "f64")) * cast(factor, "f64")
    if y_zero is not None:
        expr = expr + cast(_scalar_param(y_zero, emit), "f64")
    return cast(call("round", expr), q)


# ---- integer convolutions: nn.py's convolution of the raw 8-bit values in i32 where the operands
# allow it (see _raw_operands), else of the shifted integers, exact in f64 ----


def _per_channel(value: Value, rank: int, emit: Emitter, axis: int = 0) -> Node:
    """A per-tensor or per-output-channel parameter broadcast along `axis` of a rank-`rank` tensor."""
    if _scalar(value):
        return _scalar_param(value, emit)
    if value.rank != 1:
        raise ModelError(f"a parameter of rank {value.rank} (a scalar or one value per output channel)")
    return _along(value, axis, rank, emit)


def _shifted(operand: Value, zero_point: Value | None, emit: Emitter, hint: str) -> Value:
    """operand - zero_point as f64 (exact for 8-bit integers)."""
    expr = cast(emit.ref(operand), "f64")
    if zero_point is not None:
        expr = expr - cast(_per_channel(zero_point, operand.rank, emit), "f64")
    return emit.temp(expr, "f64", operand.shape, hint)


def _accumulator(node: OnnxNode, emit: Emitter, build: Callable[[], Value]) -> Value:
    """The convolution `build` writes, named as an intermediate of the node (`<output>_acc`)."""
    outputs = emit.outputs
    emit.outputs = (f"{node.outputs[0]}_acc",)
    try:
        return build()
    finally:
        emit.outputs = outputs


F32_EXACT = 1 << 24  # every integer of smaller magnitude is an f32, and so is every partial sum below it


def _raw_conv(node: OnnxNode, x: Value, x_zero: Value | None, w: Value, bias: Value | None, emit: Emitter) -> Value:
    """sum(cast(x padded with x_zero, i32) * cast(w, i32)) + correction[k], correction = bias -
    x_zero * sum of w[k]: the convolution of (x - x_zero) and w plus the bias, in i32. A depthwise
    one sums in f32 where every partial sum is an integer below 2^24 (`_exact_in_f32`): the same
    integers, from f32 multiply-adds instead of i32 multiplies."""
    zero = _known_zero(x_zero)
    weights = w.known.astype(np.int64).reshape(w.known.shape[0], -1)
    values = -zero * weights.sum(axis=1) + (0 if bias is None else bias.known.astype(np.int64))
    exact = nn.is_depthwise(node, x, w) and _exact_in_f32(weights, values)
    accumulator = "f32" if exact else "i32"
    correction = _correction(node, values, emit, accumulator) if zero or bias is not None else None
    pad = cast(0, "u8") if x_zero is None else _scalar_param(x_zero, emit)
    return _accumulator(node, emit, lambda: nn.convolution(node, x, w, correction, emit, pad, accumulator))


def _exact_in_f32(weights: np.ndarray, correction: np.ndarray) -> bool:
    """Whether every partial sum of a u8 input times each row of int8 `weights`, plus that row's
    correction, stays below 2^24 in magnitude: then f32 computes each one exactly, in any order."""
    bound = np.iinfo(np.uint8).max * np.abs(weights).sum(axis=1) + np.abs(correction)
    return bool((bound < F32_EXACT).all())


def _integer_conv(
    node: OnnxNode, x: Value, w: Value, zps: tuple[Value | None, Value | None], bias: Value | None, emit: Emitter
) -> Value:
    """The convolution of (x - x_zero_point) and (w - w_zero_point) plus the bias: of the raw 8-bit
    values in i32 where they allow it, else with nn.py's convolution in f64 (exact)."""
    if x.dtype not in ("i8", "u8") or w.dtype not in ("i8", "u8"):
        raise ModelError(f"inputs of types {x.dtype} and {w.dtype}")
    if _raw_operands(x, zps[0], w, zps[1]) and (bias is None or bias.is_known):
        return _raw_conv(node, x, zps[0], w, bias, emit)
    xs, ws = _shifted(x, zps[0], emit, "x"), _shifted(w, zps[1], emit, "w")
    if bias is not None:
        bias = emit.temp(cast(emit.ref(bias), "f64"), "f64", bias.shape, "bias")
    return _accumulator(node, emit, lambda: nn.convolution(node, xs, ws, bias, emit))


@converter("ConvInteger")
def conv_integer(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, w = node.need(0), node.need(1)
    acc = _integer_conv(node, x, w, (node.input(2), node.input(3)), None, emit)
    return [emit.out(emit.ref(acc) if acc.dtype == "i32" else cast(emit.ref(acc), "i32"), "i32", acc.shape)]


@converter("QLinearConv")
def qlinear_conv(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, x_scale, x_zero = node.need(0), node.need(1), node.input(2)
    w, w_scale, w_zero = node.need(3), node.need(4), node.input(5)
    y_scale, y_zero, bias = node.need(6), node.input(7), node.input(8)
    q = x.dtype if y_zero is None else y_zero.dtype
    acc = _integer_conv(node, x, w, (x_zero, w_zero), bias, emit)
    # the reference multiplies the scales in their type, then the i32 sums by that factor in f64
    scales = _scalar_param(x_scale, emit) * _per_channel(w_scale, acc.rank, emit, 1)
    factor_shape = () if _scalar(w_scale) else (w_scale.shape[0],) + (const(1),) * (acc.rank - 2)
    factor = emit.ref(emit.temp(scales / _scalar_param(y_scale, emit), x_scale.dtype, factor_shape, "factor"))
    requantized = _requantized(emit.ref(acc), factor, y_zero, q, emit, bool(node.attr(REQUANTIZE_F32)))
    return [emit.out(requantized, q, acc.shape)]
