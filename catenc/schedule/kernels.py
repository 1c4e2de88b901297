"""Scheduling: group the computes of a graph into kernels and plan where every value lives.

After inlining, each remaining compute is materialised. Consecutive computes fuse into one
kernel when the consumer reads the kernel's values only at its own leading (row) indices:
softmax and layernorm become one kernel with a per-row loop. Inside a kernel, a value with
one element per row that nothing outside needs is a scalar local; everything else is stored
in an output buffer or in the caller's workspace, packed by liveness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from catenc.ir.cost import Cost, computes_cost, contraction_ops, element_work
from catenc.ir.nodes import Buffer, Compute, Graph, Role, format_shape, format_value, loaded_buffers, loads
from catenc.schedule.contractions import Contraction, extract_contractions
from catenc.schedule.tiles import GemmTiles
from catenc.schedule.winograd import WinogradPlan, contraction_plan, heuristic_tile, match_conv, winograd_ops
from catenc.symbolic import ONE, ZERO, Call, Expr, product, prove_nonneg, sym

WORKSPACE_ALIGNMENT = 64
IN_WORKSPACE = (Role.TEMP, Role.STATUS)  # the roles of buffers the workspace holds


# Work (flops plus elements stored) below which a kernel's parallel loop stays on one thread:
# waking the OpenMP team costs more than small kernels save.
PARALLEL_WORK = 1 << 16


@dataclass(frozen=True)
class Decisions:
    """How one kernel runs: choices that change its speed, never its results (a tuner may
    change any of them within the legal values)."""

    parallel: bool = False  # its outermost iterating loop (a gemm: its batch) runs on threads
    parallel_work: int = PARALLEL_WORK  # ... once its work reaches this many operations
    vector_lanes: int = 0  # f32 lanes of the target's vectors; reductions get 2 vectors of partial sums (0: none)
    jam: int = 1  # rows of a matrix-vector product reduced in one pass (1: none)
    vector_math: bool = False  # f32 transcendentals as vectorisable polynomials (vecmath), not libm calls
    interchange: bool = False  # a strided reduction runs outside the last row loop (schedule/interchange.py)
    winograd: int = 0  # a 3x3 convolution as Winograd F(m x m, 3 x 3), m = 2 or 4 (schedule/winograd.py)

    def describe(self) -> str:
        threads = f"threads from work {self.parallel_work}" if self.parallel else "one thread"
        lanes = f"{self.vector_lanes}-lane reductions" if self.vector_lanes else "scalar reductions"
        jam = f"{self.jam} rows jammed" if self.jam > 1 else "no row jam"
        math = "vector math" if self.vector_math else "libm math"
        swap = ", reduction outside the last row loop" if self.interchange else ""
        winograd = f", Winograd F({self.winograd}x{self.winograd}, 3x3)" if self.winograd else ""
        return f"{threads}, {lanes}, {jam}, {math}{swap}{winograd}"


@dataclass(frozen=True)
class Kernel:
    """Computes that share the loop nest over `outer` (one per outer iteration, in order)."""

    name: str
    outer: tuple[tuple[str, Expr], ...]
    members: tuple[Compute, ...]
    scalars: frozenset[str]
    reason: str  # why this kernel did not fuse with the previous one
    contraction: Contraction | None = None  # the kernel is this packed gemm
    pack: str | None = None  # the workspace buffer its packed panels live in
    decisions: Decisions = Decisions()


@dataclass(frozen=True)
class Slot:
    """A region of the workspace: `offset` bytes in, `size` bytes, holding `buffers` in turn."""

    offset: Expr
    size: Expr
    buffers: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    """Every decision about one graph: its kernels, where each value lives, the gemm tiles."""

    graph: Graph
    kernels: tuple[Kernel, ...]
    slots: tuple[Slot, ...] = ()
    workspace_bytes: Expr = ZERO
    notes: tuple[str, ...] = ()
    tiles: tuple[tuple[str, GemmTiles], ...] = ()  # (dtype, tiles) of the packed gemms; one per dtype in a file

    def slot_of(self, buffer: str) -> Slot | None:
        for slot in self.slots:
            if buffer in slot.buffers:
                return slot
        return None


Tune = Callable[[Schedule], Schedule]  # a tuner's change of decisions: never of results
# Elements of packed panels a gemm kernel needs (given the graph's buffers by name).
PackSize = Callable[["Kernel", dict[str, Buffer], GemmTiles], Expr]


def form_kernels(graph: Graph) -> Schedule:
    """One kernel per compute, in graph order: the schedule before any fusion; the graph's notes move to it."""
    kernels = _kernels(graph, group_kernels(graph, False, set()), {})
    return Schedule(replace(graph, notes=()), kernels, notes=graph.notes)


