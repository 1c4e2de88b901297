"""Kernels that differ only in names share one function.

The layers of a transformer lower to the same loop nests over different buffers (each layer's
weights are views of the stacked inputs, its activations temps of their own). Two kernels are
the same function when they are equal after renaming: buffers by parameter position, loop
indices and locals in order of binding. The later one then calls the first's function with its
own buffers: one copy of the code per distinct kernel, which the C compiler compiles once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from catenc.dispatch import Table
from catenc.ir.nodes import Buffer, Gather, Load, Local, Role, SymInt, Value
from catenc.lower.loops import Assign, Declare, For, Gemm, If, LaneReduce, LoopKernel, PaddedPlane, Stmt, Store
from catenc.symbolic import Expr, sym


def share_identical_kernels(kernels: tuple[LoopKernel, ...], buffers: dict[str, Buffer]) -> tuple[LoopKernel, ...]:
    """Each kernel equal to an earlier one up to names gets `shares` = that kernel's name."""
    first: dict[object, str] = {}
    out = []
    for kernel in kernels:
        key = _canonical(kernel, buffers)
        if key in first:
            kernel = replace(kernel, shares=first[key])
        else:
            first[key] = kernel.name
        out.append(kernel)
    return tuple(out)


def _canonical(kernel: LoopKernel, buffers: dict[str, Buffer]) -> object:
    renamer = _Renamer({name: f"b{k}" for k, name in enumerate(kernel.buffers)})
    body = tuple(renamer.stmt(s) for s in kernel.body)
    params = tuple((buffers[name].dtype, buffers[name].role in (Role.INPUT, Role.VIEW)) for name in kernel.buffers)
    return (params, kernel.symbols, str(kernel.work), kernel.decisions, body)


class _Renamer:
    """Renames buffers (given) and every name the kernel binds, in order of binding."""

    def __init__(self, buffers: dict[str, str]) -> None:
        self.names = dict(buffers)

    def bind(self, name: str) -> str:
        self.names[name] = f"v{len(self.names)}"
        return self.names[name]

    def name(self, name: str) -> str:
        return self.names.get(name, name)

    def expr(self, e: Expr) -> Expr:
        mapping = {n: sym(self.names[n]) for n in e.free_symbols() if n in self.names}
        return e.substitute(mapping) if mapping else e

    def axes(self, axes):
        return tuple((self.bind(n), self.expr(e)) for n, e in axes)

    _VALUE: Table[Callable[[_Renamer, Value], Value]] = Table("_Renamer.value")
    _STMT: Table[Callable[[_Renamer, Stmt], Stmt]] = Table("_Renamer.stmt")

    def value(self, v: Value) -> Value:
        return self._VALUE[type(v)](self, v)

    @_VALUE.register(Value)
    def node(self, v: Value) -> Value:
        return v.with_children(tuple(self.value(c) for c in v.children()))

    @_VALUE.register(Local)
    def local(self, v: Local) -> Value:
        return replace(v, name=self.name(v.name))

    @_VALUE.register(SymInt)
    def symint(self, v: SymInt) -> Value:
        return replace(v, expr=self.expr(v.expr))

    @_VALUE.register(Load)
    def load(self, v: Load) -> Value:
        return replace(v, buffer=self.name(v.buffer), index=tuple(self.expr(e) for e in v.index))

    @_VALUE.register(Gather)
    def gather(self, v: Gather) -> Value:
        return self.node(self.load(v))

    def body(self, body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        return tuple(self.stmt(s) for s in body)

    def stmt(self, s: Stmt) -> Stmt:
        return self._STMT[type(s)](self, s)

    @_STMT.register(For)
    def loop(self, s: For) -> Stmt:
        extent = self.expr(s.extent)
        return replace(s, index=self.bind(s.index), extent=extent, body=self.body(s.body))

    @_STMT.register(Declare)
    def declare(self, s: Declare) -> Stmt:
        value = self.value(s.value)
        return replace(s, name=self.bind(s.name), value=value)

    @_STMT.register(Assign)
    def assign(self, s: Assign) -> Stmt:
        return replace(s, name=self.name(s.name), value=self.value(s.value))

    @_STMT.register(If)
    def branch(self, s: If) -> Stmt:
        return replace(s, cond=self.value(s.cond), body=self.body(s.body))

    @_STMT.register(Store)
    def store(self, s: Store) -> Stmt:
        index = tuple(self.expr(e) for e in s.index)
        return replace(s, buffer=self.name(s.buffer), index=index, value=self.value(s.value))

    @_STMT.register(LaneReduce)
    def lane_reduce(self, s: LaneReduce) -> Stmt:
        extent, index = self.expr(s.extent), self.bind(s.index)
        store = None
        if s.store is not None:
            store = (self.name(s.store[0]), tuple(self.expr(e) for e in s.store[1]))
        more = tuple((self.name(acc), self.value(v)) for acc, v in s.more)
        value = self.value(s.value)
        return replace(s, acc=self.name(s.acc), index=index, extent=extent, value=value, store=store, more=more)

    @_STMT.register(PaddedPlane)
    def padded_plane(self, s: PaddedPlane) -> Stmt:
        return replace(s, value=self.value(s.value), name=self.bind(s.name))

    @_STMT.register(Gemm)
    def gemm(self, s: Gemm) -> Stmt:
        c = s.contraction
        axes = {field: self.axes(getattr(c, field)) for field in ("batch", "rows", "cols", "depth")}
        c = replace(
            c,
            **axes,
            output=self.name(c.output),
            a=self.value(c.a),
            b=self.value(c.b),
            offset=self.expr(c.offset),
            row_stride=self.expr(c.row_stride),
            col_stride=self.expr(c.col_stride),
            epilogue=None if c.epilogue is None else self.value(c.epilogue),
        )
        return replace(s, contraction=c, pack=self.name(s.pack))
