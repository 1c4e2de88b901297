"""Symbolic integer expressions: shapes, indices, loop bounds, sizes.

An `Expr` is a canonical polynomial with integer coefficients over atoms: symbols and the
non-polynomial pieces `a // b`, `a % b`, `max(a, b)` and `min(a, b)`. Canonical means two
expressions that differ only by reordering, collecting terms or folding constants compare
equal, so shapes can be checked with `==`. The module also answers "is this expression
non-negative under these facts?", which is how index bounds are proved.
"""

from __future__ import annotations

import ast
import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import combinations

from catenc import pyparse

Monomial = tuple[tuple["Atom", int], ...]


class Atom:
    """Base of the indivisible pieces of an expression."""

    key: str

    def substitute(self, mapping: Mapping[str, Expr]) -> Expr:
        raise NotImplementedError

    def evaluate(self, env: Mapping[str, int]) -> int:
        raise NotImplementedError

    def free_symbols(self) -> set[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class Sym(Atom):
    name: str

    @property
    def key(self) -> str:
        return self.name

    def substitute(self, mapping: Mapping[str, Expr]) -> Expr:
        return mapping.get(self.name, Expr.atom(self))

    def evaluate(self, env: Mapping[str, int]) -> int:
        return env[self.name]

    def free_symbols(self) -> set[str]:
        return {self.name}


@dataclass(frozen=True)
class Call(Atom):
    """`floordiv`, `mod`, `max` or `min` of sub-expressions that do not fold further."""

    func: str
    args: tuple[Expr, ...]

    @cached_property
    def key(self) -> str:
        return f"{self.func}({', '.join(str(a) for a in self.args)})"

    def substitute(self, mapping: Mapping[str, Expr]) -> Expr:
        return _APPLY[self.func](*(a.substitute(mapping) for a in self.args))

    def evaluate(self, env: Mapping[str, int]) -> int:
        return _EVAL[self.func](*(a.evaluate(env) for a in self.args))

    def free_symbols(self) -> set[str]:
        return set().union(*(a.free_symbols() for a in self.args))


def _floordiv_int(a: int, b: int) -> int:
    return 0 if b == 0 else a // b


def _mod_int(a: int, b: int) -> int:
    return 0 if b == 0 else a % b


_EVAL = {"floordiv": _floordiv_int, "mod": _mod_int, "max": max, "min": min}


def _mul_monomials(a: Monomial, b: Monomial) -> Monomial:
    if not a or not b:
        return a or b
    powers: dict[Atom, int] = dict(a)
    for atom, power in b:
        powers[atom] = powers.get(atom, 0) + power
    return tuple(sorted(powers.items(), key=lambda item: item[0].key))


def _divide_monomial(a: Monomial, b: Monomial) -> Monomial | None:
    """a / b when b divides a as a monomial, else None."""
    powers = dict(a)
    for atom, power in b:
        if powers.get(atom, 0) < power:
            return None
        powers[atom] -= power
    return tuple(sorted(((x, p) for x, p in powers.items() if p), key=lambda item: item[0].key))


@dataclass(frozen=True)
class Expr:
    """A canonical integer polynomial over atoms; build with `const`, `sym` and operators."""

    terms: tuple[tuple[Monomial, int], ...]

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def from_dict(terms: Mapping[Monomial, int]) -> Expr:
        items = [(m, c) for m, c in terms.items() if c != 0]
        if len(items) > 1:
            items.sort(key=_term_order)
        return Expr(tuple(items))

    @staticmethod
    def atom(atom: Atom) -> Expr:
        return Expr(((((atom, 1),), 1),))

    @cached_property
    def as_dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    def __hash__(self) -> int:
        """Computed once: expressions key many dicts, and hashing one hashes every atom in it."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.terms,))  # what the dataclass's own hash gives
            object.__setattr__(self, "_hash", found)
        return found

    # ---- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        other = to_expr(other)
        if not other.terms:  # x + 0, 0 + x: canonical already
            return self
        if not self.terms:
            return other
        out = dict(self.terms)
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Expr.from_dict(out)

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return Expr(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: ExprLike) -> Expr:
        return self + (-to_expr(other))

    def __rsub__(self, other: ExprLike) -> Expr:
        return to_expr(other) - self

    def __mul__(self, other: ExprLike) -> Expr:
        other = to_expr(other)
        for scalar, e in ((self, other), (other, self)):
            if len(scalar.terms) == 1 and scalar.terms[0][0] == ():  # a nonzero constant keeps the order
                factor = scalar.terms[0][1]
                return e if factor == 1 else Expr(tuple((m, c * factor) for m, c in e.terms))
        if not self.terms or not other.terms:
            return ZERO
        out: dict[Monomial, int] = {}
        for ma, ca in self.terms:
            for mb, cb in other.terms:
                m = _mul_monomials(ma, mb)
                out[m] = out.get(m, 0) + ca * cb
        return Expr.from_dict(out)

    __rmul__ = __mul__

    def __floordiv__(self, other: ExprLike) -> Expr:
        return floordiv(self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return floordiv(other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return mod(self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return mod(other, self)

    # ---- queries ------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def value(self) -> int:
        """The integer value of a constant expression."""
        assert self.is_const, self
        return self.as_dict.get((), 0)

    def free_symbols(self) -> set[str]:
        """The symbol names in the expression (a new set: collected once, copied for the caller)."""
        found = self.__dict__.get("_symbols")
        if found is None:
            found = frozenset().union(*(atom.free_symbols() for m, _ in self.terms for atom, _ in m))
            object.__setattr__(self, "_symbols", found)
        return set(found)

    def as_symbol(self) -> str | None:
        """The symbol's name when the expression is exactly one symbol."""
        if len(self.terms) == 1:
            m, c = self.terms[0]
            if c == 1 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], Sym):
                return m[0][0].name
        return None

    def coefficient(self, name: str) -> Expr:
        """The coefficient of the linear occurrences of symbol `name` (other terms ignored)."""
        out: dict[Monomial, int] = {}
        target = Sym(name)
        for m, c in self.terms:
            powers = dict(m)
            if powers.get(target) == 1:
                del powers[target]
                rest = tuple(sorted(powers.items(), key=lambda item: item[0].key))
                out[rest] = out.get(rest, 0) + c
        return Expr.from_dict(out)

    def substitute(self, mapping: Mapping[str, ExprLike]) -> Expr:
        if not mapping:
            return self
        exprs = {k: to_expr(v) for k, v in mapping.items()}
        total = ZERO
        for m, c in self.terms:
            term = const(c)
            for atom, power in m:
                piece = atom.substitute(exprs)
                for _ in range(power):
                    term = term * piece
            total = total + term
        return total

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The value at env; values may also be numpy index arrays (they broadcast)."""
        total = 0
        for m, c in self.terms:
            term = c
            for atom, power in m:
                term = term * atom.evaluate(env) ** power  # not *=: arrays of other shapes broadcast
            total = total + term
        return total

    # ---- rendering ----------------------------------------------------------------------
    def render(self, style: RenderStyle) -> str:
        if not self.terms:
            return "0"
        parts: list[str] = []
        for m, c in self.terms:
            factors = [_render_atom(atom, style) for atom, power in m for _ in range(power)]
            body = style.mul.join(factors)
            magnitude = abs(c)
            if not factors:
                text = style.literal(magnitude)
            elif magnitude == 1:
                text = body
            else:
                text = f"{style.literal(magnitude)}{style.mul}{body}"
            if not parts:
                parts.append(("-" if c < 0 else "") + text)
            else:
                parts.append((" - " if c < 0 else " + ") + text)
        return "".join(parts)

    def __str__(self) -> str:
        """Rendered once: the text is a sort and dict key in many passes."""
        found = self.__dict__.get("_str")
        if found is None:
            found = self.render(PYTHON)
            object.__setattr__(self, "_str", found)
        return found

    def __repr__(self) -> str:
        return f"Expr({self})"

    def to_c(self) -> str:
        return self.render(C)


ExprLike = Expr | int


@dataclass(frozen=True)
class RenderStyle:
    mul: str
    suffix: str
    funcs: Mapping[str, str]

    def literal(self, n: int) -> str:
        return f"{n}{self.suffix}"


PYTHON = RenderStyle(
    "*",
    "",
    {"floordiv": "{0} // {1}", "mod": "{0} % {1}", "max": "max({0}, {1})", "min": "min({0}, {1})"},
)
C = RenderStyle(
    "*",
    "LL",
    {
        "floordiv": "catenc_floordiv_i64({0}, {1})",
        "mod": "catenc_mod_i64({0}, {1})",
        "max": "catenc_max_i64({0}, {1})",
        "min": "catenc_min_i64({0}, {1})",
    },
)


def _render_atom(atom: Atom, style: RenderStyle) -> str:
    if isinstance(atom, Sym):
        return atom.name
    assert isinstance(atom, Call)
    args = [a.render(style) for a in atom.args]
    if style is PYTHON and atom.func in ("floordiv", "mod"):
        left, right = atom.args  # a product divides as a whole: `a // (C*H)`, never `a // C*H`
        args = [args[0] if _is_simple(left) else f"({args[0]})", args[1] if _is_factor(right) else f"({args[1]})"]
        return "(" + style.funcs[atom.func].format(*args) + ")"
    return style.funcs[atom.func].format(*args)


def _is_factor(e: Expr) -> bool:
    """A constant or a single atom: no operator binds it looser than `//` does."""
    if e.is_const:
        return e.value >= 0
    return len(e.terms) == 1 and e.terms[0][1] == 1 and len(e.terms[0][0]) == 1 and e.terms[0][0][0][1] == 1


def _is_simple(e: Expr) -> bool:
    return len(e.terms) <= 1 and (not e.terms or e.terms[0][1] >= 0)


@lru_cache(maxsize=1 << 16)
def _monomial_key(m: Monomial) -> str:
    return "*".join(f"{a.key}^{p}" for a, p in m)


def _term_order(item: tuple[Monomial, int]) -> tuple[bool, int, str]:
    """The canonical order of terms: longer monomials first, then by name, the constant last."""
    m = item[0]
    return (m == (), -len(m), _monomial_key(m))


def const(n: int) -> Expr:
    return Expr.from_dict({(): int(n)})


def sym(name: str) -> Expr:
    return Expr.atom(Sym(name))


def to_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"not an integer expression: {x!r}")
    return const(x)


ZERO = Expr(())
ONE = const(1)


def _split_multiples(num: Expr, den: Expr) -> tuple[Expr, Expr]:
    """Write num = den*q + r, moving every term of num that den divides exactly into q."""
    if len(den.terms) != 1:
        return _split_sum_multiples(num, den)
    dm, dc = den.terms[0]
    quotient: dict[Monomial, int] = {}
    rest: dict[Monomial, int] = {}
    for m, c in num.terms:
        qm = _divide_monomial(m, dm)
        if qm is not None and c % dc == 0:
            quotient[qm] = c // dc
        else:
            rest[m] = c
    return Expr.from_dict(quotient), Expr.from_dict(rest)


def _split_sum_multiples(num: Expr, den: Expr) -> tuple[Expr, Expr]:
    """num = den*q + r for a divisor of several terms (`M + 1`): q takes each term of num that
    den's leading term divides, kept only where that cancels terms of num and leaves no negative
    one (`M*i + i + r` is `(M + 1)*i + r`, but `K + 3` stays whole over `K + 4`); else q = 0.
    Any integer q is exact: (den*q + r) // den = q + r // den."""
    leading = [(m, c) for m, c in den.terms if m]
    if not leading:
        return ZERO, num
    lead, lead_c = max(leading, key=lambda t: (sum(p for _, p in t[0]), _monomial_key(t[0])))
    quotient: dict[Monomial, int] = {}
    for m, c in num.terms:
        qm = _divide_monomial(m, lead)
        if qm is not None and c % lead_c == 0:
            quotient[qm] = c // lead_c
    q = Expr.from_dict(quotient)
    rest = num - q * den
    simpler = len(rest.terms) < len(num.terms) and all(c > 0 for _, c in rest.terms)
    return (q, rest) if simpler else (ZERO, num)


