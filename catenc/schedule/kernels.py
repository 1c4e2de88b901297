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

from catenc.ir.nodes import Buffer, Compute, Graph, format_shape, format_value, loads
from catenc.ir.passes import fold_constants, inline_computes, remove_dead_computes, split_constant_slices
from catenc.schedule.contractions import Contraction, extract_contractions, materialise_costly_operands
from catenc.symbolic import ONE, ZERO, Call, Expr, product, prove_nonneg, sym

WORKSPACE_ALIGNMENT = 64


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


@dataclass(frozen=True)
class Slot:
    """A region of the workspace: `offset` bytes in, `size` bytes, holding `buffers` in turn."""

    offset: Expr
    size: Expr
    buffers: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    graph: Graph
    kernels: tuple[Kernel, ...]
    slots: tuple[Slot, ...]
    workspace_bytes: Expr
    notes: tuple[str, ...]

    def slot_of(self, buffer: str) -> Slot | None:
        for slot in self.slots:
            if buffer in slot.buffers:
                return slot
        return None


PackSize = Callable[[Contraction], Expr]  # elements of packed panels a contraction needs


def schedule_graph(
    graph: Graph,
    fuse: bool = True,
    contractions: bool = False,
    pack_size: PackSize | None = None,
    views: bool = False,
) -> Schedule:
    """Inline, fuse into kernels and plan the workspace; `fuse=False` (at -O0) keeps one
    compute per kernel. With `contractions`, each contraction becomes a gemm kernel of its
    own, with packed panels in the workspace when `pack_size` says how many elements. With
    `views`, constant slices of inputs become pointers of their own (see split_constant_slices)."""
    graph = remove_dead_computes(fold_constants(graph))
    found_contractions: dict[str, Contraction] = {}
    if fuse:
        costly: list[str] = []
        if contractions:
            graph, costly = materialise_costly_operands(graph)
        graph, notes = inline_computes(graph)
        notes += costly
        if views:
            graph = split_constant_slices(graph)
        if contractions:
            graph, found_contractions, found = extract_contractions(graph)
            notes += found
    else:
        notes = []
    groups = group_kernels(graph, fuse, set(found_contractions))
    kernels = []
    for k, (outer, members, reason) in enumerate(groups):
        scalars = _scalar_members(graph, groups, k)
        kernel = Kernel(f"{graph.name}_k{k}", outer, tuple(members), scalars, reason)
        contraction = found_contractions.get(members[0].name)
        if contraction is not None:
            pack = None
            if pack_size is not None:
                pack = f"catenc_pack{k}"
                buffer = Buffer(pack, contraction.dtype, (pack_size(contraction),), "temp")
                graph = replace(graph, buffers=graph.buffers + (buffer,))
            kernel = replace(kernel, outer=(), scalars=frozenset(), contraction=contraction, pack=pack)
        kernels.append(kernel)
    slots, total = plan_workspace(graph, kernels)
    return Schedule(graph, tuple(kernels), slots, total, tuple(notes))


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
            why = "fusion is off (-O0)" if groups else ""
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


def _scalar_members(graph: Graph, groups, k: int) -> frozenset[str]:
    outer, members, _ = groups[k]
    later = [c for _, ms, _ in groups[k + 1 :] for c in ms]
    scalars = set()
    for m in members:
        inner = m.indices[len(outer) :]
        if graph.buffer(m.name).role != "temp" or any(e != ONE for _, e in inner):
            continue
        if any(ld.buffer == m.name for c in later for ld in loads(c.body)):
            continue
        scalars.add(m.name)
    return frozenset(scalars)


def _bytes(graph: Graph, name: str) -> Expr:
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
            if role in ("temp", "status") and m.name not in kernel.scalars:
                first.setdefault(m.name, k)
                # a status is read by the entry after the last kernel
                last.setdefault(m.name, len(kernels) if role == "status" else k)
        for m in kernel.members:
            for ld in loads(m.body):
                if ld.buffer in first:
                    last[ld.buffer] = max(last[ld.buffer], k)
    slots: list[list] = []  # [sizes, free_after, buffers]
    for name in sorted(first, key=lambda n: first[n]):
        size = _bytes(graph, name)
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
        slots.append([[_bytes(graph, name) for name in packs], len(kernels), packs])
    out, offset = [], ZERO
    for sizes, _, names in slots:
        size = _largest(sizes)
        out.append(Slot(offset, size, tuple(names)))
        offset = offset + size
    return tuple(out), offset


def format_schedule(schedule: Schedule) -> str:
    """The kernels, what each fuses, where each value lives, and the workspace plan."""
    graph = schedule.graph
    lines = [f"schedule {graph.name}: {len(schedule.kernels)} kernel(s), workspace {schedule.workspace_bytes} bytes"]
    for kernel in schedule.kernels:
        rows = ", ".join(f"{n} < {e}" for n, e in kernel.outer) or "-"
        kind = f"rows [{rows}]"
        if kernel.contraction is not None:
            kind = f"gemm, panels in {kernel.pack}" if kernel.pack else "gemm"
        lines.append(f"  kernel {kernel.name}  {kind}" + (f"  # not fused: {kernel.reason}" if kernel.reason else ""))
        for m in kernel.members:
            buf = graph.buffer(m.name)
            if m.name in kernel.scalars:
                where = "scalar"
            elif buf.role in ("temp", "status"):
                slot = schedule.slot_of(m.name)
                where = f"workspace+{slot.offset}" if slot else "workspace"
            else:
                where = buf.role
            idx = ", ".join(n for n, _ in m.indices)
            lines.append(
                f"    {m.name}[{idx}]: {buf.dtype.name}{format_shape(buf.shape)} ({where}) = {format_value(m.body)}"
            )
    for note in schedule.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
