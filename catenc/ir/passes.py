"""Graph-to-graph passes: index substitution, dead-compute removal, inlining of cheap producers."""

from __future__ import annotations

from dataclasses import replace
from itertools import count

from catenc.ir.nodes import (
    Binary,
    Buffer,
    Cast,
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


def substitute(value: Value, mapping: dict[str, Expr]) -> Value:
    """Replace index names in every index expression of a value tree."""
    if isinstance(value, Load):
        value = replace(value, index=tuple(e.substitute(mapping) for e in value.index))
    elif isinstance(value, SymInt):
        return SymInt(value.dtype, value.expr.substitute(mapping))
    return value.with_children(tuple(substitute(c, mapping) for c in value.children()))


def rename_reductions(value: Value, suffix: str) -> Value:
    """Give every index bound by a Reduce in the tree a new name (name + suffix)."""
    mapping = {name: sym(name + suffix) for node in walk(value) if isinstance(node, Reduce) for name, _ in node.indices}

    def rename(v: Value) -> Value:
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
        for name in {ld.buffer for ld in loads(c.body)} & set(inputs):
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
    return any(getattr(node, "op", None) in EXPENSIVE_OPS for node in walk(value))


def replace_node(value: Value, old: Value, new: Value) -> Value:
    """The tree with every subtree equal to `old` replaced by `new`."""
    if value == old:
        return new
    return value.with_children(tuple(replace_node(c, old, new) for c in value.children()))


def is_cheap(value: Value) -> bool:
    """A few arithmetic ops and no reduction: recomputing it costs less than a store and a load."""
    ops = 0
    for node in walk(value):
        if isinstance(node, Reduce) or getattr(node, "op", None) in EXPENSIVE_OPS:
            return False
        if isinstance(node, (Unary, Binary, Where, Cast)):
            ops += 1
    return ops <= 3


def inline_decision(graph: Graph, producer: Compute, consumers: list[Compute] | None = None) -> tuple[bool, str]:
    """Whether to inline a temp compute into its consumers (default: every compute that may
    read it), and why (for --debug 1)."""
    sites = list(dict.fromkeys(_sites(graph.computes if consumers is None else consumers, producer.name)))
    if not sites:
        return False, "unused"
    if any(isinstance(load, Gather) for _, load, _ in sites):
        return False, "read at computed positions (take)"
    reuse_free = all(is_reuse_free(c, load, enc) for c, load, enc in sites)
    has_reduce = any(isinstance(v, Reduce) for v in walk(producer.body))
    if has_reduce:
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
    new graph and one note per producer kept materialised."""
    serial = count(1)
    notes: list[str] = []
    computes = {c.name: c for c in graph.computes}  # in graph order
    readers: dict[str, set[str]] = {}  # buffer -> the computes that load it
    for c in graph.computes:
        for name in {ld.buffer for ld in loads(c.body)}:
            readers.setdefault(name, set()).add(c.name)
    kept: set[str] = set()  # producers decided against, until their sites or body change
    changed = True
    while changed:
        changed = False
        for producer in list(computes.values()):
            if graph.buffer(producer.name).role != "temp" or producer.name in kept:
                continue
            consumers = [c for name, c in computes.items() if name in readers.get(producer.name, ())]
            inline, _ = inline_decision(graph, producer, consumers)
            if not inline:
                kept.add(producer.name)
                continue
            names = [n for n, _ in producer.indices]
            for c in consumers:
                expand = _expander(producer, names, serial)
                computes[c.name] = replace(c, body=replace_loads(c.body, producer.name, expand))
            del computes[producer.name]
            readers.pop(producer.name, None)
            # what the producer reads gains its consumers as sites, and they gain its body
            reads = {ld.buffer for ld in loads(producer.body)}
            for name in reads:
                readers.setdefault(name, set()).discard(producer.name)
                readers[name] |= {c.name for c in consumers}
            kept -= {c.name for c in consumers} | reads
            changed = True
            break
    computes = list(computes.values())
    result = remove_dead_computes(replace(graph, computes=tuple(computes)))
    for producer in result.computes:
        if result.buffer(producer.name).role == "temp":
            notes.append(f"{producer.name}: materialised ({inline_decision(result, producer)[1]})")
    return result, notes


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
