"""Einsum and the Attention operator (opsets 23-25).

Einsum becomes the body's `einsum("bij,bjk->bik", a, b)` where it takes the equation (distinct
letters per operand, no broadcasting of an ellipsis); otherwise index form, which also reads
diagonals (`ii->i`). Attention calls ops/attention.toml's `attention` / `attention_masked` where
their params express the node exactly, and is written out otherwise: the scaled products, the
additive bias built from the mask, causality, the sliding window and the padded keys, a softmax
that sends fully masked rows to 0, and the grouped-query heads read by index.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence

import numpy as np

from catenc.onnx import builder as B
from catenc.onnx.builder import Group, Lit, Node, Operand, Size, Text, call, cast, matmul, reduce, seq, where
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.reduce import reduction
from catenc.onnx.registry import OnnxNode, converter
from catenc.onnx.values import ONNX_DTYPES, Shape, Value, broadcast
from catenc.symbolic import Expr, const, floordiv

_NO_ATTENTION = B.lit(float("-inf"), "f32")  # the bias of a key a query does not attend to

# ---- Einsum --------------------------------------------------------------------------------------


def _parse(equation: str, operands: list[Value]) -> tuple[list[str], str, dict[str, Expr]]:
    """The terms with each ellipsis spelt out in fresh capital letters, the explicit output, and each letter's size."""
    text = equation.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ModelError(f"equation '{equation}' names {len(terms)} operands, the node has {len(operands)}")
    fresh = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in text]
    batch = max(
        (v.rank - len(t.replace("...", "")) for t, v in zip(terms, operands, strict=True) if "..." in t), default=0
    )
    ellipsis = "".join(fresh[:batch])
    sizes: dict[str, Expr] = {}
    spelt = []
    for term, value in zip(terms, operands, strict=True):
        if "..." in term:
            count = value.rank - len(term.replace("...", ""))
            term = term.replace("...", ellipsis[batch - count :] if count else "")
        if len(term) != value.rank or not all(c.isalpha() for c in term):
            raise ModelError(f"term '{term}' does not name the {value.rank} axes of its operand")
        for letter, dim in zip(term, value.shape, strict=True):
            known = sizes.get(letter)
            if known is None or known == const(1):
                sizes[letter] = dim
            elif dim != known and dim != const(1):
                raise ModelError(f"axis '{letter}' is {known} in one operand and {dim} in another")
        spelt.append(term)
    if arrow:
        output = output.replace("...", ellipsis)
    else:
        joined = "".join(spelt)
        output = ellipsis + "".join(sorted(c for c in set(joined) if c not in ellipsis and joined.count(c) == 1))
    if len(set(output)) != len(output) or any(c not in sizes for c in output):
        raise ModelError(f"output '{output}' must use distinct letters of the inputs")
    return spelt, output, sizes


@converter("Einsum")
def einsum(node: OnnxNode, emit: Emitter) -> list[Value]:
    operands = [v for v in node.inputs if v is not None]
    if not operands:
        raise ModelError("needs at least one input")
    dtype = operands[0].dtype
    if dtype == "bool":
        raise Unsupported("einsum of bool tensors")
    terms, output, sizes = _parse(str(node.attr("equation", "")), operands)
    shape = tuple(sizes[c] for c in output)
    refs = [emit.ref(v) for v in operands]
    broadcasting = any(
        dim != sizes[c] for t, v in zip(terms, operands, strict=True) for c, dim in zip(t, v.shape, strict=True)
    )
    plain = all(t and len(set(t)) == len(t) for t in terms) and not broadcasting
    if plain:
        if output == "".join(terms) and len(terms) == 1:
            return [operands[0]]
        equation = Text(f"{','.join(terms)}->{output}")
        return [emit.out(call("einsum", equation, *refs, dtype=dtype, shape=shape), dtype, shape)]
    names = dict(zip(sorted(sizes), emit.index_names().numbered(len(sizes)), strict=True))
    reads = []
    for term, ref, value in zip(terms, refs, operands, strict=True):
        subs = [names[c] if dim == sizes[c] else 0 for c, dim in zip(term, value.shape, strict=True)]
        reads.append(ref[tuple(subs)] if term else ref)
    summed = [c for c in sorted(sizes) if c not in output]
    expr = reduce("sum", [(names[c], Size(sizes[c])) for c in summed], functools.reduce(operator.mul, reads))
    if not output:  # a scalar: index form needs an axis, so one of length 1, then its element
        if not summed:
            return [emit.out(expr, dtype, ())]
        one = emit.index_names().numbered(len(sizes) + 1)[-1]
        total = emit.ref(emit.index_temp([one], expr, dtype, (const(1),), "total"))
        return [emit.out(total[0], dtype, ())]
    return [emit.out_index([names[c] for c in output], expr, dtype, shape)]


