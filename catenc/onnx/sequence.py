"""Operators of sequence models: RotaryEmbedding, SwiGLU, and TopK with k known at import.

RotaryEmbedding is written in array form as the operator defines it (halves or interleaved pairs
rotated by the cos and sin caches, picked by position ids where given). TopK ranks each element
along the axis by comparisons in index form (the lower index first among equal values), then
picks the element of each rank below k.
"""

from __future__ import annotations

from catenc.onnx.emitter import Emitter
from catenc.onnx.registry import ModelError, OnnxNode, Unsupported, axis_of, converter, known_ints, need_float
from catenc.onnx.shape import shape_text
from catenc.onnx.values import Value
from catenc.onnx.values import literal as lit
from catenc.symbolic import const, floordiv


@converter("SwiGLU")
def swiglu(node: OnnxNode, emit: Emitter) -> list[Value]:
    a, b = node.need(0), node.need(1)
    need_float(node, a)
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ModelError("A and B must have one shape and one type")
    alpha = float(node.attr("alpha", 1.0))
    ta, tb = emit.text(a), emit.text(b)
    gate = f"sigmoid({ta})" if alpha == 1.0 else f"sigmoid({ta} * {lit(alpha, a.dtype)})"
    return [emit.out(f"{ta} * {gate} * {tb}", a.dtype, a.shape)]


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
    text = emit.text(x)
    idx = [i.name for i in emit.index_names().numbered(x.rank + 1)]
    p, q = idx[axis], idx[-1]

    def at(position: str) -> str:
        return f"{text}[{', '.join(position if a == axis else i for a, i in enumerate(idx[:-1]))}]"

    before = ">" if largest else "<"
    ahead = f"({at(q)} {before} {at(p)}) | (({at(q)} == {at(p)}) & ({q} < {p}))"
    size = lit(n, "i64")
    rank = emit.index_temp(idx[:-1], f"sum[{q} < {size}](where({ahead}, 1, 0))", "i64", x.shape, "rank")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    # output position r (the index named p) holds the element q of rank r
    ranked = f"{rank.name}[{', '.join(q if a == axis else i for a, i in enumerate(idx[:-1]))}] == {p}"
    positions = f"sum[{q} < {size}](where({ranked}, {q}, 0))"
    values = f"sum[{q} < {size}](where({ranked}, {at(q)}, 0))"
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
        batch, seq, hidden = x.shape
        head_size = floordiv(hidden, heads)
        work = (batch, seq, const(heads), head_size)
        xt = emit.temp(f"reshape({emit.text(x)}, {shape_text(work)})", x.dtype, work, "heads").name
        head_axis = 2
    else:
        batch, _, seq, head_size = x.shape
        work, xt, head_axis = x.shape, emit.text(x), 1
    dim = node.attr("rotary_embedding_dim", 0) or head_size
    dim = const(dim) if isinstance(dim, int) else dim
    if not dim.is_const or dim.value % 2:
        raise Unsupported(f"a rotary dimension of {dim} (an even number known when compiling)")
    if head_size.is_const and dim.value > head_size.value:
        raise ModelError(f"rotary_embedding_dim={dim} is larger than the head size {head_size}")
    half = dim.value // 2
    caches = []
    for cache in (cos, sin):
        if cache.dtype != x.dtype or cache.rank != (2 if positions is not None else 3):
            raise ModelError(
                "the caches must be (max position, rotary dim / 2) with position ids, else (batch, seq, ...)"
            )
        if cache.shape[-1] != const(half):
            raise ModelError(f"the caches' last dim is {cache.shape[-1]}, not rotary_embedding_dim / 2 = {half}")
        picked = f"{emit.text(cache)}[{emit.text(positions)}]" if positions is not None else emit.text(cache)
        caches.append(f"unsqueeze({picked}, {head_axis})")
    cache_shape = (batch, seq, const(1), const(half)) if head_axis == 2 else (batch, const(1), seq, const(half))
    c, s = (emit.temp(t, x.dtype, cache_shape, h).name for t, h in zip(caches, ("cos", "sin"), strict=True))
    interleaved = bool(node.attr("interleaved", 0))
    x1, x2 = (
        (f"{xt}[..., 0:{dim}:2]", f"{xt}[..., 1:{dim}:2]")
        if interleaved
        else (
            f"{xt}[..., :{half}]",
            f"{xt}[..., {half}:{dim}]",
        )
    )
    halves = (*work[:-1], const(half))
    lo, hi = (emit.temp(t, x.dtype, halves, h).name for t, h in zip((x1, x2), ("x1", "x2"), strict=True))
    real = emit.temp(f"{c} * {lo} - {s} * {hi}", x.dtype, halves, "real").name
    imag = emit.temp(f"{s} * {lo} + {c} * {hi}", x.dtype, halves, "imag").name
    rotated_shape = (*work[:-1], dim)
    if interleaved:
        rotated = f"reshape(stack([{real}, {imag}], axis=-1), {shape_text(rotated_shape)})"
    else:
        rotated = f"concat([{real}, {imag}], axis=-1)"
    if dim != head_size:
        rotated = f"concat([{emit.temp(rotated, x.dtype, rotated_shape, 'rotated').name}, {xt}[..., {dim}:]], axis=-1)"
    if x.rank == 3:
        rotated = f"reshape({emit.temp(rotated, x.dtype, work, 'rotated').name}, {shape_text(x.shape)})"
    return [emit.out(rotated, x.dtype, x.shape)]