def floordiv(a: ExprLike, b: ExprLike) -> Expr:
    a, b = to_expr(a), to_expr(b)
    if b.is_const and b.value == 1:
        return a
    if a.is_const and b.is_const:
        return const(_floordiv_int(a.value, b.value))
    if b.is_const and b.value == 0:
        return ZERO
    quotient, rest = _split_multiples(a, b)
    if not rest.terms:
        return quotient
    if rest.is_const and b.is_const:
        return quotient + _floordiv_int(rest.value, b.value)
    return quotient + Expr.atom(Call("floordiv", (rest, b)))


def mod(a: ExprLike, b: ExprLike) -> Expr:
    a, b = to_expr(a), to_expr(b)
    if a.is_const and b.is_const:
        return const(_mod_int(a.value, b.value))
    if b.is_const and b.value in (0, 1):
        return ZERO
    _, rest = _split_multiples(a, b)
    if not rest.terms:
        return ZERO
    if rest.is_const and b.is_const:
        return const(_mod_int(rest.value, b.value))
    return Expr.atom(Call("mod", (rest, b)))


def merge_divmod(e: Expr) -> Expr:
    """e with every k*c*(x // c) + k*(x % c) written k*x (k a term, c any size): the flat index of
    a reshaped index map becomes the plain position again (no division left for the loop)."""
    terms = e.as_dict
    for monomial, coef in terms.items():
        for atom, power in monomial:
            if power != 1 or not (isinstance(atom, Call) and atom.func == "mod"):
                continue
            x, c = atom.args
            k = Expr.from_dict({tuple(p for p in monomial if p[0] != atom): coef})
            quotient = (k * c * Expr.atom(Call("floordiv", (x, c)))).as_dict
            if all(terms.get(m) == q for m, q in quotient.items()):
                return merge_divmod(e - Expr.from_dict({monomial: coef}) - Expr.from_dict(quotient) + k * x)
    return e


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    a, b = to_expr(a), to_expr(b)
    diff = a - b
    if diff.is_const:
        return a if diff.value >= 0 else b
    if prove_nonneg(diff):
        return a
    if prove_nonneg(-diff):
        return b
    lo, hi = sorted((a, b), key=str)
    return Expr.atom(Call("max", (lo, hi)))


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    a, b = to_expr(a), to_expr(b)
    diff = a - b
    if diff.is_const:
        return b if diff.value >= 0 else a
    if prove_nonneg(diff):
        return b
    if prove_nonneg(-diff):
        return a
    lo, hi = sorted((a, b), key=str)
    return Expr.atom(Call("min", (lo, hi)))


