"""Loops split where their padding guards change: an interior without guards, edges with them.

A padded window (a depthwise convolution's taps, a pool's) reads `where(0 <= s*x + d < n, in[..],
0)`; in C each such read is a branch, and the loop over x stays scalar. A loop over x in 0..n
whose guards compare x (with a constant coefficient) against constants splits into an edge
[0, lo), an interior [lo, hi) where every such guard holds, and an edge [hi, n); an edge of at
most PEEL iterations runs each iteration on its own. In every piece, a guard that the ranges of
its loops decide is replaced by its value: the interior reads unguarded (vector code at -O2),
and the values computed are the same, piece by piece.

An outermost loop whose guards change once (the channels of a concatenation under a pool) is
unswitched first instead (`unswitch_outer_loops`, before lower/pad.py): each iteration runs the
version of the body for its side, so that a loop on threads keeps its iterations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

from catenc.dispatch import Table
from catenc.dtypes import BOOL, I64
from catenc.ir.nodes import Binary, Const, SymInt, Value, walk
from catenc.ir.passes import fold_node, substitute
from catenc.ir.verify import as_expr
from catenc.lower.loops import Assign, Declare, For, If, LaneReduce, LoopKernel, PaddedPlane, Stmt, Store, stmt_values
from catenc.symbolic import Expr, Sym, const, sym

PEEL = 4  # an edge of at most this many iterations runs each one on its own
MAX_COPIES = 64  # at most this many copies of one statement across nested splits

Ranges = dict[str, tuple[int, int]]  # loop index -> its lowest and highest value


def split_guarded_loops(kernel: LoopKernel) -> LoopKernel:
    """The kernel with every serial loop of constant extent split where its guards change."""
    return replace(kernel, body=_split_body(kernel.body, {}, 1))


def unswitch_outer_loops(kernel: LoopKernel) -> LoopKernel:
    """The kernel with each outermost loop whose guards change once (a select between the two
    sides of a concatenation, on the loop over channels) running, per iteration, the version of
    its body for its side: the loop keeps its iterations (and its threads), and each version
    reads one side without a select, as a window over one plane (lower/pad.py)."""
    body = []
    for stmt in kernel.body:
        pieces = _pieces(stmt, {}) if isinstance(stmt, For) and stmt.extent.is_const else []
        body.append(_unswitched(stmt, pieces[1][0]) if len(pieces) == 2 else stmt)
    return replace(kernel, body=tuple(body))


def _unswitched(loop: For, split: int) -> For:
    index = SymInt(I64, sym(loop.index))
    sides = ((Binary(BOOL, "lt", index, Const(I64, split)), (0, split - 1)),
             (Binary(BOOL, "le", Const(I64, split), index), (split, loop.extent.value - 1)))  # fmt: skip
    versions = tuple(If(test, _decided(loop.body, {loop.index: span}, loop.index)) for test, span in sides)
    return replace(loop, body=versions)


def _split_body(body: tuple[Stmt, ...], ranges: Ranges, copies: int) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, For):
            out += _split_loop(stmt, ranges, copies)
        else:
            inner = _inner_ranges(stmt, ranges)
            out.append(stmt.with_children(_split_body(stmt.children(), inner, copies)))
    return tuple(out)


def _inner_ranges(stmt: Stmt, ranges: Ranges) -> Ranges:
    """The ranges inside a statement: those outside and the loop's own, where it is a loop of
    constant extent."""
    if isinstance(stmt, (For, LaneReduce)) and stmt.extent.is_const and stmt.extent.value > 0:
        return ranges | {stmt.index: (0, stmt.extent.value - 1)}
    return ranges


def _split_loop(loop: For, ranges: Ranges, copies: int) -> list[Stmt]:
    """The loop as its pieces (itself, where it does not split), each piece's body split in turn."""
    pieces = _pieces(loop, ranges) if not loop.parallel and loop.extent.is_const else []
    if len(pieces) < 2 or copies * len(pieces) > MAX_COPIES:
        inner = _inner_ranges(loop, ranges)
        return [replace(loop, body=_split_body(loop.body, inner, copies))]
    out: list[Stmt] = []
    for start, stop in pieces:
        at = {loop.index: const(start) if stop - start == 1 else sym(loop.index) + start}
        body = _decided(loop.body, ranges | {loop.index: (start, stop - 1)}, loop.index)
        body = tuple(substituted(s, at) for s in body)
        inner = ranges | {loop.index: (0, stop - start - 1)}
        out.append(For(loop.index, const(stop - start), _split_body(body, inner, copies * len(pieces))))
    return out


