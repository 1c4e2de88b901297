"""Element types (docs/language.md, docs/abi.md) against numpy: f16 and bf16 computed in f32 and
rounded once at the output, dtype variables and `-D T=...`, bool tensors, every integer width.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_close, randint, rng

from catenc.dtypes import DTYPES, bf16_to_f32, f32_to_bf16, from_storage, to_storage

EXACT = dict(rtol=0, atol=0)
INT_WIDTHS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
NP_INT = {
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
}
HALVES = ("f16", "bf16")


def comp(name, inputs, outputs, body, extra=""):
    ins = ", ".join(f'"{d}"' for d in inputs)
    outs = ", ".join(f'"{d}"' for d in outputs)
    return f'[composite.{name}]\ninputs = [{ins}]\noutputs = [{outs}]\n{extra}body = """\n{body}\n"""\n\n'


def _source():
    parts = []
    for h in HALVES:
        parts.append(comp(f"fma_{h}", [f"a: {h}[N]", f"b: {h}[N]", f"c: {h}[N]"], [f"y: {h}[N]"], "y = a * b + c"))
        parts.append(
            comp(
                f"chain_{h}",
                [f"a: {h}[N]", f"b: {h}[N]"],
                [f"y: {h}[N]"],
                "y = (a * b + a) * (b - 0.5) + a * a * 0.25",
            )
        )
        parts.append(
            comp(
                f"transc_{h}",
                [f"a: {h}[N]"],
                [f"y: {h}[N]", f"z: {h}[N]"],
                "y = exp(a) * tanh(a)\nz = gelu(a) + sqrt(abs(a))",
            )
        )
        parts.append(comp(f"sum_{h}", [f"x: {h}[M, N]"], [f"s: {h}[M]", f"t: {h}"], "s = sum(x, axis=1)\nt = sum(x)"))
        parts.append(
            comp(
                f"idxsum_{h}",
                [f"x: {h}[M, N]"],
                [f"s: {h}[M]", f"m: {h}[M]"],
                "s[i] = sum[k](x[i, k])\nm[i] = mean[k](x[i, k])",
            )
        )
        parts.append(comp(f"mm_{h}", [f"a: {h}[M, K]", f"b: {h}[K, N]"], [f"c: {h}[M, N]"], "c = a @ b"))
        parts.append(comp(f"scalar_{h}", [f"x: {h}[N]", f"s: {h}"], [f"y: {h}[N]", f"m: {h}"], "y = x * s\nm = max(x)"))
        parts.append(comp(f"to_{h}", ["x: f32[N]"], [f"y: {h}[N]"], f"y = cast(x, {h})"))
        parts.append(
            comp(f"from_{h}", [f"x: {h}[N]"], ["y: f32[N]", "z: f64[N]"], "y = cast(x, f32)\nz = cast(x, f64)")
        )
        parts.append(
            comp(f"cmp_{h}", [f"x: {h}[N]", f"y: {h}[N]"], ["c: bool[N]", f"m: {h}[N]"], "c = x < y\nm = maximum(x, y)")
        )
        parts.append(
            comp(
                f"softmax_{h}",
                [f"x: {h}[M, N]"],
                [f"y: {h}[M, N]"],
                "e = exp(x - max(x, axis=-1, keepdims=True))\ny = e / sum(e, axis=-1, keepdims=True)",
            )
        )
    parts.append(comp("f16_to_bf16", ["x: f16[N]"], ["y: bf16[N]"], "y = cast(x, bf16)"))
    for h in HALVES:
        parts.append(comp(f"round_{h}", [f"x: {h}[N]"], [f"y: {h}[N]", f"a: {h}[N]"], "y = round(x)\na = abs(x) * 0.5"))
    parts.append(comp("f64_to_half", ["x: f64[N]"], ["y: f16[N]", "z: bf16[N]"], "y = cast(x, f16)\nz = cast(x, bf16)"))
    for h in HALVES:
        parts.append(
            comp(
                f"{h}_to_int",
                [f"x: {h}[N]"],
                ["a: i8[N]", "b: u8[N]", "c: i32[N]"],
                "a = cast(x, i8)\nb = cast(x, u8)\nc = cast(x, i32)",
            )
        )
        parts.append(
            comp(
                f"{h}_arg_mean",
                [f"x: {h}[M, N]"],
                ["i: i64[M]", f"m: {h}[M]"],
                "i = argmax(x, axis=1)\nm = mean(x, axis=1)",
            )
        )
    parts.append(comp("mix_precision", ["x: f16[N]", "w: bf16[N]"], ["y: f32[N]"], "y = cast(x, f32) * cast(w, f32)"))
    parts.append(
        comp(
            "typevar",
            ["x: T[N]", "y: T[N]"],
            ["z: T[N]", "s: T"],
            "z = x * y + exp(x) * 0.1\ns = sum(z)",
            extra='types = { T = ["f32", "f64"] }\n',
        )
    )
    parts.append(
        comp("typevar_int", ["x: I[N]"], ["z: I[N]"], "z = x * 3 + 1", extra='types = { I = ["i32", "i8", "u16"] }\n')
    )
    for dt in INT_WIDTHS:
        parts.append(
            comp(
                f"int_{dt}",
                [f"x: {dt}[N]", f"y: {dt}[N]"],
                [f"s: {dt}[N]", f"p: {dt}[N]", f"d: {dt}[N]"],
                "s = x + y\np = x * y\nd = x - y",
            )
        )
        parts.append(
            comp(
                f"intsum_{dt}",
                [f"x: {dt}[M, N]"],
                [f"s: {dt}[M]", f"m: {dt}[M]"],
                "s = sum(x, axis=1)\nm = max(x, axis=1)",
            )
        )
    parts.append(
        comp(
            "bools",
            ["a: bool[N]", "x: f32[N]"],
            ["y: bool[N]", "n: i64", "z: f32[N]", "w: bool[N]"],
            "y = a & (x > 0) | ~a & (x < -1)\n"
            "n = sum(cast(a, i64))\n"
            "z = where(a, x, -x) + cast(a, f32)\n"
            "w = a == (x > 0.5)",
        )
    )
    parts.append(
        comp("bool_scalar", ["a: bool", "x: f32[N]"], ["y: f32[N]", "b: bool"], "y = where(a, x, 0.0)\nb = ~a")
    )
    return "".join(parts)


SOURCE = _source()


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="dtypes", opt=request.param)


# ------------------------------------------------------------- half precision helpers


def to_half(values, h):
    """f32 values rounded once to the storage of h (float16, or bf16 bits)."""
    values = np.asarray(values, dtype=np.float32)
    with np.errstate(over="ignore"):
        return values.astype(np.float16) if h == "f16" else f32_to_bf16(values)


def from_half(stored, h):
    stored = np.asarray(stored)
    return stored.astype(np.float32) if h == "f16" else bf16_to_f32(stored)


def rand_half(shape, h, seed=0, scale=1.0):
    return to_half(rng(seed).standard_normal(shape) * scale, h)


def assert_half(actual, expected_f32, h, ulps=0):
    """actual (storage of h) equals expected_f32 rounded once to h, within `ulps` units."""
    actual = np.asarray(actual)
    assert actual.dtype == (np.float16 if h == "f16" else ml_dtypes.bfloat16), actual.dtype  # the loader's
    expected = to_half(expected_f32, h)
    assert actual.shape == expected.shape
    if ulps == 0:
        np.testing.assert_array_equal(from_half(actual, h), from_half(expected, h))
        return
    got, want = from_half(actual, h), from_half(expected, h)
    eps = 2.0**-10 if h == "f16" else 2.0**-7
    np.testing.assert_allclose(got, want, rtol=ulps * eps, atol=ulps * eps * 2.0**-4)


NS = (0, 1, 7, 13, 37)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("h", HALVES)
def test_half_fma_rounded_once(lib, h, n):
    a, b, c = (rand_half(n, h, seed=s, scale=4) for s in range(3))
    fa, fb, fc = (from_half(v, h) for v in (a, b, c))
    y = lib[f"fma_{h}"](a, b, c)
    assert_half(y, fa * fb + fc, h)


@pytest.mark.parametrize("n", NS + (100,))
@pytest.mark.parametrize("h", HALVES)
def test_half_chain_rounded_once(lib, h, n):
    """A chain of operations in f32, rounded once: rounding every step to h differs."""
    a, b = rand_half(n, h, seed=3, scale=3), rand_half(n, h, seed=4, scale=3)
    fa, fb = from_half(a, h), from_half(b, h)
    expected = (fa * fb + fa) * (fb - np.float32(0.5)) + fa * fa * np.float32(0.25)
    assert_half(lib[f"chain_{h}"](a, b), expected, h)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("h", HALVES)
def test_half_transcendentals(lib, h, n):
    a = rand_half(n, h, seed=5, scale=2)
    fa = from_half(a, h).astype(np.float64)
    import math

    erf = np.vectorize(math.erf)
    y, z = lib[f"transc_{h}"](a)
    assert_half(y, np.exp(fa) * np.tanh(fa), h, ulps=1)
    gelu = fa * 0.5 * (1.0 + erf(fa / math.sqrt(2.0))) if n else fa
    assert_half(z, gelu + np.sqrt(np.abs(fa)), h, ulps=1)


@pytest.mark.parametrize("mn", [(1, 1), (3, 7), (2, 37), (1, 3000), (0, 5), (4, 0)])
@pytest.mark.parametrize("h", HALVES)
def test_half_sum_accumulates_in_f32(lib, h, mn):
    m, n = mn
    x = to_half(np.ones(mn) + rng(6).integers(0, 2, mn) * 0.5, h)
    fx = from_half(x, h).astype(np.float64)
    s, t = lib[f"sum_{h}"](x)
    assert_half(s, fx.sum(axis=1), h)
    assert_half(t, fx.sum(), h)
    s, mean = lib[f"idxsum_{h}"](x)
    assert_half(s, fx.sum(axis=1), h)
    if n:
        assert_half(mean, fx.mean(axis=1), h, ulps=1)


@pytest.mark.parametrize("mkn", [(1, 1, 1), (7, 13, 5), (13, 37, 3), (2, 100, 2)])
@pytest.mark.parametrize("h", HALVES)
def test_half_matmul(lib, h, mkn):
    m, k, n = mkn
    a, b = rand_half((m, k), h, seed=7), rand_half((k, n), h, seed=8)
    expected = from_half(a, h).astype(np.float64) @ from_half(b, h).astype(np.float64)
    assert_half(lib[f"mm_{h}"](a, b), expected, h, ulps=1)


@pytest.mark.parametrize("n", (1, 7, 13))
@pytest.mark.parametrize("h", HALVES)
def test_half_scalar_by_value(lib, h, n):
    x = rand_half(n, h, seed=9)
    s = to_half(np.float32(-1.5), h)[()]
    y, m = lib[f"scalar_{h}"](x, s)
    assert_half(y, from_half(x, h) * np.float32(-1.5), h)
    assert m.shape == ()
    assert_half(m, from_half(x, h).max(), h)


def _bfloat16(values) -> np.ndarray:
    """f32 values rounded once to ml_dtypes' bfloat16 (what onnx, JAX and TensorFlow hand numpy users)."""
    return np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("n", (0, 1, 13))
