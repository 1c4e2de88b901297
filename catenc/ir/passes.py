"""Graph-to-graph passes: index substitution, dead-compute removal, inlining of cheap producers."""

from __future__ import annotations

from dataclasses import replace
from heapq import heapify, heappop, heappush
from itertools import count

from catenc.ir.nodes import (
    Binary,
    Buffer,
    Compute,
    Const,
    Gather,
    Graph,
    Load,
    Reduce,
    SymInt,
    Unary,
    Value,
    Where,
    loads,
    walk,
)
from catenc.symbolic import Expr, sym

EXPENSIVE_OPS = frozenset(
    "exp exp2 log log2 log1p expm1 sin cos tan tanh sinh cosh asin acos atan erf pow atan2 sqrt div recip".split()
)
# A producer this deep stays materialised: a long chain of statements would otherwise become one
# expression nested as deep as the chain is long, which every later pass and the C compiler recurse on.
MAX_INLINED_DEPTH = 500


def substitute(value: Value, mapping: dict[str, Expr]) -> Value:
    """Replace index names in every index expression of a value tree (a subtree that mentions
    none of them is kept as it is)."""
    mapping = {name: e for name, e in mapping.items() if e != sym(name)}
    return _substitute(value, mapping) if mapping else value


def _substitute(value: Value, mapping: dict[str, Expr]) -> Value:
    if value.summary.symbols.isdisjoint(mapping):
        return value
    if isinstance(value, Load):
        value = replace(value, index=tuple(e.substitute(mapping) for e in value.index))
    elif isinstance(value, SymInt):
        return SymInt(value.dtype, value.expr.substitute(mapping))
    return value.with_children(tuple(_substitute(c, mapping) for c in value.children()))


def rename_reductions(value: Value, suffix: str) -> Value:
    """Give every index bound by a Reduce in the tree a new name (name + suffix)."""
    if not value.summary.has_reduce:
        return value
    mapping = {name: sym(name + suffix) for node in walk(value) if isinstance(node, Reduce) for name, _ in node.indices}

    def rename(v: Value) -> Value:
        if not v.summary.has_reduce:
            return v
        v = v.with_children(tuple(rename(c) for c in v.children()))
        if isinstance(v, Reduce):
            return replace(v, indices=tuple((name + suffix, extent) for name, extent in v.indices))
        return v

    return substitute(rename(value), mapping) if mapping else value


def replace_loads(value: Value, buffer: str, make) -> Value:
    """Rebuild a value tree with every load of `buffer` replaced by make(load, enclosing), where
    enclosing are the (index, extent) pairs of the Reduces around the load."""

    def visit(v: Value, enclosing: tuple[tuple[str, Expr], ...]) -> Value:
        if isinstance(v, Load) and v.buffer == buffer:
            return make(v, enclosing)
        inner = enclosing + v.indices if isinstance(v, Reduce) else enclosing
        return v.with_children(tuple(visit(c, inner) for c in v.children()))

    return visit(value, ())


def split_constant_slices(graph: Graph) -> Graph:
    """Every load of an input at a constant leading index (a layer's slice of stacked weights,
    `w[3, i, j]`) reads a view buffer instead (`w_at3[i, j]`: a pointer into the input the
    entry computes once), so that identical layers lower to identical kernels."""
    views: dict[tuple[str, int], Buffer] = {}
    inputs = {b.name: b for b in graph.buffers if b.role == "input" and len(b.shape) >= 2}
    taken = {b.name for b in graph.buffers}

    def view(load: Load, enclosing) -> Value:
        base = inputs.get(load.buffer)
        if base is None or isinstance(load, Gather) or not load.index[0].is_const:
            return load
        # only inside a leading dim of known size: a pointer past the input is undefined in C,
        # even unused (a load under a false guard may carry any index)
        if not (base.shape[0].is_const and 0 <= load.index[0].value < base.shape[0].value):
            return load
        key = (base.name, load.index[0].value)
        if key not in views:
            name = f"{base.name}_at{key[1]}"
            while name in taken:
                name += "_"
            taken.add(name)
            views[key] = Buffer(name, base.dtype, base.shape[1:], "view", key)
        return replace(load, buffer=views[key].name, index=load.index[1:])

    computes = []
    for c in graph.computes:
        body = c.body
        for name in dict.fromkeys(ld.buffer for ld in loads(c.body) if ld.buffer in inputs):  # first-read order
            body = replace_loads(body, name, view)
        computes.append(replace(c, body=body))
    return replace(graph, buffers=graph.buffers + tuple(views.values()), computes=tuple(computes))


