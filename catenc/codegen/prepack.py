"""Constants packed once as an operand of the packed gemm (or transformed as a Winograd convolution's
filters): at compile time when baked, at load when packed (--weights packed, codegen/pack_weights.py).

A gemm whose B is a plain read of a baked constant (a weight: `x @ w`, ONNX `Gemm` with transB=1,
`MatMul` by an initializer), or an int8 gemm whose A is (a quantised convolution's weight), need
not pack it on every call: its panels, in the driver's layout for the whole depth
(templates/gemm.c.j2, `bp` and `ap`), are computed here once and stored in the constant's C array
after its values, and the call reads them in place; a constant nothing else
reads holds its panels alone (its values dropped: the library does not grow). A kernel function that
other kernels share (catenc/lower/share.py) reads its panels only where every one of its callers'
constants has them, at the same place; a constant holds one set of panels, for the first way a
gemm reads it. A Winograd convolution's baked filters (schedule/winograd.py) get their transform
appended the same way, after their values, which are kept. With --weights packed the block that
NAME_pack_weights fills holds each constant as its array here would be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from catenc.ir.nodes import Load, walk
from catenc.lower.gemm import ConstantOperand, PackedPanels, constant_operand
from catenc.lower.lanes import Storage
from catenc.lower.loops import Gemm, LoopKernel, WinogradGemm, iter_stmts, stmt_values
from catenc.schedule.contractions import narrow
from catenc.schedule.tiles import KINDS, PANEL_ALIGN, GemmTiles, slice_depth
from catenc.schedule.winograd import WinogradPlan


@dataclass(frozen=True)
class TransformedFilters:
    """A baked filter constant of a Winograd convolution transformed at compile time: U_xi =
    G g G^T as the products' B panels (templates/winograd.c.j2), `at` elements past the start of the
    constant's array (after its values, which other kernels may still read)."""

    buffer: str
    at: int


@dataclass(frozen=True)
class Appendix:
    """What a constant's array holds after its values (or alone, when they are dropped): `pad` zeros, then
    `elements` of either a gemm operand's panels (`source`, for the `kind` gemm's `tiles`) or a Winograd
    convolution's filters transformed (`plan`). Computed here for a baked constant (`appended_values`), by
    the library's NAME_pack_weights for a packed one (codegen/pack_weights.py)."""

    pad: int
    elements: int
    tiles: GemmTiles
    kind: str = "f32"
    source: ConstantOperand | None = None
    plan: WinogradPlan | None = None

    @property
    def operand(self) -> str:
        """What the panels are, for a comment: the gemm's "A" or "B", or "Winograd filter"."""
        return "Winograd filter" if self.plan is not None else self.source.side.upper()


@dataclass(frozen=True)
class Prepacked:
    """Which buffers each kernel function reads panels of (by its parameter names), and what
    each constant's array holds after its values (padding, then the panels)."""

    panels: Mapping[str, Mapping[str, PackedPanels | TransformedFilters]]  # kernel function -> buffer -> its panels
    appended: Mapping[str, Appendix] = field(default_factory=dict)  # constant -> what follows its values
    replaced: frozenset[str] = frozenset()  # constants whose array holds only their panels


ROUNDS = 4  # tries at dropping the values of constants read only as panels (their places move)


def prepack(
    kernels: tuple[LoopKernel, ...],
    buffers: Mapping[str, Storage],
    tiles: Mapping[str, GemmTiles],
    values: Mapping[str, np.ndarray],
    aliased: frozenset[str] = frozenset(),
) -> Prepacked:
    """The gemm operands of the kernels (with their buffers and the gemm tiles by kind) that are
    baked constants (`values`, by buffer name) and constant_operand takes, packed; a constant that
    no kernel reads otherwise and no view aliases (`aliased`) keeps only its panels."""
    # function -> per caller, its gemms' A and B in turn (None: not one)
    sites: dict[str, list[list[ConstantOperand | None]]] = {}
    kinds: dict[str, str] = {}  # constant -> the kind of the gemm that reads it
    for kernel in kernels:
        found = []
        for stmt in iter_stmts(kernel.body):
            if isinstance(stmt, Gemm):
                c = stmt.contraction
                for side in ("a", "b"):
                    source = constant_operand(c, side, buffers) if c.kind in tiles else None
                    found.append(source if source is not None and source.buffer in values else None)
                    if found[-1] is not None:
                        kinds.setdefault(source.buffer, c.kind)
        sites.setdefault(kernel.shares or kernel.name, []).append(found)
    chosen: dict[str, ConstantOperand] = {}  # the first way each constant is read
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
    filters = _transformed_filters(kernels, values, set(chosen))
    for function, found in _filter_sites(kernels, filters, values).items():
        panels.setdefault(function, {}).update(found)
    appended = {
        name: Appendix(
            _after(values[name]) - values[name].size, filter_elements(plan, tiles["f32"]), tiles["f32"], plan=plan
        )
        for name, plan in filters.items()
    }
    for name in sorted(read):
        v, source, kind = values[name], chosen[name], kinds[name]
        pad = 0 if name in dropped else _after(v) - v.size
        depth, outer = (product_of(axes) for axes in (source.depth, source.outer))
        size = panels_elements(depth, outer, tiles[kind], kind, source.side)
        appended[name] = Appendix(pad, size, tiles[kind], kind, source=source)
    return Prepacked(panels, appended, dropped)


