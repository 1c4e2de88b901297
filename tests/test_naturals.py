"""Natural formulations of common layers (bench/composites/natural/), written the way a user
writes them from the paper or PyTorch, compiled once with symbolic sizes and run at two size
bindings against numpy written here in float64 (issue 16, item 5).

``CASES`` is plain data: one :class:`Natural` per file, naming the op-library composite that
computes the same layer (if any) and the polynomial degree of the program's flops as written,
for checks of the compiled cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, compile_file, randint, randn, uniform

from catenc.loader import Library

NATURAL = Path(__file__).resolve().parent.parent / "bench" / "composites" / "natural"
TOL = dict(rtol=1e-4, atol=1e-5)


@dataclass(frozen=True)
class Natural:
    """One natural formulation: ``NATURAL/file`` defines the entry ``composite``.

    sizes: the size bindings it runs at; inputs(sizes): its f32/i64 inputs in declared order;
    reference(*inputs): the outputs in float64 (a tuple when there are several); library: the
    op-library composite (ops/*.toml) for the same layer, or ""; degree: the degree in the
    symbols of the flops of the program as written; defines: -D values it is compiled with.
    """

    file: str
    composite: str
    sizes: tuple[Mapping[str, int], ...]
    inputs: Callable[[Mapping[str, int]], tuple[np.ndarray, ...]]
    reference: Callable[..., np.ndarray | tuple[np.ndarray, ...]]
    library: str
    degree: int
    defines: Mapping[str, object] = field(default_factory=dict)


def f64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def channel(v: np.ndarray) -> np.ndarray:
    """A per-channel vector [C] broadcast against [N, C, H, W]."""
    return np.asarray(v, dtype=np.float64).reshape(1, -1, 1, 1)


# ------------------------------------------------------------------ numpy references


def groupnorm_ref(x, gamma, beta, groups=32, eps=1e-5):
    x, gamma, beta = f64(x, gamma, beta)
    n = x.shape[0]
    xg = x.reshape(n, groups, -1)
    y = (xg - xg.mean(axis=-1, keepdims=True)) / np.sqrt(xg.var(axis=-1, keepdims=True) + eps)
    return y.reshape(x.shape) * channel(gamma) + channel(beta)


def dwsep_conv_ref(x, w_dw, w_pw):
    x, w_dw, w_pw = f64(x, w_dw, w_pw)
    _, _, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dw = sum(xp[:, :, r : r + h, s : s + w] * channel(w_dw[:, 0, r, s]) for r in range(3) for s in range(3))
    return np.einsum("kc,nchw->nkhw", w_pw[:, :, 0, 0], dw)


def rmsnorm_ref(x, weight, eps=1e-6):
    x, weight = f64(x, weight)
    return x / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + eps) * weight


def logsumexp_ref(x):
    (x,) = f64(x)
    return np.log(np.exp(x).sum(axis=-1))


def softmax_ref(x):
    (x,) = f64(x)
    return np.exp(x - logsumexp_ref(x)[:, None])


def layernorm_ref(x, gamma, beta, eps=1e-5):
    x, gamma, beta = f64(x, gamma, beta)
    return (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * gamma + beta


def cross_entropy_ref(logits, target):
    (z,) = f64(logits)
    rows = np.arange(z.shape[0])
    return np.asarray(np.mean(logsumexp_ref(z) - z[rows, target]))


def causal_attention_ref(q, k, v, scale=0.125):
    q, k, v = f64(q, k, v)
    t = q.shape[-2]
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s[..., np.triu(np.ones((t, t), dtype=bool), k=1)] = -np.inf
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", p / p.sum(axis=-1, keepdims=True), v)


def gru_cell_ref(x, h, w_ih, w_hh, b_ih, b_hh):
    x, h, w_ih, w_hh, b_ih, b_hh = f64(x, h, w_ih, w_hh, b_ih, b_hh)
    i_r, i_z, i_n = np.split(x @ w_ih.T + b_ih, 3, axis=1)
    h_r, h_z, h_n = np.split(h @ w_hh.T + b_hh, 3, axis=1)
    r = 1.0 / (1.0 + np.exp(-(i_r + h_r)))
    z = 1.0 / (1.0 + np.exp(-(i_z + h_z)))
    n = np.tanh(i_n + r * h_n)
    return (1.0 - z) * n + z * h


def rotary_ref(q, k, cos, sin):
    q, k, cos, sin = f64(q, k, cos, sin)
    half = q.shape[-1] // 2

    def rotate(x):
        out = np.empty_like(x)
        out[..., :half] = -x[..., half:]
        out[..., half:] = x[..., :half]
        return out

    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def batchnorm_ref(x, running_mean, running_var, weight, bias, eps=1e-5):
    x, mean, var, weight, bias = f64(x, running_mean, running_var, weight, bias)
    return (x - channel(mean)) / np.sqrt(channel(var) + eps) * channel(weight) + channel(bias)


def meanpool_linear_ref(x, w, b):
    x, w, b = f64(x, w, b)
    return np.einsum("btd,kd->bk", x, w) / x.shape[1] + b


# ------------------------------------------------------------------------- inputs


def _nchw(s, *channel_vectors: int):
    """x[N, C, H, W] and per-channel vectors [C], from the given seeds."""
    return (randn((s["N"], s["C"], s["H"], s["W"])), *(randn(s["C"], seed=seed) for seed in channel_vectors))


def _rotary_inputs(s):
    b, h, n, d = s["B"], s["H"], s["S"], s["D"]
    inv = 10000.0 ** (-np.arange(0, d, 2) / d)
    theta = np.arange(n)[:, None] * inv[None, :]
    theta = np.concatenate([theta, theta], axis=-1)
    return (
        randn((b, h, n, d)),
        randn((b, h, n, d), seed=1),
        np.cos(theta).astype(np.float32),
        np.sin(theta).astype(np.float32),
    )


def _gru_inputs(s):
    b, i, h = s["B"], s["I"], s["H"]
    bound = 1.0 / math.sqrt(h)
    return (
        randn((b, i)),
        randn((b, h), seed=1),
        uniform((3 * h, i), -bound, bound, seed=2),
        uniform((3 * h, h), -bound, bound, seed=3),
        uniform(3 * h, -bound, bound, seed=4),
        uniform(3 * h, -bound, bound, seed=5),
    )


CASES = [
    Natural(
        "groupnorm_natural.toml",
        "groupnorm_natural",
        (dict(N=2, C=64, H=3, W=5), dict(N=1, C=96, H=7, W=4)),
        lambda s: _nchw(s, 1, 2),
        groupnorm_ref,
        "groupnorm",
        4,
    ),
    Natural(
        "dwsep_conv_natural.toml",
        "dwsep_conv_natural",
        (dict(N=1, C=3, H=5, W=7, K=4), dict(N=2, C=13, H=9, W=6, K=11)),
        lambda s: (
            randn((s["N"], s["C"], s["H"], s["W"])),
            randn((s["C"], 1, 3, 3), seed=1),
            randn((s["K"], s["C"], 1, 1), seed=2),
        ),
        dwsep_conv_ref,
        "depthwise_conv2d, conv2d",
        5,
    ),
    Natural(
        "rmsnorm_natural.toml",
        "rmsnorm_natural",
        (dict(B=1, T=7, D=13), dict(B=3, T=5, D=100)),
        lambda s: (randn((s["B"], s["T"], s["D"])), randn(s["D"], seed=1)),
        rmsnorm_ref,
        "rmsnorm",
        3,
    ),
    Natural(
        "softmax_natural.toml",
        "softmax_natural",
        (dict(N=7, D=13), dict(N=33, D=100)),
        lambda s: (randn((s["N"], s["D"])),),
        softmax_ref,
        "softmax",
        2,
    ),
    Natural(
        "layernorm_natural.toml",
        "layernorm_natural",
        (dict(N=7, D=13), dict(N=33, D=100)),
        lambda s: (randn((s["N"], s["D"])), randn(s["D"], seed=1), randn(s["D"], seed=2)),
        layernorm_ref,
        "layernorm",
        2,
    ),
    Natural(
        "logsumexp_natural.toml",
        "logsumexp_natural",
        (dict(N=7, D=13), dict(N=33, D=100)),
        lambda s: (randn((s["N"], s["D"])),),
        logsumexp_ref,
        "logsumexp",
        2,
    ),
    Natural(
        "cross_entropy_natural.toml",
        "cross_entropy_natural",
        (dict(N=13, C=7), dict(N=37, C=100)),
        lambda s: (randn((s["N"], s["C"])), randint(s["N"], 0, s["C"] - 1, np.int64, seed=1)),
        cross_entropy_ref,
        "cross_entropy",
        2,
    ),
    Natural(
        "causal_attention_natural.toml",
        "causal_attention_natural",
        (dict(B=1, H=2, T=7, D=13), dict(B=2, H=3, T=37, D=16)),
        lambda s: tuple(randn((s["B"], s["H"], s["T"], s["D"]), seed=seed) for seed in range(3)),
        causal_attention_ref,
        "attention",
        5,
    ),
    Natural(
        "gru_cell_natural.toml",
        "gru_cell_natural",
        (dict(B=1, I=7, H=5), dict(B=13, I=37, H=17)),
        _gru_inputs,
        gru_cell_ref,
        "",
        3,
    ),
    Natural(
        "rotary_natural.toml",
        "rotary_natural",
        (dict(B=1, H=2, S=7, D=8), dict(B=2, H=3, S=13, D=14)),
        _rotary_inputs,
        rotary_ref,
        "rope",
        4,
    ),
    Natural(
        "batchnorm_natural.toml",
        "batchnorm_natural",
        (dict(N=1, C=3, H=5, W=7), dict(N=2, C=13, H=9, W=6)),
        lambda s: (
            randn((s["N"], s["C"], s["H"], s["W"])),
            randn(s["C"], seed=1),
            uniform(s["C"], 0.5, 2.0, seed=2),
            randn(s["C"], seed=3),
            randn(s["C"], seed=4),
        ),
        batchnorm_ref,
        "batchnorm_nchw",
        4,
    ),
    Natural(
        "meanpool_linear_natural.toml",
        "meanpool_linear_natural",
        (dict(B=1, T=7, D=13, K=5), dict(B=3, T=37, D=20, K=11)),
        lambda s: (randn((s["B"], s["T"], s["D"])), randn((s["K"], s["D"]), seed=1), randn(s["K"], seed=2)),
        meanpool_linear_ref,
        "linear",
        3,
    ),
]

_LIBS: dict[str, Library | Exception] = {}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Callable[[Natural], Library]:
    """The case's file compiled at the default level, once per module (a failure fails every use)."""

    def get(case: Natural) -> Library:
        if case.file not in _LIBS:
            out = tmp_path_factory.mktemp("natural") / Path(case.file).stem
            try:
                _LIBS[case.file] = compile_file(NATURAL / case.file, out, defines=case.defines)
            except Exception as error:  # re-raised for every binding
                _LIBS[case.file] = error
        result = _LIBS[case.file]
        if isinstance(result, Exception):
            raise result
        return result

    return get


def test_every_natural_file_has_a_case():
    assert sorted(p.name for p in NATURAL.glob("*.toml")) == sorted(case.file for case in CASES)


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("case", CASES, ids=[case.composite for case in CASES])
def test_natural_matches_numpy(compiled, case: Natural, index: int):
    sizes = case.sizes[index]
    inputs = case.inputs(sizes)
    got = compiled(case)[case.composite](*inputs)
    want = case.reference(*inputs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for position, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_close(g, w, dtype=np.float32, err_msg=f"{case.composite} output {position} at {sizes}", **TOL)