def take_contractions(schedule: Schedule, converts: bool = False, integer: bool = False) -> Schedule:
    """Every contraction of the graph a compute and a kernel of its own (a packed gemm or GPU
    tiles; `converts`, `integer`: see extract_contractions)."""
    graph, found, notes = extract_contractions(schedule.graph, converts, integer)
    kernels = _kernels(graph, group_kernels(graph, False, set(found)), found)
    return replace(schedule, graph=graph, kernels=kernels, notes=schedule.notes + tuple(notes))


def fuse_rows(schedule: Schedule) -> Schedule:
    """Consecutive kernels joined over their shared row loops (contractions stay alone)."""
    graph = schedule.graph
    found = {k.members[0].name: k.contraction for k in schedule.kernels if k.contraction is not None}
    return replace(schedule, kernels=_kernels(graph, group_kernels(graph, True, set(found)), found))


def _kernels(graph: Graph, groups: list, found: dict[str, Contraction]) -> tuple[Kernel, ...]:
    kernels = []
    for k, (outer, members, reason) in enumerate(groups):
        kernel = Kernel(f"{graph.name}_k{k}", outer, tuple(members), frozenset(), reason)
        contraction = found.get(members[0].name)
        if contraction is not None:
            kernel = replace(kernel, outer=(), contraction=contraction)
        kernels.append(kernel)
    return tuple(kernels)


def choose_gemm_tiles(schedule: Schedule, tiles: dict[str, GemmTiles]) -> Schedule:
    """Record the tiles of each packed gemm's dtype."""
    used = sorted({k.contraction.kind for k in schedule.kernels if k.contraction is not None})
    return replace(schedule, tiles=tuple((dtype, tiles[dtype]) for dtype in used))


def plan_storage(schedule: Schedule, pack_size: PackSize | None = None) -> Schedule:
    """The packed panels of each gemm in the workspace (sized by its tiles and decisions; with
    `pack_size` only), which values are scalar locals of their kernel, and the workspace slots."""
    graph, kernels, tiles = schedule.graph, list(schedule.kernels), dict(schedule.tiles)
    buffers = {b.name: b for b in graph.buffers}
    for k, kernel in enumerate(kernels):
        c = kernel.contraction
        if c is not None and pack_size is not None:
            pack = Buffer(f"catenc_pack{k}", c.dtype, (pack_size(kernel, buffers, tiles[c.kind]),), Role.TEMP)
            graph = replace(graph, buffers=graph.buffers + (pack,))
            kernels[k] = replace(kernel, pack=pack.name)
        elif c is None:
            kernels[k] = replace(kernel, scalars=_scalar_members(graph, schedule.kernels, k))
    slots, total = plan_workspace(graph, kernels)
    return replace(schedule, graph=graph, kernels=tuple(kernels), slots=slots, workspace_bytes=total)


def choose_winograd(schedule: Schedule, largest: int, baked: frozenset[str] = frozenset()) -> Schedule:
    """Each gemm kernel that is a 3x3 stride-1 convolution gets the heuristics' `winograd` tile, at most
    `largest` (-O2: 2, whose rounding is the direct sum's; -O3: 4); `baked`: the constants transformed once
    (at compile time when the library holds them, at load with --weights packed), not per call."""
    buffers = {b.name: b for b in schedule.graph.buffers}
    kernels, notes = [], []
    for kernel in schedule.kernels:
        conv = None if kernel.contraction is None else match_conv(kernel.contraction, buffers)
        if conv is not None:
            m = heuristic_tile(conv, largest, conv.weight in baked)
            how = "once" if conv.weight in baked else "per call"
            notes.append(
                f"{kernel.name}: 3x3 convolution {conv.channels} -> {conv.filters} at {conv.height}x{conv.width} "
                + (f"as Winograd F({m}x{m}, 3x3), filters transformed {how}" if m else "direct")
            )
            kernel = replace(kernel, decisions=replace(kernel.decisions, winograd=m))
        kernels.append(kernel)
    return replace(schedule, kernels=tuple(kernels), notes=schedule.notes + tuple(notes))


