"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax, ArgMin.

The axes are an optional input (before opset 18, 13 for ReduceSum, an attribute, which registry.py
makes the input); no axes reduce every axis unless `noop_with_empty_axes` makes the node an identity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from catenc.onnx.builder import Lit, Node, call, cast, num, seq, shape_list, size, where
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.folding import computable
from catenc.onnx.registry import OnnxNode, axis_of, converter, known_ints, need_float
from catenc.onnx.values import Shape, Value, known_value
from catenc.symbolic import const

# ONNX op -> (the body's reduction, the term reduced, the final function of the result; None: itself)
_REDUCTIONS: dict[str, tuple[str, Callable[[Node], Node] | None, Callable[[Node], Node] | None]] = {
    "ReduceSum": ("sum", None, None),
    "ReduceMean": ("mean", None, None),
    "ReduceMax": ("max", None, None),
    "ReduceMin": ("min", None, None),
    "ReduceProd": ("prod", None, None),
    "ReduceL1": ("sum", lambda x: call("abs", x), None),
    "ReduceL2": ("sum", lambda x: x * x, lambda r: call("sqrt", r)),
    "ReduceSumSquare": ("sum", lambda x: x * x, None),
    "ReduceLogSum": ("sum", None, lambda r: call("log", r)),
}
_NUMPY = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def reduce_axes(node: OnnxNode, x: Value) -> list[int] | None:
    """The axes reduced (input 1: registry.py makes older opsets' attribute one), sorted; None when
    the node is an identity (empty axes, noop_with_empty_axes)."""
    given = node.input(1)
    axes = None if given is None else [int(a) for a in known_ints(given, "the axes (input 1)")]
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        return list(range(x.rank))
    return sorted({axis_of(a, x.rank) for a in axes})


def reduced_shape(x: Value, axes: list[int], keepdims: bool) -> Shape:
    return tuple(const(1) if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)


def reduction(op: str, x: Node, axes: Sequence[int] | int, keepdims: bool, shape: Shape, dtype: str = "") -> Node:
    """`op(x, axis=..., keepdims=True)`: an array-form reduction (or argmax/argmin) with its result's shape."""
    axis = seq(axes, tuple_form=True) if not isinstance(axes, int) else num(axes)
    flags = {"keepdims": Lit("True", "bool")} if keepdims else {}
    return call(op, x, dtype=dtype or x.dtype, shape=shape, axis=axis, **flags)


@converter(*_REDUCTIONS, "ReduceLogSumExp")
def reduce(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    axes = reduce_axes(node, x)
    if axes is None or x.rank == 0:
        return [x]
    keepdims = bool(node.attr("keepdims", 1))
    shape = reduced_shape(x, axes, keepdims)
    if x.dtype == "bool":
        if node.op not in ("ReduceMax", "ReduceMin"):
            raise Unsupported(f"input of type bool: {node.op}")
        op = node.op[-3:].lower()
        return [emit.out(cast(reduction(op, cast(emit.ref(x), "u8"), axes, keepdims, shape), "bool"), "bool", shape)]
    if node.op == "ReduceLogSumExp":
        need_float(node, x)
        xt = emit.ref(x)
        kept = reduced_shape(x, axes, True)
        m = emit.ref(emit.intermediate(reduction("max", xt, axes, True, kept), "max"))
        # an all -inf slice (or an empty one) has max -inf: shift by 0 there, so the result is log(0) = -inf
        shift = emit.ref(emit.intermediate(where(call("isinf", m), 0.0, m), "shift"))
        total = call("log", reduction("sum", call("exp", xt - shift), axes, keepdims, shape))
        tail = shift if keepdims else call("reshape", shift, shape_list(shape), dtype=x.dtype, shape=shape)
        return [emit.out(total + tail, x.dtype, shape)]
    op, term, final = _REDUCTIONS[node.op]
    if x.is_known and x.known.dtype != object and computable(x.known.shape) and term is final is None:
        with np.errstate(all="ignore"):
            folded = _NUMPY[op](x.known, axis=tuple(axes), keepdims=keepdims)
        return [known_value(np.asarray(folded), x.dtype)]
    xt = emit.ref(x)
    term, final = term or (lambda v: v), final or (lambda v: v)
    if not x.is_float and (op == "mean" or _REDUCTIONS[node.op][2] is not None):
        # ONNX computes in the input's type; numpy's mean of integers, truncated, is the reference
        wide = cast(xt, "f64")
        return [emit.out(cast(final(reduction(op, term(wide), axes, keepdims, shape)), x.dtype), x.dtype, shape)]
    return [emit.out(final(reduction(op, term(xt), axes, keepdims, shape)), x.dtype, shape)]


@converter("ArgMax", "ArgMin")
def arg_extreme(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.rank == 0:
        raise ModelError("the input is a scalar")
    axis = axis_of(node.attr("axis", 0), x.rank)
    keepdims = bool(node.attr("keepdims", 1))
    shape = reduced_shape(x, [axis], keepdims)
    fn = "argmax" if node.op == "ArgMax" else "argmin"
    xt = emit.ref(x)
    if x.dtype == "bool":
        xt = cast(xt, "u8")
    if not node.attr("select_last_index", 0):
        return [emit.out(reduction(fn, xt, axis, keepdims, shape, "i64"), "i64", shape)]
    # the last extreme is the first one of the reversed axis
    names = emit.index_names().numbered(x.rank)
    last = size(x.shape[axis]) - 1
    at = [last - i if d == axis else i for d, i in enumerate(names)]
    rev = emit.ref(emit.index_temp(names, xt[tuple(at)], xt.dtype, x.shape, "reversed"))
    return [emit.out(last - reduction(fn, rev, axis, keepdims, shape, "i64"), "i64", shape)]
