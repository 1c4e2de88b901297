"""The loop nests' invariants, checked after every pass: every name a statement uses is bound
where it runs, and stores go only where a kernel may write.

`verify_loops` returns the problems it finds (each names the kernel and the statement's local,
index or buffer at fault); an empty list means the loop nests are well formed. It never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from catenc.dispatch import Table
from catenc.ir.nodes import Buffer, Load, Local, Reduce, Role, SymInt, Value, Where
from catenc.ir.verify import bounds_problems, guard_facts, show
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
    gemm_axes,
)
from catenc.schedule.contractions import ACC
from catenc.symbolic import Call, Expr, Facts, const

WRITABLE = (Role.OUTPUT, Role.TEMP, Role.STATUS)


def verify_loops(
    kernels: tuple[LoopKernel, ...], buffers: Iterable[Buffer] | Mapping[str, Buffer], facts: Facts | None = None
) -> list[str]:
    """Every problem of the loop nests of one entry over its graph's buffers (`facts`: what the
    entry's checks guarantee, as for verify_graph)."""
    known = {b.name: b for b in (buffers.values() if isinstance(buffers, Mapping) else buffers)}
    problems = []
    seen: set[str] = set()
    for kernel in kernels:
        if kernel.name in seen:
            problems.append(f"kernel {kernel.name}: name used by two kernels")
        seen.add(kernel.name)
        problems += [f"kernel {kernel.name}: {p}" for p in _KernelChecker(kernel, known, facts or Facts()).run()]
    return problems


@dataclass
class _Scope:
    """What is bound where a statement runs: loop indices, and declared locals with their dtypes."""

    indices: set[str] = field(default_factory=set)
    locals: dict = field(default_factory=dict)
    facts: Facts = Facts()  # loop ranges and the conditions of enclosing ifs
    planes: dict = field(default_factory=dict)  # local copies of planes (PaddedPlane), read as buffers

    def inner(self, *guards: Expr) -> _Scope:
        return _Scope(set(self.indices), dict(self.locals), self.facts.with_nonneg(*guards), dict(self.planes))


