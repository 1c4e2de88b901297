"""Graph-to-graph passes: index substitution, dead-compute removal, inlining of producers where the
cost model says it pays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from heapq import heapify, heappop, heappush
from itertools import count

from catenc.dispatch import Table
from catenc.dtypes import BOOL
from catenc.ir.cost import BYTE_WEIGHT, at_reference, element_reads, element_work, elements, no_more_than
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
    Role,
    SymInt,
    Unary,
    Value,
    Where,
    loaded_buffers,
    loads,
    walk,
)
from catenc.registry import EXPENSIVE_OPS
from catenc.symbolic import ONE, ZERO, Expr, product, sym

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


def replace_loads(value: Value, makers: dict[str, Callable[[Load], Value]]) -> Value:
    """The tree with every load of a buffer in `makers` replaced by what its maker gives."""
    if isinstance(value, Load) and value.buffer in makers:
        return makers[value.buffer](value)
    return value.with_children(tuple(replace_loads(c, makers) for c in value.children()))


def split_constant_slices(graph: Graph) -> Graph:
    """Every load of an input at a constant index along an axis other than the last (a layer's
    slice of stacked weights, `w[3, i, j]`, or of a cache stacked second, `kv[s, 3, h, d]`)
    reads a view buffer instead (`w_at3[i, j]`, `kv_at3_axis1[s, 0, h, d]`: a pointer into the
    input the entry computes once), so that identical layers lower to identical kernels. The
    first constant index of a load is the one taken (after the first axis, along one of more
    than one index: an axis of one has nothing to slice)."""
    views: dict[tuple[str, int, int], Buffer] = {}
    inputs = {b.name: b for b in graph.buffers if b.role == Role.INPUT and len(b.shape) >= 2}
    taken = {b.name for b in graph.buffers}

    def view(load: Load) -> Value:
        base = inputs.get(load.buffer)
        if base is None or isinstance(load, Gather):
            return load
        sliced = (k for k, e in enumerate(load.index[:-1]) if e.is_const and (k == 0 or base.shape[k] != ONE))
        axis = next(sliced, None)
        if axis is None:
            return load
        at, extent = load.index[axis].value, base.shape[axis]
        # only inside a dim of known size: a pointer past the input is undefined in C, even
        # unused (a load under a false guard may carry any index)
        if not (extent.is_const and 0 <= at < extent.value):
            return load
        key = (base.name, axis, at)
        if key not in views:
            name = f"{base.name}_at{at}" if axis == 0 else f"{base.name}_at{at}_axis{axis}"
            while name in taken:
                name += "_"
            taken.add(name)
            shape = base.shape[1:] if axis == 0 else base.shape
            views[key] = Buffer(name, base.dtype, shape, Role.VIEW, (base.name, at), axis)
        index = load.index[1:] if axis == 0 else load.index[:axis] + (ZERO,) + load.index[axis + 1 :]
        return replace(load, buffer=views[key].name, index=index)

    computes = []
    for c in graph.computes:
        body = c.body
        for name in dict.fromkeys(ld.buffer for ld in loads(c.body) if ld.buffer in inputs):  # first-read order
            body = replace_loads(body, {name: view})
        computes.append(replace(c, body=body))
    return replace(graph, buffers=graph.buffers + tuple(views.values()), computes=tuple(computes))


def remove_dead_computes(graph: Graph) -> Graph:
    """Drop computes whose values never reach an output."""
    needed = {b.name for b in graph.buffers if b.role in (Role.OUTPUT, Role.STATUS)}
    kept: list[Compute] = []
    for compute in reversed(graph.computes):
        if compute.name in needed:
            kept.append(compute)
            needed |= {load.buffer for load in loads(compute.body)}
    names = {c.name for c in kept} | {b.name for b in graph.inputs}
    buffers = tuple(b for b in graph.buffers if b.name in names or b.role != Role.TEMP)
    return replace(graph, buffers=buffers, computes=tuple(reversed(kept)))


Site = tuple[Compute, Load, tuple[tuple[str, Expr], ...]]  # a load, its compute, the Reduce indices around it


def _site_index(compute: Compute) -> dict[str, list[Site]]:
    """Every load in the compute's body by buffer, in order (parents before children, left to
    right), with the Reduce indices around it; a load inside a load of the same buffer (in a
    take's position) is not one of that buffer's sites."""
    index: dict[str, list[Site]] = {}
    stack: list[tuple[Value, tuple, frozenset[str]]] = [(compute.body, (), frozenset())]
    while stack:
        v, enclosing, inside = stack.pop()
        if isinstance(v, Load):
            if v.buffer in inside:
                continue
            index.setdefault(v.buffer, []).append((compute, v, enclosing))
            inside = inside | {v.buffer}
        inner = enclosing + v.indices if isinstance(v, Reduce) else enclosing
        stack.extend((child, inner, inside) for child in reversed(v.children()))
    return index


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


def inline_decision(producer: Compute, sites: list[Site], element_bytes: int, rereads: int = 2) -> tuple[bool, str]:
    """Whether to inline a temp compute at the sites that read it, and why (for --debug 1 and
    the schedule's notes). A cheap value always goes in; any other only where the fused program
    costs no more than the unfused one plus the intermediate's memory traffic (ir/cost.py), so
    a reduction or an expensive value is never recomputed per element of a larger consumer.
    `rereads` caps the places an expensive value is recomputed at."""
    sites = list(dict.fromkeys(sites))
    if not sites:
        return False, "unused"
    if any(isinstance(load, Gather) for _, load, _ in sites):
        return False, "read at computed positions (take)"
    if producer.body.summary.depth >= MAX_INLINED_DEPTH:
        return False, f"an expression {producer.body.summary.depth} deep (inlining stops at {MAX_INLINED_DEPTH})"
    if is_cheap(producer.body):
        return True, "cheap elementwise"
    if any(enclosing for _, _, enclosing in sites) and _has_contraction(producer.body):
        # a sum of products is a packed gemm kernel of its own (schedule/contractions.py); inside
        # another reduction (a convolution under a global average pool) it would be plain loops
        return False, "a contraction read inside a reduction (it keeps its gemm kernel)"
    per_read = _evaluations(sites)
    evaluations = sum(per_read.values(), ZERO)
    made = elements(producer)
    each = element_work(producer.body).weighted
    traffic = (made + evaluations) * element_bytes * BYTE_WEIGHT
    if producer.body.summary.has_reduce:
        kind = "a reduction"
        # it loads a window per evaluation where its stored result is one element: a 2x2 max pool
        # inlined into a convolution's taps reads four times as much (an elementwise value reads
        # about what it stores, and its row values stay in registers)
        each = each + element_reads(producer.body) * BYTE_WEIGHT
    else:
        kind = "an expensive elementwise value" if calls_expensive(producer.body) else "an elementwise value"
    if not no_more_than(evaluations * each, made * each + traffic):
        consumer, most = max(per_read.items(), key=lambda item: at_reference(item[1]))
        if not no_more_than(most, made):
            return False, (
                f"would recompute {producer.name} per element of {consumer[0]} "
                f"({most} evaluations of {kind} with {made} elements)"
            )
        return False, f"{kind} read at {len(per_read)} places: recomputing it costs more than storing it"
    if len(per_read) > rereads:
        return False, f"{kind} read at {len(per_read)} places (recomputed at up to {rereads})"
    if any(not _plain(load) for _, load, _ in sites) and _has_contraction(producer.body):
        # read through a reshape that splits or merges axes (attention's heads merged back,
        # h*D + d), its output index would be a division: plain loops instead of a gemm
        return False, "a contraction read through a reshape (it keeps its gemm kernel)"
    return True, f"{kind} whose recomputation at {len(per_read)} place(s) costs less than storing it"


def _plain(load: Load) -> bool:
    """Whether each index of the load is an index of the consumer or a constant (a transpose or
    a slice at most, no reshape)."""
    return all(e.is_const or e.as_symbol() is not None for e in load.index)


def _has_contraction(value: Value) -> bool:
    """Whether the value holds a sum of products (a matrix product or convolution)."""
    return any(
        isinstance(v, Reduce) and v.op == "sum" and isinstance(v.body, Binary) and v.body.op == "mul"
        for v in walk(value)
    )


def _evaluations(sites: list[Site]) -> dict[tuple[str, Load], Expr]:
    """How often each distinct load of a producer is evaluated: its consumer's elements times
    the extents of the reductions around it (equal loads in one consumer share one copy)."""
    found: dict[tuple[str, Load], Expr] = {}
    for compute, load, enclosing in sites:
        count_ = elements(compute) * product(extent for _, extent in enclosing)
        key = (compute.name, load)
        if key not in found or at_reference(count_) > at_reference(found[key]):
            found[key] = count_
    return found


def _expander(producer: Compute, suffixes: dict[Load, int]):
    """Replaces a load of the producer by its body, its reductions renamed with the load's
    suffix; equal loads get one equal copy, so the lowering evaluates a reduction once however
    often the consumer mentions it."""
    names = [n for n, _ in producer.indices]
    memo: dict[Load, Value] = {}

    def expand(load: Load) -> Value:
        if load not in memo:
            body = rename_reductions(producer.body, f"_{suffixes[load]}")
            memo[load] = substitute(body, dict(zip(names, load.index)))
        return memo[load]

    return expand


def inline_computes(graph: Graph, rereads: int = 2) -> tuple[Graph, list[str]]:
    """Inline temp computes into their consumers where that costs no extra work; returns the
    new graph and one note per producer kept materialised.

    Producers are decided in graph order, the first undecided one first; inlining one reopens
    its consumers and what it reads (their sites or bodies changed). The work is in proportion
    to the program, not to the number of times a growing body is inlined or inlined into:
    a consumer's producers are spliced into it in one pass, when it is next needed as a whole."""
    return _Inliner(graph, rereads).run()


class _Inliner:
    def __init__(self, graph: Graph, rereads: int) -> None:
        self.graph = graph
        self.rereads = rereads
        self.serial = count(1)  # numbers the copies of inlined bodies (their reductions' names)
        self.computes = {c.name: c for c in graph.computes}  # in graph order
        self.position = {c.name: k for k, c in enumerate(graph.computes)}
        self.temps = {b.name for b in graph.buffers if b.role == Role.TEMP}
        self.itemsize = {b.name: b.dtype.itemsize for b in graph.buffers}
        self.reads = {c.name: dict.fromkeys(loaded_buffers(c.body)) for c in graph.computes}
        self.readers: dict[str, set[str]] = {}  # buffer -> the computes that load it
        for c in graph.computes:
            for name in self.reads[c.name]:
                self.readers.setdefault(name, set()).add(c.name)
        self.pending: dict[str, dict[str, Callable[[Load], Value]]] = {}  # inlined, not yet spliced in
        self.pending_reads: dict[str, set[str]] = {}  # what the pending producers of a compute read
        self.own_indices: dict[str, tuple] = {}  # a compute under a producer's index names -> its own
        self.indexed: dict[str, tuple[Compute, dict[str, list[Site]]]] = {}

    def run(self) -> tuple[Graph, list[str]]:
        undecided = [self.position[name] for name in self.computes if name in self.temps]  # a heap
        heapify(undecided)
        queued = set(undecided)
        while undecided:
            k = heappop(undecided)
            queued.discard(k)
            reopened = self.consider(self.graph.computes[k].name)
            for name in reopened:
                if name in self.computes and name in self.temps and self.position[name] not in queued:
                    heappush(undecided, self.position[name])
                    queued.add(self.position[name])
        for name in list(self.pending):
            self.compute(name)
        for name, indices in self.own_indices.items():
            c = self.computes.get(name)
            if c is not None and c.body.summary.symbols.isdisjoint(n for n, _ in indices):
                self.computes[name] = _with_indices(c, indices)
        result = remove_dead_computes(replace(self.graph, computes=tuple(self.computes.values())))
        readers: dict[str, list[Compute]] = {}
        for c in result.computes:
            for name in loaded_buffers(c.body):
                readers.setdefault(name, []).append(c)
        notes = []
        for producer in result.computes:
            if producer.name in self.temps:
                sites = [s for c in readers.get(producer.name, []) for s in self.sites(c, producer.name)]
                why = inline_decision(producer, sites, self.itemsize[producer.name], self.rereads)[1]
                notes.append(f"{producer.name}: materialised ({why})")
        return result, notes

    def consider(self, name: str) -> list[str]:
        """Decide on one producer, inline it if so; returns the computes to decide on again."""
        producer = self.compute(name)
        if producer.body.summary.depth >= MAX_INLINED_DEPTH:
            return []  # for good: its body only grows
        consumers = sorted(self.readers.get(name, ()), key=self.position.__getitem__)
        for c in consumers:
            if name in self.pending_reads.get(c, ()):  # a pending body reads the producer: splice first
                self.compute(c)
        sites = [s for c in consumers for s in self.sites(self.computes[c], name)]
        if not inline_decision(producer, sites, self.itemsize[name], self.rereads)[0]:
            return []  # decided against, until its sites or body change
        for c in consumers:
            consumer = self._adopt_indices(self.computes[c], producer)
            # numbered as the loads come, as a rebuild of the body in order would meet them
            suffixes = {ld: next(self.serial) for ld in dict.fromkeys(ld for _, ld, _ in self.sites(consumer, name))}
            self.pending.setdefault(c, {})[name] = _expander(producer, suffixes)
            self.pending_reads.setdefault(c, set()).update(self.reads[name])
            self.reads[c].pop(name, None)
            self.reads[c].update(self.reads[name])
        del self.computes[name]
        self.readers.pop(name, None)
        # what the producer reads gains its consumers as sites, and they gain its body
        for read in self.reads[name]:
            self.readers.setdefault(read, set()).discard(name)
            self.readers[read] |= set(consumers)
        return consumers + list(self.reads[name])

    def compute(self, name: str) -> Compute:
        """The compute with its pending producers spliced in."""
        expanders = self.pending.pop(name, None)
        if expanders:
            self.pending_reads.pop(name)
            c = self.computes[name]
            self.computes[name] = replace(c, body=replace_loads(c.body, expanders))
        return self.computes[name]

    def sites(self, compute: Compute, buffer: str) -> list[Site]:
        """The loads of buffer in compute (one walk per version of the compute)."""
        found = self.indexed.get(compute.name)
        if found is None or found[0] is not compute:
            found = self.indexed[compute.name] = (compute, _site_index(compute))
        return found[1].get(buffer, [])

    def _adopt_indices(self, consumer: Compute, producer: Compute) -> Compute:
        """The consumer, its indices renamed to the producer's when it reads the producer at
        exactly its own indices and the producer's body is the larger: the body then goes in as
        it is, unrenamed (the consumer gets its own names back at the end)."""
        identity = tuple(sym(name) for name, _ in consumer.indices)
        if len(producer.indices) != len(identity) or identity == tuple(sym(name) for name, _ in producer.indices):
            return consumer
        if producer.body.summary.size <= consumer.body.summary.size:  # its pending bodies only add
            return consumer
        if not any(ld.index == identity for _, ld, _ in self.sites(consumer, producer.name)):
            return consumer
        consumer = self.compute(consumer.name)
        names = tuple(name for name, _ in producer.indices)
        summary = consumer.body.summary
        if producer.body.summary.size <= summary.size or not summary.symbols.isdisjoint(names):
            return consumer  # smaller after all, or the names mean something else in it
        self.own_indices.setdefault(consumer.name, consumer.indices)
        indices = tuple((name, extent) for name, (_, extent) in zip(names, consumer.indices))
        consumer = self.computes[consumer.name] = _with_indices(consumer, indices)
        return consumer


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
    return fold_node(value.with_children(tuple(fold_value(c) for c in value.children())))


def fold_node(value: Value) -> Value:
    """fold_value's rules at the root of a value whose children are folded already."""
    return _FOLD[type(value)](value)


_FOLD: Table[Callable[[Value], Value]] = Table("fold_value")


@_FOLD.register(Value)
def _unfolded(value: Value) -> Value:
    return value


@_FOLD.register(Unary)
def _fold_unary(value: Unary) -> Value:
    dtype = value.dtype
    if isinstance(value.x, Const) and value.op == "neg" and dtype.is_int:
        return Const(dtype, _wrap(-int(value.x.value), dtype))
    if isinstance(value.x, Const) and value.op == "not" and dtype == BOOL:
        return Const(BOOL, not value.x.value)
    return value


@_FOLD.register(Cast)
def _fold_cast(value: Cast) -> Value:
    """An integer constant cast to an integer type is a constant of that type (wrapped, as C casts)."""
    if isinstance(value.x, Const) and value.x.dtype.is_int and value.dtype.is_int:
        return Const(value.dtype, _wrap(int(value.x.value), value.dtype))
    return value


@_FOLD.register(Where)
def _fold_where(value: Where) -> Value:
    if isinstance(value.cond, Const):
        return value.a if value.cond.value else value.b
    return value.a if value.a == value.b else value


@_FOLD.register(Binary)
def _fold_binary(value: Binary) -> Value:
    a, b, dtype = value.a, value.b, value.dtype
    if isinstance(a, Const) and isinstance(b, Const) and dtype.is_int and value.op in _INT_FOLDS:
        return Const(dtype, _wrap(_INT_FOLDS[value.op](int(a.value), int(b.value)), dtype))
    if value.op == "mul" and isinstance(b, Const) and b.value == 1 and b.dtype == dtype:
        return a
    if value.op == "mul" and isinstance(a, Const) and a.value == 1 and a.dtype == dtype:
        return b
    if value.op in ("add", "sub") and dtype.is_int and isinstance(b, Const) and b.value == 0:
        return a
    if value.op in ("and", "or") and dtype == BOOL:
        return _fold_logic(value)
    if value.op == "pow" and isinstance(b, Const) and b.value == 2 and not dtype.is_int:
        return Binary(dtype, "mul", a, a)  # x ** 2: x*x is the correctly rounded square, NaN and inf alike
    return value


def _fold_logic(value: Binary) -> Value:
    """`and`/`or` with a constant operand: the other operand, or the constant that decides it."""
    deciding = value.op == "or"  # the operand value that decides the result alone
    for known, other in ((value.a, value.b), (value.b, value.a)):
        if isinstance(known, Const):
            return known if bool(known.value) == deciding else other
    return value


def fold_constants(graph: Graph) -> Graph:
    return replace(graph, computes=tuple(replace(c, body=fold_value(c.body)) for c in graph.computes))
