"""Random well-typed composite programs (TOML text) for differential fuzzing of catenc.

A program is generated statement by statement while the generator tracks every value's dtype
and symbolic shape (a small polynomial over the symbols N, M, K and floor divisions of them), so
each composite is valid by construction: shapes broadcast, matmul inner dims agree, slices and
index-form accesses stay in bounds (a symbol's minimum is raised, and emitted as a `where`
constraint, wherever an op needs a dim of a certain size), and every output is declared with
the shape the body computes.

The generator draws its choices from a `Chooser`: `programs()` / `program_batches()` are
hypothesis strategies (a `DrawChooser` over `draw`), and `random_program(rng, ...)` draws from a
`random.Random` for the standalone runner, which wants throughput rather than shrinking.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st

SYMBOLS = ("N", "M", "K")
FLOATS = ("f32", "f64", "f16")
INTS = ("i32", "i64")
# Relative and absolute tolerance written into each composite's `test` table, per dtype: loose
# enough for differences in summation order, tight enough for any indexing or fusion bug.
TOLERANCE = {"f64": (1e-9, 1e-9), "f32": (1e-3, 1e-4), "f16": (3e-2, 3e-2)}
# The values a symbol is bound to when a program is run (filtered by the symbol's minimum).
SIZES = (0, 1, 2, 3, 4, 5, 7, 11)
# test.ranges of integer inputs whose values should span the dtype (overflow, INT_MIN // -1 ...)
WIDE = {
    "i8": ("-128", "127"),
    "u8": ("0", "255"),
    "i32": ("-2147483648", "2147483647"),
    "u32": ("0", "4294967295"),
    "i64": ("-9223372036854775808", "9223372036854775807"),
}
SMALL_INTS = ("i8", "u8", "u32")  # occasional dtypes beyond the main ones
MAX_MIN = 4  # a symbol's minimum is never raised above this
MAX_RANK = 4  # no value has more dims


# ------------------------------------------------------------------------------------ choices


class Chooser:
    """Where the generator's random decisions come from."""

    def integer(self, low: int, high: int) -> int:  # both ends included
        raise NotImplementedError

    def choice(self, items: Sequence):
        return items[self.integer(0, len(items) - 1)]

    def chance(self, p: float) -> bool:
        return self.integer(0, 999) < int(p * 1000)

    def weighted(self, table: dict[str, float]) -> str:
        total = sum(table.values())
        point = self.integer(0, 9999) * total / 10000
        for key, weight in table.items():
            point -= weight
            if point < 0:
                return key
        return next(reversed(table))

    def shuffled(self, items: Sequence) -> list:
        items = list(items)
        for k in range(len(items) - 1, 0, -1):
            j = self.integer(0, k)
            items[k], items[j] = items[j], items[k]
        return items


class RandomChooser(Chooser):
    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


class DrawChooser(Chooser):
    def __init__(self, draw: Callable):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))


# ------------------------------------------------------------------------- symbolic dims


Monomial = tuple  # sorted atom names (repeated for powers); () is the constant term

_FLOORDIV: dict[str, tuple[Poly, int]] = {}  # atom name -> (numerator, divisor)