_APPLY = {"floordiv": floordiv, "mod": mod, "max": maximum, "min": minimum}


def total(exprs: Iterable[ExprLike]) -> Expr:
    """The sum of many expressions, collected at once (adding them one by one sorts every
    partial sum again)."""
    out: dict[Monomial, int] = {}
    for e in exprs:
        for m, c in to_expr(e).terms:
            out[m] = out.get(m, 0) + c
    return Expr.from_dict(out)


def row_major(index: Sequence[Expr], shape: Sequence[Expr]) -> Expr:
    """The row-major position of an index in a shape (last index fastest): the sum of each index
    times the product of the extents after it (linear in the rank; Horner's form is quadratic)."""
    terms, stride = [], ONE
    for i, d in reversed(list(zip(index, shape))):
        terms.append(i * stride)
        stride = stride * d
    return total(terms)


def product(exprs: Iterable[ExprLike]) -> Expr:
    return _product(tuple(to_expr(e) for e in exprs))


@lru_cache(maxsize=1 << 14)
def _product(exprs: tuple[Expr, ...]) -> Expr:
    """The product of a shape's extents, remembered: sizes and element counts are asked of the
    same shapes again and again."""
    total = ONE
    for e in exprs:
        total = total * e
    return total


# ---- parsing ------------------------------------------------------------------------------


