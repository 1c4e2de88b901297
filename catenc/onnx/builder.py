"""Typed expressions of the body language, as the ONNX converters build them (docs/onnx.md).

Each node is a frozen dataclass carrying its dtype and shape; building one checks it (a call's
arity, the dtypes an operator meets, a bool condition), so a malformed expression fails in its
converter with `BuildError`, not when the text is parsed. `render` writes a node as body text:
operators get the parentheses Python's precedence needs (the body is parsed as Python), and
`Group` keeps parentheses a converter writes on purpose. Literals are weak: they take the dtype
of what they meet; so are indices and sizes (i64).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from catenc.onnx.errors import ModelError
from catenc.onnx.values import FLOATS, Shape, broadcast, literal
from catenc.symbolic import Expr, const, sym


class BuildError(ModelError):
    """A malformed expression (wrong arity, dtypes that do not meet, an index out of scope): a
    converter's bug, or a model whose node's inputs do not agree; reported with its node."""


class Node:
    """An expression of the body language; `a + b`, `x[i, j]`, `-a` build nodes."""

    dtype: str
    shape: Shape
    weak: bool = False  # a literal, index or size: adopts the dtype of what it meets

    def __add__(self, other: Operand) -> Bin:
        return binary("+", self, other)

    def __radd__(self, other: Operand) -> Bin:
        return binary("+", other, self)

    def __sub__(self, other: Operand) -> Bin:
        return binary("-", self, other)

    def __rsub__(self, other: Operand) -> Bin:
        return binary("-", other, self)

    def __mul__(self, other: Operand) -> Bin:
        return binary("*", self, other)

    def __rmul__(self, other: Operand) -> Bin:
        return binary("*", other, self)

    def __truediv__(self, other: Operand) -> Bin:
        return binary("/", self, other)

    def __rtruediv__(self, other: Operand) -> Bin:
        return binary("/", other, self)

    def __floordiv__(self, other: Operand) -> Bin:
        return binary("//", self, other)

    def __mod__(self, other: Operand) -> Bin:
        return binary("%", self, other)

    def __and__(self, other: Operand) -> Bin:
        return binary("&", self, other)

    def __or__(self, other: Operand) -> Bin:
        return binary("|", self, other)

    def __xor__(self, other: Operand) -> Bin:
        return binary("^", self, other)

    def __lt__(self, other: Operand) -> Bin:
        return binary("<", self, other)

    def __le__(self, other: Operand) -> Bin:
        return binary("<=", self, other)

    def __gt__(self, other: Operand) -> Bin:
        return binary(">", self, other)

    def __ge__(self, other: Operand) -> Bin:
        return binary(">=", self, other)

    def eq(self, other: Operand) -> Bin:
        """`self == other` (`==` itself stays Python's equality of nodes)."""
        return binary("==", self, other)

    def ne(self, other: Operand) -> Bin:
        return binary("!=", self, other)

    def __neg__(self) -> Unary:
        return Unary("-", self)

    def __invert__(self) -> Unary:
        return Unary("~", self)

    def __getitem__(self, items: Operand | Slice | tuple) -> Read:
        return read(self, items if isinstance(items, tuple) else (items,))

    def __str__(self) -> str:
        return render(self)


Operand = Node | int | float


@dataclass(frozen=True, eq=False)
class Ref(Node):
    """A tensor, constant or symbol of the body, by name."""

    name: str
    dtype: str
    shape: Shape


@dataclass(frozen=True, eq=False)
class Lit(Node):
    """A scalar literal, as text (`literal` in values.py, or Python's repr of an attribute's float)."""

    text: str
    dtype: str
    shape: Shape = ()
    weak: bool = True


@dataclass(frozen=True, eq=False)
class Size(Node):
    """A symbolic size (`H`, `(H + 2)`) used as an i64 scalar."""

    size: Expr
    bare: bool = False  # as an item of a shape list: no parentheses (`[N, H + 2]`)
    dtype: str = "i64"
    shape: Shape = ()
    weak: bool = True


@dataclass(frozen=True, eq=False)
class Index(Node):
    """An index of an index-form statement or of a reduction (`oh`, `r`); in scope only there."""

    name: str
    dtype: str = "i64"
    shape: Shape = ()
    weak: bool = True


@dataclass(frozen=True, eq=False)
class TypeName(Node):
    """A dtype as an argument (`cast(x, f32)`)."""

    name: str
    dtype: str = "type"
    shape: Shape = ()


@dataclass(frozen=True, eq=False)
class Slice(Node):
    """A basic-indexing slice of a subscript: `1:-1`, `::-2`, `:(H - 1)`, or `:` with no bounds."""

    start: Node | None = None
    stop: Node | None = None
    step: Node | None = None
    dtype: str = "slice"
    shape: Shape = ()

    @property
    def full(self) -> bool:
        """`:`, the whole axis."""
        return self.start is None and self.stop is None and self.step is None


@dataclass(frozen=True, eq=False)
class Marker(Node):
    """`None` (a new axis) or `...` (the axes left) in a subscript."""

    text: str
    dtype: str = "slice"
    shape: Shape = ()


ALL = Slice()
NEW_AXIS = Marker("None")
ELLIPSIS = Marker("...")


@dataclass(frozen=True, eq=False)
class Poly(Node):
    """An integer polynomial of indices and sizes, written as catenc.symbolic writes it (`2*W - i1`,
    `(4*i3 + i4)`); its indices are checked for scope like any other."""

    expr: Expr
    indices: tuple[Index, ...]
    bare: bool = False  # as a subscript: no parentheses
    dtype: str = "i64"
    shape: Shape = ()
    weak: bool = True


@dataclass(frozen=True, eq=False)
class Text(Node):
    """A string argument (einsum's equation), written in double quotes."""

    text: str
    dtype: str = "str"
    shape: Shape = ()

    def __post_init__(self) -> None:
        if '"' in self.text or "\\" in self.text:
            raise BuildError(f"a string argument with a quote or backslash: {self.text!r}")


@dataclass(frozen=True, eq=False)
class Seq(Node):
    """A list `[2, 3]` or tuple `(2, 3)` argument (axes, a shape, pad widths)."""

    items: tuple[Node, ...]
    tuple_form: bool = False
    dtype: str = "seq"
    shape: Shape = ()


class Wrapping(Node):
    """A node of its one operand's dtype, shape and weakness."""

    operand: Node

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.operand.dtype

    @property
    def shape(self) -> Shape:  # type: ignore[override]
        return self.operand.shape

    @property
    def weak(self) -> bool:  # type: ignore[override]
        return self.operand.weak


@dataclass(frozen=True, eq=False)
class Unary(Wrapping):
    op: str  # "-" or "~"
    operand: Node


@dataclass(frozen=True, eq=False)
class Bin(Node):
    op: str
    left: Node
    right: Node
    dtype: str
    shape: Shape
    weak: bool = False


@dataclass(frozen=True, eq=False)
class Call(Node):
    """`fn(args..., key=value...)`: a function of the body (FUNCTIONS says its arity and result)."""

    fn: str
    args: tuple[Node, ...]
    keywords: tuple[tuple[str, Node], ...]
    dtype: str
    shape: Shape
    weak: bool = False  # of weak arguments only (`where(x < 0, -1, 0)`)


@dataclass(frozen=True, eq=False)
class Read(Node):
    """`x[items]`: an element read in index form, or numpy indexing (slices, index arrays)."""

    of: Node
    items: tuple[Node, ...]
    dtype: str
    shape: Shape


@dataclass(frozen=True, eq=False)
class Scaled(Node):
    """An index times an integer, written tight as the importer writes affine subscripts
    (`2*oh`, `-2*oh`, or with `factor_last` `g*3`)."""

    index: Node
    factor: int
    factor_last: bool = False
    dtype: str = "i64"
    shape: Shape = ()
    weak: bool = True


@dataclass(frozen=True, eq=False)
class Reduce(Node):
    """`sum[c < 3, r < 3](body)`: a reduction over indices bound here."""

    op: str
    ranges: tuple[tuple[Index, Node], ...]
    body: Node

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.body.dtype

    @property
    def shape(self) -> Shape:  # type: ignore[override]
        return ()


@dataclass(frozen=True, eq=False)
class Group(Wrapping):
    """Parentheses the converter writes on purpose (they keep the text the importer always wrote)."""

    operand: Node


# ---- building -----------------------------------------------------------------------------------

COMPARISONS = frozenset(("==", "!=", "<", "<=", ">", ">="))
LOGICAL = frozenset(("&", "|", "^"))
ARITHMETIC = frozenset(("+", "-", "*", "/", "//", "%"))


def lit(x: object, dtype: str) -> Lit:
    """A scalar as a literal of `dtype` (values.literal's text)."""
    return Lit(literal(x, dtype), dtype)


def num(x: float | int) -> Lit:
    """A Python number as Python writes it (`0.01`, `1e-05`, `3`): an attribute's value."""
    if isinstance(x, bool):
        return Lit(str(x), "bool")
    return Lit(repr(x), "f64" if isinstance(x, float) else "i64")


def size(d: Expr) -> Size:
    return Size(d)


def operand(x: Operand) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, float)):
        return num(x)
    raise BuildError(f"{x!r} is not an expression")


