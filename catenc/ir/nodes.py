"""The graph IR: tensors defined by scalar expressions of a few primitive ops.

A `Compute` defines every element of one buffer, `name[i0, i1, ...] = body`, where the body
is a tree of primitive scalar ops: `Const`, `SymInt` (the value of an index or symbol
expression), `Load` (through an affine index map: views such as transpose, reshape, slice and
broadcast are folded into these maps, never copied), `Unary`, `Binary`, `Where`, `Cast` and
`Reduce`. Values are computed in their dtype, except f16/bf16, which compute in f32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from functools import cache

from catenc.dispatch import Table
from catenc.dtypes import DType
from catenc.enums import StrEnum
from catenc.registry import BINARY_OPS as BINARY_OPS  # the op names of Unary, Binary and Reduce nodes
from catenc.registry import REDUCE_OPS as REDUCE_OPS
from catenc.registry import UNARY_OPS as UNARY_OPS
from catenc.symbolic import Expr, product


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

    @property
    def summary(self) -> Summary:
        """What the tree holds, computed once per node from its children's (passes ask it of
        growing trees again and again: walking them each time is quadratic)."""
        found = self.__dict__.get("_summary")
        return found if found is not None else _summarise(self)

    def __hash__(self) -> int:
        """Computed once per node: trees are deep, and dicts of values hash them often."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash(tuple(getattr(self, name) for name in _field_names(type(self))))
            object.__setattr__(self, "_hash", found)
        return found


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def value_node(cls: type) -> type:
    """A frozen dataclass node of a value tree, hashed once (dataclass would hash it afresh)."""
    cls = dataclass(frozen=True)(cls)
    cls.__hash__ = Value.__hash__
    return cls


@dataclass(frozen=True)
class Summary:
    """Facts about a value tree, each counted over every position (as `walk` visits them)."""

    size: int  # nodes
    depth: int  # nodes on the longest path from the root down
    ops: int  # Unary, Binary, Where and Cast nodes
    op_names: frozenset[str]  # the ops of those nodes and of the Reduces
    has_reduce: bool
    symbols: frozenset[str]  # what `value_symbols` gives
    reads_data: bool  # a load or a local below: not only index and size arithmetic


def _summarise(value: Value) -> Summary:
    """Fills in the summary of value and of every node under it that lacks one, in post-order
    and without recursion (trees nest as deep as the program is long)."""
    stack: list[tuple[Value, bool]] = [(value, False)]
    seen: set[int] = set()  # a subtree shared by several parents is summarised once
    while stack:
        node, children_done = stack.pop()
        if not children_done:
            if "_summary" not in node.__dict__ and id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((child, False) for child in node.children())
            continue
        parts = [child.__dict__["_summary"] for child in node.children()]
        op = getattr(node, "op", None)
        symbols = frozenset(own_symbols(node)).union(*(p.symbols for p in parts))
        summary = Summary(
            size=1 + sum(p.size for p in parts),
            depth=1 + max((p.depth for p in parts), default=0),
            ops=int(isinstance(node, (Unary, Binary, Where, Cast))) + sum(p.ops for p in parts),
            op_names=frozenset(() if op is None else (op,)).union(*(p.op_names for p in parts)),
            has_reduce=isinstance(node, Reduce) or any(p.has_reduce for p in parts),
            symbols=symbols,
            reads_data=isinstance(node, (Load, Local)) or any(p.reads_data for p in parts),
        )
        object.__setattr__(node, "_summary", summary)
    return value.__dict__["_summary"]


_OWN_SYMBOLS: Table[Callable[[Value], set[str]]] = Table("own_symbols")


def own_symbols(node: Value) -> set[str]:
    """The names a node's own index expressions and reduction ranges mention."""
    return _OWN_SYMBOLS[type(node)](node)


@_OWN_SYMBOLS.register(Value)
def _no_symbols(node: Value) -> set[str]:
    return set()


@value_node
class Const(Value):
    value: bool | int | float


@value_node
class SymInt(Value):
    """An integer expression of loop indices and symbols, as a value of `dtype`."""

    expr: Expr


@value_node
class Load(Value):
    buffer: str
    index: tuple[Expr, ...]


@value_node
class Gather(Load):
    """A load whose index along `axis` is a computed value (take); `index[axis]` is unused.
    The position is already wrapped and clamped into the axis, so the read is in bounds."""

    axis: int
    position: Value
    child_fields = ("position",)


@value_node
class Unary(Value):
    op: str
    x: Value
    child_fields = ("x",)


@value_node
class Binary(Value):
    op: str
    a: Value
    b: Value
    child_fields = ("a", "b")


@value_node
class Where(Value):
    """`cond ? a : b`; only the chosen side is evaluated (guarded loads rely on it)."""

    cond: Value
    a: Value
    b: Value
    child_fields = ("cond", "a", "b")


@value_node
class Cast(Value):
    x: Value
    child_fields = ("x",)