class SymbolicSyntaxError(ValueError):
    """An integer expression that is not in the affine dim language; `col` is 0-based."""

    def __init__(self, message: str, col: int = 0):
        super().__init__(message)
        self.col = col


def parse_expr(text: str) -> Expr:
    """Parse an integer expression over symbols: ints, names, + - * // % ( ), max, min."""
    try:
        tree = pyparse.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise SymbolicSyntaxError(f"invalid expression '{text.strip()}'", (err.offset or 1) - 1) from None
    return from_ast(tree.body)


def from_ast(node: ast.AST, names: Mapping[str, Expr] | None = None) -> Expr:
    """Convert a Python AST of an integer expression; `names` maps names to known values."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return const(node.value)
    if isinstance(node, ast.Name):
        if names is not None and node.id in names:
            return names[node.id]
        return sym(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = from_ast(node.operand, names)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
        op = ops.get(type(node.op))
        if op is not None:
            left, right = from_ast(node.left, names), from_ast(node.right, names)
            if op == "+":
                return left + right
            if op == "-":
                return left - right
            if op == "*":
                return left * right
            return floordiv(left, right) if op == "//" else mod(left, right)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("max", "min")
        and len(node.args) == 2
        and not node.keywords
    ):
        a, b = (from_ast(x, names) for x in node.args)
        return maximum(a, b) if node.func.id == "max" else minimum(a, b)
    raise SymbolicSyntaxError(
        "expected an integer expression of symbols with + - * // %", getattr(node, "col_offset", 0)
    )


# ---- proving ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What is known: every symbol is >= 0, each of `nonneg` is >= 0, loop indices range over
    [0, extent) (their extents are >= 1 whenever an access inside the loop runs)."""

    nonneg: tuple[Expr, ...] = ()
    ranges: tuple[tuple[str, Expr], ...] = ()  # index name -> extent

    def with_nonneg(self, *exprs: Expr) -> Facts:
        return Facts(self.nonneg + tuple(exprs), self.ranges)

    def with_range(self, name: str, extent: Expr) -> Facts:
        return Facts(self.nonneg + (_last_of(extent),), self.ranges + ((name, extent),))

    @property
    def extents(self) -> dict[str, Expr]:
        return dict(self.ranges)


