"""Operator typing: weak literals, dtype unification, broadcasting and elementwise result types.

Literals and symbols are weak: they take the dtype of the strong operand they meet (`x * 2` keeps
x's dtype). Shapes broadcast as in numpy, with dims compared by proof under the composite's facts.
"""

from __future__ import annotations

import ast
import math

from catenc.diagnostics import CatencError
from catenc.dtypes import BOOL, F32, DType
from catenc.frontend import typed as T
from catenc.registry import BINARY_FLOAT, FLOAT_PREDICATES, UNARY_FLOAT
from catenc.symbolic import ONE, Expr


def is_weak(node: T.Node) -> bool:
    """Whether a value still adopts the dtype it meets: a literal, a symbol, or arithmetic on only those."""
    if isinstance(node, (T.Lit, T.SymVal)):
        return node.weak
    if not isinstance(node, T.Apply) or node.op == "cast" or not node.args:
        return False
    # asked of every operand of every operator: once per node, or a long expression is quadratic
    weak = node.__dict__.get("_weak")
    if weak is None:
        if node.op == "where":
            weak = is_weak(node.args[1]) and is_weak(node.args[2])
        else:
            weak = all(is_weak(a) for a in node.args) and node.type.dtype != BOOL
        object.__setattr__(node, "_weak", weak)
    return weak


