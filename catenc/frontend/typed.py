"""The typed AST: a composite body after name resolution, dtype and shape inference.

Every node carries its `TType` (dtype and symbolic shape, in the entry's symbols) and the
place in the user's file it came from. Composite calls are instantiated: a `Call` holds the
callee's own typed program with shapes already in the caller's symbols. Index-form bodies are
scalar expressions (shape `()`) over `Access`es, with `IndexReduce` binding reduction indices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from catenc.diagnostics import Loc
from catenc.dtypes import DType
from catenc.symbolic import Expr


@dataclass(frozen=True)
class TType:
    dtype: DType
    shape: tuple[Expr, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True, eq=False)
class Node:
    type: TType
    loc: Loc | None = field(repr=False)


@dataclass(frozen=True, eq=False)
class Ref(Node):
    """A named value: an input or the result of an earlier statement."""

    name: str


@dataclass(frozen=True, eq=False)
class Lit(Node):
    """A scalar constant; `weak` literals still adopt the dtype of what they meet."""

    value: bool | int | float
    weak: bool = False


@dataclass(frozen=True, eq=False)
class SymVal(Node):
    """An integer expression of symbols used as an (i64) value."""

    expr: Expr
    weak: bool = True


@dataclass(frozen=True, eq=False)
class IndexVal(Node):
    """The value of an index-form loop index (i64)."""

    name: str


@dataclass(frozen=True, eq=False)
class Apply(Node):
    """An elementwise function with numpy broadcasting (`add`, `exp`, `where`, `cast`, ...)."""

    op: str
    args: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Reduce(Node):
    """`sum mean max min prod` over `axes` (array form)."""

    op: str
    arg: Node
    axes: tuple[int, ...]
    keepdims: bool


@dataclass(frozen=True, eq=False)
class ArgReduce(Node):
    op: str  # argmax, argmin
    arg: Node
    axis: int
    keepdims: bool


@dataclass(frozen=True, eq=False)
class MatMul(Node):
    """numpy matmul; 1-D operands have been promoted and are squeezed back by `squeeze`."""

    a: Node
    b: Node


@dataclass(frozen=True, eq=False)
class Reshape(Node):
    arg: Node


@dataclass(frozen=True, eq=False)
class Permute(Node):
    arg: Node
    perm: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Expand(Node):
    """Broadcast `arg` to `type.shape` (numpy's broadcast_to)."""

    arg: Node


@dataclass(frozen=True)
class SliceAxis:
    """Source index along one axis: `start + step * i` for a kept axis, `start` for a dropped one."""

    start: Expr
    step: int
    keep: bool


@dataclass(frozen=True, eq=False)
class Slice(Node):
    arg: Node
    axes: tuple[SliceAxis, ...]


@dataclass(frozen=True, eq=False)
class Concat(Node):
    args: tuple[Node, ...]
    axis: int


@dataclass(frozen=True, eq=False)
class Pad(Node):
    arg: Node
    before: tuple[Expr, ...]
    value: Node


@dataclass(frozen=True, eq=False)
class Arange(Node):
    pass


@dataclass(frozen=True, eq=False)
class Take(Node):
    """Gather by integer tensors (`take`, numpy advanced indexing): axis `axes[k]` of `arg` is read
    at `indices[k]` (negative indices wrap once). The indices' broadcast shape replaces those axes,
    placed at `at` among the axes left."""

    arg: Node
    indices: tuple[Node, ...]
    axes: tuple[int, ...]
    at: int


@dataclass(frozen=True, eq=False)
class Access(Node):
    """Index form: the element of a named tensor at affine indices (a scalar)."""

    name: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class IndexReduce(Node):
    """Index form: `op[i, j](body)` with each bound index ranging over its extent."""

    op: str
    indices: tuple[tuple[str, Expr], ...]
    body: Node


@dataclass(frozen=True, eq=False)
class Call(Node):
    """A composite call; `program` is the callee instantiated for these arguments."""

    callee: str
    args: tuple[Node, ...]
    program: Program


@dataclass(frozen=True, eq=False)
class CallOut(Node):
    call: Call
    index: int


@dataclass(frozen=True, eq=False)
class Assign:
    """Array form: `target = value`."""

    target: str
    value: Node
    loc: Loc | None = field(repr=False)


@dataclass(frozen=True, eq=False)
class IndexAssign:
    """Index form: `target[indices] = body`, each index ranging over its extent."""

    target: str
    indices: tuple[tuple[str, Expr], ...]
    body: Node
    type: TType
    loc: Loc | None = field(repr=False)


Statement = Assign | IndexAssign


@dataclass(frozen=True, eq=False)
class Program:
    """A typed composite: its signature (in the entry's symbols) and statements."""

    name: str
    inputs: tuple[tuple[str, TType], ...]
    outputs: tuple[tuple[str, TType], ...]
    statements: tuple[Statement, ...]
    params: tuple[tuple[str, bool | int | float], ...] = ()