@lru_cache(maxsize=1 << 14)
def _last_of(extent: Expr) -> Expr:
    """extent - 1, remembered: every loop of every verified program asks it again."""
    return extent - 1


def _atom_is_nonneg(atom: Atom) -> bool:
    if isinstance(atom, Sym):
        return True
    assert isinstance(atom, Call)
    if atom.func in ("floordiv", "mod"):
        return all(_direct_nonneg(a) for a in atom.args)
    if atom.func == "max":
        return any(_direct_nonneg(a) for a in atom.args)
    return all(_direct_nonneg(a) for a in atom.args)


def _direct_nonneg(e: Expr) -> bool:
    """True when every term is a non-negative coefficient times non-negative atoms."""
    return all(c >= 0 and all(_atom_is_nonneg(a) for a, _ in m) for m, c in e.terms)


def _bound(e: Expr, extents: Mapping[str, Expr], lower: bool) -> Expr | None:
    """A bound of e (lower or upper) over the index box, as an expression of the other symbols."""
    out = ZERO
    for m, c in e.terms:
        want_low = lower == (c > 0)
        term = const(c)
        for atom, power in m:
            piece = _atom_bound(atom, extents, want_low)
            if piece is None:
                return None
            for _ in range(power):
                term = term * piece
        out = out + term
    return out


def _atom_bound(atom: Atom, extents: Mapping[str, Expr], low: bool) -> Expr | None:
    if isinstance(atom, Sym):
        if atom.name in extents:
            return ZERO if low else extents[atom.name] - 1
        return Expr.atom(atom)
    assert isinstance(atom, Call)
    if not (atom.free_symbols() & set(extents)):
        return Expr.atom(atom)
    num, den = atom.args[0], atom.args[1]
    if den.free_symbols() & set(extents):
        return None
    if atom.func == "floordiv":
        bound = _bound(num, extents, low)
        return None if bound is None else floordiv(bound, den)
    if atom.func == "mod":
        return ZERO if low else den - 1
    return None


def _eliminate_indices(e: Expr, facts: Facts) -> Expr | None:
    extents = facts.extents
    if not (e.free_symbols() & set(extents)):
        return e
    return _bound(e, extents, lower=True)


def prove_nonneg(e: ExprLike, facts: Facts = Facts()) -> bool:
    """Sound (incomplete) proof that e >= 0 for all values allowed by `facts`.

    Tries e itself, then e minus up to two facts (scaled to cancel a term), with loop
    indices replaced by the end of their range that minimises e. Failing that, splits cases:
    on which side a max/min takes, and on small values of a symbol under a // or %.
    """
    e = to_expr(e)
    # Simplifying inside a proof may build a max/min, which tries a proof of its own: past a few
    # nested proofs, give up (never proving is sound) rather than recurse without bound.
    if _NESTING.depth >= MAX_NESTED_PROOFS:
        return False
    return _proved(e, facts, _NESTING.depth)


@lru_cache(maxsize=1 << 14)
def _proved(e: Expr, facts: Facts, depth: int) -> bool:
    """prove_nonneg's answer at a nesting depth, remembered: the passes ask the same questions
    again and again (the depth is part of the question, as a deeper proof gives up sooner)."""
    _NESTING.depth += 1
    try:
        return _prove_direct(e, facts) or _prove_by_cases(e, facts, 0)
    finally:
        _NESTING.depth -= 1


