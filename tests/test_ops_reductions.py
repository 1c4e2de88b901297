"""The last-axis reductions of the op library (ops/reductions.toml), called from wrapper
composites with concrete shapes, against numpy computed here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randint, randn

from catenc.loader import CatencStatusError

FLOAT_OPS = ("reduce_sum", "reduce_mean", "var", "std", "reduce_max", "reduce_min", "reduce_prod", "norm")
INT_OPS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
ARG_OPS = ("reduce_argmax", "reduce_argmin")
DIMS = {"f64": "N", "f32": "B, N", "f16": "A, B, N", "i32": "B, N", "i64": "N"}
NP_DTYPE = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64}
SHAPES = {
    "f64": [(1,), (13,), (37,)],
    "f32": [(1, 1), (7, 13), (3, 37)],
    "f16": [(1, 1, 1), (2, 7, 13), (3, 1, 37)],
    "i32": [(1, 1), (7, 13), (3, 37)],
    "i64": [(1,), (13,), (37,)],
}
TOL = {"f64": dict(rtol=1e-12, atol=1e-12), "f32": dict(rtol=2e-5, atol=2e-5), "f16": dict(rtol=2e-3, atol=2e-3)}


def _wrapper(dt: str) -> str:
    d = DIMS[dt]
    batch = d.rsplit(",", 1)[0] if "," in d else ""
    ops = FLOAT_OPS if dt.startswith("f") else INT_OPS
    outs = [f"y_{op}: {dt}[{batch}]" for op in ops] + [f"y_{op}: i64[{batch}]" for op in ARG_OPS]
    body = "\n".join(f"y_{op} = {op}(x)" for op in ops + ARG_OPS)
    return (
        f'[composite.t_all_{dt}]\ninputs = ["x: {dt}[{d}]"]\noutputs = {outs!r}\n'.replace("'", '"')
        + f'body = """\n{body}\n"""\n\n'
    )


SOURCE = (
    "".join(_wrapper(dt) for dt in DIMS)
    + '''
[composite.t_params]
inputs = ["x: f64[B, N]"]
outputs = ["v1: f64[B]", "s1: f64[B]", "n1: f64[B]", "n3: f64[B]"]
body = """
v1 = var(x, ddof=1)
s1 = std(x, ddof=1)
n1 = norm(x, p=1.0)
n3 = norm(x, p=3.0)
"""

[composite.t_empty]
inputs = ["x: f32[B, N]", "k: i32[B, N]"]
outputs = ["s: f32[B]", "p: f32[B]", "mx: f32[B]", "mn: f32[B]", "m: f32[B]", "ks: i32[B]", "kmx: i32[B]"]
body = """
s = reduce_sum(x)
p = reduce_prod(x)
mx = reduce_max(x)
mn = reduce_min(x)
m = reduce_mean(x)
ks = reduce_sum(k)
kmx = reduce_max(k)
"""

[composite.t_argmax]
inputs = ["x: f32[B, N]"]
outputs = ["y: i64[B]"]
body = "y = reduce_argmax(x)"
'''
)


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


NUMPY = {
    "reduce_sum": lambda x: x.sum(axis=-1),
    "reduce_mean": lambda x: x.mean(axis=-1),
    "var": lambda x: x.var(axis=-1),
    "std": lambda x: x.std(axis=-1),
    "reduce_max": lambda x: x.max(axis=-1),
    "reduce_min": lambda x: x.min(axis=-1),
    "reduce_prod": lambda x: x.prod(axis=-1),
    "norm": lambda x: np.sqrt((x * x).sum(axis=-1)),
}


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16"])
def test_float_reductions(lib, dtype):
    np_dtype = NP_DTYPE[dtype]
    for seed, shape in enumerate(SHAPES[dtype]):
        # values near +-1 keep the products in range for f16
        x = (np.sign(randn(shape, np.float64, seed=seed)) * (0.6 + randn(shape, seed=seed + 9) ** 2 * 0.2)).astype(
            np_dtype
        )
        got = lib[f"t_all_{dtype}"](x)
        x64 = x.astype(np.float64)
        for op, value in zip(FLOAT_OPS, got):
            assert_close(value, NUMPY[op](x64), dtype=np_dtype, err_msg=f"{op} {dtype} {shape}", **TOL[dtype])
        amax, amin = got[len(FLOAT_OPS) :]
        assert_close(amax, np.argmax(x64, axis=-1), dtype=np.int64)
        assert_close(amin, np.argmin(x64, axis=-1), dtype=np.int64)


@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_int_reductions(lib, dtype):
    """Exact results; sums and products wrap around like numpy's in the same dtype; argmax and
    argmin take the first of tied values (frequent with small integers)."""
    np_dtype = NP_DTYPE[dtype]
    for seed, shape in enumerate(SHAPES[dtype]):
        x = randint(shape, -9, 9, np_dtype, seed=seed)
        got = lib[f"t_all_{dtype}"](x)
        want = [
            np.sum(x, axis=-1, dtype=np_dtype),
            x.max(axis=-1),
            x.min(axis=-1),
            np.prod(x, axis=-1, dtype=np_dtype),
            np.argmax(x, axis=-1),
            np.argmin(x, axis=-1),
        ]
        for op, a, e in zip(INT_OPS + ARG_OPS, got, want):
            assert_close(a, e, err_msg=f"{op} {dtype} {shape}")


def test_int_sum_wraps(lib):
    x = np.full((2, 13), 2**30, dtype=np.int32)
    got = lib["t_all_i32"](x)
    assert_close(got[0], np.sum(x, axis=-1, dtype=np.int32))


def test_reduction_params(lib):
    for shape in [(1, 2), (7, 13), (3, 37)]:
        x = randn(shape, np.float64, seed=2)
        v1, s1, n1, n3 = lib["t_params"](x)
        assert_close(v1, x.var(axis=-1, ddof=1), dtype=np.float64)
        assert_close(s1, x.std(axis=-1, ddof=1), dtype=np.float64)
        assert_close(n1, np.abs(x).sum(axis=-1), dtype=np.float64)
        assert_close(n3, (np.abs(x) ** 3).sum(axis=-1) ** (1 / 3), dtype=np.float64)


def test_empty_axis(lib):
    """N = 0 gives the identities: sum 0, prod 1, max -inf / int min, min +inf, mean NaN."""
    x, k = np.zeros((3, 0), np.float32), np.zeros((3, 0), np.int32)
    s, p, mx, mn, m, ks, kmx = lib["t_empty"](x, k)
    assert_close(s, np.zeros(3))
    assert_close(p, np.ones(3))
    assert_close(mx, np.full(3, -np.inf))
    assert_close(mn, np.full(3, np.inf))
    assert np.all(np.isnan(m))
    assert_close(ks, np.zeros(3, np.int32))
    assert_close(kmx, np.full(3, np.iinfo(np.int32).min))


def test_argmax_needs_an_element(lib):
    with pytest.raises(CatencStatusError):
        lib["t_argmax"](np.zeros((2, 0), np.float32))


def test_nan_propagates(lib):
    x = randn((2, 13), seed=4)
    x[1, 5] = np.nan
    got = dict(zip(FLOAT_OPS, lib["t_all_f32"](x)))
    for op in ("reduce_max", "reduce_min", "reduce_sum", "var"):
        assert np.isnan(got[op][1]) and np.isfinite(got[op][0]), op
