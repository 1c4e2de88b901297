"""The primitive ops: one declaration per elementwise op and reduction of the body language and IR.

An `Op` states everything the compiler knows about one op: how many operands it takes, which
dtypes it accepts (its rule), what it means (a numpy function, for the reference interpreter),
what it costs, how it lowers to the IR's primitives, how each backend spells it, and the row
`catenc test-runtime` checks it with. The checker, the IR builder and its passes, the renderers,
the reference and the coverage report read their tables from here (the names below), so adding
an elementwise op is one entry plus its tests. Every derived table follows declaration order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from catenc.enums import StrEnum

FLOATS = ("f32", "f64", "f16", "bf16")
INTEGERS = ("i32", "i64", "i8", "u8")
NUMBERS = FLOATS + INTEGERS


class Rule(StrEnum):
    """Which operands an op takes and what it gives (docs/language.md, sections 5 and 6)."""

    FLOAT = "float"
    NUMERIC = "numeric"
    FLOAT_PREDICATE = "float_predicate"
    ORDER = "order"
    EQUALITY = "equality"
    BITS = "bits"
    SELECT = "select"
    CAST = "cast"
    ROUND_HALF = "round_half"


RULES: dict[Rule, str] = {
    Rule.FLOAT: "float operands (literals alone give f32); the result has their dtype",
    Rule.NUMERIC: "numbers, not bool; the result has their dtype",
    Rule.FLOAT_PREDICATE: "a float operand; the result is bool",
    Rule.ORDER: "numbers; the result is bool",
    Rule.EQUALITY: "operands of any one dtype; the result is bool",
    Rule.BITS: "bool or integer operands; the result has their dtype",
    Rule.SELECT: "a bool condition and two values of one dtype",
    Rule.CAST: "anything; the result has the dtype given",
    Rule.ROUND_HALF: "an f32 value rounded to f16 or bf16 precision (IR only)",
}


class OpCost(StrEnum):
    """What a pass may duplicate freely (cheap) and what it should compute once."""

    CHEAP = "cheap"
    DIVIDE = "divide"
    TRANSCENDENTAL = "transcendental"
    REDUCTION = "reduction"


class OpKind(StrEnum):
    """A function called by name, an operator written as a symbol, or a primitive of the IR only."""

    FUNCTION = "function"
    OPERATOR = "operator"
    IR = "ir"


COSTS = tuple(OpCost)
KINDS = tuple(OpKind)


@dataclass(frozen=True, kw_only=True)
class Spelling:
    """How the C-family renderers spell an op: templates over the operands {0}, {1} with {s} the
    libm suffix (f for float), {t} the dtype name, {c}/{u} its C type and unsigned type, {one} 1."""

    float: str | None = None  # float operands
    int: str | None = None  # integer operands (arithmetic wraps: computed in the unsigned type)
    bool: str | None = None  # bool operands
    any: str | None = None  # operands of every dtype (comparisons)
    vector_f32: str | None = None  # routine of templates/vecmath.c.j2 for values computed in float
    cuda: str | None = None  # the float template on CUDA where it differs from C's
    opencl: str | None = None  # the float template on OpenCL where it differs from C's


@dataclass(frozen=True, kw_only=True)
class Row:
    """The row `prim_<name>` of `catenc test-runtime` (docs/cli.md): `body` over x (and w) of
    shape [N, C] for every dtype of `dtypes`, checked against the numpy expression `reference`."""

    name: str
    body: str
    reference: str
    dtypes: tuple[str, ...]
    ranges: tuple[tuple[str, float, float], ...] = ()
    output: str = "T"  # the output's dtype (T: the input's)
    operands: int = 1  # x, or x and w
    reduced: bool = False  # the output drops the last axis


@dataclass(frozen=True, kw_only=True)
class Op:
    """One elementwise op. `primitive`: an op of the IR's Unary/Binary nodes under this name;
    otherwise `lowering` spells it in primitives over x (and y), unless ir/build.py lowers it."""

    name: str
    arity: int
    rule: Rule
    cost: OpCost
    kind: OpKind = OpKind.FUNCTION
    primitive: bool = True
    lowering: str | None = None
    numpy: Callable[..., np.ndarray] | None = None  # the meaning on numpy arrays (reference)
    numpy_int: Callable[..., np.ndarray] | None = None  # on integer operands, where it differs
    c: Spelling = Spelling()
    rows: tuple[Row, ...] = ()
    doc: str = ""

    @property
    def vector_math(self) -> bool:
        """Whether a branch-free vector routine computes it in float."""
        return self.c.vector_f32 is not None


@dataclass(frozen=True, kw_only=True)
class Reduction:
    """One reduction: `surface`, a function of the body language; `primitive`, an op of the IR's
    Reduce nodes (mean is a sum divided by the count)."""

    name: str
    numpy: Callable[..., np.ndarray] | None
    surface: bool = True
    primitive: bool = True
    rows: tuple[Row, ...] = ()
    cost: OpCost = OpCost.REDUCTION


# ---- numpy meanings that numpy lacks or spells differently -------------------------------------


def _math64(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    """A function of the math module applied elementwise, as float64 (numpy has no erf)."""
    ufunc = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(ufunc(np.asarray(x, dtype=np.float64)), dtype=np.float64)


erf64 = _math64(math.erf)
erfc64 = _math64(math.erfc)  # 1 - erf(x) loses every digit where erf(x) nears 1


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + erf64(x.astype(np.float64) / math.sqrt(2.0)))).astype(x.dtype)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, dtype=x.dtype) * x * x * x)))


def _int_pow(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """Integer powers as C computes them: a negative exponent gives 1/base truncated."""
    base, exponent = np.broadcast_arrays(base, exponent)
    safe = np.where(exponent < 0, 0, exponent)
    out = np.power(base, safe)
    negative = exponent < 0
    one = base == 1
    minus_one = base == -1 if np.issubdtype(base.dtype, np.signedinteger) else np.zeros_like(one)
    special = np.where(one, 1, np.where(minus_one, np.where(exponent % 2 == 0, 1, -1), 0))
    return np.where(negative, special, out).astype(base.dtype)


def _int_floordiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer floor division; by zero gives 0 (docs/language.md)."""
    return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b)))


