"""Every composite file in samples/, compiled at -O0 and -O2, each entry run at several size
bindings (1, primes, larger non-multiples of 16) against numpy written here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, compile_file, np_gelu, rng

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TOL = dict(rtol=1e-4, atol=1e-4)


def randn(shape, seed=0, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# file -> entry -> (list of size bindings, inputs(sizes) -> tuple, numpy reference)


def _gemm_inputs(s):
    return randn((s["M"], s["K"])), randn((s["K"], s["N"]), seed=1)


def _gemm_ref(a, b):
    a, b = f64(a, b)
    return a @ b


def _gemm_relu_inputs(s):
    return (*_gemm_inputs(s), randn(s["N"], seed=2))


def _gemm_relu_ref(a, b, bias):
    a, b, bias = f64(a, b, bias)
    return np.maximum(a @ b + bias, 0.0)


def _mlp_inputs(s):
    b, d = s["B"], s["D"]
    h = 4 * d
    scale = 1 / math.sqrt(max(d, 1))
    return (
        randn((b, d)),
        randn((d, h), seed=1, scale=scale),
        randn(h, seed=2),
        randn((h, d), seed=3, scale=scale / 2),
        randn(d, seed=4),
    )


def _mlp_ref(x, w1, b1, w2, b2):
    x, w1, b1, w2, b2 = f64(x, w1, b1, w2, b2)
    return np_gelu(x @ w1 + b1) @ w2 + b2


def _softmax_inputs(s):
    return (randn((s["N"], s["D"]), scale=3),)


def _softmax_ref(x):
    return np_softmax(f64(x)[0])


def _layernorm_inputs(s):
    n, d = s["N"], s["D"]
    return randn((n, d), scale=2) + 1.0, randn(d, seed=1), randn(d, seed=2)


def _layernorm_ref(x, gamma, beta, eps=1e-5):
    x, gamma, beta = f64(x, gamma, beta)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def _attention_inputs(s):
    t, d = s["T"], s["D"]
    return randn((t, d)), randn((t, d), seed=1), randn((t, d), seed=2)


def _attention_ref(q, k, v, scale=0.125):
    q, k, v = f64(q, k, v)
    t = q.shape[0]
    s = q @ k.T * scale
    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    return np_softmax(s) @ v


def _conv2d_inputs(s):
    return randn((s["N"], s["C"], s["H"], s["W"])), randn((s["K"], s["C"], 3, 3), seed=1)


def _conv2d_ref(x, w):
    x, w = f64(x, w)
    n, c, h, wd = x.shape
    xp = np.pad(x, [[0, 0], [0, 0], [1, 1], [1, 1]])
    y = np.zeros((n, w.shape[0], h, wd))
    for r in range(3):
        for s in range(3):
            y += np.einsum("nchw,kc->nkhw", xp[:, :, r : r + h, s : s + wd], w[:, :, r, s])
    return y


CASES = {
    "gemm.toml": {
        "gemm": (
            [
                dict(M=1, N=1, K=1),
                dict(M=7, N=13, K=5),
                dict(M=100, N=64, K=37),
                dict(M=3, N=2, K=0),
                dict(M=130, N=257, K=33),
                dict(M=67, N=71, K=129),
            ],
            _gemm_inputs,
            _gemm_ref,
        ),
        "gemm_relu": (
            [dict(M=1, N=1, K=1), dict(M=13, N=7, K=37), dict(M=37, N=17, K=3)],
            _gemm_relu_inputs,
            _gemm_relu_ref,
        ),
    },
    "mlp.yaml": {
        "mlp": (
            [dict(B=1, D=1), dict(B=7, D=13), dict(B=8, D=48), dict(B=3, D=37)],
            _mlp_inputs,
            _mlp_ref,
        )
    },
    "softmax.toml": {
        "softmax": (
            [dict(N=1, D=1), dict(N=7, D=13), dict(N=33, D=100), dict(N=0, D=5), dict(N=65, D=517)],
            _softmax_inputs,
            _softmax_ref,
        )
    },
    "layernorm.toml": {
        "layernorm": (
            [dict(N=1, D=1), dict(N=7, D=13), dict(N=33, D=100), dict(N=2, D=37)],
            _layernorm_inputs,
            _layernorm_ref,
        )
    },
    "attention.toml": {
        "attention": (
            [dict(T=1, D=1), dict(T=7, D=13), dict(T=45, D=64), dict(T=13, D=37)],
            _attention_inputs,
            _attention_ref,
        )
    },
    "conv2d.toml": {
        "conv2d": (
            [
                dict(N=1, C=1, H=1, W=1, K=1),
                dict(N=2, C=3, H=13, W=11, K=8),
                dict(N=1, C=2, H=7, W=17, K=3),
                dict(N=1, C=1, H=2, W=1, K=5),
            ],
            _conv2d_inputs,
            _conv2d_ref,
        )
    },
}

PARAMS = [
    pytest.param(file, entry, i, id=f"{entry}-{'-'.join(f'{k}{v}' for k, v in sizes.items())}")
    for file, entries in CASES.items()
    for entry, (bindings, _, _) in entries.items()
    for i, sizes in enumerate(bindings)
]

_LIBS: dict = {}


# -O0, -O2, and -O3 with OpenMP (--config OMP=1): parallel loops must give the same results
BUILDS = {"O0": ("0", {}), "O2": ("2", {}), "O3-omp": ("3", {"OMP": "1"})}


@pytest.fixture(scope="module", params=list(BUILDS))
def opt(request):
    return request.param


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    def get(file, opt):
        key = (file, opt)
        if key not in _LIBS:
            out = tmp_path_factory.mktemp(f"sample_{Path(file).stem}_{opt}")
            level, config = BUILDS[opt]
            try:
                _LIBS[key] = compile_file(SAMPLES / file, out, opt=level, config=config)
            except Exception as error:  # re-raised for every test of the file
                _LIBS[key] = error
        if isinstance(_LIBS[key], Exception):
            raise _LIBS[key]
        return _LIBS[key]

    return get


def test_every_sample_has_a_reference():
    files = {p.name for p in SAMPLES.iterdir() if p.suffix in (".toml", ".yaml", ".yml")}
    assert files == set(CASES)


@pytest.mark.parametrize("file", sorted(CASES))
def test_sample_entries(libs, opt, file):
    assert set(libs(file, opt)) == set(CASES[file])


@pytest.mark.parametrize(("file", "entry", "index"), PARAMS)
def test_sample(libs, opt, file, entry, index):
    bindings, make_inputs, reference = CASES[file][entry]
    sizes = bindings[index]
    inputs = make_inputs(sizes)
    lib = libs(file, opt)
    y = lib[entry](*inputs)
    expected = reference(*inputs)
    assert y.dtype == np.float32
    assert_close(y, expected, **TOL)


@pytest.fixture(scope="module")
def defined(tmp_path_factory):
    """Samples compiled with -D: params overridden, a symbol fixed (and one derived from it)."""
    out = tmp_path_factory.mktemp("samples_defined")
    return {
        "attention": compile_file(SAMPLES / "attention.toml", out / "a", defines={"scale": 0.0884}),
        "layernorm": compile_file(SAMPLES / "layernorm.toml", out / "l", defines={"eps": 1e-2}),
        "mlp": compile_file(SAMPLES / "mlp.yaml", out / "m", defines={"D": 8}),
    }


@pytest.mark.parametrize("t", [1, 7, 13, 45])
def test_attention_scale_define(defined, t):
    inputs = _attention_inputs(dict(T=t, D=128))
    y = defined["attention"]["attention"](*inputs)
    assert_close(y, _attention_ref(*inputs, scale=0.0884), **TOL)


@pytest.mark.parametrize("nd", [(1, 1), (7, 13), (33, 100)])
def test_layernorm_eps_define(defined, nd):
    inputs = _layernorm_inputs(dict(N=nd[0], D=nd[1]))
    y = defined["layernorm"]["layernorm"](*inputs)
    assert_close(y, _layernorm_ref(*inputs, eps=1e-2), **TOL)


@pytest.mark.parametrize("b", [1, 7, 13])
def test_mlp_fixed_dim(defined, b):
    entry = defined["mlp"]["mlp"]
    assert list(entry.dims) == ["B"]
    inputs = _mlp_inputs(dict(B=b, D=8))
    assert_close(entry(*inputs), _mlp_ref(*inputs), **TOL)
