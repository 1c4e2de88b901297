"""Nested loops collapsed into one where every element they touch steps alike through memory.

An elementwise kernel over a [C, 28, 28] tensor loops `c`, then `h < 28`, then `w < 28`: the
innermost loop runs 28 times, one 16-lane AVX-512 vector and a scalar remainder of 12. When every
load, index value and store of the inner body is at a position that steps by one as the flattened
(h, w) does (a row-major plane read and written as stored), the two loops are one loop of 784 over
the flat position (lower/gemm.py `contiguous_walk` decides and rewrites, as for a gemm's
epilogue), and the remainder is one iteration in 50 instead of 12 in 28. The same elements are
computed by the same operations in the same order: results are bit-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from catenc.ir.nodes import Load, walk
from catenc.lower.flat import flatten, indices_at
from catenc.lower.gemm import contiguous_walk
from catenc.lower.lanes import Storage
from catenc.lower.loops import Declare, For, LoopKernel, Stmt, Store
from catenc.symbolic import sym


def collapse_loops(kernel: LoopKernel, buffers: Mapping[str, Storage]) -> LoopKernel:
    """The kernel with each serial loop of constant extent whose body is one such loop of plain
    statements collapsed with it, where the walk allows (innermost pairs first, so a nest of three
    may become one)."""
    return replace(kernel, body=_collapse_body(kernel.body, buffers))


def _collapse_body(body: tuple[Stmt, ...], buffers: Mapping[str, Storage]) -> tuple[Stmt, ...]:
    out = []
    for stmt in body:
        stmt = stmt.with_children(_collapse_body(stmt.children(), buffers))
        out.append(_collapsed(stmt, buffers) if isinstance(stmt, For) else stmt)
    return tuple(out)


def _collapsed(outer: For, buffers: Mapping[str, Storage]) -> For:
    """`outer` and the one loop it holds as one loop, or `outer` as it is."""
    if outer.parallel or len(outer.body) != 1 or not isinstance(outer.body[0], For):
        return outer
    inner = outer.body[0]
    if inner.parallel or not inner.body or not all(type(s) in (Declare, Store) for s in inner.body):
        return outer
    if not (outer.extent.is_const and inner.extent.is_const):  # sizes known: the bounds stay provable
        return outer
    if any(type(v) is Load and v.buffer not in buffers for s in inner.body for v in walk(s.value)):
        return outer  # a read of a local copy (lower/pad.py) keeps its rows
    axes = ((outer.index, outer.extent), (inner.index, inner.extent))
    statements = []
    for stmt in inner.body:
        positions = (flatten(list(stmt.index), list(buffers[stmt.buffer].shape)),) if isinstance(stmt, Store) else ()
        walked, value, _ = contiguous_walk(axes, stmt.value, positions, buffers)
        if len(walked) != 1:
            return outer
        (name, extent), at = walked[0], indices_at(sym(walked[0][0]), axes)
        index = tuple(e.substitute(at) for e in stmt.index) if isinstance(stmt, Store) else ()
        statements.append(replace(stmt, value=value, **({"index": index} if index else {})))
    return For(name, extent, tuple(statements))
