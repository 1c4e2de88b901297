"""Reductions (docs/language.md): array form with axis/keepdims, argmax/argmin, index form.

Compiled at -O0 and -O2; every case runs against both.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import assert_close, randint, rng

NP = {
    "f32": np.float32,
    "f64": np.float64,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "i8": np.int8,
}
FLOATS = ("f32", "f64")
INTS = ("i32", "i64", "u8", "i8")
OPS = ("sum", "mean", "max", "min", "prod")
INT_OPS = ("sum", "max", "min", "prod")
DIMS = ("A", "B", "C")
# axis argument text -> normalised axes (None: all)
AXES = {
    "none": None,
    "0": (0,),
    "1": (1,),
    "2": (2,),
    "m1": (2,),
    "02": (0, 2),
    "12": (1, 2),
    "m3m2": (0, 1),
    "012": (0, 1, 2),
}
AXIS_TEXT = {
    "none": None,
    "0": "0",
    "1": "1",
    "2": "2",
    "m1": "-1",
    "02": "(0, 2)",
    "12": "(1, 2)",
    "m3m2": "(-3, -2)",
    "012": "(0, 1, 2)",
}
SHAPES = [(1, 1, 1), (2, 7, 13), (3, 13, 1), (5, 3, 37), (0, 3, 4), (2, 0, 3), (2, 3, 0)]
INT_AXES = ("none", "0", "m1", "02", "12")
INT_SHAPES = [(1, 1, 1), (2, 7, 13), (5, 3, 37), (2, 0, 3)]


def comp(name, inputs, outputs, body):
    ins = ", ".join(f'"{d}"' for d in inputs)
    outs = ", ".join(f'"{d}"' for d in outputs)
    return f'[composite.{name}]\ninputs = [{ins}]\noutputs = [{outs}]\nbody = """\n{body}\n"""\n\n'


def _out_dims(axes, keepdims):
    axes = (0, 1, 2) if axes is None else axes
    dims = []
    for i, d in enumerate(DIMS):
        if i in axes:
            if keepdims:
                dims.append("1")
        else:
            dims.append(d)
    return f"[{', '.join(dims)}]" if dims else ""


def _source() -> str:
    parts = []
    for dt in FLOATS + INTS:
        ops = OPS if dt in FLOATS else INT_OPS
        for op in ops:
            for key, axis in AXIS_TEXT.items():
                if dt in INTS and key not in INT_AXES:
                    continue
                for keep in (False, True):
                    kw = [] if axis is None else [f"axis={axis}"]
                    if keep:
                        kw.append("keepdims=True")
                    elif key in ("0", "none"):
                        kw.append("keepdims=False")
                    args = ", ".join(["x"] + kw)
                    out = _out_dims(AXES[key], keep)
                    parts.append(
                        comp(
                            f"r_{op}_{dt}_{key}_{int(keep)}",
                            [f"x: {dt}[A, B, C]"],
                            [f"y: {dt}{out}"],
                            f"y = {op}({args})",
                        )
                    )
        for op in ("argmax", "argmin"):
            for axis in (0, 1, -1):
                for keep in (False, True):
                    a = axis % 2
                    tag = "m1" if axis < 0 else str(axis)
                    dims = ["A", "B"]
                    dims[a] = "1" if keep else ""
                    out = ", ".join(d for d in dims if d)
                    kw = ", keepdims=True" if keep else ""
                    parts.append(
                        comp(
                            f"{op}_{dt}_{tag}_{int(keep)}",
                            [f"x: {dt}[A, B]"],
                            [f"y: i64[{out}]"],
                            f"y = {op}(x, axis={axis}{kw})",
                        )
                    )
    for dt in FLOATS:
        for op in OPS:
            parts.append(
                comp(
                    f"ix_{op}_{dt}",
                    [f"x: {dt}[N, K]"],
                    [f"y: {dt}[N]"],
                    f"y[i] = {op}[k](x[i, k])",
                )
            )
        parts.append(
            comp(
                f"ix_multi_{dt}",
                [f"x: {dt}[N, C, R]", f"w: {dt}[C, R]"],
                [f"y: {dt}[N]", f"m: {dt}[N]"],
                "y[n] = sum[c, r](x[n, c, r] * w[c, r])\nm[n] = max[c, r](x[n, c, r])",
            )
        )
        parts.append(
            comp(
                f"ix_nested_{dt}",
                [f"x: {dt}[N, J, K]"],
                [f"y: {dt}[N]"],
                "y[n] = sum[k](max[j](x[n, j, k]) * 2.0) + min[j, k](x[n, j, k])",
            )
        )
        parts.append(
            comp(
                f"ix_masked_max_{dt}",
                [f"s: {dt}[T, T]"],
                [f"y: {dt}[T]"],
                "y[i] = max[j](where(j <= i, s[i, j], -inf))",
            )
        )
        parts.append(
            comp(
                f"ix_prod_mean_{dt}",
                [f"x: {dt}[N, K]"],
                [f"p: {dt}[N]", f"mu: {dt}[N]"],
                "p[i] = prod[k](x[i, k] + 1.0)\nmu[i] = mean[k](x[i, k] * x[i, k])",
            )
        )
        parts.append(
            comp(
                f"fused_{dt}",
                [f"x: {dt}[N, K]"],
                [f"y: {dt}[N, K]", f"s: {dt}"],
                "e = exp(x - max(x, axis=1, keepdims=True))\n"
                "y = e / sum(e, axis=-1, keepdims=True)\n"
                "s = sum(x * x) + mean(abs(x))",
            )
        )
    for dt in INTS:
        for op in INT_OPS:
            parts.append(
                comp(
                    f"ix_{op}_{dt}",
                    [f"x: {dt}[N, K]"],
                    [f"y: {dt}[N]"],
                    f"y[i] = {op}[k](x[i, k])",
                )
            )
    return "".join(parts)


SOURCE = _source()


@pytest.fixture(scope="module", params=["0", "2"], ids=["O0", "O2"])
def lib(request, compile_composites):
    return compile_composites(SOURCE, name="reductions", opt=request.param)


# ------------------------------------------------------------------ numpy references


def _identity(op, dt):
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if op == "mean":
        return np.nan
    if dt in FLOATS:
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(NP[dt])
    return info.min if op == "max" else info.max


def np_reduce(op, x, axes, keepdims, dt):
    """numpy's reduction in dt, with the identities of docs/language.md over empty axes."""
    axes = tuple(range(x.ndim)) if axes is None else axes
    empty = any(x.shape[a] == 0 for a in axes)
    if empty:
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        if not keepdims:
            shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
        return np.full(shape, _identity(op, dt), dtype=np.float64 if dt in FLOATS else NP[dt])
    if dt in FLOATS:
        x64 = x.astype(np.float64)
        return getattr(np, op)(x64, axis=axes, keepdims=keepdims)
    fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op]
    if op in ("sum", "prod"):
        return fn(x, axis=axes, keepdims=keepdims, dtype=NP[dt])  # wraps in dt
    return fn(x, axis=axes, keepdims=keepdims)


