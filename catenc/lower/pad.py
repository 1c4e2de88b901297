"""Padded windows read from a zero-padded copy of their plane: no guards in the window's loops.

A depthwise convolution (or a padded pool) reads `where(0 <= h + r - p < H & 0 <= w + s - p < W,
x[c, h + r - p, w + s - p], 0)` at each tap. lower/guards.py splits the loops where those guards
change, but on the small planes of the mobile networks (14x14, 7x7 with a 5x5 window) most of
the plane is edge: the edges run scalar, one guarded tap at a time. Here the plane the window
reads is copied once per plane into a local array with the padding value around it
(`PaddedPlane`), and every tap reads the copy unguarded: each row of outputs is one vector loop.
The copy holds exactly what the guarded reads returned, so the values computed are the same.
A window of stride 2 or more without padding (SqueezeNet's 3x3 stride-2 max pools) is copied as
well, into its column phases, so that its taps read consecutive columns and the row vectorises.

A row whose length is not a multiple of the vector then ends in a scalar remainder (12 of a
28-wide row with 16 lanes) that costs as much as the vectors. Its last vector's worth of
columns instead runs once more as one block, overlapping the columns before it: those are
computed again to the same values and stored again (the body only stores what it does not read).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from catenc.ir.build import compute_dtype
from catenc.ir.evaluate import index_value
from catenc.ir.nodes import Const, Load, Value, Where, walk
from catenc.ir.verify import conjuncts
from catenc.lower.guards import substituted
from catenc.lower.lanes import Storage
from catenc.lower.loops import (
    PLANE_COL,
    PLANE_ROW,
    Assign,
    Declare,
    For,
    LoopKernel,
    PaddedPlane,
    Stmt,
    Store,
    iter_stmts,
    stmt_values,
)
from catenc.symbolic import ZERO, Expr, const, sym

PLANE_BYTES = 64 * 1024  # the largest padded copy kept on a thread's stack
MIN_TAPS = 2  # guarded reads of one plane that pay for its copy
PLANE = "catenc_plane"  # prefix of the copies' names

Ranges = dict[str, int]  # loop index -> its extent (constant)


def pad_windows(kernel: LoopKernel, buffers: Mapping[str, Storage]) -> LoopKernel:
    """The kernel with each serial pair of loops over a plane whose body reads padded windows
    reading a padded copy instead, its rows in blocks of the kernel's vector lanes."""
    names = itertools.count()
    return replace(kernel, body=_pad_body(kernel.body, buffers, names, kernel.decisions.vector_lanes))


def _pad_body(
    body: tuple[Stmt, ...], buffers: Mapping[str, Storage], names: Iterator[int], lanes: int
) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for stmt in body:
        planes, stmt, guarded = _padded(stmt, buffers, names) if isinstance(stmt, For) else ((), stmt, False)
        if planes:
            (inner,) = stmt.body
            width = lanes * 4 // _widest(inner)
            # a window read through guards ends its rows in one overlapping block; a strided one without
            # them keeps its row loop (its rows, 55 wide in SqueezeNet, would compute 16% of it twice)
            out += [*planes, replace(stmt, body=_blocks(inner, width) if guarded else (inner,))]
        else:
            out.append(stmt.with_children(_pad_body(stmt.children(), buffers, names, lanes)))
    return tuple(out)


@dataclass(frozen=True)
class _Read:
    """A load of one plane at (row, col) of its last two axes; `template` is the load at
    (PLANE_ROW, PLANE_COL)."""

    node: Load
    template: Load
    row: Expr
    col: Expr


def _padded(loop: For, buffers: Mapping[str, Storage], names: Iterator[int]) -> tuple[list[PaddedPlane], For, bool]:
    """The copies a nest of loops over a plane reads, the nest reading them (no copies: the loop as
    it is), and whether the nest reads through a guard or a select (then every copy is a guarded window's)."""
    ranges = _nest_ranges(loop)
    if ranges is None:
        return [], loop, False
    rows, cols = loop.index, loop.body[0].index
    nodes = list(dict.fromkeys(n for stmt in iter_stmts((loop,)) for v in stmt_values(stmt) for n in walk(v)))
    reads = {node: read for node in nodes if (read := _read(node, ranges)) is not None}
    taps = [n for n in nodes if isinstance(n, Where) and isinstance(n.b, Const) and n.a in reads]
    written = {stmt.buffer for stmt in iter_stmts((loop,)) if isinstance(stmt, Store)}
    planes: list[PaddedPlane] = []
    rewrite: dict[Value, Value] = {}
    # an unguarded window of stride 2 or more (a max pool without padding) is copied to phases too, so that
    # its taps read consecutive positions; not where a select decides which reads happen (a pool over a
    # concatenation): a copy would read every element of both sides, some outside their buffers
    selects = any(isinstance(n, Where) for n in nodes)
    strided = [] if selects else [r.template for r in reads.values() if _column_step(r.col, cols) not in (None, 1)]
    for template in dict.fromkeys([reads[tap.a].template for tap in taps] + strided):  # first-read order
        group = [tap for tap in taps if reads[tap.a].template == template]
        same = [read for read in reads.values() if read.template == template]
        copy = _plane_copy(template, group, same, rows, cols, ranges, buffers, written)
        if copy is None:
            continue
        copy = replace(copy, name=f"{PLANE}{next(names)}")
        planes.append(copy)
        for read in same:  # guarded or not, it reads the copy
            rewrite[read.node] = _copy_read(copy, read, cols)
        for tap in group:
            rewrite[tap] = rewrite[tap.a]
    if not planes:
        return [], loop, selects
    return planes, _rewritten(loop, rewrite), selects


