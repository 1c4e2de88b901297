"""Elementwise operators and functions (docs/language.md) against numpy.

One composite file holds every case; it is compiled at -O0 (plain loops) and -O2 (fused,
vectorised) and every test runs against both: a schedule decision must never change results.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import (
    SIZES0,
    assert_close,
    compile_text,
    np_erf,
    np_gelu,
    np_gelu_tanh,
    np_sigmoid,
    np_softplus,
    randint,
    rng,
)

FLOATS = ("f32", "f64")
INTS = ("i32", "i64", "u8", "i8")
NP = {
    "bool": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "f32": np.float32,
    "f64": np.float64,
}
NS = (0, 1, 7, 13, 37, 100)


# ----------------------------------------------------------------- input generators


def _normal(scale):
    return lambda n, g: g.standard_normal(n) * scale


def _uniform(lo, hi):
    return lambda n, g: g.uniform(lo, hi, n)


def _halves(n, g):
    """Exact halves (k + 0.5 ties for round) mixed with arbitrary fractions."""
    ties = g.integers(-20, 20, n) / 2.0
    other = g.uniform(-10, 10, n)
    return np.where(np.arange(n) % 2 == 0, ties, other)


def _nonzero(n, g):
    return g.uniform(0.1, 10, n) * np.where(g.random(n) < 0.5, -1, 1)


def _small_and_broad(lo, hi):
    def gen(n, g):
        tiny = g.uniform(-1e-3, 1e-3, n)
        broad = g.uniform(lo, hi, n)
        return np.where(np.arange(n) % 3 == 0, tiny, broad)

    return gen


def _specials(n, g):
    base = g.standard_normal(n) * 10
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1e30, 1e30])
    base[: min(n, len(specials))] = specials[: min(n, len(specials))]
    return base


# name -> (numpy reference on float64 values, generator of float64 inputs)
UNARY = {
    "abs": (np.abs, _normal(3)),
    "neg": (np.negative, _normal(3)),
    "sign": (np.sign, lambda n, g: np.round(g.standard_normal(n) * 2)),
    "exp": (np.exp, _uniform(-10, 10)),
    "exp2": (np.exp2, _uniform(-10, 10)),
    "log": (np.log, _uniform(0.01, 100)),
    "log2": (np.log2, _uniform(0.01, 100)),
    "log1p": (np.log1p, _small_and_broad(-0.9, 10)),
    "expm1": (np.expm1, _small_and_broad(-5, 5)),
    "sqrt": (np.sqrt, _uniform(0, 100)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), _uniform(0.01, 100)),
    "reciprocal": (np.reciprocal, _nonzero),
    "sin": (np.sin, _uniform(-10, 10)),
    "cos": (np.cos, _uniform(-10, 10)),
    "tan": (np.tan, _uniform(-1.4, 1.4)),
    "tanh": (np.tanh, _uniform(-10, 10)),
    "sinh": (np.sinh, _uniform(-5, 5)),
    "cosh": (np.cosh, _uniform(-5, 5)),
    "asin": (np.arcsin, _uniform(-1, 1)),
    "acos": (np.arccos, _uniform(-1, 1)),
    "atan": (np.arctan, _uniform(-10, 10)),
    "erf": (np_erf, _uniform(-4, 4)),
    "erfc": (np.vectorize(math.erfc, otypes=[np.float64]), _uniform(-4, 10)),  # numpy has no erfc: math's
    "floor": (np.floor, _halves),
    "ceil": (np.ceil, _halves),
    "round": (np.round, _halves),
    "trunc": (np.trunc, _halves),
    "relu": (lambda x: np.maximum(x, 0.0), _normal(3)),
    "sigmoid": (np_sigmoid, _uniform(-20, 20)),
    "silu": (lambda x: x * np_sigmoid(x), _uniform(-20, 20)),
    "gelu": (np_gelu, _uniform(-6, 6)),
    "gelu_tanh": (np_gelu_tanh, _uniform(-6, 6)),
    "softplus": (np_softplus, _uniform(-20, 20)),
}
PREDICATES = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}

# name -> (body expression, numpy reference on float64, generator of x, generator of y)
BINARY_FLOAT = {
    "add": ("x + y", np.add, _normal(5), _normal(5)),
    "sub": ("x - y", np.subtract, _normal(5), _normal(5)),
    "mul": ("x * y", np.multiply, _normal(5), _normal(5)),
    "div": ("x / y", np.divide, _normal(5), _nonzero),
    "floordiv": ("x // y", np.floor_divide, _normal(5), _nonzero),
    "mod": ("x % y", np.mod, _normal(5), _nonzero),
    "powop": ("x ** y", np.power, _uniform(0.1, 4), _uniform(-3, 3)),
    "pow": ("pow(x, y)", np.power, _uniform(0.1, 4), _uniform(-3, 3)),
    "maximum": ("maximum(x, y)", np.maximum, _normal(5), _normal(5)),
    "minimum": ("minimum(x, y)", np.minimum, _normal(5), _normal(5)),
    "atan2": ("atan2(x, y)", np.arctan2, _normal(5), _normal(5)),
}

# name -> (body expression, numpy reference); the integer operators
BINARY_INT = {
    "add": ("x + y", np.add),
    "sub": ("x - y", np.subtract),
    "mul": ("x * y", np.multiply),
    "floordiv": ("x // y", np.floor_divide),
    "mod": ("x % y", np.mod),
    "maximum": ("maximum(x, y)", np.maximum),
    "minimum": ("minimum(x, y)", np.minimum),
    "and": ("x & y", np.bitwise_and),
    "or": ("x | y", np.bitwise_or),
    "xor": ("x ^ y", np.bitwise_xor),
}
UNARY_INT = {
    "neg": ("neg(x)", np.negative),
    "negop": ("-x", np.negative),
    "abs": ("abs(x)", np.abs),
    "sign": ("sign(x)", np.sign),
    "relu": ("relu(x)", lambda x: np.maximum(x, 0)),
    "invert": ("~x", np.invert),
}
COMPARISONS = {
    "lt": ("x < y", np.less),
    "le": ("x <= y", np.less_equal),
    "gt": ("x > y", np.greater),
    "ge": ("x >= y", np.greater_equal),
    "eq": ("x == y", np.equal),
    "ne": ("x != y", np.not_equal),
}
BOOL_OPS = {
    "and": ("a & b", np.logical_and),
    "or": ("a | b", np.logical_or),
    "xor": ("a ^ b", np.logical_xor),
    "eq": ("a == b", np.equal),
    "ne": ("a != b", np.not_equal),
}
CAST_TARGETS = ("i8", "u8", "i16", "i32", "i64", "u32", "u64")
# functions checked at special values (inf, nan, 0, -0, domain edges): numpy's results
SPECIAL_FNS = (
    "exp exp2 log log2 log1p expm1 sqrt rsqrt reciprocal sin cos tan tanh sinh cosh asin acos "
    "atan erf erfc floor ceil round trunc sigmoid softplus abs sign relu"
).split()


# ------------------------------------------------------------------ composite text


def comp(name, inputs, outputs, body):
    ins = ", ".join(f'"{d}"' for d in inputs)
    outs = ", ".join(f'"{d}"' for d in outputs)
    return f'[composite.{name}]\ninputs = [{ins}]\noutputs = [{outs}]\nbody = """\n{body}\n"""\n\n'


def _source() -> str:
    parts = []
    for dt in FLOATS:
        for fn in UNARY:
            parts.append(comp(f"u_{fn}_{dt}", [f"x: {dt}[N]"], [f"y: {dt}[N]"], f"y = {fn}(x)"))
        parts.append(comp(f"u_negop_{dt}", [f"x: {dt}[N]"], [f"y: {dt}[N]"], "y = -x"))
        for fn in PREDICATES:
            parts.append(comp(f"p_{fn}_{dt}", [f"x: {dt}[N]"], ["y: bool[N]"], f"y = {fn}(x)"))
        for name, (expr, *_) in BINARY_FLOAT.items():
            parts.append(comp(f"b_{name}_{dt}", [f"x: {dt}[N]", f"y: {dt}[N]"], [f"z: {dt}[N]"], f"z = {expr}"))
        parts.append(
            comp(
                f"clip_{dt}",
                [f"x: {dt}[N]", f"lo: {dt}[N]", f"hi: {dt}[N]"],
                [f"y: {dt}[N]"],
                "y = clip(x, lo, hi)",
            )
        )
        parts.append(comp(f"clipc_{dt}", [f"x: {dt}[N]"], [f"y: {dt}[N]"], "y = clip(x, -0.5, 2)"))
        parts.append(
            comp(
                f"where_{dt}",
                ["c: bool[N, 1]", f"a: {dt}[M]", f"b: {dt}[N, M]"],
                [f"y: {dt}[N, M]"],
                "y = where(c, a, b)",
            )
        )
        parts.append(comp(f"wherelit_{dt}", [f"x: {dt}[N]"], [f"y: {dt}[N]"], "y = where(x > 0, x, 0)"))
        parts.append(
            comp(
                f"lit_{dt}",
                [f"x: {dt}[N]"],
                [f"y: {dt}[N]"],
                "y = x * 0.1 + 1 - pi / 3 + x ** 2 + x ** 3",
            )
        )
        parts.append(
            comp(
                f"bcast_{dt}",
                [f"a: {dt}[N, 1]", f"b: {dt}[M]", f"s: {dt}"],
                [f"y: {dt}[N, M]"],
                "y = a * b - s / 2",
            )
        )
        parts.append(
            comp(
                f"bcast3_{dt}",
                [f"a: {dt}[B, 1, K]", f"b: {dt}[M, 1]"],
                [f"y: {dt}[B, M, K]"],
                "y = a - b",
            )
        )
        parts.append(comp(f"scalar_{dt}", [f"a: {dt}", f"b: {dt}"], [f"c: {dt}"], "c = a * b + a / b"))
        parts.append(
            comp(
                f"scalar_out_{dt}",
                [f"x: {dt}[N]", f"s: {dt}"],
                [f"y: {dt}[N]", f"c: {dt}"],
                "y = x * s\nc = s + 1",
            )
        )
        for name, (expr, _) in COMPARISONS.items():
            parts.append(comp(f"c_{name}_{dt}", [f"x: {dt}[N]", f"y: {dt}[N]"], ["z: bool[N]"], f"z = {expr}"))
        parts.append(comp(f"mm_{dt}", [f"a: {dt}[M, K]", f"b: {dt}[K, N]"], [f"c: {dt}[M, N]"], "c = a @ b"))
        parts.append(
            comp(
                f"mmbatch_{dt}",
                [f"a: {dt}[B, M, K]", f"b: {dt}[K, N]"],
                [f"c: {dt}[B, M, N]"],
                "c = a @ b",
            )
        )
        parts.append(
            comp(
                f"mmbb_{dt}",
                [f"a: {dt}[B, 1, M, K]", f"b: {dt}[C, K, N]"],
                [f"c: {dt}[B, C, M, N]"],
                "c = a @ b",
            )
        )
        parts.append(comp(f"mmvm_{dt}", [f"a: {dt}[K]", f"b: {dt}[K, N]"], [f"c: {dt}[N]"], "c = a @ b"))
        parts.append(comp(f"mmmv_{dt}", [f"a: {dt}[M, K]", f"b: {dt}[K]"], [f"c: {dt}[M]"], "c = a @ b"))
        parts.append(comp(f"mmvv_{dt}", [f"a: {dt}[K]", f"b: {dt}[K]"], [f"c: {dt}"], "c = a @ b"))
        parts.append(comp(f"mmv3_{dt}", [f"a: {dt}[K]", f"b: {dt}[B, K, N]"], [f"c: {dt}[B, N]"], "c = a @ b"))
        parts.append(
            comp(
                f"specials_{dt}",
                [f"x: {dt}[N]"],
                [f"o_{fn}: {dt}[N]" for fn in SPECIAL_FNS],
                "\n".join(f"o_{fn} = {fn}(x)" for fn in SPECIAL_FNS),
            )
        )
        for target in CAST_TARGETS + ("f32", "f64", "bool"):
            parts.append(comp(f"cast_{dt}_{target}", [f"x: {dt}[N]"], [f"y: {target}[N]"], f"y = cast(x, {target})"))
        parts.append(
            comp(
                f"fdivz_{dt}",
                [f"x: {dt}[N]"],
                [f"y: {dt}[N]", f"z: {dt}[N]", f"w: {dt}[N]"],
                "y = x / 0.0\nz = x // 0.0\nw = x % 0.0",
            )
        )
    for dt in INTS:
        for name, (expr, _) in BINARY_INT.items():
            parts.append(comp(f"i_{name}_{dt}", [f"x: {dt}[N]", f"y: {dt}[N]"], [f"z: {dt}[N]"], f"z = {expr}"))
        parts.append(comp(f"i_pow_{dt}", [f"x: {dt}[N]", f"y: {dt}[N]"], [f"z: {dt}[N]"], "z = x ** y"))
        parts.append(comp(f"i_powlit_{dt}", [f"x: {dt}[N]"], [f"z: {dt}[N]"], "z = x ** 2 + pow(x, 3)"))
        for name, (expr, _) in UNARY_INT.items():
            parts.append(comp(f"iu_{name}_{dt}", [f"x: {dt}[N]"], [f"y: {dt}[N]"], f"y = {expr}"))
        for name, (expr, _) in COMPARISONS.items():
            parts.append(comp(f"c_{name}_{dt}", [f"x: {dt}[N]", f"y: {dt}[N]"], ["z: bool[N]"], f"z = {expr}"))
        parts.append(
            comp(
                f"i_clip_{dt}",
                [f"x: {dt}[N]"],
                [f"y: {dt}[N]", f"z: {dt}[N]"],
                "y = clip(x, 3, 100)\nz = where(x > 5, x, 1)",
            )
        )
        parts.append(comp(f"i_lit_{dt}", [f"x: {dt}[N]"], [f"y: {dt}[N]"], "y = x * 3 + 1 - x // 2"))
        body = "a = x // 4\nb = x % 4\nc = x // 3\nd = x % 3\ne = x // 1\nf = x % 1"
        outs = [f"{v}: {dt}[N]" for v in "abcdef"]
        if not dt.startswith("u"):
            body += "\ng = x // -3\nh = x % -3\nk = x // -4\nl = x % -4"
            outs += [f"{v}: {dt}[N]" for v in "ghkl"]
        parts.append(comp(f"i_litdiv_{dt}", [f"x: {dt}[N]"], outs, body))
        parts.append(
            comp(
                f"i_where_scalar_{dt}",
                [f"x: {dt}[N]", f"s: {dt}"],
                [f"y: {dt}[N]"],
                "y = where(x > s, s, x) + maximum(x, s) - minimum(x, 2)",
            )
        )
        parts.append(comp(f"i_mm_{dt}", [f"a: {dt}[M, K]", f"b: {dt}[K, N]"], [f"c: {dt}[M, N]"], "c = a @ b"))
        for target in CAST_TARGETS + ("f32", "f64", "bool"):
            if target != dt:
                parts.append(
                    comp(
                        f"cast_{dt}_{target}",
                        [f"x: {dt}[N]"],
                        [f"y: {target}[N]"],
                        f"y = cast(x, {target})",
                    )
                )
    for name, (expr, _) in BOOL_OPS.items():
        parts.append(comp(f"bool_{name}", ["a: bool[N]", "b: bool[N]"], ["c: bool[N]"], f"c = {expr}"))
    parts.append(comp("bool_not", ["a: bool[N]"], ["c: bool[N]"], "c = ~a"))
    parts.append(
        comp(
            "bool_mix",
            ["x: f32[N]", "a: bool[N]"],
            ["c: bool[N]"],
            "c = ((x > 0) & a) | ~(x < -1) ^ True",
        )
    )
    parts.append(
        comp("bool_cast", ["a: bool[N]"], ["y: f32[N]", "z: i32[N]"], "y = cast(a, f32)\nz = cast(a, i32) * 5")
    )
    parts.append(
        comp(
            "i32_overflow",
            ["x: i32[N]", "y: i32[N]"],
            ["s: i32[N]", "d: i32[N]", "p: i32[N]"],
            "s = x + y\nd = x - y\np = x * y",
        )
    )
    parts.append(comp("u8_lit", ["x: u8[N]"], ["y: u8[N]"], "y = x + 255"))
    parts.append(
        comp(
            "chain_f32",
            ["x: f32[N]", "y: f32[N]"],
            ["z: f32[N]"],
            "t = exp(-abs(x)) * y\nu = sqrt(t * t + 1.0) - reciprocal(1.0 + x * x)\n"
            "z = maximum(u, tanh(t)) + where(isnan(y), 0.0, 1.0)",
        )
    )
    fold_outs = [f"{v}: f32[N]" for v in "abcdeghkmn"] + ["f: bool[N]", "l: bool[N]"]
    parts.append(
        comp(
            "fold_f32",
            ["x: f32[N]"],
            fold_outs,
            "a = x - x\nb = x * 0.0\nc = x + 0.0\nd = x / x\ne = x / 3.0\nf = x == x\n"
            "g = x * 1.0 - 0.0\nh = (x + 1.0) - 1.0\nk = 0.0 - x\nl = ~(x < 0.0)\n"
            "m = maximum(x, x)\nn = x / 10.0",
        )
    )
    parts.append(
        comp(
            "fold_i32",
            ["x: i32[N]"],
            ["a: i32[N]", "b: i32[N]", "c: i32[N]", "d: i32[N]"],
            "a = x // x\nb = x % x\nc = (x * 2) // 2\nd = (x + 1) - 1",
        )
    )
    parts.append(
        comp(
            "lang_misc",
            ["x: f32[N]", "k: i32[N]", "s: f32[]", "u: u8[N]"],
            ["y: f32[N]", "b: bool[N]", "p: f32[N]", "q: i32[N]", "w: f32[N]", "r: f32[]", "c: u8[N]"],
            "y = where(x > 0, x, nan) + where(True, 0.0, 1.0)  # literals, a comment\n"
            "b = (x > 0) | False; p = 2.0 ** x + pow(3, x)\n"
            "q = 2 ** k\n"
            "t = x * 2.0; w = t + where(x > 0, 1, 2) - x\n"
            "r = s * 2.0 + sum(x)\n"
            "c = clip(u, 10, 200) + maximum(u, 0) - minimum(u, 255)",
        )
    )
    return "".join(parts)


SOURCE = _source()


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="elementwise", opt=request.param)


def _gen(gen, n, dt, seed):
    return gen(n, rng(seed)).astype(NP[dt])


def _tol(dt):
    return dict(rtol=1e-5, atol=1e-6) if dt == "f32" else dict(rtol=1e-12, atol=1e-13)


def _ref(fn, *arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*[np.asarray(a, dtype=np.float64) for a in arrays])


# ------------------------------------------------------------------------ unary float


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("fn", list(UNARY))
def test_unary_float(lib, fn, dt, n):
    ref, gen = UNARY[fn]
    x = _gen(gen, n, dt, seed=n)
    y = lib[f"u_{fn}_{dt}"](x)
    exact = fn in ("abs", "neg", "sign", "floor", "ceil", "round", "trunc", "relu")
    tol = dict(rtol=0, atol=0) if exact else _tol(dt)
    assert_close(y, _ref(ref, x), dtype=NP[dt], **tol)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
def test_unary_minus(lib, dt, n):
    x = _gen(_normal(3), n, dt, seed=1)
    assert_close(lib[f"u_negop_{dt}"](x), -x, rtol=0, atol=0)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("fn", list(PREDICATES))
def test_predicates(lib, fn, dt, n):
    x = _gen(_specials, n, dt, seed=2)
    y = lib[f"p_{fn}_{dt}"](x)
    assert_close(y, PREDICATES[fn](x), dtype=np.bool_)


# ----------------------------------------------------------------------- binary float


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", list(BINARY_FLOAT))
def test_binary_float(lib, op, dt, n):
    _, ref, gx, gy = BINARY_FLOAT[op]
    x = _gen(gx, n, dt, seed=3)
    y = _gen(gy, n, dt, seed=4)
    z = lib[f"b_{op}_{dt}"](x, y)
    exact = op in ("add", "sub", "mul", "div", "maximum", "minimum")
    tol = dict(rtol=0, atol=0) if exact else _tol(dt)
    # computed in the operand dtype: the exact operations round once, like numpy in dt
    expected = ref(x, y) if exact else _ref(ref, x, y)
    assert_close(z, expected, dtype=NP[dt], **tol)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
def test_clip_tensor_bounds(lib, dt, n):
    g = rng(5)
    x = (g.standard_normal(n) * 3).astype(NP[dt])
    lo = (g.standard_normal(n) - 1).astype(NP[dt])
    hi = (lo + np.abs(g.standard_normal(n))).astype(NP[dt])
    assert_close(lib[f"clip_{dt}"](x, lo, hi), np.clip(x, lo, hi), rtol=0, atol=0)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
def test_clip_literal_bounds(lib, dt, n):
    x = _gen(_normal(3), n, dt, seed=6)
    assert_close(lib[f"clipc_{dt}"](x), np.clip(x, NP[dt](-0.5), NP[dt](2)), rtol=0, atol=0)


@pytest.mark.parametrize("nm", [(0, 3), (1, 1), (7, 13), (13, 1), (37, 5)])
@pytest.mark.parametrize("dt", FLOATS)
def test_where_broadcast(lib, dt, nm):
    n, m = nm
    g = rng(7)
    c = g.random((n, 1)) < 0.5
    a = g.standard_normal(m).astype(NP[dt])
    b = g.standard_normal((n, m)).astype(NP[dt])
    assert_close(lib[f"where_{dt}"](c, a, b), np.where(c, a, b), rtol=0, atol=0)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
def test_where_literal(lib, dt, n):
    x = _gen(_normal(3), n, dt, seed=8)
    assert_close(lib[f"wherelit_{dt}"](x), np.where(x > 0, x, NP[dt](0)), rtol=0, atol=0)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS)
def test_literals_take_tensor_dtype(lib, dt, n):
    """0.1 meeting an f64 tensor is the double 0.1 (weak typing), not a float literal."""
    x = _gen(_normal(2), n, dt, seed=9)
    t = NP[dt]
    expected = x * t(0.1) + t(1) - t(math.pi) / t(3) + x**2 + x**3
    assert_close(lib[f"lit_{dt}"](x), expected, **_tol(dt))


@pytest.mark.parametrize("nm", [(0, 4), (1, 1), (1, 7), (7, 1), (13, 37)])
@pytest.mark.parametrize("dt", FLOATS)
def test_broadcast_with_scalar_input(lib, dt, nm):
    n, m = nm
    g = rng(10)
    a = g.standard_normal((n, 1)).astype(NP[dt])
    b = g.standard_normal(m).astype(NP[dt])
    s = NP[dt](1.75)
    y = lib[f"bcast_{dt}"](a, b, s)
    assert_close(y, a * b - s / NP[dt](2), dtype=NP[dt], rtol=0, atol=0)
    # a Python float for the rank-0 input
    assert_close(lib[f"bcast_{dt}"](a, b, 1.75), a * b - s / NP[dt](2), rtol=0, atol=0)


@pytest.mark.parametrize("bmk", [(1, 1, 1), (2, 7, 13), (3, 1, 37), (0, 2, 3), (2, 3, 0)])
@pytest.mark.parametrize("dt", FLOATS)
def test_broadcast_rank3(lib, dt, bmk):
    b, m, k = bmk
    g = rng(11)
    a = g.standard_normal((b, 1, k)).astype(NP[dt])
    c = g.standard_normal((m, 1)).astype(NP[dt])
    assert_close(lib[f"bcast3_{dt}"](a, c), a - c, rtol=0, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
def test_rank0_by_value(lib, dt):
    t = NP[dt]
    c = lib[f"scalar_{dt}"](t(3.5), t(-1.25))
    assert c.shape == ()
    assert_close(c, t(3.5) * t(-1.25) + t(3.5) / t(-1.25), rtol=0, atol=0)
    c = lib[f"scalar_{dt}"](np.array(2.0, dtype=t), 0.5)
    assert_close(c, t(2.0 * 0.5 + 2.0 / 0.5), rtol=0, atol=0)


@pytest.mark.parametrize("n", SIZES0)
@pytest.mark.parametrize("dt", FLOATS)
def test_rank0_output(lib, dt, n):
    x = _gen(_normal(1), n, dt, seed=12)
    y, c = lib[f"scalar_out_{dt}"](x, NP[dt](-3.0))
    assert c.shape == ()
    assert_close(y, x * NP[dt](-3.0), rtol=0, atol=0)
    assert_close(c, NP[dt](-2.0), rtol=0, atol=0)


# -------------------------------------------------------------------------- comparisons


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("op", list(COMPARISONS))
def test_comparisons(lib, op, dt, n):
    g = rng(13)
    if dt in FLOATS:
        x = np.round(g.standard_normal(n) * 2).astype(NP[dt])
        y = np.round(g.standard_normal(n) * 2).astype(NP[dt])
        x[::5] = np.nan  # comparisons with NaN are false except !=
        y[2::7] = np.nan
        y[3::7] = np.inf
    else:
        info = np.iinfo(NP[dt])
        x = randint(n, info.min, info.max, NP[dt], seed=14)
        y = np.where(g.random(n) < 0.3, x, randint(n, info.min, info.max, NP[dt], seed=15))
        y = y.astype(NP[dt])
    z = lib[f"c_{op}_{dt}"](x, y)
    with np.errstate(invalid="ignore"):
        assert_close(z, COMPARISONS[op][1](x, y), dtype=np.bool_)


# ----------------------------------------------------------------------------- matmul


def _mm_tol(dt, k):
    if dt == "f32":
        return dict(rtol=1e-4, atol=1e-5 * max(k, 1))
    return dict(rtol=1e-11, atol=1e-13 * max(k, 1))


@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 13, 1), (13, 37, 7), (37, 7, 100), (3, 0, 5), (0, 4, 2)])
@pytest.mark.parametrize("dt", FLOATS)
def test_matmul(lib, dt, mkn):
    m, k, n = mkn
    g = rng(16)
    a = g.standard_normal((m, k)).astype(NP[dt])
    b = g.standard_normal((k, n)).astype(NP[dt])
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(lib[f"mm_{dt}"](a, b), expected, dtype=NP[dt], **_mm_tol(dt, k))


@pytest.mark.parametrize("bmkn", [(1, 1, 1, 1), (2, 7, 13, 5), (3, 13, 1, 37), (0, 2, 3, 4)])
@pytest.mark.parametrize("dt", FLOATS)
def test_matmul_batched(lib, dt, bmkn):
    bsz, m, k, n = bmkn
    g = rng(17)
    a = g.standard_normal((bsz, m, k)).astype(NP[dt])
    b = g.standard_normal((k, n)).astype(NP[dt])
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(lib[f"mmbatch_{dt}"](a, b), expected, **_mm_tol(dt, k))


@pytest.mark.parametrize("bcmkn", [(1, 1, 1, 1, 1), (2, 3, 7, 13, 5), (3, 1, 1, 37, 7)])
@pytest.mark.parametrize("dt", FLOATS)
def test_matmul_batch_broadcast(lib, dt, bcmkn):
    bsz, c, m, k, n = bcmkn
    g = rng(18)
    a = g.standard_normal((bsz, 1, m, k)).astype(NP[dt])
    b = g.standard_normal((c, k, n)).astype(NP[dt])
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(lib[f"mmbb_{dt}"](a, b), expected, **_mm_tol(dt, k))


@pytest.mark.parametrize("kn", [(1, 1), (7, 13), (37, 5), (0, 3)])
@pytest.mark.parametrize("dt", FLOATS)
def test_matmul_vectors(lib, dt, kn):
    k, n = kn
    g = rng(19)
    v = g.standard_normal(k).astype(NP[dt])
    w = g.standard_normal(k).astype(NP[dt])
    mat = g.standard_normal((k, n)).astype(NP[dt])
    v64, w64, m64 = (a.astype(np.float64) for a in (v, w, mat))
    assert_close(lib[f"mmvm_{dt}"](v, mat), v64 @ m64, **_mm_tol(dt, k))
    assert_close(lib[f"mmmv_{dt}"](mat.T.copy(), v), m64.T @ v64, **_mm_tol(dt, k))
    c = lib[f"mmvv_{dt}"](v, w)
    assert c.shape == ()
    assert_close(c, v64 @ w64, **_mm_tol(dt, k))


@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 13, 5), (13, 37, 3), (2, 0, 3)])
@pytest.mark.parametrize("dt", INTS)
def test_matmul_int(lib, dt, mkn):
    m, k, n = mkn
    info = np.iinfo(NP[dt])
    a = randint((m, k), info.min, info.max, NP[dt], seed=20)
    b = randint((k, n), info.min, info.max, NP[dt], seed=21)
    with np.errstate(over="ignore"):
        expected = np.matmul(a, b)  # wraps in the dtype, like the compiled code must
    assert_close(lib[f"i_mm_{dt}"](a, b), expected, dtype=NP[dt])


# ------------------------------------------------------------------------- integers


def _int_operands(op, dt, n):
    info = np.iinfo(NP[dt])
    if op in ("floordiv", "mod"):
        lo = max(info.min, -1000)
        x = randint(n, lo, min(info.max, 1000), NP[dt], seed=22)
        y = randint(n, max(info.min, -9), 9, NP[dt], seed=23)  # includes 0 and negatives
        if n:
            x[0] = info.min
        return x, y
    x = randint(n, info.min, info.max, NP[dt], seed=24)
    y = randint(n, info.min, info.max, NP[dt], seed=25)
    return x, y


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", list(BINARY_INT))
def test_binary_int(lib, op, dt, n):
    x, y = _int_operands(op, dt, n)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = BINARY_INT[op][1](x, y)
    assert_close(lib[f"i_{op}_{dt}"](x, y), expected, dtype=NP[dt])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
def test_int_pow(lib, dt, n):
    x = randint(n, 0 if dt.startswith("u") else -9, 9, NP[dt], seed=26)
    y = randint(n, 0, 9, NP[dt], seed=27)
    with np.errstate(all="ignore"):
        assert_close(lib[f"i_pow_{dt}"](x, y), np.power(x, y), dtype=NP[dt])
        expected = x**2 + np.power(x, NP[dt](3))
    assert_close(lib[f"i_powlit_{dt}"](x), expected, dtype=NP[dt])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", list(UNARY_INT))
def test_unary_int(lib, op, dt, n):
    info = np.iinfo(NP[dt])
    x = randint(n, info.min, info.max, NP[dt], seed=28)
    if n >= 3:
        x[:3] = [info.min, 0, info.max]
    with np.errstate(all="ignore"):
        expected = UNARY_INT[op][1](x)
    assert_close(lib[f"iu_{op}_{dt}"](x), expected, dtype=NP[dt])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
def test_int_clip_where(lib, dt, n):
    info = np.iinfo(NP[dt])
    x = randint(n, max(info.min, -200), min(info.max, 200), NP[dt], seed=29)
    y, z = lib[f"i_clip_{dt}"](x)
    assert_close(y, np.clip(x, 3, 100), dtype=NP[dt])
    assert_close(z, np.where(x > 5, x, NP[dt](1)), dtype=NP[dt])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
def test_int_literals(lib, dt, n):
    info = np.iinfo(NP[dt])
    x = randint(n, info.min, info.max, NP[dt], seed=30)
    t = NP[dt]
    with np.errstate(all="ignore"):
        expected = x * t(3) + t(1) - x // t(2)
    assert_close(lib[f"i_lit_{dt}"](x), expected, dtype=NP[dt])


# --------------------------------------------------------------------------- bool


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("op", list(BOOL_OPS))
def test_bool_ops(lib, op, n):
    g = rng(31)
    a = g.random(n) < 0.5
    b = g.random(n) < 0.5
    assert_close(lib[f"bool_{op}"](a, b), BOOL_OPS[op][1](a, b), dtype=np.bool_)


@pytest.mark.parametrize("n", NS)
def test_bool_not_and_mix(lib, n):
    g = rng(32)
    a = g.random(n) < 0.5
    x = (g.standard_normal(n) * 2).astype(np.float32)
    assert_close(lib["bool_not"](a), ~a, dtype=np.bool_)
    expected = ((x > 0) & a) | (~(x < -1) ^ True)
    assert_close(lib["bool_mix"](x, a), expected, dtype=np.bool_)


@pytest.mark.parametrize("n", NS)
def test_bool_cast(lib, n):
    a = rng(33).random(n) < 0.5
    y, z = lib["bool_cast"](a)
    assert_close(y, a.astype(np.float32), dtype=np.float32, rtol=0, atol=0)
    assert_close(z, a.astype(np.int32) * 5, dtype=np.int32)


# -------------------------------------------------------------------------- casts


def _float_to_int_ref(x, target):
    """Truncate toward zero, saturate at the range of target, NaN -> 0."""
    info = np.iinfo(NP[target])
    out = []
    for v in np.asarray(x, dtype=np.float64).tolist():
        if math.isnan(v):
            out.append(0)
        elif math.isinf(v):
            out.append(info.max if v > 0 else info.min)
        else:
            out.append(min(max(math.trunc(v), int(info.min)), int(info.max)))
    return np.array(out, dtype=NP[target])


def _cast_input(dt, n):
    g = rng(34)
    x = g.standard_normal(n) * 100
    specials = [
        np.nan,
        np.inf,
        -np.inf,
        2.5,
        -2.5,
        0.99,
        -0.99,
        127.9,
        -128.9,
        255.5,
        256.0,
        -1.0,
        3e9,
        -3e9,
        2.0**31,
        -(2.0**31),
        2.0**63,
        -(2.0**63),
        1e20,
        -1e20,
        65535.7,
    ]
    k = min(n, len(specials))
    x[:k] = specials[:k]
    return x.astype(NP[dt])


@pytest.mark.parametrize("n", (0, 1, 7, 13, 37))
@pytest.mark.parametrize("target", CAST_TARGETS)
@pytest.mark.parametrize("dt", FLOATS)
def test_cast_float_to_int(lib, dt, target, n):
    x = _cast_input(dt, n)
    y = lib[f"cast_{dt}_{target}"](x)
    assert_close(y, _float_to_int_ref(x, target), dtype=NP[target])


@pytest.mark.parametrize("n", (0, 1, 7, 37))
@pytest.mark.parametrize("dt", FLOATS)
def test_cast_float_to_float_and_bool(lib, dt, n):
    x = _cast_input(dt, n)
    assert_close(lib[f"cast_{dt}_f32"](x), x.astype(np.float32), rtol=0, atol=0)
    assert_close(lib[f"cast_{dt}_f64"](x), x.astype(np.float64), rtol=0, atol=0)
    assert_close(lib[f"cast_{dt}_bool"](x), x != 0, dtype=np.bool_)


@pytest.mark.parametrize("n", (0, 1, 7, 37))
@pytest.mark.parametrize("target", CAST_TARGETS + ("f32", "f64", "bool"))
@pytest.mark.parametrize("dt", INTS)
def test_cast_from_int(lib, dt, target, n):
    """Integer to integer wraps (numpy astype); to float rounds to nearest; to bool is != 0."""
    if target == dt:
        return
    info = np.iinfo(NP[dt])
    x = randint(n, info.min, info.max, NP[dt], seed=35)
    if n >= 4:
        x[:4] = [info.min, info.max, 0, 1]
    y = lib[f"cast_{dt}_{target}"](x)
    expected = x != 0 if target == "bool" else x.astype(NP[target])
    assert_close(y, expected, dtype=NP[target], rtol=0, atol=0)


# ------------------------------------------------------------------ numerics policy


NAN_CASES = [np.nan, 1.0, np.nan, -np.inf, 2.0, np.nan, 0.0]
NAN_OTHER = [0.5, np.nan, np.nan, np.nan, -3.0, 7.0, np.inf]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_nan_propagates_through_maximum_minimum(lib, op, dt):
    x = np.array(NAN_CASES * 3, dtype=NP[dt])
    y = np.array(NAN_OTHER * 3, dtype=NP[dt])
    expected = getattr(np, op)(x, y)
    assert_close(lib[f"b_{op}_{dt}"](x, y), expected, rtol=0, atol=0)
    assert_close(lib[f"b_{op}_{dt}"](y, x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
def test_nan_propagates_through_relu_and_clip(lib, dt):
    x = np.array([np.nan, -1.0, 3.0, np.nan, 0.25, -np.inf, np.inf] * 3, dtype=NP[dt])
    assert_close(lib[f"u_relu_{dt}"](x), np.maximum(x, 0), rtol=0, atol=0)
    expected = np.clip(x, NP[dt](-0.5), NP[dt](2))
    assert np.isnan(expected).sum() == 6
    assert_close(lib[f"clipc_{dt}"](x), expected, rtol=0, atol=0)
    lo = np.full_like(x, -1)
    hi = np.full_like(x, 1)
    assert_close(lib[f"clip_{dt}"](x, lo, hi), np.clip(x, lo, hi), rtol=0, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
def test_round_half_to_even(lib, dt):
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 4.5, 1e7 + 0.5, -2.4, 2.6, 0.49999997], dtype=NP[dt])
    assert_close(lib[f"u_round_{dt}"](x), np.round(x), rtol=0, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
def test_nan_in_transcendentals(lib, dt):
    x = np.array([np.nan, 1.0, np.nan], dtype=NP[dt])
    for fn in ("exp", "log", "sin", "tanh", "sigmoid", "gelu", "sqrt", "floor", "round", "sign"):
        y = lib[f"u_{fn}_{dt}"](x)
        assert np.isnan(y[0]) and np.isnan(y[2]), fn


@pytest.mark.parametrize("dt", FLOATS)
def test_small_argument_accuracy(lib, dt):
    """expm1 and log1p keep full relative accuracy near 0 (a few ulp, no atol)."""
    x = np.array([1e-6, -1e-6, 1e-10, 3e-5, -2e-7, 1e-20], dtype=NP[dt])
    rtol = 1e-5 if dt == "f32" else 1e-12
    assert_close(lib[f"u_expm1_{dt}"](x), _ref(np.expm1, x), rtol=rtol, atol=0)
    assert_close(lib[f"u_log1p_{dt}"](x), _ref(np.log1p, x), rtol=rtol, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
def test_large_argument_stability(lib, dt):
    """sigmoid, softplus, silu, gelu and tanh stay finite and exact far from 0."""
    x = np.array([-100.0, -50.0, -30.0, 30.0, 50.0, 100.0, 1000.0], dtype=NP[dt])
    tol = _tol(dt)
    for fn in ("sigmoid", "softplus", "silu", "gelu", "gelu_tanh", "tanh", "relu"):
        ref = UNARY[fn][0]
        assert_close(lib[f"u_{fn}_{dt}"](x), _ref(ref, x), err_msg=fn, **tol)


@pytest.mark.parametrize("dt", FLOATS)
def test_pow_of_negative_base(lib, dt):
    x = np.array([-2.0, -3.0, -0.5, 2.0, 0.0], dtype=NP[dt])
    y = np.array([3.0, 2.0, -1.0, 0.5, 0.0], dtype=NP[dt])
    assert_close(lib[f"b_pow_{dt}"](x, y), _ref(np.power, x, y), **_tol(dt))
    assert_close(lib[f"b_powop_{dt}"](x, y), _ref(np.power, x, y), **_tol(dt))
    y = np.array([0.5, 1.5, 2.0, 3.0, 1.0], dtype=NP[dt])
    assert np.isnan(lib[f"b_pow_{dt}"](x, y)[:2]).all()


@pytest.mark.parametrize("dt", FLOATS)
def test_float_floordiv_mod_negative(lib, dt):
    x = np.array([7, -7, 7, -7, 7.5, -7.5, 0.0, 1e-3, -1e-3, 6], dtype=NP[dt])
    y = np.array([2, 2, -2, -2, 2, -2, 3.0, 1, 1, 3], dtype=NP[dt])
    assert_close(lib[f"b_floordiv_{dt}"](x, y), np.floor_divide(x, y), rtol=0, atol=0)
    assert_close(lib[f"b_mod_{dt}"](x, y), np.mod(x, y), **_tol(dt))


@pytest.mark.parametrize("dt", FLOATS)
def test_float_division_by_zero(lib, dt):
    x = np.array([1.0, -2.0, 0.0, np.inf], dtype=NP[dt])
    y, z, w = lib[f"fdivz_{dt}"](x)
    zero = np.zeros_like(x)
    with np.errstate(all="ignore"):
        assert_close(y, x / zero, rtol=0, atol=0)
        assert_close(z, np.floor_divide(x, zero), rtol=0, atol=0)
        assert_close(w, np.mod(x, zero), rtol=0, atol=0)


@pytest.mark.parametrize("dt", INTS)
def test_int_floordiv_mod_negative_and_zero(lib, dt):
    info = np.iinfo(NP[dt])
    signed = info.min < 0
    xs = [7, -7, 7, -7, 0, 5, -5, 0, info.min, info.max, info.min]
    ys = [2, 2, -2, -2, 3, 0, 0, 0, -1, -1, 0]
    if not signed:
        xs = [7, 250, 0, 5, 0, 255, 13]
        ys = [2, 7, 3, 0, 0, 1, 255]
    x = np.array(xs).astype(NP[dt])
    y = np.array(ys).astype(NP[dt])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = np.floor_divide(x, y)
        r = np.mod(x, y)
    # numpy: division or modulo by zero gives 0; info.min // -1 wraps to info.min
    assert (q[y == 0] == 0).all() and (r[y == 0] == 0).all()
    assert_close(lib[f"i_floordiv_{dt}"](x, y), q, dtype=NP[dt])
    assert_close(lib[f"i_mod_{dt}"](x, y), r, dtype=NP[dt])


@pytest.mark.parametrize("n", SIZES0)
def test_i32_wraparound(lib, n):
    g = rng(36)
    x = g.integers(2**31 - 1000, 2**31 - 1, n, endpoint=True).astype(np.int32)
    y = g.integers(1, 5000, n).astype(np.int32)
    x[::2] = -x[::2]
    s, d, p = lib["i32_overflow"](x, y)
    with np.errstate(over="ignore"):
        assert_close(s, x + y, dtype=np.int32)
        assert_close(d, x - y, dtype=np.int32)
        assert_close(p, x * y, dtype=np.int32)
    # int64 arithmetic modulo 2**32, interpreted as signed
    wrapped = ((x.astype(np.int64) + y.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)
    np.testing.assert_array_equal(s, wrapped)


def test_i8_multiply_wraps(lib):
    x = np.array([100, -100, 127, -128, 16, 11], dtype=np.int8)
    y = np.array([3, 3, 127, -1, 16, -12], dtype=np.int8)
    z = lib["i_mul_i8"](x, y)
    np.testing.assert_array_equal(z, np.array([44, -44, 1, -128, 0, 124], dtype=np.int8))


def test_u8_literal_wraps(lib):
    x = np.array([0, 1, 2, 255, 128], dtype=np.uint8)
    np.testing.assert_array_equal(lib["u8_lit"](x), (x.astype(np.int64) + 255) % 256)


@pytest.mark.parametrize("n", NS)
def test_chain(lib, n):
    g = rng(37)
    x = g.standard_normal(n).astype(np.float32)
    y = g.standard_normal(n).astype(np.float32)
    y[::4] = np.nan
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    t = np.exp(-np.abs(x64)) * y64
    u = np.sqrt(t * t + 1.0) - 1.0 / (1.0 + x64 * x64)
    expected = np.maximum(u, np.tanh(t)) + np.where(np.isnan(y64), 0.0, 1.0)
    assert_close(lib["chain_f32"](x, y), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
def test_int_literal_divisors(lib, dt, n):
    """Floor division and modulo by constants (where shifts and masks are tempting)."""
    info = np.iinfo(NP[dt])
    x = randint(n, info.min, info.max, NP[dt], seed=38)
    if n >= 4:
        x[:4] = [info.min, info.max, 0, info.min + 1]
    got = lib[f"i_litdiv_{dt}"](x)
    divisors = [4, 4, 3, 3, 1, 1] + ([] if dt.startswith("u") else [-3, -3, -4, -4])
    with np.errstate(all="ignore"):
        for k, (value, d) in enumerate(zip(got, divisors, strict=True)):
            op = np.floor_divide if k % 2 == 0 else np.mod
            assert_close(value, op(x, NP[dt](d)), dtype=NP[dt], err_msg=f"{op.__name__} {d}")


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INTS)
def test_int_where_with_scalar(lib, dt, n):
    info = np.iinfo(NP[dt])
    x = randint(n, max(info.min, -50), min(info.max, 50), NP[dt], seed=39)
    s = NP[dt](7)
    expected = np.where(x > s, s, x) + np.maximum(x, s) - np.minimum(x, NP[dt](2))
    with np.errstate(all="ignore"):
        assert_close(lib[f"i_where_scalar_{dt}"](x, s), expected, dtype=NP[dt])


@pytest.mark.parametrize("bkn", [(1, 1, 1), (2, 7, 13), (3, 37, 1), (0, 2, 2)])
@pytest.mark.parametrize("dt", FLOATS)
def test_matmul_vector_batch(lib, dt, bkn):
    b, k, n = bkn
    g = rng(40)
    v = g.standard_normal(k).astype(NP[dt])
    m = g.standard_normal((b, k, n)).astype(NP[dt])
    assert_close(lib[f"mmv3_{dt}"](v, m), v.astype(np.float64) @ m, **_mm_tol(dt, k))


SPECIAL_VALUES = [
    np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0,
    -2.0,
    1e30,
    -1e30,
    1e-30,
    -1e-30,
    0.5,
    -0.5,
    100.0,
    -100.0,
    1000.0,
    -1000.0,
    1e-45,
    3.4e38,
]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("fn", SPECIAL_FNS)
def test_special_values(lib, fn, dt):
    """inf, nan, signed zeros, overflow and domain edges give numpy's (IEEE) results."""
    x = np.array(SPECIAL_VALUES, dtype=NP[dt])
    got = lib[f"specials_{dt}"](x)[SPECIAL_FNS.index(fn)]
    ref = UNARY[fn][0] if fn in UNARY else None
    expected = _ref(ref, x)
    with np.errstate(all="ignore"):
        expected = expected.astype(NP[dt])  # overflow to inf in the dtype, like the result
    finite = np.isfinite(expected)
    # infinities and NaNs must match exactly, finite values within a few ulp
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=f"{fn} nan at {x}")
    np.testing.assert_array_equal(
        got[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)], err_msg=f"{fn} inf"
    )
    assert_close(got[finite], expected[finite], err_msg=fn, **_tol(dt))


