"""A schedule's invariants, checked after every pass: the kernels cover the graph in order, and
the workspace plan never lets two live values share bytes.

`verify_schedule` returns the problems it finds (each names the kernel, slot or buffer at
fault), the graph's own included; an empty list means the schedule is well formed. It never
raises. Storage checks (every temp that needs memory has a slot) apply once storage is planned,
which a schedule shows by a slot or a scalar: before that pass, temps have nowhere to live yet.
"""

from __future__ import annotations

from math import gcd

from catenc.ir.nodes import Buffer, Graph, Role, loads
from catenc.ir.verify import proved_nonneg, verify_graph
from catenc.schedule.kernels import WORKSPACE_ALIGNMENT, Schedule, Slot, buffer_bytes
from catenc.symbolic import ONE, Call, Expr, Facts, sym

STORED_ROLES = (Role.TEMP, Role.STATUS)  # values that live in the workspace unless they are scalars


def verify_schedule(schedule: Schedule, facts: Facts | None = None) -> list[str]:
    """Every problem of a schedule and of its graph (`facts`: what the entry's checks guarantee)."""
    graph = schedule.graph
    problems = verify_graph(graph, facts)
    buffers = {b.name: b for b in graph.buffers}
    problems += _verify_cover(schedule)
    last_reader = {
        ld.buffer: k for k, kernel in enumerate(schedule.kernels) for m in kernel.members for ld in loads(m.body)
    }
    for k, kernel in enumerate(schedule.kernels):
        problems += [f"kernel {kernel.name}: {p}" for p in _verify_kernel(schedule, k, buffers, last_reader)]
    if schedule.slots or any(kernel.scalars for kernel in schedule.kernels):
        problems += _verify_storage(schedule, buffers)
    return problems


def _verify_cover(schedule: Schedule) -> list[str]:
    """Each compute of the graph in exactly one kernel, in graph order."""
    problems = []
    names = [m.name for kernel in schedule.kernels for m in kernel.members]
    owner = {}
    for kernel in schedule.kernels:
        for m in kernel.members:
            if m.name in owner:
                problems.append(f"kernel {kernel.name}: compute {m.name} is also in kernel {owner[m.name]}")
            owner.setdefault(m.name, kernel.name)
    computes = {c.name: c for c in schedule.graph.computes}
    for c in schedule.graph.computes:
        if c.name not in owner:
            problems.append(f"compute {c.name}: in no kernel")
    for kernel in schedule.kernels:
        for m in kernel.members:
            if m.name not in computes:
                problems.append(f"kernel {kernel.name}: member {m.name} is no compute of the graph")
            elif computes[m.name] != m:
                problems.append(f"kernel {kernel.name}: member {m.name} differs from the graph's compute")
    order = [c.name for c in schedule.graph.computes if c.name in owner]
    kept = [n for n in dict.fromkeys(names) if n in computes]
    if kept != order:
        first = next(a for a, b in zip(kept, order) if a != b)
        at, want = kept.index(first), order.index(first)
        problems.append(f"compute {first}: kernels run it out of graph order (as compute {at}, the graph's {want})")
    seen: set[str] = set()
    for kernel in schedule.kernels:
        if kernel.name in seen:
            problems.append(f"kernel {kernel.name}: name used by two kernels")
        seen.add(kernel.name)
        if not kernel.members:
            problems.append(f"kernel {kernel.name}: has no members")
    return problems


def _verify_kernel(schedule: Schedule, k: int, buffers: dict[str, Buffer], last_reader: dict[str, int]) -> list[str]:
    kernel = schedule.kernels[k]
    problems = []
    members = {m.name for m in kernel.members}
    if kernel.contraction is not None:
        if len(kernel.members) != 1:
            problems.append(f"a gemm kernel with {len(kernel.members)} members (one compute per gemm)")
        elif kernel.contraction.output != kernel.members[0].name:
            problems.append(f"gemm writes {kernel.contraction.output}, its member is {kernel.members[0].name}")
        if kernel.outer or kernel.scalars:
            problems.append("a gemm kernel with row loops or scalars")
        if kernel.pack is not None and getattr(buffers.get(kernel.pack), "role", None) != Role.TEMP:
            problems.append(f"panels in {kernel.pack}, which is no temp buffer")
        return problems
    if kernel.pack is not None:
        problems.append(f"panels in {kernel.pack} but no gemm")
    rows = len(kernel.outer)
    for m in kernel.members:
        if len(m.indices) < rows or any(a[1] != b[1] for a, b in zip(m.indices, kernel.outer)):
            problems.append(f"member {m.name} does not run over the kernel's rows")
    for j, m in enumerate(kernel.members):
        earlier = {e.name for e in kernel.members[:j]}
        row_index = tuple(sym(name) for name, _ in m.indices[:rows])
        for ld in loads(m.body):
            if ld.buffer in earlier and tuple(ld.index[:rows]) != row_index:
                problems.append(f"member {m.name} reads {ld.buffer} of the same kernel outside its own row")
    for name in sorted(kernel.scalars):
        member = next((m for m in kernel.members if m.name == name), None)
        if name not in members or member is None:
            problems.append(f"scalar {name} is not one of its members")
            continue
        if getattr(buffers.get(name), "role", None) != Role.TEMP:
            problems.append(f"scalar {name} is not a temp")
        if any(extent != ONE for _, extent in member.indices[rows:]):
            problems.append(f"scalar {name} has more than one element per row")
        if last_reader.get(name, k) > k:
            problems.append(f"scalar {name} is read by a later kernel")
    return problems