def _int_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer modulo with the divisor's sign; by zero gives 0."""
    return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))


# ---- declarations ------------------------------------------------------------------------------


def _libm(name: str) -> str:
    return name + "{s}({0})"


def _fn_row(name: str, reference: str, low: float, high: float) -> tuple[Row, ...]:
    """The row of a unary float function, its input drawn from [low, high]."""
    return (Row(name=name, body=f"y = {name}(x)", reference=reference, dtypes=FLOATS, ranges=(("x", low, high),)),)


def _unary_float(
    name: str, cost: OpCost, numpy, reference: str, low: float, high: float, vector: str | None = None
) -> Op:
    """A float function that is also an IR primitive, spelled as libm's function of its name."""
    spelling = Spelling(float=_libm(name), vector_f32=vector)
    return Op(
        name=name,
        arity=1,
        rule=Rule.FLOAT,
        cost=cost,
        numpy=numpy,
        c=spelling,
        rows=_fn_row(name, reference, low, high),
    )


def _composite(name: str, lowering: str, numpy, reference: str, low: float, high: float) -> Op:
    """A float function of the body language that lowers to several primitives."""
    return Op(
        name=name,
        arity=1,
        rule=Rule.FLOAT,
        cost=OpCost.TRANSCENDENTAL,
        primitive=False,
        lowering=lowering,
        numpy=numpy,
        rows=_fn_row(name, reference, low, high),
    )


def _operator(name: str, rule: Rule, numpy, body: str, reference: str, dtypes, c: Spelling, **kw) -> Op:
    """A binary operator of the body language that is also an IR primitive."""
    row = Row(
        name=kw.pop("row_name", name),
        body=body,
        reference=reference,
        dtypes=dtypes,
        ranges=kw.pop("ranges", ()),
        output=kw.pop("output", "T"),
        operands=2,
    )
    return Op(
        name=name,
        arity=2,
        rule=rule,
        cost=kw.pop("cost", OpCost.CHEAP),
        kind=OpKind.OPERATOR,
        numpy=numpy,
        c=c,
        rows=(row, *kw.pop("rows", ())),
        **kw,
    )


