"""The operations a loop kernel executes, counted from its final loop nest at given sizes: an
independent check of the cost model (catenc/ir/cost.py), which counts from the graph.

An operation is a Unary or Binary node with a load or a local below it (arithmetic on indices
and sizes alone is the C compiler's business), counted once per statement where a statement
repeats a subexpression (the C compiler evaluates it once). A loop runs its body once per
iteration; an `if` or a `where` whose condition reads only indices and sizes runs the side its
condition picks at each iteration (evaluated, loop by loop, for the indices it reads); one whose
condition reads data counts both sides (the compiler evaluates both and selects). A lane
reduction counts the loops it expands into (catenc/lower/lanes.py); a gemm counts 2*M*N*K, the
useful work of its driver (padded edge tiles excluded), its operands once per element and its
epilogue once per output.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from catenc.dispatch import Table
from catenc.ir.evaluate import index_value
from catenc.ir.nodes import Binary, Load, Local, Unary, Value, Where
from catenc.lower.lanes import LaneLoops, Storage, expand_lanes
from catenc.lower.loops import (
    PLANE_COL,
    PLANE_ROW,
    Assign,
    Declare,
    For,
    Gemm,
    If,
    LaneReduce,
    LoopKernel,
    PaddedPlane,
    Stmt,
    Store,
    WinogradGemm,
    gemm_axes,
)
from catenc.symbolic import Expr, product


@dataclass(frozen=True)
class Executed:
    """What a kernel's loop nest executes: its operations, one combine per element a reduction
    takes; and the combines of its lane reductions' partial accumulators into one (the price of
    vector code: `lanes` per reduction run, whatever its length)."""

    ops: int
    lane_combines: int


def executed_ops(kernel: LoopKernel, sizes: Mapping[str, int], buffers: Mapping[str, Storage]) -> Executed:
    """What the kernel's loop nest executes at `sizes` (its free symbols); `buffers` gives the
    buffers' shapes and storage dtypes (a lane reduction's expansion reads them)."""
    ops = _Counter(buffers, lane_trees=False).body(kernel.body, dict(sizes))
    return Executed(ops, _Counter(buffers, lane_trees=True).body(kernel.body, dict(sizes)) - ops)


class _Counter:
    def __init__(self, buffers: Mapping[str, Storage], lane_trees: bool):
        self.buffers = buffers
        self.lane_trees = lane_trees  # count the combines of lane reductions' partial sums
        self.data: dict[int, bool] = {}  # id of a node -> whether a load or local is below it
        self.keep: list[object] = []  # what the id keys name, kept alive
        self.reads: dict[int, frozenset[str]] = {}  # id of a body -> the names its counts vary with
        self.memo: dict[tuple, int] = {}
        self.lanes: dict[int, LaneLoops] = {}

    def body(self, body: tuple[Stmt, ...], env: dict[str, int]) -> int:
        """The operations of a body run once with the indices and sizes in env; the same body at
        the same values of the names its count varies with is counted once."""
        key = (id(body), tuple(sorted((n, env[n]) for n in self.varies(body) if n in env)))
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = sum(_STMT[type(s)](self, s, env) for s in body)
        return found

    def varies(self, body: tuple[Stmt, ...]) -> frozenset[str]:
        """The names a body's count can depend on: those of its index-only conditions and of its
        loop extents."""
        found = self.reads.get(id(body))
        if found is None:
            names: set[str] = set()
            for stmt in body:
                names |= _NAMES[type(stmt)](self, stmt)
                names |= self.varies(stmt.children())
            found = self.reads[id(body)] = frozenset(names)
            self.keep.append(body)
        return found

    def condition_names(self, values: list[Value]) -> set[str]:
        """The names the index-only conditions of `where`s in the values read."""
        names: set[str] = set()
        for node in _nodes(values):
            if isinstance(node, Where) and not self.reads_data(node.cond):
                names |= node.cond.summary.symbols
        return names

    def expanded(self, stmt: LaneReduce) -> LaneLoops:
        """A lane reduction's loops, expanded once (their bodies are memo keys)."""
        found = self.lanes.get(id(stmt))
        if found is None:
            found = self.lanes[id(stmt)] = expand_lanes(stmt, self.buffers)
            self.keep.append(stmt)
        return found

    def loop(self, index: str, start: int, stop: int, body: tuple[Stmt, ...], env: dict[str, int]) -> int:
        """The body run for index in start..stop: evaluated at each value only where it varies."""
        if stop <= start:
            return 0
        if index not in self.varies(body):
            return (stop - start) * self.body(body, env)
        return sum(self.body(body, {**env, index: k}) for k in range(start, stop))

    def over(self, axes: tuple[tuple[str, Expr], ...], value: Value, env: dict[str, int]) -> int:
        """The ops of a value evaluated at every point of the axes: at each point of those its
        conditions read, times the points of the others."""
        names = self.condition_names([value])
        varying = [(name, extent.evaluate(env)) for name, extent in axes if name in names]
        rest = product(extent for name, extent in axes if name not in names).evaluate(env)
        points = itertools.product(*(range(extent) for _, extent in varying))
        return rest * sum(self.ops([value], {**env, **dict(zip((n for n, _ in varying), at))}) for at in points)

    def reads_data(self, value: Value) -> bool:
        found = self.data.get(id(value))
        if found is None:
            found = isinstance(value, (Load, Local)) or any(self.reads_data(c) for c in value.children())
            self.data[id(value)] = found
            self.keep.append(value)
        return found

    def ops(self, values: list[Value], env: dict[str, int]) -> int:
        """The operations of one statement's values, each distinct node once."""
        seen: set[Value] = set()
        stack = list(values)
        total = 0
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if isinstance(node, Where) and not self.reads_data(node.cond):
                stack += [node.cond, node.a if index_value(node.cond, env) else node.b]
                continue
            if isinstance(node, (Unary, Binary)) and self.reads_data(node):
                total += 1
            stack.extend(node.children())
        return total


