"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax, ArgMin.

The axes are an attribute before opset 18 (13 for ReduceSum) and an optional input from then on;
no axes reduce every axis unless `noop_with_empty_axes` makes the node an identity.
"""

from __future__ import annotations

import numpy as np

from catenc.onnx.elementwise import FOLD_LIMIT
from catenc.onnx.nn import Indices
from catenc.onnx.registry import ModelError, OnnxNode, Unsupported, axis_of, converter, need_float
from catenc.onnx.shape import axes_input
from catenc.onnx.values import Value, known_value
from catenc.symbolic import const

# ONNX op -> (the body's reduction, the term reduced over {0}, the final function of the result {0})
_REDUCTIONS = {
    "ReduceSum": ("sum", "{0}", "{0}"),
    "ReduceMean": ("mean", "{0}", "{0}"),
    "ReduceMax": ("max", "{0}", "{0}"),
    "ReduceMin": ("min", "{0}", "{0}"),
    "ReduceProd": ("prod", "{0}", "{0}"),
    "ReduceL1": ("sum", "abs({0})", "{0}"),
    "ReduceL2": ("sum", "{0} * {0}", "sqrt({0})"),
    "ReduceSumSquare": ("sum", "{0} * {0}", "{0}"),
    "ReduceLogSum": ("sum", "{0}", "log({0})"),
}
_NUMPY = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def reduce_axes(node: OnnxNode, x: Value) -> list[int] | None:
    """The axes reduced, sorted; None when the node is an identity (empty axes, noop_with_empty_axes)."""
    axes = axes_input(node, 13 if node.op == "ReduceSum" else 18)
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        return list(range(x.rank))
    return sorted({axis_of(a, x.rank) for a in axes})


def reduced_shape(x: Value, axes: list[int], keepdims: bool):
    return tuple(const(1) if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)


@converter(*_REDUCTIONS, "ReduceLogSumExp")
def reduce(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    axes = reduce_axes(node, x)
    if axes is None or x.rank == 0:
        return [x]
    keepdims = bool(node.attr("keepdims", 1))
    shape = reduced_shape(x, axes, keepdims)
    args = f"axis={tuple(axes)}" + (", keepdims=True" if keepdims else "")
    if x.dtype == "bool":
        if node.op not in ("ReduceMax", "ReduceMin"):
            raise Unsupported(f"input of type bool: {node.op}")
        op = node.op[-3:].lower()
        return [emit.out(f"cast({op}(cast({emit.text(x)}, u8), {args}), bool)", "bool", shape)]
    if node.op == "ReduceLogSumExp":
        need_float(node, x)
        xt = emit.text(x)
        m = emit.temp(f"max({xt}, axis={tuple(axes)}, keepdims=True)", x.dtype, reduced_shape(x, axes, True), "max")
        # an all -inf slice (or an empty one) has max -inf: shift by 0 there, so the result is log(0) = -inf
        shift = emit.temp(f"where(isinf({m.name}), 0.0, {m.name})", x.dtype, m.shape, "shift")
        total = f"log(sum(exp({xt} - {shift.name}), {args}))"
        tail = shift.name if keepdims else f"reshape({shift.name}, [{', '.join(str(d) for d in shape)}])"
        return [emit.out(f"{total} + {tail}", x.dtype, shape)]
    op, term, final = _REDUCTIONS[node.op]
    if x.is_known and x.known.dtype != object and x.known.size <= FOLD_LIMIT and term == final == "{0}":
        with np.errstate(all="ignore"):
            folded = _NUMPY[op](x.known, axis=tuple(axes), keepdims=keepdims)
        return [known_value(np.asarray(folded), x.dtype)]
    xt = emit.text(x)
    if not x.is_float and (op == "mean" or final != "{0}"):
        # ONNX computes in the input's type; numpy's mean of integers, truncated, is the reference
        expr = final.format(f"{op}({term.format(f'cast({xt}, f64)')}, {args})")
        return [emit.out(f"cast({expr}, {x.dtype})", x.dtype, shape)]
    return [emit.out(final.format(f"{op}({term.format(xt)}, {args})"), x.dtype, shape)]


@converter("ArgMax", "ArgMin")
def arg_extreme(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    if x.rank == 0:
        raise ModelError("the input is a scalar")
    axis = axis_of(node.attr("axis", 0), x.rank)
    keepdims = bool(node.attr("keepdims", 1))
    shape = reduced_shape(x, [axis], keepdims)
    fn = "argmax" if node.op == "ArgMax" else "argmin"
    args = f"axis={axis}" + (", keepdims=True" if keepdims else "")
    xt = emit.text(x)
    if x.dtype == "bool":
        xt = f"cast({xt}, u8)"
    if not node.attr("select_last_index", 0):
        return [emit.out(f"{fn}({xt}, {args})", "i64", shape)]
    # the last extreme is the first one of the reversed axis
    ix = Indices(emit)
    names = [ix(f"i{d}") for d in range(x.rank)]
    size = x.shape[axis]
    read = list(names)
    read[axis] = f"{size} - 1 - {names[axis]}" if size.is_const or size.as_symbol() else f"({size}) - 1 - {names[axis]}"
    lhs = ", ".join(f"{i} < {d}" if d.is_const or d.as_symbol() else f"{i} < ({d})" for i, d in zip(names, x.shape))
    rev = emit.temp("", x.dtype if x.dtype != "bool" else "u8", x.shape, "reversed")
    emit.lines[-1] = f"{rev.name}[{lhs}] = {xt}[{', '.join(read)}]"
    last = f"{size} - 1" if size.is_const or size.as_symbol() else f"({size}) - 1"
    return [emit.out(f"{last} - {fn}({rev.name}, {args})", "i64", shape)]