def _compare(name: str, symbol: str, numpy, rule: Rule, primitive: bool, lowering: str | None = None) -> Op:
    row = Row(name=name, body=f"y = x {symbol} w", reference=f"x {symbol} w", dtypes=NUMBERS, output="bool", operands=2)
    spelling = Spelling(any=f"({{0}} {symbol} {{1}})") if primitive else Spelling()
    return Op(
        name=name,
        arity=2,
        rule=rule,
        cost=OpCost.CHEAP,
        kind=OpKind.OPERATOR,
        primitive=primitive,
        lowering=lowering,
        numpy=numpy,
        c=spelling,
        rows=(row,),
    )


def _wrapped(symbol: str) -> Spelling:
    """+ - *: exact on floats; on integers computed in the unsigned type, so they wrap."""
    return Spelling(float=f"({{0}} {symbol} {{1}})", int=f"({{c}})(({{u}}){{0}} {symbol} ({{u}}){{1}})")


def _helper(name: str, float_: bool = True) -> Spelling:
    """A prelude helper per dtype, catenc_<name>_<dtype>."""
    template = f"catenc_{name}_{{t}}({{0}}, {{1}})"
    return Spelling(float=template if float_ else None, int=template)


_OPS: tuple[Op, ...] = (
    # -- numbers --
    Op(
        name="abs",
        arity=1,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        numpy=np.abs,
        c=Spelling(float="fabs{s}({0})", int="({0} < 0 ? ({c})(0 - ({u}){0}) : {0})"),
        rows=(Row(name="abs", body="y = abs(x)", reference="np.abs(x)", dtypes=NUMBERS),),
    ),
    Op(
        name="neg",
        arity=1,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        numpy=np.negative,
        numpy_int=lambda x: (np.zeros_like(x) - x).astype(x.dtype),
        c=Spelling(float="(-{0})", int="({c})(0 - ({u}){0})"),
        rows=(Row(name="neg", body="y = neg(x)", reference="-x", dtypes=NUMBERS),),
    ),
    Op(
        name="sign",
        arity=1,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        primitive=False,
        numpy=np.sign,
        rows=(Row(name="sign", body="y = sign(x)", reference="np.sign(x)", dtypes=NUMBERS),),
    ),
    Op(
        name="relu",
        arity=1,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        primitive=False,
        lowering="max(x, 0)",
        numpy=lambda x: np.maximum(x, np.zeros((), x.dtype)),
        rows=(Row(name="relu", body="y = relu(x)", reference="np.maximum(x, 0)", dtypes=NUMBERS),),
    ),
    # -- exponentials and logarithms --
    _unary_float("exp", OpCost.TRANSCENDENTAL, np.exp, "np.exp(x)", -5, 5, "catenc_vexp_f32"),
    _unary_float("exp2", OpCost.TRANSCENDENTAL, np.exp2, "np.exp2(x)", -5, 5),
    _unary_float("log", OpCost.TRANSCENDENTAL, np.log, "np.log(x)", 0.01, 10, "catenc_vlog_f32"),
    _unary_float("log2", OpCost.TRANSCENDENTAL, np.log2, "np.log2(x)", 0.01, 10),
    _unary_float("log1p", OpCost.TRANSCENDENTAL, np.log1p, "np.log1p(x)", -0.9, 10, "catenc_vlog1p_f32"),
    _unary_float("expm1", OpCost.TRANSCENDENTAL, np.expm1, "np.expm1(x)", -5, 5, "catenc_vexpm1_f32"),
    # -- roots and reciprocals --
    _unary_float("sqrt", OpCost.DIVIDE, np.sqrt, "np.sqrt(x)", 0, 10),
    _composite("rsqrt", "recip(sqrt(x))", lambda x: 1.0 / np.sqrt(x), "1 / np.sqrt(x)", 0.01, 10),
    _composite("reciprocal", "recip(x)", lambda x: 1.0 / x, "1 / x", 0.1, 10),
    Op(name="recip", arity=1, rule=Rule.FLOAT, cost=OpCost.DIVIDE, kind=OpKind.IR, c=Spelling(float="({one} / {0})")),
    # -- trigonometric and hyperbolic --
    _unary_float("sin", OpCost.TRANSCENDENTAL, np.sin, "np.sin(x)", -6, 6),
    _unary_float("cos", OpCost.TRANSCENDENTAL, np.cos, "np.cos(x)", -6, 6),
    _unary_float("tan", OpCost.TRANSCENDENTAL, np.tan, "np.tan(x)", -1.5, 1.5),
    _unary_float("tanh", OpCost.TRANSCENDENTAL, np.tanh, "np.tanh(x)", -5, 5, "catenc_vtanh_f32"),
    _unary_float("sinh", OpCost.TRANSCENDENTAL, np.sinh, "np.sinh(x)", -5, 5),
    _unary_float("cosh", OpCost.TRANSCENDENTAL, np.cosh, "np.cosh(x)", -5, 5),
    _unary_float("asin", OpCost.TRANSCENDENTAL, np.arcsin, "np.arcsin(x)", -1, 1),
    _unary_float("acos", OpCost.TRANSCENDENTAL, np.arccos, "np.arccos(x)", -1, 1),
    _unary_float("atan", OpCost.TRANSCENDENTAL, np.arctan, "np.arctan(x)", -5, 5),
    # -- special functions --
    _unary_float(
        "erf",
        OpCost.TRANSCENDENTAL,
        erf64,
        "np.vectorize(math.erf)(x.astype(np.float64))",
        -3,
        3,
        "catenc_verf_f32",
    ),
    _unary_float("erfc", OpCost.TRANSCENDENTAL, erfc64, "np.vectorize(math.erfc)(x.astype(np.float64))", -3, 3),
    # -- rounding --
    _unary_float("floor", OpCost.CHEAP, np.floor, "np.floor(x)", -5, 5),
    _unary_float("ceil", OpCost.CHEAP, np.ceil, "np.ceil(x)", -5, 5),
    Op(
        name="round",
        arity=1,
        rule=Rule.FLOAT,
        cost=OpCost.CHEAP,
        numpy=np.round,
        c=Spelling(float="rint{s}({0})"),
        rows=_fn_row("round", "np.round(x)", -5, 5),
        doc="half to even, like numpy",
    ),
    _unary_float("trunc", OpCost.CHEAP, np.trunc, "np.trunc(x)", -5, 5),
    # -- activations --
    _composite(
        "sigmoid",
        "recip(add(1, exp(neg(x))))",
        _sigmoid,
        "1 / (1 + np.exp(-x.astype(np.float64)))",
        -8,
        8,
    ),
    _composite(
        "silu",
        "mul(x, sigmoid(x))",
        lambda x: x * _sigmoid(x),
        "x / (1 + np.exp(-x.astype(np.float64)))",
        -8,
        8,
    ),
    _composite(
        "gelu",
        "mul(mul(0.5, x), add(1, erf(mul(x, 0.7071067811865476))))",
        _gelu,
        "0.5 * x * (1 + np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2)))",
        -4,
        4,
    ),
    _composite(
        "gelu_tanh",
        "mul(mul(0.5, x), add(1, tanh(mul(0.7978845608028654, add(x, mul(0.044715, mul(mul(x, x), x)))))))",
        _gelu_tanh,
        "0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))",
        -4,
        4,
    ),
    _composite(
        "softplus",
        "add(max(x, 0), log1p(exp(neg(abs(x)))))",
        lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
        "np.logaddexp(0, x.astype(np.float64))",
        -8,
        8,
    ),
    # -- float predicates --
    Op(
        name="isnan",
        arity=1,
        rule=Rule.FLOAT_PREDICATE,
        cost=OpCost.CHEAP,
        numpy=np.isnan,
        c=Spelling(float="(isnan({0}) != 0)"),
        rows=(Row(name="isnan", body="y = isnan(x / x)", reference="np.isnan(x / x)", dtypes=FLOATS, output="bool"),),
    ),
    Op(
        name="isinf",
        arity=1,
        rule=Rule.FLOAT_PREDICATE,
        cost=OpCost.CHEAP,
        numpy=np.isinf,
        c=Spelling(float="(isinf({0}) != 0)"),
        rows=(Row(name="isinf", body="y = isinf(x / x)", reference="np.isinf(x / x)", dtypes=FLOATS, output="bool"),),
    ),
    Op(
        name="isfinite",
        arity=1,
        rule=Rule.FLOAT_PREDICATE,
        cost=OpCost.CHEAP,
        primitive=False,
        lowering="not(or(isnan(x), isinf(x)))",
        numpy=np.isfinite,
        rows=(
            Row(
                name="isfinite",
                body="y = isfinite(x / x)",
                reference="np.isfinite(x / x)",
                dtypes=FLOATS,
                output="bool",
            ),
        ),
    ),
    # -- functions of two values --
    Op(
        name="maximum",
        arity=2,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        primitive=False,
        lowering="max(x, y)",
        numpy=np.maximum,
        rows=(Row(name="maximum", body="y = maximum(x, w)", reference="np.maximum(x, w)", dtypes=NUMBERS, operands=2),),
    ),
    Op(
        name="minimum",
        arity=2,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        primitive=False,
        lowering="min(x, y)",
        numpy=np.minimum,
        rows=(Row(name="minimum", body="y = minimum(x, w)", reference="np.minimum(x, w)", dtypes=NUMBERS, operands=2),),
    ),
    Op(
        name="pow",
        arity=2,
        rule=Rule.NUMERIC,
        cost=OpCost.TRANSCENDENTAL,
        numpy=np.power,
        numpy_int=_int_pow,
        c=Spelling(float="pow{s}({0}, {1})", int="catenc_pow_{t}({0}, {1})"),
        rows=(
            Row(
                name="pow",
                body="y = pow(x, w)",
                reference="np.power(x.astype(np.float64), w)",
                dtypes=FLOATS,
                ranges=(("x", 0.1, 4), ("w", -2, 2)),
                operands=2,
            ),
        ),
        doc="also the operator **",
    ),
    Op(
        name="atan2",
        arity=2,
        rule=Rule.FLOAT,
        cost=OpCost.TRANSCENDENTAL,
        numpy=np.arctan2,
        c=Spelling(float="atan2{s}({0}, {1})"),
        rows=(Row(name="atan2", body="y = atan2(x, w)", reference="np.arctan2(x, w)", dtypes=FLOATS, operands=2),),
    ),
    Op(
        name="clip",
        arity=3,
        rule=Rule.NUMERIC,
        cost=OpCost.CHEAP,
        primitive=False,
        numpy=np.clip,
        rows=(Row(name="clip", body="y = clip(x, -0.5, 0.5)", reference="np.clip(x, -0.5, 0.5)", dtypes=FLOATS),),
        doc="the checker writes it as minimum(maximum(x, lo), hi)",
    ),
    Op(
        name="where",
        arity=3,
        rule=Rule.SELECT,
        cost=OpCost.CHEAP,
        primitive=False,
        numpy=np.where,
        rows=(
            Row(
                name="where",
                body="y = where(x > w, x, w)",
                reference="np.where(x > w, x, w)",
                dtypes=NUMBERS,
                operands=2,
            ),
        ),
    ),
    Op(
        name="cast",
        arity=1,
        rule=Rule.CAST,
        cost=OpCost.CHEAP,
        primitive=False,
        rows=(
            Row(
                name="cast_f32", body="y = cast(x, f32)", reference="x.astype(np.float32)", dtypes=NUMBERS, output="f32"
            ),
            Row(
                name="cast_i32",
                body="y = cast(x, i32)",
                reference="np.trunc(np.clip(x.astype(np.float64), -2**31, 2**31 - 1)).astype(np.int32)",
                dtypes=FLOATS,
                ranges=(("x", -100, 100),),
                output="i32",
            ),
        ),
    ),
    # -- arithmetic operators --
    _operator("add", Rule.NUMERIC, np.add, "y = x + w", "(x + w).astype(x.dtype)", NUMBERS, _wrapped("+")),
    _operator("sub", Rule.NUMERIC, np.subtract, "y = x - w", "(x - w).astype(x.dtype)", NUMBERS, _wrapped("-")),
    _operator("mul", Rule.NUMERIC, np.multiply, "y = x * w", "(x * w).astype(x.dtype)", NUMBERS, _wrapped("*")),
    _operator(
        "div",
        Rule.FLOAT,
        np.divide,
        "y = x / w",
        "x / w",
        FLOATS,
        Spelling(float="({0} / {1})"),
        ranges=(("w", 0.5, 4),),
        cost=OpCost.DIVIDE,
    ),
    _operator(
        "floordiv",
        Rule.NUMERIC,
        np.floor_divide,
        "y = x // w",
        "np.where(w == 0, 0, np.floor_divide(x, np.where(w == 0, 1, w)))",
        INTEGERS,
        _helper("floordiv"),
        ranges=(("x", -20, 20), ("w", -5, 6)),
        numpy_int=_int_floordiv,
        rows=(
            Row(
                name="floordiv_float",
                body="y = x // w",
                reference="np.floor_divide(x, w)",
                dtypes=FLOATS,
                ranges=(("w", 0.5, 4),),
                operands=2,
            ),
        ),
    ),
    _operator(
        "mod",
        Rule.NUMERIC,
        np.mod,
        "y = x % w",
        "np.where(w == 0, 0, np.mod(x, np.where(w == 0, 1, w)))",
        INTEGERS,
        _helper("mod"),
        ranges=(("x", -20, 20), ("w", -5, 6)),
        numpy_int=_int_mod,
        rows=(
            Row(
                name="mod_float",
                body="y = x % w",
                reference="np.mod(x, w)",
                dtypes=FLOATS,
                ranges=(("w", 0.5, 4),),
                operands=2,
            ),
        ),
    ),
    Op(name="max", arity=2, rule=Rule.NUMERIC, cost=OpCost.CHEAP, kind=OpKind.IR, c=_helper("max")),
    Op(name="min", arity=2, rule=Rule.NUMERIC, cost=OpCost.CHEAP, kind=OpKind.IR, c=_helper("min")),
    # -- comparisons (a > b is b < a in the IR) --
    _compare("lt", "<", np.less, Rule.ORDER, True),
    _compare("le", "<=", np.less_equal, Rule.ORDER, True),
    _compare("gt", ">", np.greater, Rule.ORDER, False, "lt(y, x)"),
    _compare("ge", ">=", np.greater_equal, Rule.ORDER, False, "le(y, x)"),
    _compare("eq", "==", np.equal, Rule.EQUALITY, True),
    _compare("ne", "!=", np.not_equal, Rule.EQUALITY, True),
    # -- bitwise and logical (bool operands: logical) --
    _operator(
        "and",
        Rule.BITS,
        np.bitwise_and,
        "y = x & w",
        "x & w",
        INTEGERS,
        Spelling(int="({c})({0} & {1})", bool="({0} & {1})"),
        row_name="bitand",
    ),
    _operator(
        "or",
        Rule.BITS,
        np.bitwise_or,
        "y = x | w",
        "x | w",
        INTEGERS,
        Spelling(int="({c})({0} | {1})", bool="({0} | {1})"),
        row_name="bitor",
    ),
    _operator(
        "xor",
        Rule.BITS,
        np.bitwise_xor,
        "y = x ^ w",
        "x ^ w",
        INTEGERS,
        Spelling(int="({c})({0} ^ {1})", bool="({0} ^ {1})"),
        row_name="bitxor",
    ),
    Op(
        name="not",
        arity=1,
        rule=Rule.BITS,
        cost=OpCost.CHEAP,
        kind=OpKind.OPERATOR,
        numpy=np.invert,
        c=Spelling(int="({c})(~{0})", bool="(!{0})"),
        rows=(Row(name="bitnot", body="y = ~x", reference="~x", dtypes=INTEGERS),),
    ),
    # -- rounding to half precision (casts to f16 and bf16) --
    Op(
        name="round_f16",
        arity=1,
        rule=Rule.ROUND_HALF,
        cost=OpCost.CHEAP,
        kind=OpKind.IR,
        c=Spelling(float="catenc_round_f16_{t}({0})"),
    ),
    Op(
        name="round_bf16",
        arity=1,
        rule=Rule.ROUND_HALF,
        cost=OpCost.CHEAP,
        kind=OpKind.IR,
        c=Spelling(float="catenc_round_bf16_{t}({0})"),
    ),
)