def _input(op, dt, shape, seed=0):
    if dt in FLOATS:
        g = rng(seed)
        if op == "prod":
            return g.uniform(0.8, 1.2, shape).astype(NP[dt])
        return g.standard_normal(shape).astype(NP[dt])
    info = np.iinfo(NP[dt])
    return randint(shape, info.min, info.max, NP[dt], seed=seed)


def _tol(op, dt, count):
    count = max(count, 1)
    if dt == "f32":
        return dict(rtol=1e-5 + 2e-7 * count, atol=1e-6 * count)
    return dict(rtol=1e-12 + 1e-15 * count, atol=1e-14 * count)


# ------------------------------------------------------------------------ array form


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", list(AXES))
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", OPS)
def test_array_reduction_float(lib, op, dt, axis, keep, shape):
    x = _input(op, dt, shape, seed=sum(shape))
    y = lib[f"r_{op}_{dt}_{axis}_{int(keep)}"](x)
    axes = AXES[axis]
    expected = np_reduce(op, x, axes, keep, dt)
    count = int(np.prod([shape[a] for a in (axes or (0, 1, 2))]))
    assert_close(y, expected, dtype=NP[dt], **_tol(op, dt, count))


@pytest.mark.parametrize("shape", INT_SHAPES)
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", INT_AXES)
@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", INT_OPS)
def test_array_reduction_int(lib, op, dt, axis, keep, shape):
    x = _input(op, dt, shape, seed=sum(shape) + 1)
    y = lib[f"r_{op}_{dt}_{axis}_{int(keep)}"](x)
    assert_close(y, np_reduce(op, x, AXES[axis], keep, dt), dtype=NP[dt])


