"""The benchmark's workloads: inputs, float64 references, cost models and the peers' code.

Each :class:`Case` names the composite (``bench/composites/<composite>.toml``) whose entry it
runs, makes its f32 inputs (random normal, fixed seed), computes a float64 reference with
numpy, and lists the peer implementations: numpy and PyTorch written the way a user would
write them, allocating their results, and, where the library offers ``out=``, the same call
writing into preallocated arrays.

The whole GPT-2 small rows call the sample's composites (samples/gpt2/gpt2.toml) and time the
sample's PyTorch model (samples/gpt2/reference.py) on the sample's random weights. The ONNX rows
compile real networks exported by torch.onnx.export (bench/onnx_models.py) and time onnxruntime
and torch eager on the same file and module.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_models
import onnxruntime
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples" / "gpt2"))

import reference as gpt2_reference  # noqa: E402  (samples/gpt2/reference.py)
import weights as gpt2_weights  # noqa: E402  (samples/gpt2/weights.py)

F32 = np.float32
F64 = np.float64
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass
class Peer:
    """One peer implementation.

    column: the table column ("numpy", "numpy out=", "torch", "torch out="); torch peers run
    at 1 and at 2 threads, each a contender of its own. variant: a tag when a column has
    several variants (the best is shown, e.g. attention's "explicit" and "sdpa"). make: given
    the case's inputs (numpy arrays), returns a no-argument callable that runs the peer once
    and returns its result (numpy array or tensor); any preallocation happens in make.
    """

    column: str
    make: Callable[[Sequence[np.ndarray]], Callable[[], object]]
    variant: str = ""

    @property
    def preallocated(self) -> bool:
        return self.column.endswith("out=")

    @property
    def is_torch(self) -> bool:
        return self.column.startswith("torch")


@dataclass
class Case:
    """One benchmark row (several rows may share one composite: sgemm at three sizes).

    composite names the build (compiled once from the file ``toml``, relative to the repository
    root; default ``bench/composites/<composite>.toml``); ``entry`` is the entry the row calls
    (default: the composite's own). ``per_call``: what one call yields ("tok"), for rows whose
    rate is calls per second: the table shows it next to every time.
    """

    name: str
    composite: str
    size: str
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    reference: Callable[[Sequence[np.ndarray]], np.ndarray]
    kind: str  # "flops": compute-bound, rate in GFLOP/s; "bytes": memory-bound, GB/s
    work: Callable[[Sequence[np.ndarray]], float]  # flops or bytes of one call
    peers: list[Peer] = field(default_factory=list)
    notes: str = ""
    entry: str = ""
    toml: str = ""
    per_call: str = ""
    prepare: Callable[[], object] | None = None  # run before compiling: writes the file ``toml`` names
    compile_args: tuple[str, ...] = ()  # more `catenc compile` options
    # the largest relative error a result may have, given the reference (None: suite.RTOL)
    tolerance: Callable[[np.ndarray], float] | None = None

    def __post_init__(self) -> None:
        self.entry = self.entry or self.composite
        self.toml = self.toml or f"bench/composites/{self.composite}.toml"


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    values = rng.standard_normal(shape, dtype=F32)
    if scale != 1.0:
        values *= F32(scale)
    return values


def _t(arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
    """Tensors sharing memory with the numpy inputs (no copy); scalars stay Python floats."""
    return [torch.from_numpy(a) if a.ndim else float(a) for a in arrays]


def _f64(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(a, dtype=F64) for a in arrays]


def _nbytes(arrays: Sequence[np.ndarray]) -> int:
    return sum(np.asarray(a).nbytes for a in arrays)


# ------------------------------------------------------------------------- matmuls


def _matmul_peers(torch_fn: Callable[..., torch.Tensor]) -> list[Peer]:
    def numpy_alloc(args):
        a, b = args
        return lambda: a @ b

    def numpy_out(args):
        a, b = args
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), dtype=F32)
        return lambda: np.matmul(a, b, out=out)

    def torch_alloc(args):
        a, b = _t(args)
        return lambda: torch_fn(a, b)

    def torch_out(args):
        a, b = _t(args)
        out = torch.empty(*a.shape[:-1], b.shape[-1])
        return lambda: torch_fn(a, b, out=out)

    return [
        Peer("numpy", numpy_alloc),
        Peer("numpy out=", numpy_out),
        Peer("torch", torch_alloc),
        Peer("torch out=", torch_out),
    ]


def _sgemm(m: int, n: int, k: int) -> Case:
    return Case(
        name=f"sgemm-{m}" if m == n == k else f"sgemm-{m}x{n}x{k}",
        composite="sgemm",
        size=f"M={m} N={n} K={k}",
        inputs=lambda rng: [_normal(rng, (m, k)), _normal(rng, (k, n))],
        reference=lambda args: _f64(args)[0] @ _f64(args)[1],
        kind="flops",
        work=lambda args: 2.0 * m * n * k,
        peers=_matmul_peers(torch.matmul),
        notes="one composite with symbolic M, N, K, compiled once for the three sizes; peers: `a @ b`, "
        "np.matmul(out=), torch.matmul (and out=)",
    )


def _bmm(b: int, m: int, k: int, n: int) -> Case:
    return Case(
        name="bmm",
        composite="bmm",
        size=f"{b} x ({m}x{k} @ {k}x{n})",
        inputs=lambda rng: [_normal(rng, (b, m, k)), _normal(rng, (b, k, n))],
        reference=lambda args: np.matmul(*_f64(args)),
        kind="flops",
        work=lambda args: 2.0 * b * m * n * k,
        peers=_matmul_peers(torch.bmm),
        notes="peers: `a @ b`, np.matmul(out=), torch.bmm (and out=)",
    )


# --------------------------------------------------------------------- elementwise


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64: numpy has none (and scipy is not a dependency); torch's f64 erf is
    accurate to about an ulp of f64, far below the f32 errors being measured."""
    return torch.erf(torch.from_numpy(np.ascontiguousarray(x, dtype=F64))).numpy()


def _gelu_reference(args: Sequence[np.ndarray]) -> np.ndarray:
    x, a, b = _f64(args)
    t = x * a + b
    return 0.5 * t * (1.0 + _erf64(t / math.sqrt(2.0)))


def _gelu(n: int) -> Case:
    def torch_alloc(args):
        x, a, b = _t(args)
        return lambda: F.gelu(x * a + b)

    return Case(
        name="gelu",
        composite="gelu_affine",
        size=f"N={n} ({n // 2**20}M)",
        inputs=lambda rng: [_normal(rng, (n,)), np.asarray(1.25, dtype=F32), np.asarray(-0.5, dtype=F32)],
        reference=_gelu_reference,
        kind="bytes",
        work=lambda args: 2.0 * args[0].nbytes,
        peers=[Peer("torch", torch_alloc)],
        notes="y = gelu(x*a + b), a and b f32 scalar inputs, with the exact erf form everywhere (catenc `gelu`, "
        "torch `F.gelu`). numpy: n/a, since numpy has no erf and its tanh form would be another function; "
        "the f64 reference takes erf from torch in float64",
    )


# ------------------------------------------------------------------------ row ops


def _softmax_numpy(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax(rows: int, cols: int) -> Case:
    def numpy_alloc(args):
        (x,) = args
        return lambda: _softmax_numpy(x)

    def numpy_out(args):
        (x,) = args
        y = np.empty_like(x)
        row = np.empty((x.shape[0], 1), dtype=F32)

        def run():
            np.max(x, axis=-1, keepdims=True, out=row)
            np.subtract(x, row, out=y)
            np.exp(y, out=y)
            np.sum(y, axis=-1, keepdims=True, out=row)
            np.divide(y, row, out=y)
            return y

        return run

    def torch_alloc(args):
        (x,) = _t(args)
        return lambda: torch.softmax(x, dim=-1)

    def torch_out(args):
        (x,) = _t(args)
        y = torch.empty_like(x)
        return lambda: torch.softmax(x, dim=-1, out=y)

    return Case(
        name="softmax",
        composite="softmax_rows",
        size=f"{rows}x{cols}",
        inputs=lambda rng: [_normal(rng, (rows, cols))],
        reference=lambda args: _softmax_numpy(_f64(args)[0]),
        kind="bytes",
        work=lambda args: 2.0 * args[0].nbytes,
        peers=[
            Peer("numpy", numpy_alloc),
            Peer("numpy out=", numpy_out),
            Peer("torch", torch_alloc),
            Peer("torch out=", torch_out),
        ],
        notes="catenc calls the op library's softmax; numpy: the max-subtracted formula (out=: in place into "
        "preallocated arrays); torch: torch.softmax (and out=)",
    )


EPS = 1e-5


def _layernorm_numpy(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc / np.sqrt(var + EPS) * gamma + beta


def _layernorm(rows: int, cols: int) -> Case:
    def numpy_alloc(args):
        x, gamma, beta = args
        return lambda: _layernorm_numpy(x, gamma, beta)

    def numpy_out(args):
        x, gamma, beta = args
        y = np.empty_like(x)
        sq = np.empty_like(x)
        row = np.empty((x.shape[0], 1), dtype=F32)
        n = F32(x.shape[-1])

        def run():
            np.sum(x, axis=-1, keepdims=True, out=row)
            np.divide(row, n, out=row)
            np.subtract(x, row, out=y)
            np.multiply(y, y, out=sq)
            np.sum(sq, axis=-1, keepdims=True, out=row)
            np.divide(row, n, out=row)
            np.add(row, F32(EPS), out=row)
            np.sqrt(row, out=row)
            np.divide(y, row, out=y)
            np.multiply(y, gamma, out=y)
            np.add(y, beta, out=y)
            return y

        return run

    def torch_alloc(args):
        x, gamma, beta = _t(args)
        return lambda: F.layer_norm(x, (cols,), gamma, beta, eps=EPS)

    return Case(
        name="layernorm",
        composite="layernorm_rows",
        size=f"{rows}x{cols}",
        inputs=lambda rng: [_normal(rng, (rows, cols)), _normal(rng, (cols,)), _normal(rng, (cols,))],
        reference=lambda args: _layernorm_numpy(*_f64(args)),
        kind="bytes",
        work=lambda args: 2.0 * args[0].nbytes + args[1].nbytes + args[2].nbytes,
        peers=[Peer("numpy", numpy_alloc), Peer("numpy out=", numpy_out), Peer("torch", torch_alloc)],
        notes="eps 1e-5; catenc calls the op library's layernorm; numpy: mean/var formula (out=: in place into "
        "preallocated arrays); torch: F.layer_norm (no out=)",
    )


# ---------------------------------------------------------------------------- conv


def _conv_numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3x3, stride 1, padding 1, NCHW: im2col by a strided window view, then one matmul."""
    n, c, h, wd = x.shape
    k = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n c h w 3 3
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * 9)  # copies
    y = cols @ w.reshape(k, c * 9).T
    return np.ascontiguousarray(y.reshape(n, h, wd, k).transpose(0, 3, 1, 2))


def _conv(n: int, c: int, h: int, w: int, k: int) -> Case:
    def numpy_alloc(args):
        x, wt = args
        return lambda: _conv_numpy(x, wt)

    def torch_alloc(args):
        x, wt = _t(args)
        return lambda: F.conv2d(x, wt, padding=1)

    return Case(
        name="conv2d",
        composite="conv3x3",
        size=f"N={n} C={c} H=W={h} K={k} 3x3 pad 1",
        inputs=lambda rng: [_normal(rng, (n, c, h, w)), _normal(rng, (k, c, 3, 3), 1.0 / math.sqrt(9 * c))],
        reference=lambda args: _conv_numpy(*_f64(args)),
        kind="flops",
        work=lambda args: 2.0 * n * k * h * w * c * 9,
        peers=[Peer("numpy", numpy_alloc), Peer("torch", torch_alloc)],
        notes="numpy: im2col (sliding_window_view + copy) and one matmul; torch: F.conv2d (no out=)",
    )


# ----------------------------------------------------------------------------- GPT-2

WIDTH, HEADS, HEAD_DIM, HIDDEN = 768, 12, 64, 3072


def _score_flops(t: int) -> float:
    """q k^T and p v of one attention layer over the full T x T (no causal discount)."""
    return 2 * (2.0 * HEADS * t * t * HEAD_DIM)


def _attention_numpy(x, wqkv, bqkv, wo, bo):
    t = x.shape[0]
    qkv = x @ wqkv + bqkv
    q, k, v = (qkv[:, i * WIDTH : (i + 1) * WIDTH].reshape(t, HEADS, HEAD_DIM).transpose(1, 0, 2) for i in range(3))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(HEAD_DIM)
    s[:, np.triu(np.ones((t, t), dtype=bool), k=1)] = -np.inf
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    a = (p @ v).transpose(1, 0, 2).reshape(t, WIDTH)
    return a @ wo + bo


def _attention(t: int) -> Case:
    def numpy_alloc(args):
        return lambda: _attention_numpy(*args)

    def torch_common(args):
        x, wqkv, bqkv, wo, bo = _t(args)
        # nn.Linear keeps weights as (out, in): the transposed copies are made once, as a model would hold them
        return x, wqkv.T.contiguous(), bqkv, wo.T.contiguous(), bo

    def heads(qkv):
        return (part.view(t, HEADS, HEAD_DIM).transpose(0, 1) for part in qkv.split(WIDTH, dim=1))

    def torch_explicit(args):
        x, wqkv, bqkv, wo, bo = torch_common(args)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)

        def run():
            q, k, v = heads(F.linear(x, wqkv, bqkv))
            s = (q @ k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
            s = s.masked_fill(mask, float("-inf"))
            a = torch.softmax(s, dim=-1) @ v
            return F.linear(a.transpose(0, 1).reshape(t, WIDTH), wo, bo)

        return run

    def torch_sdpa(args):
        x, wqkv, bqkv, wo, bo = torch_common(args)

        def run():
            q, k, v = heads(F.linear(x, wqkv, bqkv))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.linear(a.transpose(0, 1).reshape(t, WIDTH), wo, bo)

        return run

    def inputs(rng):
        return [
            _normal(rng, (t, WIDTH)),
            _normal(rng, (WIDTH, 3 * WIDTH), 0.02),
            _normal(rng, (3 * WIDTH,), 0.02),
            _normal(rng, (WIDTH, WIDTH), 0.02),
            _normal(rng, (WIDTH,), 0.02),
        ]

    flops = 2.0 * t * WIDTH * 3 * WIDTH + _score_flops(t) + 2.0 * t * WIDTH * WIDTH
    return Case(
        name="attention",
        composite="gpt2_attention",
        size=f"GPT-2 small, T={t}",
        inputs=inputs,
        reference=lambda args: _attention_numpy(*_f64(args)),
        kind="flops",
        work=lambda args: flops,
        peers=[
            Peer("numpy", numpy_alloc),
            Peer("torch", torch_explicit, "explicit"),
            Peer("torch", torch_sdpa, "sdpa"),
        ],
        notes="x @ Wqkv + bqkv, 12 heads of 64, causal softmax(q k^T / 8) v, heads concatenated, @ Wo + bo. "
        "flops: the dense products (q k^T and p v over the full T x T, no causal discount); "
        "torch: the best of the explicit form and F.scaled_dot_product_attention(is_causal=True)",
    )


def _gelu_tanh_numpy(h):
    return 0.5 * h * (1.0 + np.tanh(SQRT_2_OVER_PI * (h + 0.044715 * h**3)))


def _mlp_numpy(x, w1, b1, w2, b2):
    return _gelu_tanh_numpy(x @ w1 + b1) @ w2 + b2


def _mlp(t: int) -> Case:
    def numpy_alloc(args):
        return lambda: _mlp_numpy(*args)

    def torch_alloc(args):
        x, w1, b1, w2, b2 = _t(args)
        w1, w2 = w1.T.contiguous(), w2.T.contiguous()  # nn.Linear layout, made once
        return lambda: F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)

    def inputs(rng):
        return [
            _normal(rng, (t, WIDTH)),
            _normal(rng, (WIDTH, HIDDEN), 0.02),
            _normal(rng, (HIDDEN,), 0.02),
            _normal(rng, (HIDDEN, WIDTH), 0.02),
            _normal(rng, (WIDTH,), 0.02),
        ]

    return Case(
        name="mlp",
        composite="gpt2_mlp",
        size=f"GPT-2 small, T={t}",
        inputs=inputs,
        reference=lambda args: _mlp_numpy(*_f64(args)),
        kind="flops",
        work=lambda args: 2 * 2.0 * t * WIDTH * HIDDEN,
        peers=[Peer("numpy", numpy_alloc), Peer("torch", torch_alloc)],
        notes="gelu_tanh(x @ W1 + b1) @ W2 + b2, the tanh gelu everywhere (GPT-2's); numpy: the tanh formula; "
        "torch: F.linear + F.gelu(approximate='tanh')",
    )


# -------------------------------------------------------------- GPT-2 small, whole

GPT2_TOML = "samples/gpt2/gpt2.toml"
GPT2_LINEARS = ("attn_w", "proj_w", "fc_w", "fcproj_w", "wte")  # every matrix a position multiplies


@functools.cache
def _gpt2_weights() -> tuple[np.ndarray, ...]:
    """The sample's random GPT-2 small weights (seed 0), in the entries' argument order; made
    once (about 3 s, 500 MB) for both rows."""
    tensors = gpt2_weights.random_weights(0)
    return tuple(tensors[name] for name in gpt2_weights.NAMES)


def _gpt2_model(weights: Sequence[np.ndarray], dtype: torch.dtype = torch.float32) -> gpt2_reference.Gpt2:
    """The sample's PyTorch model on these weights (shared, not copied, in float32)."""
    return gpt2_reference.Gpt2(dict(zip(gpt2_weights.NAMES, weights)), dtype)


def _gpt2_prefill(t: int) -> Case:
    def inputs(rng):
        return [rng.integers(0, gpt2_weights.VOCAB, t, dtype=np.int64), *_gpt2_weights()]

    def reference(args):
        return _gpt2_model(args[1:], torch.float64).prefill(args[0])[0].numpy()

    def torch_alloc(args):
        model = _gpt2_model(args[1:])
        return lambda: model.prefill(args[0])[0]

    params = sum(math.prod(gpt2_weights.SHAPES[name]) for name in GPT2_LINEARS)
    flops = 2.0 * t * params + gpt2_weights.LAYERS * _score_flops(t)
    return Case(
        name="gpt2-prefill",
        composite="gpt2",
        size=f"GPT-2 small 124M, T={t} prompt",
        inputs=inputs,
        reference=reference,
        kind="flops",
        work=lambda args: flops,
        peers=[Peer("torch", torch_alloc)],
        notes="the whole forward pass over a prompt of T random tokens: logits [T, 50257] and both KV caches "
        "[T, 12, 12, 64] (entry `gpt2`; random weights, seed 0); torch: `Gpt2.prefill` of "
        "samples/gpt2/reference.py (eager, F.scaled_dot_product_attention), on the same weights. "
        "flops: 2 T x the 123.5M weights of the matrix products (head included) plus the attention "
        "scores over the full T x T; the error is the logits', against the same model in float64",
        toml=GPT2_TOML,
    )


def _gpt2_decode(s: int) -> Case:
    cache = (s, gpt2_weights.LAYERS, HEADS, HEAD_DIM)

    def inputs(rng):
        token = np.asarray(rng.integers(0, gpt2_weights.VOCAB), dtype=np.int64)
        return [token, _normal(rng, cache), _normal(rng, cache), *_gpt2_weights()]

    def reference(args):
        token, past_k, past_v, *weights = args
        return _gpt2_model(weights, torch.float64).step(int(token), *_f64([past_k, past_v]))[0].numpy()

    def torch_alloc(args):
        token, past_k, past_v, *weights = args
        model = _gpt2_model(weights)
        past = torch.from_numpy(past_k), torch.from_numpy(past_v)
        return lambda: model.step(int(token), *past)[0]

    written = 4.0 * (gpt2_weights.VOCAB + 2 * gpt2_weights.LAYERS * HEADS * HEAD_DIM)
    return Case(
        name="gpt2-decode",
        composite="gpt2",
        size=f"GPT-2 small 124M, 1 token, S={s} cached",
        inputs=inputs,
        reference=reference,
        kind="bytes",
        work=lambda args: _nbytes(args) + written,
        peers=[Peer("torch", torch_alloc)],
        notes="one greedy decoding step with the KV cache: the logits [50257] of one token "
        "at position S and its keys and values, given S cached positions (random normal caches); times are per "
        "token, tok/s = 1 / time; torch: `Gpt2.step` of samples/gpt2/reference.py (concatenates the cache in "
        "every layer, as written). Bandwidth-bound: bytes = every input read once (the 498 MB of weights, "
        "both caches) + the outputs written once",
        entry="gpt2_step",
        toml=GPT2_TOML,
        per_call="tok",
    )


# ------------------------------------------------------------------ ONNX models
#
# Real networks (bench/onnx_models.py) exported by torch.onnx.export and compiled by `catenc compile
# model.onnx`, against onnxruntime (1 and 2 intra-op threads) and the same module in torch eager.

ONNX_DIR = ROOT / "build" / "bench" / "onnx"


@functools.cache
def _onnx_model(name: str, size: str) -> onnx_models.Model:
    return onnx_models.build(name, size)


def _onnx_path(name: str) -> Path:
    return ONNX_DIR / f"{name}.onnx"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _onnx_reference(model: onnx_models.Model) -> np.ndarray:
    """The module's first output in float64 (a float64 copy of the module, same inputs)."""
    double = copy.deepcopy(model.module).double()
    args = [torch.from_numpy(a.astype(F64) if a.dtype == F32 else a) for a in model.inputs]
    with torch.inference_mode():
        out = double(*args)
    return (out[0] if isinstance(out, tuple) else out).numpy()


def _onnxruntime_peer(model: Callable[[], onnx_models.Model], threads: int, file: Path | None = None) -> Peer:
    """onnxruntime on `file` (default: the model's own ONNX file) with `threads` intra-op threads."""

    def make(args):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3  # errors only: not its notes on a quantised file's unused initializers
        # Its pool spins between the operators of a call, as by default, but stops when the call returns:
        # by default it went on spinning past the bench's 5 ms gap and slowed the next contender down
        # 2.8x (catenc's MobileNetV2, 13.8 -> 38 ms), as the other pools would without bench/run.py's settings.
        options.add_session_config_entry("session.force_spinning_stop", "1")
        path = str(file or _onnx_path(model().name))
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = dict(zip(model().input_names, args))
        return lambda: session.run(None, feed)[0]

    return Peer(f"onnxruntime {threads}T", make)


def _torch_eager_peer(model: Callable[[], onnx_models.Model]) -> Peer:
    def make(args):
        module, tensors = model().module, [torch.from_numpy(a) for a in args]

        def run():
            with torch.inference_mode():
                return module(*tensors)

        return run

    return Peer("torch", make)


def _flops(model: onnx_models.Model) -> float:
    """The module's matrix-product and convolution flops (torch's FlopCounterMode, one eager call)."""
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model.module(*model.torch_inputs())
    return float(counter.get_total_flops())


def _onnx_row(row: str, name: str, quick: bool, size: str, notes: str, weights: str) -> Case:
    """The row of model ``name`` of bench/onnx_models.py, built (random weights) only when the row runs;
    weights: `catenc compile --weights` (baked: the default; packed where baking would write a C source
    three times the weights' size, 600 MB for bert4, 1.5 GB for GPT-2: the file packed once, at load)."""
    model = functools.partial(_onnx_model, name, "tiny" if quick else "full")
    path = _shown(_onnx_path(name))
    return Case(
        name=row,
        composite=name,
        size=f"tiny variant (bench/onnx_models.py) of {size}" if quick else size,
        inputs=lambda rng: list(model().inputs),
        reference=lambda args: _onnx_reference(model()),
        kind="flops",
        work=lambda args: _flops(model()),
        peers=[_onnxruntime_peer(model, 1), _onnxruntime_peer(model, 2), _torch_eager_peer(model)],
        notes=f"{notes} (bench/onnx_models.py, random weights); `catenc compile {path} --weights {weights}` "
        + (
            "(the weights in a safetensors file beside the library, packed once at load by its pack function)"
            if weights == "packed"
            else "(the weights in the library)"
        )
        + "; onnxruntime: the same file, CPU provider, default graph optimizations, its pool's spinning stopped when "
        "a call returns (session.force_spinning_stop); torch: the module in eager mode "
        "(inference_mode). flops: the convolutions' and matrix products' (torch FlopCounterMode); the error is the "
        "first output's, against the module in float64",
        toml=path,
        prepare=lambda: onnx_models.export(model(), _onnx_path(name)),
        compile_args=("--weights", weights),
    )


def _int8_row(name: str, quick: bool, size: str, title: str) -> Case:
    """The row of model ``name`` quantised to int8 (bench/onnx_models.py `quantize`), against
    onnxruntime's int8 session on the same file; its reference is that session's result (one thread),
    which catenc's equals or is one quantisation step of the output from (docs/onnx.md, Quantised
    models: onnxruntime runs some operators in integers that the model computes in float)."""
    model = functools.partial(_onnx_model, name, "tiny" if quick else "full")
    quantized = _onnx_path(f"{name}_int8")

    def prepare() -> None:
        onnx_models.quantize(model(), onnx_models.export(model(), _onnx_path(name)), quantized)

    def reference(args: Sequence[np.ndarray]) -> np.ndarray:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # not its notes on the quantiser's unused initializers
        session = onnxruntime.InferenceSession(str(quantized), options, providers=["CPUExecutionProvider"])
        return session.run(None, dict(zip(model().input_names, args)))[0]

    path = _shown(quantized)
    return Case(
        name=f"{name}-int8",
        composite=f"{name}_int8",
        entry=name,
        size=f"tiny variant (bench/onnx_models.py) of {size}" if quick else size,
        inputs=lambda rng: list(model().inputs),
        reference=reference,
        kind="flops",
        work=lambda args: _flops(model()),
        peers=[_onnxruntime_peer(model, 1, quantized), _onnxruntime_peer(model, 2, quantized)],
        notes=f"{title} quantised by onnxruntime.quantization.quantize_static (QDQ, per-channel int8 weights, u8 "
        f"activations; bench/onnx_models.py `quantize`); `catenc compile {path}` (int8 gemms, the weights packed in "
        "the library); onnxruntime: the same file, its int8 kernels; the error is against onnxruntime's result "
        "(equal: 0); flops: the float model's",
        toml=path,
        prepare=prepare,
        tolerance=lambda ref: 1.001 * _output_step(quantized) / max(float(np.abs(ref).max()), 1e-30),
    )


def _output_step(path: Path) -> float:
    """The quantisation step of the model's first output: the scale of the DequantizeLinear that
    gives it (0: the output is not dequantised, so only an equal result passes)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    producer = next((n for n in graph.node if graph.output[0].name in n.output), None)
    if producer is None or producer.op_type != "DequantizeLinear":
        return 0.0
    scales = [t for t in graph.initializer if t.name == producer.input[1]]
    return float(onnx.numpy_helper.to_array(scales[0]).max()) if scales else 0.0


def onnx_cases(quick: bool = False) -> list[Case]:
    """ResNet-18, MobileNetV2, a 4-layer BERT encoder, GPT-2 small and the image networks from their
    papers imported from ONNX, batch 1."""
    return [
        _onnx_row("resnet18", "resnet18", quick, "ResNet-18, 1x3x224x224", "ResNet-18, BatchNorm folded", "baked"),
        _onnx_row("mobilenetv2", "mobilenetv2", quick, "MobileNetV2 1.0, 1x3x224x224", "MobileNetV2, width 1", "baked"),
        _onnx_row("bert4", "bert4", quick, "4 layers, 768, 12 heads, seq 128", "BERT-base, 4 layers", "packed"),
        _onnx_row("gpt2-onnx", "gpt2_small", quick, "GPT-2 small 124M, seq 128", "GPT-2 small, all logits", "packed"),
        *(
            _onnx_row(name, name, quick, f"{title}, 1x3x224x224", f"{title}, written from its paper", weights)
            for name, title, weights in PAPER_NETWORKS
        ),
        *(_int8_row(name, quick, f"{title}, 1x3x224x224", title) for name, title in INT8_NETWORKS),
    ]


# The networks also timed quantised to int8 (issue 26, item 5)
INT8_NETWORKS = (("resnet18", "ResNet-18"), ("mobilenetv2", "MobileNetV2"), ("resnet50", "ResNet-50"))


# The image networks of bench/paper_models.py (issue 26): (model, title, --weights). Those over 20M
# parameters keep them in the weights file, packed at load, as bert4 and GPT-2 do (VGG-16 baked: a 1.6 GB C
# source, 126 s to compile).
PAPER_NETWORKS = (
    ("alexnet", "AlexNet", "packed"),
    ("googlenet", "GoogLeNet (Inception v1)", "baked"),
    ("vgg16", "VGG-16", "packed"),
    ("resnet50", "ResNet-50", "packed"),
    ("densenet121", "DenseNet-121", "baked"),
    ("shufflenet", "ShuffleNet v1 (g=3)", "baked"),
    ("squeezenet", "SqueezeNet 1.1", "baked"),
    ("efficientnet_b0", "EfficientNet-B0", "baked"),
)


# ------------------------------------------------------------ natural formulations
#
# Each layer written the way a user writes it from the paper or PyTorch
# (bench/composites/natural/<layer>_natural.toml, row "<layer>-natural") and, where the op library
# has the layer, the same layer through the library's composite (bench/composites/library/, row
# "<layer>-library"; softmax and layernorm: the rows above), on the same inputs against the same
# peers (issue 16: the natural form within 1.5x of the library's and 2x of torch eager).

NATURAL = "bench/composites/natural"
LIBRARY = "bench/composites/library"


def _natural(case: Case, layer: str, notes: str) -> Case:
    """``case`` (a library row, or a row of its own) with the natural formulation of ``layer`` as catenc's side."""
    return dataclasses.replace(
        case,
        name=f"{layer}-natural",
        composite=f"{layer}_natural",
        entry="",
        toml=f"{NATURAL}/{layer}_natural.toml",
        notes=notes,
    )


def _layer_rows(layer: str, natural_notes: str, library_notes: str = "", **fields) -> list[Case]:
    """The natural row of ``layer``, then its library row when ``library_notes`` is given."""
    library = Case(
        name=f"{layer}-library",
        composite=f"{layer}_library",
        toml=f"{LIBRARY}/{layer}_library.toml",
        notes=library_notes,
        **fields,
    )
    return [_natural(library, layer, natural_notes)] + ([library] if library_notes else [])


def _channel(v: np.ndarray) -> np.ndarray:
    """A per-channel vector [C] broadcast against [N, C, H, W] (numpy)."""
    return v[:, None, None]


def _torch_peer(fn: Callable[..., torch.Tensor], variant: str = "") -> Peer:
    """torch eager on the inputs as tensors (sharing memory with the numpy inputs)."""

    def make(args):
        tensors = _t(args)
        return lambda: fn(*tensors)

    return Peer("torch", make, variant)


def _numpy_peer(fn: Callable[..., np.ndarray]) -> Peer:
    return Peer("numpy", lambda args: lambda: fn(*args))


def _groupnorm_numpy(x, gamma, beta, groups=32):
    n, c, h, w = x.shape
    xg = x.reshape(n, groups, -1)
    mu = xg.mean(axis=-1, keepdims=True)
    var = xg.var(axis=-1, keepdims=True)
    y = ((xg - mu) / np.sqrt(var + EPS)).reshape(n, c, h, w)
    return y * _channel(gamma) + _channel(beta)


def _groupnorm_rows(n: int, c: int, h: int, w: int) -> list[Case]:
    return _layer_rows(
        "groupnorm",
        "reshape to [N, 32, C/32, H, W], mean and var over each group, reshape back, * gamma[:, None, None] "
        "+ beta[:, None, None]; numpy: the same formula; torch: F.group_norm",
        "the op library's groupnorm on x reshaped to [N, C, H*W]",
        size=f"x[{n}, {c}, {h}, {w}], 32 groups",
        inputs=lambda rng: [_normal(rng, (n, c, h, w)), _normal(rng, (c,)), _normal(rng, (c,))],
        reference=lambda args: _groupnorm_numpy(*_f64(args)),
        kind="bytes",
        work=lambda args: 2.0 * args[0].nbytes,
        peers=[
            _numpy_peer(_groupnorm_numpy),
            _torch_peer(lambda x, gamma, beta: F.group_norm(x, 32, gamma, beta, eps=EPS)),
        ],
    )


def _dwsep_numpy(x, w_dw, w_pw):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dw = sum(xp[:, :, r : r + h, s : s + w] * _channel(w_dw[:, 0, r, s]) for r in range(3) for s in range(3))
    return (w_pw[:, :, 0, 0] @ dw.reshape(n, c, h * w)).reshape(n, -1, h, w)


def _dwsep_rows(n: int, c: int, h: int, w: int, k: int) -> list[Case]:
    return _layer_rows(
        "dwsep_conv",
        "3x3 depthwise (padding 1) then 1x1 pointwise, two index-form statements; numpy: nine shifted "
        "multiply-adds, then a matmul; torch: F.conv2d(groups=C) then F.conv2d",
        "the op library's depthwise_conv2d(padding=1), then conv2d",
        size=f"x[{n}, {c}, {h}, {w}] -> K={k}",
        inputs=lambda rng: [
            _normal(rng, (n, c, h, w)),
            _normal(rng, (c, 1, 3, 3), 1.0 / 3.0),
            _normal(rng, (k, c, 1, 1), 1.0 / math.sqrt(c)),
        ],
        reference=lambda args: _dwsep_numpy(*_f64(args)),
        kind="flops",
        work=lambda args: 2.0 * n * c * h * w * (9 + k),
        peers=[
            _numpy_peer(_dwsep_numpy),
            _torch_peer(lambda x, w_dw, w_pw: F.conv2d(F.conv2d(x, w_dw, padding=1, groups=c), w_pw)),
        ],
    )


RMS_EPS = 1e-6


def _rmsnorm_numpy(x, weight):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + RMS_EPS) * weight


def _rmsnorm_rows(b: int, t: int, d: int) -> list[Case]:
    def hugging_face(x, weight):  # LlamaRMSNorm.forward
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS))

    return _layer_rows(
        "rmsnorm",
        "mean of squares, x * rsqrt(. + eps), * weight (Hugging Face's LlamaRMSNorm); numpy: the formula; "
        "torch: the best of LlamaRMSNorm's eager code and F.rms_norm",
        "the op library's rmsnorm",
        size=f"x[{b}, {t}, {d}]",
        inputs=lambda rng: [_normal(rng, (b, t, d)), _normal(rng, (d,))],
        reference=lambda args: _rmsnorm_numpy(*_f64(args)),
        kind="bytes",
        work=lambda args: 2.0 * args[0].nbytes + args[1].nbytes,
        peers=[
            _numpy_peer(_rmsnorm_numpy),
            _torch_peer(hugging_face, "eager"),
            _torch_peer(lambda x, weight: F.rms_norm(x, (d,), weight, eps=RMS_EPS), "F.rms_norm"),
        ],
    )


def _logsumexp_numpy(x):
    m = x.max(axis=-1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=-1))


