"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss over (N, C, d1, ...) inputs.

The class of each position is picked by comparison in index form (`sum[c](where(c == t, x, 0))`),
so a target equal to `ignore_index`, wherever it lies, reads nothing; such a position weighs 0.
`mean` divides by the sum of the weights of the positions not ignored, as the operators define.
"""

from __future__ import annotations

from catenc.onnx.emitter import Emitter
from catenc.onnx.registry import ModelError, OnnxNode, converter, need_float
from catenc.onnx.values import Value
from catenc.onnx.values import literal as lit


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


def _nll(node: OnnxNode, emit: Emitter, log_p: str, x: Value, target: Value, weight: Value | None) -> Value:
    """The node's loss (output 0) of the log-probabilities `log_p` (a body name of x's shape)."""
    reduction = node.attr("reduction", "mean")
    ignore = node.attr("ignore_index")
    t = emit.text(target)
    if target.dtype != "i64":
        t = emit.temp(f"cast({t}, i64)", "i64", target.shape, "target").name
    w = emit.text(weight) if weight is not None else None
    names = [i.name for i in emit.index_names().numbered(target.rank + 1)]
    idx, c = names[:-1], names[-1]
    at = f"{t}[{', '.join(idx)}]"
    read = f"{log_p}[{', '.join([idx[0], c, *idx[1:]])}]"
    classes = f"{c} < {lit(x.shape[1], 'i64')}"
    kept = None if ignore is None else f"{at} != {int(ignore)}"

    def picked(term: str) -> str:
        value = f"sum[{classes}](where({c} == {at}, {term}, 0))"
        return value if kept is None else f"where({kept}, {value}, 0)"

    loss = f"-{picked(f'{read} * {w}[{c}]' if w else read)}"
    shape = target.shape
    if reduction == "none":
        return emit.out_index(idx, loss, x.dtype, shape)
    losses = emit.index_temp(idx, loss, x.dtype, shape, "losses")
    if reduction == "sum":
        return emit.out(f"sum({losses.name})", x.dtype, ())
    if w is None and kept is None:
        return emit.out(f"mean({losses.name})", x.dtype, ())
    weights = emit.index_temp(idx, picked(f"{w}[{c}]") if w else f"cast({kept}, {x.dtype})", x.dtype, shape, "weights")
    return emit.out(f"sum({losses.name}) / sum({weights.name})", x.dtype, ())


@converter("NegativeLogLikelihoodLoss")
def nll_loss(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, target, weight = node.need(0), node.need(1), node.input(2)
    _check(node, x, target, weight)
    return [_nll(node, emit, emit.text(x), x, target, weight)]


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(node: OnnxNode, emit: Emitter) -> list[Value]:
    x, target, weight = node.need(0), node.need(1), node.input(2)
    _check(node, x, target, weight)
    xt = emit.text(x)
    shifted = emit.temp(f"{xt} - max({xt}, axis=1, keepdims=True)", x.dtype, x.shape, "shifted")
    log_p_expr = f"{shifted.name} - log(sum(exp({shifted.name}), axis=1, keepdims=True))"
    wanted = len(node.outputs) > 1 and bool(node.outputs[1])
    log_p = emit.out(log_p_expr, x.dtype, x.shape, 1) if wanted else emit.temp(log_p_expr, x.dtype, x.shape, "log_p")
    loss = _nll(node, emit, log_p.name, x, target, weight)
    return [loss, log_p] if wanted else [loss]
