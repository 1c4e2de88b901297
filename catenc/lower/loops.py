"""Lowering kernels to loop nests: the one IR that optimisations and renderers work on.

Each kernel becomes loops over its rows; inside, each member's own loops, stores and
accumulators. A reduction becomes an accumulator and a loop, placed at the outermost loop level
where everything it reads is defined (so `x[i, j] - max[k](x[i, k])` computes the max once per
row); a reduction under a `where` guard stays under an `if` so guarded reads stay guarded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import count

from catenc.dispatch import Table
from catenc.dtypes import BOOL, I64, DType
from catenc.ir.cost import compute_work
from catenc.ir.nodes import (
    Binary,
    Compute,
    Const,
    Load,
    Local,
    Reduce,
    SymInt,
    Unary,
    Value,
    Where,
    format_value,
    value_symbols,
    walk,
)
from catenc.ir.passes import replace_node, substitute
from catenc.registry import EXPENSIVE_OPS
from catenc.schedule.contractions import Contraction
from catenc.schedule.interchange import COMBINE, strided_reduction
from catenc.schedule.kernels import Decisions, Kernel, Schedule, gemm_ops
from catenc.schedule.winograd import WinogradLayout, WinogradPlan, contraction_plan
from catenc.symbolic import ONE, ZERO, Expr, call_atoms, sym


@dataclass(frozen=True)
class Stmt:
    """A statement of a loop nest; `child_fields` names the field that holds its nested
    statements (a loop's or an if's body: one at most), as `Value.child_fields` does for values."""

    child_fields = ()

    def children(self) -> tuple[Stmt, ...]:
        return tuple(stmt for name in self.child_fields for stmt in getattr(self, name))

    def with_children(self, children: tuple[Stmt, ...]) -> Stmt:
        """The same statement over a new body (a pass's way to rebuild a nest)."""
        if not self.child_fields:
            return self
        (name,) = self.child_fields
        return replace(self, **{name: tuple(children)})


@dataclass(frozen=True)
class For(Stmt):
    index: str
    extent: Expr
    body: tuple[Stmt, ...]
    parallel: bool = False
    scalar: bool = False  # the compiler is asked not to vectorise it (lower/strided.py)
    child_fields = ("body",)


@dataclass(frozen=True)
class Declare(Stmt):
    name: str
    dtype: DType
    value: Value


@dataclass(frozen=True)
class Assign(Stmt):
    name: str
    value: Value


@dataclass(frozen=True)
class If(Stmt):
    cond: Value
    body: tuple[Stmt, ...]
    child_fields = ("body",)


@dataclass(frozen=True)
class Store(Stmt):
    buffer: str
    index: tuple[Expr, ...]
    value: Value


@dataclass(frozen=True)
class LaneReduce(Stmt):
    """`acc = op(acc, value)` for index in 0..extent, kept in `lanes` independent partial
    accumulators (lane l takes the indices = l mod lanes) combined in a fixed order at the end:
    vector code without reassociating across a compiler's back."""

    acc: str
    op: str
    dtype: DType
    index: str
    extent: Expr
    value: Value
    lanes: int
    store: tuple[str, tuple[Expr, ...]] | None = None  # also store each value at buffer[index]
    more: tuple[tuple[str, Value], ...] = ()  # more (acc, value) reduced in the same loop (jammed rows)

    @property
    def reductions(self) -> tuple[tuple[str, Value], ...]:
        """Every (accumulator, value) the loop reduces."""
        return ((self.acc, self.value),) + self.more


@dataclass(frozen=True)
class Gemm(Stmt):
    """One call of the packed gemm driver for `contraction` (panels in buffer `pack`)."""

    contraction: Contraction
    pack: str


@dataclass(frozen=True)
class WinogradGemm(Gemm):
    """A Gemm computed as Winograd F(m x m, 3 x 3), as `plan` says (catenc/schedule/winograd.py):
    per batch element, the transformed input of each block of tile rows, (m + 2)^2 products by the
    transformed filters, and the output transform with the contraction's epilogue."""

    plan: WinogradPlan
    layout: WinogradLayout  # its workspace (the panels buffer)


PLANE_ROW, PLANE_COL = "catenc_plane_row", "catenc_plane_col"  # a PaddedPlane value's position


@dataclass(frozen=True)
class PaddedPlane(Stmt):
    """`name`: a local array holding `fill` around `value` evaluated at every position
    (PLANE_ROW, PLANE_COL) of a plane of `plane` (rows, columns) (a load of a buffer's last two
    axes, or a fused producer's value there), placed at `offset` (top, left) of a padded plane
    stored as `phases` arrays of `shape` (rows, columns): phase p holds the padded columns p,
    p + phases, ... (a stride-2 window reads two phases, each at consecutive columns). A padded
    window reads it where it read `where(in bounds, value, fill)`: no guards (lower/pad.py)."""

    name: str
    value: Value
    plane: tuple[int, int]
    shape: tuple[int, int]
    offset: tuple[int, int]
    fill: Const
    phases: int = 1


@dataclass(frozen=True)
class LoopKernel:
    name: str
    body: tuple[Stmt, ...]
    buffers: tuple[str, ...]  # buffers it reads or writes, in graph order
    symbols: tuple[str, ...]  # free symbols it needs, sorted
    fused: tuple[str, ...]  # names of the computes it evaluates
    flops: Expr
    work: Expr  # flops plus elements stored: what decides whether threads pay off
    decisions: Decisions  # how it runs, as the schedule decided
    shares: str | None = None  # the earlier kernel whose function this one calls (lower/share.py)


@dataclass(frozen=True)
class LoopProgram:
    """The loop nests of one schedule: the structure the loop passes rewrite."""

    schedule: Schedule
    kernels: tuple[LoopKernel, ...]


@dataclass(eq=False)  # each frame is its own loop: hashed and compared by identity
class _Frame:
    index: str | None
    extent: Expr
    stmts: list[Stmt] = field(default_factory=list)


def lower_schedule(schedule: Schedule, symbol: str) -> LoopProgram:
    """Every kernel of a schedule as a loop nest, named `<symbol>_k<n>`; a kernel the schedule
    runs on threads gets its outermost iterating loop marked parallel."""
    taken = _names_in_use(schedule)
    kernels = (_lower_kernel(schedule, kernel, taken) for kernel in schedule.kernels)
    return LoopProgram(schedule, tuple(replace(k, name=f"{symbol}_k{n}") for n, k in enumerate(kernels)))


def _lower_kernel(schedule: Schedule, kernel: Kernel, taken: set[str]) -> LoopKernel:
    """One kernel's loop nest; `taken` are the names its new locals must not shadow."""
    if kernel.contraction is not None:
        return _lower_gemm(schedule, kernel)
    lowerer = _KernelLowerer(kernel, taken)
    outer_names = [name for name, _ in kernel.outer]
    row = _Frame(None, ONE)
    flops = stored = ZERO
    for member in kernel.members:
        mapping: dict[str, Expr] = {}
        for (name, _), (outer, extent) in zip(member.indices, kernel.outer):
            mapping[name] = ZERO if extent == ONE else sym(outer)
        inner = []
        for name, extent in member.indices[len(outer_names) :]:
            if extent == ONE:
                mapping[name] = ZERO
            else:
                inner.append((name, extent))
        body = substitute(member.body, mapping)
        frames = [row] + [_Frame(name, extent) for name, extent in inner]
        index = tuple(mapping.get(name, sym(name)) for name, _ in member.indices)
        if _interchanges(kernel, member, inner, schedule.graph.buffer(member.name).dtype):
            lowerer.interchanged(frames, member.name, index, body)
        else:
            lowerer.stack = frames
            value = lowerer.lower(body, ())
            if member.name in kernel.scalars:
                frames[-1].stmts.append(Declare(member.name, value.dtype, value))
            else:
                frames[-1].stmts.append(Store(member.name, index, value))
        _close(frames, 1)
        flops = flops + compute_work(member).ops
        if member.name not in kernel.scalars:
            stored = stored + _product(e for _, e in member.indices)
    body: tuple[Stmt, ...] = tuple(row.stmts)
    # the outermost loop that iterates runs in parallel (unit loops are only declarations)
    first = next((k for k, (_, extent) in enumerate(kernel.outer) if extent != ONE), None)
    for k, (name, extent) in reversed(list(enumerate(kernel.outer))):
        if extent != ONE:  # a unit loop's index is 0 wherever it is used
            body = (For(name, extent, body, kernel.decisions.parallel and k == first),)
    return _loop_kernel(schedule, kernel, body, flops, flops + stored)


def _lower_gemm(schedule: Schedule, kernel: Kernel) -> LoopKernel:
    """One gemm statement: a driver call per batch element (the renderer threads the batch or
    the driver)."""
    c = kernel.contraction
    plan = contraction_plan(c, kernel.decisions.winograd, {b.name: b for b in schedule.graph.buffers})
    flops = gemm_ops(c, plan)
    if plan is None:
        return _loop_kernel(schedule, kernel, (Gemm(c, kernel.pack),), flops, flops)
    layout = plan.layout(dict(schedule.tiles)[c.kind], kernel.decisions.parallel)
    return _loop_kernel(schedule, kernel, (WinogradGemm(c, kernel.pack, plan, layout),), flops, flops)


def _loop_kernel(schedule: Schedule, kernel: Kernel, body: tuple[Stmt, ...], flops: Expr, work: Expr) -> LoopKernel:
    """The loop kernel of a body: the buffers it touches and the symbols it needs."""
    graph = schedule.graph
    buffers = _buffers(body, [b.name for b in graph.buffers])
    strides = {name for b in graph.buffers if b.name in buffers for dim in b.shape for name in dim.free_symbols()}
    symbols = sorted((_free_symbols(body) | strides) - _bound_names(body))
    fused = tuple(m.name for m in kernel.members)
    return LoopKernel(kernel.name, body, buffers, tuple(symbols), fused, flops, work, kernel.decisions)


def _names_in_use(schedule: Schedule) -> set[str]:
    """Buffer, symbol and index names of the graph: new locals must not shadow any."""
    graph = schedule.graph
    names = {b.name for b in graph.buffers}
    for b in graph.buffers:
        for dim in b.shape:
            names |= dim.free_symbols()
    for compute in graph.computes:
        names |= {n for n, _ in compute.indices} | value_symbols(compute.body)
        names |= {n for node in walk(compute.body) if isinstance(node, Reduce) for n, _ in node.indices}
    return names


def _close(frames: list[_Frame], down_to: int) -> None:
    """Wrap frames[down_to:] into nested For loops appended to frames[down_to - 1]."""
    for k in range(len(frames) - 1, down_to - 1, -1):
        frame = frames[k]
        if frame.stmts:
            frames[k - 1].stmts.append(For(frame.index, frame.extent, tuple(frame.stmts)))
    del frames[down_to:]


class _KernelLowerer:
    def __init__(self, kernel: Kernel, taken: set[str]):
        self.kernel = kernel
        self.stack: list[_Frame] = []
        self.serial = count()
        self.reduced: dict[tuple, Value] = {}
        self.hoisted: dict[tuple, Value] = {}
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name = f"{base}{next(self.serial)}"
        while name in self.taken:
            name = f"{base}{next(self.serial)}"
        return name

    _LOWER: Table[Callable[[_KernelLowerer, Value, tuple[Value, ...]], Value]] = Table("lower")

    def lower(self, value: Value, guards: tuple[Value, ...]) -> Value:
        """The value as the loop nest computes it: its reductions and its hoisted parts
        computed into locals in enclosing frames, `guards` the conditions it sits under."""
        return self._LOWER[type(value)](self, value, guards)

    @_LOWER.register(Value)
    def lower_node(self, value: Value, guards: tuple[Value, ...]) -> Value:
        if not guards and _worth_hoisting(value):
            hoisted = self.hoist(value)
            if hoisted is not None:
                return hoisted
        return value.with_children(tuple(self.lower(c, guards) for c in value.children()))

    @_LOWER.register(Load)
    def lower_load(self, value: Load, guards: tuple[Value, ...]) -> Value:
        if value.buffer in self.kernel.scalars:
            return Local(value.dtype, value.buffer)
        return self.lower_node(value, guards)

    @_LOWER.register(Where)
    def lower_where(self, value: Where, guards: tuple[Value, ...]) -> Value:
        cond = self.lower(value.cond, guards)
        a = self.lower(value.a, guards + (cond,))
        b = self.lower(value.b, guards + (Unary(BOOL, "not", cond),))
        return Where(value.dtype, cond, a, b)

    def interchanged(self, frames: list[_Frame], name: str, index: tuple[Expr, ...], body: Value) -> None:
        """A compute whose one reduction runs outside its last loop (frames[-1], dropped):
        `name[..., d]` starts at the reduction's identity, each step of the reduction's loops
        combines into it over d, then the rest of the body finishes it over d."""
        last = frames.pop()
        reduce = next(node for node in walk(body) if isinstance(node, Reduce))
        acc = Load(reduce.dtype, name, index)
        start = Store(name, index, Const(reduce.dtype, identity(reduce.op, reduce.dtype)))
        frames[-1].stmts.append(For(last.index, last.extent, (start,)))
        self.stack = frames + [_Frame(n, e) for n, e in reduce.indices] + [_Frame(last.index, last.extent)]
        step = Binary(reduce.dtype, COMBINE[reduce.op], acc, self.lower(reduce.body, ()))
        self.stack[-1].stmts.append(Store(name, index, step))
        _close(self.stack, len(frames))
        rest = replace_node(body, reduce, acc)
        if rest != acc:
            self.stack = frames + [_Frame(last.index, last.extent)]
            self.stack[-1].stmts.append(Store(name, index, self.lower(rest, ())))
            _close(self.stack, len(frames))

    def hoist(self, value: Value) -> Value | None:
        """A value the innermost loop does not change, computed once into a local in the outermost
        loop it depends on (`rsqrt(var[n, c // D] + eps)` per channel, not per pixel); None where
        it changes with the innermost loop, or where a loop it would leave never runs (its body's
        indices were simplified under the empty range, so the value may read out of bounds)."""
        used = value_symbols(value)
        target = max((level for level, frame in enumerate(self.stack) if frame.index in used), default=0)
        if target >= len(self.stack) - 1 or any(_never_runs(f.extent) for f in self.stack[target + 1 :]):
            return None
        key = (value, tuple(self.stack))
        if key not in self.hoisted:
            saved = self.stack
            self.stack = saved[: target + 1]
            lowered = value.with_children(tuple(self.lower(c, ()) for c in value.children()))
            self.stack = saved
            name = self.fresh("h")
            saved[target].stmts.append(Declare(name, value.dtype, lowered))
            self.hoisted[key] = Local(value.dtype, name)
        return self.hoisted[key]

    @_LOWER.register(Reduce)
    def reduce(self, value: Reduce, guards: tuple[Value, ...]) -> Value:
        frames = tuple(self.stack)  # the frames themselves: an id() could be a dead frame's, reused
        unguarded = self.reduced.get((value, (), frames))
        if unguarded is not None:
            return unguarded
        key = (value, guards, frames)
        if key not in self.reduced:
            self.reduced[key] = self._reduce(value, guards)
        return self.reduced[key]

    def _reduce(self, value: Reduce, guards: tuple[Value, ...]) -> Value:
        bound = {name for name, _ in value.indices}
        used = value_symbols(value.body) - bound
        target = 0
        for level, frame in enumerate(self.stack):
            if frame.index in used:
                target = level
        if guards:
            target = len(self.stack) - 1
        saved = self.stack
        self.stack = saved[: target + 1] + [_Frame(name, extent) for name, extent in value.indices]
        body = self.lower(value.body, ())
        declares, updates, result = _accumulate(value, body, self.fresh)
        self.stack[-1].stmts.extend(updates)
        depth = target + 1
        loops_frame = _Frame(None, ONE)
        frames = [loops_frame] + self.stack[depth:]
        _close(frames, 1)
        self.stack = saved
        stmts: list[Stmt] = list(declares)
        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = Binary(BOOL, "and", cond, g)
            stmts.append(If(cond, tuple(loops_frame.stmts)))
        else:
            stmts.extend(loops_frame.stmts)
        saved[target].stmts.extend(stmts)
        return result


def _interchanges(kernel: Kernel, member: Compute, inner: list[tuple[str, Expr]], storage: DType) -> bool:
    """Whether the kernel's decision to interchange applies to this member: a stored value
    whose last index is an inner loop and whose reduction runs down a strided axis."""
    return (
        kernel.decisions.interchange
        and member.name not in kernel.scalars
        and bool(inner)
        and inner[-1][0] == member.indices[-1][0]
        and strided_reduction(member, storage) is not None
    )


def _never_runs(extent: Expr) -> bool:
    return extent.is_const and extent.value <= 0


def _worth_hoisting(value: Value) -> bool:
    """An expensive op, or a load at an index that divides: worth a local outside the loops
    that do not change it."""
    if isinstance(value, (Unary, Binary)):
        return value.op in EXPENSIVE_OPS
    return type(value) is Load and any(call_atoms(e) for e in value.index)


def _accumulate(value: Reduce, body: Value, fresh) -> tuple[list[Stmt], list[Stmt], Value]:
    """Accumulator declarations, per-iteration updates and the result of a reduction."""
    dtype = value.dtype
    if value.op in ("argmax", "argmin"):
        best, pos, item = fresh("best"), fresh("pos"), fresh("v")
        (index, _) = value.indices[0]
        item_local = Local(body.dtype, item)
        best_local = Local(body.dtype, best)
        better = (
            Binary(BOOL, "lt", best_local, item_local)
            if value.op == "argmax"
            else Binary(BOOL, "lt", item_local, best_local)
        )
        if body.dtype.is_float:
            nan_item = Unary(BOOL, "isnan", item_local)
            best_ok = Unary(BOOL, "not", Unary(BOOL, "isnan", best_local))
            better = Binary(BOOL, "and", best_ok, Binary(BOOL, "or", better, nan_item))
        first = Binary(BOOL, "eq", SymInt(I64, sym(index)), Const(I64, 0))
        cond = Binary(BOOL, "or", first, better)
        declares = [
            Declare(best, body.dtype, Const(body.dtype, 0)),
            Declare(pos, I64, Const(I64, 0)),
        ]
        updates = [
            Declare(item, body.dtype, body),
            If(cond, (Assign(best, item_local), Assign(pos, SymInt(I64, sym(index))))),
        ]
        return declares, updates, Local(I64, pos)
    acc = fresh("acc")
    local = Local(dtype, acc)
    declares = [Declare(acc, dtype, Const(dtype, identity(value.op, dtype)))]
    return declares, [Assign(acc, Binary(dtype, COMBINE[value.op], local, body))], local


def identity(op: str, dtype: DType) -> bool | int | float:
    if op == "sum":
        return 0.0 if dtype.is_float else 0
    if op == "prod":
        return 1.0 if dtype.is_float else 1
    if dtype.is_float:
        return -math.inf if op == "max" else math.inf
    bits = dtype.bits
    if dtype.kind == "uint":
        return 0 if op == "max" else (1 << bits) - 1
    return -(1 << (bits - 1)) if op == "max" else (1 << (bits - 1)) - 1


def _product(exprs) -> Expr:
    total = ONE
    for e in exprs:
        total = total * e
    return total


def iter_stmts(body: tuple[Stmt, ...]):
    """Every statement of a body, nested ones included (any statement with children: loops,
    ifs, and the GPU lowering's shared loops)."""
    for stmt in body:
        yield stmt
        yield from iter_stmts(stmt.children())


_VALUES: Table[Callable[[Stmt], list[Value]]] = Table("stmt_values")


def stmt_values(stmt: Stmt) -> list[Value]:
    """The values a statement computes (not those of its nested statements)."""
    return _VALUES[type(stmt)](stmt)


@_VALUES.register(Stmt)
def _no_values(stmt: Stmt) -> list[Value]:
    return []


@_VALUES.register(LaneReduce)
def _reduced_values(stmt: LaneReduce) -> list[Value]:
    return [value for _, value in stmt.reductions]


@_VALUES.register(Declare, Assign, Store, PaddedPlane)
def _assigned_value(stmt: Declare | Assign | Store | PaddedPlane) -> list[Value]:
    return [stmt.value]


@_VALUES.register(If)
def _condition(stmt: If) -> list[Value]:
    return [stmt.cond]


@_VALUES.register(Gemm)
def _operands(stmt: Gemm) -> list[Value]:
    c = stmt.contraction
    return [c.a, c.b] + ([c.epilogue] if c.epilogue is not None else [])


def gemm_axes(gemm: Gemm) -> tuple[tuple[str, Expr], ...]:
    c = gemm.contraction
    return c.batch + c.rows + c.cols + c.depth


# What a statement itself writes, binds and needs (of its own fields; its values' loads and
# symbols are added by the walks below).
_WRITES: Table[Callable[[Stmt], set[str]]] = Table("buffers written")
_BINDS: Table[Callable[[Stmt], set[str]]] = Table("names bound")
_NEEDS: Table[Callable[[Stmt], set[str]]] = Table("symbols needed")


@_WRITES.register(Stmt)
@_BINDS.register(Stmt)
def _nothing(stmt: Stmt) -> set[str]:
    return set()


@_WRITES.register(Store)
def _stored(stmt: Store) -> set[str]:
    return {stmt.buffer}


@_WRITES.register(LaneReduce)
def _lanes_stored(stmt: LaneReduce) -> set[str]:
    return set() if stmt.store is None else {stmt.store[0]}


@_WRITES.register(Gemm)
def _gemm_writes(stmt: Gemm) -> set[str]:
    return {stmt.contraction.output, stmt.pack}


@_BINDS.register(For, LaneReduce)
def _loop_index(stmt: For | LaneReduce) -> set[str]:
    return {stmt.index}


@_BINDS.register(Declare)
def _declared(stmt: Declare) -> set[str]:
    return {stmt.name}


@_BINDS.register(Gemm)
def _gemm_indices(stmt: Gemm) -> set[str]:
    return {name for name, _ in gemm_axes(stmt)}


@_NEEDS.register(Stmt)
def _needs_nothing(stmt: Stmt) -> set[str]:
    return set()


@_NEEDS.register(For, LaneReduce)
def _extent_symbols(stmt: For | LaneReduce) -> set[str]:
    return stmt.extent.free_symbols()


@_NEEDS.register(Gemm)
def _gemm_symbols(stmt: Gemm) -> set[str]:
    c = stmt.contraction
    out = c.offset.free_symbols() | c.row_stride.free_symbols() | c.col_stride.free_symbols()
    return out.union(*(extent.free_symbols() for _, extent in gemm_axes(stmt)))


@_NEEDS.register(Store)
def _index_symbols(stmt: Store) -> set[str]:
    return set().union(*(e.free_symbols() for e in stmt.index))


def _buffers(body: tuple[Stmt, ...], order: list[str]) -> tuple[str, ...]:
    names: set[str] = set()
    for stmt in iter_stmts(body):
        names |= _WRITES[type(stmt)](stmt)
        for v in stmt_values(stmt):
            names |= {n.buffer for n in walk(v) if isinstance(n, Load)}
    return tuple(n for n in order if n in names)


def _bound_names(body: tuple[Stmt, ...]) -> set[str]:
    return set().union(*(_BINDS[type(stmt)](stmt) for stmt in iter_stmts(body)))


def _free_symbols(body: tuple[Stmt, ...]) -> set[str]:
    out: set[str] = set()
    for stmt in iter_stmts(body):
        out |= _NEEDS[type(stmt)](stmt)
        for v in stmt_values(stmt):
            out |= value_symbols(v)
    return out


# ---- printing ----------------------------------------------------------------------------------


def format_loops(kernels: tuple[LoopKernel, ...]) -> str:
    lines: list[str] = []
    for kernel in kernels:
        args = ", ".join(list(kernel.buffers) + list(kernel.symbols))
        lines.append(f"kernel {kernel.name}({args}):  # fuses {', '.join(kernel.fused)}")
        format_body(kernel.body, 1, lines)
    return "\n".join(lines)


_FORMAT: Table[Callable[[Stmt, str, int, list[str]], None]] = Table("format_body")


def format_body(body: tuple[Stmt, ...], depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for stmt in body:
        _FORMAT[type(stmt)](stmt, pad, depth, lines)


@_FORMAT.register(Stmt)
def _format_nothing(stmt: Stmt, pad: str, depth: int, lines: list[str]) -> None:
    """Statements of later lowerings print through their own printers (lower/gpu.py)."""


@_FORMAT.register(For)
def _format_for(stmt: For, pad: str, depth: int, lines: list[str]) -> None:
    mark = "parallel " if stmt.parallel else "scalar " if stmt.scalar else ""
    lines.append(f"{pad}{mark}for {stmt.index} in 0..{stmt.extent}:")
    format_body(stmt.body, depth + 1, lines)


@_FORMAT.register(If)
def _format_if(stmt: If, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}if {format_value(stmt.cond)}:")
    format_body(stmt.body, depth + 1, lines)


@_FORMAT.register(Declare)
def _format_declare(stmt: Declare, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}{stmt.dtype.name} {stmt.name} = {format_value(stmt.value)}")


@_FORMAT.register(Assign)
def _format_assign(stmt: Assign, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}{stmt.name} = {format_value(stmt.value)}")


@_FORMAT.register(Store)
def _format_store(stmt: Store, pad: str, depth: int, lines: list[str]) -> None:
    idx = ", ".join(str(e) for e in stmt.index)
    lines.append(f"{pad}{stmt.buffer}[{idx}] = {format_value(stmt.value)}")


@_FORMAT.register(LaneReduce)
def _format_lanes(stmt: LaneReduce, pad: str, depth: int, lines: list[str]) -> None:
    stored = ""
    if stmt.store is not None:
        stored = f", stored to {stmt.store[0]}[{', '.join(str(e) for e in stmt.store[1])}]"
    updates = "; ".join(f"{acc} = {stmt.op}({acc}, {format_value(v)})" for acc, v in stmt.reductions)
    lines.append(f"{pad}{updates} for {stmt.index} in 0..{stmt.extent}  # {stmt.lanes} lanes{stored}")


@_FORMAT.register(PaddedPlane)
def _format_plane(stmt: PaddedPlane, pad: str, depth: int, lines: list[str]) -> None:
    (rows, cols), (top, left), (height, width) = stmt.shape, stmt.offset, stmt.plane
    at = f"{PLANE_ROW} < {height}, {PLANE_COL} < {width}"
    lines.append(
        f"{pad}{stmt.name}[{stmt.phases}, {rows}, {cols}] = {format_value(stmt.fill)}, "
        f"{format_value(stmt.value)} for {at} at [{top}, {left}]"
        + (f" in {stmt.phases} column phases" if stmt.phases > 1 else "")
    )


@_FORMAT.register(WinogradGemm)
def _format_winograd(stmt: WinogradGemm, pad: str, depth: int, lines: list[str]) -> None:
    _format_gemm(stmt, pad, depth, lines)
    plan, m = stmt.plan, stmt.plan.transform.m
    inner = pad + ("  " if stmt.contraction.batch else "")
    lines.append(
        f"{inner}  as winograd F({m}x{m}, 3x3): {plan.tile_rows}x{plan.tile_cols} tiles in blocks of "
        f"{plan.block_rows} tile rows"
    )


@_FORMAT.register(Gemm)
def _format_gemm(stmt: Gemm, pad: str, depth: int, lines: list[str]) -> None:
    c = stmt.contraction

    def axes(pairs) -> str:
        return ", ".join(f"{n} < {e}" for n, e in pairs)

    if c.batch:
        lines.append(f"{pad}for each ({axes(c.batch)}):")
        pad += "  "
    lines.append(
        f"{pad}gemm {c.output}[{c.offset} + m*{c.row_stride} + n*{c.col_stride}] = "
        f"sum[{axes(c.depth)}](a * b), m = ({axes(c.rows)}), n = ({axes(c.cols)}), panels in {stmt.pack}"
    )
    lines.append(f"{pad}  a = {format_value(c.a)}")
    lines.append(f"{pad}  b = {format_value(c.b)}")
    if c.epilogue is not None:
        lines.append(f"{pad}  then {c.output}[...] = {format_value(c.epilogue)}")
