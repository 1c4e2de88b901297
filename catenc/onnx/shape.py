"""Shape operators: Constant, Shape, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Gather,
Expand, ConstantOfShape, Range.

Shapes are computed here, symbolically, so that chains such as `Shape -> Gather -> Concat ->
Reshape` fold at import and the body gets plain `reshape(x, [N, 64])` calls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

from catenc.onnx.builder import affine
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.folding import SMALL, computable, repeats
from catenc.onnx.registry import OnnxNode, axis_of, converter, known_ints
from catenc.onnx.values import (
    FLOATS,
    MAX_ELEMENTS,
    NUMPY,
    Shape,
    Value,
    broadcast,
    dims,
    known_value,
    static,
    symbolic_ints,
)
from catenc.onnx.values import literal as lit
from catenc.symbolic import Expr, const, floordiv, product

# The attributes that give a Constant its value, one of which it has.
CONSTANT_VALUES = (
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "sparse_value",
)


def shape_text(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def element_count(fixed: Iterable[int]) -> int:
    """The elements of a tensor of this static shape, counted in Python ints (np.prod wraps past 2**63);
    Unsupported past MAX_ELEMENTS, a model's mistake or an attack."""
    count = math.prod(fixed)
    if count > MAX_ELEMENTS:
        raise Unsupported(f"a tensor of {count} elements, more than the {MAX_ELEMENTS} catenc makes one of")
    return count


def requested_shape(value: Value | None, what: str) -> Shape:
    """A known shape input (ConstantOfShape's, Expand's) as dims; a negative dimension is the model's error."""
    requested = known_ints(value, what)
    if any(not isinstance(d, Expr) and d < 0 for d in requested):
        raise ModelError(f"the shape {requested} has a negative dimension")
    return dims(requested)


def reshaped(x: Value, shape: Shape, emit) -> Value:
    """x with a new shape of as many elements: folded when known, else a `reshape` statement."""
    if tuple(shape) == tuple(x.shape):
        return x
    if x.is_known:
        fixed = static(shape)
        if fixed is not None:
            return Value(x.dtype, shape, known=x.known.reshape(fixed))
    return _regrouped(x, shape, emit) or emit.out(f"reshape({emit.text(x)}, {shape_text(shape)})", x.dtype, shape)