_REDUCTIONS: tuple[Reduction, ...] = (
    Reduction(
        name="sum",
        numpy=np.sum,
        rows=(
            Row(
                name="reduce_sum",
                body="y = sum(x, axis=-1)",
                reference="x.astype(np.float64).sum(-1)",
                dtypes=FLOATS,
                reduced=True,
            ),
        ),
    ),
    Reduction(
        name="mean",
        numpy=np.mean,
        primitive=False,
        rows=(
            Row(
                name="reduce_mean",
                body="y = mean(x, axis=-1)",
                reference="x.astype(np.float64).mean(-1)",
                dtypes=FLOATS,
                reduced=True,
            ),
        ),
    ),
    Reduction(
        name="max",
        numpy=np.max,
        rows=(
            Row(
                name="reduce_max",
                body="y = max(x, axis=-1)",
                reference="x.max(-1, initial=-np.inf)",
                dtypes=FLOATS,
                reduced=True,
            ),
        ),
    ),
    Reduction(
        name="min",
        numpy=np.min,
        rows=(
            Row(
                name="reduce_min",
                body="y = min(x, axis=-1)",
                reference="x.min(-1, initial=np.inf)",
                dtypes=FLOATS,
                reduced=True,
            ),
        ),
    ),
    Reduction(
        name="prod",
        numpy=np.prod,
        rows=(
            Row(
                name="reduce_prod",
                body="y = prod(x, axis=-1)",
                reference="x.astype(np.float64).prod(-1)",
                dtypes=FLOATS,
                ranges=(("x", 0.5, 1.5),),
                reduced=True,
            ),
        ),
    ),
    Reduction(
        name="argmax",
        numpy=np.argmax,
        surface=False,
        rows=(
            Row(
                name="argmax",
                body="y = argmax(x, axis=-1)",
                reference="x.argmax(-1)",
                dtypes=FLOATS,
                output="i64",
                reduced=True,
            ),
        ),
    ),
    Reduction(name="argmin", numpy=np.argmin, surface=False),
)