def _logsumexp_rows(rows: int, cols: int) -> list[Case]:
    return _layer_rows(
        "logsumexp",
        "m = max over the row, m + log(sum(exp(x - m[:, None]))); numpy: the same; torch: torch.logsumexp",
        "the op library's logsumexp",
        size=f"{rows}x{cols}",
        inputs=lambda rng: [_normal(rng, (rows, cols))],
        reference=lambda args: _logsumexp_numpy(*_f64(args)),
        kind="bytes",
        work=lambda args: args[0].nbytes + 4.0 * rows,
        peers=[_numpy_peer(_logsumexp_numpy), _torch_peer(lambda x: torch.logsumexp(x, dim=-1))],
    )


def _cross_entropy_numpy(logits, target):
    m = logits.max(axis=-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
    return np.asarray(-logp[np.arange(logits.shape[0]), target].mean())


def _cross_entropy_rows(n: int, c: int) -> list[Case]:
    return _layer_rows(
        "cross_entropy",
        "log-softmax by hand, logp[arange(N), target], minus the mean; numpy: the same; torch: F.cross_entropy",
        "the op library's cross_entropy",
        size=f"logits[{n}, {c}]",
        inputs=lambda rng: [_normal(rng, (n, c)), rng.integers(0, c, n, dtype=np.int64)],
        reference=lambda args: _cross_entropy_numpy(_f64(args[:1])[0], args[1]),
        kind="bytes",
        work=lambda args: _nbytes(args),
        peers=[
            _numpy_peer(_cross_entropy_numpy),
            _torch_peer(lambda logits, target: F.cross_entropy(logits, target)),
        ],
    )


ATTENTION_SCALE = 0.125  # 1/sqrt(64): the natural form's scale, the library's at D = 64


def _causal_attention_numpy(q, k, v):
    t = q.shape[-2]
    att = (q @ k.transpose(0, 1, 3, 2)) * ATTENTION_SCALE
    att = np.where(np.tril(np.ones((t, t))) == 0, -np.inf, att)
    att = np.exp(att - att.max(axis=-1, keepdims=True))
    return (att / att.sum(axis=-1, keepdims=True)) @ v


def _causal_attention_rows(b: int, h: int, t: int, d: int) -> list[Case]:
    mask = torch.tril(torch.ones(t, t))

    def nano_gpt(q, k, v):  # CausalSelfAttention.forward without the flash path
        att = (q @ k.transpose(-2, -1)) * ATTENTION_SCALE
        att = att.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    return _layer_rows(
        "causal_attention",
        "q @ transpose(k) * scale, masked where tril(ones) == 0, softmax by hand, @ v (nanoGPT's explicit path); "
        "numpy: the same; torch: the best of nanoGPT's explicit code and F.scaled_dot_product_attention",
        "the op library's attention(causal=True)",
        size=f"q, k, v[{b}, {h}, {t}, {d}]",
        inputs=lambda rng: [_normal(rng, (b, h, t, d)) for _ in range(3)],
        reference=lambda args: _causal_attention_numpy(*_f64(args)),
        kind="flops",
        work=lambda args: 4.0 * b * h * t * t * d,
        peers=[
            _numpy_peer(_causal_attention_numpy),
            _torch_peer(nano_gpt, "explicit"),
            _torch_peer(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), "sdpa"),
        ],
    )


