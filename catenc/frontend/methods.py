"""Method spellings, as numpy and PyTorch write them: `x.f(args)` is the built-in function
`f(x, args)` (docs/language.md, section 6), so `x.sum(-1, keepdims=True)`, `x.exp()`,
`x.reshape(B, -1)` and `x.astype(f64)` mean what they mean in numpy.
"""

from __future__ import annotations

import ast

from catenc.diagnostics import closest
from catenc.frontend import typed as T
from catenc.frontend.indexing import IndexScope
from catenc.registry import ARITY, ELEMENTWISE, REDUCTIONS

AXIS_FIRST = frozenset(REDUCTIONS) | {"argmax", "argmin"}  # a positional argument is the axis, as in numpy
SHAPE_ITEMS = frozenset({"reshape", "transpose", "expand"})  # a list, or its items one by one
SHAPE_METHODS = SHAPE_ITEMS | {"squeeze", "unsqueeze", "flatten", "take"}
ALIASES = {"astype": "cast"}
TORCH_KEYWORDS = {"dim": "axis", "keepdim": "keepdims"}  # what PyTorch calls numpy's keywords
# torch's `x.where(c, y)` is where(c, x, y), and `cast` is no method anywhere
ELEMENTWISE_METHODS = ELEMENTWISE - {"where", "cast"}
METHODS = sorted(ELEMENTWISE_METHODS | AXIS_FIRST | SHAPE_METHODS | set(ALIASES))
MODULES = frozenset({"np", "numpy", "torch", "F", "math", "jnp"})


def at_method(node: ast.Attribute | ast.Call) -> ast.AST:
    """A stand-in for node placed at the method's name (`exp` in `x.exp()`), where its errors point."""
    func = node.func if isinstance(node, ast.Call) else node
    stand_in = ast.Call(func, node.args, node.keywords) if isinstance(node, ast.Call) else ast.Name(func.attr)
    stand_in.lineno = func.end_lineno
    stand_in.col_offset = func.end_col_offset - len(func.attr.encode("utf-8"))
    return stand_in


class Methods:
    """`x.f(args)` as `f(x, args)`; mixed into `BodyChecker` (check.py), whose state and helpers it uses."""

    def method_call(self, node: ast.Call, scope: IndexScope | None) -> T.Node:
        func = node.func
        method = func.attr
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id in MODULES and not self.is_value(owner.id):
            raise self.error(
                f"'{owner.id}.{method}(...)': the body's functions need no module; write {method}(...)", func
            )
        if method not in METHODS:
            raise self.error(
                f"unknown method '.{method}(...)'{closest(method, METHODS)}; x.f(...) stands for f(x, ...) for "
                "the elementwise functions, the reductions, argmax, argmin, reshape, transpose, expand, squeeze, "
                "unsqueeze, flatten, take and astype (cast)",
                at_method(func),
            )
        name = ALIASES.get(method, method)
        args, keywords = list(node.args), list(node.keywords)
        if name in ELEMENTWISE or name in ("squeeze", "unsqueeze"):
            arity = 1 if name in ("cast", "squeeze", "unsqueeze") else ARITY[name] - 1  # the dtype, the axis
            self.positional(at_method(node), arity, arity, f".{method}(...)")
        elif name in AXIS_FIRST:
            self.positional(at_method(node), 0, 1, f".{method}(...)")
            keywords = [ast.copy_location(ast.keyword("axis", arg), arg) for arg in args]
            args = []
            for kw in node.keywords:
                if kw.arg == "dim" and name in ("max", "min"):
                    raise self.error(
                        f"torch's x.{name}(dim=...) gives values and indices; write x.{name}(axis=...) for the "
                        f"values or x.arg{name}(axis=...) for the indices",
                        kw,
                    )
                spelled = TORCH_KEYWORDS.get(kw.arg, kw.arg)
                if any(k.arg == spelled for k in keywords):
                    raise self.error(f"the {spelled} of .{method}(...) is given twice", kw)
                keywords.append(ast.copy_location(ast.keyword(spelled, kw.value), kw))
        elif name in SHAPE_ITEMS and not (len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple))) and args:
            args = [ast.copy_location(ast.List(args, ast.Load()), args[0])]
        callee = ast.copy_location(ast.Name(name, ast.Load()), func)
        call = ast.copy_location(ast.Call(callee, [owner, *args], keywords), node)
        return self.function(name, call, scope)