class _Nesting(threading.local):
    depth = 0


_NESTING = _Nesting()
MAX_NESTED_PROOFS = 6
MAX_CASE_DEPTH = 3
SMALL_VALUES = 4


def _prove_by_cases(e: Expr, facts: Facts, depth: int) -> bool:
    if depth >= MAX_CASE_DEPTH:
        return False
    atoms = call_atoms(e)
    divided_names = set().union(*(a.free_symbols() for a in atoms if a.func in ("floordiv", "mod"))) if atoms else set()
    for name, c in divisibility(facts):
        if name in divided_names:  # name % c == 0: write name as c*name and the division cancels
            mapping = {name: c * sym(name)}
            return _prove_case(e.substitute(mapping), _substitute_facts(facts, mapping), None, depth)
    abstracted = _abstract_nonneg_divisions(e, atoms, facts)
    if abstracted is not None and _prove_case(abstracted, facts, None, depth):
        return True
    choice = next((a for a in atoms if a.func in ("max", "min")), None)
    if choice is not None:
        p, q = choice.args
        cases = [(p, p - q), (q, q - p)] if choice.func == "max" else [(p, q - p), (q, p - q)]
        return all(_prove_case(replace_atom(e, choice, value), facts, fact, depth) for value, fact in cases)
    divided = [a for a in atoms if a.func in ("floordiv", "mod")]
    names = sorted(set().union(*(a.free_symbols() for a in divided)) - set(facts.extents)) if divided else []
    if not names or len(names) > 2:
        return False
    name = names[0]
    for value in range(SMALL_VALUES):
        mapping = {name: const(value)}
        if not _prove_case(e.substitute(mapping), _substitute_facts(facts, mapping), None, depth):
            return False
    mapping = {name: sym(name) + SMALL_VALUES}  # the rest: name >= SMALL_VALUES
    return _prove_case(e.substitute(mapping), _substitute_facts(facts, mapping), None, depth)


def divisibility(facts: Facts) -> list[tuple[str, int]]:
    """(symbol, c) for every fact saying symbol % c == 0 (as -(symbol % c) >= 0)."""
    out = []
    for fact in facts.nonneg:
        if len(fact.terms) == 1 and fact.terms[0][1] == -1 and len(fact.terms[0][0]) == 1:
            atom, power = fact.terms[0][0][0]
            if isinstance(atom, Call) and atom.func == "mod" and power == 1:
                name, divisor = atom.args[0].as_symbol(), atom.args[1]
                if name is not None and divisor.is_const and divisor.value > 0:
                    out.append((name, divisor.value))
    return out


def _abstract_nonneg_divisions(e: Expr, atoms: list[Call], facts: Facts) -> Expr | None:
    """e with each a // c (c > 0) whose a the facts prove >= 0 replaced by a fresh symbol
    (symbols are >= 0), or None when there is none such."""
    mapping = {}
    for k, atom in enumerate(atoms):
        num, den = atom.args if atom.func == "floordiv" else (None, None)
        if num is not None and den.is_const and den.value > 0 and not _direct_nonneg(num) and _prove_direct(num, facts):
            mapping[atom] = Expr.atom(Sym(f"~{k}"))  # not an identifier: cannot meet a real symbol
    if not mapping:
        return None
    for atom, fresh in mapping.items():
        e = replace_atom(e, atom, fresh)
    return e


def _prove_case(e: Expr, facts: Facts, assumption: Expr | None, depth: int) -> bool:
    """e >= 0 in one case (facts plus `assumption` >= 0); an impossible case holds trivially."""
    if assumption is not None:
        if _prove_direct(-assumption - 1, facts):
            return True
        facts = facts.with_nonneg(assumption)
    if any(f.is_const and f.value < 0 for f in facts.nonneg):
        return True
    return _prove_direct(e, facts) or _prove_by_cases(e, facts, depth + 1)


def _substitute_facts(facts: Facts, mapping: Mapping[str, Expr]) -> Facts:
    return Facts(
        tuple(f.substitute(mapping) for f in facts.nonneg),
        tuple((n, extent.substitute(mapping)) for n, extent in facts.ranges),
    )


def call_atoms(e: Expr) -> list[Call]:
    """The divisions, remainders, maxima and minima of e's terms."""
    return [atom for m, _ in e.terms for atom, _ in m if isinstance(atom, Call)]