OPS: dict[str, Op] = {op.name: op for op in _OPS}
REDUCTION_OPS: dict[str, Reduction] = {r.name: r for r in _REDUCTIONS}


# ---- lowerings -----------------------------------------------------------------------------------

Lowering = tuple  # ("arg", k) | ("const", value) | ("op", name, (Lowering, ...))


def parse_lowering(text: str) -> Lowering:
    """A lowering's text as a tree: calls `op(a, b)` of ops, the operands x and y, and number
    literals (op names such as `not` and `or` are Python keywords: the text is read here)."""
    tokens = re.findall(r"-?[0-9][0-9.e+-]*|[A-Za-z_][A-Za-z0-9_]*|[(),]|\S", text)
    tree, rest = _tree(tokens, text)
    if rest:
        raise ValueError(f"lowering '{text}': unexpected '{rest[0]}'")
    return tree


def _tree(tokens: list[str], text: str) -> tuple[Lowering, list[str]]:
    if not tokens:
        raise ValueError(f"lowering '{text}' ends too early")
    head, rest = tokens[0], tokens[1:]
    if head in ("x", "y"):
        return ("arg", "xy".index(head)), rest
    if head[0].isdigit() or head[0] == "-":
        return ("const", float(head) if any(c in head for c in ".e") else int(head)), rest
    if head not in OPS or rest[:1] != ["("]:
        raise ValueError(f"lowering '{text}': '{head}' is not a call of an op")
    args: list[Lowering] = []
    rest = rest[1:]
    while True:
        arg, rest = _tree(rest, text)
        args.append(arg)
        if rest[:1] == [")"]:
            return ("op", head, tuple(args)), rest[1:]
        if rest[:1] != [","]:
            raise ValueError(f"lowering '{text}': expected ',' or ')' after an argument of '{head}'")
        rest = rest[1:]