def meet(op: str, nodes: Sequence[Node]) -> str:
    """The dtype where nodes meet: the strong one (they must agree), else the first weak one's."""
    strong = {n.dtype for n in nodes if not n.weak}
    if len(strong) > 1:
        raise BuildError(f"{op} of {' and '.join(sorted(strong))} operands")
    if strong:
        return strong.pop()
    return nodes[0].dtype if nodes else "f32"


def meet_shape(op: str, nodes: Sequence[Node]) -> Shape:
    shape: Shape = ()
    for n in nodes:
        joined = broadcast(shape, n.shape)
        if joined is None:
            raise BuildError(f"{op} of shapes that do not broadcast")
        shape = joined
    return shape


def _value(node: Node, op: str) -> Node:
    if node.dtype in ("type", "slice", "seq", "str"):
        raise BuildError(f"a {node.dtype} is not an operand of {op}")
    return node


def binary(op: str, a: Operand, b: Operand) -> Bin:
    if op not in COMPARISONS | LOGICAL | ARITHMETIC:
        raise BuildError(f"no operator {op}")
    left, right = _value(operand(a), op), _value(operand(b), op)
    dtype = meet(op, [left, right])
    if op in LOGICAL and dtype in FLOATS:
        raise BuildError(f"{op} of {dtype} operands")
    result = "bool" if op in COMPARISONS else dtype
    weak = left.weak and right.weak and op not in COMPARISONS
    return Bin(op, left, right, result, meet_shape(op, [left, right]), weak)


