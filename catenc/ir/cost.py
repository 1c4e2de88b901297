"""What a computation costs, counted from the IR: arithmetic ops, transcendental calls and bytes
moved, as polynomials in the entry's symbols (docs/abi.md, "Cost"), and the rule that compares
two such polynomials when a pass weighs one program against another.

Counting: every Unary and Binary node over data is one op each time it is evaluated (a
transcendental is also one call), equal subexpressions once; a reduction adds one op per element
it combines; `where`, casts and loads are free, and so is arithmetic on indices and sizes alone
(a padded window's bounds checks, a position): the C compiler hoists or strength-reduces it, and
counting it made a padded 3x3 convolution's flops five times its multiply-adds.
Bytes are whole buffers: a kernel reads every buffer it loads
once and writes every buffer it stores once (reuse inside a kernel is the cache's business).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from catenc.ir.evaluate import index_value
from catenc.ir.nodes import Binary, Buffer, Compute, Load, Reduce, Unary, Value, Where, loaded_buffers
from catenc.registry import TRANSCENDENTAL_OPS
from catenc.symbolic import ONE, ZERO, Expr, const, product

# Ops a transcendental call counts for when costs are compared (a vector-math exp or erf is a
# polynomial of about this many multiply-adds).
TRANSCENDENTAL_OPS_WEIGHT = 8
# Ops one byte of an intermediate counts for (written once, read at each evaluation of a load):
# a store and a load of an f32 weigh as much as 8 ops.
BYTE_WEIGHT = 1
# Free symbols are compared at this size each: asymptotically, so a higher degree always loses.
REFERENCE_SIZE = 1 << 20


@dataclass(frozen=True)
class Work:
    """The work of evaluating a value once."""

    ops: Expr
    calls: Expr  # transcendental calls among the ops

    @property
    def weighted(self) -> Expr:
        return self.ops + self.calls * (TRANSCENDENTAL_OPS_WEIGHT - 1)


@dataclass(frozen=True)
class Cost:
    """The cost of a kernel or an entry, each field a polynomial in the entry's symbols."""

    flops: Expr = ZERO  # arithmetic ops, transcendental calls included
    transcendentals: Expr = ZERO
    bytes_read: Expr = ZERO
    bytes_written: Expr = ZERO

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.transcendentals + other.transcendentals,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
        )

    def fields(self) -> dict[str, Expr]:
        return {
            "flops": self.flops,
            "transcendentals": self.transcendentals,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
        }

    def describe(self) -> str:
        return (
            f"{self.flops} flops, {self.transcendentals} transcendental, "
            f"{self.bytes_read} bytes read, {self.bytes_written} written"
        )

    def intensity(self, example: int = 1024) -> str:
        """Arithmetic intensity, flops per byte moved: a number where the sizes are known, else
        the ratio and its value with every free size at `example`."""
        moved = self.bytes_read + self.bytes_written
        if self.flops.is_const and moved.is_const:
            return f"{self.flops.value / max(moved.value, 1):.3g} flops/byte"
        sizes = dict.fromkeys(sorted(self.flops.free_symbols() | moved.free_symbols()), example)
        at = at_reference(self.flops, sizes) / max(at_reference(moved, sizes), 1)
        return f"({self.flops}) / ({moved}) flops/byte, {at:.3g} with every free size {example}"


def element_work(value: Value) -> Work:
    """The work of one evaluation of a value tree. Equal subtrees count once (the lowering and
    the C compiler evaluate a common subexpression once), each node once per element of the
    reductions around it. The result is kept on the root, and a subtree that was a root before
    counts as a whole: passes ask this of growing trees again and again."""
    return Work(*_count(value, "_work", _node_work, (ONE, ZERO)))


def element_reads(value: Value) -> Expr:
    """The bytes one evaluation of a value tree loads, counted as element_work counts ops: what
    inlining a producer makes each of its readers load instead of the stored value."""
    return _count(value, "_reads", _node_reads, (ZERO,))[0]


