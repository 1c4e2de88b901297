"""A LaneReduce expanded into the loops that run it (catenc/lower/vectorize.py makes them).

Every reduction k of the statement gets a lane array LANES[k][0..lanes): the lanes start at the
operation's identity, take a vector of elements at a time (lane l the indices = l mod lanes),
the tail past the last full vector goes straight into the accumulators, then each array is
combined as a tree (width lanes/2, lanes/4, ... 1: a fixed order, vector code) into its
accumulator. The renderer spells this frame around the statements decided here:

    full = extent - extent % lanes
    for l < lanes: LANES[k][l] = start
    for base = 0; base < full; base += lanes: prefetches; for l < lanes: index = base + l; body
    for index = full; index < extent: tail
    for w = lanes/2; w > 0; w /= 2: for l < w: combine
    finish
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from catenc.dtypes import DType
from catenc.ir.nodes import Binary, Const, Load, Local, walk
from catenc.lower.flat import flatten
from catenc.lower.loops import Assign, Declare, LaneReduce, Stmt, Store, identity
from catenc.symbolic import Expr, sym

LANES = "catenc_lanes"  # the lane arrays, LANES[k][l]
LANE = "catenc_l"  # the lane a step of the vector loop fills
WIDTH = "catenc_w"  # half the lanes still to combine
BASE = "catenc_base"  # the first element of the current vector
FULL = "catenc_full"  # the elements the vector loop covers
ITEM = "catenc_item"  # the element's value, when it is also stored
PREFETCH_BYTES = 4096  # how far ahead jammed rows are fetched


class Storage(Protocol):
    """What the expansion reads of a buffer: its storage dtype and shape."""

    dtype: DType
    shape: tuple[Expr, ...]


@dataclass(frozen=True)
class LaneLoops:
    """The loops of one LaneReduce (see the module doc for the frame they fill)."""

    dtype: DType
    count: int  # lane arrays, one per reduction
    lanes: int  # a power of two
    index: str
    extent: Expr
    start: Const  # every lane's first value: the operation's identity
    prefetches: tuple[tuple[str, Expr], ...]  # (buffer, flat position) hinted per vector step
    body: tuple[Stmt, ...]  # one element into lane LANE of every array
    tail: tuple[Stmt, ...]  # one element into every accumulator
    combine: tuple[Stmt, ...]  # lane LANE op= lane LANE + WIDTH, every array
    finish: tuple[Stmt, ...]  # every accumulator op= its array's lane 0


def lane(k: int, at: str) -> str:
    """Lane `at` of reduction k's array."""
    return f"{LANES}[{k}][{at}]"


def expand_lanes(stmt: LaneReduce, buffers: Mapping[str, Storage]) -> LaneLoops:
    """The loops of a LaneReduce; `buffers` gives the shapes and storage dtypes it reads."""
    n, dtype = stmt.lanes, stmt.dtype
    if n & (n - 1):
        raise ValueError(f"lane count {n} is not a power of two")
    op = {"add": "sum", "mul": "prod"}.get(stmt.op, stmt.op)
    count = range(len(stmt.reductions))

    def combined(target: str, other: str) -> Assign:
        return Assign(target, Binary(dtype, stmt.op, Local(dtype, target), Local(dtype, other)))

    def steps(target) -> tuple[Stmt, ...]:
        return tuple(s for k in count for s in _step(stmt, k, target(k)))

    return LaneLoops(
        dtype,
        len(stmt.reductions),
        n,
        stmt.index,
        stmt.extent,
        Const(dtype, identity(op, dtype)),
        _prefetches(stmt, buffers),
        steps(lambda k: lane(k, LANE)),
        steps(lambda k: stmt.reductions[k][0]),
        tuple(combined(lane(k, LANE), lane(k, f"{LANE} + {WIDTH}")) for k in count),
        tuple(combined(acc, lane(k, "0")) for k, (acc, _) in enumerate(stmt.reductions)),
    )


def _step(stmt: LaneReduce, k: int, target: str) -> tuple[Stmt, ...]:
    """`target = op(target, value)` for reduction k, the value also stored where the
    statement says."""
    value, dtype = stmt.reductions[k][1], stmt.dtype
    if stmt.store is None:
        return (Assign(target, Binary(dtype, stmt.op, Local(dtype, target), value)),)
    item = Local(dtype, ITEM)
    return (
        Declare(ITEM, dtype, value),
        Store(*stmt.store, item),
        Assign(target, Binary(dtype, stmt.op, Local(dtype, target), item)),
    )


def _prefetches(stmt: LaneReduce, buffers: Mapping[str, Storage]) -> tuple[tuple[str, Expr], ...]:
    """For jammed rows (several matrix rows streamed at once): a hint per row to fetch what the
    loop reads PREFETCH_BYTES later, so that more of memory's latency overlaps. Only loads
    whose last index alone walks the reduction count."""
    if not stmt.more:
        return ()
    out: dict[tuple[str, str], tuple[str, Expr]] = {}  # by spelling: one hint per address
    for _, value in stmt.reductions:
        for load in walk(value):
            if not (isinstance(load, Load) and load.index and stmt.index in load.index[-1].free_symbols()):
                continue
            if any(stmt.index in e.free_symbols() for e in load.index[:-1]):
                continue
            buf = buffers[load.buffer]
            ahead = PREFETCH_BYTES // buf.dtype.itemsize
            flat = flatten([e.substitute({stmt.index: sym(BASE) + ahead}) for e in load.index], buf.shape)
            out.setdefault((load.buffer, flat.to_c()), (load.buffer, flat))
    return tuple(out.values())
