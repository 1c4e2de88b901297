"""The quantisation ops of the op library (ops/quantization.toml), called from wrapper
composites with concrete shapes, against numpy computed here. Every result is bit-exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import randint, randn

QTYPES = {"i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16}


def _wrappers(q: str) -> str:
    return f'''
[composite.t_quant_{q}]
inputs = ["x: f32[B, N]", "scale: f32", "zp: {q}", "v: f32[N]"]
outputs = ["y: {q}[B, N]", "back: f32[B, N]", "fake: f32[B, N]", "y1: {q}[N]"]
body = """
y = quantize_linear(x, scale, zp)
back = dequantize_linear(y, scale, zp)
fake = fake_quantize_linear(x, scale, zp)
y1 = quantize_linear(v, scale, zp)
"""
'''


SOURCE = (
    "".join(_wrappers(q) for q in QTYPES)
    + '''
[composite.t_quant_scalar]
inputs = ["x: f32", "scale: f32", "zp: i8"]
outputs = ["y: i8", "back: f32"]
body = """
y = quantize_linear(x, scale, zp)
back = dequantize_linear(y, scale, zp)
"""

[composite.t_dequant_i32]
inputs = ["x: i32[A, B, N]", "scale: f32", "zp: i32"]
outputs = ["y: f32[A, B, N]"]
body = "y = dequantize_linear(x, scale, zp)"

[composite.t_matmul_i8]
inputs = ["a: i8[M, K]", "b: i8[K, N]", "za: i8", "zb: i8"]
outputs = ["y: i32[M, N]", "z: i32[M, N]"]
body = """
y = matmul_i8(a, b)
z = matmul_integer(a, b, za, zb)
"""

[composite.t_matmul_u8]
inputs = ["a: u8[M, K]", "b: u8[K, N]", "za: u8", "zb: u8"]
outputs = ["y: i32[M, N]", "z: i32[M, N]"]
body = """
y = matmul_i8(a, b)
z = matmul_integer(a, b, za, zb)
"""
'''
)


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def np_quantize(x, scale, zp):
    """ONNX QuantizeLinear in f32: x / scale, round half to even, + zero point, saturate."""
    info = np.iinfo(zp.dtype)
    f = np.float32
    v = np.rint(np.asarray(x, f) / f(scale)) + f(zp)
    return np.clip(v, f(info.min), f(info.max)).astype(zp.dtype)


def np_dequantize(q, scale, zp):
    return (np.asarray(q).astype(np.float32) - np.float32(zp)) * np.float32(scale)


def _exact(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


def _zero_point(q):
    return {"i8": np.int8(-3), "u8": np.uint8(128), "i16": np.int16(-300), "u16": np.uint16(30000)}[q]


@pytest.mark.parametrize("q", list(QTYPES))
@pytest.mark.parametrize("scale", [0.25, 0.0173, 3.0e-5, 7.5])
@pytest.mark.parametrize("b,n", [(1, 1), (3, 7), (2, 37)])
def test_quantize_dequantize_random(lib, q, scale, b, n):
    x = randn((b, n), seed=b * n) * np.float32(3.0)
    v = randn((n,), seed=5)
    zp = _zero_point(q)
    y, back, fake, y1 = lib[f"t_quant_{q}"](x, np.float32(scale), zp, v)
    _exact(y, np_quantize(x, scale, zp))
    _exact(back, np_dequantize(np_quantize(x, scale, zp), scale, zp))
    _exact(fake, back)
    _exact(y1, np_quantize(v, scale, zp))


@pytest.mark.parametrize("q", list(QTYPES))
def test_ties_round_to_even_and_saturation(lib, q):
    scale = np.float32(0.5)  # x / 0.5 is exact, so k + 0.5 ties stay ties
    ties = (np.arange(-20, 20, dtype=np.float32) + np.float32(0.5)) * scale
    info = np.iinfo(QTYPES[q])
    extremes = np.array([1e30, -1e30, np.inf, -np.inf, 2.0 * info.max, 2.0 * info.min - 10], np.float32)
    near = np.array([info.max, info.min, info.max + 0.5, info.min - 0.5, info.max - 0.5], np.float32) * scale
    x = np.concatenate([ties, extremes, near])
    zp = QTYPES[q](0)
    y, back, fake, y1 = lib[f"t_quant_{q}"](x[None, :], scale, zp, x)
    want = np_quantize(x, scale, zp)
    _exact(y1, want)
    _exact(y[0], want)
    assert want[19] == 0 and want[20] == 0 and want[21] == 2  # -0.5 -> 0, 0.5 -> 0, 1.5 -> 2
    assert want[18] == (-2 if info.min < 0 else 0)  # -1.5 -> -2
    assert y1[40] == info.max and y1[41] == info.min  # saturated, not wrapped
    _exact(back[0], np_dequantize(want, scale, zp))
    _exact(fake[0], back[0])


def test_rank0(lib):
    for x, scale, zp in [(1.25, 0.5, 0), (-3.3, 0.1, 5), (1000.0, 1.0, -1), (-0.75, 0.5, 0)]:
        y, back = lib["t_quant_scalar"](np.float32(x), np.float32(scale), np.int8(zp))
        want = np_quantize(np.float32(x), scale, np.int8(zp))
        _exact(y, np.asarray(want))
        _exact(back, np.asarray(np_dequantize(want, scale, np.int8(zp))))


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 7), (1, 5, 37)])
def test_dequantize_i32(lib, shape):
    x = randint(shape, -(2**20), 2**20, np.int32, seed=3)
    y = lib["t_dequant_i32"](x, np.float32(0.013), np.int32(-77))
    _exact(y, np_dequantize(x, 0.013, np.int32(-77)))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (3, 37, 11), (13, 1, 7)])
def test_matmul_integer(lib, m, k, n):
    a = randint((m, k), -128, 127, np.int8, seed=1)
    b = randint((k, n), -128, 127, np.int8, seed=2)
    y, z = lib["t_matmul_i8"](a, b, np.int8(-128), np.int8(127))
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    _exact(y, (a64 @ b64).astype(np.int32))
    _exact(z, ((a64 + 128) @ (b64 - 127)).astype(np.int32))
    au = randint((m, k), 0, 255, np.uint8, seed=3)
    bu = randint((k, n), 0, 255, np.uint8, seed=4)
    y, z = lib["t_matmul_u8"](au, bu, np.uint8(128), np.uint8(3))
    au64, bu64 = au.astype(np.int64), bu.astype(np.int64)
    _exact(y, (au64 @ bu64).astype(np.int32))
    _exact(z, ((au64 - 128) @ (bu64 - 3)).astype(np.int32))


def test_matmul_i8_extremes(lib):
    k = 37
    a = np.full((3, k), -128, np.int8)
    b = np.full((k, 2), -128, np.int8)
    y, z = lib["t_matmul_i8"](a, b, np.int8(127), np.int8(127))
    assert (y == 128 * 128 * k).all()
    assert (z == 255 * 255 * k).all()
    au = np.full((3, k), 255, np.uint8)
    y, _ = lib["t_matmul_u8"](au, au.T.copy(), np.uint8(0), np.uint8(0))
    assert (y == 255 * 255 * k).all()
