"""Finding contractions: sums of products that the packed, register-blocked gemm driver computes.

A reduction `sum[k...](a * b)` over f32/f64 (or over i32 of `cast(u, i32) * cast(s, i32)`, u
unsigned and s signed bytes: an int8 product, on CPU targets) where `a` and `b` are reduction-free
and each reads output indices the other does not is a (batched) matrix product C[batch, m, n] = sum_k a(m, k)
b(k, n), with m the indices only `a` reads and n those only `b` reads. Such a reduction becomes
a compute of its own (written straight into the buffer it defines when its layout allows, else
into a temp laid out [batch..., m..., n...]); the schedule gives it a kernel of its own, and the
operand expressions (guards, strides, padding of a convolution) are evaluated while packing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from catenc.dtypes import F32
from catenc.ir.nodes import (
    Binary,
    Buffer,
    Cast,
    Compute,
    Gather,
    Graph,
    Load,
    Local,
    Reduce,
    Role,
    Value,
    Where,
    value_symbols,
    walk,
)
from catenc.ir.passes import calls_expensive, replace_node
from catenc.schedule.tiles import KINDS
from catenc.symbolic import ONE, ZERO, Expr, Facts, product, prove_less, prove_nonneg, sym

GEMM_DTYPES = frozenset({"f32", "f64"})
ACC = "catenc_acc"  # the product's name inside an epilogue
STORED_AS_F32 = frozenset({"f16", "bf16"})  # storage dtypes computed in f32

Axes = tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class Contraction:
    """output[offset + m*row_stride + n*col_stride] = sum over depth of a * b, for every batch
    index; rows, cols and depth are flattened in the order given (last fastest)."""

    output: str
    batch: Axes
    rows: Axes
    cols: Axes
    depth: Axes
    a: Value  # reads batch, rows and depth indices
    b: Value  # reads batch, depth and cols indices
    offset: Expr  # of the batch element, in elements
    row_stride: Expr
    col_stride: Expr
    epilogue: Value | None = None  # output = epilogue, with the product as Local(ACC): fused in

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def kind(self) -> str:
        """The packed gemm's kind (schedule/tiles.py KINDS): the dtype, or the int8 operands' signedness."""
        if self.dtype.name in GEMM_DTYPES:
            return self.dtype.name
        return _byte_kind(narrow(self.a).dtype.name, narrow(self.b).dtype.name)


def narrow(operand: Value) -> Value:
    """What a gemm packs of an operand: an int8 product's byte value under its cast to i32."""
    return operand.x if isinstance(operand, Cast) and operand.dtype.name == "i32" else operand


def _byte_kind(a: str, b: str) -> str | None:
    """The int8 gemm kind (schedule/tiles.py KINDS) whose operands are of dtypes a and b, if one is."""
    return next((k.name for k in KINDS.values() if k.group > 1 and (k.a, k.b) == (a, b)), None)


def _byte_product(body: Value) -> bool:
    """Whether body is `cast(x, i32) * cast(y, i32)` of bytes an int8 gemm kind multiplies, in either order."""
    if not (isinstance(body, Binary) and body.op == "mul" and body.dtype.name == "i32"):
        return False
    if not all(isinstance(v, Cast) for v in (body.a, body.b)):
        return False
    a, b = body.a.x.dtype.name, body.b.x.dtype.name
    return _byte_kind(a, b) is not None or _byte_kind(b, a) is not None


