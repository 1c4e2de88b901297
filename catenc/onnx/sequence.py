"""Operators of sequence models: RotaryEmbedding, SwiGLU, and TopK with k known at import.

RotaryEmbedding is written in array form as the operator defines it (halves or interleaved pairs
rotated by the cos and sin caches, picked by position ids where given). TopK ranks each element
along the axis by comparisons in index form (the lower index first among equal values), then
picks the element of each rank below k.
"""

from __future__ import annotations

from catenc.onnx import builder as B
from catenc.onnx.builder import (
    ELLIPSIS,
    Group,
    Index,
    Node,
    Size,
    call,
    num,
    read,
    reduce,
    seq,
    shape_list,
    span,
    where,
)
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.registry import OnnxNode, axis_of, converter, known_ints, need_float
from catenc.onnx.values import Shape, Value
from catenc.symbolic import const, floordiv


@converter("SwiGLU")
def swiglu(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b = node.need(0), node.need(1)
    need_float(node, a)
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ModelError("A and B must have one shape and one type")
    alpha = float(node.attr("alpha", 1.0))
    ta, tb = emit.ref(a), emit.ref(b)
    gate = call("sigmoid", ta if alpha == 1.0 else ta * B.lit(alpha, a.dtype))
    return [emit.out(ta * gate * tb, a.dtype, a.shape)]


@converter("TopK")
def top_k(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.rank == 0:
        raise ModelError("the input is a scalar: it has no axis")
    if x.dtype == "bool":
        raise Unsupported("bool input")
    axis = axis_of(node.attr("axis", -1), x.rank)
    ks = known_ints(node.need(1), f"k ({node.label(1)})")
    if len(ks) != 1 or ks[0] is None:
        raise ModelError("k must be one value")
    k = const(ks[0]) if isinstance(ks[0], int) else ks[0]
    n = x.shape[axis]
    if k.is_const and (k.value < 0 or (n.is_const and k.value > n.value)):
        raise ModelError(f"k={k} for an axis of size {n}")
    largest = bool(node.attr("largest", 1))
    xt = emit.ref(x)
    idx = emit.index_names().numbered(x.rank + 1)
    p, q = idx[axis], idx[-1]

    def at(of: Node, position: Index) -> Node:
        return of[tuple(position if a == axis else i for a, i in enumerate(idx[:-1]))]

    before = B.binary(">" if largest else "<", at(xt, q), at(xt, p))
    ahead = before | Group(at(xt, q).eq(at(xt, p)) & (q < p))
    over = [(q, Size(n))]
    rank = emit.ref(emit.index_temp(idx[:-1], reduce("sum", over, where(ahead, 1, 0)), "i64", x.shape, "rank"))
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    # output position r (the index named p) holds the element q of rank r
    ranked = at(rank, q).eq(p)
    positions = reduce("sum", over, where(ranked, q, 0))
    values = reduce("sum", over, where(ranked, at(xt, q), 0))
    results = [emit.out_index(idx[:-1], values, x.dtype, shape, 0)]
    if len(node.outputs) > 1 and node.outputs[1]:
        results.append(emit.out_index(idx[:-1], positions, "i64", shape, 1))
    return results


@converter("RotaryEmbedding")
def rotary_embedding(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, cos, sin, positions = node.need(0), node.need(1), node.need(2), node.input(3)
    need_float(node, x)
    if x.rank not in (3, 4):
        raise ModelError("the input must be (batch, heads, sequence, head size) or (batch, sequence, hidden)")
    heads = node.attr("num_heads", 0)
    if x.rank == 3:
        if not heads:
            raise ModelError("num_heads is required for a 3-D input")
        batch, length, hidden = x.shape
        head_size = floordiv(hidden, heads)
        work = (batch, length, const(heads), head_size)
        heads_of_x = call("reshape", emit.ref(x), shape_list(work), dtype=x.dtype, shape=work)
        xt = emit.ref(emit.intermediate(heads_of_x, "heads"))
        head_axis = 2
    else:
        batch, _, length, head_size = x.shape
        work, xt, head_axis = x.shape, emit.ref(x), 1
    dim = node.attr("rotary_embedding_dim", 0) or head_size
    dim = const(dim) if isinstance(dim, int) else dim
    if not dim.is_const or dim.value % 2:
        raise Unsupported(f"a rotary dimension of {dim} (an even number known when compiling)")
    if head_size.is_const and dim.value > head_size.value:
        raise ModelError(f"rotary_embedding_dim={dim} is larger than the head size {head_size}")
    half = dim.value // 2
    cache_shape = (batch, length, const(1), const(half)) if head_axis == 2 else (batch, const(1), length, const(half))
    caches = []
    for cache in (cos, sin):
        if cache.dtype != x.dtype or cache.rank != (2 if positions is not None else 3):
            raise ModelError(
                "the caches must be (max position, rotary dim / 2) with position ids, else (batch, seq, ...)"
            )
        if cache.shape[-1] != const(half):
            raise ModelError(f"the caches' last dim is {cache.shape[-1]}, not rotary_embedding_dim / 2 = {half}")
        picked = emit.ref(cache)
        if positions is not None:
            picked = read(picked, [emit.ref(positions)], positions.shape + cache.shape[1:])
        caches.append(call("unsqueeze", picked, num(head_axis), dtype=x.dtype, shape=cache_shape))
    c, s = (emit.ref(emit.temp(t, x.dtype, cache_shape, h)) for t, h in zip(caches, ("cos", "sin"), strict=True))
    interleaved = bool(node.attr("interleaved", 0))
    halves = (*work[:-1], const(half))
    pairs = (span(0, Size(dim), 2), span(1, Size(dim), 2)) if interleaved else (span(None, half), span(half, Size(dim)))
    lo, hi = (
        emit.ref(emit.temp(read(xt, [ELLIPSIS, pair], halves), x.dtype, halves, h))
        for pair, h in zip(pairs, ("x1", "x2"), strict=True)
    )
    real = emit.ref(emit.temp(c * lo - s * hi, x.dtype, halves, "real"))
    imag = emit.ref(emit.temp(s * lo + c * hi, x.dtype, halves, "imag"))
    rotated_shape = (*work[:-1], dim)
    rotated = _joined("concat", [real, imag], rotated_shape)
    if interleaved:
        stacked = call("stack", seq([real, imag]), dtype=x.dtype, shape=(*halves, const(2)), axis=num(-1))
        rotated = call("reshape", stacked, shape_list(rotated_shape), dtype=x.dtype, shape=rotated_shape)
    if dim != head_size:
        first = emit.ref(emit.temp(rotated, x.dtype, rotated_shape, "rotated"))
        rest = read(xt, [ELLIPSIS, span(Size(dim))], (*work[:-1], head_size - dim))
        rotated = _joined("concat", [first, rest], work)
    if x.rank == 3:
        whole = emit.ref(emit.temp(rotated, x.dtype, work, "rotated"))
        rotated = call("reshape", whole, shape_list(x.shape), dtype=x.dtype, shape=x.shape)
    return [emit.out(rotated, x.dtype, x.shape)]


def _joined(fn: str, parts: list[Node], shape: Shape) -> Node:
    """`concat([a, b], axis=-1)` of the parts' dtype, of the caller's shape."""
    return call(fn, seq(parts), dtype=parts[0].dtype, shape=shape, axis=num(-1))