@value_node
class Reduce(Value):
    """`op` of body over every value of the bound indices (argmax/argmin give the i64 position
    of the first extreme along a single index)."""

    op: str
    indices: tuple[tuple[str, Expr], ...]
    body: Value
    child_fields = ("body",)


@value_node
class Local(Value):
    """A scalar local variable (introduced by lowering: accumulators, per-row values)."""

    name: str


@_OWN_SYMBOLS.register(Load)
def _index_symbols(node: Load) -> set[str]:
    return set().union(*(e.free_symbols() for e in node.index))


@_OWN_SYMBOLS.register(SymInt)
def _expr_symbols(node: SymInt) -> set[str]:
    return node.expr.free_symbols()


@_OWN_SYMBOLS.register(Reduce)
def _range_symbols(node: Reduce) -> set[str]:
    return set().union(*(e.free_symbols() for _, e in node.indices))


class Role(StrEnum):
    """What a buffer is to its entry."""

    INPUT = "input"
    OUTPUT = "output"
    TEMP = "temp"
    STATUS = "status"  # an error count the entry checks after its kernels
    VIEW = "view"  # an input's slice (`view_of`)


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: DType  # storage dtype
    shape: tuple[Expr, ...]
    role: Role  # (or its name, which compares equal; verify_graph reports any other)
    view_of: tuple[str, int] | None = None  # a view: (input, index), the input's slice at index along view_axis
    # 0: the slice has the input's other dims; a later axis: it keeps the input's shape (its strides)
    # and is read at index 0 along that axis, so that slices of any axis are pointers of their own
    view_axis: int = 0


def view_stride(graph: Graph, view: Buffer) -> Expr:
    """Elements between consecutive indices along a view's axis of its input: the view starts
    `view.view_of[1]` times as many past the input's start."""
    return product(graph.buffer(view.view_of[0]).shape[view.view_axis + 1 :])


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
    notes: tuple[str, ...] = ()  # the graph passes' remarks (why a value stays stored), in pass order

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == Role.INPUT)

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == Role.OUTPUT)


def walk(value: Value) -> Iterator[Value]:
    """Every node of an expression tree, parents before children (left to right)."""
    stack = [value]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def loads(value: Value) -> Iterator[Load]:
    return (v for v in walk(value) if isinstance(v, Load))


def loaded_buffers(value: Value) -> tuple[str, ...]:
    """The buffers a value tree loads, each once, in the order of their first load (found once
    per tree: the cost model and the scheduler ask it of the same bodies again and again)."""
    found = value.__dict__.get("_loaded")
    if found is None:
        found = tuple(dict.fromkeys(ld.buffer for ld in loads(value)))
        object.__setattr__(value, "_loaded", found)
    return found


def contains(value: Value, part: Value) -> bool:
    """Whether `part` is a subtree of value."""
    return any(node == part for node in walk(value))


def value_symbols(value: Value) -> set[str]:
    """Every index or symbol name a value's index expressions and reduction ranges mention."""
    return set(value.summary.symbols)


# ---- printing ----------------------------------------------------------------------------------


_FORMAT: Table[Callable[[Value], str]] = Table("format_value")


def format_value(value: Value) -> str:
    return _FORMAT[type(value)](value)


@_FORMAT.register(Local)
def _format_local(value: Local) -> str:
    return value.name


@_FORMAT.register(Const)
def _format_const(value: Const) -> str:
    return f"{value.value!r}:{value.dtype.name}"


@_FORMAT.register(SymInt)
def _format_symint(value: SymInt) -> str:
    return f"({value.expr})" if value.dtype.name == "i64" else f"({value.expr}):{value.dtype.name}"


@_FORMAT.register(Gather)
def _format_gather(value: Gather) -> str:
    index = [str(i) for i in value.index]
    index[value.axis] = format_value(value.position)
    return f"{value.buffer}[{', '.join(index)}]"


@_FORMAT.register(Load)
def _format_load(value: Load) -> str:
    return f"{value.buffer}[{', '.join(str(i) for i in value.index)}]"


@_FORMAT.register(Unary)
def _format_unary(value: Unary) -> str:
    return f"{value.op}({format_value(value.x)})"


@_FORMAT.register(Binary)
def _format_binary(value: Binary) -> str:
    return f"{value.op}({format_value(value.a)}, {format_value(value.b)})"


@_FORMAT.register(Where)
def _format_where(value: Where) -> str:
    return f"where({format_value(value.cond)}, {format_value(value.a)}, {format_value(value.b)})"


@_FORMAT.register(Cast)
def _format_cast(value: Cast) -> str:
    return f"cast({format_value(value.x)}, {value.dtype.name})"


@_FORMAT.register(Reduce)
def _format_reduce(value: Reduce) -> str:
    bound = ", ".join(f"{n} < {e}" for n, e in value.indices)
    return f"{value.op}[{bound}]({format_value(value.body)})"


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
    lines += [f"note: {note}" for note in graph.notes]
    return "\n".join(lines)