def extract_contractions(
    graph: Graph, converts: bool = False, integer: bool = False
) -> tuple[Graph, dict[str, Contraction], list[str]]:
    """The graph with every contraction a compute of its own, the contractions by compute name,
    and a note for each; `converts`: the target's contractions store an f32 result into an f16
    or bf16 output themselves (the GPU tiles), so such a compute is one in place too;
    `integer`: the target computes int8 products (the CPU's packed gemm)."""
    computes: list[Compute] = []
    buffers = list(graph.buffers)
    found: dict[str, Contraction] = {}
    notes: list[str] = []
    taken = {b.name for b in graph.buffers}
    for compute in graph.computes:
        body = compute.body
        direct = _in_place(graph, compute, converts, integer)
        if direct is not None:
            found[compute.name] = direct
            computes.append(compute)
            fused = ", its elementwise epilogue fused" if direct.epilogue is not None else ""
            notes.append(f"{compute.name}: contraction ({_shape_note(direct)}), a packed gemm kernel{fused}")
            continue
        for reduce in _candidates(graph, compute):
            used = value_symbols(reduce.body) - {n for n, _ in reduce.indices}
            axes = tuple((n, e) for n, e in compute.indices if n in used)
            name = _fresh(f"{compute.name}_mm", taken)
            temp = Buffer(name, reduce.dtype, tuple(e for _, e in axes), Role.TEMP)
            contraction = _contraction(replace(graph, buffers=graph.buffers + (temp,)), name, axes, reduce, integer)
            if contraction is None:
                taken.discard(name)
                continue
            buffers.append(temp)
            computes.append(Compute(name, axes, reduce))
            found[name] = contraction
            body = replace_node(body, reduce, Load(reduce.dtype, name, tuple(sym(n) for n, _ in axes)))
            notes.append(f"{name}: contraction ({_shape_note(contraction)}) taken out of {compute.name}")
        computes.append(replace(compute, body=body))
    return replace(graph, buffers=tuple(buffers), computes=tuple(computes)), found, notes


def materialise_costly_operands(graph: Graph) -> tuple[Graph, list[str]]:
    """Give an operand of a contraction that calls transcendentals (`gelu(h) @ w`) a compute of
    its own, so it is evaluated once per element (then fused as the producer's epilogue)
    rather than at every packing of its panels."""
    computes: list[Compute] = []
    buffers = list(graph.buffers)
    notes: list[str] = []
    taken = {b.name for b in graph.buffers}
    for compute in graph.computes:
        body = compute.body
        for reduce in _candidates(graph, compute):
            product = reduce.body
            if not (isinstance(product, Binary) and product.op == "mul") or reduce.dtype.name not in GEMM_DTYPES:
                continue
            for operand in (product.a, product.b):
                if not calls_expensive(operand) or any(isinstance(v, Reduce) for v in walk(operand)):
                    continue
                used = value_symbols(operand)
                axes = tuple(ax for ax in compute.indices + reduce.indices if ax[0] in used)
                name = _fresh(f"{compute.name}_operand", taken)
                buffers.append(Buffer(name, operand.dtype, tuple(e for _, e in axes), Role.TEMP))
                computes.append(Compute(name, axes, operand))
                body = replace_node(body, operand, Load(operand.dtype, name, tuple(sym(n) for n, _ in axes)))
                notes.append(f"{name}: a costly contraction operand, computed once before {compute.name}")
        computes.append(replace(compute, body=body))
    return replace(graph, buffers=tuple(buffers), computes=tuple(computes)), notes


def _in_place(graph: Graph, compute: Compute, converts: bool, integer: bool) -> Contraction | None:
    """The compute as one contraction written in place: its body is a contraction over all its
    indices, or an elementwise function (the epilogue) of one such contraction."""
    stored = graph.buffer(compute.name).dtype
    if stored != compute.body.dtype and not (converts and stored.name in STORED_AS_F32 and compute.body.dtype == F32):
        return None
    reduces = {v for v in walk(compute.body) if isinstance(v, Reduce)}
    if len(reduces) != 1:
        return None
    (reduce,) = reduces
    if reduce.dtype != compute.body.dtype:  # the driver writes the product in its own dtype
        return None
    if reduce not in _candidates(graph, compute):
        return None
    used = value_symbols(reduce.body) - {n for n, _ in reduce.indices}
    if any(n not in used and e != ONE for n, e in compute.indices):  # a unit axis (batch 1) is read at 0
        return None
    contraction = _contraction(graph, compute.name, compute.indices, reduce, integer)
    if contraction is None or compute.body == reduce:
        return contraction
    return replace(contraction, epilogue=replace_node(compute.body, reduce, Local(reduce.dtype, ACC)))