def decide(schedule: Schedule, **choices: object) -> Schedule:
    """Every kernel's decisions with `choices` applied."""
    kernels = tuple(replace(k, decisions=replace(k.decisions, **choices)) for k in schedule.kernels)
    return replace(schedule, kernels=kernels)


def _leading_match(compute: Compute, index: tuple[Expr, ...]) -> int:
    """How many leading positions of a load index are exactly the compute's leading indices."""
    n = 0
    for (name, _), e in zip(compute.indices, index):
        if e != sym(name):
            break
        n += 1
    return n


def group_kernels(graph: Graph, fuse: bool, alone: set[str]) -> list[tuple[tuple, list[Compute], str]]:
    """Consecutive computes joined over shared row loops; those in `alone` (contractions) get
    a kernel each."""
    groups: list[tuple[tuple, list[Compute], str]] = []
    for compute in graph.computes:
        if compute.name in alone:
            why = f"{compute.name} is a contraction: a packed gemm kernel of its own" if groups else ""
        elif groups and groups[-1][1][0].name in alone:
            why = f"the previous kernel is a packed gemm; {compute.name} reads its result after it completes"
        elif fuse and groups:
            outer, members, reason = groups[-1]
            joined, why = _try_join(graph, outer, members, compute)
            if joined is not None:
                groups[-1] = (joined, members + [compute], reason)
                continue
        else:
            why = "fusion is off (-O0, or fuse-rows disabled)" if groups else ""
        groups.append((compute.indices, [compute], why))
    return groups


def _try_join(graph: Graph, outer: tuple, members: list[Compute], compute: Compute) -> tuple[tuple | None, str]:
    names = {m.name for m in members}
    member_loads = [ld for ld in loads(compute.body) if ld.buffer in names]
    if not member_loads:
        return None, f"{compute.name} does not read the values of the previous kernel"
    rows = min(_leading_match(compute, ld.index) for ld in member_loads)
    rows = min(rows, len(outer))
    same = 0
    for (_, a), (_, b) in zip(outer[:rows], compute.indices[:rows]):
        if a != b:
            break
        same += 1
    rows = same
    if rows == 0:
        return (
            None,
            f"{compute.name} reads the previous kernel's values across rows (not at its own leading indices)",
        )
    # A member consumed by the new compute only at row-aligned positions: fuse over the rows.
    return outer[:rows], ""


def _scalar_members(graph: Graph, kernels: tuple[Kernel, ...], k: int) -> frozenset[str]:
    """Members of kernel k with one element per row that no later kernel reads."""
    later = [c for kernel in kernels[k + 1 :] for c in kernel.members]
    scalars = set()
    for m in kernels[k].members:
        inner = m.indices[len(kernels[k].outer) :]
        if graph.buffer(m.name).role != Role.TEMP or any(e != ONE for _, e in inner):
            continue
        if any(m.name in loaded_buffers(c.body) for c in later):
            continue
        scalars.add(m.name)
    return frozenset(scalars)