def _gru_numpy(x, h, w_ih, w_hh, b_ih, b_hh):
    n = h.shape[1]
    gi = x @ w_ih.T + b_ih
    gh = h @ w_hh.T + b_hh
    r = 1.0 / (1.0 + np.exp(-(gi[:, :n] + gh[:, :n])))
    z = 1.0 / (1.0 + np.exp(-(gi[:, n : 2 * n] + gh[:, n : 2 * n])))
    new = np.tanh(gi[:, 2 * n :] + r * gh[:, 2 * n :])
    return (1 - z) * new + z * h


def _gru_rows(b: int, i: int, h: int) -> list[Case]:
    bound = 1.0 / math.sqrt(h)

    def inputs(rng):
        def weight(*shape):
            return rng.uniform(-bound, bound, shape).astype(F32)

        return [
            _normal(rng, (b, i)),
            _normal(rng, (b, h)),
            weight(3 * h, i),
            weight(3 * h, h),
            weight(3 * h),
            weight(3 * h),
        ]

    return _layer_rows(
        "gru_cell",
        "torch.nn.GRUCell's equations: x @ w_ih.T + b_ih and h @ w_hh.T + b_hh sliced into the r, z, n gates; "
        "numpy: the same; torch: torch.gru_cell. No op-library composite",
        size=f"B={b}, I={i}, H={h}",
        inputs=inputs,
        reference=lambda args: _gru_numpy(*_f64(args)),
        kind="flops",
        work=lambda args: 2.0 * b * 3 * h * (i + h),
        peers=[_numpy_peer(_gru_numpy), _torch_peer(torch.gru_cell)],
    )


