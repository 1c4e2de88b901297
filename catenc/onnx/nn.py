"""Convolution, pooling and resizing: Conv, ConvTranspose, MaxPool, AveragePool, LpPool and their
global forms, Resize and Upsample.

A convolution is one index-form statement, `y[n, k, oh, ow] = sum[c, r, s](where(in-bounds, x[...],
0.0) * w[k, c, r, s]) + b[k]`: the access pattern catenc's schedule recognises as a contraction
(a packed gemm with the guards evaluated while packing and the bias as its fused epilogue), for
any rank, asymmetric pads, strides and dilations. Grouped convolutions compute [N, G, K/G, ...]
(a batched gemm per group) and reshape; a depthwise one (one input channel per group) reads its
channel directly, and is written as a sum of its taps (no reduction loop inside the row: the row
is a vector loop; MobileNetV2's 3x3 layers 1.6x faster at stride 1, 4x at stride 2 with -O3). The
integer convolutions of quantization.py are the same statement of 8-bit values, each factor cast
to i32 and the window padded with the input's zero point. Pooling is a guarded
`max` or `sum` over the window. Resizing is separable: per axis, a gather of each tap's input
positions (computed at import as onnx's reference computes them, antialiased too) times its weights, or one
affine read `x[..., i // 2]` where nearest sampling repeats each element.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from catenc.onnx.builder import (
    Group,
    Index,
    Node,
    Operand,
    Scaled,
    Size,
    affine,
    call,
    cast,
    guarded,
    lit,
    reduce,
    where,
)
from catenc.onnx.emitter import Emitter, IndexNames
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.reduce import reduction
from catenc.onnx.registry import OnnxNode, converter, need_float
from catenc.onnx.shape import reshaped, shape_text
from catenc.onnx.values import NUMPY, Shape, Value, dims, static
from catenc.symbolic import Expr, const, floordiv

UNROLL_TAPS = 25  # a depthwise kernel of up to this many taps (5x5) is written tap by tap


@dataclass(frozen=True)
class Window:
    """A sliding window over the spatial dims: kernel, strides, dilations, pads and output sizes."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]
    out: tuple[Expr, ...]


def _ints(node: OnnxNode, name: str, n: int, default: int) -> tuple[int, ...]:
    values = node.attr(name)
    if values is None:
        return (default,) * n
    if len(values) != n:
        raise ModelError(f"{name} has {len(values)} entries for {n} spatial dims")
    return tuple(int(v) for v in values)


