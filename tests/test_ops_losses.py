"""The losses of the op library (ops/losses.toml), called from wrapper composites with concrete
shapes, against numpy computed here. Every loss is a rank-0 mean.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, randint, randn

SOURCE = '''
[composite.t_ce_f32]
inputs = ["z: f32[B, C]", "t: i64[B]"]
outputs = ["loss: f32"]
body = "loss = cross_entropy(z, t)"

[composite.t_ce_f64]
inputs = ["z: f64[B, C]", "t: i64[B]"]
outputs = ["loss: f64"]
body = "loss = cross_entropy(z, t)"

[composite.t_ce_f16]
inputs = ["z: f16[B, C]", "t: i64[B]"]
outputs = ["loss: f16"]
body = "loss = cross_entropy(z, t)"

[composite.t_reg_f32]
inputs = ["p: f32[B, N]", "q: f32[B, N]"]
outputs = ["mse: f32", "l1: f32", "huber: f32", "huber2: f32"]
body = """
mse = mse_loss(p, q)
l1 = l1_loss(p, q)
huber = huber_loss(p, q)
huber2 = huber_loss(p, q, delta=0.5)
"""

[composite.t_reg_f64]
inputs = ["p: f64[A, B, N]", "q: f64[A, B, N]"]
outputs = ["mse: f64", "l1: f64", "huber: f64", "huber2: f64"]
body = """
mse = mse_loss(p, q)
l1 = l1_loss(p, q)
huber = huber_loss(p, q)
huber2 = huber_loss(p, q, delta=0.5)
"""

[composite.t_reg_f16]
inputs = ["p: f16[N]", "q: f16[N]"]
outputs = ["mse: f16", "l1: f16", "huber: f16", "huber2: f16"]
body = """
mse = mse_loss(p, q)
l1 = l1_loss(p, q)
huber = huber_loss(p, q)
huber2 = huber_loss(p, q, delta=0.5)
"""

[composite.t_reg_bcast]
inputs = ["p: f32[B, N]", "q: f32[N]"]
outputs = ["mse: f32"]
body = "mse = mse_loss(p, q)"
'''

NP_DTYPE = {"f32": np.float32, "f64": np.float64, "f16": np.float16}
TOL = {"f64": dict(rtol=1e-12, atol=1e-12), "f32": dict(rtol=2e-5, atol=2e-6), "f16": dict(rtol=2e-3, atol=2e-3)}


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(SOURCE)


def _cross_entropy(z, t):
    m = z.max(axis=-1, keepdims=True)
    log_p = z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
    return -log_p[np.arange(z.shape[0]), t].mean()


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
@pytest.mark.parametrize("bc", [(1, 1), (1, 7), (13, 7), (7, 37)])
def test_cross_entropy(lib, dtype, bc):
    b, c = bc
    z = (randn(bc, np.float64, seed=b) * 3).astype(NP_DTYPE[dtype])
    t = randint(b, 0, c - 1, np.int64, seed=c)
    got = lib[f"t_ce_{dtype}"](z, t)
    assert got.shape == ()
    assert_close(got, _cross_entropy(z.astype(np.float64), t), dtype=NP_DTYPE[dtype], **TOL[dtype])


def test_cross_entropy_large_logits(lib):
    z = np.array([[1000.0, -1000.0, 0.0], [50.0, 60.0, 70.0]], dtype=np.float32)
    t = np.array([1, 0], dtype=np.int64)
    got = lib["t_ce_f32"](z, t)
    assert_close(got, _cross_entropy(z.astype(np.float64), t), rtol=1e-6)


def _regression(p, q):
    d = p - q
    a = np.abs(d)

    def huber(delta):
        return np.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta)).mean()

    return [(d * d).mean(), a.mean(), huber(1.0), huber(0.5)]


SHAPES = {
    "f32": [(1, 1), (7, 13), (3, 37)],
    "f64": [(1, 1, 1), (2, 7, 13), (3, 1, 37)],
    "f16": [(1,), (13,), (37,)],
}


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_regression_losses(lib, dtype):
    for seed, shape in enumerate(SHAPES[dtype]):
        p = (randn(shape, np.float64, seed=seed) * 1.5).astype(NP_DTYPE[dtype])
        q = randn(shape, np.float64, seed=seed + 7).astype(NP_DTYPE[dtype])
        got = lib[f"t_reg_{dtype}"](p, q)
        want = _regression(p.astype(np.float64), q.astype(np.float64))
        for name, a, e in zip(("mse", "l1", "huber", "huber2"), got, want):
            assert a.shape == ()
            assert_close(a, e, dtype=NP_DTYPE[dtype], err_msg=f"{name} {dtype} {shape}", **TOL[dtype])


def test_regression_loss_broadcasts(lib):
    p, q = randn((7, 13), seed=1), randn(13, seed=2)
    want = ((p.astype(np.float64) - q) ** 2).mean()
    assert_close(lib["t_reg_bcast"](p, q), want, **TOL["f32"])
