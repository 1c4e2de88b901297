"""Short reduction loops unrolled: a pool's or a convolution's window of taps as straight code.

A 3x3 pool reduces `acc = op(acc, x[2*i + r, 2*j + s])` over r, s < 3 inside the loop over j;
with the tap loops innermost a C compiler keeps the loop over j scalar. Unrolled (the same
updates in the same order), the loop over j is innermost and straight, its guards comparisons of
j with constants that lower/guards.py splits out.
"""

from __future__ import annotations

from dataclasses import replace

from catenc.ir.passes import substitute
from catenc.lower.loops import Assign, For, LoopKernel, Stmt
from catenc.symbolic import const

MAX_UNROLLED = 32  # most updates a window's loops unroll into


def unroll_windows(kernel: LoopKernel) -> LoopKernel:
    """The kernel with every nest of short loops of accumulator updates unrolled."""
    return replace(kernel, body=_unroll(kernel.body))


def _unroll(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for stmt in body:
        updates = _updates(stmt)
        if updates is not None and len(updates) <= MAX_UNROLLED and isinstance(stmt, For):
            out += updates
        else:
            out.append(stmt.with_children(_unroll(stmt.children())))
    return tuple(out)


def _updates(stmt: Stmt) -> list[Assign] | None:
    """The updates a nest of serial loops of constant extent over accumulator updates makes, in
    order (None: not such a nest, or more than MAX_UNROLLED of them)."""
    if isinstance(stmt, Assign):
        return [stmt]
    if not (isinstance(stmt, For) and not stmt.parallel and stmt.extent.is_const):
        return None
    one: list[Assign] = []
    for inner in stmt.body:
        updates = _updates(inner)
        if updates is None:
            return None
        one += updates
    if len(one) * stmt.extent.value > MAX_UNROLLED:
        return None
    at = [{stmt.index: const(k)} for k in range(stmt.extent.value)]
    return [replace(a, value=substitute(a.value, mapping)) for mapping in at for a in one]