def read(of: Node, items: Sequence[Operand], shape: Shape | None = None) -> Read:
    """`of[items]`: with only index items, one element (shape ()); with slices, markers or index
    arrays, numpy's indexing, whose shape the caller gives."""
    nodes = tuple(operand(i) for i in items)
    if not nodes:
        raise BuildError("a subscript without items")
    for n in nodes:
        if n.dtype not in ("slice", "i64", "i32", "bool"):
            raise BuildError(f"a subscript item of type {n.dtype}")
    elementwise = all(n.shape == () and n.dtype != "slice" for n in nodes)
    if elementwise and len(nodes) > len(of.shape) and of.shape:
        raise BuildError(f"{len(nodes)} subscripts for a tensor of rank {len(of.shape)}")
    if shape is None:
        if not elementwise:
            raise BuildError("numpy indexing needs its result's shape")
        shape = ()
    return Read(of, nodes, of.dtype, shape)


def subscript(of: Node, items: Sequence[Operand], shape: Shape) -> Node:
    """`of[items]` without its trailing `:` items, or `of` itself when nothing is left to index."""
    kept = list(items)
    while kept and isinstance(kept[-1], Slice) and kept[-1].full:
        kept.pop()
    return read(of, kept, shape) if kept else of


def span(start: Operand | None = None, stop: Operand | None = None, step: Operand | None = None) -> Slice:
    """The slice `start:stop:step`; a bound left out is None (`:stop`, `::step`)."""
    parts = [None if p is None else _integer(operand(p), "a slice bound") for p in (start, stop, step)]
    return Slice(*parts)