def _pieces(loop: For, ranges: Ranges) -> list[tuple[int, int]]:
    """[start, stop) of each piece of the loop: edges, the interior where every guard on its index
    holds, edges; an edge of at most PEEL iterations one piece per iteration."""
    n = loop.extent.value
    lows, highs = [], []
    for e, where in _guards(loop.body, _inner_ranges(loop, ranges)):
        step = _coefficient(e, loop.index)
        low = _lowest(e - step * sym(loop.index), where) if step else None
        if low is None:
            continue
        if step > 0:  # step*x + low >= 0 for every other index from x >= ceil(-low / step)
            lows.append(-(low // step))
        else:  # low - |step|*x >= 0 up to x <= floor(low / |step|)
            highs.append(low // -step + 1)
    if not lows and not highs:
        return []
    lo = min(max(lows, default=0), n)
    hi = max(min(highs, default=n), lo)
    pieces = []
    for start, stop in ((0, lo), (lo, hi), (hi, n)):
        if stop - start <= PEEL and (start, stop) != (lo, hi):
            pieces += [(k, k + 1) for k in range(start, stop)]
        elif stop > start:
            pieces.append((start, stop))
    return pieces


def _guards(body: tuple[Stmt, ...], ranges: Ranges) -> Iterator[tuple[Expr, Ranges]]:
    """Each comparison of index expressions in the body, as e (it holds where e >= 0), with the
    ranges of the loops around it."""
    for stmt in body:
        inner = _inner_ranges(stmt, ranges)
        for value in stmt_values(stmt):
            for node in walk(value):
                e = _nonnegative(node)
                if e is not None:
                    yield e, inner
        yield from _guards(stmt.children(), inner)


def _nonnegative(term: Value) -> Expr | None:
    """The e of a comparison `a <= b` (b - a) or `a < b` (b - a - 1) of index expressions: it
    holds where e >= 0."""
    if not (isinstance(term, Binary) and term.op in ("le", "lt")):
        return None
    a, b = as_expr(term.a), as_expr(term.b)
    if a is None or b is None:
        return None
    return b - a - (1 if term.op == "lt" else 0)


def _coefficient(e: Expr, name: str) -> int:
    """The constant coefficient of index `name` in e (0 where it has none or no constant one)."""
    k = e.coefficient(name)
    return k.value if k.is_const else 0


def _lowest(e: Expr, ranges: Ranges) -> int | None:
    """The lowest value of an affine e over the ranges of its indices (None: not affine in them)."""
    return _extreme(e, ranges, low=True)


def _extreme(e: Expr, ranges: Ranges, low: bool) -> int | None:
    total = 0
    for monomial, k in e.terms:
        if not monomial:
            total += k
            continue
        if len(monomial) != 1:
            return None
        ((atom, power),) = monomial
        if power != 1 or not isinstance(atom, Sym) or atom.name not in ranges:
            return None
        first, last = ranges[atom.name]
        total += k * (first if (k > 0) == low else last)
    return total


def _decided(body: tuple[Stmt, ...], ranges: Ranges, index: str) -> tuple[Stmt, ...]:
    """The body with each comparison of `index` that the loop ranges decide replaced by its
    value, folded."""
    out: list[Stmt] = []
    for stmt in body:
        inner = _inner_ranges(stmt, ranges)
        stmt = _mapped(stmt, partial(_decide, ranges=inner, index=index), _same)
        stmt = stmt.with_children(_decided(stmt.children(), inner, index))
        if isinstance(stmt, If) and isinstance(stmt.cond, Const):  # a version decided: kept whole or dropped
            out += stmt.body if stmt.cond.value else []
        else:
            out.append(stmt)
    return tuple(out)


def _decide(value: Value, ranges: Ranges, index: str) -> Value:
    if index not in value.summary.symbols:
        return value
    e = _nonnegative(value)
    if e is not None:
        low, high = _lowest(e, ranges), _extreme(e, ranges, low=False)
        if low is not None and low >= 0:
            return Const(BOOL, True)
        if high is not None and high < 0:
            return Const(BOOL, False)
        return value
    return fold_node(value.with_children(tuple(_decide(c, ranges, index) for c in value.children())))


def substituted(stmt: Stmt, at: dict[str, Expr]) -> Stmt:
    """The statement (and those inside it) with indices replaced as `at` says."""
    stmt = _mapped(stmt, partial(substitute, mapping=at), partial(Expr.substitute, mapping=at))
    return stmt.with_children(tuple(substituted(s, at) for s in stmt.children()))


def _same(e: Expr) -> Expr:
    return e


ValueMap = Callable[[Value], Value]
ExprMap = Callable[[Expr], Expr]
_MAPPED: Table[Callable[[Stmt, ValueMap, ExprMap], Stmt]] = Table("guards._mapped")


def _mapped(stmt: Stmt, values: ValueMap, exprs: ExprMap) -> Stmt:
    """The statement with its own values and index expressions mapped (not those of the
    statements inside it)."""
    return _MAPPED[type(stmt)](stmt, values, exprs)


@_MAPPED.register(For)
def _mapped_for(stmt: For, values: ValueMap, exprs: ExprMap) -> Stmt:
    return replace(stmt, extent=exprs(stmt.extent))


@_MAPPED.register(Declare, Assign)
def _mapped_local(stmt: Declare | Assign, values: ValueMap, exprs: ExprMap) -> Stmt:
    return replace(stmt, value=values(stmt.value))


@_MAPPED.register(Store)
def _mapped_store(stmt: Store, values: ValueMap, exprs: ExprMap) -> Stmt:
    return replace(stmt, index=tuple(map(exprs, stmt.index)), value=values(stmt.value))


@_MAPPED.register(PaddedPlane)
def _mapped_plane(stmt: PaddedPlane, values: ValueMap, exprs: ExprMap) -> Stmt:
    return replace(stmt, value=values(stmt.value))


@_MAPPED.register(If)
def _mapped_if(stmt: If, values: ValueMap, exprs: ExprMap) -> Stmt:
    return replace(stmt, cond=values(stmt.cond))


@_MAPPED.register(LaneReduce)
def _mapped_lanes(stmt: LaneReduce, values: ValueMap, exprs: ExprMap) -> Stmt:
    store = None if stmt.store is None else (stmt.store[0], tuple(map(exprs, stmt.store[1])))
    more = tuple((acc, values(v)) for acc, v in stmt.more)
    return replace(stmt, extent=exprs(stmt.extent), value=values(stmt.value), more=more, store=store)