def test_bf16_takes_and_gives_ml_dtypes_arrays(lib, n):
    """An ml_dtypes bfloat16 array is a bf16 input as it is; bf16 results come back as such arrays."""
    a, b, c = (_bfloat16(rng(s).standard_normal(n) * 4) for s in range(3))
    y = lib["fma_bf16"](a, b, c)
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == (n,)
    want = _bfloat16(a.astype(np.float32) * b.astype(np.float32) + c.astype(np.float32))
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    y, m = lib["scalar_bf16"](a, ml_dtypes.bfloat16(-1.5))
    np.testing.assert_array_equal(y.view(np.uint16), _bfloat16(a.astype(np.float32) * -1.5).view(np.uint16))
    assert m.dtype == ml_dtypes.bfloat16 and m.shape == ()
    # a bfloat16 array widens to an f32 input; uint16 bits are still bf16 bits
    assert_close(lib["mix_precision"](a.astype(np.float16), a), a.astype(np.float32) ** 2, rtol=1e-6, atol=0)
    bits = lib["fma_bf16"](a.view(np.uint16), b.view(np.uint16), c.view(np.uint16))
    np.testing.assert_array_equal(bits.view(np.uint16), want.view(np.uint16))


def test_bf16_out_may_be_ml_dtypes_or_bits(lib):
    a = _bfloat16(rng(3).standard_normal(5))
    want = _bfloat16(a.astype(np.float32) * 2 + a.astype(np.float32))
    for out in (np.empty(5, ml_dtypes.bfloat16), np.empty(5, np.uint16)):
        assert lib["fma_bf16"](a, _bfloat16(np.full(5, 2)), a, out=out) is out
        np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_bf16_without_ml_dtypes_is_uint16_bits(lib, monkeypatch):
    """Where ml_dtypes is not installed a bf16 result is its uint16 bits (docs/abi.md)."""
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` raises ImportError
    a, b, c = (rand_half(7, "bf16", seed=s) for s in range(3))
    y = lib["fma_bf16"](a, b, c)
    assert y.dtype == np.uint16
    want = f32_to_bf16(bf16_to_f32(a) * bf16_to_f32(b) + bf16_to_f32(c))
    np.testing.assert_array_equal(y, want)


def test_storage_conversions_take_ml_dtypes_bfloat16():
    """from_storage reads an ml_dtypes array's values (not its values cast to uint16); to_storage keeps its bits."""
    values = _bfloat16([1.5, -2.25, 3.0e38, np.inf, 0.0])
    np.testing.assert_array_equal(from_storage(values, DTYPES["bf16"]), values.astype(np.float32))
    np.testing.assert_array_equal(to_storage(values, DTYPES["bf16"]), values.view(np.uint16))
    np.testing.assert_array_equal(bf16_to_f32(values.view(np.uint16)), values.astype(np.float32))


def _cast_values(n):
    x = rng(10).standard_normal(n).astype(np.float32) * 10
    specials = np.array(
        [
            np.nan,
            np.inf,
            -np.inf,
            65504.0,
            65520.0,
            70000.0,
            -1e6,
            1e-8,
            6e-5,
            3e38,
            1.0 + 2**-11,
            1.0 + 3 * 2**-11,
            1.0 + 2**-8,
            1.0 + 3 * 2**-8,
            -0.0,
        ],
        dtype=np.float32,
    )
    k = min(n, len(specials))
    x[:k] = specials[:k]
    return x


@pytest.mark.parametrize("n", (1, 7, 15, 37))
@pytest.mark.parametrize("h", HALVES)
def test_cast_to_half_nearest_even(lib, h, n):
    x = _cast_values(n)
    y = lib[f"to_{h}"](x)
    expected = to_half(x, h)
    got, want = from_half(y, h), from_half(expected, h)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("h", HALVES)
def test_cast_from_half_exact(lib, h, n):
    x = rand_half(n, h, seed=11, scale=100)
    y, z = lib[f"from_{h}"](x)
    assert_close(y, from_half(x, h), dtype=np.float32, **EXACT)
    assert_close(z, from_half(x, h).astype(np.float64), dtype=np.float64, **EXACT)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("h", HALVES)
def test_half_compare_and_maximum(lib, h, n):
    x, y = rand_half(n, h, seed=12), rand_half(n, h, seed=13)
    if n >= 2:
        x[0] = to_half(np.float32(np.nan), h)
        y[1] = to_half(np.float32(np.nan), h)
    c, m = lib[f"cmp_{h}"](x, y)
    fx, fy = from_half(x, h), from_half(y, h)
    with np.errstate(invalid="ignore"):
        assert_close(c, fx < fy, dtype=np.bool_)
    got = from_half(m, h)
    np.testing.assert_array_equal(got, np.maximum(fx, fy))


@pytest.mark.parametrize("mn", [(1, 1), (3, 7), (5, 37), (0, 3)])
@pytest.mark.parametrize("h", HALVES)
def test_half_softmax(lib, h, mn):
    x = rand_half(mn, h, seed=14, scale=3)
    fx = from_half(x, h).astype(np.float64)
    e = np.exp(fx - fx.max(axis=-1, keepdims=True)) if mn[0] else fx
    expected = e / e.sum(axis=-1, keepdims=True) if mn[0] else fx
    assert_half(lib[f"softmax_{h}"](x), expected, h, ulps=1)


@pytest.mark.parametrize("n", NS)
def test_f16_to_bf16_and_mixed(lib, n):
    x = rand_half(n, "f16", seed=15, scale=50)
    assert_half(lib["f16_to_bf16"](x), x.astype(np.float32), "bf16")
    w = rand_half(n, "bf16", seed=16)
    assert_close(lib["mix_precision"](x, w), x.astype(np.float32) * bf16_to_f32(w), **EXACT)


# ----------------------------------------------------------------- dtype variables


TYPEVAR_TOL = {"f32": dict(rtol=1e-5, atol=1e-6), "f64": dict(rtol=1e-12, atol=1e-12)}


@pytest.fixture(scope="module", params=[None, "f32", "f64"], ids=["default", "T=f32", "T=f64"])
def typevar(request, compile_composites):
    defines = {} if request.param is None else {"T": request.param}
    lib = compile_composites(SOURCE, name="dtypes_tv", defines=defines, composites=("typevar",))
    return lib, request.param or "f32"


@pytest.mark.parametrize("n", NS)
def test_dtype_variable(typevar, n):
    lib, dt = typevar
    np_dt = np.float32 if dt == "f32" else np.float64
    x = rng(17).standard_normal(n).astype(np_dt)
    y = rng(18).standard_normal(n).astype(np_dt)
    z, s = lib["typevar"](x, y)
    assert z.dtype == np_dt and s.dtype == np_dt
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    expected = x64 * y64 + np.exp(x64) * 0.1
    assert_close(z, expected, **TYPEVAR_TOL[dt])
    assert_close(s, expected.sum(), **TYPEVAR_TOL[dt])


@pytest.mark.parametrize("dt", ["i32", "i8", "u16"])
def test_int_dtype_variable(compile_composites, dt):
    lib = compile_composites(SOURCE, name="dtypes_tvi", defines={"I": dt}, composites=("typevar_int",))
    info = np.iinfo(NP_INT[dt])
    for n in NS:
        x = randint(n, info.min, info.max, NP_INT[dt], seed=n)
        with np.errstate(over="ignore"):
            expected = x * NP_INT[dt](3) + NP_INT[dt](1)
        assert_close(lib["typevar_int"](x), expected, dtype=NP_INT[dt])


# ------------------------------------------------------------------------ integers


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dt", INT_WIDTHS)
def test_int_widths_add_mul_wrap(lib, dt, n):
    info = np.iinfo(NP_INT[dt])
    x = randint(n, info.min, info.max, NP_INT[dt], seed=19)
    y = randint(n, info.min, info.max, NP_INT[dt], seed=20)
    if n >= 2:
        x[:2] = [info.max, info.min]
        y[:2] = [1, info.max]
    s, p, d = lib[f"int_{dt}"](x, y)
    with np.errstate(over="ignore"):
        assert_close(s, x + y, dtype=NP_INT[dt])
        assert_close(p, x * y, dtype=NP_INT[dt])
        assert_close(d, x - y, dtype=NP_INT[dt])
    # independently of numpy: modular arithmetic on Python ints
    bits = info.bits
    mod = 1 << bits

    def wrap(v):
        v %= mod
        return v - mod if info.min < 0 and v >= mod // 2 else v

    for i in range(n):
        assert int(s[i]) == wrap(int(x[i]) + int(y[i]))
        assert int(p[i]) == wrap(int(x[i]) * int(y[i]))


@pytest.mark.parametrize("mn", [(1, 1), (3, 13), (2, 37), (0, 3), (3, 0)])
@pytest.mark.parametrize("dt", INT_WIDTHS)
def test_int_widths_reduce(lib, dt, mn):
    info = np.iinfo(NP_INT[dt])
    x = randint(mn, info.min, info.max, NP_INT[dt], seed=21)
    s, m = lib[f"intsum_{dt}"](x)
    assert_close(s, np.sum(x, axis=1, dtype=NP_INT[dt]), dtype=NP_INT[dt])
    expected_m = x.max(axis=1) if mn[1] else np.full(mn[0], info.min, NP_INT[dt])
    assert_close(m, expected_m, dtype=NP_INT[dt])


# ---------------------------------------------------------------------------- bool


@pytest.mark.parametrize("n", NS)
def test_bool_inputs_outputs(lib, n):
    g = rng(22)
    a = g.random(n) < 0.5
    x = (g.standard_normal(n) * 2).astype(np.float32)
    y, count, z, w = lib["bools"](a, x)
    assert_close(y, (a & (x > 0)) | (~a & (x < -1)), dtype=np.bool_)
    assert count.shape == () and int(count) == int(a.sum())
    assert_close(z, np.where(a, x, -x) + a.astype(np.float32), **EXACT)
    assert_close(w, a == (x > 0.5), dtype=np.bool_)
    # the storage is one byte 0/1
    assert y.view(np.uint8).max(initial=0) <= 1


@pytest.mark.parametrize("flag", [True, False])
def test_bool_scalar(lib, flag):
    x = rng(23).standard_normal(7).astype(np.float32)
    y, b = lib["bool_scalar"](np.bool_(flag), x)
    assert_close(y, x if flag else np.zeros_like(x), **EXACT)
    assert b.shape == () and bool(b) == (not flag)


DOUBLE_ROUNDING = np.array(
    [
        1 + 2**-11 + 2**-40,
        1 + 2**-11 - 2**-40,
        1 + 2**-8 + 2**-40,
        1 + 2**-8 - 2**-40,
        1 + 2**-11,
        1 + 3 * 2**-11,
        65519.99,
        65520.0,
        -2.0,
        2**-25 + 2**-60,
        0.1,
        1e-8,
    ],
    dtype=np.float64,
)


def test_f64_to_f16_rounds_once(lib):
    """cast(f64 -> f16) rounds the double directly, as numpy does (no rounding through f32:
    1 + 2**-11 + 2**-40 is above the tie between 1 and 1 + 2**-10)."""
    y, _ = lib["f64_to_half"](DOUBLE_ROUNDING)
    with np.errstate(over="ignore"):
        expected = DOUBLE_ROUNDING.astype(np.float16)
    np.testing.assert_array_equal(y.view(np.uint16), expected.view(np.uint16))


def test_f64_to_bf16_rounds_once(lib):
    """cast(f64 -> bf16) rounds the double directly: 1 + 2**-8 + 2**-40 is above the tie
    between 1 and 1 + 2**-7, 1 + 2**-8 - 2**-40 below it."""
    _, z = lib["f64_to_half"](DOUBLE_ROUNDING)
    expected = np.array([1.0, 1.0, 1 + 2**-7, 1.0], np.float32)
    np.testing.assert_array_equal(bf16_to_f32(z[:4]), expected)


@pytest.mark.parametrize("h", HALVES)
def test_half_to_int_saturates(lib, h):
    values = np.array([np.nan, np.inf, -np.inf, 300.0, -300.0, 2.75, -2.75, 65504.0, -0.5, 255.5], dtype=np.float32)
    x = to_half(values, h)
    a, b, c = lib[f"{h}_to_int"](x)
    fx = from_half(x, h).astype(np.float64)

    def ref(lo, hi):
        return [0 if np.isnan(v) else int(min(max(np.trunc(v), lo), hi)) for v in fx]

    np.testing.assert_array_equal(a, ref(-128, 127))
    np.testing.assert_array_equal(b, ref(0, 255))
    np.testing.assert_array_equal(c, ref(-(2**31), 2**31 - 1))


@pytest.mark.parametrize("mn", [(1, 1), (3, 7), (2, 37), (4, 0)])
@pytest.mark.parametrize("h", HALVES)
def test_half_argmax_and_empty_mean(lib, h, mn):
    m, n = mn
    x = to_half(rng(24).integers(-3, 3, mn).astype(np.float32), h)
    idx, mean = lib[f"{h}_arg_mean"](x) if n else (None, lib[f"{h}_arg_mean"](x)[1])
    fx = from_half(x, h)
    if n:
        np.testing.assert_array_equal(idx, np.argmax(fx, axis=1))
        assert_half(mean, fx.astype(np.float64).mean(axis=1), h, ulps=1)
    else:
        assert np.isnan(from_half(mean, h)).all() and mean.shape == (m,)


@pytest.mark.parametrize("h", HALVES)
def test_half_round_half_to_even(lib, h):
    x = to_half(np.array([0.5, 1.5, 2.5, -2.5, 3.5, 100.5, -0.5, 7.25, 1001.0, 0.0]), h)
    y, a = lib[f"round_{h}"](x)
    fx = from_half(x, h)
    assert_half(y, np.round(fx), h)
    assert_half(a, np.abs(fx) * np.float32(0.5), h)