def _integer(node: Node, what: str) -> Node:
    if node.dtype not in ("i64", "i32") or node.shape != ():
        raise BuildError(f"{what} of type {node.dtype}")
    return node


def poly(terms: Sequence[tuple[Index, Expr | int]], offset: Expr | int = 0, bare: bool = False) -> Poly:
    """The polynomial sum(coefficient * index) + offset (`sizes` may be symbolic)."""
    total = offset if isinstance(offset, Expr) else const(offset)
    for index, c in terms:
        total = total + sym(index.name) * c
    return Poly(total, tuple(index for index, _ in terms), bare)


def matmul(a: Node, b: Node, shape: Shape) -> Bin:
    """`a @ b`, of the caller's result shape."""
    return Bin("@", _value(a, "@"), _value(b, "@"), meet("@", [a, b]), shape)


def reduce(op: str, ranges: Sequence[tuple[Index, Operand]], body: Node) -> Node:
    """`op[i < n, ...](body)`; no ranges: body itself."""
    if op not in ("sum", "prod", "max", "min", "mean"):
        raise BuildError(f"no reduction {op}")
    if not ranges:
        return body
    return Reduce(op, tuple((i, operand(n)) for i, n in ranges), body)


def where(cond: Operand, a: Operand, b: Operand) -> Call:
    return call("where", cond, a, b)


def cast(x: Operand, dtype: str) -> Call:
    return call("cast", x, TypeName(dtype))


def seq(items: Sequence[Operand], tuple_form: bool = False) -> Seq:
    return Seq(tuple(operand(i) for i in items), tuple_form)


def guarded(guards: Sequence[Node], value: Node, fill: Operand) -> Node:
    """`where(g1 & g2, value, fill)`: value where every guard holds."""
    if not guards:
        return value
    return where(functools.reduce(operator.and_, guards), value, fill)


def affine(terms: Sequence[tuple[int, Node]], offset: Expr | int = 0) -> Node:
    """`2*oh + r - 1` from (coefficient, index) terms (zero ones left out) and an offset."""
    out: Node | None = None
    for c, index in terms:
        if not c:
            continue
        if out is None:
            out = index if c == 1 else -index if c == -1 else Scaled(index, c)
        else:
            mag = index if abs(c) == 1 else Scaled(index, abs(c))
            out = out + mag if c > 0 else out - mag
    offset = offset if isinstance(offset, Expr) else const(offset)
    if not offset.is_const:
        return Size(offset) if out is None else out + Size(offset)
    if out is None:
        return num(offset.value)
    if offset.value == 0:
        return out
    return out + offset.value if offset.value > 0 else out - abs(offset.value)


def shape_list(shape: Shape) -> Seq:
    """A shape as a list argument (`reshape(x, [N, H + 2])`)."""
    return Seq(tuple(Size(d, bare=True) for d in shape))


