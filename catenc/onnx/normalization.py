"""Normalisations: BatchNormalization, LayerNormalization, RMSNormalization, GroupNormalization,
InstanceNormalization, LRN, Softmax, LogSoftmax, Hardmax, LpNormalization, MeanVarianceNormalization.

The op library's composites are called where their params say exactly what the node does
(`layernorm` over the last axis, `softmax` and `log_softmax` over the last axis, `groupnorm`);
the other forms are written out with array-form reductions.
"""

from __future__ import annotations

import numpy as np

from catenc.onnx.builder import Index, Node, Size, affine, call, cast, guarded, reduce, shape_list, where
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.reduce import reduction
from catenc.onnx.registry import OnnxNode, axis_of, converter, need_float
from catenc.onnx.shape import reshaped, shape_text
from catenc.onnx.values import NUMPY, Shape, Value, dims, known_value
from catenc.symbolic import const, product


def _no_extra_outputs(node: OnnxNode, what: str) -> None:
    if any(node.outputs[1:]):
        raise Unsupported(what)


def _channel_index(x: Value, emit: Emitter) -> list[Index]:
    ix = emit.index_names()
    return [ix(name) for name in ["n", "c"] + [f"i{d}" for d in range(2, x.rank)]]


def _per_channel(node: OnnxNode, v: Value, channels) -> None:
    if v.shape != (channels,):
        raise ModelError(f"a per-channel input has shape {shape_text(v.shape)}, not [{channels}]")