# ---- Attention -----------------------------------------------------------------------------------


def _in_type(value: float, dtype: str) -> float:
    """value rounded to dtype (as numpy's `Q.dtype.type(value)`), as a Python float."""
    if dtype == "f16":
        return float(np.float16(value))
    if dtype == "f64":
        return float(value)
    f = np.float32(value)
    if dtype == "bf16":
        bits = int(f.view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return float(np.uint32(bits).view(np.float32))
    return float(f)


def _heads(value: Value, heads: int | None, emit: Emitter, hint: str) -> Value:
    """A 3-D (batch, sequence, heads * size) input as 4-D (batch, heads, sequence, size)."""
    if value.rank == 4:
        return value
    if value.rank != 3 or not heads:
        raise ModelError("Q, K and V must be 4-D, or 3-D with q_num_heads and kv_num_heads")
    b, s, hidden = value.shape
    size = floordiv(hidden, heads)
    shape = (b, s, const(heads), size)
    sizes = [Size(b, bare=True), Size(s, bare=True), heads, Size(size)]
    split = emit.ref(emit.temp(_reordered("reshape", emit.ref(value), sizes, shape), value.dtype, shape, hint))
    turned = (b, const(heads), s, size)
    return emit.temp(_reordered("transpose", split, [0, 2, 1, 3], turned), value.dtype, turned, hint)


def _reordered(fn: str, x: Node, order: Sequence[Operand], shape: Shape) -> Node:
    """`reshape(x, [sizes])` or `transpose(x, [axes])`: x's elements in a new shape."""
    return call(fn, x, seq(order), dtype=x.dtype, shape=shape)


def _structure(node: OnnxNode, q: Value, total: Expr, past: Expr | None, emit: Emitter) -> Value | None:
    """The additive bias of causality, the sliding window and the padded keys (0 or -inf), or None."""
    causal = bool(node.attr("is_causal", 0))
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    nonpad = node.input(6)
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    b, s = q.shape[0], q.shape[2]
    conditions: list[Node] = []
    if nonpad is not None:  # the keys of batch b end at nonpad_kv_seqlen[b], the queries being the last ones
        lengths = emit.ref(nonpad)
        if nonpad.rank != 1:
            raise ModelError("nonpad_kv_seqlen must be 1-D")
        idx = emit.index_names().numbered(4)
        bi, i, j = idx[0], idx[2], idx[3]
        conditions.append(Group(j < lengths[bi]))
        offset: Node = lengths[bi] - Size(s)
    else:
        idx = emit.index_names().numbered(2)
        i, j = idx
        offset = Size(past or const(0))
    front = i + offset
    if causal:
        conditions.append(Group(j <= front))
    if left >= 0:
        conditions.append(Group(front - j <= left))
    if right >= 0:
        conditions.append(Group(j - Group(front) <= right))
    expr = cast(where(functools.reduce(operator.and_, conditions), 0.0, _NO_ATTENTION), q.dtype)
    shape: Shape = (s, total) if nonpad is None else (b, const(1), s, total)
    return emit.index_temp(idx, expr, q.dtype, shape, "structure")


def _mask_bias(mask: Value, q: Value, total: Expr, emit: Emitter) -> Value:
    """attn_mask as an additive bias of Q's type, padded with -inf to the keys' length."""
    ref = emit.ref(mask)
    expr: Node = ref
    if mask.dtype == "bool":
        expr = cast(where(ref, 0.0, _NO_ATTENTION), q.dtype)
    elif mask.dtype != q.dtype:
        expr = cast(ref, q.dtype)
    width = mask.shape[-1]
    shape = mask.shape[:-1] + (total,)
    if width != total:
        widths = seq([seq([0, 0])] * (mask.rank - 1) + [seq([0, Size(total - width)])])
        expr = call("pad", expr, widths, dtype=q.dtype, shape=shape, value=_NO_ATTENTION)
    elif expr is ref and mask.name is not None:
        return mask
    return emit.temp(expr, q.dtype, shape, "mask")


def _library_call(node: OnnxNode, q: Value, k: Value, v: Value) -> tuple[str, bool] | None:
    """The ops/attention.toml composite that computes this node exactly, if one does, and whether
    it is called causal."""
    mask = node.input(3)
    plain = all(node.input(n) is None for n in (4, 5, 6)) and len([o for o in node.outputs if o]) == 1
    plain = plain and node.attr("scale") is None and node.attr("softcap", 0.0) == 0.0
    plain = plain and node.attr("left_window_size", -1) < 0 and node.attr("right_window_size", -1) < 0
    plain = plain and q.rank == 4 and q.shape[1] == k.shape[1] and node.attr("softmax_precision") is None
    if not plain:
        return None
    causal = bool(node.attr("is_causal", 0))
    if mask is None:
        return "attention", causal
    if not causal and mask.rank == 2 and mask.dtype == q.dtype and mask.shape == (q.shape[2], k.shape[2]):
        return "attention_masked", False
    return None


@converter("Attention")
def attention(node: OnnxNode, emit: Emitter) -> list[Value]:
    q, k, v, mask = node.need(0), node.need(1), node.need(2), node.input(3)
    past_key, past_value = node.input(4), node.input(5)
    dtype = q.dtype
    if not q.is_float or k.dtype != dtype or v.dtype != dtype:
        raise ModelError(f"Q, K and V of types {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.rank == k.rank == v.rank or q.rank not in (3, 4):
        raise ModelError(f"Q, K and V of ranks {q.rank}, {k.rank}, {v.rank} (all 3 or all 4)")
    if mask is not None and mask.rank == 0:
        raise ModelError("attn_mask is a scalar")
    if (past_key is None) != (past_value is None):
        raise ModelError("past_key and past_value must come together")
    if past_key is not None and (past_key.rank != 4 or past_value.rank != 4):
        raise ModelError("past_key and past_value must be 4-D")
    if past_key is not None and node.input(6) is not None:
        raise ModelError("nonpad_kv_seqlen cannot be combined with past_key and past_value")
    rank = q.rank
    library = _library_call(node, q, k, v)
    if library is not None:
        fn, causal = library
        args = [emit.ref(t) for t in (q, k, v, mask) if t is not None]
        flags = {"causal": Lit("True", "bool")} if causal else {}
        shape = q.shape[:3] + v.shape[3:]
        return [emit.out(call(fn, *args, dtype=dtype, shape=shape, **flags), dtype, shape)]
    q = _heads(q, node.attr("q_num_heads"), emit, "q")
    k = _heads(k, node.attr("kv_num_heads"), emit, "k")
    v = _heads(v, node.attr("kv_num_heads"), emit, "v")
    batch, heads, length, size = q.shape
    kv_heads = k.shape[1]
    past = None
    if past_key is not None:
        past = past_key.shape[2]
        present_shape = k.shape[:2] + (past + k.shape[2], k.shape[3])
        k = emit.out(
            call("concat", seq([emit.ref(past_key), emit.ref(k)]), 2, dtype=dtype, shape=present_shape),
            dtype,
            present_shape,
            1,
        )
        value_shape = v.shape[:2] + (past + v.shape[2], v.shape[3])
        v = emit.out(
            call("concat", seq([emit.ref(past_value), emit.ref(v)]), 2, dtype=dtype, shape=value_shape),
            dtype,
            value_shape,
            2,
        )
    present_k, present_v = k, v
    total = k.shape[2]
    # the additive bias: attn_mask, then causality, the window and padded keys
    bias = None if mask is None else _mask_bias(mask, q, total, emit)
    structure = _structure(node, q, total, past, emit)
    if structure is not None:
        if bias is None:
            bias = structure
        else:
            shape = broadcast(bias.shape, structure.shape)
            if shape is None:
                raise ModelError("attn_mask does not broadcast against the scores")
            bias = emit.temp(emit.ref(bias) + emit.ref(structure), dtype, shape, "bias")
    # grouped-query attention: query head h reads key and value head h // (heads / kv_heads)
    if heads != kv_heads:
        if not (heads.is_const and kv_heads.is_const) or heads.value % kv_heads.value:
            raise ModelError(f"{heads} query heads do not group onto {kv_heads} key/value heads")
        group = heads.value // kv_heads.value
        k = _repeat_heads(k, heads, group, emit, "k_heads")
        v = _repeat_heads(v, heads, group, emit, "v_heads")
    scale = node.attr("scale")
    root = _in_type(math.sqrt(1 / math.sqrt(size.value) if scale is None else scale), dtype) if size.is_const else None
    if root is None:
        raise Unsupported("a symbolic head size")
    qs = emit.ref(emit.temp(emit.ref(q) * B.lit(root, dtype), dtype, q.shape, "scaled"))
    ks = emit.ref(emit.temp(emit.ref(k) * B.lit(root, dtype), dtype, k.shape, "scaled"))
    scores_shape = (batch, heads, length, total)
    keys = _reordered("transpose", ks, [0, 1, 3, 2], k.shape[:2] + (k.shape[3], k.shape[2]))
    scores = emit.temp(matmul(qs, keys, scores_shape), dtype, scores_shape, "scores")
    softcap = node.attr("softcap", 0.0)
    if softcap and softcap > 0:
        c = B.lit(softcap, dtype)
        scores = emit.temp(call("tanh", emit.ref(scores) / c) * c, dtype, scores_shape, "capped")
    qk_out = scores
    logits = scores
    if bias is not None:
        logits = emit.temp(emit.ref(scores) + emit.ref(bias), dtype, scores_shape, "logits")
    mode = node.attr("qk_matmul_output_mode", 0)
    if mode == 2:
        qk_out = logits
    probs = _softmax(node, logits, bias, emit)
    if mode == 3:
        qk_out = probs
    product = matmul(emit.ref(probs), emit.ref(v), (batch, heads, length, v.shape[3]))
    if rank == 4:
        y = emit.out(product, dtype, product.shape)
    else:
        y = emit.ref(emit.temp(product, dtype, product.shape, "y"))
        moved = (batch, length, heads, v.shape[3])
        turned = emit.ref(emit.temp(_reordered("transpose", y, [0, 2, 1, 3], moved), dtype, moved, "y"))
        flat = (batch, length, heads * v.shape[3])
        sizes = [Size(batch, bare=True), Size(length, bare=True), Size(flat[2])]
        y = emit.out(_reordered("reshape", turned, sizes, flat), dtype, flat)
    return [y, present_k, present_v, qk_out][: len(node.outputs)]


def _repeat_heads(value: Value, heads: Expr, group: int, emit: Emitter, hint: str) -> Value:
    ref = emit.ref(value)
    idx = emit.index_names().numbered(4)
    shape = (value.shape[0], heads) + value.shape[2:]
    return emit.index_temp(idx, ref[idx[0], idx[1] // group, idx[2], idx[3]], value.dtype, shape, hint)


def _softmax(node: OnnxNode, logits: Value, bias: Value | None, emit: Emitter) -> Value:
    """The reference's softmax over the keys: rows of -inf give 0 (not NaN), in softmax_precision if set."""
    dtype = logits.dtype
    precision = node.attr("softmax_precision")
    work = ONNX_DTYPES.get(precision, dtype) if precision else dtype
    x = emit.ref(logits) if work == dtype else cast(emit.ref(logits), work)
    shape = logits.shape
    kept = shape[:3] + (const(1),)
    top = emit.ref(emit.temp(reduction("max", x, -1, True, kept), work, kept, "max"))
    e = emit.ref(emit.temp(call("exp", x - where(top.eq(_NO_ATTENTION), 0.0, top)), work, shape, "exp"))
    total = emit.ref(emit.temp(reduction("sum", e, -1, True, kept), work, kept, "sum"))
    p: Node = e / where(total.eq(0.0), 1.0, total)
    if bias is not None:  # a row whose bias is all -inf attends to nothing: 0, whatever the scores
        b = emit.ref(bias)
        row = reduction("max", b, -1, True, bias.shape[:-1] + (const(1),))
        p = where(row.eq(_NO_ATTENTION), 0.0, p)
    if work != dtype:
        p = cast(p, dtype)
    return emit.temp(p, dtype, shape, "probs")