def _nest_ranges(loop: For) -> Ranges | None:
    """The extents of a serial loop over rows holding only a serial loop over columns whose
    body is straight code or more serial loops of constant extent (a window's taps); None when
    the nest is not such."""
    if len(loop.body) != 1 or not isinstance(loop.body[0], For):
        return None
    ranges: Ranges = {}
    for stmt in iter_stmts((loop,)):
        if isinstance(stmt, For):
            if stmt.parallel or not stmt.extent.is_const:
                return None
            ranges[stmt.index] = stmt.extent.value
        elif not isinstance(stmt, (Declare, Assign, Store)):
            return None
    return ranges


def _read(node: Value, ranges: Ranges) -> _Read | None:
    """The node as a value at one plane position, when nothing else in it moves with the nest:
    a load. (A fused producer's value there, such as ShuffleNet's residual ReLU under its
    average pool, would be computed once per element instead of once per tap inside the image,
    9-12% less time for ShuffleNet, measured; but the cost model, which the profile and the tuner
    read, counts it per tap, and counted work must stay what the loops execute.)"""
    if type(node) is not Load or len(node.index) < 2 or node.dtype.name in ("f16", "bf16", "bool"):
        return None
    row, col = node.index[-2:]
    template = replace(node, index=node.index[:-2] + (sym(PLANE_ROW), sym(PLANE_COL)))
    if template.summary.symbols & set(ranges):
        return None
    return _Read(node, template, row, col)


