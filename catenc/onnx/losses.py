"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss over (N, C, d1, ...) inputs.

The class of each position is picked by comparison in index form (`sum[c](where(c == t, x, 0))`),
so a target equal to `ignore_index`, wherever it lies, reads nothing; such a position weighs 0.
`mean` divides by the sum of the weights of the positions not ignored, as the operators define.
"""

from __future__ import annotations

from catenc.onnx.builder import Node, Size, call, cast, reduce, where
from catenc.onnx.emitter import Emitter
from catenc.onnx.errors import ModelError
from catenc.onnx.reduce import reduction as reduced
from catenc.onnx.registry import OnnxNode, converter, need_float
from catenc.onnx.values import Value
from catenc.symbolic import const


def _check(node: OnnxNode, x: Value, target: Value, weight: Value | None) -> str:
    """The reduction, once the shapes and dtypes agree."""
    need_float(node, x)
    if target.dtype not in ("i32", "i64"):
        raise ModelError(f"the target has type {target.dtype}, not an integer type")
    if x.rank < 2 or target.shape != (x.shape[0], *x.shape[2:]):
        raise ModelError("the input must be (N, C, d1, ...) and the target (N, d1, ...)")
    if weight is not None and (weight.shape != (x.shape[1],) or weight.dtype != x.dtype):
        raise ModelError("the weight must be a vector of one value per class, of the input's type")
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ModelError(f"reduction '{reduction}'")
    return reduction


def _nll(node: OnnxNode, emit: Emitter, log_p: Node, x: Value, target: Value, weight: Value | None) -> Value:
    """The node's loss (output 0) of the log-probabilities `log_p` (a tensor of x's shape)."""
    reduction = node.attr("reduction", "mean")
    ignore = node.attr("ignore_index")
    t = emit.ref(target)
    if target.dtype != "i64":
        t = emit.ref(emit.temp(cast(t, "i64"), "i64", target.shape, "target"))
    w = emit.ref(weight) if weight is not None else None
    names = emit.index_names().numbered(target.rank + 1)
    idx, c = names[:-1], names[-1]
    at = t[tuple(idx)]
    read = log_p[(idx[0], c, *idx[1:])]
    kept = None if ignore is None else at.ne(int(ignore))

    def picked(term: Node) -> Node:
        value = reduce("sum", [(c, Size(x.shape[1]))], where(c.eq(at), term, 0))
        return value if kept is None else where(kept, value, 0)

    loss = -picked(read * w[c] if w is not None else read)
    shape = target.shape
    if reduction == "none":
        return emit.out_index(idx, loss, x.dtype, shape)
    losses = emit.ref(emit.index_temp(idx, loss, x.dtype, shape, "losses"))
    total = call("sum", losses, dtype=x.dtype, shape=())
    if reduction == "sum":
        return emit.out(total, x.dtype, ())
    if w is None and kept is None:
        return emit.out(call("mean", losses, dtype=x.dtype, shape=()), x.dtype, ())
    weighed = picked(w[c]) if w is not None else cast(kept, x.dtype)
    weights = emit.ref(emit.index_temp(idx, weighed, x.dtype, shape, "weights"))
    return emit.out(total / call("sum", weights, dtype=x.dtype, shape=()), x.dtype, ())


@converter("NegativeLogLikelihoodLoss")
def nll_loss(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, target, weight = node.need(0), node.need(1), node.input(2)
    _check(node, x, target, weight)
    return [_nll(node, emit, emit.ref(x), x, target, weight)]


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, target, weight = node.need(0), node.need(1), node.input(2)
    _check(node, x, target, weight)
    xt = emit.ref(x)
    kept = x.shape[:1] + (const(1),) + x.shape[2:]
    shifted = emit.ref(emit.temp(xt - reduced("max", xt, 1, True, kept), x.dtype, x.shape, "shifted"))
    log_p_expr = shifted - call("log", reduced("sum", call("exp", shifted), 1, True, kept))
    wanted = len(node.outputs) > 1 and bool(node.outputs[1])
    log_p = emit.out(log_p_expr, x.dtype, x.shape, 1) if wanted else emit.temp(log_p_expr, x.dtype, x.shape, "log_p")
    loss = _nll(node, emit, emit.ref(log_p), x, target, weight)
    return [loss, log_p] if wanted else [loss]
