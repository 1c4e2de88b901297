"""Lowering the typed AST to the graph IR.

Every statement becomes a `Compute`; so does every array-form reduction, matmul and arg-
reduction inside an expression (the scheduler inlines them back where that is free). Views and
elementwise ops never become computes: a value is a `Lazy` tensor, a function from an index to
a scalar expression, so reshape, transpose, slice, concat, pad and broadcast fold into the index
maps of the loads they reach. Composite calls are inlined here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

from catenc.dispatch import Table
from catenc.dtypes import BOOL, DTYPES, F32, I64, DType
from catenc.frontend import typed as T
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
)
from catenc.registry import LOWERINGS, OPS, TRANSCENDENTAL_OPS, Lowering, Rule
from catenc.symbolic import ONE, ZERO, Expr, Facts, const, prove_less, prove_nonneg, row_major, simplify, sym

Index = tuple[Expr, ...]
GATHERED = "gathered@"  # stands for a computed position while a gather is pushed down to the loads
U64 = DTYPES["u64"]


def compute_dtype(dtype: DType) -> DType:
    """f16 and bf16 are computed in f32."""
    return F32 if dtype.is_half else dtype


@dataclass(frozen=True)
class Lazy:
    """A tensor not yet materialised: its shape and how to compute the element at an index."""

    dtype: DType
    shape: Index
    at: Callable[[Index], Value]


def build_graph(program: T.Program) -> Graph:
    """The graph IR of an entry's typed program."""
    builder = _Builder()
    for _, ttype in program.inputs + program.outputs:
        for dim in ttype.shape:
            builder.used |= dim.free_symbols()  # symbols become C parameters: never reuse their names
    scope: dict[str, Lazy] = {}
    for name, ttype in program.inputs:
        builder.buffers.append(Buffer(name, ttype.dtype, ttype.shape, Role.INPUT))
        builder.used.add(name)
        scope[name] = builder.load_tensor(name, ttype)
    for name, _ in program.outputs:
        builder.used.add(name)
    builder.statements(program, scope, prefix="", outputs={n: t for n, t in program.outputs})
    return Graph(program.name, tuple(builder.buffers), tuple(builder.computes))