Counts = tuple[Expr, ...]


def _node_work(node: Value) -> Counts | None:
    """(ops, transcendental calls) of the node itself."""
    if isinstance(node, (Unary, Binary)):
        return ONE, ONE if node.op in TRANSCENDENTAL_OPS else ZERO
    return None


def _node_reads(node: Value) -> Counts | None:
    return (const(node.dtype.itemsize),) if isinstance(node, Load) else None


def _count(value: Value, memo: str, own: Callable[[Value], Counts | None], combine: Counts) -> Counts:
    """The sums of `own(node)` over the distinct nodes of the tree, each times the extents of the
    reductions around it, plus `combine` (as many counts) per element each reduction combines;
    kept on the root under `memo`. Arithmetic on indices and sizes alone counts nothing, nor does
    anything below it."""
    found = value.__dict__.get(memo)
    if found is not None:
        return found
    total: list[Expr] = [ZERO] * len(combine)
    seen: set[Value] = set()
    stack: list[tuple[Value, Expr]] = [(value, ONE)]

    def add(counts: Counts, times: Expr) -> None:
        for k, c in enumerate(counts):
            total[k] = total[k] + c * times

    while stack:
        node, times = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        known = node.__dict__.get(memo)
        if known is not None:  # a subtree asked before (an inlined body): counted as a whole
            add(known, times)
            continue
        if isinstance(node, (Unary, Binary)) and not node.summary.reads_data:
            continue  # index and size arithmetic: free, and so is all of it below
        if isinstance(node, Reduce):
            times = times * product(e for _, e in node.indices)
            add(combine, times)  # one combine per element
        counted = own(node)
        if counted is not None:
            add(counted, times)
        stack.extend((child, times) for child in node.children())
    result = tuple(total)
    object.__setattr__(value, memo, result)
    return result


Scope = tuple[tuple[str, Expr], ...]  # the indices around a node: the compute's, its reductions'
Guards = tuple[tuple[Value, bool], ...]  # the conditions of the `where` sides a node is on
MAX_POINTS = 1 << 16  # most index points a guard is evaluated at; larger, it is taken as always true


def compute_work(compute: Compute) -> Work:
    """The work of every element of a compute: as element_work counts it, except that each side
    of a `where` whose condition reads only indices of constant extent counts at the points
    where it is taken (a padded window's fused producer runs at the taps inside the image, a
    concatenation's sides each over its own part)."""
    ops = calls = ZERO
    seen: set[Value] = set()
    points: dict[tuple[Scope, Guards], Expr] = {}
    stack: list[tuple[Value, Scope, Guards]] = [(compute.body, tuple(compute.indices), ())]
    while stack:
        node, scope, guards = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, (Unary, Binary)) and not node.summary.reads_data:
            continue
        if isinstance(node, Reduce):
            scope = scope + node.indices
        key = (scope, guards)
        if key not in points:
            points[key] = _points(scope, guards)
        if isinstance(node, (Unary, Binary)):
            ops = ops + points[key]
            calls = calls + (points[key] if node.op in TRANSCENDENTAL_OPS else ZERO)
        elif isinstance(node, Reduce):
            ops = ops + points[key]  # one combine per element
        if isinstance(node, Where) and not node.cond.summary.reads_data:
            stack += [(node.cond, scope, guards), (node.a, scope, guards + ((node.cond, True),))]
            stack.append((node.b, scope, guards + ((node.cond, False),)))
            continue
        stack.extend((child, scope, guards) for child in node.children())
    return Work(ops, calls)