def _rotary_numpy(q, k, cos, sin):
    half = q.shape[-1] // 2

    def rotate_half(x):
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _rotary_rows(b: int, h: int, s: int, d: int) -> list[Case]:
    def inputs(rng):
        inv = 10000.0 ** (-np.arange(0, d, 2, dtype=F64) / d)
        theta = np.arange(s, dtype=F64)[:, None] * inv
        theta = np.concatenate([theta, theta], axis=-1)
        return [
            _normal(rng, (b, h, s, d)),
            _normal(rng, (b, h, s, d)),
            np.cos(theta).astype(F32),
            np.sin(theta).astype(F32),
        ]

    def hugging_face(q, k, cos, sin):  # apply_rotary_pos_emb
        def rotate_half(x):
            return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)

        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    return _layer_rows(
        "rotary",
        "Hugging Face's apply_rotary_pos_emb: q * cos + rotate_half(q) * sin (and k), rotate_half by slicing and "
        "concat, cos and sin tables [S, D] as inputs; numpy: the same; torch: the Hugging Face code. The error is "
        "q_embed's (both outputs are computed)",
        "the op library's rope on q and k (its own tables, base 10000, positions 0..S-1; the table inputs unused)",
        size=f"q, k[{b}, {h}, {s}, {d}]",
        inputs=inputs,
        reference=lambda args: _rotary_numpy(*_f64(args))[0],
        kind="bytes",
        work=lambda args: 2.0 * _nbytes(args),
        peers=[_numpy_peer(lambda *args: _rotary_numpy(*args)[0]), _torch_peer(lambda *args: hugging_face(*args)[0])],
    )