# fn -> (least, most positional args, result): "same" the dtype and broadcast shape of the args,
# "bool" the same shape of bools, "given" the caller's dtype and shape
_MATH = ("abs", "exp", "expm1", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "tanh")
_MATH += ("sinh", "cosh", "asin", "acos", "atan", "erf", "floor", "ceil", "round", "sign", "relu")
_MATH += ("sigmoid", "softplus", "silu", "gelu", "gelu_tanh", "trunc", "exp2", "softmax", "log_softmax")
_OPERANDS = 1 << 10  # the operands einsum takes: any number
FUNCTIONS: dict[str, tuple[int, int, str]] = {
    **dict.fromkeys(_MATH, (1, 1, "same")),
    **dict.fromkeys(("maximum", "minimum", "pow"), (2, 2, "same")),
    "where": (3, 3, "where"),
    "clip": (3, 3, "same"),
    "isnan": (1, 1, "bool"),
    "isinf": (1, 1, "bool"),
    "cast": (2, 2, "cast"),
    **dict.fromkeys(("sum", "mean", "max", "min", "prod", "argmax", "argmin"), (1, 1, "given")),
    **dict.fromkeys(("reshape", "expand", "unsqueeze", "take", "pad"), (2, 3, "given")),
    "transpose": (1, 2, "given"),
    **dict.fromkeys(("triu", "tril", "arange"), (1, 1, "given")),
    **dict.fromkeys(("concat", "stack", "zeros"), (1, 2, "given")),
    **dict.fromkeys(("attention", "attention_masked"), (3, 4, "given")),
    "einsum": (2, _OPERANDS + 1, "given"),
    **dict.fromkeys(("quantize_linear", "dequantize_linear"), (3, 3, "given")),
    "matmul_integer": (2, 4, "given"),
    "layernorm": (3, 3, "same"),
    "rmsnorm": (2, 2, "same"),
    "groupnorm": (3, 3, "same"),
}


def call(fn: str, *args: Operand, dtype: str | None = None, shape: Shape | None = None, **keywords: Operand) -> Call:
    """`fn(args, key=value)`, checked against FUNCTIONS; a "given" result needs dtype and shape."""
    if fn not in FUNCTIONS:
        raise BuildError(f"no function {fn}")
    least, most, result = FUNCTIONS[fn]
    if not least <= len(args) <= most:
        raise BuildError(f"{fn} takes {least}..{most} arguments, not {len(args)}")
    nodes = tuple(_value(operand(a), fn) if not isinstance(a, (TypeName, Seq, Text)) else a for a in args)
    kws = tuple((k, operand(v)) for k, v in keywords.items())
    if result == "given":
        if dtype is None or shape is None:
            raise BuildError(f"{fn}'s result needs its dtype and shape")
        return Call(fn, nodes, kws, dtype, shape)
    if result == "cast":
        if not isinstance(nodes[1], TypeName):
            raise BuildError("cast's second argument is a dtype")
        return Call(fn, nodes, kws, nodes[1].name, nodes[0].shape)
    values = list(nodes[1:]) if result == "where" else list(nodes)
    if result == "where" and nodes[0].dtype != "bool":
        raise BuildError(f"where's condition is {nodes[0].dtype}, not bool")
    shape = meet_shape(fn, nodes) if shape is None else shape
    out = "bool" if result == "bool" else meet(fn, values) if dtype is None else dtype
    weak = result != "bool" and dtype is None and all(v.weak for v in values)
    return Call(fn, nodes, kws, out, shape, weak)


# ---- rendering ----------------------------------------------------------------------------------

_PRECEDENCE = {"|": 4, "^": 5, "&": 6, "+": 8, "-": 8, "*": 9, "@": 9, "/": 9, "//": 9, "%": 9}
_COMPARE, _UNARY, _ATOM = 3, 10, 20


def precedence(node: Node) -> int:
    if isinstance(node, Bin):
        return _COMPARE if node.op in COMPARISONS else _PRECEDENCE[node.op]
    if isinstance(node, Scaled):
        return _PRECEDENCE["*"]
    if isinstance(node, Unary) or (isinstance(node, Lit) and node.text.startswith("-")):
        return _UNARY
    return _ATOM


def _operand_text(child: Node, parent: Bin, right: bool) -> str:
    """A Bin's operand, in parentheses where Python would read the text otherwise: a looser child;
    a comparison under a comparison; an equal one on the right, except integer + and - (associative)."""
    mine, theirs = precedence(parent), precedence(child)
    if theirs < mine or (theirs == mine == _COMPARE):
        return f"({render(child)})"
    if right and theirs == mine:
        associative = parent.op == "+" and child.dtype not in FLOATS and theirs == _PRECEDENCE["+"]
        if not associative:
            return f"({render(child)})"
    return render(child)


