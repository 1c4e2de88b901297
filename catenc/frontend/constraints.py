"""What a composite is checked against: the bindings of its names, and its constraints.

A constraint is decided at compile time when the facts prove or refute it; otherwise it becomes a
`RuntimeCheck` that the entry makes when called (docs/language.md, section 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from catenc.diagnostics import CatencError, Loc
from catenc.dtypes import DType
from catenc.frontend.composites import Library
from catenc.symbolic import Expr, Facts, const, prove_nonneg


@dataclass
class RuntimeCheck:
    """A constraint the entry checks when called (it could not be decided at compile time)."""

    lhs: Expr
    op: str
    rhs: Expr
    text: str
    loc: Loc

    def render(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs}"


@dataclass
class EntryContext:
    """State shared by an entry and every composite instantiated inside it."""

    library: Library
    facts: Facts = field(default_factory=Facts)
    checks: list[RuntimeCheck] = field(default_factory=list)
    serial: count = field(default_factory=lambda: count(1))

    def add_check(self, lhs: Expr, op: str, rhs: Expr, text: str, loc: Loc) -> None:
        if any(c.lhs == lhs and c.op == op and c.rhs == rhs for c in self.checks):
            return
        self.checks.append(RuntimeCheck(lhs, op, rhs, text, loc))
        self.facts = self.facts.with_nonneg(*constraint_facts(lhs, op, rhs))


@dataclass
class Bindings:
    """How a composite's names are bound for one instantiation."""

    symbols: dict[str, Expr]
    dtypes: dict[str, DType]
    params: dict[str, bool | int | float]
    batch: tuple[Expr, ...] | None = None


def constraint_facts(lhs: Expr, op: str, rhs: Expr) -> list[Expr]:
    """`lhs op rhs` as facts of the form e >= 0."""
    if op == "<=":
        return [rhs - lhs]
    if op == "<":
        return [rhs - lhs - 1]
    if op == ">=":
        return [lhs - rhs]
    if op == ">":
        return [lhs - rhs - 1]
    if op == "==":
        return [lhs - rhs, rhs - lhs]
    return []


def unequal_facts(a: Expr, b: Expr, facts: Facts) -> list[Expr]:
    """`a != b` as a fact of integers: a > b where facts prove a >= b (e.g. i != 0 for an index i),
    b > a where they prove b >= a, else nothing."""
    if prove_nonneg(a - b, facts):
        return [a - b - 1]
    if prove_nonneg(b - a, facts):
        return [b - a - 1]
    return []


def decide(lhs: Expr, op: str, rhs: Expr, facts: Facts) -> bool | None:
    """True or False when `lhs op rhs` is decided by the facts, else None."""
    negation = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}[op]
    if op == "!=":
        verdict = decide(lhs, "==", rhs, facts)
        return None if verdict is None else not verdict
    if op == "==":
        diff = lhs - rhs
        if diff.is_const:
            return diff.value == 0
        if prove_nonneg(diff, facts) and prove_nonneg(-diff, facts):
            return True
        if prove_nonneg(diff - 1, facts) or prove_nonneg(-diff - 1, facts):
            return False
        return None
    if all(prove_nonneg(f, facts) for f in constraint_facts(lhs, op, rhs)):
        return True
    if all(prove_nonneg(f, facts) for f in constraint_facts(lhs, negation, rhs)):
        return False
    return None


def shape_params(params: dict[str, bool | int | float]) -> dict[str, Expr]:
    """Integer params as constants: they may appear in shapes (e.g. a stride in a conv's output)."""
    return {k: const(v) for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}


def coerce_param(name: str, value: object, default: object, loc: Loc) -> bool | int | float:
    """A param value given by -D or at a call, as the type of its default."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if value in (0, 1):
            return bool(value)
        raise CatencError(f"param '{name}' is a bool; got {value!r}", loc)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatencError(f"param '{name}' is a number; got {value!r}", loc)
    if isinstance(default, int) and isinstance(value, float):
        if value != int(value):
            raise CatencError(f"param '{name}' is an integer; got {value!r}", loc)
        return int(value)
    return value