LOWERINGS: dict[str, Lowering] = {op.name: parse_lowering(op.lowering) for op in _OPS if op.lowering}


# ---- tables the stages read ----------------------------------------------------------------------


def _names(keep: Callable[[Op], bool]) -> frozenset[str]:
    return frozenset(op.name for op in _OPS if keep(op))


def _function(arity: int, rule: Rule) -> Callable[[Op], bool]:
    return lambda op: op.kind is OpKind.FUNCTION and op.arity == arity and op.rule == rule


# The body language's functions, by dtype rule (frontend/check.py)
UNARY_FLOAT = _names(_function(1, Rule.FLOAT))
UNARY_NUMERIC = _names(_function(1, Rule.NUMERIC))
FLOAT_PREDICATES = _names(lambda op: op.kind is OpKind.FUNCTION and op.rule is Rule.FLOAT_PREDICATE)
BINARY_NUMERIC = _names(_function(2, Rule.NUMERIC))
BINARY_FLOAT = _names(_function(2, Rule.FLOAT))
ELEMENTWISE = _names(lambda op: op.kind is OpKind.FUNCTION)
ARITY: dict[str, int] = {op.name: op.arity for op in _OPS if op.kind is OpKind.FUNCTION}
REDUCTIONS = tuple(r.name for r in _REDUCTIONS if r.surface)