class Poly:
    """An integer polynomial over atoms: symbols and floor divisions `(p)//d` of polynomials.

    The generator only adds, multiplies, subtracts constants and floor-divides by positive
    constants, so every dim is non-decreasing in every symbol and its least value is its value
    at the symbols' minimums.
    """

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Monomial, int] | None = None):
        self.terms = {m: c for m, c in (terms or {}).items() if c}

    @staticmethod
    def const(value: int) -> Poly:
        return Poly({(): value})

    @staticmethod
    def atom(name: str) -> Poly:
        return Poly({(name,): 1})

    @staticmethod
    def of(value: Poly | int) -> Poly:
        return value if isinstance(value, Poly) else Poly.const(value)

    def __add__(self, other: Poly | int) -> Poly:
        terms = dict(self.terms)
        for m, c in Poly.of(other).terms.items():
            terms[m] = terms.get(m, 0) + c
        return Poly(terms)

    __radd__ = __add__

    def __sub__(self, other: int) -> Poly:
        assert isinstance(other, int), "only constants are subtracted (dims stay monotone)"
        return self + (-other)

    def __mul__(self, other: Poly | int) -> Poly:
        terms: dict[Monomial, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in Poly.of(other).terms.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Poly(terms)

    __rmul__ = __mul__

    def key(self) -> tuple:
        return tuple(sorted(self.terms.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Poly({self.render()})"

    @property
    def is_const(self) -> bool:
        return all(m == () for m in self.terms)

    @property
    def value(self) -> int:
        return self.terms.get((), 0)

    def render(self) -> str:
        variable = sorted((m, c) for m, c in self.terms.items() if m)
        parts: list[tuple[int, str]] = []
        for m, c in variable:
            body = "*".join(f"({a})" if a in _FLOORDIV else a for a in m)
            parts.append((c, body if abs(c) == 1 else f"{abs(c)}*{body}"))
        if self.value or not parts:
            parts.append((self.value, str(abs(self.value))))
        text = ""
        for k, (c, body) in enumerate(parts):
            if k == 0:
                text = body if c >= 0 else f"-{body}"
            else:
                text += f" + {body}" if c >= 0 else f" - {body}"
        return text

    def evaluate(self, env: dict[str, int]) -> int:
        total = 0
        for m, c in self.terms.items():
            term = c
            for a in m:
                term *= _atom_value(a, env)
            total += term
        return total

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m in self.terms:
            for a in m:
                out |= _FLOORDIV[a][0].symbols() if a in _FLOORDIV else {a}
        return out

    def factors(self) -> list[Poly]:
        """A factorisation for reshapes: a single monomial splits into its atoms and the prime
        factors of its coefficient; anything else is one factor."""
        if len(self.terms) != 1:
            return [self]
        ((m, c),) = self.terms.items()
        if c < 0:
            return [self]
        out = [Poly.atom(a) for a in m]
        n, p = c, 2
        while n > 1 and p <= n:
            while n % p == 0:
                out.append(Poly.const(p))
                n //= p
            p += 1
        return out


def _atom_value(atom: str, env: dict[str, int]) -> int:
    if atom in _FLOORDIV:
        numerator, divisor = _FLOORDIV[atom]
        return numerator.evaluate(env) // divisor
    return env[atom]


def floordiv(p: Poly, d: int) -> Poly:
    if d == 1:
        return p
    variable = {m: c for m, c in p.terms.items() if m}
    if all(c % d == 0 for c in variable.values()):
        return Poly({m: c // d for m, c in variable.items()}) + p.value // d
    text = p.render()
    name = f"({text})//{d}" if " " in text else f"{text}//{d}"
    _FLOORDIV[name] = (p, d)
    return Poly.atom(name)


def product(dims: Sequence[Poly]) -> Poly:
    out = Poly.const(1)
    for d in dims:
        out = out * d
    return out


ONE = Poly.const(1)


def broadcast(a: Sequence[Poly], b: Sequence[Poly]) -> tuple[Poly, ...] | None:
    """numpy broadcasting of two symbolic shapes, or None where they may not broadcast."""
    rank = max(len(a), len(b))
    a = (ONE,) * (rank - len(a)) + tuple(a)
    b = (ONE,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == ONE:
            out.append(x)
        elif x == ONE:
            out.append(y)
        else:
            return None
    return tuple(out)


# --------------------------------------------------------------------------------- programs


@dataclass
class Val:
    name: str
    dtype: str
    shape: tuple[Poly, ...]
    is_input: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    def decl(self) -> str:
        dims = ", ".join(d.render() for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]" if self.shape else f"{self.name}: {self.dtype}"


@dataclass
class Program:
    name: str
    inputs: list[Val]
    outputs: list[Val]
    body: list[str]
    minimums: dict[str, int]  # symbol -> least value (a `where` constraint when > 0)
    dtypes: set[str] = field(default_factory=set)
    kinds: list[str] = field(default_factory=list)  # statement kinds, for statistics
    ranges: dict[str, tuple[str, str]] = field(default_factory=dict)  # input -> [low, high) of its values
    helpers: list[str] = field(default_factory=list)  # TOML of rank-polymorphic composites it calls

    def symbols(self) -> list[str]:
        used: set[str] = set()
        for v in self.inputs + self.outputs:
            for d in v.shape:
                used |= d.symbols()
        return [s for s in SYMBOLS if s in used]

    def where(self) -> list[str]:
        return [f"{s} >= {self.minimums[s]}" for s in self.symbols() if self.minimums.get(s, 0) > 0]

    def tolerance(self) -> tuple[float, float]:
        rtol = max((TOLERANCE[d][0] for d in self.dtypes if d in TOLERANCE), default=0.0)
        atol = max((TOLERANCE[d][1] for d in self.dtypes if d in TOLERANCE), default=0.0)
        return rtol, atol

    def toml(self) -> str:
        def strings(items):
            return "[" + ", ".join(f'"{s}"' for s in items) + "]"

        lines = [f"[composite.{self.name}]"]
        lines.append(f"inputs = {strings(v.decl() for v in self.inputs)}")
        lines.append(f"outputs = {strings(v.decl() for v in self.outputs)}")
        if self.where():
            lines.append(f"where = {strings(self.where())}")
        rtol, atol = self.tolerance()
        if rtol:
            lines.append(f"test.rtol = {rtol!r}")
            lines.append(f"test.atol = {atol!r}")
        if self.ranges:
            items = ", ".join(f'{k} = ["{lo}", "{hi}"]' for k, (lo, hi) in self.ranges.items())
            lines.append(f"test.ranges = {{ {items} }}")
        lines.append('body = """')
        lines += self.body
        lines.append('"""')
        return "\n".join(self.helpers + lines) + "\n"

    def bindings(self, ch: Chooser, count: int, fixed: dict[str, int] | None = None) -> list[dict[str, int]]:
        """Symbol values to run at: every symbol at its minimum (0 where allowed), every symbol at
        max(minimum, 1), sometimes one symbol at 16 or 17 (past a vector width), then random
        sizes. `fixed` symbols (compiled with -D) keep their value."""
        syms = self.symbols()
        low = {s: self.minimums.get(s, 0) for s in syms}
        out = [dict(low), {s: max(v, 1) for s, v in low.items()}]
        if syms and ch.chance(0.3):
            big = ch.choice(syms)
            out.append({s: ch.choice((16, 17)) if s == big else max(v, ch.integer(1, 2)) for s, v in low.items()})
        while len(out) < count:
            out.append({s: ch.choice([v for v in SIZES if v >= low[s]]) for s in syms})
        unique = []
        for b in out:
            b = {**b, **{s: v for s, v in (fixed or {}).items() if s in b}}
            if b not in unique:
                unique.append(b)
        return unique[:count]


def batch_toml(programs: Sequence[Program]) -> str:
    return "\n".join(p.toml() for p in programs)


# ------------------------------------------------------------------------------- templates

# Elementwise functions of one value; "{x}" is the operand, "{S}" a symbol, "{dt}" the dtype.
FLOAT_UNARY = (
    "exp(-abs({x}))",
    "exp(tanh({x}))",
    "log(abs({x}) + 1.0)",
    "tanh({x})",
    "sigmoid({x})",
    "relu({x})",
    "sqrt(abs({x}))",
    "abs({x})",
    "-{x}",
    "sin({x})",
    "cos({x})",
    "erf({x})",
    "gelu({x})",
    "gelu_tanh({x})",
    "silu({x})",
    "softplus({x})",
    "floor({x} * 4.0)",
    "ceil({x} * 2.0)",
    "trunc({x} * 3.0)",
    "clip({x}, -0.5, 0.5)",
    "{x} * 2.0 + 1.0",
    "0.5 - {x}",
    "{x} / 3.0",
    "atan({x})",
    "rsqrt(abs({x}) + 1.0)",
    "reciprocal(abs({x}) + 1.0)",
    "expm1(tanh({x}))",
    "log1p(abs({x}))",
    "log2(abs({x}) + 1.0)",
    "exp2(tanh({x}))",
    "{x} * {x}",
    "sign({x})",
    "where(isnan({x}), 0.0, {x})",
    "{x} * cast({S}, {dt})",
    "maximum({x}, 0.25)",
    # NaN and infinities on purpose: numpy's propagation rules (docs/language.md, numerics)
    "sqrt({x})",
    "log({x})",
    "{x} / {x}",
    "relu(sqrt({x}))",
    "maximum(log({x}), -1.0)",
    "clip(sqrt({x}), 0.0, 1.0)",
)
INT_UNARY = (
    "abs({x})",
    "-{x}",
    "relu({x})",
    "sign({x})",
    "{x} * 3 - 1",
    "{x} // 2",
    "{x} % 3",
    "{x} // -3",
    "{x} % -4",
    "clip({x}, -3, 3)",
    "maximum({x}, 0)",
    "minimum({x}, 1) * 2",
    "{x} * {x}",
    "~{x}",
    "pow({x}, 2)",
    "{x} + cast({S}, {dt})",
)
FLOAT_BINARY = (
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "{a} * {b}",
    "{a} / (abs({b}) + 1.0)",
    "maximum({a}, {b})",
    "minimum({a}, {b})",
    "where({a} > {b}, {a}, {b} * 0.5)",
    "where(({a} > 0.0) & ({b} < 0.0), {a} - {b}, {b})",
    "where({a} != {b}, {a}, 0.0)",
    "atan2({a}, {b})",
    "{a} // (abs({b}) + 0.5)",
    "{a} % (abs({b}) + 0.5)",
    "{a} * sigmoid({b})",
    "pow(abs({a}) + 0.5, tanh({b}))",
    "clip({a}, -abs({b}), abs({b}))",
    "{a} / {b}",
    "maximum(sqrt({a}), {b})",
    "minimum({a}, log({b}))",
)
INT_BINARY = (
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "{a} // {b}",
    "{a} % {b}",
    "maximum({a}, {b})",
    "minimum({a}, {b})",
    "where({a} < {b}, {a}, {b} * 2)",
    "where(({a} >= 0) | ({b} == 0), {a}, -{b})",
    "{a} & {b}",
    "{a} | {b}",
    "{a} ^ {b}",
    "pow({a}, {b} % 4)",
)
# Statements that reduce a value and broadcast the result back ("{ax}": an axis).
FLOAT_NORMALIZE = (
    "exp({x} - max({x}, axis={ax}, keepdims=True))",
    "{x} / (sum(abs({x}), axis={ax}, keepdims=True) + 1.0)",
    "{x} - mean({x}, axis={ax}, keepdims=True)",
    "{x} * min({x}, axis={ax}, keepdims=True)",
)
INT_NORMALIZE = (
    "{x} - max({x}, axis={ax}, keepdims=True)",
    "{x} * sum({x}, axis={ax}, keepdims=True)",
    "{x} - min({x}, axis={ax}, keepdims=True)",
)

STATEMENT_WEIGHTS = {
    "unary": 8,
    "binary": 14,
    "normalize": 4,
    "reduce": 10,
    "reshape": 5,
    "transpose": 5,
    "slice": 7,
    "concat": 5,
    "matmul": 6,
    "cast": 3,
    "dims": 3,
    "ix_map": 5,
    "ix_axis": 14,
    "ix_reduce": 7,
    "ix_window": 4,
    "ix_conv": 3,
    "ix_mask": 4,
    "ix_matmul": 3,
    "ix_nested": 2,
    "compare": 3,
    "select": 4,
    "call": 6,
    "take": 3,
    "einsum": 3,
    "shape_fn": 4,
    "helper": 4,
}
# Bodies of rank-polymorphic helper composites (x: T[..., D] -> y: T[..., D], param a = 2),
# defined next to the program that calls them: calls, `...` batch dims, dtype variables.
HELPER_BODIES = (
    "y = x * a + x[..., ::-1]",
    "y[..., j] = x[..., D - 1 - j] - x[..., j] * a",
    "y = x - max(x, axis=-1, keepdims=True)",
    "y[..., j] = where(j >= 1, x[..., j - 1], x[..., j]) + x[..., j]",
    "t = x * a\ny = t + sum(t, axis=-1, keepdims=True)",
    "y[..., j] = x[..., j] * cast(j + a, T)",
)
INDEX_NAMES = ("i", "j", "u", "v")
STEP_FUNCTIONS = ("floor", "ceil", "trunc", "round", "sign")
REDUCE_NAMES = ("r", "s", "k")


def is_float(dtype: str) -> bool:
    return dtype.startswith("f")


def lit(dtype: str, value: float) -> str:
    if is_float(dtype):
        return repr(float(value))
    return str(abs(int(value)) if dtype.startswith("u") else int(value))


def unsigned_safe(template: str) -> bool:
    """No negative literal or negation, which an unsigned dtype cannot adopt."""
    return re.search(r"-\d|-\{|-\(", template) is None


class Unsuitable(Exception):
    """The statement kind does not apply to the values at hand; try another."""


class Generator:
    def __init__(self, ch: Chooser, name: str, max_statements: int = 6):
        self.ch = ch
        self.name = name
        self.max_statements = max_statements
        self.minimums = {s: 0 for s in SYMBOLS[: ch.integer(1, len(SYMBOLS))]}
        self.dtype = ch.weighted({"f32": 40, "f64": 18, "i32": 16, "i64": 16, "f16": 7, "i8": 2, "u8": 2, "u32": 2})
        self.inputs: list[Val] = []
        self.defs: list[Val] = []
        self.body: list[str] = []
        self.forced: set[str] = set()
        self.uses: dict[str, int] = {}
        self.kinds: list[str] = []
        self.ranges: dict[str, tuple[str, str]] = {}
        self.helpers: list[str] = []
        self.counter = 0

    # -- values --
    @property
    def values(self) -> list[Val]:
        return self.inputs + self.defs

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def random_dim(self, known: bool = False) -> Poly:
        """A dim for a new input (any symbol) or, with known, one over the symbols inputs use."""
        symbols = sorted({s for v in self.inputs for d in v.shape for s in d.symbols()}) if known else []
        if known and not symbols:
            return Poly.const(self.ch.choice((1, 2, 3)))
        sym = Poly.atom(self.ch.choice(symbols or list(self.minimums)))
        kind = self.ch.weighted({"sym": 10, "const": 3, "plus": 1, "twice": 1.5, "minus": 0.5})
        if kind == "const":
            return Poly.const(self.ch.choice((1, 2, 3, 4, 5)))
        if kind == "plus":
            return sym + self.ch.integer(1, 2)
        if kind == "twice":
            return sym * 2
        if kind == "minus" and self.require(sym - 1, 0):
            return sym - 1
        return sym

    def random_shape(self, rank: int | None = None) -> tuple[Poly, ...]:
        if rank is None:
            rank = int(self.ch.weighted({"0": 0.5, "1": 3, "2": 4.5, "3": 2}))
        return tuple(self.random_dim() for _ in range(rank))

    def new_input(self, dtype: str, shape: Sequence[Poly]) -> Val:
        val = Val(self.fresh("x"), dtype, tuple(shape), True)
        self.inputs.append(val)
        if dtype in WIDE and self.ch.chance(0.2):  # values over the whole range: wrap-around
            self.ranges[val.name] = WIDE[dtype]
        return val

    def minimum(self, dim: Poly) -> int:
        return dim.evaluate(self.minimums)

    def require(self, dim: Poly, low: int) -> bool:
        """Make dim >= low for every allowed binding, raising symbol minimums; False if it cannot."""
        syms = sorted(dim.symbols())
        for _ in range(2 * MAX_MIN + 2):
            if self.minimum(dim) >= low:
                return True
            raisable = [s for s in syms if self.minimums[s] < MAX_MIN]
            if not raisable:
                return False
            for s in raisable:
                self.minimums[s] += 1
        return self.minimum(dim) >= low

    def pick(self, pred: Callable[[Val], bool] = lambda v: True, bools: bool = False) -> Val:
        """A value satisfying pred, favouring the latest statements (bool values only if asked)."""
        candidates = []
        for v in self.values:
            if pred(v) and (bools or v.dtype != "bool"):
                weight = 1 if v.is_input else (4 if v is self.defs[-1] else 2)
                candidates += [v] * weight
        if not candidates:
            raise Unsuitable
        val = self.ch.choice(candidates)
        self.uses[val.name] = self.uses.get(val.name, 0) + 1
        return val

    def partner_shape(self, shape: Sequence[Poly]) -> tuple[Poly, ...]:
        """A shape that broadcasts with `shape` (maybe widening it)."""
        out = []
        for d in shape:
            if d == ONE:
                out.append(self.random_dim() if self.ch.chance(0.5) else ONE)
            else:
                out.append(ONE if self.ch.chance(0.3) else d)
        if out and self.ch.chance(0.3):
            out = out[self.ch.integer(1, len(out)) :]
        elif len(out) < 3 and self.ch.chance(0.15):
            out.insert(0, self.random_dim())
        return tuple(out)

    def some_symbol(self) -> str | None:
        used = set()
        for v in self.inputs:
            for d in v.shape:
                used |= d.symbols()
        return self.ch.choice(sorted(used)) if used else None

    def axis_text(self, axis: int, rank: int) -> str:
        return str(axis - rank if self.ch.chance(0.3) else axis)

    def define(self, kind: str, target: str, text: str, val: Val, force_output: bool = False) -> Val:
        self.body.append(f"{target} = {text}")
        self.defs.append(val)
        self.kinds.append(kind)
        if force_output:
            self.forced.add(val.name)
        return val

    def array(self, kind: str, text: str, dtype: str, shape: Sequence[Poly]) -> Val:
        if len(shape) > MAX_RANK:
            raise Unsuitable
        val = Val(self.fresh("t"), dtype, tuple(shape))
        return self.define(kind, val.name, text, val)

    # -- driver --
    def generate(self) -> Program:
        first = self.new_input(self.dtype, self.random_shape())
        if first.rank == 0 or self.ch.chance(0.3):
            self.new_input(self.dtype, self.random_shape())
        n = self.ch.integer(1, self.max_statements)
        attempts = 0
        while len(self.defs) < n and attempts < 60:
            attempts += 1
            kind = self.ch.weighted(STATEMENT_WEIGHTS)
            saved = (dict(self.minimums), list(self.inputs), dict(self.uses), dict(self.ranges), list(self.helpers))
            try:
                getattr(self, f"st_{kind}")()
            except Unsuitable:
                self.minimums, self.inputs, self.uses, self.ranges, self.helpers = saved
        if not self.defs:
            x = self.pick()
            self.array("unary", f"{x.name} + {x.name}", x.dtype, x.shape)
        outputs = []
        for k, v in enumerate(self.defs):
            last = k == len(self.defs) - 1
            unused = self.uses.get(v.name, 0) == 0
            if last or v.name in self.forced or self.ch.chance(0.6 if unused else 0.2):
                outputs.append(v)
        dtypes = {v.dtype for v in self.values}
        return Program(
            self.name,
            self.inputs,
            outputs,
            self.body,
            dict(self.minimums),
            dtypes,
            self.kinds,
            self.ranges,
            self.helpers,
        )

    # -- array-form statements --
    def unary_table(self, dtype: str) -> tuple[str, ...]:
        if dtype == "f16":  # a step function of a value rounded to f16 amplifies one-ulp differences
            return tuple(t for t in FLOAT_UNARY if not any(f in t for f in STEP_FUNCTIONS))
        if dtype.startswith("u"):
            return tuple(t for t in INT_UNARY if unsigned_safe(t))
        return FLOAT_UNARY if is_float(dtype) else INT_UNARY

    def st_unary(self) -> None:
        x = self.pick()
        template = self.ch.choice(self.unary_table(x.dtype))
        symbol = self.some_symbol()
        if "{S}" in template and symbol is None:
            raise Unsuitable
        text = template.format(x=x.name, S=symbol, dt=x.dtype)
        self.array("unary", text, x.dtype, x.shape)

    def st_binary(self) -> None:
        a = self.pick()
        mode = self.ch.weighted({"same": 1, "existing": 4, "new": 3})
        b = None
        if mode == "same":
            b = a
        elif mode == "existing":
            try:
                b = self.pick(lambda v: v is not a and v.dtype == a.dtype and broadcast(a.shape, v.shape) is not None)
            except Unsuitable:
                b = None
        if b is None:
            if len(self.inputs) >= 5:
                raise Unsuitable
            b = self.new_input(a.dtype, self.partner_shape(a.shape))
        if self.ch.chance(0.3):
            a, b = b, a
        shape = broadcast(a.shape, b.shape)
        assert shape is not None
        table = FLOAT_BINARY if is_float(a.dtype) else INT_BINARY
        if a.dtype == "f16":
            table = tuple(t for t in table if "//" not in t and "%" not in t)
        if a.dtype.startswith("u"):
            table = tuple(t for t in table if unsigned_safe(t))
        template = self.ch.choice(table)
        self.array("binary", template.format(a=a.name, b=b.name), a.dtype, shape)

    def st_normalize(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        template = self.ch.choice(FLOAT_NORMALIZE if is_float(x.dtype) else INT_NORMALIZE)
        ax = self.axis_text(self.ch.integer(0, x.rank - 1), x.rank)
        self.array("normalize", template.format(x=x.name, ax=ax), x.dtype, x.shape)

    def st_reduce(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        ops = ["sum", "sum", "max", "min", "prod", "argmax", "argmin"] + (["mean", "mean"] if is_float(x.dtype) else [])
        op = self.ch.choice(ops)
        keepdims = self.ch.chance(0.35)
        kd = ", keepdims=True" if keepdims else ""
        if op.startswith("arg"):
            axis = self.ch.integer(0, x.rank - 1)
            shape = list(x.shape)
            if keepdims:
                shape[axis] = ONE
            else:
                del shape[axis]
            text = f"{op}({x.name}, axis={self.axis_text(axis, x.rank)}{kd})"
            self.array("reduce", text, "i64", shape)
            return
        form = self.ch.weighted({"all": 1, "one": 3, "tuple": 1.5})
        if form == "all":
            axes = list(range(x.rank))
            axis_arg = ""
        elif form == "one" or x.rank == 1:
            axes = [self.ch.integer(0, x.rank - 1)]
            axis_arg = f", axis={self.axis_text(axes[0], x.rank)}"
        else:
            axes = sorted(self.ch.shuffled(range(x.rank))[: self.ch.integer(1, x.rank)])
            axis_arg = ", axis=(" + ", ".join(self.axis_text(a, x.rank) for a in axes) + ",)"
        shape = [ONE if k in axes else d for k, d in enumerate(x.shape)] if keepdims else []
        if not keepdims:
            shape = [d for k, d in enumerate(x.shape) if k not in axes]
        self.array("reduce", f"{op}({x.name}{axis_arg}{kd})", x.dtype, shape)

    def st_reshape(self) -> None:
        x = self.pick(lambda v: v.rank >= 1, bools=True)
        factors = [f for d in x.shape for f in d.factors()]
        if self.ch.chance(0.3):
            factors = self.ch.shuffled(factors)
        ngroups = self.ch.integer(1, min(max(len(factors), 1), 4))
        cuts = sorted(self.ch.shuffled(range(1, len(factors)))[: ngroups - 1]) if len(factors) > 1 else []
        groups, start = [], 0
        for cut in cuts + [len(factors)]:
            groups.append(factors[start:cut])
            start = cut
        dims = [product(g) for g in groups]
        if len(dims) < 4 and self.ch.chance(0.2):
            dims.insert(self.ch.integer(0, len(dims)), ONE)
        texts = [d.render() for d in dims]
        if len(dims) == 1 and self.ch.chance(0.5):
            texts = ["-1"]
        elif self.ch.chance(0.3):
            # -1 is unambiguous only where every other dim is a nonzero constant
            for k in range(len(dims)):
                if all(d.is_const and d.value > 0 for j, d in enumerate(dims) if j != k):
                    texts[k] = "-1"
                    break
        self.array("reshape", f"reshape({x.name}, [{', '.join(texts)}])", x.dtype, dims)

    def st_transpose(self) -> None:
        x = self.pick(lambda v: v.rank >= 2, bools=True)
        form = self.ch.weighted({"perm": 3, "T": 1, "reverse": 1})
        if form == "perm":
            perm = self.ch.shuffled(range(x.rank))
            text = f"transpose({x.name}, [{', '.join(str(p) for p in perm)}])"
        else:
            perm = list(reversed(range(x.rank)))
            text = f"{x.name}.T" if form == "T" else f"transpose({x.name})"
        self.array("transpose", text, x.dtype, [x.shape[p] for p in perm])

    def st_slice(self) -> None:
        x = self.pick(lambda v: v.rank >= 1, bools=True)
        items, shape = [], []
        for d in x.shape:
            spec = self.ch.weighted(
                {
                    ":": 3,
                    "1:": 2,
                    "2:": 1,
                    ":-1": 1,
                    "1:-1": 1,
                    "::2": 2,
                    "1::2": 1.5,
                    "::-1": 2,
                    "::-2": 1,
                    "-2::-1": 1,
                    "::3": 0.5,
                    ":1": 0.5,
                    "0": 1,
                    "-1": 1,
                }
            )
            need = {"1:": 1, "2:": 2, ":-1": 1, "1:-1": 2, "-2::-1": 2, ":1": 1, "0": 1, "-1": 1}.get(spec, 0)
            if need and not self.require(d, need):
                spec = ":"
            length = {
                ":": d,
                "1:": d - 1,
                "2:": d - 2,
                ":-1": d - 1,
                "1:-1": d - 2,
                "::2": floordiv(d + 1, 2),
                "1::2": floordiv(d, 2),
                "::-1": d,
                "::-2": floordiv(d + 1, 2),
                "-2::-1": d - 1,
                "::3": floordiv(d + 2, 3),
                ":1": ONE,
            }.get(spec)
            items.append(spec)
            if length is not None:
                shape.append(length)
        if self.ch.chance(0.2) and items[0] == ":" and len(items) > 1:
            items[0] = "..."
        while len(items) > 1 and items[-1] == ":" and "..." not in items and self.ch.chance(0.5):
            items.pop()
        self.array("slice", f"{x.name}[{', '.join(items)}]", x.dtype, shape)

    def st_concat(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        axis = self.ch.integer(0, x.rank - 1)
        if self.ch.chance(0.25):  # stack
            parts = [x] + [self.partner_same(x) for _ in range(self.ch.integer(1, 2))]
            axis = self.ch.integer(0, x.rank)
            shape = list(x.shape)
            shape.insert(axis, Poly.const(len(parts)))
            order = self.ch.shuffled(parts)
            text = f"stack([{', '.join(p.name for p in order)}], {self.axis_text(axis, x.rank + 1)})"
            self.array("concat", text, x.dtype, shape)
            return
        parts = [x]
        for _ in range(self.ch.integer(1, 2)):
            mode = self.ch.weighted({"self": 1, "existing": 2, "new": 2})
            other = None
            if mode == "self":
                other = x
            elif mode == "existing":
                cands = [
                    v
                    for v in self.values
                    if v.dtype == x.dtype
                    and v.rank == x.rank
                    and all(a == b for k, (a, b) in enumerate(zip(v.shape, x.shape)) if k != axis)
                ]
                other = self.ch.choice(cands) if cands else None
            if other is None:
                if len(self.inputs) >= 5:
                    other = x
                else:
                    shape = list(x.shape)
                    shape[axis] = self.random_dim()
                    other = self.new_input(x.dtype, shape)
            parts.append(other)
        parts = self.ch.shuffled(parts)
        shape = list(x.shape)
        shape[axis] = sum((p.shape[axis] for p in parts), Poly())
        text = f"concat([{', '.join(p.name for p in parts)}], {self.axis_text(axis, x.rank)})"
        self.array("concat", text, x.dtype, shape)

    def partner_same(self, x: Val) -> Val:
        cands = [v for v in self.values if v is not x and v.dtype == x.dtype and v.shape == x.shape]
        if cands and self.ch.chance(0.6):
            return self.ch.choice(cands)
        if len(self.inputs) >= 5:
            return x
        return self.new_input(x.dtype, x.shape)

    def st_matmul(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        p = self.random_dim()
        form = self.ch.weighted({"right": 4, "left": 2, "gram": 1, "batched": 1})
        if form == "gram" and x.rank == 2:
            if self.ch.chance(0.5):
                text, shape = f"{x.name} @ {x.name}.T", [x.shape[0], x.shape[0]]
            else:
                text, shape = f"transpose({x.name}) @ {x.name}", [x.shape[1], x.shape[1]]
            self.array("matmul", text, x.dtype, shape)
            return
        if len(self.inputs) >= 5:
            raise Unsuitable
        if form == "left":
            if x.rank == 1:
                w = self.new_input(x.dtype, (p, x.shape[0]))
                shape = [p]
            else:
                w = self.new_input(x.dtype, (p, x.shape[-2]))
                shape = list(x.shape[:-2]) + [p, x.shape[-1]]
            self.array("matmul", f"{w.name} @ {x.name}", x.dtype, shape)
            return
        if form == "batched" and x.rank == 3:
            w = self.new_input(x.dtype, (x.shape[0], x.shape[2], p))
            self.array("matmul", f"{x.name} @ {w.name}", x.dtype, [x.shape[0], x.shape[1], p])
            return
        if self.ch.chance(0.2) and x.rank >= 2:
            w = self.new_input(x.dtype, (x.shape[-1],))
            self.array("matmul", f"{x.name} @ {w.name}", x.dtype, list(x.shape[:-1]))
            return
        w = self.new_input(x.dtype, (x.shape[-1], p))
        self.array("matmul", f"{x.name} @ {w.name}", x.dtype, list(x.shape[:-1]) + [p])

    def st_cast(self) -> None:
        x = self.pick()
        targets = [d for d in ("f32", "f64", "i32", "i64") if d != x.dtype]
        if self.dtype == "f16" and x.dtype != "f16":
            targets.append("f16")
        to = self.ch.choice(targets)
        inner = x.name
        if is_float(x.dtype) and not is_float(to):
            inner = f"{x.name} * 4.0"  # spread the values over several integers
        self.array("cast", f"cast({inner}, {to})", to, x.shape)

    def st_dims(self) -> None:
        x = self.pick()
        form = self.ch.weighted({"unsqueeze": 2, "squeeze": 1, "expand": 2, "flatten": 1})
        if form == "squeeze":
            ones = [k for k, d in enumerate(x.shape) if d == ONE]
            if not ones:
                raise Unsuitable
            axis = self.ch.choice(ones)
            shape = [d for k, d in enumerate(x.shape) if k != axis]
            self.array("dims", f"squeeze({x.name}, {self.axis_text(axis, x.rank)})", x.dtype, shape)
        elif form == "unsqueeze" or x.rank == 0:
            axis = self.ch.integer(0, x.rank)
            shape = list(x.shape)
            shape.insert(axis, ONE)
            self.array("dims", f"unsqueeze({x.name}, {self.axis_text(axis, x.rank + 1)})", x.dtype, shape)
        elif form == "expand":
            shape = [self.random_dim(known=True) if d == ONE else d for d in x.shape]
            if len(shape) < 3 and (shape == list(x.shape) or self.ch.chance(0.4)):
                shape.insert(0, self.random_dim(known=True))
            text = f"expand({x.name}, [{', '.join(d.render() for d in shape)}])"
            self.array("dims", text, x.dtype, shape)
        else:
            if x.rank < 2:
                raise Unsuitable
            start = self.ch.integer(0, x.rank - 2)
            end = self.ch.integer(start + 1, x.rank - 1)
            shape = list(x.shape[:start]) + [product(x.shape[start : end + 1])] + list(x.shape[end + 1 :])
            end_text = str(end - x.rank) if self.ch.chance(0.3) else str(end)
            self.array("dims", f"flatten({x.name}, {start}, {end_text})", x.dtype, shape)

    # -- index-form statements --
    def index_target(self, kind: str, lhs: list[str], extents: list[Poly], rhs: str, dtype: str, alone: set[str]):
        """Define `t[lhs] = rhs`. An index with no alone use in rhs gets one from a new carrier
        input added to rhs, or the target becomes a declared output (whose shape gives the range)."""
        if len(lhs) > MAX_RANK:
            raise Unsuitable
        missing = [i for i in lhs if i not in alone]
        force = False
        if missing:
            if len(self.inputs) < 5 and self.ch.chance(0.5):
                idx = missing if self.ch.chance(0.5) else [i for i in lhs if i in missing or self.ch.chance(0.3)]
                carrier = self.new_input(dtype, [extents[lhs.index(i)] for i in idx])
                op = self.ch.choice((" + ", " - ", " * ")) if is_float(dtype) else self.ch.choice((" + ", " * "))
                rhs = f"({rhs}){op}{carrier.name}[{', '.join(idx)}]"
            else:
                force = True
        val = Val(self.fresh("t"), dtype, tuple(extents))
        self.define(kind, f"{val.name}[{', '.join(lhs)}]", rhs, val, force_output=force)

    def wrap(self, term: str, dtype: str) -> str:
        """Maybe apply an elementwise function to an index-form term."""
        if not self.ch.chance(0.4):
            return term
        template = self.ch.choice([t for t in self.unary_table(dtype) if "{S}" not in t])
        return template.format(x=f"({term})" if not term.endswith("]") else term)

    def index_value(self, index: str, dtype: str) -> str:
        return f"cast({index}, {dtype})" if dtype != "i64" or self.ch.chance(0.5) else index

    def st_ix_map(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        idx = list(INDEX_NAMES[: x.rank])
        lhs = self.ch.shuffled(idx) if self.ch.chance(0.4) else idx
        extents = [x.shape[idx.index(i)] for i in lhs]
        term = self.wrap(f"{x.name}[{', '.join(idx)}]", x.dtype)
        extra = self.ch.weighted({"none": 2, "index": 1.5, "bias": 2})
        if extra == "index":
            i = self.ch.choice(idx)
            scale = lit(x.dtype, 0.5) if is_float(x.dtype) else "3"
            term = f"{term} + {self.index_value(i, x.dtype)} * {scale}"
        elif extra == "bias":
            sub = sorted(self.ch.shuffled(range(x.rank))[: self.ch.integer(1, x.rank)])
            bshape = tuple(x.shape[k] for k in sub)
            cands = [v for v in self.values if v is not x and v.dtype == x.dtype and v.shape == bshape]
            if cands and self.ch.chance(0.5):
                b = self.ch.choice(cands)
            elif len(self.inputs) < 5:
                b = self.new_input(x.dtype, bshape)
            else:
                b = x if bshape == x.shape else None
            if b is not None:
                term = f"{term} * {b.name}[{', '.join(idx[k] for k in sub)}]"
        self.index_target("ix_map", lhs, extents, term, x.dtype, set(idx))

    def st_ix_axis(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        idx = list(INDEX_NAMES[: x.rank])
        axis = self.ch.integer(0, x.rank - 1)
        v = idx[axis]
        d = x.shape[axis]
        zero = lit(x.dtype, 0)

        def acc(expr: str) -> str:
            items = list(idx)
            items[axis] = expr
            return f"{x.name}[{', '.join(items)}]"

        form = self.ch.weighted(
            {"shift": 2, "pad": 3, "stride": 2, "upsample": 1.5, "reverse": 1.5, "mod": 1.5, "stencil": 2}
        )
        alone = set(idx) - {v}
        if form == "shift":
            c = self.ch.integer(1, 2)
            if not self.require(d, c):
                raise Unsuitable
            rhs, extent = acc(f"{v} + {c}"), d - c
        elif form == "pad":
            p, q = self.ch.integer(1, 2), self.ch.integer(0, 2)
            fill = zero if self.ch.chance(0.7) else lit(x.dtype, -1)
            guard = self.ch.choice(
                (
                    f"({v} >= {p}) & ({v} - {p} < {d.render()})",
                    f"({v} - {p} < {d.render()}) & ({v} >= {p})",
                    f"~(({v} < {p}) | ({v} >= {(d + p).render()}))",
                )
            )
            rhs, extent = f"where({guard}, {acc(f'{v} - {p}')}, {fill})", d + p + q
        elif form == "stride":
            two = all(c % 2 == 0 for m, c in d.terms.items())
            half = floordiv(d, 2)
            if two or self.ch.chance(0.5):
                off = self.ch.choice(("", " + 1"))
                rhs, extent = acc(f"2*{v}{off}"), half
                if self.ch.chance(0.4):
                    rhs = f"{acc(f'2*{v}')} - {acc(f'2*{v} + 1')}"
            else:
                rhs, extent = acc(f"2*{v}"), floordiv(d + 1, 2)
        elif form == "upsample":
            c = self.ch.integer(2, 3)
            rhs, extent = acc(f"{v} // {c}"), d * c
        elif form == "reverse":
            rhs, extent = acc(f"{d.render()} - 1 - {v}"), d
        elif form == "mod":
            if len(d.terms) == 1 and (d.is_const or set(d.terms) == {(s,) for s in d.symbols()}):
                if not self.require(d, 1):
                    raise Unsuitable
                divisor = f"({d.render()})" if "*" in d.render() else d.render()
                rhs = acc(f"{v} % {divisor}")
            else:
                if not self.require(d, 2):
                    raise Unsuitable
                rhs = acc(f"{v} % 2")
            extent = self.ch.choice((d * 2, d + 1, self.random_dim(known=True)))
        else:  # stencil
            left = f"where({v} >= 1, {acc(f'{v} - 1')}, {zero})"
            right = f"where({v} + 1 < {d.render()}, {acc(f'{v} + 1')}, {zero})"
            rhs, extent = f"{left} + {acc(v)} * {lit(x.dtype, 2)} - {right}", d
            alone.add(v)
        rhs = self.wrap(rhs, x.dtype)
        if self.ch.chance(0.3):
            rhs = f"({rhs}) * {self.index_value(v, x.dtype)}" if not is_float(x.dtype) else rhs
        lhs = list(idx)
        extents = list(x.shape)
        extents[axis] = extent
        if self.ch.chance(0.3):
            order = self.ch.shuffled(range(len(lhs)))
            lhs, extents = [lhs[k] for k in order], [extents[k] for k in order]
        self.index_target(f"ix_{form}", lhs, extents, rhs, x.dtype, alone)

    def st_ix_reduce(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        ops = ["sum", "sum", "max", "min", "prod"] + (["mean"] if is_float(x.dtype) else [])
        op = self.ch.choice(ops)
        if x.rank == 1:  # matrix-vector product with a new matrix
            if len(self.inputs) >= 5:
                raise Unsuitable
            w = self.new_input(x.dtype, (self.random_dim(), x.shape[0]))
            rhs = f"{op}[k]({w.name}[i, k] * {x.name}[k])"
            self.index_target("ix_reduce", ["i"], [w.shape[0]], rhs, x.dtype, {"i"})
            return
        reduced = sorted(self.ch.shuffled(range(x.rank))[: self.ch.integer(1, x.rank - 1)])
        names, rnames = [], []
        lhs, extents = [], []
        for k in range(x.rank):
            if k in reduced:
                names.append(REDUCE_NAMES[len(rnames)])
                rnames.append(names[-1])
            else:
                names.append(INDEX_NAMES[len(lhs)])
                lhs.append(names[-1])
                extents.append(x.shape[k])
        term = f"{x.name}[{', '.join(names)}]"
        extra = self.ch.weighted({"none": 2, "weight": 2, "wrap": 1, "tri": 1})
        if extra == "weight" and len(self.inputs) < 5:
            k = reduced[0]
            w = self.new_input(x.dtype, (x.shape[k],))
            term = f"{term} * {w.name}[{names[k]}]"
        elif extra == "wrap":
            term = self.wrap(term, x.dtype)
        elif extra == "tri":
            term = f"where({rnames[0]} <= {lhs[0]}, {term}, {lit(x.dtype, 0)})"
        binding = ", ".join(rnames)
        if self.ch.chance(0.2):
            binding = ", ".join(f"{r} < {x.shape[reduced[n]].render()}" for n, r in enumerate(rnames))
        rhs = f"{op}[{binding}]({term})"
        if self.ch.chance(0.3):
            rhs = f"{rhs} + {x.name}[{', '.join(n if n in lhs else '0' for n in names)}]"
            for k in reduced:
                if not self.require(x.shape[k], 1):
                    raise Unsuitable
        if self.ch.chance(0.3):
            order = self.ch.shuffled(range(len(lhs)))
            lhs, extents = [lhs[k] for k in order], [extents[k] for k in order]
        self.index_target("ix_reduce", lhs, extents, rhs, x.dtype, set(lhs))

    def st_ix_window(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        idx = list(INDEX_NAMES[: x.rank])
        axis = self.ch.integer(0, x.rank - 1)
        d, v = x.shape[axis], idx[axis]
        c = self.ch.integer(2, 3)
        if not self.require(d, c - 1):
            raise Unsuitable
        items = list(idx)
        items[axis] = f"{v} + r"
        access = f"{x.name}[{', '.join(items)}]"
        op = self.ch.choice(("sum", "sum", "max", "min"))
        if len(self.inputs) < 5 and self.ch.chance(0.6):
            w = self.new_input(x.dtype, (Poly.const(c),))
            rhs = f"{op}[r]({access} * {w.name}[r])"
        else:
            rhs = f"{op}[r < {c}]({access} * {self.index_value('r', x.dtype)})"
        extents = list(x.shape)
        extents[axis] = d - (c - 1)
        self.index_target("ix_window", idx, extents, rhs, x.dtype, set(idx) - {v})

    def st_ix_conv(self) -> None:
        x = self.pick(lambda v: v.rank >= 1)
        idx = list(INDEX_NAMES[: x.rank])
        axis = self.ch.integer(0, x.rank - 1)
        d, v = x.shape[axis], idx[axis]
        items = list(idx)
        items[axis] = f"{v} + r - 1"
        access = f"{x.name}[{', '.join(items)}]"
        guard = f"({v} + r >= 1) & ({v} + r <= {d.render()})"
        if len(self.inputs) >= 5:
            raise Unsuitable
        w = self.new_input(x.dtype, (Poly.const(3),))
        rhs = f"sum[r](where({guard}, {access}, {lit(x.dtype, 0)}) * {w.name}[r])"
        self.index_target("ix_conv", idx, list(x.shape), rhs, x.dtype, set(idx) - {v})

    def st_ix_mask(self) -> None:
        x = self.pick(lambda v: v.rank >= 2)
        idx = list(INDEX_NAMES[: x.rank])
        a, b = sorted(self.ch.shuffled(range(x.rank))[:2])
        ia, ib = idx[a], idx[b]
        if x.shape[a] == x.shape[b] and self.ch.chance(0.4):  # diagonal
            items = list(idx)
            items[b] = ia
            lhs = [i for i in idx if i != ib]
            extents = [x.shape[k] for k in range(x.rank) if k != b]
            self.index_target("ix_mask", lhs, extents, f"{x.name}[{', '.join(items)}]", x.dtype, set(lhs))
            return
        cond = self.ch.choice((f"{ib} <= {ia}", f"{ia} < {ib}", f"{ia} - {ib} >= 1", f"({ia} + {ib}) % 2 == 0"))
        fill = "-inf" if is_float(x.dtype) and self.ch.chance(0.2) else lit(x.dtype, 0)
        rhs = f"where({cond}, {x.name}[{', '.join(idx)}], {fill})"
        self.index_target("ix_mask", idx, list(x.shape), rhs, x.dtype, set(idx))

    def st_ix_matmul(self) -> None:
        x = self.pick(lambda v: v.rank == 2)
        if len(self.inputs) >= 5:
            raise Unsuitable
        w = self.new_input(x.dtype, (x.shape[1], self.random_dim()))
        rhs = f"sum[k]({x.name}[i, k] * {w.name}[k, j])"
        self.index_target("ix_matmul", ["i", "j"], [x.shape[0], w.shape[1]], rhs, x.dtype, {"i", "j"})

    # -- bool values, library calls, gathers and the rest of the shape functions --
    def st_compare(self) -> None:
        """A bool value (a comparison), later used by where(...), & | ^ ~ or cast."""
        a = self.pick()
        b = self.pick(lambda v: v.dtype == a.dtype and broadcast(a.shape, v.shape) is not None)
        op = self.ch.choice(("<", "<=", ">", ">=", "==", "!="))
        rhs = b.name if self.ch.chance(0.7) else lit(a.dtype, self.ch.choice((0, 1, -1)))
        shape = broadcast(a.shape, b.shape) if rhs == b.name else a.shape
        self.array("compare", f"{a.name} {op} {rhs}", "bool", shape)
        if len(self.defs) < self.max_statements and self.ch.chance(0.6):
            with contextlib.suppress(Unsuitable):
                self.st_select()

    def st_select(self) -> None:
        """A consumer of bool values."""
        c = self.pick(lambda v: v.dtype == "bool", bools=True)
        form = self.ch.weighted({"where": 4, "logic": 2, "cast": 1})
        if form == "logic":
            d = self.pick(lambda v: v.dtype == "bool" and broadcast(c.shape, v.shape) is not None, bools=True)
            text = self.ch.choice(("{a} & {b}", "{a} | ~{b}", "{a} ^ {b}", "~({a} & {b})")).format(a=c.name, b=d.name)
            self.array("select", text, "bool", broadcast(c.shape, d.shape))
            return
        if form == "cast":
            to = self.ch.choice(("i32", "i64", "f32", "f64"))
            self.array("select", f"cast({c.name}, {to})", to, c.shape)
            return
        a = self.pick(lambda v: broadcast(c.shape, v.shape) is not None)
        b = self.pick(lambda v: v.dtype == a.dtype and broadcast(broadcast(c.shape, a.shape), v.shape) is not None)
        other = b.name if self.ch.chance(0.7) else lit(a.dtype, 0)
        shape = broadcast(broadcast(c.shape, a.shape), b.shape if other == b.name else ())
        self.array("select", f"where({c.name}, {a.name}, {other})", a.dtype, shape)

    def st_call(self) -> None:
        """A call of a rank-polymorphic composite of the bundled op library (over the last axis)."""
        x = self.pick(lambda v: v.rank >= 1 and v.dtype in ("f32", "f64", "f16", "i32", "i64"))
        d, batch = x.shape[-1], list(x.shape[:-1])
        names = ["flip", "tile", "clamp", "reduce_sum", "reduce_max", "reduce_min", "reduce_argmax", "concat_last"]
        if is_float(x.dtype):
            names += ["softmax", "log_softmax", "l2_normalize", "leaky_relu", "elu", "hard_swish", "mish"]
            names += ["softsign", "layernorm", "rmsnorm", "logsumexp", "moments", "reduce_mean", "var", "pad_last"]
        if all(c % 2 == 0 for m, c in d.terms.items() if m) and d.value % 2 == 0 and not d.is_const:
            names.append("split")
        name = self.ch.choice(names)
        dt = x.dtype
        if name in ("layernorm", "rmsnorm"):
            if len(self.inputs) >= 5:
                raise Unsuitable
            args = [x.name] + [self.new_input(dt, (d,)).name for _ in range(2 if name == "layernorm" else 1)]
            self.array("call", f"{name}({', '.join(args)})", dt, x.shape)
        elif name in ("moments", "split"):
            a, b = Val(self.fresh("t"), dt, ()), Val(self.fresh("t"), dt, ())
            a.shape = b.shape = tuple(batch + ([ONE] if name == "moments" else [floordiv(d, 2)]))
            self.body.append(f"{a.name}, {b.name} = {name}({x.name})")
            self.defs += [a, b]
            self.kinds.append("call")
        elif name == "tile":
            c = self.ch.integer(2, 3)
            self.array("call", f"tile({x.name}, reps={c})", dt, batch + [d * c])
        elif name == "pad_last":
            before, after = self.ch.integer(0, 2), self.ch.integer(0, 2)
            text = f"pad_last({x.name}, before={before}, after={after}, value={self.ch.choice(('0.0', '-1.5'))})"
            self.array("call", text, dt, batch + [d + before + after])
        elif name == "concat_last":
            if len(self.inputs) >= 5:
                raise Unsuitable
            y = self.new_input(dt, batch + [self.random_dim()])
            self.array("call", f"concat_last({x.name}, {y.name})", dt, batch + [d + y.shape[-1]])
        elif name.startswith("reduce_") or name in ("logsumexp", "var"):
            if name in ("logsumexp", "reduce_argmax") and not self.require(d, 1):
                raise Unsuitable
            self.array("call", f"{name}({x.name})", "i64" if name == "reduce_argmax" else dt, batch)
        elif name == "leaky_relu":
            self.array("call", f"leaky_relu({x.name}, negative_slope=0.25)", dt, x.shape)
        else:
            self.array("call", f"{name}({x.name})", dt, x.shape)

    def st_take(self) -> None:
        """A gather by a new integer input whose values are in [-dim, dim) (test.ranges)."""
        x = self.pick(lambda v: v.rank >= 1)
        if len(self.inputs) >= 5:
            raise Unsuitable
        axis = self.ch.integer(0, x.rank - 1)
        d = x.shape[axis]
        if not self.require(d, 1):
            raise Unsuitable
        idx = self.new_input(self.ch.choice(("i64", "i32")), self.random_shape(self.ch.integer(0, 2)))
        low = f"-({d.render()})" if self.ch.chance(0.5) else "0"
        self.ranges[idx.name] = (low, d.render())
        shape = list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1 :])
        self.array("take", f"take({x.name}, {idx.name}, {self.axis_text(axis, x.rank)})", x.dtype, shape)

    def st_einsum(self) -> None:
        x = self.pick(lambda v: 1 <= v.rank <= 3)
        dt = x.dtype
        if x.rank == 1:
            form = self.ch.choice(("i->", "i,j->ij", "i,i->"))
        elif x.rank == 2:
            form = self.ch.choice(("ij->ji", "ij->i", "ij->j", "ij->", "ij,jk->ik", "ij,ij->i", "ij,j->i", "ij,ik->jk"))
        else:
            form = self.ch.choice(("bij,bjk->bik", "bij->bji", "bij->b", "bij,bij->bj"))
        inputs, output = form.split("->")
        letters = dict(zip(inputs.split(",")[0], x.shape))
        operands = [x]
        for spec in inputs.split(",")[1:]:
            for c in spec:
                letters.setdefault(c, self.random_dim())
            shape = tuple(letters[c] for c in spec)
            if shape == x.shape and self.ch.chance(0.4):
                operands.append(x)
            elif len(self.inputs) < 5:
                operands.append(self.new_input(dt, shape))
            else:
                raise Unsuitable
        text = f'einsum("{form}", {", ".join(v.name for v in operands)})'
        self.array("einsum", text, dt, [letters[c] for c in output])

    def st_shape_fn(self) -> None:
        x = self.pick()
        form = self.ch.weighted({"tri": 2, "pad": 3, "arange": 2, "full": 2})
        dt = x.dtype
        if form == "tri":
            if x.rank < 2:
                raise Unsuitable
            fn, k = self.ch.choice(("tril", "triu")), self.ch.integer(-2, 2)
            text = f"{fn}({x.name}, k={k})" if self.ch.chance(0.6) else f"{fn}({x.name})"
            self.array("shape_fn", text, dt, x.shape)
        elif form == "pad":
            if x.rank < 1:
                raise Unsuitable
            widths = [(self.ch.integer(0, 2), self.ch.integer(0, 2)) for _ in x.shape]
            text = ", ".join(f"[{lo}, {hi}]" for lo, hi in widths)
            value = f", value={lit(dt, self.ch.choice((1, -2)))}" if self.ch.chance(0.5) else ""
            shape = [dim + lo + hi for dim, (lo, hi) in zip(x.shape, widths)]
            self.array("shape_fn", f"pad({x.name}, [{text}]{value})", dt, shape)
        elif form == "arange":
            if x.rank < 1:
                raise Unsuitable
            d = x.shape[-1]
            scale = lit(dt, 0.5) if is_float(dt) else "3"
            self.array("shape_fn", f"{x.name} - arange({d.render()}, dtype={dt}) * {scale}", dt, x.shape)
        else:
            dims = ", ".join(d.render() for d in x.shape)
            fill = self.ch.choice(
                (f"full([{dims}], {lit(dt, 2)}, {dt})", f"zeros([{dims}], {dt})", f"ones([{dims}], {dt})")
            )
            self.array("shape_fn", f"maximum({x.name}, {fill})", dt, x.shape)

    def st_ix_nested(self) -> None:
        """Nested index-form reductions: y[i] = op1[k](x[i, k] * op2[r](w[k, r]))."""
        x = self.pick(lambda v: v.rank == 2)
        if len(self.inputs) >= 5:
            raise Unsuitable
        w = self.new_input(x.dtype, (x.shape[1], self.random_dim()))
        outer = self.ch.choice(("sum", "max", "min"))
        inner = self.ch.choice(("sum", "max", "prod") + (("mean",) if is_float(x.dtype) else ()))
        rhs = f"{outer}[k]({x.name}[i, k] * {inner}[r]({w.name}[k, r] - {x.name}[i, k]))"
        self.index_target("ix_nested", ["i"], [x.shape[0]], rhs, x.dtype, {"i"})

    def st_helper(self) -> None:
        """A call of a rank-polymorphic composite defined next to this program."""
        x = self.pick(lambda v: v.rank >= 1)
        body = self.ch.choice(HELPER_BODIES)
        name = f"{self.name}_h{len(self.helpers)}"
        types = ", ".join(f'"{d}"' for d in dict.fromkeys([x.dtype, "f32", "i64"]))
        self.helpers.append(
            "\n".join(
                [
                    f"[composite.{name}]",
                    f"types = {{ T = [{types}] }}",
                    'inputs = ["x: T[..., D]"]',
                    'outputs = ["y: T[..., D]"]',
                    "params = { a = 2 }",
                    f'body = """\n{body}\n"""',
                    "",
                ]
            )
        )
        args = x.name + (f", a={self.ch.integer(0, 3)}" if self.ch.chance(0.5) else "")
        self.array("helper", f"{name}({args})", x.dtype, x.shape)


def generate(ch: Chooser, name: str, max_statements: int = 6) -> Program:
    return Generator(ch, name, max_statements).generate()


def random_program(rng: random.Random, name: str, max_statements: int = 6) -> Program:
    return generate(RandomChooser(rng), name, max_statements)


@st.composite
def programs(draw, name: str = "p", max_statements: int = 6) -> Program:
    """A strategy of one random well-typed composite, every decision drawn from hypothesis (which
    favours small and boundary choices: few statements, low ranks, the first options)."""
    return generate(DrawChooser(draw), name, max_statements)


@st.composite
def seeded_programs(draw, name: str = "p", max_statements: int = 6, salt: str = "") -> Program:
    """A strategy of one random composite whose decisions come from a `random.Random` seeded by
    a drawn integer: uniform over the generator's choices, so more varied than `programs()`."""
    seed = draw(st.integers(0, 2**32 - 1))
    return random_program(random.Random(f"{seed}-{salt}-{name}"), name, max_statements)


@st.composite
def program_batches(draw, size: int = 8, prefix: str = "p", native: int = 2, max_statements: int = 6) -> list[Program]:
    """A strategy of `size` composites (named prefix0, prefix1, ...) to compile as one file: the
    first `native` from `programs()`, the rest from a `random.Random` seeded by one drawn
    integer and the native programs' text. (Hypothesis often draws the same integer in
    different examples but never runs the same choice sequence twice, so the seed differs
    from example to example; and everything stays a function of the draws, as replaying a
    failing example needs.)"""
    out = [draw(programs(f"{prefix}{k}", max_statements)) for k in range(native)]
    seed = draw(st.integers(0, 2**64 - 1))
    salt = hashlib.sha256((batch_toml(out) + str(seed)).encode()).hexdigest()
    rng = random.Random(salt)
    out += [random_program(rng, f"{prefix}{k}", max_statements) for k in range(native, size)]
    return out
