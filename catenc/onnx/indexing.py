"""Data-movement operators: Slice, Split, Tile, Pad, CenterCropPad, GatherElements, GatherND, the
scatters (ScatterElements, ScatterND, TensorScatter), ReverseSequence, Trilu, OneHot, CumSum, CumProd,
DepthToSpace/SpaceToDepth, EyeLike, and Compress/NonZero with known inputs.

Slices become numpy basic indexing (`x[1:-1, ::-2]`) with ONNX's clamped bounds worked out at
import (symbolically where a dimension is a symbol, as the body's slices compute them); gathers
become advanced indexing; scatters, padding other than constant and the cumulative sums are
written in index form over the output.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import numpy as np

from catenc.onnx import builder as B
from catenc.onnx.builder import (
    ALL,
    NEW_AXIS,
    Group,
    Index,
    Lit,
    Node,
    Size,
    call,
    cast,
    num,
    poly,
    read,
    reduce,
    seq,
    shape_list,
    span,
    subscript,
    where,
)
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.folding import SMALL, computable
from catenc.onnx.registry import OnnxNode, axis_of, converter, known_ints
from catenc.onnx.shape import reshaped
from catenc.onnx.values import NUMPY, ONNX_DTYPES, Shape, Value, dims, known_value, static
from catenc.symbolic import Expr, const, floordiv, maximum, minimum, product, prove_nonneg

# |bound| at or beyond this means "to the end" (ONNX models write INT64_MAX, INT32_MAX or their negatives)
_TO_END = (1 << 31) - 1


def small(x: Value) -> bool:
    """Whether a known value is small enough that its converter folds operations on it (larger
    ones the importer computes at import as a whole node: folding.place)."""
    return x.is_known and x.known.size <= SMALL


def _int(v) -> Expr:
    return v if isinstance(v, Expr) else const(int(v))


def axis_in(node: OnnxNode, x: Value, default: int) -> int:
    """The node's `axis` attribute as 0..rank-1 of x, which must have an axis."""
    if x.rank == 0:
        raise ModelError("the input is a scalar: it has no axis")
    return axis_of(node.attr("axis", default), x.rank)


def static_int(v, what: str) -> int:
    """An entry of a known integer input that must be a number, not a symbolic size."""
    if isinstance(v, Expr):
        if not v.is_const:
            raise Unsupported(f"{what} computed from symbolic sizes ({v})")
        return v.value
    return int(v)


# ---- Slice ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AxisSlice:
    """One axis of a slice: numpy's subscript, or the positions to `take`; its length; the Python slice."""

    item: B.Slice
    length: Expr
    piece: slice | None = None  # None when the axis is symbolic
    positions: Node | None = None  # `arange(seq)`: read by take (item is then `:`)


def slice_bounds(start, end, step: int, dim: Expr) -> AxisSlice:
    """One axis of an ONNX slice: numpy's subscript (`1:-1`, `::-2`) or, for an end computed from
    symbolic sizes that may pass the axis (`mask[:seq]` of a 64-row buffer), the positions to `take`
    (`arange(seq)`: the model holds only where seq <= 64, which take checks at run time); the length;
    and the Python slice (None when the axis is symbolic). Bounds are clamped as ONNX clamps them;
    |bound| >= 2**31 - 1 means "to the end" on a symbolic axis."""
    if step == 0:
        raise ModelError("a step of 0")
    stride = num(step) if step != 1 else None
    if dim.is_const and not isinstance(start, Expr) and not isinstance(end, Expr):
        n = dim.value
        s, e, _ = slice(int(start), int(end), step).indices(n)
        first = None if s == (0 if step > 0 else n - 1) else num(s)
        last = None if (e == n if step > 0 else e < 0) else num(e)
        piece = slice(s, None if e < 0 else e, step)
        return AxisSlice(span(first, last, stride), const(len(range(s, e, step))), piece)

    def bound(v, is_stop: bool) -> tuple[Node | None, Expr | None]:
        """The subscript item of a bound (None: omitted) and its position from the front (None: to the end)."""
        if isinstance(v, Expr):
            back = v - dim  # a size computed as `dim - 1` is written as numpy writes it: -1
            if back.is_const and back.value < 0:
                return num(back.value), v
            if back == const(0) and is_stop == (step > 0):
                return None, None
            return Size(v), v
        v = int(v)
        if abs(v) >= _TO_END:
            if (v > 0) != (step > 0):
                raise Unsupported("a slice bound beyond the wrong end of a symbolic axis")
            return None, None
        return (None if v == 0 and not is_stop and step > 0 else num(v)), (const(v) if v >= 0 else dim + v)

    (first, s), (last, e) = bound(start, False), bound(end, True)
    known_order = s is not None and prove_nonneg(s) and prove_nonneg(end - s) if isinstance(end, Expr) else False
    if step > 0 and known_order and not prove_nonneg(dim - end):
        count = floordiv(end - s + step - 1, step)
        positions: Node = call("arange", Size(count), dtype="i64", shape=(count,))
        positions = positions * step if step != 1 else positions
        positions = positions + Size(s) if s != const(0) else positions
        return AxisSlice(ALL, count, positions=positions)
    # numpy's clamping, as the body's slices compute it (catenc/frontend/indexing.py)
    if step > 0:
        s = const(0) if s is None else _at_least(s, const(0))
        e = dim if e is None else _at_most(_at_least(e, const(0)), dim)
        length = _at_least(floordiv(e - s + step - 1, step), const(0))
    else:
        s = dim - 1 if s is None else _at_most(s, dim - 1)
        e = const(-1) if e is None else _at_least(e, const(-1))
        length = _at_least(floordiv(s - e + (-step) - 1, -step), const(0))
    return AxisSlice(span(first, last, stride), length)