def replace_atom(e: Expr, target: Atom, value: Expr) -> Expr:
    """e with every occurrence of the atom `target` (at its top level) replaced by `value`."""
    total = ZERO
    for m, c in e.terms:
        term = const(c)
        for atom, power in m:
            piece = value if atom == target else Expr.atom(atom)
            for _ in range(power):
                term = term * piece
        total = total + term
    return total


def _prove_direct(e: Expr, facts: Facts) -> bool:
    if any(f.is_const and f.value < 0 for f in facts.nonneg):
        return True  # contradictory facts: the case (e.g. a loop of extent 0) never happens
    candidates = [e]
    for fact in facts.nonneg:
        candidates.extend(e - k * fact for k in _scales(e, fact))
    for f1, f2 in combinations(facts.nonneg, 2):
        for k1 in _scales(e, f1):
            rest = e - k1 * f1
            candidates.extend(rest - k2 * f2 for k2 in _scales(rest, f2))
    reduced = [r for r in (_eliminate_indices(c, facts) for c in candidates) if r is not None]
    if any(_nonneg_over_symbols(r, facts) for r in reduced):
        return True
    # Last: fold a // b and a % b whose a lies in [0, b) (e.g. (K - 1) // K once k < K is used).
    return any(_nonneg_over_symbols(s, facts) for s in (simplify(r, facts) for r in reduced if call_atoms(r)))