def remove_dead_computes(graph: Graph) -> Graph:
    """Drop computes whose values never reach an output."""
    needed = {b.name for b in graph.buffers if b.role in ("output", "status")}
    kept: list[Compute] = []
    for compute in reversed(graph.computes):
        if compute.name in needed:
            kept.append(compute)
            needed |= {load.buffer for load in loads(compute.body)}
    names = {c.name for c in kept} | {b.name for b in graph.inputs}
    buffers = tuple(b for b in graph.buffers if b.name in names or b.role != "temp")
    return replace(graph, buffers=buffers, computes=tuple(reversed(kept)))


def _sites(computes, name: str) -> list[tuple[Compute, Load, tuple]]:
    """Every load of buffer `name` in the computes, with its compute and the Reduce indices
    around it."""
    out = []

    def visit(compute: Compute, v: Value, enclosing: tuple) -> None:
        if isinstance(v, Load) and v.buffer == name:
            out.append((compute, v, enclosing))
            return
        inner = enclosing + v.indices if isinstance(v, Reduce) else enclosing
        for child in v.children():
            visit(compute, child, inner)

    for compute in computes:
        visit(compute, compute.body, ())
    return out


def is_reuse_free(compute: Compute, load: Load, enclosing: tuple) -> bool:
    """True when each element the load reads is read once per element of the loop nest around
    it: every enclosing loop index of extent > 1 appears in the load's index."""
    used = set().union(*(e.free_symbols() for e in load.index)) if load.index else set()
    for name, extent in compute.indices + enclosing:
        if name not in used and not (extent.is_const and extent.value <= 1):
            return False
    return True


def calls_expensive(value: Value) -> bool:
    """Whether the value calls a transcendental, a division or a power somewhere."""
    return not value.summary.op_names.isdisjoint(EXPENSIVE_OPS)


def replace_node(value: Value, old: Value, new: Value) -> Value:
    """The tree with every subtree equal to `old` replaced by `new`."""
    if value == old:
        return new
    return value.with_children(tuple(replace_node(c, old, new) for c in value.children()))


def is_cheap(value: Value) -> bool:
    """A few arithmetic ops and no reduction: recomputing it costs less than a store and a load."""
    summary = value.summary
    return not summary.has_reduce and summary.op_names.isdisjoint(EXPENSIVE_OPS) and summary.ops <= 3


def inline_decision(graph: Graph, producer: Compute, consumers: list[Compute] | None = None) -> tuple[bool, str]:
    """Whether to inline a temp compute into its consumers (default: every compute that may
    read it), and why (for --debug 1)."""
    sites = list(dict.fromkeys(_sites(graph.computes if consumers is None else consumers, producer.name)))
    if not sites:
        return False, "unused"
    if any(isinstance(load, Gather) for _, load, _ in sites):
        return False, "read at computed positions (take)"
    if producer.body.summary.depth >= MAX_INLINED_DEPTH:
        return False, f"an expression {producer.body.summary.depth} deep (inlining stops at {MAX_INLINED_DEPTH})"
    reuse_free = all(is_reuse_free(c, load, enc) for c, load, enc in sites)
    if producer.body.summary.has_reduce:
        if len(sites) == 1 and reuse_free:
            return True, "reduction read once per element of its single consumer"
        return False, "reduction whose result is read many times (broadcast or several consumers)"
    if is_cheap(producer.body):
        return True, "cheap elementwise"
    if reuse_free and len(sites) <= 2:
        return True, "elementwise read once per element"
    return False, "expensive elementwise value read many times"


def _expander(producer: Compute, names: list[str], serial):
    """Replaces a load of the producer by its body; equal loads get one equal copy, so the
    lowering evaluates a reduction once however often the consumer mentions it."""
    memo: dict[Load, Value] = {}

    def expand(load: Load, enclosing) -> Value:
        if load not in memo:
            body = rename_reductions(producer.body, f"_{next(serial)}")
            memo[load] = substitute(body, dict(zip(names, load.index)))
        return memo[load]

    return expand