def _points(scope: Scope, guards: Guards) -> Expr:
    """The points of the scope's indices where every guard holds, a guard counted only where it
    reads indices of constant extent alone and they span at most MAX_POINTS points (else it is
    taken as always true: an upper bound). Guards that share no index are counted apart."""
    ranges = {name: extent.value for name, extent in scope if extent.is_const}
    terms = [term for cond, side in guards for term in (_conjuncts(cond) if side else [(cond, False)])]
    groups: list[tuple[set[str], list[tuple[Value, bool]]]] = []
    for cond, side in terms:
        names = set(cond.summary.symbols)
        if not names <= ranges.keys():
            continue
        joined = [g for g in groups if g[0] & names]
        groups = [g for g in groups if not g[0] & names]
        groups.append((names.union(*(g[0] for g in joined)), [t for g in joined for t in g[1]] + [(cond, side)]))
    count, counted = ONE, set()
    for names, conds in sorted(groups, key=lambda g: sorted(g[0])):
        order = sorted(names)
        if math.prod(ranges[n] for n in order) > MAX_POINTS:
            continue
        try:
            held = sum(
                all(bool(index_value(c, dict(zip(order, at)))) == side for c, side in conds)
                for at in itertools.product(*(range(ranges[n]) for n in order))
            )
        except ValueError:  # an op index_value does not know: always true
            continue
        count, counted = count * held, counted | names
    return count * product(extent for name, extent in scope if name not in counted)


def _conjuncts(cond: Value) -> list[tuple[Value, bool]]:
    """The terms of a conjunction, each to hold."""
    if isinstance(cond, Binary) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [(cond, True)]


def contraction_ops(
    batch: Expr, rows: Expr, cols: Expr, depth: Expr, a: Value, b: Value, epilogue: Value | None
) -> Expr:
    """A packed gemm's ops: 2*M*N*K, its operands' ops once per element (the driver packs each
    panel once, then reuses it), its epilogue's once per output."""
    last = ZERO if epilogue is None else element_work(epilogue).ops * rows * cols
    return batch * (
        2 * rows * cols * depth + element_work(a).ops * rows * depth + element_work(b).ops * depth * cols + last
    )


def elements(compute: Compute) -> Expr:
    return product(extent for _, extent in compute.indices)


def buffer_bytes(buffer: Buffer) -> Expr:
    return product(buffer.shape) * buffer.dtype.itemsize


def computes_cost(computes: Iterable[Compute], buffers: dict[str, Buffer], stored: Iterable[str]) -> Cost:
    """The cost of computes run as one kernel that stores the buffers named in `stored`: it
    reads each buffer it loads and does not itself write, once."""
    computes = list(computes)
    flops = calls = ZERO
    for c in computes:
        work = compute_work(c)
        flops, calls = flops + work.ops, calls + work.calls
    written = {c.name for c in computes}
    loaded = dict.fromkeys(b for c in computes for b in loaded_buffers(c.body) if b not in written)
    return Cost(
        flops,
        calls,
        sum((buffer_bytes(buffers[b]) for b in loaded), ZERO),
        sum((buffer_bytes(buffers[b]) for b in stored), ZERO),
    )


def at_reference(e: Expr, sizes: dict[str, int] | None = None) -> int:
    """The value of e with every free symbol at REFERENCE_SIZE (or at `sizes`)."""
    return e.evaluate({name: (sizes or {}).get(name, REFERENCE_SIZE) for name in e.free_symbols()})


def no_more_than(a: Expr, b: Expr) -> bool:
    """The comparison rule of costs: a <= b with every free symbol at REFERENCE_SIZE. Symbols
    fixed by -D are constants already; for the others this compares the highest degrees first,
    then the coefficients of the terms of that degree."""
    return at_reference(a) <= at_reference(b)


def degree(e: Expr) -> int:
    """The total degree of e in its free symbols (floor divisions and maxima count as the
    degree of what they divide or compare), measured by doubling every symbol."""
    low, high = at_reference(e), at_reference(e, {name: 2 * REFERENCE_SIZE for name in e.free_symbols()})
    if low <= 0 or high <= low:
        return 0
    return round(math.log2(high / low))