def appended_values(appendix: Appendix, values: np.ndarray) -> np.ndarray:
    """The elements a baked constant's array holds after its `values`: computed at compile time."""
    pad = np.zeros(appendix.pad, values.dtype)
    if appendix.plan is not None:
        return np.concatenate([pad, transform_filters(appendix.plan, values, appendix.tiles)])
    source = appendix.source
    operand = values.reshape(-1)[positions(source)]
    return np.concatenate([pad, pack_panels(operand, appendix.tiles, appendix.kind, source.side)])


def product_of(axes: tuple[tuple[int, int], ...]) -> int:
    """The positions an operand's (coefficient, extent) axes span."""
    return int(np.prod([extent for _, extent in axes], dtype=np.int64))


def panels_elements(depth: int, outer: int, tiles: GemmTiles, kind: str, side: str) -> int:
    """How many elements pack_panels writes for a [depth, outer] operand."""
    width, group = (tiles.mr if side == "a" else tiles.nr), KINDS[kind].group
    kc = slice_depth(tiles, depth, group) if depth else 1
    steps = sum(-(-min(kc, depth - pc) // group) * group for pc in range(0, depth, kc))
    return steps * -(-outer // width) * width


def filter_elements(plan: WinogradPlan, tiles: GemmTiles) -> int:
    """How many elements transform_filters writes: (m+2)^2 products' B panels, C deep and K wide."""
    conv = plan.conv
    return plan.transform.alpha**2 * conv.channels * -(-conv.filters // tiles.nr) * tiles.nr


def _placed(
    sites: Mapping[str, list[list[ConstantOperand | None]]],
    chosen: Mapping[str, ConstantOperand],
    at: Mapping[str, int],
) -> tuple[dict[str, dict[str, PackedPanels]], set[str]]:
    """Which panels each kernel function reads, with each constant's panels `at` their places, and the
    constants some function reads panels of."""
    panels: dict[str, dict[str, PackedPanels]] = {}
    read: set[str] = set()
    for function, callers in sites.items():
        for n, source in enumerate(callers[0]):
            if source is None or not all(_agrees(f[n], source, chosen, at) for f in callers):
                continue
            panels.setdefault(function, {})[source.buffer] = PackedPanels(source, at[source.buffer])
            read.update(f[n].buffer for f in callers)
    return panels, read


def _read_otherwise(kernels: tuple[LoopKernel, ...], panels: Mapping[str, Mapping[str, PackedPanels]]) -> set[str]:
    """The buffers the kernels read other than as the panels they read (`panels`, by function; a
    function shared by callers reads each caller's own buffer at the same site)."""
    names: set[str] = set()
    first = {}  # function -> the first caller's gemm operands (A, B), in site order
    for kernel in kernels:
        function = kernel.shares or kernel.name
        gemms = [stmt for stmt in iter_stmts(kernel.body) if isinstance(stmt, Gemm)]
        own = first.setdefault(function, [(g.contraction.a, g.contraction.b) for g in gemms])
        with_panels = panels.get(function, {})
        for stmt in iter_stmts(kernel.body):
            operands = stmt_values(stmt)
            if isinstance(stmt, Gemm):
                site = gemms.index(stmt)
                mine = (stmt.contraction.a, stmt.contraction.b)
                for side, operand in enumerate(own[site] if site < len(own) else ()):
                    read, packed = narrow(operand), None
                    if isinstance(read, Load):
                        packed = with_panels.get(read.buffer)
                    if packed is not None and packed.source.side == "ab"[side]:  # read as these panels
                        operands = [v for v in operands if v is not mine[side]]
            names.update(n.buffer for v in operands for n in walk(v) if isinstance(n, Load))
    return names


def _agrees(
    source: ConstantOperand | None, first: ConstantOperand, chosen: Mapping[str, ConstantOperand], at: Mapping[str, int]
) -> bool:
    """Whether a caller's operand at a site reads its constant the way its panels hold it, at the same place."""
    return source is not None and chosen[source.buffer] == source and at[source.buffer] == at[first.buffer]


def _after(values: np.ndarray) -> int:
    """Where a constant's panels start in its array: past its values, aligned as the driver wants panels."""
    per = PANEL_ALIGN // values.dtype.itemsize
    return -(-values.size // per) * per


def positions(source: ConstantOperand) -> np.ndarray:
    """The [K, P] flat positions in the constant of the operand at (depth k, outer p), both flattened."""

    def walk(axes: tuple[tuple[int, int], ...]) -> np.ndarray:
        at = np.zeros(1, dtype=np.int64)
        for coefficient, extent in axes:
            at = (at[:, None] + coefficient * np.arange(extent, dtype=np.int64)[None, :]).reshape(-1)
        return at

    return source.offset + walk(source.depth)[:, None] + walk(source.outer)[None, :]


def pack_panels(operand: np.ndarray, tiles: GemmTiles, kind: str, side: str) -> np.ndarray:
    """An operand [K, P] (depth by A's rows or B's columns) as the driver's panels of every k-slice in
    order (templates/gemm.c.j2), W = MR (A) or NR (B) positions wide: slice pc's at pc * round_up(P, W),
    panel q at q*kq*W with kq the slice's depth (rounded up to whole groups of an int8 kind), (depth k,
    position j) at k*W + j, or for groups of g steps at (k/g)*g*W + j*g + k%g; zeros past P and K."""
    depth, outer = operand.shape
    width, group = (tiles.mr if side == "a" else tiles.nr), KINDS[kind].group
    padded = np.zeros((depth, -(-outer // width) * width), dtype=operand.dtype)
    padded[:, :outer] = operand
    kc = slice_depth(tiles, depth, group) if depth else 1
    out = []
    for pc in range(0, depth, kc):
        part = padded[pc : pc + kc]
        steps = -(-part.shape[0] // group) * group
        part = np.concatenate([part, np.zeros((steps - part.shape[0], part.shape[1]), part.dtype)])
        grouped = part.reshape(steps // group, group, -1, width)  # (group, step, panel, position)
        out.append(grouped.transpose(2, 0, 3, 1).reshape(-1))
    return np.concatenate(out) if out else np.zeros(0, dtype=operand.dtype)


def _winograd_sites(kernels: tuple[LoopKernel, ...]):
    """(kernel function, its Winograd statement) of every caller, in order."""
    for kernel in kernels:
        for stmt in iter_stmts(kernel.body):
            if isinstance(stmt, WinogradGemm):
                yield kernel.shares or kernel.name, stmt


def _transformed_filters(
    kernels: tuple[LoopKernel, ...], values: Mapping[str, np.ndarray], taken: set[str]
) -> dict[str, WinogradPlan]:
    """Each constant a Winograd convolution reads as its filters (and no gemm as panels), with the plan of
    the first such convolution, whose transform it holds."""
    found: dict[str, WinogradPlan] = {}
    for _, stmt in _winograd_sites(kernels):
        conv = stmt.plan.conv
        if conv.weight in values and conv.weight not in taken and conv.weight not in found:
            found[conv.weight] = stmt.plan
    return found


def _filter_sites(
    kernels: tuple[LoopKernel, ...], filters: Mapping[str, WinogradPlan], values: Mapping[str, np.ndarray]
) -> dict[str, dict[str, TransformedFilters]]:
    """Which transformed filters each kernel function reads (by its parameter's name, the first caller's
    buffer): those every caller's filters have, for its tile side, at the same place in each array (a
    convolution whose filters another tile side transformed transforms them per call)."""
    sites: dict[str, list[tuple[str, int]]] = {}
    for function, stmt in _winograd_sites(kernels):
        sites.setdefault(function, []).append((stmt.plan.conv.weight, stmt.plan.transform.m))
    placed: dict[str, dict[str, TransformedFilters]] = {}
    for function, reads in sites.items():
        at = {_after(values[w]) if w in filters and filters[w].transform.m == m else -1 for w, m in reads}
        if len(at) == 1 and -1 not in at:
            placed[function] = {reads[0][0]: TransformedFilters(reads[0][0], at.pop())}
    return placed


def transform_filters(plan: WinogradPlan, weight: np.ndarray, tiles: GemmTiles) -> np.ndarray:
    """U_xi = G g G^T of every filter pair (computed in float64, stored in f32) as the B panels of each
    product (a C-deep product of K columns), U_xi after U_(xi-1): the layout
    templates/winograd.c.j2 catenc_wino<m>_filters_f32 writes per call."""
    conv, t = plan.conv, plan.transform
    index = (
        conv.weight_at
        + np.arange(conv.filters)[:, None, None, None] * conv.weight_strides[0]
        + np.arange(conv.channels)[None, :, None, None] * conv.weight_strides[1]
        + np.arange(3)[None, None, :, None] * conv.weight_strides[2]
        + np.arange(3)[None, None, None, :] * conv.weight_strides[3]
    )
    g = weight.reshape(-1)[index].astype(np.float64)  # [K, C, 3, 3]
    G = np.array(t.g, dtype=np.float64)
    u = np.einsum("ar,kcrs,bs->abck", G, g, G).reshape(t.alpha**2, conv.channels, conv.filters)
    return np.concatenate([pack_panels(u[xi].astype(np.float32), tiles, "f32", "b") for xi in range(t.alpha**2)])