def inline_computes(graph: Graph) -> tuple[Graph, list[str]]:
    """Inline temp computes into their consumers where that costs no extra work; returns the
    new graph and one note per producer kept materialised.

    Producers are decided in graph order, the first undecided one first; inlining one reopens
    its consumers and what it reads (their sites or bodies changed). The work per inlining is
    in proportion to the consumer, not to the growing producer, so a chain of n statements
    takes time linear in n."""
    serial = count(1)
    computes = {c.name: c for c in graph.computes}  # in graph order
    position = {c.name: k for k, c in enumerate(graph.computes)}
    temps = {b.name for b in graph.buffers if b.role == "temp"}
    reads = {c.name: dict.fromkeys(ld.buffer for ld in loads(c.body)) for c in graph.computes}
    readers: dict[str, set[str]] = {}  # buffer -> the computes that load it
    for c in graph.computes:
        for name in reads[c.name]:
            readers.setdefault(name, set()).add(c.name)
    own_indices: dict[str, tuple] = {}  # a compute running under a producer's index names -> its own
    undecided = [position[name] for name in computes if name in temps]  # a heap: the first one first
    heapify(undecided)
    queued = set(undecided)
    while undecided:
        k = heappop(undecided)
        queued.discard(k)
        producer = computes[graph.computes[k].name]
        consumers = [computes[name] for name in sorted(readers.get(producer.name, ()), key=position.__getitem__)]
        if not inline_decision(graph, producer, consumers)[0]:
            continue  # decided against, until its sites or body change
        for c in consumers:
            c = _adopt_indices(c, producer, own_indices)
            expand = _expander(producer, [n for n, _ in producer.indices], serial)
            computes[c.name] = replace(c, body=replace_loads(c.body, producer.name, expand))
            reads[c.name].pop(producer.name, None)
            reads[c.name].update(reads[producer.name])
        del computes[producer.name]
        readers.pop(producer.name, None)
        # what the producer reads gains its consumers as sites, and they gain its body
        for name in reads[producer.name]:
            readers.setdefault(name, set()).discard(producer.name)
            readers[name] |= {c.name for c in consumers}
        for name in [c.name for c in consumers] + list(reads[producer.name]):
            if name in computes and name in temps and position[name] not in queued:
                heappush(undecided, position[name])
                queued.add(position[name])
    for name, indices in own_indices.items():
        if name in computes:
            computes[name] = _with_indices(computes[name], indices)
    result = remove_dead_computes(replace(graph, computes=tuple(computes.values())))
    result_readers: dict[str, list[Compute]] = {}
    for c in result.computes:
        for name in dict.fromkeys(ld.buffer for ld in loads(c.body)):
            result_readers.setdefault(name, []).append(c)
    notes = []
    for producer in result.computes:
        if producer.name in temps:
            why = inline_decision(result, producer, result_readers.get(producer.name, []))[1]
            notes.append(f"{producer.name}: materialised ({why})")
    return result, notes


def _adopt_indices(consumer: Compute, producer: Compute, own_indices: dict[str, tuple]) -> Compute:
    """The consumer, its indices renamed to the producer's when it reads the producer at exactly
    its own indices and the producer's body is the larger: the body then goes in as it is,
    unrenamed (`own_indices` keeps the consumer's names, which it gets back at the end)."""
    identity = tuple(sym(name) for name, _ in consumer.indices)
    if len(producer.indices) != len(identity) or identity == tuple(sym(name) for name, _ in producer.indices):
        return consumer
    if producer.body.summary.size <= consumer.body.summary.size:
        return consumer
    if not any(ld.buffer == producer.name and ld.index == identity for ld in loads(consumer.body)):
        return consumer
    own_indices.setdefault(consumer.name, consumer.indices)
    names = tuple(name for name, _ in producer.indices)
    return _with_indices(consumer, tuple((name, extent) for name, (_, extent) in zip(names, consumer.indices)))


def _with_indices(compute: Compute, indices: tuple[tuple[str, Expr], ...]) -> Compute:
    """The compute over indices of other names (in the same order)."""
    mapping = {old: sym(new) for (old, _), (new, _) in zip(compute.indices, indices)}
    return replace(compute, indices=indices, body=substitute(compute.body, mapping))


def _wrap(value: int, dtype) -> int:
    """Two's-complement wrap-around of an integer into dtype's range."""
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.kind == "int" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


_INT_FOLDS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": max,
    "min": min,
}


def fold_value(value: Value) -> Value:
    """Constant folding and algebraic identities that hold for every input (no float reassociation:
    x + 0.0 stays, as it turns -0.0 into 0.0)."""
    value = value.with_children(tuple(fold_value(c) for c in value.children()))
    dtype = value.dtype
    if isinstance(value, Unary) and isinstance(value.x, Const) and value.op == "neg" and dtype.is_int:
        return Const(dtype, _wrap(-int(value.x.value), dtype))
    if isinstance(value, Where):
        if isinstance(value.cond, Const):
            return value.a if value.cond.value else value.b
        return value.a if value.a == value.b else value
    if isinstance(value, Binary):
        a, b = value.a, value.b
        if isinstance(a, Const) and isinstance(b, Const) and dtype.is_int and value.op in _INT_FOLDS:
            return Const(dtype, _wrap(_INT_FOLDS[value.op](int(a.value), int(b.value)), dtype))
        if value.op == "mul" and isinstance(b, Const) and b.value == 1 and b.dtype == dtype:
            return a
        if value.op == "mul" and isinstance(a, Const) and a.value == 1 and a.dtype == dtype:
            return b
        if value.op in ("add", "sub") and dtype.is_int and isinstance(b, Const) and b.value == 0:
            return a
    return value


def fold_constants(graph: Graph) -> Graph:
    return replace(graph, computes=tuple(replace(c, body=fold_value(c.body)) for c in graph.computes))