def _scales(e: Expr, fact: Expr) -> list[Expr]:
    """Non-negative multipliers q (a positive integer times a monomial of symbols) for which
    e - q*fact cancels some term of e; q*fact >= 0 whenever fact >= 0."""
    scales: dict[str, Expr] = {}
    mine = e.as_dict
    for m, c in fact.terms:
        if not m:
            continue
        for me, ce in mine.items():
            quotient = _divide_monomial(me, m)
            if quotient is None or ce % c or ce // c <= 0:
                continue
            if not all(isinstance(atom, Sym) for atom, _ in quotient):
                continue
            q = Expr.from_dict({quotient: ce // c})
            scales.setdefault(str(q), q)
    return [scales[k] for k in sorted(scales)]


def _nonneg_over_symbols(e: Expr, facts: Facts) -> bool:
    e = _relax_upper_atoms(e)
    if e.is_const:
        return e.value >= 0
    if _direct_nonneg(e):
        return True
    index_free = [f for f in facts.nonneg if not (f.free_symbols() & set(facts.extents))]
    for fact in index_free:
        for k in _scales(e, fact):
            if _direct_nonneg(e - k * fact):
                return True
    return False


def _relax_upper_atoms(e: Expr) -> Expr:
    """A smaller-or-equal expression (up to a positive factor) without `a // c` and `a % c`
    atoms of negative coefficient: c*(a // c) <= a, and a % c <= c - 1, for constants c > 0."""
    for m, coefficient in e.terms:
        if coefficient >= 0 or len(m) != 1 or m[0][1] != 1 or not isinstance(m[0][0], Call):
            continue
        atom = m[0][0]
        if atom.func not in ("floordiv", "mod") or not atom.args[1].is_const or atom.args[1].value <= 0:
            continue
        c = atom.args[1].value
        rest = e - Expr.from_dict({m: coefficient})
        if atom.func == "mod":
            return _relax_upper_atoms(rest + coefficient * (c - 1))
        return _relax_upper_atoms(c * rest + coefficient * atom.args[0])
    return e


def prove_less(a: ExprLike, b: ExprLike, facts: Facts = Facts()) -> bool:
    """a < b."""
    return prove_nonneg(to_expr(b) - to_expr(a) - 1, facts)


def _nested_division(func: str, num: Expr, den: Expr, facts: Facts) -> Expr | None:
    """(d*q + r) // (d*m) as q // m, and (d*q + r) % (d*m) as d*(q % m) + r, for d a factor of
    the divisor with 0 <= r < d under facts: a division by a flattened extent, H*W*c, of
    `(H*W*c_index + W*h + w)` is the division of c_index by c."""
    if len(den.terms) != 1 or not den.terms[0][0]:
        return None
    monomial, coef = den.terms[0]
    atoms = [atom for atom, power in monomial for _ in range(power)]
    for size in range(len(atoms) - 1, 0, -1):
        for chosen in itertools.combinations(range(len(atoms)), size):
            d = product(Expr.atom(atoms[k]) for k in chosen)
            m = product(Expr.atom(atoms[k]) for k in range(len(atoms)) if k not in chosen) * coef
            quotient, rest = _split_multiples(num, d)
            if quotient.terms and prove_nonneg(rest, facts) and prove_less(rest, d, facts):
                if func == "floordiv":
                    return simplify(floordiv(quotient, m), facts, deep=True)
                return simplify(d * mod(quotient, m) + rest, facts, deep=True)
    return None


def simplify(e: Expr, facts: Facts, deep: bool = False) -> Expr:
    """Fold `a // d` and `a % d` whose remainder part provably lies in [0, d) under facts. `deep`
    also folds nested divisions ((d*q + r) // (d*m), (b // c) % d) and merges k*c*(x // c) +
    k*(x % c) inside them: results a bounds proof may not follow, so checked by the caller."""
    if not any(isinstance(atom, Call) for m, _ in e.terms for atom, _ in m):
        return e
    terms = []
    for m, c in _undo_exact_divisions(e, facts).terms:
        term = const(c)
        for atom, power in m:
            piece = _simplify_atom(atom, facts, deep)
            for _ in range(power):
                term = term * piece
        terms.append(term)
    return total(terms)


def _undo_exact_divisions(e: Expr, facts: Facts) -> Expr:
    """k*(x // c) is (k / c)*x where the facts say x % c' == 0 for a multiple c' of c, and c
    divides k: the C // 8 that reshape(x, [N, 8, -1]) introduces cancels where it is multiplied
    back."""
    multiples = _known_multiples(facts)
    if not multiples:
        return e
    out: dict[Monomial, int] = {}
    for m, c in e.terms:
        for atom, power in m:
            exact = _exact_division(atom, multiples) if power == 1 else None
            if exact is not None and c % exact[1] == 0:
                m = _mul_monomials(tuple(p for p in m if p[0] != atom), ((exact[0], 1),))
                c //= exact[1]
                break
        out[m] = out.get(m, 0) + c
    return Expr.from_dict(out)


def _exact_division(atom: Atom, multiples: dict[str, tuple[int, ...]]) -> tuple[Sym, int] | None:
    """(x, c) when atom is x // c for a symbol x that is a multiple of c."""
    if not (isinstance(atom, Call) and atom.func == "floordiv"):
        return None
    name, divisor = atom.args[0].as_symbol(), atom.args[1]
    if name is None or not divisor.is_const or divisor.value < 2:
        return None
    c = divisor.value
    return (Sym(name), c) if any(whole % c == 0 for whole in multiples.get(name, ())) else None


@lru_cache(maxsize=1 << 10)
def _known_multiples(facts: Facts) -> dict[str, tuple[int, ...]]:
    """symbol -> the constants the facts say divide it."""
    found: dict[str, tuple[int, ...]] = {}
    for name, whole in divisibility(facts):
        found[name] = (*found.get(name, ()), whole)
    return found


def _simplify_atom(atom: Atom, facts: Facts, deep: bool) -> Expr:
    if isinstance(atom, Sym):
        return Expr.atom(atom)
    assert isinstance(atom, Call)
    args = [simplify(a, facts, deep) for a in atom.args]
    if deep:
        args = [merge_divmod(a) for a in args]
    if atom.func in ("floordiv", "mod"):
        num, den = args
        for quotient, rest in (_split_multiples(num, den), (ZERO, num)):
            if prove_nonneg(rest, facts) and prove_less(rest, den, facts):
                return quotient if atom.func == "floordiv" else rest
        nested = _nested_division(atom.func, num, den, facts) if deep else None
        if nested is not None:
            return nested
        inner = deep and num.as_symbol() is None and len(num.terms) == 1 and num.terms[0]
        if atom.func == "mod" and inner and inner[1] == 1 and len(inner[0]) == 1 and inner[0][0][1] == 1:
            # (b // c) % d is b // c when 0 <= b < c*d (c >= 0 as every size; c = 0 gives 0 % d = 0)
            divided = inner[0][0][0]
            if isinstance(divided, Call) and divided.func == "floordiv":
                b, c = divided.args
                if prove_nonneg(b, facts) and prove_less(b, c * den, facts):
                    return num
    return _APPLY[atom.func](*args)