def _regrouped(x: Value, shape: Shape, emit) -> Value | None:
    """A reshape that splits one axis into several, or merges several into one, ahead of kept
    trailing axes (a channel shuffle's), in index form `y[n, g, j, h, w] = x[n, 2*g + j, h, w]`: as a
    flat `reshape` of the whole tensor, a padded window read of y would fold its row offsets into
    the channel's index, which the IR's bound checks cannot follow; None for any other reshape."""
    old, new = tuple(x.shape), tuple(shape)
    lead = next((d for d, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    room = min(len(old), len(new)) - lead
    trail = next((d for d in range(room) if old[-1 - d] != new[-1 - d]), room)
    split, merged = old[lead : len(old) - trail], new[lead : len(new) - trail]
    if not trail or min(len(split), len(merged)) != 1 or static(split + merged) is None:
        return None
    xt = emit.ref(x)
    out = emit.index_names().numbered(len(new))
    sizes = static(merged if len(split) == 1 else split)
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    if len(split) == 1:  # one old axis: the row-major position of the new ones
        source = [affine(list(zip(strides, out[lead : lead + len(sizes)])))]
    else:  # one new axis: the old ones are its digits
        digits = [out[lead] // stride if stride > 1 else out[lead] for stride in strides]
        source = [digit % size if k else digit for k, (digit, size) in enumerate(zip(digits, sizes))]
    source = [*out[:lead], *source, *out[len(new) - trail :]]
    return emit.out_index(out, xt[tuple(source)], x.dtype, shape)


@converter("Constant")
def constant(node: OnnxNode, emit) -> list[Value]:
    a = node.attrs
    given = [key for key in CONSTANT_VALUES if key in a]
    if len(given) != 1:
        raise ModelError(f"a Constant has one value attribute; this one has {len(given)} ({', '.join(given)})")
    if "value" in a:
        array = a["value"]
        if array.dtype.kind not in "biuf":
            raise Unsupported(f"a constant of numpy type {array.dtype}")
        dtype = {v: k for k, v in NUMPY.items() if k != "bf16"}.get(array.dtype.type)
        if dtype is None:
            array, dtype = array.astype(np.float32), "bf16"
        return [known_value(array, dtype)]
    for key, dtype in (("value_float", "f32"), ("value_floats", "f32"), ("value_int", "i64"), ("value_ints", "i64")):
        if key in a:
            return [known_value(np.asarray(a[key]), dtype)]
    raise Unsupported(f"a constant given as {', '.join(sorted(a)) or 'nothing'}")


@converter("Shape")
def shape_of(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    rank = x.rank
    start, end = node.attr("start", 0), node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    entries = np.array(list(x.shape[start:end]), dtype=object).reshape(-1)
    return [known_value(entries, "i64")]


@converter("Size")
def size_of(node: OnnxNode, emit) -> list[Value]:
    return [known_value(np.array(product(node.need(0).shape), dtype=object), "i64")]


def target_shape(x: Value, requested: list, allowzero: bool) -> Shape:
    """Reshape's output shape: 0 copies the input's dim (unless allowzero), -1 is inferred."""
    out: list[Expr | None] = []
    for i, d in enumerate(requested):
        if isinstance(d, Expr):
            out.append(d)
        elif d == 0 and not allowzero:
            if i >= x.rank:
                raise ModelError(f"shape entry {i} is 0 but the input has rank {x.rank}")
            out.append(x.shape[i])
        elif d == -1:
            out.append(None)
        elif d < 0:
            raise ModelError(f"shape entry {d} is negative")
        else:
            out.append(const(d))
    if out.count(None) > 1:
        raise ModelError("more than one -1 in the shape")
    if None in out:
        known = product([d for d in out if d is not None])
        out[out.index(None)] = floordiv(product(x.shape), known)
    return tuple(out)


@converter("Reshape")
def reshape(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    since5 = node.opset >= 5  # the shape is an input from opset 5 on
    requested = known_ints(node.input(1), "the shape (input 1)") if since5 else list(node.attr("shape", []))
    return [reshaped(x, target_shape(x, requested, bool(node.attr("allowzero", 0))), emit)]


@converter("Flatten")
def flatten(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    axis = node.attr("axis", 1)
    axis = axis + x.rank if axis < 0 else axis
    if not 0 <= axis <= x.rank:
        raise ModelError(f"axis {node.attr('axis', 1)} is out of range for rank {x.rank}")
    return [reshaped(x, (product(x.shape[:axis]), product(x.shape[axis:])), emit)]


def axes_input(node: OnnxNode, since: int) -> list[int] | None:
    """The axes of Squeeze/Unsqueeze/Reduce*: an attribute before opset `since`, an input from then on."""
    if node.opset < since:
        axes = node.attr("axes")
        return None if axes is None else list(axes)
    value = node.input(1)
    return None if value is None else [int(a) for a in known_ints(value, "the axes (input 1)")]


@converter("Squeeze")
def squeeze(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    axes = axes_input(node, 13)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == const(1)]
    axes = sorted({axis_of(a, x.rank) for a in axes})
    for a in axes:
        if x.shape[a] != const(1):
            raise ModelError(f"axis {a} has size {x.shape[a]}, not 1")
    return [reshaped(x, tuple(d for i, d in enumerate(x.shape) if i not in axes), emit)]


@converter("Unsqueeze")
def unsqueeze(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    axes = axes_input(node, 13)
    if axes is None:
        raise ModelError("the axes are required")
    rank = x.rank + len(axes)
    axes = sorted({axis_of(a, rank) for a in axes})
    rest = iter(x.shape)
    return [reshaped(x, tuple(const(1) if i in axes else next(rest) for i in range(rank)), emit)]


@converter("Transpose")
def transpose(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    perm = node.attr("perm") or list(range(x.rank))[::-1]
    if sorted(perm) != list(range(x.rank)):
        raise ModelError(f"perm {perm} is not a permutation of the {x.rank} axes")
    shape = tuple(x.shape[p] for p in perm)
    if x.is_known and computable(x.known.shape):  # a broadcast stays one
        moved = x.known.transpose(perm)
        return [Value(x.dtype, shape, known=moved if repeats(moved) else np.ascontiguousarray(moved))]
    if perm == list(range(x.rank)):
        return [x]
    return [emit.out(f"transpose({emit.text(x)}, {perm})", x.dtype, shape)]


@converter("Concat")
def concat(node: OnnxNode, emit) -> list[Value]:
    values = [v for v in node.inputs if v is not None]
    if not values:
        raise ModelError("needs at least one input")
    rank = values[0].rank
    axis = axis_of(node.attr("axis", 0), rank)
    for v in values:
        if v.rank != rank or any(v.shape[i] != values[0].shape[i] for i in range(rank) if i != axis):
            raise ModelError("inputs differ in shape outside the concatenation axis")
    shape = values[0].shape[:axis] + (sum((v.shape[axis] for v in values), const(0)),) + values[0].shape[axis + 1 :]
    if all(v.is_known for v in values) and (static(shape) is None or computable(static(shape))):
        return [known_value(np.concatenate([v.known for v in values], axis=axis), values[0].dtype)]
    parts = [v for v in values if v.shape[axis] != const(0)]
    if len(parts) == 1:
        return parts
    return [emit.out(f"concat([{', '.join(emit.text(v) for v in parts)}], {axis})", values[0].dtype, shape)]


@converter("Gather")
def gather(node: OnnxNode, emit) -> list[Value]:
    x, indices = node.need(0), node.need(1)
    axis = axis_of(node.attr("axis", 0), x.rank)
    if indices.dtype not in ("i32", "i64"):
        raise ModelError(f"indices of type {indices.dtype}")
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    if x.is_known and indices.is_known and indices.known.dtype != object:
        size = x.shape[axis]
        if size.is_const:
            idx = np.where(indices.known < 0, indices.known + size.value, indices.known)
            if np.any((idx < 0) | (idx >= size.value)):
                raise ModelError("an index is out of range")
            return [known_value(np.take(x.known, idx, axis=axis), x.dtype)]
    if indices.is_known and indices.rank == 0 and indices.known.dtype != object:
        i = int(indices.known)
        selector = ", ".join([":"] * axis + [str(i)])
        return [emit.out(f"{emit.text(x)}[{selector}]", x.dtype, shape)]
    return [emit.out(f"take({emit.text(x)}, {emit.text(indices)}, {axis})", x.dtype, shape)]


@converter("ConstantOfShape")
def constant_of_shape(node: OnnxNode, emit) -> list[Value]:
    shape = requested_shape(node.need(0), "the shape (input 0)")
    fill = node.attr("value")
    array = np.zeros(1, np.float32) if fill is None else np.asarray(fill).reshape(-1)
    if array.size != 1:
        raise ModelError(f"its value holds {array.size} elements, not one")
    dtype = {v: k for k, v in NUMPY.items() if k != "bf16"}.get(array.dtype.type, "f32")
    fixed = static(shape)
    if fixed is not None and computable([element_count(fixed)]):  # one value, repeated: no memory
        return [Value(dtype, shape, known=np.broadcast_to(array[:1].astype(NUMPY[dtype]).reshape(()), fixed))]
    return [emit.out(f"full({shape_text(shape)}, {lit(array[0], dtype)}, {dtype})", dtype, shape)]


@converter("Expand")
def expand(node: OnnxNode, emit) -> list[Value]:
    x = node.need(0)
    requested = requested_shape(node.input(1), "the shape (input 1)")
    shape = broadcast(x.shape, requested)
    if shape is None:
        raise ModelError(f"cannot expand {shape_text(x.shape)} to {shape_text(requested)}")
    fixed = static(shape)
    if fixed is not None and computable([element_count(fixed)]) and x.is_known:
        return [Value(x.dtype, shape, known=np.broadcast_to(x.known, fixed))]  # a view: x's data, repeated
    if shape == x.shape:
        return [x]
    return [emit.out(f"expand({emit.text(x)}, {shape_text(shape)})", x.dtype, shape)]


@converter("Range")
def arange(node: OnnxNode, emit) -> list[Value]:
    start, limit, delta = node.need(0), node.need(1), node.need(2)
    dtype = start.dtype
    if all(v.is_known and v.known.dtype != object for v in (start, limit, delta)):
        first, last, step = (np.asarray(v.known).reshape(-1)[0] for v in (start, limit, delta))
        count = element_count([range_length(first, last, step, dtype)])
        if count <= SMALL:
            if dtype in FLOATS:
                values = np.arange(first, last, step)
            else:  # ONNX's start + i * delta, wrapping as the type does
                values = np.arange(count, dtype=np.int64) * step + first
            return [known_value(values, dtype)]
        scaled = "" if step == 1 else f" * {lit(step, dtype)}"  # ONNX's output[i] = start + i * delta
        shifted = f" + {lit(first, dtype)}" if first else ""
        return [emit.out(f"arange({count}, dtype={dtype}){scaled}{shifted}", dtype, (const(count),))]
    first, step = known_ints(start, "start (input 0)"), known_ints(delta, "delta (input 2)")
    if not limit.is_known:
        known_ints(limit, "limit (input 1)")  # raises: it must be known
    if dtype not in ("i32", "i64") or step != [1]:
        raise Unsupported("a range of symbolic length with a step other than 1, or of floats")
    n = symbolic_ints(limit)[0] - first[0]
    expr = f"arange({n}, dtype={dtype})" + (f" + {first[0]}" if first[0] else "")
    return [emit.out(expr, dtype, (n,))]


def range_length(first, last, step, dtype: str) -> int:
    """How many values Range makes, max(ceil((limit - start) / delta), 0): integers counted exactly,
    floats in their own type, as onnxruntime and numpy count them."""
    if dtype not in FLOATS:
        first, last, step = int(first), int(last), int(step)
    elif not all(np.isfinite(v) for v in (first, last, step)):
        raise ModelError(f"start {first}, limit {last} and delta {step} must be finite")
    if step == 0:
        raise ModelError("delta (input 2) is 0")
    if dtype not in FLOATS:
        return max(-((first - last) // step), 0)
    with np.errstate(over="ignore"):
        span = (last - first) / step
    if not np.isfinite(span):  # past the type's largest value: the count is far past any limit
        span = (Fraction(float(last)) - Fraction(float(first))) / Fraction(float(step))
    return max(math.ceil(span), 0)
