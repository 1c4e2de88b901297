"""Innermost loops that read or write at a stride kept scalar.

A loop over `w` whose body reads `x[..., 2*w + s]` (a 3x3 stride-2 max pool without padding, an
unpadded average pool) or stores at such a stride is one that clang's vectoriser turns into
gathers (or scatters): on a Cascade Lake core SqueezeNet's 3x3 stride-2 max pool ran 4.6x slower
so (3.4 ms) than as scalar code (0.75 ms). gcc -O2 keeps such loops scalar already. The loop is
marked `scalar` and the renderer asks the compiler not to vectorise it; a body that calls a
transcendental, a division or a power keeps its vectors (the math gains more from them than the
gathers cost). Results are unchanged: the same operations in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from catenc.ir.nodes import Load, walk
from catenc.ir.passes import calls_expensive
from catenc.lower.flat import step_along
from catenc.lower.lanes import Storage
from catenc.lower.loops import For, LoopKernel, Stmt, Store, stmt_values


def keep_strided_loops_scalar(kernel: LoopKernel, buffers: Mapping[str, Storage]) -> LoopKernel:
    """The kernel with every serial innermost loop that reads or writes memory at a constant stride of
    2 or more along its index, and calls nothing expensive, marked scalar."""
    return replace(kernel, body=_mark(kernel.body, buffers))


def _mark(body: tuple[Stmt, ...], buffers: Mapping[str, Storage]) -> tuple[Stmt, ...]:
    out = []
    for stmt in body:
        stmt = stmt.with_children(_mark(stmt.children(), buffers))
        if isinstance(stmt, For) and not stmt.parallel and _strided(stmt, buffers):
            stmt = replace(stmt, scalar=True)
        out.append(stmt)
    return tuple(out)


def _strided(loop: For, buffers: Mapping[str, Storage]) -> bool:
    """Whether `loop` is innermost, cheap, and touches memory at a stride of 2 or more along its index."""
    if any(stmt.children() for stmt in loop.body):
        return False
    values = [v for stmt in loop.body for v in stmt_values(stmt)]
    if any(calls_expensive(v) for v in values):
        return False
    accesses = [(v.buffer, v.index) for value in values for v in walk(value) if type(v) is Load]
    accesses += [(s.buffer, s.index) for s in loop.body if isinstance(s, Store)]
    return any(
        step_along(index, buffers[buffer].shape, loop.index) >= 2 for buffer, index in accesses if buffer in buffers
    )
