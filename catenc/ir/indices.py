"""Index simplification: every load's index rewritten under the ranges of the loops around it.

Inlining composes index maps: a reshape and the reshape back, or an op-library call on a
flattened view, leave divisions and remainders that the loop ranges prove trivial
(`(i*W + j) // W` is `i` and `(i*W + j) % W` is `j` when `j < W`). Left in, they cost a division
per element and keep the loop from vectorising.
"""

from __future__ import annotations

from dataclasses import replace

from catenc.ir.nodes import Buffer, Compute, Gather, Graph, Load, Reduce, Value, own_symbols, walk
from catenc.ir.passes import substitute
from catenc.ir.verify import bounds_problems
from catenc.symbolic import Expr, Facts, call_atoms, const, divisibility, floordiv, mod, simplify, sym


def simplify_indices(graph: Graph, facts: Facts) -> Graph:
    """The graph with each load's index simplified under the ranges of its compute's indices,
    of the reductions around it, and `facts` (what the entry's constraints guarantee). Where the
    facts say `C % 8 == 0`, C is written `8*(C // 8)` first, so that the index a reshape to
    `[8, C // 8]` made divides exactly."""
    multiples = {name: const(k) * floordiv(sym(name), k) for name, k in divisibility(facts)}
    simplifier = _Simplifier(multiples, {b.name: b for b in graph.buffers})
    computes = tuple(_simplified(c, facts, simplifier) for c in graph.computes)
    return replace(graph, computes=computes)


def _simplified(compute: Compute, facts: Facts, simplifier: _Simplifier) -> Compute:
    for name, extent in compute.indices:
        facts = facts.with_range(name, extent)
    body = simplifier.value(compute.body, facts)
    return compute if body is compute.body else replace(compute, body=body)


class _Simplifier:
    def __init__(self, multiples: dict[str, Expr], buffers: dict[str, Buffer]) -> None:
        self.multiples = multiples
        self.buffers = buffers
        self.memo: dict[tuple[int, int], Value] = {}  # (node, facts) -> simplified: shared subtrees once

    def index(self, e: Expr, facts: Facts) -> Expr:
        simpler = simplify(e, facts, deep=True)
        if _divisions(simpler) and not e.free_symbols().isdisjoint(self.multiples):
            written = simplify(e.substitute(self.multiples), facts, deep=True)
            if _divisions(written) < _divisions(simpler):  # only where that removes divisions
                return written
        return simpler

    def load_index(self, load: Load, facts: Facts) -> tuple[Expr, ...]:
        """The simpler index, where the verifier can still prove it in bounds (the divisions a
        rewrite removes may be what bounded it), else the index as it was."""
        index = tuple(self.index(e, facts) for e in load.index)
        if index == load.index or isinstance(load, Gather):
            return load.index
        if bounds_problems(index, self.buffers[load.buffer], facts):
            return load.index
        return index

    def value(self, value: Value, facts: Facts) -> Value:
        if not _has_divisions(value):
            return value
        key = (id(value), id(facts))
        found = self.memo.get(key)
        if found is not None:
            return found
        rebuilt = value
        if isinstance(value, Load):
            index = self.load_index(value, facts)
            if index != value.index:
                rebuilt = replace(value, index=index)
        inner = facts
        if isinstance(value, Reduce):
            for name, extent in value.indices:
                inner = inner.with_range(name, extent)
        children = rebuilt.children()
        new = tuple(self.value(c, inner) for c in children)
        if any(n is not c for n, c in zip(new, children)):
            rebuilt = rebuilt.with_children(new)
        self.memo[key] = rebuilt
        return rebuilt


def _has_divisions(value: Value) -> bool:
    """Whether some load index under value divides or takes a remainder."""
    found = value.__dict__.get("_divisions")
    if found is None:
        own = isinstance(value, Load) and any(_divisions(e) for e in value.index)
        found = own or any(_has_divisions(c) for c in value.children())
        object.__setattr__(value, "_divisions", found)
    return found


def _divisions(e: Expr) -> int:
    """How many divisions and remainders e computes (each distinct one once)."""
    atoms = set(call_atoms(e))
    return len(atoms) + sum(_divisions(arg) for atom in atoms for arg in atom.args)


def coalesce_reductions(graph: Graph) -> Graph:
    """Each reduction over adjacent indices `h < H, w < W` that every load reads only as the
    adjacent axes `[..., h, w]` of a buffer with those two dims becomes one reduction over
    `hw < H*W`: one long contiguous loop for the vector lanes instead of H short ones (a
    reduction written over a reshaped tensor's axes reads like this)."""
    buffers = {b.name: b.shape for b in graph.buffers}
    computes = []
    for c in graph.computes:
        body = _coalesced(c.body, buffers)
        computes.append(c if body is c.body else replace(c, body=body))
    return replace(graph, computes=tuple(computes))


def _coalesced(value: Value, shapes: dict[str, tuple[Expr, ...]]) -> Value:
    if not value.summary.has_reduce:
        return value
    children = value.children()
    new = tuple(_coalesced(c, shapes) for c in children)
    if any(n is not c for n, c in zip(new, children)):
        value = value.with_children(new)
    if not isinstance(value, Reduce):
        return value
    k = 0
    while k + 1 < len(value.indices):
        (a, extent_a), (b, extent_b) = value.indices[k], value.indices[k + 1]
        if _reads_as_adjacent_axes(value.body, a, b, extent_a, extent_b, shapes):
            # a and b stand only in loads: `[..., a, b]` becomes `[..., a // extent_b, a % extent_b]`
            body = substitute(value.body, {a: floordiv(sym(a), extent_b), b: mod(sym(a), extent_b)})
            indices = value.indices[:k] + ((a, extent_a * extent_b),) + value.indices[k + 2 :]
            value = replace(value, indices=indices, body=body)
        else:
            k += 1
    return value


def _reads_as_adjacent_axes(value: Value, a: str, b: str, extent_a: Expr, extent_b: Expr, shapes) -> bool:
    """Whether a and b appear only in loads, as `[..., a, b, ...]` over dims (extent_a, extent_b)."""
    pair = (sym(a), sym(b))
    for node in walk(value):
        if not isinstance(node, Load) or isinstance(node, Gather):
            if not own_symbols(node).isdisjoint((a, b)):  # a reduction's extents, an index as a value
                return False
            if isinstance(node, Gather) and not node.summary.symbols.isdisjoint((a, b)):
                return False
            continue
        mentions = [k for k, e in enumerate(node.index) if not e.free_symbols().isdisjoint((a, b))]
        if not mentions:
            continue
        k = mentions[0]
        shape = shapes.get(node.buffer)
        if mentions != [k, k + 1] or node.index[k : k + 2] != pair or shape is None:
            return False
        if (shape[k], shape[k + 1]) != (extent_a, extent_b):
            return False
    return True
