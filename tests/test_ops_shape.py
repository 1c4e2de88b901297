"""The shape and selection ops of the op library (ops/shape.toml), called from wrapper composites
with concrete shapes, against numpy computed here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randint, randn, rng

from catenc.loader import CatencStatusError

SOURCE = '''
[composite.t_transpose_f32]
inputs = ["x: f32[M, N]"]
outputs = ["y: f32[N, M]"]
body = "y = transpose2d(x)"

[composite.t_transpose_i32]
inputs = ["x: i32[M, N]"]
outputs = ["y: i32[N, M]"]
body = "y = transpose2d(x)"

[composite.t_transpose_bool]
inputs = ["x: bool[M, N]"]
outputs = ["y: bool[N, M]"]
body = "y = transpose2d(x)"

[composite.t_transpose_f16]
inputs = ["x: f16[M, N]"]
outputs = ["y: f16[N, M]"]
body = "y = transpose2d(x)"

[composite.t_flatten_f64]
inputs = ["x: f64[M, N]"]
outputs = ["y: f64[M * N]"]
body = "y = flatten2d(x)"

[composite.t_flatten_i64]
inputs = ["x: i64[M, N]"]
outputs = ["y: i64[M * N]"]
body = "y = flatten2d(x)"

[composite.t_concat_f32]
inputs = ["a: f32[B, N]", "b: f32[B, K]"]
outputs = ["y: f32[B, N + K]"]
body = "y = concat_last(a, b)"

[composite.t_concat_bcast_i8]
inputs = ["a: i8[B, N]", "b: i8[K]"]
outputs = ["y: i8[B, N + K]"]
body = "y = concat_last(a, b)"

[composite.t_split_f32]
inputs = ["x: f32[B, 2 * N]"]
outputs = ["a: f32[B, N]", "b: f32[B, N]"]
body = "a, b = split(x)"

[composite.t_split_i64]
inputs = ["x: i64[A, B, 2 * N]"]
outputs = ["a: i64[A, B, N]", "b: i64[A, B, N]"]
body = "a, b = split(x)"

[composite.t_pad_f32]
inputs = ["x: f32[B, N]"]
outputs = ["y: f32[B, N + 5]", "z: f32[B, N + 1]"]
body = """
y = pad_last(x)
z = pad_last(x, before=0, after=1, value=-2.5)
"""

[composite.t_pad_i32]
inputs = ["x: i32[N]"]
outputs = ["y: i32[N + 5]"]
body = "y = pad_last(x, value=7)"

[composite.t_slice_f32]
inputs = ["x: f32[B, N]"]
outputs = ["y: f32[B, N // 2]", "z: f32[B, (N - 1 + 2) // 3]"]
body = """
y = slice(x)
z = slice(x, start=0, stop=-1, step=3)
"""

[composite.t_slice_bool]
inputs = ["x: bool[N]"]
outputs = ["y: bool[N // 2]"]
body = "y = slice(x)"

[composite.t_tile_f32]
inputs = ["x: f32[B, N]"]
outputs = ["y: f32[B, 3 * N]", "z: f32[B, 2 * N]"]
body = """
y = tile(x)
z = tile(x, reps=2)
"""

[composite.t_tile_bool]
inputs = ["x: bool[A, B, N]"]
outputs = ["y: bool[A, B, 3 * N]"]
body = "y = tile(x)"

[composite.t_flip_f64]
inputs = ["x: f64[B, N]"]
outputs = ["y: f64[B, N]"]
body = "y = flip(x)"

[composite.t_flip_i32]
inputs = ["x: i32[N]"]
outputs = ["y: i32[N]"]
body = "y = flip(x)"

[composite.t_where_f32]
inputs = ["c: bool[B, N]", "a: f32[B, N]", "b: f32[N]"]
outputs = ["y: f32[B, N]"]
body = "y = select_where(c, a, b)"

[composite.t_where_i64]
inputs = ["c: bool[N]", "a: i64[N]", "b: i64[N]"]
outputs = ["y: i64[N]"]
body = "y = select_where(c, a, b)"

[composite.t_clamp_f32]
inputs = ["x: f32[B, N]"]
outputs = ["y: f32[B, N]", "z: f32[B, N]"]
body = """
y = clamp(x)
z = clamp(x, lo=-0.5, hi=0.25)
"""

[composite.t_clamp_i32]
inputs = ["x: i32[B, N]"]
outputs = ["y: i32[B, N]"]
body = "y = clamp(x)"

[composite.t_clamp_f16]
inputs = ["x: f16[N]"]
outputs = ["y: f16[N]"]
body = "y = clamp(x)"

[composite.t_cast_i32]
inputs = ["x: f32[N]", "k: i64[N]", "b: bool[N]", "h: f16[N]"]
outputs = ["y: i32[N]", "yk: i32[N]", "yb: i32[N]", "yh: i32[N]"]
body = """
y = cast_to_i32(x)
yk = cast_to_i32(k)
yb = cast_to_i32(b)
yh = cast_to_i32(h)
"""

[composite.t_cast_f32]
inputs = ["x: i32[B, N]", "k: i64[N]", "d: f64[N]", "b: bool[N]"]
outputs = ["y: f32[B, N]", "yk: f32[N]", "yd: f32[N]", "yb: f32[N]"]
body = """
y = cast_to_f32(x)
yk = cast_to_f32(k)
yd = cast_to_f32(d)
yb = cast_to_f32(b)
"""

[composite.t_one_hot]
inputs = ["i: i64[B, N]", "j: i32[N]"]
outputs = ["y: f32[B, N, 10]", "z: f32[N, 5]"]
body = """
y = one_hot(i)
z = one_hot(j, num_classes=5)
"""
'''

PAIRS = [(1, 1), (7, 13), (3, 37)]


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def _data(shape, kind, seed=0):
    if kind == "bool":
        return rng(seed).random(shape) < 0.5
    if kind.startswith("i"):
        return randint(shape, -100, 100, np.dtype(kind.replace("i", "int")), seed=seed)
    return randn(shape, np.dtype({"f16": "float16", "f32": "float32", "f64": "float64"}[kind]), seed=seed)


@pytest.mark.parametrize("kind", ["f32", "i32", "bool", "f16"])
def test_transpose2d(lib, kind):
    for m, n in PAIRS:
        x = _data((m, n), kind)
        assert_close(lib[f"t_transpose_{kind}"](x), x.T, dtype=x.dtype)


@pytest.mark.parametrize("kind", ["f64", "i64"])
def test_flatten2d(lib, kind):
    for m, n in PAIRS:
        x = _data((m, n), kind)
        assert_close(lib[f"t_flatten_{kind}"](x), x.reshape(-1), dtype=x.dtype)


def test_concat_last(lib):
    for b, n in PAIRS:
        for k in (1, 5):
            a, c = randn((b, n), seed=1), randn((b, k), seed=2)
            assert_close(lib["t_concat_f32"](a, c), np.concatenate([a, c], axis=-1))
            ai, ci = _data((b, n), "i8", 3), _data(k, "i8", 4)
            want = np.concatenate([ai, np.broadcast_to(ci, (b, k))], axis=-1)
            assert_close(lib["t_concat_bcast_i8"](ai, ci), want, dtype=np.int8)


def test_split(lib):
    for b, n in PAIRS:
        x = randn((b, 2 * n), seed=b)
        lo, hi = lib["t_split_f32"](x)
        assert_close(lo, x[:, :n])
        assert_close(hi, x[:, n:])
        xi = _data((2, b, 2 * n), "i64", 5)
        lo, hi = lib["t_split_i64"](xi)
        assert_close(lo, xi[..., :n])
        assert_close(hi, xi[..., n:])


def test_pad_last(lib):
    for b, n in PAIRS:
        x = randn((b, n), seed=n)
        y, z = lib["t_pad_f32"](x)
        assert_close(y, np.pad(x, [(0, 0), (2, 3)]))
        assert_close(z, np.pad(x, [(0, 0), (0, 1)], constant_values=-2.5))
        xi = _data(n, "i32", 6)
        assert_close(lib["t_pad_i32"](xi), np.pad(xi, (2, 3), constant_values=7))


def test_slice(lib):
    for b, n in PAIRS + [(2, 2), (2, 4)]:
        x = randn((b, n), seed=n)
        y, z = lib["t_slice_f32"](x)
        assert_close(y, x[:, 1::2])
        assert_close(z, x[:, 0 : n - 1 : 3])
        xb = _data(n, "bool", 7)
        assert_close(lib["t_slice_bool"](xb), xb[1::2])


def test_slice_needs_room(lib):
    """The constraint N + stop >= start: the default slice needs N >= 1."""
    with pytest.raises(CatencStatusError):
        lib["t_slice_bool"](np.zeros(0, dtype=bool))


def test_tile(lib):
    for b, n in PAIRS:
        x = randn((b, n), seed=n)
        y, z = lib["t_tile_f32"](x)
        assert_close(y, np.tile(x, (1, 3)))
        assert_close(z, np.tile(x, (1, 2)))
        xb = _data((2, b, n), "bool", 8)
        assert_close(lib["t_tile_bool"](xb), np.tile(xb, (1, 1, 3)))


def test_flip(lib):
    for b, n in PAIRS:
        x = _data((b, n), "f64", n)
        assert_close(lib["t_flip_f64"](x), x[:, ::-1])
        xi = _data(n, "i32", 9)
        assert_close(lib["t_flip_i32"](xi), xi[::-1])


def test_select_where(lib):
    for b, n in PAIRS:
        c = _data((b, n), "bool", 10)
        a, other = randn((b, n), seed=11), randn(n, seed=12)
        assert_close(lib["t_where_f32"](c, a, other), np.where(c, a, other))
        ci, ai, bi = _data(n, "bool", 13), _data(n, "i64", 14), _data(n, "i64", 15)
        assert_close(lib["t_where_i64"](ci, ai, bi), np.where(ci, ai, bi))


def test_clamp(lib):
    for b, n in PAIRS:
        x = randn((b, n), seed=n) * 2
        x[0, 0] = np.nan
        y, z = lib["t_clamp_f32"](x)
        assert_close(y, np.clip(x, -1, 2))  # NaN stays NaN
        assert_close(z, np.clip(x, -0.5, 0.25))
        xi = _data((b, n), "i32", 16)
        assert_close(lib["t_clamp_i32"](xi), np.clip(xi, -1, 2))
        xh = (randn(n, seed=17) * 3).astype(np.float16)
        assert_close(lib["t_clamp_f16"](xh), np.clip(xh, -1, 2), dtype=np.float16)


def test_cast_to_i32(lib):
    x = np.array([0.5, -0.5, 1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -np.inf, 7.0, -7.0, 2**31, 123.75], np.float32)
    k = np.array([2**31, -(2**31) - 1, 2**40 + 5, -3, 0, 1, 2, 3, 4, 5, 6, 7, 8], np.int64)
    b = np.arange(13) % 3 == 0
    h = (randn(13, seed=1) * 50).astype(np.float16)
    y, yk, yb, yh = lib["t_cast_i32"](x, k, b, h)
    x64 = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
    assert_close(y, np.clip(x64, -(2**31), 2**31 - 1).astype(np.int32), dtype=np.int32)
    assert_close(yk, k.astype(np.int32), dtype=np.int32)  # wraps
    assert_close(yb, b.astype(np.int32), dtype=np.int32)
    assert_close(yh, np.trunc(h.astype(np.float64)).astype(np.int32), dtype=np.int32)


def test_cast_to_f32(lib):
    for b, n in PAIRS:
        x = _data((b, n), "i32", n)
        k = randint(n, -(2**40), 2**40, np.int64, seed=n)
        d = randn(n, np.float64, seed=n) * 1e3
        bo = _data(n, "bool", n)
        y, yk, yd, yb = lib["t_cast_f32"](x, k, d, bo)
        assert_close(y, x.astype(np.float32), rtol=0, atol=0, dtype=np.float32)
        assert_close(yk, k.astype(np.float32), rtol=0, atol=0)
        assert_close(yd, d.astype(np.float32), rtol=0, atol=0)
        assert_close(yb, bo.astype(np.float32), rtol=0, atol=0)


def test_one_hot(lib):
    for b, n in PAIRS:
        i = randint((b, n), -1, 11, np.int64, seed=n)  # -1 and 10, 11 are outside: zero rows
        j = randint(n, -2, 6, np.int32, seed=n + 1)
        y, z = lib["t_one_hot"](i, j)
        assert_close(y, (i[..., None] == np.arange(10)).astype(np.float32), dtype=np.float32)
        assert_close(z, (j[..., None] == np.arange(5)).astype(np.float32), dtype=np.float32)