def _batchnorm_numpy(x, mean, var, weight, bias):
    return (x - _channel(mean)) / np.sqrt(_channel(var) + EPS) * _channel(weight) + _channel(bias)


def _batchnorm_rows(n: int, c: int, h: int, w: int) -> list[Case]:
    return _layer_rows(
        "batchnorm",
        "BatchNorm2d in eval mode, every per-channel vector indexed [:, None, None]; numpy: the same; "
        "torch: F.batch_norm(training=False)",
        "the op library's batchnorm_nchw on x reshaped to [N, C, H*W]",
        size=f"x[{n}, {c}, {h}, {w}]",
        inputs=lambda rng: [
            _normal(rng, (n, c, h, w)),
            _normal(rng, (c,)),
            rng.uniform(0.5, 2.0, c).astype(F32),
            _normal(rng, (c,)),
            _normal(rng, (c,)),
        ],
        reference=lambda args: _batchnorm_numpy(*_f64(args)),
        kind="bytes",
        work=lambda args: 2.0 * args[0].nbytes,
        peers=[
            _numpy_peer(_batchnorm_numpy),
            _torch_peer(lambda x, mean, var, weight, bias: F.batch_norm(x, mean, var, weight, bias, False, 0.0, EPS)),
        ],
    )


def _meanpool_linear_numpy(x, w, b):
    return x.mean(axis=1) @ w.T + b


