"""Loop-nest rewrites that make the inner loops vector code.

A reduction loop `acc = op(acc, v)` carries a dependence through `acc` that a C compiler may not
break (float addition is not associative, and catenc never asks for -ffast-math), so it runs one
element per step. `split_reduction_lanes` gives it independent partial accumulators, one per
vector lane and two vectors deep, which the compiler maps onto vector registers.

`reuse_reduced_values` then keeps an expensive value computed for a reduction when a later loop
of the same row recomputes it for a store: softmax's `exp(x - max)` is computed once, stored
into the output while it is summed, and the last loop only divides.
"""

from __future__ import annotations

from dataclasses import replace

from catenc.dtypes import DType
from catenc.ir.nodes import Binary, Load, Local, Value, walk
from catenc.ir.passes import calls_expensive, replace_node, substitute
from catenc.lower.loops import Assign, For, If, LaneReduce, LoopKernel, Stmt, Store
from catenc.symbolic import sym

LANE_OPS = frozenset({"add", "mul", "max", "min"})
MAX_LANES = 64


def lanes_for(dtype: DType, vector_lanes: int) -> int:
    """Partial accumulators for a reduction in dtype: two vector registers' worth."""
    itemsize = 4 if dtype.name in ("f16", "bf16") else dtype.itemsize
    return min(MAX_LANES, max(4, 2 * vector_lanes * 4 // itemsize))


def split_reduction_lanes(kernel: LoopKernel, vector_lanes: int, storage: dict[str, DType]) -> LoopKernel:
    """Every simple reduction loop of the kernel as a LaneReduce, and reduced values reused
    (storage: each buffer's storage dtype)."""
    return replace(kernel, body=_reuse(_rewrite(kernel.body, vector_lanes), storage))


def _rewrite(body: tuple[Stmt, ...], vector_lanes: int) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, For):
            lane = _as_lanes(stmt, vector_lanes)
            out.append(lane if lane is not None else replace(stmt, body=_rewrite(stmt.body, vector_lanes)))
        elif isinstance(stmt, If):
            out.append(replace(stmt, body=_rewrite(stmt.body, vector_lanes)))
        else:
            out.append(stmt)
    return tuple(out)


def _as_lanes(loop: For, vector_lanes: int) -> LaneReduce | None:
    if len(loop.body) != 1 or not isinstance(loop.body[0], Assign):
        return None
    assign = loop.body[0]
    update = assign.value
    if not (isinstance(update, Binary) and update.op in LANE_OPS and update.a == Local(update.dtype, assign.name)):
        return None
    if update.dtype.name == "bool" or any(isinstance(n, Local) and n.name == assign.name for n in walk(update.b)):
        return None
    lanes = lanes_for(update.dtype, vector_lanes)
    if loop.extent.is_const and loop.extent.value < 2 * lanes:
        return None
    return LaneReduce(assign.name, update.op, update.dtype, loop.index, loop.extent, update.b, lanes)


def _reuse(body: tuple[Stmt, ...], storage: dict[str, DType]) -> tuple[Stmt, ...]:
    """reuse_reduced_values over every statement list of a loop nest."""
    out = [replace(s, body=_reuse(s.body, storage)) if isinstance(s, (For, If)) else s for s in body]
    for k, stmt in enumerate(out):
        if not isinstance(stmt, LaneReduce) or stmt.store is not None or not calls_expensive(stmt.value):
            continue
        for j in range(k + 1, len(out)):
            later = out[j]
            rewritten = _store_and_reload(stmt, later, storage)
            if rewritten is not None:
                out[k], out[j] = rewritten
                break
            if _reads_or_writes_any(later, _buffers_of(stmt.value)):
                break
    return tuple(out)


def _store_and_reload(reduce: LaneReduce, loop: Stmt, storage: dict[str, DType]) -> tuple[LaneReduce, For] | None:
    """When `loop` stores y[index] = f(value) over the reduction's range, with the value the
    reduction reduces: store the value while reducing, and let the loop read it back."""
    if not (isinstance(loop, For) and not loop.parallel and len(loop.body) == 1 and loop.extent == reduce.extent):
        return None
    store = loop.body[0]
    if not isinstance(store, Store) or reduce.index in _names(store):
        return None
    value = substitute(reduce.value, {reduce.index: sym(loop.index)})
    if not _contains(store.value, value):
        return None
    # the value read back must be the reduced one exactly: stored in the dtype it is computed in
    if storage[store.buffer] != reduce.dtype or reduce.dtype.name in ("f16", "bf16", "bool"):
        return None
    if any(isinstance(n, Load) and n.buffer == store.buffer for n in walk(reduce.value)):
        return None
    load = Load(reduce.dtype, store.buffer, store.index)
    back = tuple(e.substitute({loop.index: sym(reduce.index)}) for e in store.index)
    reduced = replace(reduce, store=(store.buffer, back))
    return reduced, replace(loop, body=(replace(store, value=replace_node(store.value, value, load)),))


def _contains(value: Value, part: Value) -> bool:
    return any(n == part for n in walk(value))


def _names(store: Store) -> set[str]:
    names = set().union(*(e.free_symbols() for e in store.index)) if store.index else set()
    for node in walk(store.value):
        if isinstance(node, Load):
            for e in node.index:
                names |= e.free_symbols()
    return names


def _buffers_of(value: Value) -> set[str]:
    return {n.buffer for n in walk(value) if isinstance(n, Load)}


def _reads_or_writes_any(stmt: Stmt, buffers: set[str]) -> bool:
    """Whether a statement between the two could change what the reduced value reads."""
    inner = stmt.body if isinstance(stmt, (For, If)) else ()
    if isinstance(stmt, Store) and stmt.buffer in buffers:
        return True
    if isinstance(stmt, LaneReduce) and stmt.store is not None and stmt.store[0] in buffers:
        return True
    return any(_reads_or_writes_any(s, buffers) for s in inner)