@pytest.mark.parametrize("dt", FLOATS)
def test_pow_special_values(lib, dt):
    pairs = [
        (np.nan, 0.0),
        (1.0, np.nan),
        (0.0, -1.0),
        (-0.0, -1.0),
        (0.0, 0.0),
        (-8.0, 1 / 3),
        (np.inf, -1.0),
        (-np.inf, 3.0),
        (2.0, np.inf),
        (0.5, np.inf),
        (-1.0, np.inf),
        (2.0, 1024.0),
        (2.0, -1080.0),
        (-2.0, 0.5),
        (np.nan, 1.0),
        (4.0, 0.5),
    ]
    x = np.array([p[0] for p in pairs], dtype=NP[dt])
    y = np.array([p[1] for p in pairs], dtype=NP[dt])
    with np.errstate(all="ignore"):
        expected = np.power(x, y)
    assert_close(lib[f"b_pow_{dt}"](x, y), expected, **_tol(dt))
    assert_close(lib[f"b_powop_{dt}"](x, y), expected, **_tol(dt))


@pytest.mark.parametrize("n", (16, 37, 100))
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_nan_propagation_long_vectors(lib, op, dt, n):
    g = rng(41)
    x = g.standard_normal(n).astype(NP[dt])
    y = g.standard_normal(n).astype(NP[dt])
    x[g.random(n) < 0.2] = np.nan
    y[g.random(n) < 0.2] = np.nan
    expected = getattr(np, op)(x, y)
    assert_close(lib[f"b_{op}_{dt}"](x, y), expected, rtol=0, atol=0)
    assert_close(lib[f"u_relu_{dt}"](x), np.maximum(x, 0), rtol=0, atol=0)
    assert_close(lib[f"clipc_{dt}"](y), np.clip(y, NP[dt](-0.5), NP[dt](2)), rtol=0, atol=0)