class _KernelChecker:
    def __init__(self, kernel: LoopKernel, buffers: dict[str, Buffer], facts: Facts) -> None:
        self.kernel = kernel
        self.facts = facts
        self.buffers = buffers
        self.params = set(kernel.symbols)
        self.used: set[str] = set()  # buffers the body reads or writes
        self.planes: set[str] = set()  # names of the local copies of planes (PaddedPlane) made
        self.problems: list[str] = []

    def run(self) -> list[str]:
        for name in self.kernel.buffers:
            if name not in self.buffers:
                self.problems.append(f"takes unknown buffer {name}")
        self.body(self.kernel.body, _Scope(facts=self.facts))
        for name in sorted(self.used - set(self.kernel.buffers) - self.planes):
            self.problems.append(f"uses buffer {name}, which is not in its buffer list")
        return self.problems

    def body(self, stmts: tuple[Stmt, ...], scope: _Scope) -> None:
        for stmt in stmts:
            self.stmt(stmt, scope)

    _STMT: Table[Callable[[_KernelChecker, Stmt, _Scope], None]] = Table("verify_loops")

    def stmt(self, stmt: Stmt, scope: _Scope) -> None:
        self._STMT[type(stmt)](self, stmt, scope)

    @_STMT.register(Stmt)
    def other(self, stmt: Stmt, scope: _Scope) -> None:
        """A statement of a later lowering: check what it holds."""
        self.body(stmt.children(), scope.inner())

    @_STMT.register(For)
    def loop(self, stmt: For, scope: _Scope) -> None:
        self.expr(stmt.extent, scope, f"extent of loop {stmt.index}")
        inner = self.bind(stmt.index, stmt.extent, scope)
        self.body(stmt.body, inner)

    @_STMT.register(Declare)
    def declare(self, stmt: Declare, scope: _Scope) -> None:
        self.value(stmt.value, scope)
        if stmt.name in scope.locals or stmt.name in scope.indices:
            self.problems.append(f"local {stmt.name} is declared again where it is already bound")
        if stmt.value.dtype != stmt.dtype:
            self.problems.append(f"local {stmt.name}: {stmt.dtype.name} given a {stmt.value.dtype.name} value")
        scope.locals[stmt.name] = stmt.dtype

    @_STMT.register(Assign)
    def assign(self, stmt: Assign, scope: _Scope) -> None:
        self.value(stmt.value, scope)
        self.assigned(stmt.name, stmt.value, scope)

    @_STMT.register(If)
    def branch(self, stmt: If, scope: _Scope) -> None:
        self.value(stmt.cond, scope)
        self.body(stmt.body, scope.inner(*guard_facts(stmt.cond, scope.facts)[0]))

    @_STMT.register(Store)
    def store_stmt(self, stmt: Store, scope: _Scope) -> None:
        self.store(stmt.buffer, stmt.index, scope)
        self.value(stmt.value, scope)

    @_STMT.register(LaneReduce)
    def lane_reduce(self, stmt: LaneReduce, scope: _Scope) -> None:
        self.expr(stmt.extent, scope, f"extent of loop {stmt.index}")
        inner = self.bind(stmt.index, stmt.extent, scope)
        for acc, value in stmt.reductions:
            self.value(value, inner)
            self.assigned(acc, value, scope)
        if stmt.store is not None:
            self.store(stmt.store[0], stmt.store[1], inner)

    @_STMT.register(PaddedPlane)
    def padded_plane(self, stmt: PaddedPlane, scope: _Scope) -> None:
        """Its value is checked at every position of its plane, which fits its copy."""
        inner = self.bind(PLANE_COL, const(stmt.plane[1]), self.bind(PLANE_ROW, const(stmt.plane[0]), scope))
        self.value(stmt.value, inner)
        room = (stmt.shape[0], stmt.phases * stmt.shape[1])
        if any(stmt.offset[k] < 0 or stmt.offset[k] + stmt.plane[k] > room[k] for k in (0, 1)):
            self.problems.append(f"{stmt.name}: a plane of {stmt.plane} does not fit at {stmt.offset} in {room}")
        if stmt.name in self.buffers or stmt.name in scope.planes:
            self.problems.append(f"{stmt.name}: copy named as a buffer already known where it is made")
        self.planes.add(stmt.name)
        shape = tuple(map(const, (stmt.phases, *stmt.shape)))
        scope.planes[stmt.name] = Buffer(stmt.name, stmt.value.dtype, shape, Role.TEMP)

    def bind(self, index: str, extent: Expr, scope: _Scope) -> _Scope:
        if index in scope.indices or index in scope.locals or index in self.params:
            self.problems.append(f"loop index {index} shadows a name already bound")
        inner = scope.inner()
        inner.indices.add(index)
        inner.facts = inner.facts.with_range(index, unfold_mod(extent))
        return inner

    def assigned(self, name: str, value: Value, scope: _Scope) -> None:
        if name not in scope.locals:
            self.problems.append(f"assigns local {name} before it is declared")
        elif scope.locals[name] != value.dtype:
            self.problems.append(f"local {name}: {scope.locals[name].name} assigned a {value.dtype.name} value")

    def store(self, name: str, index: tuple[Expr, ...], scope: _Scope) -> None:
        self.used.add(name)
        buf = self.buffers.get(name)
        if buf is None:
            self.problems.append(f"stores to unknown buffer {name}")
            return
        if buf.role not in WRITABLE:
            self.problems.append(f"stores to {buf.role} buffer {name}")
        if len(index) != len(buf.shape):
            self.problems.append(f"stores to {name} with {len(index)} indices, its rank is {len(buf.shape)}")
        for e in index:
            self.expr(e, scope, f"index of a store to {name}")
        self.problems += [f"store to {name}: {p}" for p in bounds_problems(index, buf, scope.facts)]

    @_STMT.register(Gemm)
    def gemm(self, stmt: Gemm, scope: _Scope) -> None:
        c = stmt.contraction
        panels = () if stmt.pack is None else ((stmt.pack, (Role.TEMP,)),)  # a GPU gemm has none
        for name, role in ((c.output, WRITABLE), *panels):
            buf = self.buffers.get(name)
            if buf is None or buf.role not in role:
                self.problems.append(f"gemm writes {name}, which is no {' or '.join(role)} buffer")
            self.used.add(name)
        inner = scope.inner()
        for name, extent in gemm_axes(stmt):
            self.expr(extent, scope, f"extent of gemm axis {name}")
            inner = self.bind(name, extent, inner)
        for e in (c.offset, c.row_stride, c.col_stride):
            self.expr(e, inner, "gemm offset or stride")
        self.value(c.a, inner)
        self.value(c.b, inner)
        if c.epilogue is not None:
            product = inner.inner()
            product.locals[ACC] = c.dtype
            self.value(c.epilogue, product)

    def expr(self, e: Expr, scope: _Scope, what: str) -> None:
        unbound = e.free_symbols() - scope.indices - self.params
        if unbound:
            self.problems.append(f"{what} uses {', '.join(sorted(unbound))}, bound by no loop or parameter")

    def value(self, value: Value, scope: _Scope) -> None:
        stack = [(value, scope.facts)]
        while stack:
            node, facts = stack.pop()
            self.node(node, scope, facts)
            if isinstance(node, Where):
                yes, no = guard_facts(node.cond, facts)
                stack += [(node.cond, facts), (node.a, facts.with_nonneg(*yes)), (node.b, facts.with_nonneg(*no))]
            else:
                stack += [(child, facts) for child in node.children()]

    _NODE: Table[Callable[[_KernelChecker, Value, _Scope, Facts], None]] = Table("verify_loops node")

    def node(self, node: Value, scope: _Scope, facts: Facts) -> None:
        self._NODE[type(node)](self, node, scope, facts)

    @_NODE.register(Value)
    def plain(self, node: Value, scope: _Scope, facts: Facts) -> None:
        """Nothing of its own to check: its children are checked in turn."""

    @_NODE.register(Local)
    def local(self, node: Local, scope: _Scope, facts: Facts) -> None:
        if node.name not in scope.locals:
            self.problems.append(f"local {node.name} is used before it is declared")
        elif scope.locals[node.name] != node.dtype:
            self.problems.append(f"local {node.name} is {scope.locals[node.name].name}, read as {node.dtype.name}")

    @_NODE.register(Reduce)
    def reduction(self, node: Reduce, scope: _Scope, facts: Facts) -> None:
        self.problems.append(f"{show(node)}: a reduction left in a loop nest")

    @_NODE.register(Load)
    def load(self, node: Load, scope: _Scope, facts: Facts) -> None:
        self.used.add(node.buffer)
        buf = scope.planes.get(node.buffer) or self.buffers.get(node.buffer)
        if buf is None:
            self.problems.append(f"{show(node)}: reads unknown buffer {node.buffer}")
        elif len(node.index) != len(buf.shape):
            rank = len(buf.shape)
            self.problems.append(f"{show(node)}: {len(node.index)} indices for {buf.name} of rank {rank}")
        else:
            self.problems += [f"{show(node)}: {p}" for p in bounds_problems(node.index, buf, facts, node)]
        for e in node.index:
            self.expr(e, scope, f"index of {node.buffer}")

    @_NODE.register(SymInt)
    def symint(self, node: SymInt, scope: _Scope, facts: Facts) -> None:
        self.expr(node.expr, scope, f"({node.expr})")


def unfold_mod(e: Expr) -> Expr:
    """e with each `a % c` written `a - c*(a // c)` (what it is, with floor division): a
    leftover loop of extent `n % c` then proves its index `c*(n // c) + i` below n."""
    total = const(0)
    for monomial, coefficient in e.terms:
        term = const(coefficient)
        for atom, power in monomial:
            piece = Expr.atom(atom)
            if isinstance(atom, Call) and atom.func == "mod":
                a, c = (unfold_mod(arg) for arg in atom.args)
                piece = a - c * (a // c)
            for _ in range(power):
                term = term * piece
        total = total + term
    return total
