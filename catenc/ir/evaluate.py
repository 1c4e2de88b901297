"""The value of index and size arithmetic (a padding guard, a concatenation's side) at given
indices and sizes: what a condition that reads no data decides at one point."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

from catenc.ir.nodes import Binary, Cast, Const, SymInt, Unary, Value, Where

_UNARY: dict[str, Callable] = {"not": operator.not_, "neg": operator.neg, "abs": abs}
_BINARY: dict[str, Callable] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "max": max,
    "min": min,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
    "and": lambda a, b: bool(a) and bool(b),
    "or": lambda a, b: bool(a) or bool(b),
}


def index_value(value: Value, env: Mapping[str, int]) -> int | bool:
    """The value at env of a tree of constants, index expressions and integer or boolean ops
    (ValueError for a load, a local or an op it does not know)."""
    if isinstance(value, Const):
        return value.value
    if isinstance(value, SymInt):
        return value.expr.evaluate(env)
    if isinstance(value, Cast):
        x = index_value(value.x, env)
        return bool(x) if value.dtype.name == "bool" else int(x)
    if isinstance(value, Where):
        return index_value(value.a if index_value(value.cond, env) else value.b, env)
    if isinstance(value, Unary) and value.op in _UNARY:
        return _UNARY[value.op](index_value(value.x, env))
    if isinstance(value, Binary) and value.op in _BINARY:
        return _BINARY[value.op](index_value(value.a, env), index_value(value.b, env))
    raise ValueError(f"cannot evaluate {type(value).__name__} {getattr(value, 'op', '')} as index arithmetic")