def test_no_unsafe_algebraic_folding(lib):
    """x - x, x * 0, x + 0, x / x, x == x ... keep IEEE results for NaN, inf and -0.0;
    division by a constant is a correctly rounded division, not a multiplication."""
    x = np.array(
        [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, 3e38, 7.0, 1e-45, 0.3, 1.7, 123.456, 1e-40],
        np.float32,
    )
    got = dict(zip("abcdeghkmnfl", lib["fold_f32"](x), strict=True))
    f0, f1, f3, f10 = (np.float32(v) for v in (0, 1, 3, 10))
    with np.errstate(all="ignore"):
        expected = {
            "a": x - x, "b": x * f0, "c": x + f0, "d": x / x, "e": x / f3, "f": x == x,
            "g": x * f1 - f0, "h": (x + f1) - f1, "k": f0 - x, "l": ~(x < f0),
            "m": np.maximum(x, x), "n": x / f10,
        }  # fmt: skip
    for name, want in expected.items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)
        if want.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(want), err_msg=name)
    xi = np.array([0, 5, -7, 2**30, -(2**31), 2**31 - 1], np.int32)
    got = lib["fold_i32"](xi)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [xi // xi, xi % xi, (xi * np.int32(2)) // np.int32(2), (xi + np.int32(1)) - 1]
    for name, value, want in zip("abcd", got, expected, strict=True):
        np.testing.assert_array_equal(value, want, err_msg=name)


@pytest.mark.parametrize("n", NS)
def test_language_misc(lib, n):
    """nan/True/False literals, comments and `;`, literal bases of ** and pow, a weak where,
    a rank-0 input declared `f32[]`, integer literals meeting u8."""
    g = rng(42)
    x = (g.standard_normal(n) * 2).astype(np.float32)
    k = g.integers(0, 31, n).astype(np.int32)
    u = g.integers(0, 255, n, endpoint=True).astype(np.uint8)
    y, b, p, q, w, r, c = lib["lang_misc"](x, k, np.float32(0.75), u)
    f = np.float32
    assert_close(y, np.where(x > 0, x, np.nan), rtol=0, atol=0)
    assert_close(b, x > 0, dtype=np.bool_)
    assert_close(p, np.power(2.0, x.astype(np.float64)) + np.power(3.0, x.astype(np.float64)))
    assert_close(q, np.power(np.int32(2), k), dtype=np.int32)
    assert_close(w, x * f(2) + np.where(x > 0, f(1), f(2)) - x, rtol=0, atol=0)
    assert r.shape == ()
    assert_close(r, 1.5 + x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)
    with np.errstate(over="ignore"):
        expected_c = np.clip(u, 10, 200).astype(np.uint8) + np.maximum(u, 0) - np.minimum(u, 255)
    assert_close(c, expected_c.astype(np.uint8), dtype=np.uint8)


UB_SOURCE = """
[composite.ub_i32]
inputs = ["x: i32[N]", "y: i32[N]"]
outputs = ["a: i32[N]", "b: i32[N]", "c: i32[N]", "d: i32[N]", "e: i32[N]", "f: i32[N]", "g: i32[N]", "h: i32[N]"]
body = "a = x + y; b = x - y; c = x * y; d = x // y; e = x % y; f = -x; g = abs(x); h = x ** y"

[composite.ub_i64]
inputs = ["x: i64[N]", "y: i64[N]"]
outputs = ["a: i64[N]", "c: i64[N]", "d: i64[N]", "e: i64[N]", "s: i64"]
body = "a = x + y; c = x * y; d = x // y; e = x % y; s = sum(x) + prod(y)"

[composite.ub_i8]
inputs = ["x: i8[N]", "y: i8[N]"]
outputs = ["a: i8[N]", "c: i8[N]", "d: i8[N]"]
body = "a = x + y; c = x * y; d = x // y"

[composite.ub_casts]
inputs = ["x: f32[N]", "z: f64[N]"]
outputs = ["a: i32[N]", "b: u8[N]", "c: i64[N]", "d: u64[N]", "e: i8[N]", "f: f16[N]", "g: f32[N]"]
body = '''
a = cast(x, i32); b = cast(x, u8); c = cast(z, i64); d = cast(z, u64)
e = cast(x, i8); f = cast(z, f16); g = cast(z, f32)
'''

[composite.ub_reduce]
inputs = ["x: i32[M, N]"]
outputs = ["s: i32[M]", "p: i32[M]", "m: i32[M]"]
body = "s = sum(x, axis=1); p = prod(x, axis=1); m[i] = sum[j](x[i, j] * x[i, j])"
"""

UB_DRIVER = """
import sys
import numpy as np
from catenc.loader import load

lib = load(sys.argv[1])
i32, i64 = np.iinfo(np.int32), np.iinfo(np.int64)
x = np.array([i32.min, i32.max, i32.min, -7, 7, 0, i32.max, 3, -2], np.int32)
y = np.array([-1, 1, 0, 0, -2, 0, i32.max, 31, 31], np.int32)
lib["ub_i32"](x, y)
x = np.array([i64.min, i64.max, i64.min, 5, i64.max], np.int64)
y = np.array([-1, 1, 0, i64.max, i64.max], np.int64)
lib["ub_i64"](x, y)
lib["ub_i8"](np.array([-128, 127, -128, 100], np.int8), np.array([-1, 1, 0, 3], np.int8))
xf = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1.5, 300.7, 3.5e38], np.float32)
xd = np.array([np.nan, np.inf, -np.inf, 1e19, -1e19, 1e300, -1.5, 1e300, 2.0**64], np.float64)
lib["ub_casts"](xf, xd)
lib["ub_reduce"](np.full((3, 5), i32.max, np.int32))
print("no undefined behaviour")
"""


@pytest.mark.parametrize("opt", ["0", "2"])
def test_no_undefined_behaviour(tmp_path, opt):
    """Overflowing integer arithmetic, INT_MIN // -1, division by zero and out-of-range
    float -> int casts, built with UBSan in trap mode (--config CFLAGS=...): no trap."""
    # -fsanitize-undefined-trap-on-error: gcc 12 and clang both take it (gcc 12 has no -fsanitize-trap=)
    flags = "-fsanitize=undefined -fsanitize=float-cast-overflow -fsanitize-undefined-trap-on-error"
    lib = compile_text(tmp_path, UB_SOURCE, name="ub", opt=opt, config={"CFLAGS": flags})
    driver = tmp_path / "driver.py"
    driver.write_text(UB_DRIVER)
    result = subprocess.run(
        [sys.executable, str(driver), str(lib.manifest_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"trapped (status {result.returncode}): {result.stderr[-2000:]}"
    assert "no undefined behaviour" in result.stdout