def _bin(node: Bin) -> str:
    return f"{_operand_text(node.left, node, False)} {node.op} {_operand_text(node.right, node, True)}"


def _unary(node: Unary) -> str:
    inner = render(node.operand)
    return f"{node.op}{inner}" if precedence(node.operand) >= _UNARY else f"{node.op}({inner})"


def _call(node: Call) -> str:
    parts = [render(a) for a in node.args] + [f"{k}={render(v)}" for k, v in node.keywords]
    return f"{node.fn}({', '.join(parts)})"


def _seq(node: Seq) -> str:
    inner = ", ".join(render(i) for i in node.items)
    if node.tuple_form:
        return f"({inner},)" if len(node.items) == 1 else f"({inner})"
    return f"[{inner}]"


def _size(node: Size) -> str:
    return str(node.size) if node.bare else dim_text(node.size)


def _poly(node: Poly) -> str:
    return str(node.expr) if node.bare else dim_text(node.expr)


def _slice(node: Slice) -> str:
    start, stop = (render(p) if p is not None else "" for p in (node.start, node.stop))
    return f"{start}:{stop}" + (f":{render(node.step)}" if node.step is not None else "")


def dim_text(d: Expr) -> str:
    """A size as body text: `4`, `H`, or `(H + 2)`."""
    text = str(d)
    return text if d.is_const or d.as_symbol() is not None else f"({text})"


_RENDER: dict[type, Callable] = {
    Ref: lambda n: n.name,
    Lit: lambda n: n.text,
    Size: _size,
    Index: lambda n: n.name,
    TypeName: lambda n: n.name,
    Text: lambda n: f'"{n.text}"',
    Slice: _slice,
    Marker: lambda n: n.text,
    Poly: _poly,
    Seq: _seq,
    Unary: _unary,
    Bin: _bin,
    Call: _call,
    Read: lambda n: f"{render(n.of)}[{', '.join(render(i) for i in n.items)}]",
    Scaled: lambda n: f"{render(n.index)}*{n.factor}" if n.factor_last else f"{n.factor}*{render(n.index)}",
    Reduce: lambda n: f"{n.op}[{', '.join(f'{i.name} < {render(e)}' for i, e in n.ranges)}]({render(n.body)})",
    Group: lambda n: f"({render(n.operand)})",
}


def render(node: Node) -> str:
    """The node as body text."""
    return _RENDER[type(node)](node)


# ---- index scope --------------------------------------------------------------------------------


_CHILDREN: dict[type, Callable[[Node], tuple[Node, ...]]] = {
    Unary: lambda n: (n.operand,),
    Group: lambda n: (n.operand,),
    Bin: lambda n: (n.left, n.right),
    Call: lambda n: n.args + tuple(v for _, v in n.keywords),
    Read: lambda n: (n.of, *n.items),
    Seq: lambda n: n.items,
    Scaled: lambda n: (n.index,),
    Slice: lambda n: tuple(p for p in (n.start, n.stop, n.step) if p is not None),
    Poly: lambda n: n.indices,
}


def _children(node: Node) -> tuple[Node, ...]:
    """The operands of a node (none for a leaf; a Reduce's are walked by check_scope itself)."""
    children = _CHILDREN.get(type(node))
    return children(node) if children is not None else ()


def check_scope(node: Node, scope: frozenset[str]) -> None:
    """Raise BuildError where `node` uses an index that neither the statement nor a reduction around it binds."""
    if isinstance(node, Index):
        if node.name not in scope:
            raise BuildError(f"index {node.name} is used outside the statement or reduction that binds it")
        return
    if isinstance(node, Reduce):
        for _, bound in node.ranges:
            check_scope(bound, scope)
        check_scope(node.body, scope | {i.name for i, _ in node.ranges})
        return
    for child in _children(node):
        check_scope(child, scope)