def _meanpool_linear_rows(b: int, t: int, d: int, k: int) -> list[Case]:
    return _layer_rows(
        "meanpool_linear",
        "mean over the sequence, then @ w.T + b (torch.nn.Linear's layout); numpy: the same; "
        "torch: F.linear(x.mean(1), w, b)",
        "mean over the sequence, then the op library's linear",
        size=f"x[{b}, {t}, {d}] -> K={k}",
        inputs=lambda rng: [_normal(rng, (b, t, d)), _normal(rng, (k, d), 1.0 / math.sqrt(d)), _normal(rng, (k,))],
        reference=lambda args: _meanpool_linear_numpy(*_f64(args)),
        kind="bytes",
        work=lambda args: _nbytes(args) + 4.0 * b * k,
        peers=[_numpy_peer(_meanpool_linear_numpy), _torch_peer(lambda x, w, bias: F.linear(x.mean(1), w, bias))],
    )


def natural_cases(quick: bool = False) -> list[Case]:
    """The natural formulations and their library rows (softmax's and layernorm's are in the main list)."""
    rows, lengths = (256, 1024) if quick else (4096, 1024)
    return [
        *_groupnorm_rows(*((1, 64, 16, 16) if quick else (8, 64, 56, 56))),
        *_dwsep_rows(*((1, 16, 28, 28, 32) if quick else (8, 64, 56, 56, 128))),
        *_rmsnorm_rows(*((1, 256, 1024) if quick else (4, 1024, 1024))),
        _natural(
            _softmax(rows, lengths), "softmax", "p = exp(x - max(...)); p = p / sum(p, ...) (the peers: softmax's)"
        ),
        _natural(
            _layernorm(rows, lengths),
            "layernorm",
            "mean, mean of squared deviations, (x - mu) / sqrt(var + eps) * gamma + beta (the peers: layernorm's)",
        ),
        *_logsumexp_rows(rows, lengths),
        *_cross_entropy_rows(*((64, 8000) if quick else (256, 32000))),
        *_causal_attention_rows(*((1, 4, 64, 64) if quick else (4, 12, 256, 64))),
        *_gru_rows(*((16, 128, 128) if quick else (64, 512, 512))),
        *_rotary_rows(*((1, 4, 128, 64) if quick else (2, 16, 1024, 64))),
        *_batchnorm_rows(*((1, 64, 16, 16) if quick else (8, 64, 56, 56))),
        *_meanpool_linear_rows(*((4, 64, 256, 256) if quick else (16, 512, 768, 768))),
    ]


# --------------------------------------------------------------------------- lists


def cases(quick: bool = False) -> list[Case]:
    """Every workload; quick: the same workloads at small sizes, for a smoke run."""
    if quick:
        return [
            _sgemm(256, 256, 256),
            _sgemm(384, 384, 384),
            _sgemm(64, 3072, 768),
            _bmm(12, 64, 64, 64),
            _gelu(1 << 20),
            _softmax(256, 1024),
            _layernorm(256, 1024),
            _conv(1, 16, 28, 28, 16),
            _attention(32),
            _mlp(16),
            _gpt2_prefill(32),
            _gpt2_decode(32),
            *natural_cases(quick=True),
            *onnx_cases(quick=True),
        ]
    return [
        _sgemm(1024, 1024, 1024),
        _sgemm(2048, 2048, 2048),
        _sgemm(256, 3072, 768),
        _bmm(12, 256, 64, 256),
        _gelu(16 << 20),
        _softmax(4096, 1024),
        _layernorm(4096, 1024),
        _conv(8, 64, 56, 56, 64),
        _attention(256),
        _mlp(256),
        _gpt2_prefill(256),
        _gpt2_decode(256),
        *natural_cases(),
        *onnx_cases(),
    ]
