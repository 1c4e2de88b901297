"""The graph IR: tensors defined by scalar expressions of a few primitive ops.

A `Compute` defines every element of one buffer, `name[i0, i1, ...] = body`, where the body
is a tree of primitive scalar ops: `Const`, `SymInt` (the value of an index or symbol
expression), `Load` (through an affine index map: views such as transpose, reshape, slice and
broadcast are folded into these maps, never copied), `Unary`, `Binary`, `Where`, `Cast` and
`Reduce`. Values are computed in their dtype, except f16/bf16, which compute in f32.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from catenc.dtypes import DType
from catenc.symbolic import Expr

UNARY_OPS = frozenset(
    "neg recip sqrt exp exp2 log log2 log1p expm1 sin cos tan tanh sinh cosh asin acos atan erf "
    "floor ceil round trunc abs not isnan isinf round_f16 round_bf16".split()
)
BINARY_OPS = frozenset("add sub mul div floordiv mod max min pow atan2 and or xor lt le eq ne".split())
REDUCE_OPS = frozenset("sum prod max min argmax argmin".split())


@dataclass(frozen=True)
class Value:
    dtype: DType
    child_fields = ()  # names of the fields that hold sub-values

    def children(self) -> tuple[Value, ...]:
        return tuple(getattr(self, name) for name in self.child_fields)

    def with_children(self, children: tuple[Value, ...]) -> Value:
        """The same node over new children (a pass's way to rebuild a tree)."""
        if not self.child_fields:
            return self
        return replace(self, **dict(zip(self.child_fields, children)))


@dataclass(frozen=True)
class Const(Value):
    value: bool | int | float


@dataclass(frozen=True)
class SymInt(Value):
    """An integer expression of loop indices and symbols, as a value of `dtype`."""

    expr: Expr


@dataclass(frozen=True)
class Load(Value):
    buffer: str
    index: tuple[Expr, ...]


@dataclass(frozen=True)
class Gather(Load):
    """A load whose index along `axis` is a computed value (take); `index[axis]` is unused.
    The position is already wrapped and clamped into the axis, so the read is in bounds."""

    axis: int
    position: Value
    child_fields = ("position",)


@dataclass(frozen=True)
class Unary(Value):
    op: str
    x: Value
    child_fields = ("x",)


@dataclass(frozen=True)
class Binary(Value):
    op: str
    a: Value
    b: Value
    child_fields = ("a", "b")


@dataclass(frozen=True)
class Where(Value):
    """`cond ? a : b`; only the chosen side is evaluated (guarded loads rely on it)."""

    cond: Value
    a: Value
    b: Value
    child_fields = ("cond", "a", "b")


@dataclass(frozen=True)
class Cast(Value):
    x: Value
    child_fields = ("x",)


@dataclass(frozen=True)
class Reduce(Value):
    """`op` of body over every value of the bound indices (argmax/argmin give the i64 position
    of the first extreme along a single index)."""

    op: str
    indices: tuple[tuple[str, Expr], ...]
    body: Value
    child_fields = ("body",)


@dataclass(frozen=True)
class Local(Value):
    """A scalar local variable (introduced by lowering: accumulators, per-row values)."""

    name: str


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: DType  # storage dtype
    shape: tuple[Expr, ...]
    role: str  # input, output, temp, status (an error count the entry checks after its kernels), view
    view_of: tuple[str, int] | None = None  # a view: (input, leading index), the input's slice there


@dataclass(frozen=True)
class Compute:
    """`name[indices] = body`: every element of buffer `name`."""

    name: str
    indices: tuple[tuple[str, Expr], ...]
    body: Value

    @property
    def shape(self) -> tuple[Expr, ...]:
        return tuple(extent for _, extent in self.indices)


@dataclass(frozen=True)
class Graph:
    name: str
    buffers: tuple[Buffer, ...]
    computes: tuple[Compute, ...]

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == "input")

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == "output")


def walk(value: Value) -> Iterator[Value]:
    """Every node of an expression tree, parents before children."""
    yield value
    for child in value.children():
        yield from walk(child)


def loads(value: Value) -> Iterator[Load]:
    return (v for v in walk(value) if isinstance(v, Load))


def value_symbols(value: Value) -> set[str]:
    """Every index or symbol name a value's index expressions and reduction ranges mention."""
    out: set[str] = set()
    for node in walk(value):
        if isinstance(node, Load):
            for e in node.index:
                out |= e.free_symbols()
        elif isinstance(node, SymInt):
            out |= node.expr.free_symbols()
        elif isinstance(node, Reduce):
            for _, e in node.indices:
                out |= e.free_symbols()
    return out


# ---- printing ----------------------------------------------------------------------------------


def format_value(value: Value) -> str:
    if isinstance(value, Local):
        return value.name
    if isinstance(value, Const):
        return f"{value.value!r}:{value.dtype.name}"
    if isinstance(value, SymInt):
        return f"({value.expr})" if value.dtype.name == "i64" else f"({value.expr}):{value.dtype.name}"
    if isinstance(value, Gather):
        index = [str(i) for i in value.index]
        index[value.axis] = format_value(value.position)
        return f"{value.buffer}[{', '.join(index)}]"
    if isinstance(value, Load):
        return f"{value.buffer}[{', '.join(str(i) for i in value.index)}]"
    if isinstance(value, Unary):
        return f"{value.op}({format_value(value.x)})"
    if isinstance(value, Binary):
        return f"{value.op}({format_value(value.a)}, {format_value(value.b)})"
    if isinstance(value, Where):
        return f"where({format_value(value.cond)}, {format_value(value.a)}, {format_value(value.b)})"
    if isinstance(value, Cast):
        return f"cast({format_value(value.x)}, {value.dtype.name})"
    if isinstance(value, Reduce):
        bound = ", ".join(f"{n} < {e}" for n, e in value.indices)
        return f"{value.op}[{bound}]({format_value(value.body)})"
    raise TypeError(value)


def format_shape(shape: tuple[Expr, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def format_graph(graph: Graph) -> str:
    """The graph as readable text, one compute per line (like a jaxpr)."""

    def sig(b: Buffer) -> str:
        return f"{b.name}: {b.dtype.name}{format_shape(b.shape)}"

    inputs = ", ".join(sig(b) for b in graph.inputs)
    outputs = ", ".join(sig(b) for b in graph.outputs)
    lines = [f"graph {graph.name}({inputs}) -> ({outputs}) {{"]
    for c in graph.computes:
        idx = ", ".join(n for n, _ in c.indices)
        ranges = ", ".join(f"{n} < {e}" for n, e in c.indices)
        head = f"{c.name}[{idx}]" if c.indices else c.name
        lines.append(f"  {head} = {format_value(c.body)}" + (f"    # {ranges}" if ranges else ""))
    lines.append("}")
    return "\n".join(lines)