def _nodes(values: list[Value]) -> Iterator[Value]:
    """Each distinct node of the values once."""
    seen: set[Value] = set()
    stack = list(values)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            yield node
            stack.extend(node.children())


_STMT: Table[Callable[[_Counter, Stmt, dict[str, int]], int]] = Table("count statement")
_NAMES: Table[Callable[[_Counter, Stmt], set[str]]] = Table("count names")


@_STMT.register(For)
def _count_for(counter: _Counter, stmt: For, env: dict[str, int]) -> int:
    return counter.loop(stmt.index, 0, stmt.extent.evaluate(env), stmt.body, env)


@_STMT.register(If)
def _count_if(counter: _Counter, stmt: If, env: dict[str, int]) -> int:
    ops = counter.ops([stmt.cond], env)
    if counter.reads_data(stmt.cond) or index_value(stmt.cond, env):
        ops += counter.body(stmt.body, env)
    return ops


@_STMT.register(Declare, Assign, Store)
def _count_value(counter: _Counter, stmt: Declare | Assign | Store, env: dict[str, int]) -> int:
    return counter.ops([stmt.value], env)


@_STMT.register(LaneReduce)
def _count_lanes(counter: _Counter, stmt: LaneReduce, env: dict[str, int]) -> int:
    loops = counter.expanded(stmt)
    extent = loops.extent.evaluate(env)
    full = extent - extent % loops.lanes
    elements = counter.loop(loops.index, 0, full, loops.body, env) + counter.loop(
        loops.index, full, extent, loops.tail, env
    )
    if not counter.lane_trees:
        return elements
    return elements + (loops.lanes - 1) * counter.body(loops.combine, env) + counter.body(loops.finish, env)


@_STMT.register(Gemm)
def _count_gemm(counter: _Counter, stmt: Gemm, env: dict[str, int]) -> int:
    """2*M*N*K; each operand element evaluated once (the driver packs every panel of every
    k-slice once, templates/gemm.c.j2), the epilogue once per output."""
    c = stmt.contraction
    outputs = c.batch + c.rows + c.cols
    flops = 2 * product(e for _, e in outputs + c.depth).evaluate(env)
    operands = [(c.a, c.batch + c.rows + c.depth), (c.b, c.batch + c.depth + c.cols)]
    if c.epilogue is not None:
        operands.append((c.epilogue, outputs))
    return flops + sum(counter.over(axes, value, env) for value, axes in operands)


@_STMT.register(WinogradGemm)
def _count_winograd(counter: _Counter, stmt: WinogradGemm, env: dict[str, int]) -> int:
    """Per batch element, the (m+2)^2 products of K x C filters by C x tiles, each tile's input
    transform per channel (B^T d B: 2(m+2) combinations of rows of B^T) and output transform per
    filter ((m+2) + m combinations of rows of A^T), then the epilogue once per output."""
    c, plan = stmt.contraction, stmt.plan
    t, conv = plan.transform, plan.conv
    tiles = -(-conv.height // t.m) * -(-conv.width // t.m)

    def ops(matrix) -> int:  # one combination per row: an add per term past the first, a multiply per factor not +-1
        return sum(
            max(len([x for x in row if x]) - 1, 0) + len([x for x in row if x and abs(x) != 1]) for row in matrix
        )

    per = 2 * t.alpha**2 * conv.filters * conv.channels * tiles
    per += conv.channels * tiles * 2 * t.alpha * ops(t.bt) + conv.filters * tiles * (t.alpha + t.m) * ops(t.at)
    batch = product(e for _, e in c.batch).evaluate(env)
    epilogue = 0 if c.epilogue is None else counter.over(c.batch + c.rows + c.cols, c.epilogue, env)
    return batch * per + epilogue


@_STMT.register(PaddedPlane)
def _count_copy(counter: _Counter, stmt: PaddedPlane, env: dict[str, int]) -> int:
    """Its value's operations once per plane element (none for a plain copy)."""
    height, width = stmt.plane
    return height * width * counter.ops([stmt.value], env | {PLANE_ROW: 0, PLANE_COL: 0})


@_NAMES.register(For)
def _for_names(counter: _Counter, stmt: For) -> set[str]:
    return stmt.extent.free_symbols()


@_NAMES.register(LaneReduce)
def _lane_names(counter: _Counter, stmt: LaneReduce) -> set[str]:
    values = [v for _, v in stmt.reductions]
    return stmt.extent.free_symbols() | counter.condition_names(values)


@_NAMES.register(If)
def _if_names(counter: _Counter, stmt: If) -> set[str]:
    own = set() if counter.reads_data(stmt.cond) else stmt.cond.summary.symbols
    return own | counter.condition_names([stmt.cond])


@_NAMES.register(Declare, Assign, Store)
def _value_names(counter: _Counter, stmt: Declare | Assign | Store) -> set[str]:
    return counter.condition_names([stmt.value])


@_NAMES.register(PaddedPlane)
def _copy_names(counter: _Counter, stmt: PaddedPlane) -> set[str]:
    return counter.condition_names([stmt.value]) - {PLANE_ROW, PLANE_COL}


@_NAMES.register(Gemm)
def _gemm_names(counter: _Counter, stmt: Gemm) -> set[str]:
    extents: set[str] = set().union(*(e.free_symbols() for _, e in gemm_axes(stmt)))
    epilogue = stmt.contraction.epilogue
    return extents | (counter.condition_names([epilogue]) if epilogue is not None else set())