def _at_least(value: Expr, low: Expr) -> Expr:
    return value if prove_nonneg(value - low) else maximum(value, low)


def _at_most(value: Expr, high: Expr) -> Expr:
    return value if prove_nonneg(high - value) else minimum(value, high)


@converter("Slice")
def slice_op(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    starts = known_ints(node.need(1), "the starts (input 1)")
    ends = known_ints(node.need(2), "the ends (input 2)")
    axes = None if node.input(3) is None else known_ints(node.input(3), "the axes (input 3)")
    steps = None if node.input(4) is None else known_ints(node.input(4), "the steps (input 4)")
    if not axes and len(starts) > x.rank:
        raise ModelError(f"{len(starts)} starts for an input of rank {x.rank}")
    axes = list(range(len(starts))) if not axes else [axis_of(static_int(a, "an axis"), x.rank) for a in axes]
    steps = [1] * len(starts) if steps is None else [static_int(s, "a step") for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError("starts, ends, axes and steps differ in length")
    if len(set(axes)) != len(axes):
        raise ModelError(f"an axis is repeated in {axes}")
    axis_slices = {
        a: slice_bounds(start, end, step, x.shape[a])
        for a, start, end, step in zip(axes, starts, ends, steps, strict=True)
    }
    shape = tuple(axis_slices[a].length if a in axis_slices else d for a, d in enumerate(x.shape))
    items = [axis_slices[a].item if a in axis_slices else ALL for a in range(x.rank)]
    gathers = [(a, sl.positions) for a, sl in sorted(axis_slices.items()) if sl.positions is not None]
    if all(i.full for i in items) and not gathers:
        return [x]
    pieces = [axis_slices[a].piece if a in axis_slices else slice(None) for a in range(x.rank)]
    if small(x) and all(p is not None for p in pieces):
        return [known_value(x.known[tuple(pieces)], x.dtype)]
    xt = emit.ref(x)
    gathered = {a for a, _ in gathers}
    partial = tuple(x.shape[a] if a in gathered else d for a, d in enumerate(shape))
    expr = subscript(xt, items, partial)
    if gathers and expr is not xt:
        expr = emit.ref(emit.temp(expr, x.dtype, partial, "sliced"))
    taken = list(partial)
    for a, positions in gathers:
        taken[a] = shape[a]
        expr = call("take", expr, positions, num(a), dtype=x.dtype, shape=tuple(taken))
    return [emit.out(expr, x.dtype, shape)]


# ---- Split ---------------------------------------------------------------------------------------


@converter("Split")
def split(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    axis = axis_in(node, x, 0)
    dim = x.shape[axis]
    count = len(node.outputs)
    sizes = None if node.input(1) is None else known_ints(node.input(1), "the split (input 1)")
    if sizes is None:
        parts = node.attr("num_outputs", count)
        if parts < 1:
            raise ModelError(f"num_outputs={parts}")
        if dim.is_const:
            chunk = -(-dim.value // parts)
            sizes = [min(chunk, max(dim.value - k * chunk, 0)) for k in range(parts)]
        else:
            sizes = [floordiv(dim, parts)] * parts
    sizes = [_int(s) for s in sizes]
    if len(sizes) != count:
        raise ModelError(f"{len(sizes)} split sizes for {count} outputs")
    total = sum(sizes, const(0))
    if total != dim and (total.is_const and dim.is_const):
        raise ModelError(f"the split sizes add up to {total}, not the axis size {dim}")
    results, offset = [], const(0)
    for k, size in enumerate(sizes):
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1 :]
        if sizes == [dim]:
            results.append(x)
        elif small(x) and offset.is_const and size.is_const:
            piece = (slice(None),) * axis + (slice(offset.value, offset.value + size.value),)
            results.append(known_value(x.known[piece], x.dtype))
        else:
            first = None if offset == const(0) else Size(offset)
            last = None if offset + size == dim else Size(offset + size)
            items = [ALL] * axis + [span(first, last)]
            results.append(emit.out(subscript(emit.ref(x), items, shape), x.dtype, shape, k))
        offset = offset + size
    return results


# ---- Tile, Pad -----------------------------------------------------------------------------------


@converter("Tile")
def tile(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    repeats = [_int(r) for r in known_ints(node.need(1), "the repeats (input 1)")]
    if len(repeats) != x.rank or any(r.is_const and r.value < 0 for r in repeats):
        raise ModelError(f"repeats {[str(r) for r in repeats]} for an input of rank {x.rank}")
    shape = tuple(d * r for d, r in zip(x.shape, repeats, strict=True))
    if all(r == const(1) for r in repeats):
        return [x]
    fixed = static(shape)
    if x.is_known and fixed is not None and computable(fixed):
        return [known_value(np.tile(x.known, [r.value for r in repeats]), x.dtype)]
    xt = emit.ref(x)
    if all(d == const(1) for d, r in zip(x.shape, repeats, strict=True) if r != const(1)):
        # only size-1 axes repeat
        return [emit.out(call("expand", xt, shape_list(shape), dtype=x.dtype, shape=shape), x.dtype, shape)]
    idx = emit.index_names().numbered(x.rank)
    subs = [
        i if r == const(1) else 0 if d == const(1) else i % Size(d)
        for i, d, r in zip(idx, x.shape, repeats, strict=True)
    ]
    return [emit.out_index(idx, xt[tuple(subs)], x.dtype, shape)]


def _pad_amounts(node: OnnxNode, rank: int) -> list[tuple[int, int]]:
    """(before, after) per axis."""
    pads = known_ints(node.need(1), "the pads (input 1)")
    axes = list(range(rank))
    if node.input(3) is not None:  # the axes, an input from opset 18 on
        axes = [axis_of(static_int(a, "an axis"), rank) for a in known_ints(node.input(3), "the axes (input 3)")]
    if any(isinstance(p, Expr) for p in pads):
        raise Unsupported("pads computed from symbolic sizes")
    if len(pads) != 2 * len(axes):
        raise ModelError(f"{len(pads)} pads for {len(axes)} axes")
    amounts = [(0, 0)] * rank
    for k, a in enumerate(axes):
        amounts[a] = (int(pads[k]), int(pads[k + len(axes)]))
    return amounts


def _pad_source(mode: str, j: Index, lo: int, hi: int, n: Expr) -> tuple[Node | None, Node, Node | None]:
    """The source positions of output position j on a padded axis: (before the data, in it, after it)."""
    inside = poly([(j, 1)], -lo, bare=True)
    if mode == "reflect":
        before, after = poly([(j, -1)], lo, bare=True), poly([(j, -1)], n * 2 - 2 + lo, bare=True)
    elif mode == "edge":
        before, after = poly([], 0, bare=True), poly([], n - 1, bare=True)
    else:  # wrap
        before, after = poly([(j, 1)], n - lo, bare=True), poly([(j, 1)], -lo - n, bare=True)
    return (before if lo else None), inside, (after if hi else None)


@converter("Pad")
def pad(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ModelError(f"mode '{mode}'")
    amounts = _pad_amounts(node, x.rank)
    fill = node.input(2)
    value = 0 if fill is None or (fill.is_known and fill.known.size == 0) else fill
    if isinstance(value, Value) and value.is_known:
        value = value.known.reshape(-1)[0]
    # negative pads remove elements: a slice first
    crop = [(max(-lo, 0), max(-hi, 0)) for lo, hi in amounts]
    if any(c != (0, 0) for c in crop):
        items = [span(c0, Size(d - c1)) if (c0, c1) != (0, 0) else ALL for (c0, c1), d in zip(crop, x.shape)]
        shape = tuple(d - c0 - c1 for (c0, c1), d in zip(crop, x.shape, strict=True))
        x = emit.temp(subscript(emit.ref(x), items, shape), x.dtype, shape, "crop")
    amounts = [(max(lo, 0), max(hi, 0)) for lo, hi in amounts]
    if all(a == (0, 0) for a in amounts):
        return [x] if x.name is None or not crop else [emit.out(emit.ref(x), x.dtype, x.shape)]
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, amounts, strict=True))
    fixed = static(shape)
    fold = x.is_known and fixed is not None and computable(fixed)
    if fold and mode != "constant":
        return [known_value(np.pad(x.known, amounts, mode=mode), x.dtype)]
    if mode == "constant":
        if fold:
            return [known_value(np.pad(x.known, amounts, constant_values=value), x.dtype)]
        if isinstance(value, Value):
            return [_pad_with(x, amounts, value, shape, emit)]
        padded = call("pad", emit.ref(x), _widths(amounts), dtype=x.dtype, shape=shape, value=B.lit(value, x.dtype))
        return [emit.out(padded, x.dtype, shape)]
    padded = [a for a, (lo, hi) in enumerate(amounts) if lo or hi]
    for a in padded:
        x = _pad_axis(x, a, amounts[a], mode, emit, last=a == padded[-1])
    return [x]


def _widths(amounts: list[tuple[int, int]]) -> B.Seq:
    """pad's widths argument, `[[before, after], ...]`."""
    return seq([seq(amount) for amount in amounts])


def _pad_with(x: Value, amounts: list[tuple[int, int]], value: Value, shape: Shape, emit: Emitter) -> Value:
    """Constant padding by a value computed at run time (a scalar tensor): padded with 0, then selected."""
    if value.rank > 1 or (value.rank == 1 and value.shape[0] != const(1)):
        raise ModelError("constant_value must be a scalar")
    zeros = call("pad", emit.ref(x), _widths(amounts), dtype=x.dtype, shape=shape, value=B.lit(0, x.dtype))
    padded = emit.ref(emit.intermediate(zeros, "padded"))
    fill = emit.ref(value) if value.rank == 0 else emit.ref(value)[0]
    idx = emit.index_names().numbered(x.rank)
    inside = []
    for i, n, (lo, hi) in zip(idx, x.shape, amounts, strict=True):
        if lo:
            inside.append(Group(i >= lo))
        if hi:
            inside.append(Group(i < Size(n + lo)))
    return emit.out_index(idx, where(functools.reduce(operator.and_, inside), padded[tuple(idx)], fill), x.dtype, shape)


def _pad_axis(x: Value, a: int, amount: tuple[int, int], mode: str, emit: Emitter, last: bool) -> Value:
    """x padded on axis a in mode reflect, edge or wrap: an index-form statement (the output if last)."""
    lo, hi = amount
    n = x.shape[a]
    if mode == "reflect" and n.is_const and max(lo, hi) >= n.value:
        raise Unsupported(f"reflect padding of {max(lo, hi)} on an axis of size {n.value}")
    xt = emit.ref(x)
    idx = emit.index_names().numbered(x.rank)
    before, inside, after = _pad_source(mode, idx[a], lo, hi, n)

    def at(pos: Node) -> Node:
        return xt[tuple(pos if k == a else i for k, i in enumerate(idx))]

    expr = at(inside)
    if after is not None:
        expr = where(idx[a] < Size(n + lo), expr, at(after))
    if before is not None:
        expr = where(idx[a] < lo, at(before), expr)
    shape = x.shape[:a] + (n + lo + hi,) + x.shape[a + 1 :]
    if last:
        return emit.out_index(idx, expr, x.dtype, shape)
    return emit.index_temp(idx, expr, x.dtype, shape, f"pad{a}")


# ---- gathers -------------------------------------------------------------------------------------


def _arange_along(size: Expr, axis: int, rank: int) -> Node:
    """arange(size) shaped to broadcast along `axis` of a rank-`rank` index tuple."""
    positions = call("arange", Size(size), dtype="i64", shape=(size,))
    if rank == 1:
        return positions
    shape = tuple(size if k == axis else const(1) for k in range(rank))
    return read(positions, [ALL if k == axis else NEW_AXIS for k in range(rank)], shape)


def _check_indices(indices: Value) -> None:
    if indices.dtype not in ("i32", "i64"):
        raise ModelError(f"indices of type {indices.dtype}")


@converter("GatherElements")
def gather_elements(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, indices = node.need(0), node.need(1)
    _check_indices(indices)
    if indices.rank != x.rank:
        raise ModelError(f"indices of rank {indices.rank} for data of rank {x.rank}")
    axis = axis_in(node, x, 0)
    if x.is_known and indices.is_known and indices.known.dtype != object and x.known.dtype != object:
        idx = np.where(indices.known < 0, indices.known + x.known.shape[axis], indices.known)
        if np.any((idx < 0) | (idx >= x.known.shape[axis])):
            raise ModelError("an index is out of range")
        return [known_value(np.take_along_axis(x.known, idx, axis), x.dtype)]
    t = emit.ref(indices)
    items = [t if k == axis else _arange_along(d, k, x.rank) for k, d in enumerate(indices.shape)]
    return [emit.out(read(emit.ref(x), items, indices.shape), x.dtype, indices.shape)]


@converter("GatherND")
def gather_nd(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, indices = node.need(0), node.need(1)
    _check_indices(indices)
    batch = node.attr("batch_dims", 0)
    depth = indices.shape[-1] if indices.rank else const(0)
    if not depth.is_const or indices.rank < 1:
        raise Unsupported("indices whose last dimension is symbolic")
    m = depth.value
    if batch + m > x.rank:
        raise ModelError(f"indices address {batch + m} axes of data of rank {x.rank}")
    shape = indices.shape[:-1] + x.shape[batch + m :]
    t = emit.ref(indices)
    lead = indices.rank - 1
    items = [_arange_along(indices.shape[b], b, lead) for b in range(batch)]
    items += [read(t, [ALL] * lead + [k], indices.shape[:-1]) for k in range(m)]
    if lead == 0:  # one tuple of indices: a scalar index per axis
        items = [t[k] for k in range(m)]
    return [emit.out(subscript(emit.ref(x), items, shape), x.dtype, shape)]


# ---- Trilu, OneHot, CumSum and CumProd, EyeLike ----------------------------------------------------------------


@converter("Trilu")
def trilu(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, diagonal = node.need(0), node.input(1)
    upper = bool(node.attr("upper", 1))
    if x.rank < 2:
        raise ModelError("the input must have rank 2 or more")
    if diagonal is not None and not diagonal.is_known:  # k at run time: the mask in index form
        xt = emit.ref(x)
        k = emit.ref(diagonal) if diagonal.rank == 0 else emit.ref(diagonal)[0]
        idx = emit.index_names().numbered(x.rank)
        i, j = idx[-2:]
        keep = j - i >= k if upper else j - i <= k
        return [emit.out_index(idx, where(keep, xt[tuple(idx)], 0), x.dtype, x.shape)]
    k = 0 if diagonal is None else known_ints(diagonal, "k (input 1)")[0]
    if small(x) and x.known.dtype != object and not isinstance(k, Expr):
        return [known_value((np.triu if upper else np.tril)(x.known, int(k)), x.dtype)]
    diagonal_arg = {"k": B.lit(k, "i64")} if not (isinstance(k, int) and k == 0) else {}
    mask = call("triu" if upper else "tril", emit.ref(x), dtype=x.dtype, shape=x.shape, **diagonal_arg)
    return [emit.out(mask, x.dtype, x.shape)]


@converter("OneHot")
def one_hot(node: OnnxNode, emit: Emitter) -> list[Value]:
    indices, depth_value, values = node.need(0), node.need(1), node.need(2)
    if not depth_value.is_known:
        known_ints(depth_value, "the depth (input 1)")  # raises: the depth decides the output's shape
    if depth_value.known.size != 1 or values.shape != (const(2),):
        raise ModelError("depth must be one value and values two: [off, on]")
    depth = _int(np.asarray(depth_value.known).reshape(-1)[0])
    rank = indices.rank + 1
    axis = axis_of(node.attr("axis", -1), rank)
    shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    dtype = values.dtype
    if values.is_known:
        off, on = (B.lit(v, dtype) for v in values.known.reshape(-1)[:2])
    else:
        vt = emit.ref(values)
        off, on = vt[0], vt[1]
    t = emit.ref(indices)
    if indices.dtype != "i64":
        t = cast(t, "i64")
    d = Size(depth)
    ids = emit.ref(emit.temp(where(t < 0, t + d, t), "i64", indices.shape, "ids"))
    positions = _arange_along(depth, 0, rank - axis)
    unsqueezed = indices.shape[:axis] + (const(1),) + indices.shape[axis:]
    hit = call("unsqueeze", ids, num(axis), dtype="i64", shape=unsqueezed).eq(positions)
    return [emit.out(cast(where(hit, on, off), dtype), dtype, shape)]


@converter("CumSum", "CumProd")
def cumulative(node: OnnxNode, emit: Emitter) -> list[Value]:
    """A running sum or product along an axis, in index form: out[.., i, ..] = sum over j of
    where(j <= i, x[.., j, ..], 0) (< for exclusive, >= and > for reverse)."""
    x = node.need(0)
    if x.rank == 0:
        raise ModelError("the input is a scalar: it has no axis")
    reduction, identity = ("sum", 0) if node.op == "CumSum" else ("prod", 1)
    if x.dtype == "bool" and reduction == "prod":
        raise Unsupported("a product of bool values")
    axis = known_ints(node.need(1), "the axis (input 1)")
    if len(axis) != 1:
        raise ModelError("the axis must be one value")
    axis = axis_of(static_int(axis[0], "the axis"), x.rank)
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))
    xt = emit.ref(x)
    idx = emit.index_names().numbered(x.rank + 1)
    i, j = idx[axis], idx[-1]
    relation = {(False, False): "<=", (True, False): "<", (False, True): ">=", (True, True): ">"}[(exclusive, reverse)]
    read = xt[tuple(j if k == axis else n for k, n in enumerate(idx[:-1]))]
    expr = reduce(reduction, [(j, Size(x.shape[axis]))], where(B.binary(relation, j, i), read, identity))
    return [emit.out_index(idx[:-1], expr, x.dtype, x.shape)]


@converter("EyeLike")
def eye_like(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.rank != 2:
        raise ModelError("the input must be 2-D")
    to = node.attr("dtype")
    dtype = x.dtype if to is None else ONNX_DTYPES.get(to)
    if dtype is None:
        raise Unsupported(f"dtype={to}: catenc has no such element type")
    k = node.attr("k", 0)
    fixed = static(x.shape)
    if fixed is not None and fixed[0] * fixed[1] <= SMALL:
        return [known_value(np.eye(fixed[0], fixed[1], k, dtype=NUMPY[dtype]), dtype)]
    names = emit.index_names()
    i, j = names("i"), names("j")
    return [emit.out_index([i, j], cast((j - i).eq(k), dtype), dtype, x.shape)]


# ---- space/depth rearrangements -----------------------------------------------------------------


def _blocksize(node: OnnxNode) -> int:
    bs = node.attr("blocksize")
    if not isinstance(bs, int) or bs < 1:
        raise ModelError(f"blocksize={bs}")
    return bs


def _rearranged(x: Value, split: Shape, perm: list[int], final: Shape, emit: Emitter) -> Value:
    """reshape -> transpose -> reshape, each step a statement (or folded when x is known)."""
    if small(x) and x.known.dtype != object:
        fixed = static(split)
        return known_value(x.known.reshape(fixed).transpose(perm).reshape(static(final)), x.dtype)
    xt = emit.ref(x)
    parts = emit.ref(emit.intermediate(call("reshape", xt, shape_list(split), dtype=x.dtype, shape=split), "blocks"))
    moved = tuple(split[p] for p in perm)
    turned = emit.ref(emit.intermediate(call("transpose", parts, seq(perm), dtype=x.dtype, shape=moved), "moved"))
    return emit.result(call("reshape", turned, shape_list(final), dtype=x.dtype, shape=final))


@converter("DepthToSpace")
def depth_to_space(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.rank != 4:
        raise ModelError("the input must be 4-D")
    bs = _blocksize(node)
    n, c, h, w = x.shape
    cc = floordiv(c, bs * bs)
    final = (n, cc, h * bs, w * bs)
    if node.attr("mode", "DCR") == "DCR":
        return [_rearranged(x, dims((n, bs, bs, cc, h, w)), [0, 3, 4, 1, 5, 2], final, emit)]
    return [_rearranged(x, dims((n, cc, bs, bs, h, w)), [0, 1, 4, 2, 5, 3], final, emit)]


@converter("SpaceToDepth")
def space_to_depth(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.rank != 4:
        raise ModelError("the input must be 4-D")
    bs = _blocksize(node)
    n, c, h, w = x.shape
    hh, ww = floordiv(h, bs), floordiv(w, bs)
    split = dims((n, c, hh, bs, ww, bs))
    perm = [0, 3, 5, 1, 2, 4] if node.attr("mode", "DCR") == "DCR" else [0, 1, 3, 5, 2, 4]
    return [_rearranged(x, split, perm, (n, c * (bs * bs), hh, ww), emit)]


# ---- data-dependent shapes: only with known inputs -----------------------------------------------


@converter("Compress")
def compress(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, condition = node.need(0), node.need(1)
    if not condition.is_known:
        raise Unsupported("a condition computed at run time (the result's shape would depend on the data)")
    axis = node.attr("axis")
    keep = np.flatnonzero(condition.known.reshape(-1))
    if axis is None:
        x = reshaped(x, (product(x.shape),), emit)
        axis = 0
    if x.rank == 0:
        raise ModelError("the input is a scalar: it has no axis")
    axis = axis_of(axis, x.rank)
    size = x.shape[axis]
    if keep.size and size.is_const and keep[-1] >= size.value:
        raise ModelError(f"the condition keeps entry {keep[-1]} of an axis of size {size.value}")
    if small(x) and x.known.dtype != object:
        return [known_value(np.take(x.known, keep, axis), x.dtype)]
    shape = x.shape[:axis] + (const(len(keep)),) + x.shape[axis + 1 :]
    xt, ids = emit.ref(x), emit.ref(known_value(keep.astype(np.int64), "i64"))
    return [emit.out(call("take", xt, ids, num(axis), dtype=x.dtype, shape=shape), x.dtype, shape)]


@converter("NonZero")
def nonzero(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if not x.is_known or x.known.dtype == object:
        raise Unsupported("an input computed at run time (the result's shape would depend on the data)")
    if x.rank == 0:
        raise Unsupported("a scalar input")
    return [known_value(np.array(np.nonzero(x.known), dtype=np.int64).reshape(x.rank, -1), "i64")]


# ---- scatters and ReverseSequence: index form over the output ------------------------------------


def _scattered(
    node: OnnxNode,
    x: Value,
    idx: list[Index],
    found: Node,
    reads: tuple[list[tuple[Index, Node]], Node, Node],
    emit: Emitter,
) -> Value:
    """x with updates written where `found` holds, over the reduction `reads` = (ranges, position, update):
    the last update wins (reduction none) or they combine with x (add, mul, max, min)."""
    ranges, position, update = reads
    here = emit.ref(x)[tuple(idx)]
    reduction = node.attr("reduction", "none")
    if reduction == "add":
        return emit.out_index(idx, here + reduce("sum", ranges, where(found, update, 0)), x.dtype, x.shape)
    if reduction == "mul":
        return emit.out_index(idx, here * reduce("prod", ranges, where(found, update, 1)), x.dtype, x.shape)
    if reduction in ("max", "min"):
        fn = "maximum" if reduction == "max" else "minimum"
        expr = call(fn, here, reduce(reduction, ranges, where(found, update, here)))
        return emit.out_index(idx, expr, x.dtype, x.shape)
    if reduction != "none":
        raise ModelError(f"reduction '{reduction}'")
    last = emit.index_temp(idx, reduce("max", ranges, where(found, position, -1)), "i64", x.shape, "last")
    at = emit.ref(last)[tuple(idx)]
    picked = reduce("sum", ranges, where(position.eq(at), update, 0))
    return emit.out_index(idx, where(at >= 0, picked, here), x.dtype, x.shape)


def _found(entry: Node, position: Index, size: Expr) -> Node:
    """`((entry == p) | (entry == p - size))`: an index, possibly negative, that names position p."""
    return Group(entry.eq(position) | entry.eq(position - Size(size)))


@converter("ScatterElements", "Scatter")
def scatter_elements(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, indices, updates = node.need(0), node.need(1), node.need(2)
    _check_indices(indices)
    axis = axis_in(node, x, 0)
    if indices.rank != x.rank or updates.shape != indices.shape:
        raise ModelError("indices and updates must have the data's rank and one shape")
    if any(u != d for k, (u, d) in enumerate(zip(indices.shape, x.shape, strict=True)) if k != axis):
        raise Unsupported("indices narrower than the data outside the scatter axis")
    if x.dtype == "bool":
        raise Unsupported("a scatter into bool data")
    t_idx, t_upd = emit.ref(indices), emit.ref(updates)
    emit.text(x)  # named before the indices are
    names = emit.index_names().numbered(x.rank + 1)
    idx, u = names[:-1], names[-1]
    at = tuple(u if k == axis else n for k, n in enumerate(idx))
    found = _found(t_idx[at], idx[axis], x.shape[axis])
    return [_scattered(node, x, idx, found, ([(u, Size(indices.shape[axis]))], u, t_upd[at]), emit)]


@converter("ScatterND")
def scatter_nd(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, indices, updates = node.need(0), node.need(1), node.need(2)
    _check_indices(indices)
    depth = indices.shape[-1] if indices.rank else const(0)
    if not depth.is_const or indices.rank < 1:
        raise Unsupported("indices whose last dimension is symbolic")
    m = depth.value
    lead = indices.shape[:-1]
    if m > x.rank or updates.shape != lead + x.shape[m:]:
        raise ModelError("updates must have the shape indices.shape[:-1] + data.shape[indices.shape[-1]:]")
    if x.dtype == "bool":
        raise Unsupported("a scatter into bool data")
    t_idx, t_upd = emit.ref(indices), emit.ref(updates)
    emit.text(x)  # named before the indices are
    names = emit.index_names().numbered(x.rank + len(lead))
    idx, us = names[: x.rank], names[x.rank :]
    tests = [_found(t_idx[(*us, k)], idx[k], x.shape[k]) for k in range(m)]
    found = functools.reduce(operator.and_, tests) if tests else Lit("True", "bool")
    ranges = [(u, Size(d)) for u, d in zip(us, lead, strict=True)]
    # the update's row-major position (`(4*i3 + i4)`)
    position = poly([(u, product(lead[k + 1 :])) for k, u in enumerate(us)])
    update = t_upd[(*us, *idx[m:])]
    return [_scattered(node, x, idx, found, (ranges, position, update), emit)]


@converter("ReverseSequence")
def reverse_sequence(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, lengths = node.need(0), node.need(1)
    batch_axis, time_axis = node.attr("batch_axis", 1), node.attr("time_axis", 0)
    if x.rank < 2 or {batch_axis, time_axis} != {0, 1}:
        raise ModelError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 of a rank >= 2 input")
    xt, lens = emit.ref(x), emit.ref(lengths)
    i, j = emit.index_names().numbered(2)
    t, b = (i, j) if time_axis == 0 else (j, i)
    # each sequence reversed within its length: the source position of each (time, batch) pair
    source = where(t < lens[b], lens[b] - 1 - t, t)
    positions = emit.ref(emit.index_temp([i, j], source, "i64", x.shape[:2], "source"))
    items: list[Node] = [positions, positions]
    items[batch_axis] = _arange_along(x.shape[batch_axis], batch_axis, 2)
    return [emit.out(read(xt, items, x.shape), x.dtype, x.shape)]


@converter("TensorScatter")
def tensor_scatter(node: OnnxNode, emit: Emitter) -> list[Value]:
    cache, update, writes = node.need(0), node.need(1), node.input(2)
    axis = axis_in(node, cache, -2)
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ModelError(f"mode '{mode}'")
    if (
        axis == 0
        or update.rank != cache.rank
        or any(u != c for k, (u, c) in enumerate(zip(update.shape, cache.shape, strict=True)) if k != axis)
    ):
        raise ModelError("the update must match the cache outside the sequence axis, which follows the batch axis")
    if cache.dtype == "bool":
        raise Unsupported("a bool cache")
    t_upd, _ = emit.ref(update), emit.text(cache)  # named before the indices are
    t_writes = emit.ref(writes) if writes is not None else None
    names = emit.index_names().numbered(cache.rank + 1)
    idx, step = names[:-1], names[-1]
    start = t_writes[idx[0]] + step if t_writes is not None else step
    if mode == "circular":
        start = Group(start) % Size(cache.shape[axis])
    found = Group(start.eq(idx[axis]))
    read = t_upd[tuple(step if k == axis else n for k, n in enumerate(idx))]
    return [_scattered(node, cache, idx, found, ([(step, Size(update.shape[axis]))], step, read), emit)]


@converter("CenterCropPad")
def center_crop_pad(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    sizes = [static_int(s, "a target size") for s in known_ints(node.need(1), "the shape (input 1)")]
    axes = node.attr("axes") or list(range(x.rank))
    axes = [axis_of(a, x.rank) for a in axes]
    if len(sizes) != len(axes):
        raise ModelError(f"{len(sizes)} sizes for {len(axes)} axes")
    pieces, widths = [slice(None)] * x.rank, [(0, 0)] * x.rank
    cropped = list(x.shape)
    for a, size in zip(axes, sizes, strict=True):
        dim = static_int(x.shape[a], "a cropped or padded axis")
        if size < dim:
            first = (dim - size) // 2
            pieces[a], cropped[a] = slice(first, first + size), const(size)
        elif size > dim:
            before = (size - dim) // 2
            widths[a] = (before, size - dim - before)
    shape = tuple(c + lo + hi for c, (lo, hi) in zip(cropped, widths, strict=True))
    if small(x) and x.known.dtype != object:
        return [known_value(np.pad(x.known[tuple(pieces)], widths), x.dtype)]
    xt = emit.ref(x)
    crop = [ALL if p == slice(None) else span(p.start, p.stop) for p in pieces]
    cut = subscript(xt, crop, tuple(cropped))
    if all(w == (0, 0) for w in widths):
        return [x] if cut is xt else [emit.out(cut, x.dtype, shape)]
    padded = call("pad", cut, _widths(widths), dtype=x.dtype, shape=shape, value=B.lit(0, x.dtype))
    return [emit.out(padded, x.dtype, shape)]
