"""The manifest reader's pieces that the loader (catenc/loader.py) and the device host
(catenc/runtime/device_host.py) share: its errors, its integer expressions, the scope that
evaluates derived symbols, and the ABI's constants (docs/abi.md)."""

from __future__ import annotations

import ast
import ctypes
import operator
from collections.abc import Callable, Mapping

from catenc import pyparse

__all__ = [
    "HOST_LANGUAGES",
    "SIZE_MAX",
    "WORKSPACE_ALIGNMENT",
    "ManifestError",
    "Scope",
    "ShapeExpr",
    "UnsupportedRuntimeError",
]

WORKSPACE_ALIGNMENT = 64
SIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1
"""What ``NAME_workspace_bytes`` returns when a size computed from the dims overflows int64."""
HOST_LANGUAGES = frozenset({"c"})
"""Languages (the manifest's ``runtime.language``) whose shared library's entries take host pointers,
so ctypes calls them; the device host (catenc/runtime/device_host.py) runs the others."""


# --------------------------------------------------------------------------- errors


class ManifestError(ValueError):
    """The manifest is malformed, or does not match the library next to it."""


class UnsupportedRuntimeError(ManifestError):
    """The library was built for a runtime that cannot run in this process (``cuda`` ...)."""


# ---------------------------------------------------------------------- expressions

_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARYOPS: dict[type, Callable[[int], int]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_COMPARISONS: dict[type, Callable[[int, int], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCTIONS: dict[str, Callable[..., int]] = {"max": max, "min": min}

_Evaluator = Callable[[Mapping[str, int]], int]


class ShapeExpr:
    """An integer expression of the manifest (a shape entry, a derivation, a size).

    The syntax is Python's, restricted to integer literals, symbol names, ``+ - * // %``,
    unary ``-``, parentheses and ``max(a, b, ...)`` / ``min(a, b, ...)``; ``//`` and ``%``
    round toward negative infinity, as in Python. With ``comparisons=True`` the comparison
    operators ``== != < <= > >=`` are allowed too (constraints such as ``"K % 16 == 0"``).
    The text is parsed once with :mod:`ast` and checked node by node; evaluation walks the
    checked tree and never calls :func:`eval`.

    >>> ShapeExpr("(N + 3) // 4 * 4")({"N": 5})
    8
    """

    def __init__(self, source: str | int, *, comparisons: bool = False) -> None:
        if isinstance(source, bool) or not isinstance(source, (int, str)):
            raise ManifestError(f"expected an int or an expression string, got {source!r}")
        self.source = str(source)
        names: set[str] = set()
        if isinstance(source, int):
            value = source
            self._evaluate: _Evaluator = lambda env: value
            self._tree: ast.expr = ast.Constant(source)
        else:
            try:
                self._tree = pyparse.parse(source.strip(), mode="eval").body
            except SyntaxError as error:
                raise ManifestError(f"invalid expression {source!r}: {error.msg}") from None
            self._evaluate = _compile(self._tree, source, names, comparisons)
        self.names: frozenset[str] = frozenset(names)
        """The symbol names the expression reads."""

    @property
    def symbol(self) -> str | None:
        """The symbol's name when the expression is a bare symbol name, else None."""
        return self._tree.id if isinstance(self._tree, ast.Name) else None

    def __call__(self, env: Mapping[str, int]) -> int:
        """The value with the symbols of env; KeyError names a symbol env lacks."""
        return self._evaluate(env)

    def __repr__(self) -> str:
        return f"ShapeExpr({self.source!r})"

    def __str__(self) -> str:
        return self.source


def _compile(node: ast.expr, source: str, names: set[str], comparisons: bool) -> _Evaluator:
    """Check one syntax node and return a function that evaluates it."""

    def sub(child: ast.expr) -> _Evaluator:
        return _compile(child, source, names, comparisons)

    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        name = node.id
        names.add(name)
        return lambda env: env[name]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        binop, left, right = _BINOPS[type(node.op)], sub(node.left), sub(node.right)
        return lambda env: binop(left(env), right(env))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARYOPS:
        unop, operand = _UNARYOPS[type(node.op)], sub(node.operand)
        return lambda env: unop(operand(env))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and len(node.args) >= 2
        and not node.keywords
        and not any(isinstance(arg, ast.Starred) for arg in node.args)
    ):
        function, args = _FUNCTIONS[node.func.id], [sub(arg) for arg in node.args]
        return lambda env: function(arg(env) for arg in args)
    if comparisons and isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        first = sub(node.left)
        chain = [(_COMPARISONS[type(op)], sub(right)) for op, right in zip(node.ops, node.comparators, strict=True)]

        def compare(env: Mapping[str, int]) -> int:
            left = first(env)
            for test, right_of in chain:
                right = right_of(env)
                if not test(left, right):
                    return 0
                left = right
            return 1

        return compare
    text = ast.get_source_segment(source.strip(), node) or type(node).__name__
    raise ManifestError(
        f"invalid expression {source!r}: {text!r} is not allowed "
        "(only integers, symbol names, + - * // %, parentheses, max(), min())"
    )


class Scope(dict):
    """Symbol values; a derived symbol is computed from the others on first use."""

    def __init__(self, values: Mapping[str, int], derived: Mapping[str, ShapeExpr]) -> None:
        super().__init__(values)
        self._derived = derived
        self._busy: set[str] = set()

    def __missing__(self, name: str) -> int:
        expr = self._derived.get(name)
        if expr is None or name in self._busy:
            raise KeyError(name)
        self._busy.add(name)
        try:
            value = expr(self)
        finally:
            self._busy.discard(name)
        self[name] = value
        return value
