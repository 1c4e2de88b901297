"""Loop-nest rewrites that make the inner loops vector code.

A reduction loop `acc = op(acc, v)` carries a dependence through `acc` that a C compiler may not
break (float addition is not associative, and catenc never asks for -ffast-math), so it runs one
element per step. `split_reduction_lanes` gives it independent partial accumulators, one per
vector lane and two vectors deep, which the compiler maps onto vector registers.

`reuse_reduced_values` then keeps an expensive value computed for a reduction when a later loop
of the same row recomputes it for a store: softmax's `exp(x - max)` is computed once, stored
into the output while it is summed, and the last loop only divides. With vector math, an
`exp(v - t)` where t is the maximum of v over the same range (softmax's exp(x - max)) becomes
`exp(min(v - t, 0))`, the same function, which the renderer computes with the cheaper routine
for arguments <= 0 (no overflow handling; templates/vecmath.c.j2 states its accuracy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from catenc.dispatch import Table
from catenc.dtypes import DType
from catenc.ir.build import compute_dtype
from catenc.ir.nodes import Binary, Const, Load, Local, Unary, Value, contains, value_symbols, walk
from catenc.ir.passes import calls_expensive, replace_node, substitute
from catenc.lower.loops import Assign, Declare, For, LaneReduce, LoopKernel, Stmt, Store
from catenc.symbolic import Expr, sym

LANE_OPS = frozenset({"add", "mul", "max", "min"})
MAX_LANES = 64


def lanes_for(dtype: DType, vector_lanes: int) -> int:
    """Partial accumulators for a reduction in dtype: two vector registers' worth."""
    return min(MAX_LANES, max(4, 2 * vector_lanes * 4 // compute_dtype(dtype).itemsize))


def split_reduction_lanes(kernel: LoopKernel, storage: dict[str, DType]) -> LoopKernel:
    """Every simple reduction loop of the kernel as a LaneReduce with the lanes its decisions
    give (none: unchanged), reduced values reused (storage: each buffer's storage dtype)."""
    if not kernel.decisions.vector_lanes:
        return kernel
    body = _reuse(_rewrite(kernel.body, kernel.decisions.vector_lanes), storage)
    return replace(kernel, body=_bound_shifted_exps(body) if kernel.decisions.vector_math else body)


def jam_rows(kernel: LoopKernel) -> LoopKernel:
    """Rows of reductions jammed, as many at a time as the kernel's decisions say."""
    return kernel if kernel.decisions.jam < 2 else replace(kernel, body=_jam_rows(kernel.body, kernel.decisions.jam))


def _jam_rows(body: tuple[Stmt, ...], jam: int) -> tuple[Stmt, ...]:
    """A loop whose every iteration is one reduction and a few stores (a matrix-vector
    product: y[j] = f(sum_k w[j, k] * x[k])) runs `jam` iterations at a time, their reductions in
    one LaneReduce: several rows streamed at once and the vector x read once for all of them.
    The leftover iterations run as before."""
    out: list[Stmt] = []
    for stmt in body:
        stmt = stmt.with_children(_jam_rows(stmt.children(), jam))
        out += _jammed(stmt, jam) if isinstance(stmt, For) else [stmt]
    return tuple(out)


def _jammed(loop: For, jam: int) -> list[Stmt]:
    if len(loop.body) < 3 or loop.extent.is_const and loop.extent.value < 2 * jam:
        return [loop]
    start, reduce, *tail = loop.body
    if not (isinstance(start, Declare) and isinstance(start.value, Const) and isinstance(reduce, LaneReduce)):
        return [loop]
    if (
        reduce.acc != start.name
        or reduce.store is not None
        or reduce.more
        or loop.index in reduce.extent.free_symbols()
    ):
        return [loop]
    if loop.index not in value_symbols(reduce.value) or not all(isinstance(s, (Store, Declare)) for s in tail):
        return [loop]
    block = f"{loop.index}_jam"
    rows, jammed, reductions = [], [], []
    for r in range(jam):
        names = {start.name: f"{start.name}_{r}"} | {s.name: f"{s.name}_{r}" for s in tail if isinstance(s, Declare)}
        at = {loop.index: sym(block) * jam + r}
        rows.append(replace(start, name=names[start.name]))
        reductions.append((names[start.name], substitute(reduce.value, at)))
        jammed += [_renamed(s, names, at) for s in tail]
    (first, value), *more = reductions
    lanes = replace(reduce, acc=first, value=value, more=tuple(more))
    main = replace(loop, index=block, extent=loop.extent // jam, body=(*rows, lanes, *jammed))
    left = loop.extent % jam
    if left.is_const and left.value == 0:
        return [main]
    rest = f"{loop.index}_rest"
    at = {loop.index: (loop.extent // jam) * jam + sym(rest)}
    return [main, For(rest, left, tuple(_renamed(s, {}, at) for s in loop.body))]


_RENAMED: Table[Callable[[Stmt, dict[str, str], dict], Stmt]] = Table("_renamed")


def _renamed(stmt: Stmt, names: dict[str, str], at: dict) -> Stmt:
    """A statement with its locals renamed and the loop index replaced."""
    return _RENAMED[type(stmt)](stmt, names, at)


def _renamed_value(v: Value, names: dict[str, str], at: dict) -> Value:
    return _rename_locals(substitute(v, at), names)


@_RENAMED.register(Declare)
def _renamed_declare(stmt: Declare, names: dict[str, str], at: dict) -> Stmt:
    return replace(stmt, name=names.get(stmt.name, stmt.name), value=_renamed_value(stmt.value, names, at))


@_RENAMED.register(Store)
def _renamed_store(stmt: Store, names: dict[str, str], at: dict) -> Stmt:
    index = tuple(e.substitute(at) for e in stmt.index)
    return replace(stmt, index=index, value=_renamed_value(stmt.value, names, at))


@_RENAMED.register(LaneReduce)
def _renamed_lanes(stmt: LaneReduce, names: dict[str, str], at: dict) -> Stmt:
    return replace(stmt, value=_renamed_value(stmt.value, names, at), extent=stmt.extent.substitute(at))


def _rename_locals(v: Value, names: dict[str, str]) -> Value:
    if isinstance(v, Local) and v.name in names:
        return replace(v, name=names[v.name])
    return v.with_children(tuple(_rename_locals(c, names) for c in v.children()))


def _rewrite(body: tuple[Stmt, ...], vector_lanes: int) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, For):
            lane = _as_lanes(stmt, vector_lanes)
            out.append(lane if lane is not None else stmt.with_children(_rewrite(stmt.body, vector_lanes)))
        else:
            out.append(stmt.with_children(_rewrite(stmt.children(), vector_lanes)))
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
    out = [s.with_children(_reuse(s.children(), storage)) for s in body]
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
    if not contains(store.value, value):
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
    if isinstance(stmt, Store) and stmt.buffer in buffers:
        return True
    if isinstance(stmt, LaneReduce) and stmt.store is not None and stmt.store[0] in buffers:
        return True
    return any(_reads_or_writes_any(s, buffers) for s in stmt.children())


@dataclass(frozen=True)
class _Maximum:
    """A local that holds the maximum of `value` over `index` in 0..extent (and maybe more)."""

    index: str
    extent: Expr
    value: Value


def _bound_shifted_exps(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """Every exp(v - t) of a reduction over 0..n, where t holds the maximum of v over 0..n, as
    exp(min(v - t, 0)): the argument is <= 0 (or NaN) anyway, and the renderer spells an exp of a
    min with 0 as the cheaper routine for such arguments. Statement lists are scanned in order;
    a maximum is forgotten once its local is assigned or a buffer it reads is written."""
    out: list[Stmt] = []
    maxima: dict[str, _Maximum] = {}
    for stmt in body:
        stmt = stmt.with_children(_bound_shifted_exps(stmt.children()))
        if isinstance(stmt, LaneReduce):
            stmt = replace(stmt, **_bounded_values(stmt, maxima))
        for name, maximum in list(maxima.items()):
            if _reads_or_writes_any(stmt, _buffers_of(maximum.value)) or _assigns(stmt) & (
                {name} | {n.name for n in walk(maximum.value) if isinstance(n, Local)}
            ):
                del maxima[name]
        if isinstance(stmt, LaneReduce) and stmt.op == "max" and not stmt.more and stmt.dtype.is_float:
            maxima[stmt.acc] = _Maximum(stmt.index, stmt.extent, stmt.value)
        elif isinstance(stmt, Declare) and isinstance(stmt.value, Local) and stmt.value.name in maxima:
            maxima[stmt.name] = maxima[stmt.value.name]
        out.append(stmt)
    return tuple(out)


def _bounded_values(reduce: LaneReduce, maxima: dict[str, _Maximum]) -> dict[str, object]:
    """The value and more values of a LaneReduce with their shifted exps bounded."""

    def bounded(v: Value) -> Value:
        for name, maximum in maxima.items():
            if maximum.extent != reduce.extent:
                continue
            dtype, at = maximum.value.dtype, {maximum.index: sym(reduce.index)}
            shifted = Binary(dtype, "sub", substitute(maximum.value, at), Local(dtype, name))
            clamped = Binary(dtype, "min", shifted, Const(dtype, 0.0))
            v = replace_node(v, Unary(dtype, "exp", shifted), Unary(dtype, "exp", clamped))
        return v

    return {"value": bounded(reduce.value), "more": tuple((acc, bounded(v)) for acc, v in reduce.more)}


def _assigns(stmt: Stmt) -> set[str]:
    """The locals a statement (and the statements inside it) assigns or declares."""
    if isinstance(stmt, (Assign, Declare)):
        return {stmt.name}
    if isinstance(stmt, LaneReduce):
        return {acc for acc, _ in stmt.reductions}
    return set().union(*(_assigns(s) for s in stmt.children()))