@converter("BatchNormalization")
def batch_norm(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, scale, bias, mean, var = (node.need(i) for i in range(5))
    need_float(node, x)
    if x.rank < 2:
        raise ModelError(f"the input has rank {x.rank}; BatchNormalization needs (N, C, ...)")
    for v in (scale, bias, mean, var):
        _per_channel(node, v, x.shape[1])
    eps = float(node.attr("epsilon", 1e-5))
    if node.attr("training_mode", 0) and node.opset >= 14:
        return _batch_norm_training(node, emit, x, scale, bias, mean, var, eps)
    _no_extra_outputs(node, "the running-statistics outputs of BatchNormalization (training only)")
    if all(v.is_known for v in (scale, bias, mean, var)):
        # folded per-channel affine (computed in f64): y = x * a + b, which fuses into a producer's epilogue
        a64 = scale.known.astype(np.float64) / np.sqrt(var.known.astype(np.float64) + eps)
        b64 = bias.known.astype(np.float64) - mean.known.astype(np.float64) * a64
        a, b = (known_value(v.astype(NUMPY[x.dtype]), x.dtype) for v in (a64, b64))
        emit.hint_like(a, scale, "_folded")
        emit.hint_like(b, bias, "_folded")
        xt, at_, bt_ = emit.ref(x), emit.ref(a), emit.ref(b)
        index = _channel_index(x, emit)
        c = index[1]
        expr = xt[tuple(index)] * at_[c] + bt_[c]
    else:
        xt, st, bt, mt, vt = (emit.ref(v) for v in (x, scale, bias, mean, var))
        index = _channel_index(x, emit)
        c = index[1]
        expr = (xt[tuple(index)] - mt[c]) * call("rsqrt", vt[c] + eps) * st[c] + bt[c]
    return [emit.out_index(index, expr, x.dtype, x.shape)]


def _batch_norm_training(
    node: OnnxNode, emit: Emitter, x: Value, scale: Value, bias: Value, mean: Value, var: Value, eps: float
) -> list[Value]:
    """training_mode=1: normalised by the batch's statistics (biased variance), and the running
    mean and variance updated with `momentum` (outputs 1 and 2)."""
    momentum = float(node.attr("momentum", 0.9))
    xt, st, bt, mt, vt = (emit.ref(v) for v in (x, scale, bias, mean, var))
    axes = tuple(d for d in range(x.rank) if d != 1)
    kept = tuple(const(1) if d != 1 else x.shape[1] for d in range(x.rank))
    mu = emit.ref(emit.intermediate(reduction("mean", xt, axes, True, kept), "mean"))
    centred = emit.ref(emit.intermediate(xt - mu, "centred"))
    batch_var = emit.ref(emit.intermediate(reduction("mean", centred * centred, axes, True, kept), "var"))
    index = _channel_index(x, emit)
    c = index[1]
    at = tuple(0 if d != 1 else c for d in range(x.rank))
    expr = centred[tuple(index)] * call("rsqrt", batch_var[at] + eps) * st[c] + bt[c]
    y = emit.out_index(index, expr, x.dtype, x.shape)
    channels = (x.shape[1],)
    results = [y]
    for k, (running, batch) in enumerate(((mt, mu), (vt, batch_var)), 1):
        if _wanted(node, k):
            update = running * momentum + _reshape(batch, channels) * (1.0 - momentum)
            results.append(emit.out(update, x.dtype, channels, k))
        elif k < len(node.outputs):
            results.append(y)  # an omitted output: never read
    return results


def _stats_dtype(node: OnnxNode, x: Value) -> str:
    """The type the statistics are computed in (stash_type: 1 = f32, the default)."""
    stash = int(node.attr("stash_type", 1))
    if stash == 1:
        return "f32" if x.dtype in ("f16", "bf16") else x.dtype
    if stash not in (10, 11, 16):
        raise Unsupported(f"stash_type={stash}")
    return {10: "f16", 11: "f64", 16: "bf16"}[stash]


@converter("LayerNormalization", "RMSNormalization")
def layer_norm(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, scale, bias = node.need(0), node.need(1), node.input(2)
    need_float(node, x)
    axis = axis_of(node.attr("axis", -1), x.rank)
    eps = float(node.attr("epsilon", 1e-5))
    axes = tuple(range(axis, x.rank))
    kept = x.shape[:axis] + (const(1),) * len(axes)
    stats = _stats_dtype(node, x)
    rms = node.op == "RMSNormalization"
    plain = stats == x.dtype and axis == x.rank - 1 and not any(node.outputs[1:])
    if plain and not rms and bias is not None and scale.shape == bias.shape == (x.shape[-1],):
        norm = call("layernorm", emit.ref(x), emit.ref(scale), emit.ref(bias), eps=eps)
        return [emit.out(norm, x.dtype, x.shape)]
    if plain and rms and scale.shape == (x.shape[-1],):
        return [emit.out(call("rmsnorm", emit.ref(x), emit.ref(scale), eps=eps), x.dtype, x.shape)]
    xt = emit.ref(x)
    if stats != x.dtype:
        xt = emit.ref(emit.intermediate(cast(xt, stats), "stash"))
    if rms:
        inv = emit.intermediate(call("rsqrt", reduction("mean", xt * xt, axes, True, kept) + eps), "inv_rms")
        normed = xt * emit.ref(inv)
        mu = None
    else:
        mean = reduction("mean", xt, axes, True, kept)
        mu = emit.result(mean, 1) if _wanted(node, 1) else emit.intermediate(mean, "mean")
        d = emit.ref(emit.intermediate(xt - emit.ref(mu), "centred"))
        inv_std = call("rsqrt", reduction("mean", d * d, axes, True, kept) + eps)
        inv = emit.result(inv_std, 2) if _wanted(node, 2) else emit.intermediate(inv_std, "inv_std")
        normed = d * emit.ref(inv)
    if stats != x.dtype:
        normed = cast(normed, x.dtype)
    expr = normed * emit.ref(scale)
    y = emit.out(expr + emit.ref(bias) if bias is not None else expr, x.dtype, x.shape, 0)
    if rms:
        return [y]
    return [y, mu, inv][: max(1, len(node.outputs))]


@converter("LRN")
def local_response_norm(node: OnnxNode, emit: Emitter) -> list[Value]:
    """y = x / (bias + alpha / size * sum of x^2 over the channels c - (size-1)//2 .. c + size//2
    that exist)^beta (AlexNet, GoogLeNet): a guarded sum over a window of `size` channels."""
    x = node.need(0)
    need_float(node, x)
    if x.rank < 3:
        raise ModelError(f"the input has rank {x.rank}; LRN needs (N, C, spatial...)")
    size = node.attr("size")
    if size is None or int(size) < 1:
        raise ModelError(f"size must be a positive number of channels, not {size}")
    size = int(size)
    alpha, beta, bias = (float(node.attr(name, d)) for name, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    xt = emit.ref(x)
    index = _channel_index(x, emit)
    c, r, first = index[1], emit.index_names()("r"), (size - 1) // 2
    channel = affine([(1, c), (1, r)], -first)
    guards = [affine([(1, c), (1, r)]) >= first, affine([(1, c), (1, r)]) < Size(x.shape[1] + first)]
    near = xt[(index[0], channel, *index[2:])]
    squares = reduce("sum", [(r, size)], guarded(guards, near * near, 0.0))
    scale = call("pow", bias + (alpha / size) * squares, beta)
    return [emit.out_index(index, xt[tuple(index)] / scale, x.dtype, x.shape)]


def _wanted(node: OnnxNode, k: int) -> bool:
    return len(node.outputs) > k and bool(node.outputs[k])


@converter("GroupNormalization", "InstanceNormalization")
def group_norm(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, scale, bias = node.need(0), node.need(1), node.need(2)
    need_float(node, x)
    if x.rank < 3:
        raise ModelError(f"the input has rank {x.rank}; {node.op} needs (N, C, spatial...)")
    channels = x.shape[1]
    if not channels.is_const:
        raise Unsupported(f"a dynamic number of channels ({channels})")
    c = channels.value
    groups = c if node.op == "InstanceNormalization" else int(node.attr("num_groups", 0))
    if groups < 1 or c % groups:
        raise ModelError(f"{c} channels do not split into num_groups={groups}")
    eps = float(node.attr("epsilon", 1e-5))
    if _stats_dtype(node, x) != x.dtype:
        raise Unsupported(f"stash_type={node.attr('stash_type', 1)} for {x.dtype} inputs")
    # opset 18 takes a scale and bias per group, opset 21 per channel: expand the former
    scale, bias = (_channels(emit, v, c, groups, x.dtype) for v in (scale, bias))
    flat = (x.shape[0], channels, product(x.shape[2:]))
    x3 = reshaped(x, flat, emit) if x.rank != 3 else x
    norm = call("groupnorm", emit.ref(x3), emit.ref(scale), emit.ref(bias), groups=groups, eps=eps, shape=flat)
    if x.rank == 3:
        return [emit.out(norm, x.dtype, x.shape)]
    y = emit.intermediate(norm, "flat")
    return [emit.out(_reshape(emit.ref(y), x.shape), x.dtype, x.shape)]


def _channels(emit: Emitter, v: Value, channels: int, groups: int, dtype: str) -> Value:
    """A per-group or per-channel vector as a per-channel one."""
    size = v.shape[0] if v.rank == 1 else None
    if size == const(channels):
        return v
    if size != const(groups):
        raise ModelError(f"scale and bias have shape {shape_text(v.shape)}, not [{groups}] or [{channels}]")
    each = channels // groups
    if v.is_known:
        return known_value(np.repeat(v.known, each), dtype)
    per_group = _reshape(emit.ref(v), dims((groups, 1)))
    repeated = call("expand", per_group, shape_list(dims((groups, each))), dtype=dtype, shape=dims((groups, each)))
    return emit.intermediate(_reshape(repeated, dims((channels,))), "channels")


def _coerced(node: OnnxNode, x: Value, emit: Emitter) -> tuple[Value, int]:
    """Before opset 13 the softmax-like ops work on x coerced to 2-D at `axis` (default 1): the
    value worked on and its axis."""
    axis = axis_of(node.attr("axis", 1), x.rank)
    if axis == x.rank - 1:
        return x, axis
    return reshaped(x, (product(x.shape[:axis]), product(x.shape[axis:])), emit), 1


def _not_scalar(x: Value) -> Value:
    if x.rank == 0:
        raise ModelError("the input is a scalar")
    return x


@converter("Softmax", "LogSoftmax", since=13)
def softmax(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = _not_scalar(need_float(node, node.need(0)))
    return [_softmax(node, emit, x, x, axis_of(node.attr("axis", -1), x.rank))]


@converter("Softmax", "LogSoftmax")
def softmax_coerced(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = _not_scalar(need_float(node, node.need(0)))
    return [_softmax(node, emit, x, *_coerced(node, x, emit))]


def _softmax(node: OnnxNode, emit: Emitter, x: Value, v: Value, axis: int) -> Value:
    """Softmax or LogSoftmax of v (x, or x coerced to 2-D) over `axis`, as x's shape."""
    fn = "softmax" if node.op == "Softmax" else "log_softmax"
    last = axis == v.rank - 1
    if last and v is x:
        return emit.out(call(fn, emit.ref(x)), x.dtype, x.shape)
    if last:
        y = emit.intermediate(call(fn, emit.ref(v)), "2d")
    else:
        vt = emit.ref(v)
        kept = v.shape[:axis] + (const(1),) + v.shape[axis + 1 :]
        m = emit.ref(emit.intermediate(reduction("max", vt, axis, True, kept), "max"))
        if fn == "softmax":
            e = emit.ref(emit.intermediate(call("exp", vt - m), "exp"))
            expr = e / reduction("sum", e, axis, True, kept)
        else:
            s = emit.ref(emit.intermediate(vt - m, "shifted"))
            expr = s - call("log", reduction("sum", call("exp", s), axis, True, kept))
        if v is x:
            return emit.out(expr, x.dtype, x.shape)
        y = emit.intermediate(expr, "2d")
    return emit.out(_reshape(emit.ref(y), x.shape), x.dtype, x.shape)


@converter("Hardmax", since=13)
def hardmax(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = _not_scalar(node.need(0))
    return [_hardmax(emit, x, x, axis_of(node.attr("axis", -1), x.rank))]


@converter("Hardmax")
def hardmax_coerced(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = _not_scalar(node.need(0))
    return [_hardmax(emit, x, *_coerced(node, x, emit))]


def _hardmax(emit: Emitter, x: Value, v: Value, axis: int) -> Value:
    """1 at the first maximum of v (x, or x coerced to 2-D) along `axis`, else 0, as x's shape."""
    vt = emit.ref(v)
    index = emit.index_names().numbered(v.rank)
    kept = v.shape[:axis] + (const(1),) + v.shape[axis + 1 :]
    am = emit.ref(emit.intermediate(reduction("argmax", vt, axis, True, kept, "i64"), "argmax"))
    at = [0 if d == axis else i for d, i in enumerate(index)]
    one, zero = (1.0, 0.0) if x.is_float else (1, 0)
    expr = where(index[axis].eq(am[tuple(at)]), one, zero)
    if v is x:
        return emit.out_index(index, expr, x.dtype, x.shape)
    value = emit.index_temp(index, expr, x.dtype, v.shape, "2d")
    return emit.out(_reshape(emit.ref(value), x.shape), x.dtype, x.shape)


def _reshape(v: Node, shape: Shape) -> Node:
    return call("reshape", v, shape_list(shape), dtype=v.dtype, shape=shape)


@converter("LpNormalization")
def lp_normalization(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    need_float(node, x)
    axis = axis_of(node.attr("axis", -1), x.rank)
    p = int(node.attr("p", 2))
    xt = emit.ref(x)
    kept = x.shape[:axis] + (const(1),) + x.shape[axis + 1 :]
    if p == 1:
        norm = reduction("sum", call("abs", xt), axis, True, kept)
    elif p == 2:
        norm = call("sqrt", reduction("sum", xt * xt, axis, True, kept))
    else:
        raise ModelError(f"p={p} (LpNormalization takes 1 or 2)")
    n = emit.ref(emit.intermediate(norm, "norm"))
    # a zero norm gives 0, not 0/0 (the reference's choice)
    return [emit.out(where(n.eq(0.0), 0.0, xt / n), x.dtype, x.shape)]


@converter("MeanVarianceNormalization")
def mean_variance_normalization(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    need_float(node, x)
    axes = tuple(sorted({axis_of(a, x.rank) for a in node.attr("axes", [0, 2, 3])}))
    xt = emit.ref(x)
    kept = tuple(const(1) if i in axes else d for i, d in enumerate(x.shape))
    mu = emit.ref(emit.intermediate(reduction("mean", xt, axes, True, kept), "mean"))
    std = emit.ref(emit.intermediate(call("sqrt", reduction("mean", xt * xt, axes, True, kept) - mu * mu), "std"))
    return [emit.out((xt - mu) / (std + 1e-09), x.dtype, x.shape)]