def window(node: OnnxNode, x: Value, kernel: tuple[int, ...], ceil_mode: bool = False) -> Window:
    """The window of a convolution or pooling node over x's spatial dims (auto_pad, pads, ceil_mode)."""
    nd = len(kernel)
    strides, dilations = _ints(node, "strides", nd, 1), _ints(node, "dilations", nd, 1)
    if min(strides + dilations + kernel, default=1) < 1:
        raise ModelError("strides, dilations and kernel sizes must be positive")
    spatial = x.shape[2:]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "VALID"):
        begin, end = _explicit_pads(node, nd, auto_pad == "VALID")
        if min(begin + end, default=0) < 0:
            raise Unsupported(f"negative pads {list(begin + end)}")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if ceil_mode:
            raise ModelError(f"auto_pad={auto_pad} with ceil_mode=1")
        totals = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            if s == 1:
                totals.append(d * (k - 1))
            elif size.is_const:
                out = -(-size.value // s)
                totals.append(max(0, (out - 1) * s + d * (k - 1) + 1 - size.value))
            else:
                raise Unsupported(f"auto_pad={auto_pad} with stride {s} over a dynamic dimension {size}")
        begin, end = _same_pads(auto_pad, totals)
    else:
        raise ModelError(f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    out = []
    for size, k, s, d, b, e in zip(spatial, kernel, strides, dilations, begin, end, strict=True):
        span = size + (b + e - d * (k - 1) - 1)
        if not ceil_mode:
            o = floordiv(span, s) + 1
        elif size.is_const:
            o = -(-span.value // s) + 1
            if (o - 1) * s >= size.value + b:  # the last window must start inside the input or its front pad
                o -= 1
            o = const(o)
        else:
            raise Unsupported(f"ceil_mode=1 over a dynamic dimension {size}")
        if o.is_const and o.value < 1:
            raise ModelError(
                f"the window ({k} wide, dilation {d}) does not fit a padded input of size {span + d * (k - 1) + 1}"
            )
        out.append(o)
    return Window(kernel, strides, dilations, begin, end, tuple(out))


def _explicit_pads(node: OnnxNode, nd: int, valid: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The `pads` attribute as (begin, end) per spatial dim: none for auto_pad=VALID or when absent."""
    pads = None if valid else node.attr("pads")
    pads = [0] * (2 * nd) if pads is None else [int(p) for p in pads]
    if len(pads) != 2 * nd:
        raise ModelError(f"pads has {len(pads)} entries for {nd} spatial dims")
    return tuple(pads[:nd]), tuple(pads[nd:])


def _same_pads(auto_pad: str, totals: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """auto_pad=SAME_UPPER or SAME_LOWER: each total pad split in halves, the odd one at the end
    (UPPER) or the beginning (LOWER)."""
    smalls = [total // 2 for total in totals]
    if auto_pad == "SAME_UPPER":
        return tuple(smalls), tuple(t - small for t, small in zip(totals, smalls, strict=True))
    return tuple(t - small for t, small in zip(totals, smalls, strict=True)), tuple(smalls)


@dataclass(frozen=True)
class Access:
    """The spatial subscripts of a window read and the guards that keep it inside the input."""

    index: tuple[Node, ...]  # one subscript per spatial dim
    guards: tuple[Node, ...]
    reduce: tuple[tuple[Index, int], ...]  # the window indices `r < 3` (kernel dims of size 1 have none)


def forward_access(win: Window, spatial: Shape, outs: list[Index], taps: list[Index] | tuple[int, ...]) -> Access:
    """Input position o*stride + r*dilation - pad_begin per spatial dim, guarded where it can leave the
    input; the taps r are the window's indices, or one fixed tap (ints)."""
    index, guards, reduce = [], [], []
    for size, o, r, k, s, d, b, o_size in zip(
        spatial, outs, taps, win.kernel, win.strides, win.dilations, win.begin, win.out, strict=True
    ):
        if isinstance(r, int):
            terms, shift, last = [(s, o)], b - r * d, (o_size - 1) * s + r * d - b
        else:
            terms, shift, last = [(s, o)] + ([(d, r)] if k > 1 else []), b, (o_size - 1) * s + (k - 1) * d - b
            if k > 1:
                reduce.append((r, k))
        index.append(_not_alone(affine(terms, -shift), o, o_size != size))
        if shift > 0:
            guards.append(affine(terms) >= shift)
        if not (last.is_const and size.is_const and last.value < size.value):
            guards.append(affine(terms) < Size(size + shift))
    return Access(tuple(index), tuple(guards), tuple(reduce))


def _not_alone(subscript: Node, index: Index, differ: bool) -> Node:
    """An index alone in a subscript ranges over that whole axis (docs/language.md section 9): where
    the output's extent differs from the input's, `o + 0` reads the input at o without that claim."""
    return index + 0 if subscript is index and differ else subscript


def _names(nd: int, ix: IndexNames) -> tuple[list[Index], list[Index]]:
    """Indices of the output's spatial dims and of the window (oh, ow / r, s for 2-D)."""
    outs = {1: ["ol"], 2: ["oh", "ow"], 3: ["od", "oh", "ow"]}.get(nd, [f"o{i}" for i in range(nd)])
    taps = {1: ["r"], 2: ["r", "s"], 3: ["q", "r", "s"]}.get(nd, [f"r{i}" for i in range(nd)])
    return [ix(o) for o in outs], [ix(t) for t in taps]


def _static_dim(d: Expr, what: str) -> int:
    if not d.is_const:
        raise Unsupported(f"{what} must be known when the model is compiled (it is {d})")
    return d.value


def _kernel(node: OnnxNode, w: Value) -> tuple[int, ...]:
    kernel = tuple(_static_dim(d, "the kernel size") for d in w.shape[2:])
    given = node.attr("kernel_shape")
    if given is not None and tuple(int(k) for k in given) != kernel:
        raise ModelError(f"kernel_shape {list(given)} does not match the weight's {list(kernel)}")
    return kernel


# the expression of a convolution's output channel (an index expression), and its group g and
# channel j within it when the result is computed per group
ChannelExpr = Callable[[Node, Index | None, Index | None], Node]


def _grouped(
    emit: Emitter,
    expr_of: ChannelExpr,
    batch: Expr,
    groups: int,
    per_group: int,
    outs: list[Index],
    out: Shape,
    ix: IndexNames,
) -> Value:
    """A grouped result: [N, G, K/G, spatial...] computed by `expr_of(channel, g, j)` and reshaped to
    [N, K, ...]; `outs` are the batch index, then the spatial ones."""
    if groups == 1:
        k = ix("k")
        expr = expr_of(k, None, None)
        return emit.out_index([outs[0], k, *outs[1:]], expr, expr.dtype, (batch, const(per_group), *out))
    g, j = ix("g"), ix("j")
    t_shape = (batch, const(groups), const(per_group), *out)
    expr = expr_of(Scaled(g, per_group, factor_last=True) + j, g, j)
    t = emit.index_temp([outs[0], g, j, *outs[1:]], expr, expr.dtype, t_shape, "groups")
    return reshaped(t, (batch, const(groups * per_group), *out), emit)


@converter("Conv")
def conv(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    need_float(node, x)
    return [convolution(node, x, node.need(1), node.input(2), emit)]


def is_depthwise(node: OnnxNode, x: Value, w: Value) -> bool:
    """Whether the convolution reads one input channel per group (the weight's channels are 1)."""
    return int(node.attr("group", 1)) > 1 and w.rank == x.rank and w.shape[1] == const(1)


def _product(read: Node, weight: Node, accumulator: str | None) -> Node:
    """read * weight; with an accumulator type, each factor cast to it (`cast(x, i32) * cast(w, i32)`)."""
    if accumulator is None:
        return read * weight
    return cast(read, accumulator) * cast(weight, accumulator)


def convolution(
    node: OnnxNode,
    x: Value,
    w: Value,
    b: Value | None,
    emit: Emitter,
    pad: Node | float = 0.0,
    accumulator: str | None = None,
) -> Value:
    """The convolution statement of x, w and the bias b (the module's docstring) as the node's output;
    an integer one (quantization.py) reads `pad` outside the input and sums in `accumulator`."""
    if w.rank != x.rank:
        raise ModelError(f"the weight has rank {w.rank}, the input {x.rank}")
    kernel = _kernel(node, w)
    groups = int(node.attr("group", 1))
    c_in = _static_dim(x.shape[1], "the input channels")
    k_out, c_group = _static_dim(w.shape[0], "the output channels"), _static_dim(w.shape[1], "the weight's channels")
    if groups < 1 or c_in != c_group * groups or k_out % groups:
        raise ModelError(f"{c_in} input channels, weight {k_out}x{c_group}, group={groups} do not agree")
    win = window(node, x, kernel)
    xt, wt = emit.ref(x), emit.ref(w)
    bt = emit.ref(b) if b is not None else None
    ix = emit.index_names()
    n = ix("n")
    outs, taps = _names(len(kernel), ix)
    access = forward_access(win, x.shape[2:], outs, taps)
    c = ix("c")
    per_group = k_out // groups
    depthwise = is_depthwise(node, x, w)
    wtaps = [taps[i] if k > 1 else 0 for i, k in enumerate(kernel)]

    def expr_of(channel: Node, g: Index | None, j: Index | None) -> Node:
        if depthwise:  # one input channel per group: read it directly, no grouped layout
            channel_in, ranges, wc = (channel if per_group == 1 else channel // per_group), access.reduce, 0
        elif c_group > 1:
            channel_in = Scaled(g, c_group, factor_last=True) + c if g is not None else c
            ranges, wc = ((c, c_group), *access.reduce), c
        else:
            channel_in, ranges, wc = 0, access.reduce, 0
        read = guarded(access.guards, xt[(n, channel_in, *access.index)], pad)
        total = reduce("sum", ranges, _product(read, wt[(channel, wc, *wtaps)], accumulator))
        return total + bt[channel] if bt is not None else total

    if b is not None and b.shape != (const(k_out),):
        raise ModelError(f"the bias has shape {shape_text(b.shape)}, not [{k_out}]")
    if depthwise:
        k = ix("k")
        shape = (x.shape[0], const(k_out), *win.out)
        if math.prod(kernel) <= UNROLL_TAPS:
            # the taps written out: a vector loop along the output row with no reduction inside
            channel_in = k if per_group == 1 else k // per_group
            products = []
            for tap in itertools.product(*(range(size) for size in kernel)):
                at = forward_access(win, x.shape[2:], outs, tap)
                read = guarded(at.guards, xt[(n, channel_in, *at.index)], pad)
                products.append(_product(read, wt[(k, 0, *tap)], accumulator))
            expr = functools.reduce(operator.add, products)
            expr = expr + bt[k] if bt is not None else expr
        else:
            expr = expr_of(k, None, None)
        return emit.out_index([n, k, *outs], expr, accumulator or x.dtype, shape)
    return _grouped(emit, expr_of, x.shape[0], groups, per_group, [n, *outs], win.out, ix)


@converter("ConvTranspose")
def conv_transpose(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, w, b = node.need(0), node.need(1), node.input(2)
    need_float(node, x)
    if w.rank != x.rank:
        raise ModelError(f"the weight has rank {w.rank}, the input {x.rank}")
    kernel = _kernel(node, w)
    nd = len(kernel)
    groups = int(node.attr("group", 1))
    c_in = _static_dim(x.shape[1], "the input channels")
    per_group = _static_dim(w.shape[1], "the weight's output channels")
    if groups < 1 or c_in % groups or _static_dim(w.shape[0], "the weight's input channels") != c_in:
        raise ModelError(f"{c_in} input channels, weight {list(w.shape)}, group={groups} do not agree")
    c_group = c_in // groups
    strides, dilations = _ints(node, "strides", nd, 1), _ints(node, "dilations", nd, 1)
    extra = _ints(node, "output_padding", nd, 0)
    spatial = x.shape[2:]
    full = [
        s * (size - 1) + e + (k - 1) * d + 1 for size, s, e, k, d in zip(spatial, strides, extra, kernel, dilations)
    ]
    requested = node.attr("output_shape")
    if requested is not None:
        requested = [int(v) for v in requested][-nd:]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if node.attr("pads") is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = requested or [size * s for size, s in zip(spatial, strides)]
        totals = [f - t for f, t in zip(full, dims(target))]
        if not all(total.is_const for total in totals):
            raise Unsupported(f"auto_pad={auto_pad} over a dynamic dimension")
        begin, end = _same_pads(auto_pad, [total.value for total in totals])
    else:
        begin, end = _explicit_pads(node, nd, auto_pad == "VALID")
    out = tuple(dims(requested)) if requested is not None else tuple(f - bb - e for f, bb, e in zip(full, begin, end))
    if any(o.is_const and o.value < 1 for o in out):
        raise ModelError(f"the output would have size {shape_text(out)}")
    xt, wt = emit.ref(x), emit.ref(w)
    bt = emit.ref(b) if b is not None else None
    ix = emit.index_names()
    n = ix("n")
    outs, taps = _names(nd, ix)
    c = ix("c")
    index: list[Node] = []
    guards: list[Node] = []
    ranges = [(c, c_group)] if c_group > 1 else []
    for size, o, r, k, s, d, bb, o_size in zip(spatial, outs, taps, kernel, strides, dilations, begin, out):
        pos = affine([(1, o)] + ([(-d, r)] if k > 1 else []), bb)
        if k > 1:
            ranges.append((r, k))
        if s == 1:
            index.append(_not_alone(pos, o, o_size != size))
            guards += [pos >= 0, pos < Size(size)]
        else:  # the prover does not derive a // s >= 0 from a >= 0: say it of the quotient
            q = Group(pos) // s
            index.append(q)
            guards += [(Group(pos) % s).eq(0), q >= 0, q < Size(size)]
    wtaps = [taps[i] if k > 1 else 0 for i, k in enumerate(kernel)]

    def expr_of(channel: Node, g: Index | None, j: Index | None) -> Node:
        channel_in: Operand = c if c_group > 1 else 0
        if g is not None:
            first = g if c_group == 1 else Scaled(g, c_group, factor_last=True)
            channel_in = first + c if c_group > 1 else first
        read = guarded(guards, xt[(n, channel_in, *index)], 0.0)
        total = reduce("sum", ranges, read * wt[(channel_in, j if j is not None else channel, *wtaps)])
        return total + bt[channel] if bt is not None else total

    if b is not None and b.shape != (const(groups * per_group),):
        raise ModelError(f"the bias has shape {shape_text(b.shape)}, not [{groups * per_group}]")
    return [_grouped(emit, expr_of, x.shape[0], groups, per_group, [n, *outs], out, ix)]


def _pool_setup(node: OnnxNode, emit: Emitter, x: Value) -> tuple[Window, Access, list[Index], Node]:
    """The window, its guarded access, the output's indices (n, c, spatial...) and x of a pooling node."""
    if x.rank < 3:
        raise ModelError(f"the input has rank {x.rank}; {node.op} needs (N, C, spatial...)")
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise ModelError("kernel_shape is required")
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != x.rank - 2:
        raise ModelError(f"kernel_shape has {len(kernel)} entries for {x.rank - 2} spatial dims")
    win = window(node, x, kernel, bool(node.attr("ceil_mode", 0)))
    xt = emit.ref(x)
    ix = emit.index_names()
    n, c = ix("n"), ix("c")
    outs, taps = _names(len(kernel), ix)
    return win, forward_access(win, x.shape[2:], outs, taps), [n, c, *outs], xt


@converter("MaxPool")
def max_pool(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.dtype == "bool":
        raise Unsupported("input of type bool")
    win, access, outs, xt = _pool_setup(node, emit, x)
    low = lit(-np.inf if x.is_float else np.iinfo(NUMPY[x.dtype]).min, x.dtype)
    at = xt[(*outs[:2], *access.index)]
    shape = (x.shape[0], x.shape[1], *win.out)
    y = emit.out_index(outs, reduce("max", access.reduce, guarded(access.guards, at, low)), x.dtype, shape)
    if len(node.outputs) < 2 or not node.outputs[1]:
        return [y]
    # Indices: the position of the first maximum of each window in the flattened input (row-major,
    # or with storage_order=1 the spatial dims column-major); the smallest such position is the
    # first in the window's order
    dims = [x.shape[0], x.shape[1], *x.shape[2:]]
    if static(tuple(dims)) is None:
        raise Unsupported("the Indices output of MaxPool over a dynamic shape")
    sizes = static(tuple(dims))
    flat: Node = outs[0] * sizes[1] + outs[1]
    spatial = list(zip(access.index, sizes[2:]))
    if node.attr("storage_order", 0):
        terms: list[Node] = [Group(flat) * int(np.prod(sizes[2:]))]
        stride = 1
        for index, size in spatial:
            terms.append(Group(index) * stride if stride > 1 else Group(index))
            stride *= size
        flat = functools.reduce(operator.add, terms)
    else:
        for index, size in spatial:
            flat = Group(flat) * size + index
    beyond = int(np.prod(sizes))
    found = where(at.eq(emit.ref(y)[tuple(outs)]), flat, beyond)
    indices = reduce("min", access.reduce, guarded(access.guards, found, beyond))
    return [y, emit.out_index(outs, indices, "i64", shape, 1)]


def _counts(win: Window, spatial: Shape, include_pad: bool) -> np.ndarray | None:
    """The number of input positions each window covers (inside the input, or the padded input
    where `include_pad`), as an array over the output positions; None where a dim is dynamic."""
    sizes = static(spatial)
    out = static(win.out)
    if sizes is None or out is None:
        return None
    total = np.ones((), np.int64)
    for size, o_size, k, s, d, b, e in zip(sizes, out, win.kernel, win.strides, win.dilations, win.begin, win.end):
        lo, hi = (-b, size + e) if include_pad else (0, size)
        pos = np.arange(o_size)[:, None] * s + np.arange(k)[None, :] * d - b
        count = ((pos >= lo) & (pos < hi)).sum(axis=1)
        total = np.multiply.outer(total, count)
    return total


def _lp_norm(x: Node, p: float, total_of: Callable[[Node], Node]) -> Node:
    """The p-norm (p of an LpPool) of x's terms summed by `total_of`: abs for p=1, squares and sqrt for p=2."""
    if p == 1.0:
        return total_of(call("abs", x))
    if p == 2.0:
        return call("sqrt", total_of(x * x))
    return call("pow", total_of(call("pow", call("abs", x), p)), 1.0 / p)


@converter("AveragePool", "LpPool")
def sum_pool(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    need_float(node, x)
    win, access, outs, xt = _pool_setup(node, emit, x)
    at = xt[(*outs[:2], *access.index)]
    shape = (x.shape[0], x.shape[1], *win.out)

    def total_of(term: Node) -> Node:
        return reduce("sum", access.reduce, guarded(access.guards, term, 0.0))

    if node.op == "LpPool":
        return [emit.out_index(outs, _lp_norm(at, float(node.attr("p", 2)), total_of), x.dtype, shape)]
    include_pad = bool(node.attr("count_include_pad", 0))
    counts = _counts(win, x.shape[2:], include_pad)
    if counts is None:
        # without ceil_mode every window lies inside the padded input: whole when pads count or are none
        if node.attr("ceil_mode", 0) or not (include_pad or not any(win.begin + win.end)):
            raise Unsupported("average pooling that leaves out pads or uses ceil_mode over dynamic spatial dims")
        divisor = lit(float(np.prod(win.kernel)), x.dtype)
    elif counts.min() == counts.max():
        divisor = lit(float(counts.min()), x.dtype)
    else:
        divisor = emit.constant_ref(counts.astype(NUMPY[x.dtype]), x.dtype, "counts")[tuple(outs[2:])]
    return [emit.out_index(outs, total_of(at) / divisor, x.dtype, shape)]


@converter("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    if x.rank < 3:
        raise ModelError(f"the input has rank {x.rank}; {node.op} needs (N, C, spatial...)")
    if node.op != "GlobalMaxPool":
        need_float(node, x)
    axes = tuple(range(2, x.rank))
    xt = emit.ref(x)
    shape = (*x.shape[:2], *(const(1) for _ in axes))
    if node.op == "GlobalLpPool":
        expr = _lp_norm(xt, float(node.attr("p", 2)), lambda term: reduction("sum", term, axes, True, shape))
    else:
        expr = reduction("mean" if node.op == "GlobalAveragePool" else "max", xt, axes, True, shape)
    return [emit.out(expr, x.dtype, shape)]


def _source_coordinates(mode: str, out: int, size: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """Where each output position samples the input (Resize's coordinate_transformation_mode)."""
    y = np.arange(out, dtype=np.float64)
    wanted = scale * size
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if wanted == 1:
            return np.full(out, (hi - lo) * (size - 1) / 2) + lo * (size - 1)
        return y * (hi - lo) * (size - 1) / (wanted - 1) + lo * (size - 1)
    if mode == "align_corners":
        return np.zeros(out) if wanted == 1 else y * (size - 1) / (wanted - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "pytorch_half_pixel":
        return np.full(out, -0.5) if wanted == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        return size / 2 * (1 - out / wanted) + (y + 0.5) / scale - 0.5
    raise Unsupported(f"coordinate_transformation_mode='{mode}'")


def _taps(node: OnnxNode, mode: str, coords: np.ndarray, size: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The input positions (clamped, [O, n]) and weights ([O, n]) of each output position, as onnx's
    reference computes them (an even kernel of n taps around each source coordinate)."""
    base = np.floor(coords)
    ratio = np.where(coords == base, 1.0, coords - base)
    if node.attr("antialias", 0) and mode != "nearest":
        weights = _antialiased(node, mode, ratio, min(scale, 1.0))
    elif mode == "nearest":
        rule = node.attr("nearest_mode", "round_prefer_floor")
        rules = {
            "round_prefer_floor": lambda r: r > 0.5,
            "round_prefer_ceil": lambda r: r >= 0.5,
            "floor": lambda r: np.zeros_like(r, bool),
            "ceil": lambda r: np.ones_like(r, bool),
        }
        if rule not in rules:
            raise ModelError(f"nearest_mode='{rule}'")
        upper = np.where(ratio == 1.0, True, rules[rule](ratio))
        weights = np.stack([~upper, upper], axis=1).astype(np.float64)
    elif mode == "linear":
        weights = np.stack([1 - ratio, ratio], axis=1)
    elif mode == "cubic":
        weights = _cubic(node, np.stack([ratio + 1, ratio, 1 - ratio, 2 - ratio], axis=1))
    else:
        raise Unsupported(f"mode='{mode}'")
    n = weights.shape[1]
    padded = coords + n // 2
    floor = np.floor(padded)
    start = floor + np.where(padded == floor, -(n // 2), -(n // 2) + 1)
    positions = start[:, None] + np.arange(n)[None, :] - n // 2
    if node.attr("exclude_outside", 0):
        weights = np.where((positions < 0) | (positions >= size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(positions, 0, size - 1).astype(np.int64), weights


def _antialiased(node: OnnxNode, mode: str, ratio: np.ndarray, scale: float) -> np.ndarray:
    """Linear or cubic weights widened by 1/scale when downsampling (antialias=1), normalised."""
    reach = 1 if mode == "linear" else 2
    first = int(np.floor(-reach / scale) + 1)
    t = np.abs((np.arange(first, 2 - first)[None, :] - ratio[:, None]) * scale)
    weights = np.clip(1 - t, 0, 1) if mode == "linear" else _cubic(node, t)
    return weights / weights.sum(axis=1, keepdims=True)


def _cubic(node: OnnxNode, t: np.ndarray) -> np.ndarray:
    """The cubic convolution kernel (coefficient cubic_coeff_a) at distances t >= 0."""
    a = float(node.attr("cubic_coeff_a", -0.75))
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _resize_request(node: OnnxNode, x: Value) -> tuple[list[int], list[int], list[float]]:
    """The axes resized, their output sizes and scales (from `scales` or `sizes`, known at import)."""
    sizes = static(x.shape)
    if sizes is None:
        raise Unsupported("resizing a tensor of dynamic shape")
    given = node.input(2)
    if given is not None and given.shape != (const(0),):
        scales, wanted = known_numbers(given, f"the scales ({node.label(2)})"), None
    else:
        scales, wanted = None, [int(v) for v in known_numbers(node.input(3), f"the sizes ({node.label(3)})")]
    axes = [a % x.rank for a in node.attr("axes", range(x.rank))]
    if len(scales or wanted) != len(axes):
        raise ModelError(f"{len(scales or wanted)} scales or sizes for {len(axes)} axes")
    if wanted is not None:
        scales = [w / sizes[a] for w, a in zip(wanted, axes)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            scale = min(scales) if policy == "not_larger" else max(scales)
            scales = [scale] * len(axes)
            wanted = [int(scale * sizes[a] + 0.5) for a in axes]
    else:
        wanted = [int(s * sizes[a]) for s, a in zip(scales, axes)]
    return axes, wanted, [float(s) for s in scales]


def known_numbers(value: Value | None, what: str) -> list[float]:
    """A known input of scales, sizes or a roi as floats; `what` names it and its input index."""
    if value is None:
        raise ModelError(f"{what} are required")
    if not value.is_known:
        raise Unsupported(f"{what} must be known when the model is compiled (they are computed at run time here)")
    return list(np.asarray(value.known, dtype=np.float64).reshape(-1))


@converter("Resize", "Upsample")
def resize(node: OnnxNode, emit: Emitter) -> list[Value]:
    x = node.need(0)
    mode = node.attr("mode", "nearest")
    if node.attr("antialias", 0) and mode == "nearest":
        raise ModelError("antialias=1 with mode='nearest'")
    coordinates = node.attr("coordinate_transformation_mode", "half_pixel")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode='{mode}'")
    if mode != "nearest" and not x.is_float:
        raise Unsupported(f"{mode} resizing of {x.dtype}")
    axes, wanted, scales = _resize_request(node, x)
    sizes = list(static(x.shape))
    crop = coordinates == "tf_crop_and_resize"
    roi = known_numbers(node.input(1), f"the roi ({node.label(1)})") if crop else [0.0] * len(axes) + [1.0] * len(axes)
    if len(roi) != 2 * len(axes):
        raise ModelError(f"the roi has {len(roi)} entries for {len(axes)} axes")
    plan, outside = [], {}
    for i, (axis, out, scale) in enumerate(zip(axes, wanted, scales)):
        if out == sizes[axis] and scale == 1.0 and roi[i] == 0.0 and roi[len(axes) + i] == 1.0:
            continue
        coords = _source_coordinates(coordinates, out, sizes[axis], scale, (roi[i], roi[len(axes) + i]))
        if crop and np.any((coords < 0) | (coords > sizes[axis] - 1)):
            outside[axis] = ((coords < 0) | (coords > sizes[axis] - 1)).reshape((out,) + (1,) * (x.rank - axis - 1))
        positions, weights = _taps(node, mode, coords, sizes[axis], scale)
        plan.append((axis, out, positions, weights))
    shape = list(x.shape)
    for axis, out, _, _ in plan:
        shape[axis] = const(out)
    shape = tuple(shape)
    if not plan:
        return [x]
    one_hot = all(np.all((w == 0) | (w == 1)) and np.all(w.sum(axis=1) == 1) for _, _, _, w in plan)
    if one_hot and not outside:
        picks = {axis: p[np.arange(out), np.argmax(w, axis=1)] for axis, out, p, w in plan}
        factors = {}
        for axis, pick in picks.items():
            for k in range(1, sizes[axis] + 1):
                if np.array_equal(pick, np.arange(len(pick)) // k):
                    factors[axis] = k
                    break
        if len(factors) == len(picks):  # every axis repeats its elements k times: one affine read
            names = emit.index_names().numbered(x.rank)
            read = [i // factors[d] if factors.get(d, 1) > 1 else i for d, i in enumerate(names)]
            return [emit.out_index(names, emit.ref(x)[tuple(read)], x.dtype, shape)]
        v = x
        for k, (axis, pick) in enumerate(picks.items()):
            step = v.shape[:axis] + (const(len(pick)),) + v.shape[axis + 1 :]
            index = emit.constant_ref(pick, "i64", "resize_index")
            v = _step(emit, _take(emit.ref(v), index, axis, step), step, k == len(picks) - 1)
        return [v]
    v = x
    for k, (axis, out, positions, weights) in enumerate(plan):
        step = v.shape[:axis] + (const(out),) + v.shape[axis + 1 :]
        terms = []
        for j in range(positions.shape[1]):
            if not np.any(weights[:, j]):
                continue
            w = weights[:, j].astype(NUMPY[x.dtype]).reshape((out,) + (1,) * (x.rank - axis - 1))
            at = emit.constant_ref(positions[:, j].copy(), "i64", "resize_index")
            terms.append(_take(emit.ref(v), at, axis, step) * emit.constant_ref(w, x.dtype, "resize_weight"))
        expr = functools.reduce(operator.add, terms)
        if axis in outside:  # tf_crop_and_resize: positions sampled outside the input take extrapolation_value
            fill = lit(float(node.attr("extrapolation_value", 0.0)), x.dtype)
            expr = where(emit.constant_ref(outside[axis], "bool", "resize_outside"), fill, expr)
        v = _step(emit, expr, step, k == len(plan) - 1)
    return [v]


def _take(v: Node, index: Node, axis: int, shape: Shape) -> Node:
    """`take(v, index, axis)`: v's elements at `index` along `axis`, of the given shape."""
    return call("take", v, index, axis, dtype=v.dtype, shape=shape)


def _step(emit: Emitter, expr: Node, shape: Shape, last: bool) -> Value:
    """One axis of a separable resize: the node's output after the last axis, else an intermediate."""
    return emit.result(expr, shape=shape) if last else emit.intermediate(expr, "axis", shape)