@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("op", OPS)
def test_empty_reduction_identity(lib, op, dt):
    if op == "mean" and dt in INTS:
        return
    x = np.zeros((3, 2, 0), dtype=NP[dt])
    y = lib[f"r_{op}_{dt}_m1_0"](x)
    assert y.shape == (3, 2)
    expected = np.full((3, 2), _identity(op, dt))
    if dt in FLOATS:
        assert_close(y, expected, rtol=0, atol=0)
    else:
        np.testing.assert_array_equal(y, expected.astype(NP[dt]))
    y = lib[f"r_{op}_{dt}_none_0"](x)
    assert y.shape == ()
    assert_close(y, np.asarray(_identity(op, dt)).astype(y.dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["max", "min", "sum", "mean", "prod"])
def test_nan_propagates_through_reductions(lib, op, dt):
    x = rng(1).standard_normal((2, 4, 5)).astype(NP[dt])
    x[0, 0, 0] = np.nan  # first element of a row
    x[0, 3, 4] = np.nan  # last element of another
    x[1, 2, 2] = np.nan  # in the middle
    for axis in ("m1", "1", "0", "none", "12"):
        y = lib[f"r_{op}_{dt}_{axis}_0"](x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = getattr(np, op)(x.astype(np.float64), axis=AXES[axis])
        assert_close(y, expected, err_msg=f"{op} axis={axis}", **_tol(op, dt, 40))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_inf_in_max_min(lib, op, dt):
    x = np.full((2, 3, 4), -np.inf if op == "max" else np.inf, dtype=NP[dt])
    x[1, 1, 1] = 0.0
    y = lib[f"r_{op}_{dt}_m1_0"](x)
    assert_close(y, getattr(np, op)(x, axis=-1), rtol=0, atol=0)


# ------------------------------------------------------------------ argmax / argmin


ARG_SHAPES = [(1, 1), (7, 13), (13, 1), (3, 37), (0, 5)]


def _arg_input(dt, shape, seed):
    if dt in FLOATS:
        # few distinct values: many ties, where the first occurrence must win
        return rng(seed).integers(-3, 3, shape).astype(NP[dt])
    info = np.iinfo(NP[dt])
    lo, hi = max(info.min, -3), min(info.max, 3)
    return randint(shape, lo, hi, NP[dt], seed=seed)


@pytest.mark.parametrize("shape", ARG_SHAPES)
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin(lib, op, dt, axis, keep, shape):
    tag = "m1" if axis < 0 else str(axis)
    if shape[axis] == 0:
        shape = (shape[1], shape[0])  # the reduced axis must not be empty
    x = _arg_input(dt, shape, seed=shape[0] * 7 + shape[1])
    y = lib[f"{op}_{dt}_{tag}_{int(keep)}"](x)
    expected = getattr(np, op)(x, axis=axis, keepdims=keep)
    assert_close(y, expected, dtype=np.int64)


@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_first_occurrence(lib, op, dt):
    x = np.array([[2, 5, 5, 1], [1, 1, 1, 1], [0, 3, 0, 3], [4, 0, 4, 0]], dtype=NP[dt])
    y = lib[f"{op}_{dt}_1_0"](x)
    np.testing.assert_array_equal(y, getattr(np, op)(x, axis=1))
    y = lib[f"{op}_{dt}_0_0"](x)
    np.testing.assert_array_equal(y, getattr(np, op)(x, axis=0))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_nan(lib, op, dt):
    """numpy: the first NaN is the max and the min."""
    x = np.array(
        [[1, np.nan, 3, np.nan], [np.nan, 5, 0, 1], [2, 1, 0, np.nan], [np.inf, -np.inf, 0, 1]],
        dtype=NP[dt],
    )
    y = lib[f"{op}_{dt}_1_0"](x)
    np.testing.assert_array_equal(y, getattr(np, op)(x, axis=1))


# ------------------------------------------------------------------------ index form


IX_SHAPES = [(1, 1), (7, 13), (13, 7), (5, 37), (0, 3), (4, 0)]


@pytest.mark.parametrize("nk", IX_SHAPES)
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", OPS)
def test_index_reduction_float(lib, op, dt, nk):
    x = _input(op, dt, nk, seed=nk[0] + 10 * nk[1])
    y = lib[f"ix_{op}_{dt}"](x)
    assert_close(y, np_reduce(op, x, (1,), False, dt), dtype=NP[dt], **_tol(op, dt, nk[1]))


@pytest.mark.parametrize("nk", IX_SHAPES)
@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", INT_OPS)
def test_index_reduction_int(lib, op, dt, nk):
    x = _input(op, dt, nk, seed=nk[0] + 10 * nk[1] + 1)
    y = lib[f"ix_{op}_{dt}"](x)
    assert_close(y, np_reduce(op, x, (1,), False, dt), dtype=NP[dt])


@pytest.mark.parametrize("ncr", [(1, 1, 1), (2, 3, 3), (7, 13, 5), (3, 1, 37), (2, 0, 3), (0, 2, 2)])
@pytest.mark.parametrize("dt", FLOATS)
def test_index_multi_reduction(lib, dt, ncr):
    n, c, r = ncr
    g = rng(2)
    x = g.standard_normal((n, c, r)).astype(NP[dt])
    w = g.standard_normal((c, r)).astype(NP[dt])
    y, m = lib[f"ix_multi_{dt}"](x, w)
    x64 = x.astype(np.float64)
    assert_close(y, np.einsum("ncr,cr->n", x64, w.astype(np.float64)), **_tol("sum", dt, c * r))
    expected_m = np.max(x64, axis=(1, 2)) if c * r else np.full(n, -np.inf)
    assert_close(m, expected_m, rtol=0, atol=0)


@pytest.mark.parametrize("njk", [(1, 1, 1), (3, 7, 13), (2, 13, 5), (4, 1, 37)])
@pytest.mark.parametrize("dt", FLOATS)
def test_index_nested_reduction(lib, dt, njk):
    x = rng(3).standard_normal(njk).astype(NP[dt])
    x64 = x.astype(np.float64)
    expected = np.sum(np.max(x64, axis=1) * 2.0, axis=-1) + np.min(x64, axis=(1, 2))
    assert_close(lib[f"ix_nested_{dt}"](x), expected, **_tol("sum", dt, njk[2]))


@pytest.mark.parametrize("t", [0, 1, 7, 13, 37])
@pytest.mark.parametrize("dt", FLOATS)
def test_index_masked_max(lib, dt, t):
    s = rng(4).standard_normal((t, t)).astype(NP[dt])
    mask = np.tril(np.ones((t, t), dtype=bool))
    expected = np.where(mask, s, -np.inf).max(axis=1) if t else np.zeros(0)
    assert_close(lib[f"ix_masked_max_{dt}"](s), expected, rtol=0, atol=0)


@pytest.mark.parametrize("nk", IX_SHAPES)
@pytest.mark.parametrize("dt", FLOATS)
def test_index_prod_mean(lib, dt, nk):
    x = rng(5).uniform(-0.2, 0.2, nk).astype(NP[dt])
    p, mu = lib[f"ix_prod_mean_{dt}"](x)
    x64 = x.astype(np.float64)
    assert_close(p, np.prod(x64 + 1.0, axis=1), **_tol("prod", dt, nk[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.mean(x64 * x64, axis=1)  # NaN over an empty range
    assert_close(mu, expected, **_tol("mean", dt, nk[1]))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_index_nan_propagation(lib, op, dt):
    x = rng(6).standard_normal((4, 9)).astype(NP[dt])
    x[0, 0] = np.nan
    x[1, 8] = np.nan
    x[2, 4] = np.nan
    y = lib[f"ix_{op}_{dt}"](x)
    assert_close(y, getattr(np, op)(x, axis=1), rtol=0, atol=0)
    assert np.isnan(y[:3]).all() and not np.isnan(y[3])


@pytest.mark.parametrize("nk", [(1, 1), (7, 13), (13, 37), (3, 0)])
@pytest.mark.parametrize("dt", FLOATS)
def test_reductions_fused_with_elementwise(lib, dt, nk):
    x = rng(7).standard_normal(nk).astype(NP[dt])
    y, s = lib[f"fused_{dt}"](x)
    x64 = x.astype(np.float64)
    if nk[1]:
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        assert_close(y, e / e.sum(axis=-1, keepdims=True), **_tol("sum", dt, nk[1]))
    else:
        assert y.shape == nk
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected_s = np.sum(x64 * x64) + np.mean(np.abs(x64))
    assert_close(s, expected_s, **_tol("sum", dt, x.size))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_propagates_in_long_rows(lib, op, dt):
    """NaN anywhere in a long (vectorised) row: first, middle, last, in a remainder lane."""
    x = rng(8).standard_normal((6, 1, 101)).astype(NP[dt])
    for row, pos in enumerate([0, 17, 50, 96, 100]):
        x[row, 0, pos] = np.nan
    for axis in ("m1", "12", "none"):
        y = lib[f"r_{op}_{dt}_{axis}_0"](x)
        expected = getattr(np, op)(x, axis=AXES[axis])
        assert_close(y, expected, rtol=0, atol=0, err_msg=f"{op} axis={axis}")
    y = lib[f"r_{op}_{dt}_0_0"](np.ascontiguousarray(np.transpose(x, (2, 1, 0))))
    assert_close(y, getattr(np, op)(np.transpose(x, (2, 1, 0)), axis=0), rtol=0, atol=0)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_long_rows_nan_and_ties(lib, op, dt):
    x = np.zeros((6, 101), dtype=NP[dt])
    x[0, 40] = x[0, 90] = 5 if op == "argmax" else -5  # a tie far apart
    x[1, 99] = np.nan
    x[2, 3] = x[2, 70] = np.nan
    x[3] = -np.inf if op == "argmax" else np.inf  # every element equal
    x[4] = np.nan
    x[5, 100] = 1 if op == "argmax" else -1
    y = lib[f"{op}_{dt}_1_0"](x)
    np.testing.assert_array_equal(y, getattr(np, op)(x, axis=1))


OMP_SOURCE = """
[composite.omp_reduce]
inputs = ["x: f32[A, B, C]"]
outputs = ["s0: f32[B, C]", "s2: f32[A, B]", "m: f32[A]", "t: f32", "i: i64[A, C]", "k: f32[A, C]"]
body = '''
s0 = sum(x, axis=0)
s2 = mean(x, axis=-1)
m = max(x, axis=(1, 2))
t = sum(x)
i = argmax(x, axis=1)
k[a, c] = min[b](x[a, b, c] * 2.0)
'''
"""


@pytest.fixture(scope="module")
def omp_lib(compile_composites):
    return compile_composites(OMP_SOURCE, name="omp_reduce", opt="3", config={"OMP": "1"})


@pytest.mark.parametrize("shape", [(1, 1, 1), (64, 33, 17), (7, 129, 5), (3, 5, 257), (0, 4, 3)])
def test_parallel_reductions(omp_lib, shape):
    """Built with OpenMP (--config OMP=1, -O3): reductions give the serial results."""
    x = rng(9).standard_normal(shape).astype(np.float32)
    if x.size:
        x.reshape(-1)[:: max(1, x.size // 5)][1:3] = np.nan
    s0, s2, m, t, i, k = omp_lib["omp_reduce"](x)
    x64 = x.astype(np.float64)
    count = max(shape)
    assert_close(s0, x64.sum(axis=0), **_tol("sum", "f32", count))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_close(s2, x64.mean(axis=-1), **_tol("mean", "f32", count))
        expected_m = x64.max(axis=(1, 2)) if x.size else np.full(shape[0], -np.inf)
    assert_close(m, expected_m, rtol=0, atol=0)
    assert_close(t, x64.sum(), **_tol("sum", "f32", x.size))
    if x.size:
        np.testing.assert_array_equal(i, np.argmax(x, axis=1))
    assert_close(k, (x64 * 2).min(axis=1) if x.size else np.zeros((0, shape[2])), rtol=0, atol=0)
