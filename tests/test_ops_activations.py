"""The activation ops of the op library (ops/activations.toml), called from wrapper composites
with concrete shapes at rank 1 (f64), 2 (f32, ints) and 3 (f16), against numpy computed here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_close, np_erf, randint, randn

FLOAT_OPS = (
    "relu",
    "leaky_relu",
    "elu",
    "selu",
    "gelu",
    "gelu_tanh",
    "silu",
    "sigmoid",
    "hard_sigmoid",
    "hard_swish",
    "mish",
    "softplus",
    "softsign",
    "tanh_act",
)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _softplus(x):
    return np.logaddexp(0.0, x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


NUMPY = {
    "relu": lambda x: np.maximum(x, 0.0),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "selu": lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np_erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "hard_sigmoid": lambda x: np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "hard_swish": lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "softplus": _softplus,
    "softsign": lambda x: x / (1.0 + np.abs(x)),
    "tanh_act": np.tanh,
}

DIMS = {"f64": "N", "f32": "B, N", "f16": "A, B, N"}


def _wrapper(dtype: str) -> str:
    outs = ", ".join(f'"y_{op}: {dtype}[{DIMS[dtype]}]"' for op in FLOAT_OPS)
    body = "\n".join(f"y_{op} = {op}(x)" for op in FLOAT_OPS)
    head = f'[composite.t_all_{dtype}]\ninputs = ["x: {dtype}[{DIMS[dtype]}]"]\noutputs = [{outs}]\n'
    return head + f'body = """\n{body}\n"""\n'


SOURCE = (
    "\n".join(_wrapper(dt) for dt in DIMS)
    + '''
[composite.t_relu_i32]
inputs = ["x: i32[B, N]"]
outputs = ["y: i32[B, N]"]
body = "y = relu(x)"

[composite.t_relu_i64]
inputs = ["x: i64[N]"]
outputs = ["y: i64[N]"]
body = "y = relu(x)"

[composite.t_params]
inputs = ["x: f32[N]"]
outputs = ["a: f32[N]", "b: f32[N]"]
body = """
a = leaky_relu(x, negative_slope=0.2)
b = elu(x, alpha=0.5)
"""
'''
)

SHAPES = {
    "f64": [(1,), (13,), (37,)],
    "f32": [(1, 1), (7, 13), (3, 37)],
    "f16": [(1, 1, 1), (2, 7, 13), (3, 1, 37)],
}
NP_DTYPE = {"f64": np.float64, "f32": np.float32, "f16": np.float16}


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


@pytest.mark.parametrize("dtype", list(DIMS))
@pytest.mark.parametrize("op", FLOAT_OPS)
def test_activation(lib, op, dtype):
    index = FLOAT_OPS.index(op)
    for shape in SHAPES[dtype]:
        x = (randn(shape, np.float64, seed=len(shape)) * 3).astype(NP_DTYPE[dtype])
        got = lib[f"t_all_{dtype}"](x)[index]
        want = NUMPY[op](x.astype(np.float64))
        assert_close(got, want, dtype=NP_DTYPE[dtype], err_msg=f"{op} {dtype} {shape}")


EXTREMES = np.array([-100.0, -30.0, -5.0, -1.0, -0.0, 0.0, 1e-3, 1.0, 5.0, 30.0, 100.0])


@pytest.mark.parametrize("op", FLOAT_OPS)
def test_activation_extremes(lib, op):
    """Large magnitudes stay finite and accurate (no exp overflow in softplus, sigmoid, mish, ...)."""
    x = EXTREMES.astype(np.float32).reshape(1, -1)
    got = lib["t_all_f32"](x)[FLOAT_OPS.index(op)]
    assert np.all(np.isfinite(got)), (op, got)
    assert_close(got, NUMPY[op](x.astype(np.float64)), rtol=1e-5, atol=1e-6, err_msg=op)


@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_relu_integers(lib, dtype):
    shapes = [(1, 1), (7, 13), (3, 37)] if dtype == "i32" else [(1,), (13,), (37,)]
    for shape in shapes:
        x = randint(shape, -100, 100, np.dtype(dtype.replace("i", "int")), seed=3)
        got = lib[f"t_relu_{dtype}"](x)
        assert_close(got, np.maximum(x, 0), dtype=x.dtype)


def test_activation_params(lib):
    x = randn(13, np.float64, seed=5).astype(np.float32) * 2
    a, b = lib["t_params"](x)
    x64 = x.astype(np.float64)
    assert_close(a, np.where(x64 >= 0, x64, 0.2 * x64))
    assert_close(b, np.where(x64 > 0, x64, 0.5 * np.expm1(x64)))