def _verify_storage(schedule: Schedule, buffers: dict[str, Buffer]) -> list[str]:
    """Every stored temp in exactly one slot; slots disjoint, aligned and large enough; values
    sharing a slot never live at once."""
    problems = []
    live = _live_ranges(schedule, buffers)
    holder: dict[str, int] = {}
    for s, slot in enumerate(schedule.slots):
        for name in slot.buffers:
            if name in holder:
                problems.append(f"buffer {name}: in slots {holder[name]} and {s}")
            holder.setdefault(name, s)
            buf = buffers.get(name)
            if buf is None or buf.role not in STORED_ROLES:
                problems.append(f"slot {s}: holds {name}, which is no temp of the graph")
    for name in sorted(live, key=lambda n: live[n]):
        if name not in holder:
            problems.append(f"buffer {name}: a {buffers[name].role} that needs memory has no workspace slot")
    end: Expr | None = None
    for s, slot in enumerate(schedule.slots):
        problems += [f"slot {s}: {p}" for p in _slot_problems(slot, schedule.graph, live)]
        if end is None and not proved_nonneg(slot.offset, Facts()):
            problems.append(f"slot {s}: offset {slot.offset} may be negative")
        if end is not None and not proved_nonneg(slot.offset - end, Facts()):
            problems.append(f"slot {s}: offset {slot.offset} may overlap the previous slot, which ends at {end}")
        end = slot.offset + slot.size
    if end is not None and not proved_nonneg(schedule.workspace_bytes - end, Facts()):
        problems.append(f"workspace: {schedule.workspace_bytes} bytes may not hold the slots, which end at {end}")
    return problems


def _slot_problems(slot: Slot, graph: Graph, live: dict[str, tuple[int, int]]) -> list[str]:
    buffers = {b.name: b for b in graph.buffers}
    problems = []
    for what, e in (("offset", slot.offset), ("size", slot.size)):
        if not multiple_of(e, WORKSPACE_ALIGNMENT):
            problems.append(f"{what} {e} is not a multiple of {WORKSPACE_ALIGNMENT}")
    for name in slot.buffers:
        if name in buffers and not covers(slot.size, buffer_bytes(graph, name)):
            problems.append(f"size {slot.size} may be less than the {buffer_bytes(graph, name)} bytes of {name}")
    held = sorted((live[n], n) for n in slot.buffers if n in live)
    for (a, name_a), (b, name_b) in zip(held, held[1:]):
        if b[0] <= a[1]:
            problems.append(f"{name_a} (kernels {a[0]}..{a[1]}) and {name_b} (kernels {b[0]}..{b[1]}) live at once")
    return problems


def _live_ranges(schedule: Schedule, buffers: dict[str, Buffer]) -> dict[str, tuple[int, int]]:
    """(first, last) kernel of every value that needs workspace memory: from the kernel that
    writes it to the last that reads it (a status: to the entry's end, which reads it)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    end = len(schedule.kernels)
    for k, kernel in enumerate(schedule.kernels):
        if kernel.pack is not None:
            first[kernel.pack] = last[kernel.pack] = k
        for m in kernel.members:
            role = getattr(buffers.get(m.name), "role", None)
            if role in STORED_ROLES and m.name not in kernel.scalars:
                first.setdefault(m.name, k)
                last[m.name] = end if role == Role.STATUS else max(last.get(m.name, k), k)
        for m in kernel.members:
            for ld in loads(m.body):
                if ld.buffer in first:
                    last[ld.buffer] = max(last[ld.buffer], k)
    return {name: (first[name], last[name]) for name in first}


def covers(size: Expr, need: Expr) -> bool:
    """Whether size >= need: need is one of the sides of size as a (nested) max, or is proved
    below one (a slot's size is the max of its values' sizes: proofs about the whole max are slow)."""
    sides = _max_sides(size)
    return need in sides or any(proved_nonneg(side - need, Facts()) for side in sides)


def _max_sides(e: Expr) -> list[Expr]:
    """The sides of e as a nested max (e itself when it is no max)."""
    choice = _max_atom(e)
    return [e] if choice is None else [side for arg in choice.args for side in _max_sides(arg)]


def _max_atom(e: Expr) -> Call | None:
    """The max that e is exactly, if it is one."""
    if len(e.terms) != 1:
        return None
    monomial, coefficient = e.terms[0]
    if coefficient != 1 or len(monomial) != 1 or monomial[0][1] != 1:
        return None
    atom = monomial[0][0]
    return atom if isinstance(atom, Call) and atom.func == "max" else None


def multiple_of(e: Expr, m: int) -> bool:
    """Whether e is provably a multiple of m: every term is, by its coefficient, or as a max or
    min of multiples."""
    for monomial, coefficient in e.terms:
        if coefficient % m == 0:
            continue
        rest = m // gcd(coefficient, m)
        if not (
            len(monomial) == 1
            and monomial[0][1] == 1
            and isinstance(monomial[0][0], Call)
            and monomial[0][0].func in ("max", "min")
            and all(multiple_of(arg, rest) for arg in monomial[0][0].args)
        ):
            return False
    return True
