"""Baked constants packed at compile time as the B operand of the packed gemm.

A gemm whose B is a plain read of a baked constant (a weight: `x @ w`, ONNX `Gemm` with transB=1,
`MatMul` by an initializer) need not pack it on every call: its panels, in the driver's layout
for the whole depth (templates/gemm.c.j2, `bp`), are computed here once and stored in the
constant's C array after its values, and the call reads them in place; a constant nothing else
reads holds its panels alone (its values dropped: the library does not grow). A kernel function that
other kernels share (catenc/lower/share.py) reads its panels only where every one of its callers'
constants has them, at the same place; a constant holds one set of panels, for the first way a
gemm reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from catenc.ir.nodes import Load, walk
from catenc.lower.gemm import ConstantB, PackedB, constant_b
from catenc.lower.lanes import Storage
from catenc.lower.loops import Gemm, LoopKernel, iter_stmts, stmt_values
from catenc.schedule.tiles import PANEL_ALIGN, GemmTiles, slice_depth


@dataclass(frozen=True)
class Prepacked:
    """Which buffers each kernel function reads B panels of (by its parameter names), and what
    each baked constant's array holds after its values (padding, then the panels)."""

    panels: Mapping[str, Mapping[str, PackedB]]  # kernel function -> buffer -> its panels
    appended: Mapping[str, np.ndarray]  # constant -> the elements after its values
    replaced: frozenset[str] = frozenset()  # constants whose array holds only their panels


ROUNDS = 4  # tries at dropping the values of constants read only as panels (their places move)


def prepack(
    kernels: tuple[LoopKernel, ...],
    buffers: Mapping[str, Storage],
    tiles: Mapping[str, GemmTiles],
    values: Mapping[str, np.ndarray],
    aliased: frozenset[str] = frozenset(),
) -> Prepacked:
    """The gemm operands B of the kernels (with their buffers and the gemm tiles by dtype) that are
    baked constants (`values`, by buffer name), packed; a constant that no kernel reads otherwise and
    no view aliases (`aliased`) keeps only its panels."""
    sites: dict[str, list[list[ConstantB | None]]] = {}  # function -> per caller, its gemms' B (None: not one)
    for kernel in kernels:
        found = []
        for stmt in iter_stmts(kernel.body):
            if isinstance(stmt, Gemm):
                source = constant_b(stmt.contraction, buffers) if stmt.contraction.kind in tiles else None
                found.append(source if source is not None and source.buffer in values else None)
        sites.setdefault(kernel.shares or kernel.name, []).append(found)
    chosen: dict[str, ConstantB] = {}  # the first way each constant is read
    for callers in sites.values():
        for found in callers:
            for source in found:
                if source is not None:
                    chosen.setdefault(source.buffer, source)
    dropped: frozenset[str] = frozenset()
    for _ in range(ROUNDS):  # dropping values moves panels to 0, which may change what agrees
        panels, read = _placed(sites, chosen, {n: 0 if n in dropped else _after(values[n]) for n in chosen})
        alone = frozenset(read - aliased - _read_otherwise(kernels, panels))
        if alone == dropped:
            break
        dropped = alone
    else:
        dropped = frozenset()
        panels, read = _placed(sites, chosen, {n: _after(values[n]) for n in chosen})
    appended = {}
    for name in sorted(read):
        v = values[name]
        b = v.reshape(-1)[positions(chosen[name])]
        pad = np.zeros(0 if name in dropped else _after(v) - v.size, dtype=v.dtype)
        appended[name] = np.concatenate([pad, pack_b_panels(b, tiles[buffers[name].dtype.name])])
    return Prepacked(panels, appended, dropped)


def _placed(
    sites: Mapping[str, list[list[ConstantB | None]]], chosen: Mapping[str, ConstantB], at: Mapping[str, int]
) -> tuple[dict[str, dict[str, PackedB]], set[str]]:
    """Which panels each kernel function reads, with each constant's panels `at` their places, and the
    constants some function reads panels of."""
    panels: dict[str, dict[str, PackedB]] = {}
    read: set[str] = set()
    for function, callers in sites.items():
        for n, source in enumerate(callers[0]):
            if source is None or not all(_agrees(f[n], source, chosen, at) for f in callers):
                continue
            panels.setdefault(function, {})[source.buffer] = PackedB(source, at[source.buffer])
            read.update(f[n].buffer for f in callers)
    return panels, read


def _read_otherwise(kernels: tuple[LoopKernel, ...], panels: Mapping[str, Mapping[str, PackedB]]) -> set[str]:
    """The buffers the kernels read other than as the B panels they read (`panels`, by function; a
    function shared by callers reads each caller's own buffer at the same site)."""
    names: set[str] = set()
    first = {}  # function -> the first caller's gemm B buffers, in site order
    for kernel in kernels:
        function = kernel.shares or kernel.name
        gemms = [stmt for stmt in iter_stmts(kernel.body) if isinstance(stmt, Gemm)]
        own = first.setdefault(function, [g.contraction.b for g in gemms])
        with_panels = panels.get(function, {})
        for stmt in iter_stmts(kernel.body):
            operands = stmt_values(stmt)
            if isinstance(stmt, Gemm):
                site = gemms.index(stmt)
                b = own[site] if site < len(own) else None
                if isinstance(b, Load) and b.buffer in with_panels:
                    operands = [v for v in operands if v is not stmt.contraction.b]
            names.update(n.buffer for v in operands for n in walk(v) if isinstance(n, Load))
    return names


def _agrees(source: ConstantB | None, first: ConstantB, chosen: Mapping[str, ConstantB], at: Mapping[str, int]) -> bool:
    """Whether a caller's B at a site reads its constant the way its panels hold it, at the same place."""
    return source is not None and chosen[source.buffer] == source and at[source.buffer] == at[first.buffer]


def _after(values: np.ndarray) -> int:
    """Where a constant's panels start in its array: past its values, aligned as the driver wants B."""
    per = PANEL_ALIGN // values.dtype.itemsize
    return -(-values.size // per) * per


def positions(source: ConstantB) -> np.ndarray:
    """The [K, N] flat positions in the constant of B(k, j), k and j flattened."""

    def walk(axes: tuple[tuple[int, int], ...]) -> np.ndarray:
        at = np.zeros(1, dtype=np.int64)
        for coefficient, extent in axes:
            at = (at[:, None] + coefficient * np.arange(extent, dtype=np.int64)[None, :]).reshape(-1)
        return at

    return source.offset + walk(source.depth)[:, None] + walk(source.cols)[None, :]


def pack_b_panels(b: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """B [K, N] as the driver's panels of every k-slice in order (templates/gemm.c.j2): slice pc's
    at pc * round_up(N, NR), panel q at q*kb*NR, (depth k, col c) at k*NR + c, zeros past N."""
    depth, cols = b.shape
    nr = tiles.nr
    padded = np.zeros((depth, -(-cols // nr) * nr), dtype=b.dtype)
    padded[:, :cols] = b
    kc = slice_depth(tiles, depth) if depth else 1
    out = []
    for pc in range(0, depth, kc):
        part = padded[pc : pc + kc]
        out.append(part.reshape(part.shape[0], -1, nr).transpose(1, 0, 2).reshape(-1))
    return np.concatenate(out) if out else np.zeros(0, dtype=b.dtype)