class Operators:
    """The dtype and shape rules of operators; mixed into `BodyChecker` (check.py), whose `error` and
    `equal` it uses."""

    def strengthen(self, node: T.Node) -> T.Node:
        if not is_weak(node):
            return node
        return self.retype(node, node.type.dtype, None)

    def retype(self, node: T.Node, dtype: DType, where: ast.AST | None) -> T.Node:
        """Give a weak value the dtype it meets."""
        if isinstance(node, T.Lit):
            value = node.value
            if dtype.is_int and isinstance(value, float):
                if not math.isfinite(value) or value != int(value):
                    raise CatencError(
                        f"the literal {value!r} cannot take the integer dtype {dtype.name}; use cast(...)",
                        node.loc,
                    )
                value = int(value)
            if dtype == BOOL and not isinstance(value, bool):
                raise CatencError(f"the number {value!r} cannot take dtype bool; compare it instead", node.loc)
            if dtype != BOOL and isinstance(value, bool):
                raise CatencError(f"the bool {value!r} cannot take dtype {dtype.name}; use cast(...)", node.loc)
            if dtype.is_int and not _fits(int(value), dtype):
                raise CatencError(f"the literal {value!r} does not fit in {dtype.name}", node.loc)
            if dtype.is_float and not isinstance(value, bool):
                try:
                    value = float(value)
                except OverflowError:
                    raise CatencError(f"the literal {value} is too large for {dtype.name}", node.loc) from None
            return T.Lit(T.TType(dtype, ()), node.loc, value, False)
        if isinstance(node, T.SymVal):
            if dtype == BOOL:
                raise CatencError("a symbol cannot be used as a bool", node.loc)
            return T.SymVal(T.TType(dtype, ()), node.loc, node.expr, False)
        assert isinstance(node, T.Apply)
        if node.op in ("div",) and dtype.is_int:
            raise CatencError("'/' on integers is not allowed; use '//' or cast(...) to a float", node.loc)
        if node.op == "where":
            cond, a, b = node.args
            args = (cond, self.retype(a, dtype, where), self.retype(b, dtype, where))
        else:
            args = tuple(self.retype(a, dtype, where) for a in node.args)
        result = node.type.dtype if node.type.dtype == BOOL else dtype
        return T.Apply(T.TType(result, node.type.shape), node.loc, node.op, args)

    def unify(self, args: list[T.Node], node: ast.AST) -> list[T.Node]:
        """Make operands share one dtype (weak literals adopt the strong one's)."""
        strong = [a for a in args if not is_weak(a)]
        if not strong:
            target = F32 if any(a.type.dtype.is_float for a in args) else args[0].type.dtype
            if all(a.type.dtype == BOOL for a in args):
                target = BOOL
            if target != BOOL and any(a.type.dtype == BOOL for a in args):
                raise self.error("cannot mix bool and numbers; use cast(...)", node)
            return [a if a.type.dtype == target else self._reweak(a, target) for a in args]
        dtype = strong[0].type.dtype
        for other in strong[1:]:
            if other.type.dtype != dtype:
                raise self.error(
                    f"operands have different dtypes {dtype.name} and {other.type.dtype.name}; "
                    f"use cast(x, {dtype.name}) or cast(x, {other.type.dtype.name})",
                    node,
                )
        return [self.retype(a, dtype, node) if is_weak(a) else a for a in args]

    def _reweak(self, node: T.Node, dtype: DType) -> T.Node:
        """Between weak values only: an int literal meeting a float one becomes a float literal."""
        if isinstance(node, T.Lit):
            return T.Lit(
                T.TType(dtype, ()),
                node.loc,
                float(node.value) if dtype.is_float else node.value,
                True,
            )
        if isinstance(node, T.SymVal):
            return T.SymVal(T.TType(dtype, ()), node.loc, node.expr, True)
        assert isinstance(node, T.Apply)
        args = tuple(a if node.op == "where" and k == 0 else self._reweak(a, dtype) for k, a in enumerate(node.args))
        return T.Apply(T.TType(dtype, node.type.shape), node.loc, node.op, args)

    def broadcast(self, shapes: list[tuple[Expr, ...]], node: ast.AST) -> tuple[Expr, ...]:
        rank = max((len(s) for s in shapes), default=0)
        out: list[Expr] = []
        for axis in range(rank):
            dim: Expr | None = None
            for shape in shapes:
                k = axis - (rank - len(shape))
                if k < 0:
                    continue
                d = shape[k]
                if dim is None or dim == ONE:
                    dim = d
                elif d == ONE or self.equal(d, dim):
                    continue
                else:
                    raise self.error(
                        f"shapes {' and '.join(shape_text(s) for s in shapes)} do not broadcast: {dim} vs {d} "
                        f"in axis {axis - rank}",
                        node,
                    )
            out.append(dim if dim is not None else ONE)
        return tuple(out)

    def elementwise(self, op: str, args: list[T.Node], node: ast.AST) -> T.Node:
        loc = self.loc(node)
        if op == "where":
            cond, a, b = args
            if cond.type.dtype != BOOL:
                raise self.error(f"the condition of where(...) must be bool, not {cond.type.dtype.name}", node)
            a, b = self.unify([a, b], node)
            shape = self.broadcast([cond.type.shape, a.type.shape, b.type.shape], node)
            return T.Apply(T.TType(a.type.dtype, shape), loc, "where", (cond, a, b))
        args = self.unify(args, node)
        dtype = args[0].type.dtype
        shape = self.broadcast([a.type.shape for a in args], node)
        weak = all(is_weak(a) for a in args)
        name = _OP_SPELLING.get(op, op)
        result = dtype
        if op in ("lt", "le", "gt", "ge", "eq", "ne"):
            result = BOOL
            if dtype == BOOL and op not in ("eq", "ne"):
                raise self.error(f"cannot order bool values with '{name}'", node)
        elif op in ("and", "or", "xor", "not"):
            if dtype.is_float:
                raise self.error(f"'{name}' needs bool or integer operands, not {dtype.name}", node)
        elif op in FLOAT_PREDICATES:
            if not dtype.is_float:
                raise self.error(f"{op}(...) needs a float operand, not {dtype.name}", node)
            result = BOOL
        elif op in UNARY_FLOAT or op in BINARY_FLOAT or op == "div":
            if dtype.is_int and not weak:
                hint = "use '//' or cast(...)" if op == "div" else "use cast(x, f32)"
                raise self.error(f"'{name}' needs float operands, not {dtype.name}; {hint}", node)
            if dtype == BOOL:
                raise self.error(f"'{name}' needs float operands, not bool", node)
            if weak and not dtype.is_float:
                args = [self._reweak(a, F32) for a in args]
                result = F32
        elif dtype == BOOL:
            raise self.error(f"'{name}' needs numeric operands, not bool; use cast(...)", node)
        return T.Apply(T.TType(result, shape), loc, op, tuple(args))


def _fits(value: int, dtype: DType) -> bool:
    if dtype.kind == "uint":
        return -(1 << dtype.bits) < value < (1 << dtype.bits)
    return -(1 << (dtype.bits - 1)) <= value < (1 << dtype.bits)


def shape_text(shape: tuple[Expr, ...]) -> str:
    """A shape as written in diagnostics: [M, 2*N]."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


_OP_SPELLING = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "and": "&",
    "or": "|",
    "xor": "^",
    "not": "~",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}