# The IR's primitives (ir/nodes.py)
UNARY_OPS = _names(lambda op: op.primitive and op.arity == 1)
BINARY_OPS = _names(lambda op: op.primitive and op.arity == 2)
REDUCE_OPS = frozenset(r.name for r in _REDUCTIONS if r.primitive)
# Primitives worth computing once rather than recomputing per use (ir/passes.py)
EXPENSIVE_OPS = _names(lambda op: op.primitive and op.cost in (OpCost.DIVIDE, OpCost.TRANSCENDENTAL))
# Primitives the cost model counts as transcendental calls (ir/cost.py)
TRANSCENDENTAL_OPS = _names(lambda op: op.primitive and op.cost is OpCost.TRANSCENDENTAL)
# test-runtime's rows of the language's own functions (testing/coverage.py)
ROWS: tuple[Row, ...] = tuple(row for op in _OPS for row in op.rows) + tuple(row for r in _REDUCTIONS for row in r.rows)


def spellings(part: str, backend: str = "c") -> dict[str, str]:
    """The renderer table of one part of the spellings ("float", "int", "bool", "any") of the
    primitives: C's templates, with a backend's own ("cuda", "opencl") where it declares one."""
    table = {}
    for op in _OPS:
        template = getattr(op.c, part)
        if part == "float" and backend != "c":
            template = getattr(op.c, backend) or template
        if op.primitive and template is not None:
            table[op.name] = template
    return table


def unary_spellings(part: str, backend: str = "c") -> dict[str, str]:
    """`spellings` of the unary primitives."""
    return {name: t for name, t in spellings(part, backend).items() if OPS[name].arity == 1}


def binary_spellings(part: str, backend: str = "c") -> dict[str, str]:
    """`spellings` of the binary primitives."""
    return {name: t for name, t in spellings(part, backend).items() if OPS[name].arity == 2}


def vector_math_f32() -> dict[str, str]:
    """The vecmath.c.j2 routine call of every primitive that has one."""
    return {op.name: f"{op.c.vector_f32}({{0}})" for op in _OPS if op.primitive and op.c.vector_f32}