def buffer_bytes(graph: Graph, name: str) -> Expr:
    buf = graph.buffer(name)
    raw = product(buf.shape) * buf.dtype.itemsize
    return ((raw + WORKSPACE_ALIGNMENT - 1) // WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT


def _largest(sizes: list[Expr]) -> Expr:
    """The max of sizes: a size another is proved to cover is dropped, the rest are combined
    unproved (proofs about a max that grows with every temp blow up with their number)."""
    kept: list[Expr] = []
    for size in sorted(set(sizes), key=str):
        if any(prove_nonneg(other - size) for other in kept):
            continue
        kept = [other for other in kept if not prove_nonneg(size - other)] + [size]
    largest = kept[0]
    for other in kept[1:]:
        largest = Expr.atom(Call("max", (largest, other)))
    return largest


def plan_workspace(graph: Graph, kernels: list[Kernel]) -> tuple[tuple[Slot, ...], Expr]:
    """Pack the temps that need memory into slots, reusing a slot once its value is dead."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    packs = [kernel.pack for kernel in kernels if kernel.pack is not None]
    for k, kernel in enumerate(kernels):
        for m in kernel.members:
            role = graph.buffer(m.name).role
            if role in IN_WORKSPACE and m.name not in kernel.scalars:
                first.setdefault(m.name, k)
                # a status is read by the entry after the last kernel
                last.setdefault(m.name, len(kernels) if role == Role.STATUS else k)
        for m in kernel.members:
            for ld in loads(m.body):
                if ld.buffer in first:
                    last[ld.buffer] = max(last[ld.buffer], k)
    slots: list[list] = []  # [sizes, free_after, buffers]
    for name in sorted(first, key=lambda n: first[n]):
        size = buffer_bytes(graph, name)
        for slot in slots:
            if slot[1] < first[name]:
                slot[0].append(size)
                slot[1] = last[name]
                slot[2].append(name)
                break
        else:
            slots.append([[size], last[name], [name]])
    if packs:
        # One region for every contraction's packed panels (each lives within its kernel only).
        slots.append([[buffer_bytes(graph, name) for name in packs], len(kernels), packs])
    out, offset = [], ZERO
    for sizes, _, names in slots:
        size = _largest(sizes)
        out.append(Slot(offset, size, tuple(names)))
        offset = offset + size
    return tuple(out), offset


def kernel_cost(graph: Graph, kernel: Kernel) -> Cost:
    """What one kernel costs: its computes' work, the buffers it reads, the values it stores."""
    buffers = {b.name: b for b in graph.buffers}
    stored = [m.name for m in kernel.members if m.name not in kernel.scalars]
    cost = computes_cost(kernel.members, buffers, stored)
    if kernel.contraction is None:
        return cost
    plan = contraction_plan(kernel.contraction, kernel.decisions.winograd, buffers)
    return replace(cost, flops=gemm_ops(kernel.contraction, plan))


def gemm_ops(c: Contraction, winograd: WinogradPlan | None = None) -> Expr:
    """A contraction's ops as the packed driver runs it (catenc/ir/cost.py contraction_ops), or as a
    Winograd convolution of that plan: its products and transforms, the epilogue once per output."""
    batch, rows, cols, depth = (product(e for _, e in axes) for axes in (c.batch, c.rows, c.cols, c.depth))
    if winograd is None:
        return contraction_ops(batch, rows, cols, depth, c.a, c.b, c.epilogue)
    last = ZERO if c.epilogue is None else element_work(c.epilogue).ops * rows * cols
    return batch * (winograd_ops(winograd) + last)


def schedule_cost(schedule: Schedule) -> Cost:
    """What an entry costs: the sum over its kernels."""
    return sum((kernel_cost(schedule.graph, k) for k in schedule.kernels), Cost())


def format_schedule(schedule: Schedule) -> str:
    """The kernels, what each fuses, where each value lives, and the workspace plan."""
    graph = schedule.graph
    lines = [f"schedule {graph.name}: {len(schedule.kernels)} kernel(s), workspace {schedule.workspace_bytes} bytes"]
    lines.append(f"  cost: {schedule_cost(schedule).describe()}")
    for kernel in schedule.kernels:
        rows = ", ".join(f"{n} < {e}" for n, e in kernel.outer) or "-"
        kind = f"rows [{rows}]"
        if kernel.contraction is not None:
            kind = f"gemm, panels in {kernel.pack}" if kernel.pack else "gemm"
        lines.append(f"  kernel {kernel.name}  {kind}" + (f"  # not fused: {kernel.reason}" if kernel.reason else ""))
        lines.append(f"    runs on {kernel.decisions.describe()}")
        lines.append(f"    cost: {kernel_cost(graph, kernel).describe()}")
        for m in kernel.members:
            buf = graph.buffer(m.name)
            if m.name in kernel.scalars:
                where = "scalar"
            elif buf.role in IN_WORKSPACE:
                slot = schedule.slot_of(m.name)
                where = f"workspace+{slot.offset}" if slot else "workspace"
            else:
                where = buf.role
            idx = ", ".join(n for n, _ in m.indices)
            lines.append(
                f"    {m.name}[{idx}]: {buf.dtype.name}{format_shape(buf.shape)} ({where}) = {format_value(m.body)}"
            )
    for dtype, t in schedule.tiles:
        lines.append(
            f"  gemm tiles {dtype}: mr={t.mr} nr={t.nr} kc={t.kc} mc={t.mc} nc={t.nc}, {t.vector_bytes}-byte vectors"
        )
    for note in schedule.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