def _plane_copy(
    template: Load,
    group: list[Where],
    same: list[_Read],
    rows: str,
    cols: str,
    ranges: Ranges,
    buffers: Mapping[str, Storage],
    written: set[str],
) -> PaddedPlane | None:
    """The copy (unnamed) that the guarded reads of one plane can read instead, when each read's
    guard is exactly its position's being inside the plane and the copy is small enough."""
    source = buffers.get(template.buffer)
    if source is None or template.buffer in written or len({tap.b for tap in group}) > 1:
        return None
    if len(group if group else same) < MIN_TAPS:  # no guard: a strided window's taps, copied to phases
        return None
    if not all(e.is_const for e in source.shape[-2:]):
        return None
    plane = tuple(e.value for e in source.shape[-2:])
    spans = [_span((read.row, read.col), ranges, rows, cols) for read in same]
    steps = {_column_step(read.col, cols) for read in same}
    if any(span is None for span in spans) or len(steps) != 1 or None in steps:
        return None
    (phases,) = steps
    at = {read.node: (read.row, read.col) for read in same}
    if not all(_guard_is_bounds(tap.cond, at[tap.a], plane, ranges) for tap in group):
        return None
    low = [min(span[k][0] for span in spans) for k in (0, 1)]
    high = [max(span[k][1] for span in spans) for k in (0, 1)]
    offset = (max(0, -low[0]), max(0, -low[1]))
    padded = tuple(plane[k] + offset[k] + max(0, high[k] - plane[k] + 1) for k in (0, 1))
    shape = (padded[0], -(-padded[1] // phases))
    if (padded == plane and phases == 1) or phases * shape[0] * shape[1] * template.dtype.itemsize > PLANE_BYTES:
        return None
    fill = group[0].b if group else Const(template.dtype, 0)  # no guard, no padding: nothing is filled
    return PaddedPlane("", template, plane, shape, offset, fill, phases)


def _column_step(col: Expr, cols: str) -> int | None:
    """How far a read's column moves per column of the loop (its stride): 1, or, where the rest
    of its column is a constant (a strided window's unrolled tap), that constant step."""
    step = col.coefficient(cols)
    if not step.is_const or step.value < 1:
        return None
    rest = col - step * sym(cols)
    return step.value if step.value == 1 or rest.is_const else None


def _copy_read(copy: PaddedPlane, read: _Read, cols: str) -> Load:
    """A read of the plane as the read of the copy it becomes: phase p of a copy of n phases
    holds the padded columns p, p + n, p + 2n, ..., so that a window of stride n reads each
    phase at consecutive positions."""
    (top, left), n = copy.offset, copy.phases
    row, col, dtype = read.row, read.col, read.node.dtype
    if n == 1:
        return Load(dtype, copy.name, (ZERO, row + top, col + left))
    rest = (col - n * sym(cols)).value + left
    return Load(dtype, copy.name, (const(rest % n), row + top, sym(cols) + rest // n))


def _span(
    index: tuple[Expr, Expr], ranges: Ranges, rows: str, cols: str
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The lowest and highest row and column a read reaches over the nest, when its row moves
    with the loop over rows (and its taps) alone and its column with the loop over columns."""
    row_names, col_names = (index[k].free_symbols() for k in (0, 1))
    if not (row_names | col_names) <= set(ranges) or row_names & col_names:
        return None
    if cols in row_names or rows in col_names:
        return None
    return tuple(_extremes(index[k], index[k].free_symbols(), ranges) for k in (0, 1))


def _extremes(e: Expr, names: set[str], ranges: Ranges) -> tuple[int, int]:
    values = [e.evaluate(env) for env in _points(names, ranges)]
    return min(values), max(values)


def _points(names: set[str], ranges: Ranges) -> Iterator[dict[str, int]]:
    ordered = sorted(names)
    for point in itertools.product(*(range(ranges[n]) for n in ordered)):
        yield dict(zip(ordered, point))


def _guard_is_bounds(cond: Value, position: tuple[Expr, Expr], plane: tuple[int, int], ranges: Ranges) -> bool:
    """Whether a guard holds exactly where its read's row and column are inside the plane:
    each conjunct reads only the row's indices or only the column's, and the conjuncts of each
    side, at every point of that side's loops, agree with its bounds."""
    sides = [position[0].free_symbols(), position[1].free_symbols()]
    terms: list[list[Value]] = [[], []]
    for term in conjuncts(cond):
        names = term.summary.symbols
        side = next((k for k in (0, 1) if names <= sides[k]), None)
        if side is None:
            return False
        terms[side].append(term)
    for k in (0, 1):
        for env in _points(sides[k], ranges):
            inside = 0 <= position[k].evaluate(env) < plane[k]
            try:
                holds = all(index_value(term, env) for term in terms[k])
            except ValueError:  # a conjunct reads data
                return False
            if holds != inside:
                return False
    return True


def _widest(loop: For) -> int:
    """The bytes of the widest value the loop computes: its vectors' lanes are of that type (a u8
    plane's taps multiplied in f32 run 16 to an AVX-512 vector, not 64)."""
    values = (n for s in iter_stmts(loop.body) for v in stmt_values(s) for n in walk(v))
    return max((compute_dtype(n.dtype).itemsize for n in values), default=4)


def _blocks(loop: For, block: int) -> tuple[For, ...]:
    """The loop over a row as whole vectors of `block` lanes and, where a remainder is left, one
    more vector ending at the row's end. A row shorter than a vector stays as it is: the C
    compiler's own code for it (masked or half-width vectors) measured faster than two
    overlapping half-width blocks (1.5x on 14- and 7-wide rows)."""
    n = loop.extent.value
    if block < 2 or n < block or n % block == 0 or not _repeatable(loop.body):
        return (loop,)
    last = replace(
        loop,
        extent=const(block),
        body=tuple(substituted(s, {loop.index: sym(loop.index) + (n - block)}) for s in loop.body),
    )
    return (replace(loop, extent=const(n - n % block)), last)


def _repeatable(body: tuple[Stmt, ...]) -> bool:
    """Whether running the body again at the same indices changes nothing: it assigns only locals
    it declares, and stores only to buffers it does not read."""
    stored = {s.buffer for s in iter_stmts(body) if isinstance(s, Store)}
    declared: set[str] = set()
    for stmt in iter_stmts(body):
        if isinstance(stmt, Declare):
            declared.add(stmt.name)
        elif isinstance(stmt, Assign) and stmt.name not in declared:
            return False
        if any(isinstance(n, Load) and n.buffer in stored for v in stmt_values(stmt) for n in walk(v)):
            return False
    return True


def _rewritten(stmt: Stmt, rewrite: dict[Value, Value]) -> Stmt:
    """The statement with every node `rewrite` names replaced (outermost first)."""
    if isinstance(stmt, (Declare, Assign, Store)):
        stmt = replace(stmt, value=_replaced(stmt.value, rewrite))
    return stmt.with_children(tuple(_rewritten(s, rewrite) for s in stmt.children()))


def _replaced(value: Value, rewrite: dict[Value, Value]) -> Value:
    found = rewrite.get(value)
    if found is not None:
        return found
    return value.with_children(tuple(_replaced(c, rewrite) for c in value.children()))