class _Builder:
    def __init__(self) -> None:
        self.buffers: list[Buffer] = []
        self.computes: list[Compute] = []
        self.used: set[str] = set()
        self.extents: dict[str, Expr] = {}
        self.counter = count()
        self.calls: dict[int, tuple[Lazy, ...]] = {}
        self.copies: dict[int, tuple[Lazy, Lazy]] = {}  # id(source): the source (so the id stays its), a copy

    # -- names and indices --
    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def fresh_indices(self, shape: Index, letter: str = "i") -> tuple[tuple[str, Expr], ...]:
        out = []
        for extent in shape:
            name = f"{letter}{next(self.counter)}"
            while name in self.used:
                name = f"{letter}{next(self.counter)}"
            self.extents[name] = extent
            out.append((name, extent))
        return tuple(out)

    def index_of(self, indices: tuple[tuple[str, Expr], ...]) -> Index:
        """The index expressions of fresh loop indices; extent-1 dims are always index 0."""
        return tuple(ZERO if extent == ONE else sym(name) for name, extent in indices)

    def facts_of(self, index: Index) -> Facts:
        """The ranges of the fresh indices that the index expressions mention."""
        names = set().union(*(e.free_symbols() for e in index)) if index else set()
        facts = Facts()
        for name in sorted(names):
            if name in self.extents:
                facts = facts.with_range(name, self.extents[name])
        return facts

    def simplify(self, index: Index) -> Index:
        facts = self.facts_of(index)
        return tuple(simplify(e, facts) for e in index)

    # -- tensors --
    def load_tensor(self, name: str, ttype: T.TType) -> Lazy:
        dtype = compute_dtype(ttype.dtype)
        return Lazy(ttype.dtype, ttype.shape, lambda idx: Load(dtype, name, self.simplify(idx)))

    def materialise(self, name: str, value: Lazy, role: Role, storage: DType | None = None) -> Lazy:
        indices = self.fresh_indices(value.shape)
        body = value.at(self.index_of(indices))
        self.computes.append(Compute(name, indices, body))
        dtype = storage or compute_dtype(value.dtype)
        self.buffers.append(Buffer(name, dtype, value.shape, role))
        return self.load_tensor(name, T.TType(dtype if role != Role.OUTPUT else value.dtype, value.shape))

    def statements(self, program: T.Program, scope: dict[str, Lazy], prefix: str, outputs: dict[str, T.TType]) -> None:
        for stmt in program.statements:
            is_output = not prefix and stmt.target in outputs
            name = stmt.target if is_output else self.unique(prefix + stmt.target)
            if isinstance(stmt, T.Assign):
                value = self.lower(stmt.value, scope)
                storage = outputs[stmt.target].dtype if is_output else None
                scope[stmt.target] = self.materialise(name, value, Role.OUTPUT if is_output else Role.TEMP, storage)
            else:
                scope[stmt.target] = self.index_statement(stmt, scope, name, is_output)

    def index_statement(self, stmt: T.IndexAssign, scope: dict[str, Lazy], name: str, is_output: bool) -> Lazy:
        indices = self.fresh_indices(tuple(e for _, e in stmt.indices))
        mapping = {typed: idx for (typed, _), idx in zip(stmt.indices, self.index_of(indices))}
        body = self.scalar(stmt.body, scope, mapping)
        self.computes.append(Compute(name, indices, body))
        role = Role.OUTPUT if is_output else Role.TEMP
        storage = stmt.type.dtype if is_output else compute_dtype(stmt.type.dtype)
        self.buffers.append(Buffer(name, storage, stmt.type.shape, role))
        return self.load_tensor(name, T.TType(storage, stmt.type.shape))

    # -- array form --
    _LOWER: Table[Callable[..., Lazy | tuple[Lazy, ...]]] = Table("build_graph")

    def lower(self, node: T.Node, scope: dict[str, Lazy]) -> Lazy:
        return self._LOWER[type(node)](self, node, scope)

    @_LOWER.register(T.Ref)
    def lower_Ref(self, node: T.Ref, scope) -> Lazy:
        return scope[node.name]

    @_LOWER.register(T.Lit)
    def lower_Lit(self, node: T.Lit, scope) -> Lazy:
        value = Const(compute_dtype(node.type.dtype), node.value)
        return Lazy(node.type.dtype, (), lambda idx: value)

    @_LOWER.register(T.SymVal)
    def lower_SymVal(self, node: T.SymVal, scope) -> Lazy:
        value = symint(node.expr, compute_dtype(node.type.dtype))
        return Lazy(node.type.dtype, (), lambda idx: value)

    @_LOWER.register(T.Apply)
    def lower_Apply(self, node: T.Apply, scope) -> Lazy:
        args = [self.lower(a, scope) for a in node.args]
        shape = node.type.shape
        dtype = compute_dtype(node.type.dtype)
        arg_dtype = node.args[0].type.dtype

        def at(idx: Index) -> Value:
            values = [a.at(broadcast_index(idx, a.shape)) for a in args]
            return apply(node.op, values, dtype, node.type.dtype, arg_dtype)

        return Lazy(node.type.dtype, shape, at)

    @_LOWER.register(T.Reduce)
    def lower_Reduce(self, node: T.Reduce, scope) -> Lazy:
        arg = self.lower(node.arg, scope)
        op = "sum" if node.op == "mean" else node.op
        red = self.fresh_indices(tuple(arg.shape[a] for a in node.axes), "r")
        dtype = compute_dtype(node.type.dtype)

        def at(idx: Index) -> Value:
            red_iter = iter(self.index_of(red))
            out_iter = iter(idx)
            full = []
            for axis in range(len(arg.shape)):
                if axis in node.axes:
                    full.append(next(red_iter))
                    if node.keepdims:
                        next(out_iter)
                else:
                    full.append(next(out_iter))
            value: Value = Reduce(dtype, op, red, arg.at(tuple(full)))
            if node.op == "mean":
                count_value = symint(_product(e for _, e in red), dtype)
                value = Binary(dtype, "div", value, count_value)
            return value

        return self.materialise(self.unique("t"), Lazy(node.type.dtype, node.type.shape, at), Role.TEMP)

    @_LOWER.register(T.ArgReduce)
    def lower_ArgReduce(self, node: T.ArgReduce, scope) -> Lazy:
        arg = self.lower(node.arg, scope)
        red = self.fresh_indices((arg.shape[node.axis],), "r")

        def at(idx: Index) -> Value:
            idx = list(idx)
            if node.keepdims:
                idx.pop(node.axis)
            full = idx[: node.axis] + [self.index_of(red)[0]] + idx[node.axis :]
            return Reduce(I64, node.op, red, arg.at(tuple(full)))

        return self.materialise(self.unique("t"), Lazy(I64, node.type.shape, at), Role.TEMP)

    @_LOWER.register(T.MatMul)
    def lower_MatMul(self, node: T.MatMul, scope) -> Lazy:
        a, b = self.lower(node.a, scope), self.lower(node.b, scope)
        k_extent = a.shape[-1]
        red = self.fresh_indices((k_extent,), "r")
        dtype = compute_dtype(node.type.dtype)

        def at(idx: Index) -> Value:
            batch, i, j = idx[:-2], idx[-2], idx[-1]
            (k,) = self.index_of(red)
            a_idx = broadcast_index(batch, a.shape[:-2]) + (i, k)
            b_idx = broadcast_index(batch, b.shape[:-2]) + (k, j)
            return Reduce(dtype, "sum", red, Binary(dtype, "mul", a.at(a_idx), b.at(b_idx)))

        return self.materialise(self.unique("t"), Lazy(node.type.dtype, node.type.shape, at), Role.TEMP)

    @_LOWER.register(T.Reshape)
    def lower_Reshape(self, node: T.Reshape, scope) -> Lazy:
        arg = self.lower(node.arg, scope)
        out_shape = node.type.shape

        def at(idx: Index) -> Value:
            flat = row_major(idx, out_shape)
            src = []
            stride = ONE
            for d in reversed(arg.shape):
                src.append(ZERO if d == ONE else (flat // stride) % d)
                stride = stride * d
            return arg.at(self.simplify(tuple(reversed(src))))

        return Lazy(node.type.dtype, out_shape, at)

    @_LOWER.register(T.Permute)
    def lower_Permute(self, node: T.Permute, scope) -> Lazy:
        arg = self.lower(node.arg, scope)

        def at(idx: Index) -> Value:
            src: list[Expr] = [ZERO] * len(idx)
            for k, p in enumerate(node.perm):
                src[p] = idx[k]
            return arg.at(tuple(src))

        return Lazy(node.type.dtype, node.type.shape, at)

    @_LOWER.register(T.Expand)
    def lower_Expand(self, node: T.Expand, scope) -> Lazy:
        arg = self.lower(node.arg, scope)
        return Lazy(node.type.dtype, node.type.shape, lambda idx: arg.at(broadcast_index(idx, arg.shape)))

    @_LOWER.register(T.Slice)
    def lower_Slice(self, node: T.Slice, scope) -> Lazy:
        arg = self.lower(node.arg, scope)

        def at(idx: Index) -> Value:
            it = iter(idx)
            src = [a.start + a.step * next(it) if a.keep else a.start for a in node.axes]
            return arg.at(tuple(src))

        return Lazy(node.type.dtype, node.type.shape, at)

    @_LOWER.register(T.Concat)
    def lower_Concat(self, node: T.Concat, scope) -> Lazy:
        parts = [self.lower(a, scope) for a in node.args]
        axis = node.axis
        dtype = compute_dtype(node.type.dtype)

        def at(idx: Index) -> Value:
            offsets, total = [], ZERO
            for p in parts:
                offsets.append(total)
                total = total + p.shape[axis]
            position = idx[axis]
            value: Value | None = None
            for p, offset in reversed(list(zip(parts, offsets))):
                local = idx[:axis] + (position - offset,) + idx[axis + 1 :]
                here = p.at(local)
                if value is None:
                    value = here
                else:
                    end = offset + p.shape[axis]
                    value = Where(dtype, Binary(BOOL, "lt", symint(position), symint(end)), here, value)
            return value

        return Lazy(node.type.dtype, node.type.shape, at)

    @_LOWER.register(T.Pad)
    def lower_Pad(self, node: T.Pad, scope) -> Lazy:
        arg = self.lower(node.arg, scope)
        fill = self.lower(node.value, scope)
        dtype = compute_dtype(node.type.dtype)

        def at(idx: Index) -> Value:
            src = tuple(i - lo for i, lo in zip(idx, node.before))
            inside: Value | None = None
            for s, d in zip(src, arg.shape):
                ok = Binary(
                    BOOL,
                    "and",
                    Binary(BOOL, "le", symint(ZERO), symint(s)),
                    Binary(BOOL, "lt", symint(s), symint(d)),
                )
                inside = ok if inside is None else Binary(BOOL, "and", inside, ok)
            if inside is None:
                return arg.at(src)
            return Where(dtype, inside, arg.at(src), fill.at(()))

        return Lazy(node.type.dtype, node.type.shape, at)

    @_LOWER.register(T.Take)
    def lower_Take(self, node: T.Take, scope) -> Lazy:
        arg = self.lower(node.arg, scope)
        arrays = [self.lower(i, scope) for i in node.indices]
        rank = len(node.type.shape) - len(arg.shape) + len(node.axes)
        batch = node.type.shape[node.at : node.at + rank]
        probe = self.fresh_indices(batch, "g")
        probe_index = self.index_of(probe)
        facts = self.facts_of(probe_index)
        # How each axis of the source is read: None (an axis left, at the next output index), an index
        # over the probe (an index array such as arange(N), affine and provably inside the axis: no
        # gather) or an index array whose values are checked and read through a gather.
        reads: list[Expr | Lazy | None] = [None] * len(arg.shape)
        for axis, array in zip(node.axes, arrays):
            affine = _affine(array.at(broadcast_index(probe_index, array.shape)))
            size = arg.shape[axis]
            if affine is not None and prove_nonneg(affine, facts) and prove_less(affine, size, facts):
                reads[axis] = affine
            else:
                self.index_check(array, size)
                reads[axis] = array
        source = arg
        gathered = [axis for axis, read in enumerate(reads) if isinstance(read, Lazy)]
        dtype = compute_dtype(node.type.dtype)
        while len(gathered) > 1:
            # a load has one computed axis: gather the first into a temp (the index array's axes in
            # place of the axis), which the next gathers read at the probe
            axis, array = gathered[0], reads[gathered[0]]
            own = len(array.shape)

            def first(idx: Index, source=source, axis=axis, array=array, own=own) -> Value:
                value = array.at(idx[axis : axis + own])
                return self.gather(source, idx[:axis] + (ZERO,) + idx[axis + own :], axis, value, dtype)

            shape = source.shape[:axis] + array.shape + source.shape[axis + 1 :]
            source = self.materialise(self.unique("gathered"), Lazy(node.type.dtype, shape, first), Role.TEMP)
            reads = reads[:axis] + list(broadcast_index(probe_index, array.shape)) + reads[axis + 1 :]
            gathered = [axis for axis, read in enumerate(reads) if isinstance(read, Lazy)]

        def at(idx: Index) -> Value:
            own = idx[node.at : node.at + rank]
            mapping = {name: i for (name, extent), i in zip(probe, own) if extent != ONE}
            rest = iter(idx[: node.at] + idx[node.at + rank :])
            index = [
                next(rest) if read is None else ZERO if isinstance(read, Lazy) else read.substitute(mapping)
                for read in reads
            ]
            if not gathered:
                return source.at(tuple(index))
            array = reads[gathered[0]]
            value = array.at(broadcast_index(own, array.shape))
            return self.gather(source, tuple(index), gathered[0], value, dtype)

        return Lazy(node.type.dtype, node.type.shape, at)

    def gather(self, source: Lazy, index: Index, axis: int, value: Value, dtype: DType) -> Value:
        """`source` read at `index`, whose entry on `axis` (0) is replaced by the index value, wrapped
        once and clamped into the axis (the index check fails the entry on any outside)."""
        size = source.shape[axis]
        zero = Const(dtype, 0.0 if dtype.is_float else 0)
        if size.is_const and size.value == 0:  # nothing to read: the index check fails the entry
            return zero
        position = index_position(value, size)
        top = Binary(I64, "sub", symint(size), Const(I64, 1))
        clamped = Binary(I64, "max", Binary(I64, "min", position, top), Const(I64, 0))
        gather = self.read_at(source, index, axis, clamped)
        if size.is_const:
            return gather
        # an empty axis has no row to clamp to (and the buffer may be NULL): never read it
        return Where(dtype, Binary(BOOL, "lt", Const(I64, 0), symint(size)), gather, zero)

    def read_at(self, source: Lazy, index: Index, axis: int, position: Value) -> Value:
        """`source` at `index` with the entry on `axis` a computed position in the axis: read through
        views and cheap elementwise ops, each load of the axis a gather (nothing copied), where every
        load reads that axis as one whole axis of its buffer; else from a copy of `source`, made once."""
        self.extents[GATHERED] = source.shape[axis]
        value = source.at(index[:axis] + (sym(GATHERED),) + index[axis + 1 :])
        if not (value.summary.has_reduce or value.summary.op_names & TRANSCENDENTAL_OPS):
            through = self.gathered_loads(value, source.shape[axis], position)
            if through is not None:
                return through
        if id(source) not in self.copies:
            self.copies[id(source)] = (source, self.materialise(self.unique("gathered"), source, Role.TEMP))
        load = self.copies[id(source)][1].at(index)
        return Gather(load.dtype, load.buffer, load.index, axis, position)

    _GATHERED: Table[Callable[..., Value | None]] = Table("gathered_loads")

    def gathered_loads(self, value: Value, size: Expr, position: Value) -> Value | None:
        """`value` with every load that reads GATHERED alone on an axis of extent `size` made a gather
        at `position`; None where GATHERED is read otherwise (a strided or reshaped view, a bound)."""
        if GATHERED not in value.summary.symbols:
            return value
        return self._GATHERED[type(value)](self, value, size, position)

    @_GATHERED.register(Value)
    def gathered_children(self, value: Value, size: Expr, position: Value) -> Value | None:
        children = [self.gathered_loads(c, size, position) for c in value.children()]
        return None if any(c is None for c in children) else value.with_children(tuple(children))

    @_GATHERED.register(Load)
    def gathered_load(self, value: Load, size: Expr, position: Value) -> Value | None:
        uses = [j for j, e in enumerate(value.index) if GATHERED in e.free_symbols()]
        if len(uses) != 1 or value.index[uses[0]] != sym(GATHERED):
            return None
        (j,) = uses
        if next(b.shape[j] for b in self.buffers if b.name == value.buffer) != size:
            return None
        return Gather(value.dtype, value.buffer, value.index[:j] + (ZERO,) + value.index[j + 1 :], j, position)

    @_GATHERED.register(Gather, SymInt)
    def gathered_elsewhere(self, value: Value, size: Expr, position: Value) -> None:
        """A gather reading GATHERED outside its position, or an index value."""
        return None

    def index_check(self, indices: Lazy, size: Expr) -> None:
        """A status compute counting the indices outside [-size, size) (outside [0, size) for
        an unsigned index dtype): the entry returns CATENC_E_INDEX when it is not zero."""
        red = self.fresh_indices(indices.shape, "r")
        value = indices.at(self.index_of(red))
        if value.dtype == U64:  # compared unsigned: 2**64 - 1 is not -1
            bad = Binary(BOOL, "le", Cast(U64, symint(size)), value)
        elif value.dtype.kind == "uint":
            bad = Binary(BOOL, "le", symint(size), Cast(I64, value))
        else:
            position = Cast(I64, value) if value.dtype != I64 else value
            low = Binary(BOOL, "lt", position, symint(-size))
            high = Binary(BOOL, "le", symint(size), position)
            bad = Binary(BOOL, "or", low, high)
        body = Reduce(I64, "sum", red, Cast(I64, bad)) if red else Cast(I64, bad)
        name = self.unique("index_errors")
        self.computes.append(Compute(name, (), body))
        self.buffers.append(Buffer(name, I64, (), Role.STATUS))

    @_LOWER.register(T.Arange)
    def lower_Arange(self, node: T.Arange, scope) -> Lazy:
        dtype = compute_dtype(node.type.dtype)
        return Lazy(node.type.dtype, node.type.shape, lambda idx: symint(idx[0], dtype))

    @_LOWER.register(T.Call)
    def lower_Call(self, node: T.Call, scope) -> tuple[Lazy, ...]:
        key = id(node)
        if key not in self.calls:
            inner: dict[str, Lazy] = {}
            for (name, ttype), arg in zip(node.program.inputs, node.args):
                inner[name] = broadcast_to(self.lower(arg, scope), ttype.shape)
            prefix = f"{node.callee}{next(self.counter)}_"
            self.statements(node.program, inner, prefix, {})
            self.calls[key] = tuple(inner[name] for name, _ in node.program.outputs)
        return self.calls[key]

    @_LOWER.register(T.CallOut)
    def lower_CallOut(self, node: T.CallOut, scope) -> Lazy:
        return self.lower_Call(node.call, scope)[node.index]

    # -- index form --
    _SCALAR: Table[Callable[..., Value]] = Table("build_graph index form")

    def scalar(self, node: T.Node, scope: dict[str, Lazy], mapping: dict[str, Expr]) -> Value:
        return self._SCALAR[type(node)](self, node, scope, mapping)

    @_SCALAR.register(T.Node)
    def scalar_tensor(self, node: T.Node, scope: dict[str, Lazy], mapping: dict[str, Expr]) -> Value:
        """A whole-tensor expression inside an index expression: a scalar, lowered in array form."""
        return self.lower(node, scope).at(())

    @_SCALAR.register(T.Access)
    def scalar_access(self, node: T.Access, scope: dict[str, Lazy], mapping: dict[str, Expr]) -> Value:
        index = tuple(e.substitute(mapping) for e in node.indices)
        return scope[node.name].at(index)

    @_SCALAR.register(T.IndexVal)
    def scalar_index(self, node: T.IndexVal, scope: dict[str, Lazy], mapping: dict[str, Expr]) -> Value:
        return symint(mapping[node.name])

    @_SCALAR.register(T.IndexReduce)
    def scalar_reduce(self, node: T.IndexReduce, scope: dict[str, Lazy], mapping: dict[str, Expr]) -> Value:
        red = self.fresh_indices(tuple(e for _, e in node.indices), "r")
        inner = dict(mapping)
        for (typed, _), idx in zip(node.indices, self.index_of(red)):
            inner[typed] = idx
        dtype = compute_dtype(node.type.dtype)
        body = self.scalar(node.body, scope, inner)
        if node.op == "mean":
            total = Reduce(dtype, "sum", red, body)
            return Binary(dtype, "div", total, symint(_product(e for _, e in red), dtype))
        return Reduce(dtype, node.op, red, body)

    @_SCALAR.register(T.Apply)
    def scalar_apply(self, node: T.Apply, scope: dict[str, Lazy], mapping: dict[str, Expr]) -> Value:
        args = [self.scalar(a, scope, mapping) for a in node.args]
        return apply(node.op, args, compute_dtype(node.type.dtype), node.type.dtype, node.args[0].type.dtype)


def _product(exprs) -> Expr:
    total = ONE
    for e in exprs:
        total = total * e
    return total


def broadcast_to(tensor: Lazy, shape: Index) -> Lazy:
    """The tensor seen with a (numpy-broadcast) larger shape; itself when the shape is its own."""
    if tensor.shape == shape:
        return tensor
    return Lazy(tensor.dtype, shape, lambda idx: tensor.at(broadcast_index(idx, tensor.shape)))


def broadcast_index(idx: Index, shape: Index) -> Index:
    """numpy broadcasting: align right, size-1 dims read index 0."""
    tail = idx[len(idx) - len(shape) :] if shape else ()
    return tuple(ZERO if d == ONE else i for i, d in zip(tail, shape))


def index_position(value: Value, size: Expr) -> Value:
    """An index value as an i64 position along an axis of `size`: a negative signed index
    wrapped once (numpy); an unsigned one never wraps, and a u64 one past the axis reads as
    `size` (out of range) rather than as a negative number."""
    if value.dtype.kind == "uint":
        if value.dtype == U64:
            value = Binary(U64, "min", value, Cast(U64, symint(size)))
        return Cast(I64, value)
    position = Cast(I64, value) if value.dtype != I64 else value
    negative = Binary(BOOL, "lt", position, Const(I64, 0))
    return Where(I64, negative, Binary(I64, "add", position, symint(size)), position)


def _affine(value: Value) -> Expr | None:
    """An index value as an expression of loop indices and symbols, when it is one (arange(N))."""
    if isinstance(value, SymInt) and value.dtype == I64:
        return value.expr
    if isinstance(value, Const) and value.dtype.is_int:
        return const(value.value)
    return None


def symint(expr: Expr, dtype: DType = I64) -> Value:
    if expr.is_const:
        return Const(dtype, float(expr.value) if dtype.is_float else expr.value)
    return SymInt(dtype, expr)


# ---- elementwise functions as primitive ops ----------------------------------------------------


def apply(op: str, args: list[Value], dtype: DType, result: DType, arg_dtype: DType) -> Value:
    """Lower one elementwise function or operator of the body language to primitive ops: itself
    when it is a primitive, else its lowering in the registry; `where`, `cast` and `sign`, whose
    nodes depend on dtypes, are built here."""
    x = args[0]
    if op == "where":
        return Where(dtype, args[0], args[1], args[2])
    if op == "cast":
        if result.is_half:
            source = x if x.dtype.is_float else Cast(F32, x)  # f64 rounds to f16 once, not via f32
            return Unary(F32, f"round_{result.name}", source)
        return x if x.dtype == dtype else Cast(dtype, x)
    if op == "sign":
        zero = x if x.dtype.is_float else Const(x.dtype, 0)  # a float keeps NaN and -0
        inner = Where(x.dtype, Binary(BOOL, "lt", x, Const(x.dtype, 0)), Const(x.dtype, -1), zero)
        return Where(x.dtype, Binary(BOOL, "lt", Const(x.dtype, 0), x), Const(x.dtype, 1), inner)
    entry = OPS[op]
    # a unary function computes in its operand's dtype; operators and binary functions in the result's
    compute = x.dtype if entry.arity == 1 and entry.rule is not Rule.BITS else dtype
    if entry.primitive:
        return _primitive(op, args, compute)
    return _expand(LOWERINGS[op], args, compute)


def _primitive(op: str, args: list[Value], compute: DType) -> Value:
    """A primitive op's node: bool for predicates and comparisons, bitwise ops in their operand's
    dtype, the rest in `compute`."""
    rule = OPS[op].rule
    predicate = rule in (Rule.FLOAT_PREDICATE, Rule.ORDER, Rule.EQUALITY)
    dtype = BOOL if predicate else args[0].dtype if rule is Rule.BITS else compute
    return Unary(dtype, op, args[0]) if len(args) == 1 else Binary(dtype, op, args[0], args[1])


def _expand(tree: Lowering, args: list[Value], compute: DType) -> Value:
    """A registry lowering over the operands (literals in `compute`); an op it names that has a
    lowering of its own is expanded in turn."""
    if tree[0] == "arg":
        return args[tree[1]]
    if tree[0] == "const":
        return Const(compute, tree[1])
    _, name, operands = tree
    values = [_expand(t, args, compute) for t in operands]
    if OPS[name].primitive:
        return _primitive(name, values, compute)
    return _expand(LOWERINGS[name], values, compute)