def _shape_note(c: Contraction) -> str:
    def flat(axes: Axes) -> str:
        return "*".join(str(e) for _, e in axes) or "1"

    batch = f"{flat(c.batch)} x " if c.batch else ""
    return f"{batch}[{flat(c.rows)} x {flat(c.depth)}] @ [{flat(c.depth)} x {flat(c.cols)}]"


def _fresh(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


def _contraction(graph: Graph, output: str, indices: Axes, reduce: Reduce, integer: bool) -> Contraction | None:
    """`output[indices] = reduce` as a contraction written in place, if it is one.

    The columns are the longest run of trailing output dimensions read by one operand only, the
    rows the last run of consecutive dimensions read by the other only (each run flattens to a
    single stride of the row-major buffer); every other index is a batch index."""
    body = reduce.body
    if reduce.op != "sum" or not indices:
        return None
    if not (reduce.dtype.name in GEMM_DTYPES or integer and _byte_product(body)):
        return None
    if not (isinstance(body, Binary) and body.op == "mul" and body.a.dtype == body.b.dtype == reduce.dtype):
        return None
    if any(isinstance(v, Reduce) for v in walk(body)):
        return None
    depth = {n for n, _ in reduce.indices}
    uses = {"a": value_symbols(body.a), "b": value_symbols(body.b)}
    if not (uses["a"] & depth and uses["b"] & depth):
        return None

    def owner(name: str) -> str | None:
        """The operand that alone reads an index (None: both or neither)."""
        a, b = name in uses["a"], name in uses["b"]
        return "a" if a and not b else "b" if b and not a else None

    col_side = owner(indices[-1][0])
    if col_side is None:
        return None
    row_side = "b" if col_side == "a" else "a"
    start = len(indices)
    while start > 0 and owner(indices[start - 1][0]) == col_side:
        start -= 1
    cols = indices[start:]
    end = start
    while end > 0 and owner(indices[end - 1][0]) != row_side:
        end -= 1
    begin = end
    while begin > 0 and owner(indices[begin - 1][0]) == row_side:
        begin -= 1
    rows = indices[begin:end]
    if not rows:
        return None
    if any(product([e for _, e in axes]) == ONE for axes in (rows, cols)):
        return None  # a matrix-vector product: plain loops stream the matrix once, packing copies it
    batch = tuple(ax for ax in indices if ax not in rows and ax not in cols)
    shape = graph.buffer(output).shape
    strides = dict(zip((n for n, _ in indices), _strides(shape)))
    offset = ZERO
    for name, _ in batch:
        offset = offset + strides[name] * sym(name)
    a, b = (body.a, body.b) if row_side == "a" else (body.b, body.a)
    return Contraction(
        output, batch, rows, cols, reduce.indices, a, b, offset, strides[rows[-1][0]], strides[cols[-1][0]]
    )


def _strides(shape: tuple[Expr, ...]) -> tuple[Expr, ...]:
    return tuple(product(shape[d + 1 :]) for d in range(len(shape)))


def _candidates(graph: Graph, compute: Compute) -> list[Reduce]:
    """Sum reductions not inside another reduction, each once. One under a where branch only
    when every read it makes is in bounds for all indices (computing it everywhere is safe)."""
    out: list[Reduce] = []

    def visit(v: Value, guarded: bool) -> None:
        if isinstance(v, Reduce):
            if v.op == "sum" and v not in out and (not guarded or _reads_in_bounds(graph, compute, v)):
                out.append(v)
            return
        if isinstance(v, Where):
            visit(v.cond, guarded)
            visit(v.a, True)
            visit(v.b, True)
            return
        for child in v.children():
            visit(child, guarded)

    visit(compute.body, False)
    return out


def _reads_in_bounds(graph: Graph, compute: Compute, reduce: Reduce) -> bool:
    facts = Facts()
    for name, extent in compute.indices + reduce.indices:
        facts = facts.with_range(name, extent)
    for node in walk(reduce.body):
        if isinstance(node, Where | Gather):
            return False
        if isinstance(node, Load):
            shape = graph.buffer(node.buffer).shape
            for index, dim in zip(node.index, shape):
                if not (prove_nonneg(index, facts) and prove_less(index, dim, facts)):
                    return False
    return True
