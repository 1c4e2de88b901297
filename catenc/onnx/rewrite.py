"""Rewrites of the ONNX graph before conversion, each one a known identity of inference.

`fold_batchnorm`: a Conv whose only consumer is an inference BatchNormalization, with weights and
statistics all initializers, becomes one Conv with scaled weights and a shifted bias
(w' = w * s, b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps)), as onnxruntime does:
the normalisation then costs nothing at run time.

`fuse_qdq`: the groups a QDQ quantiser writes around a Conv, MatMul or Gemm (u8 activations and
int8 weights dequantised, the float result quantised again) become QLinearConv / QLinearMatMul,
which quantization.py computes in integers, as onnxruntime does (docs/onnx.md, Quantised models).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from catenc.onnx.model import onnx_module, opsets


def fold_batchnorm(model):
    """The model with every foldable Conv -> BatchNormalization pair folded (a copy when any is)."""
    onnx = onnx_module()
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    uses = Counter(_inputs(graph))
    uses.update(o.name for o in graph.output)
    producers = {out: node for node in graph.node for out in node.output}
    folds = {}  # id of the BatchNormalization -> (the Conv, new weight, new bias)
    for bn in graph.node:
        if (
            bn.op_type != "BatchNormalization"
            or bn.domain not in ("", "ai.onnx")
            or len(bn.output) > 1
            and any(bn.output[1:])
        ):
            continue
        attrs = {a.name: a for a in bn.attribute}
        if "training_mode" in attrs and attrs["training_mode"].i:
            continue
        conv = producers.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or uses[conv.output[0]] != 1:
            continue
        names = list(conv.input[1:]) + list(bn.input[1:5])
        if len(bn.input) < 5 or any(n and n not in inits for n in names):
            continue
        to_array = onnx.numpy_helper.to_array
        w = to_array(inits[conv.input[1]])
        if w.dtype not in (np.float32, np.float64):
            continue
        gamma, beta, mean, var = (to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
        bias = to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] else 0.0
        channels = (w.shape[:1],)
        if any(a.shape not in channels for a in (gamma, beta, mean, var)) or np.shape(bias) not in (*channels, ()):
            continue  # shapes that do not fit: the converters report the node
        eps = attrs["epsilon"].f if "epsilon" in attrs else 1e-5
        scale = gamma / np.sqrt(var + eps)
        new_w = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        new_b = ((bias - mean) * scale + beta).astype(w.dtype)
        folds[id(bn)] = (conv, new_w, new_b)
    if not folds:
        return model
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    del folded.graph.node[:]
    dropped = {id(conv) for conv, _, _ in folds.values()}
    taken = set(inits) | {o for node in graph.node for o in node.output}
    for node in graph.node:
        if id(node) in dropped:
            continue
        if id(node) not in folds:
            folded.graph.node.append(node)
            continue
        conv, new_w, new_b = folds[id(node)]
        w_name, b_name = _fresh(conv.input[1] + "_bn", taken), _fresh(conv.output[0] + "_bias_bn", taken)
        folded.graph.initializer.extend(
            [onnx.numpy_helper.from_array(new_w, w_name), onnx.numpy_helper.from_array(new_b, b_name)]
        )
        replacement = onnx.NodeProto()
        replacement.CopyFrom(conv)
        del replacement.input[:]
        replacement.input.extend([conv.input[0], w_name, b_name])
        del replacement.output[:]
        replacement.output.append(node.output[0])
        folded.graph.node.append(replacement)
    return folded


def _inputs(graph) -> Iterator[str]:
    """Every name the graph's nodes read, those of their subgraphs (an If's branches read the
    outer graph's values by name) included."""
    for node in graph.node:
        yield from node.input
        for attribute in node.attribute:
            for sub in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _inputs(sub)


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    taken.add(candidate)
    return candidate


# ---- QDQ groups -> QLinearConv / QLinearMatMul ---------------------------------------------------

# A fused node's attribute (never in a model read from a file): the group computed its float result
# and quantised it in f32, so the node requantises in f32 too, round(sum * (x_scale * w_scale /
# y_scale)) + y_zero_point, as onnxruntime's QLinearConv does, where a QLinear node read from a
# model requantises in f64 as the ONNX reference does (docs/onnx.md "Quantised models").
REQUANTIZE_F32 = "catenc_requantize_f32"

DEFAULT = ("", "ai.onnx")
SCALE_RTOL = 1e-6  # a bias scale within this of x_scale * w_scale is taken as equal to it


class _Graph:
    """What the QDQ rewrite looks up: initializers (as arrays, converted when first asked for), the
    producer and the readers of each value, and how many times each value is read (graph outputs
    and subgraphs included)."""

    def __init__(self, graph) -> None:
        self.initializers = {t.name: t for t in graph.initializer}
        self.producers = {out: node for node in graph.node for out in node.output}
        self.readers: dict[str, list] = {}
        for node in graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.uses = Counter(_inputs(graph))
        self.uses.update(o.name for o in graph.output)
        self._arrays: dict[str, np.ndarray] = {}

    def array(self, name: str) -> np.ndarray | None:
        """The initializer `name` as an array, None when there is none."""
        if name not in self._arrays and name in self.initializers:
            self._arrays[name] = onnx_module().numpy_helper.to_array(self.initializers[name])
        return self._arrays.get(name)


@dataclass(frozen=True)
class _Dequantized:
    """A DequantizeLinear of initializer parameters: its node, integer input, scale and zero point
    (None when absent) and axis (as given)."""

    node: object
    data: str
    scale: np.ndarray
    zero: np.ndarray | None
    axis: int


@dataclass(frozen=True)
class _Fusion:
    """The nodes (and new initializers) replacing a group, placed where its QuantizeLinear was."""

    nodes: list
    initializers: list
    dropped: tuple  # the float operator and the QuantizeLinear
    dequantized: tuple  # the DequantizeLinear nodes it read


def fuse_qdq(model):
    """The model with each QDQ group fused (a copy when any is): DQ(x u8), DQ(w int8) [, DQ(bias
    int32)] -> Conv -> Q becomes QLinearConv; DQ(a u8), DQ(b int8) -> MatMul -> Q becomes
    QLinearMatMul; a Gemm (alpha = beta = 1, transA = 0, B constant) becomes QLinearMatMul of B
    transposed at import, or with an int32 bias a 1x1 QLinearConv between two Reshapes (exact:
    the bias is added to the i32 sums before requantising). Other groups stay as they are."""
    graph = model.graph
    if opsets(model).get("", 0) < 10 or not any(node.op_type == "QuantizeLinear" for node in graph.node):
        return model
    fusions = _fusions(graph)
    if not fusions:
        return model
    dropped = {id(n) for fusion in fusions.values() for n in fusion.dropped}
    nodes = []
    for node in graph.node:
        if id(node) in fusions:
            nodes += fusions[id(node)].nodes
        elif id(node) not in dropped:
            nodes.append(node)
    fused = onnx_module().ModelProto()
    fused.CopyFrom(model)
    del fused.graph.node[:]
    fused.graph.node.extend(_without_unread(nodes, fusions.values(), graph))
    fused.graph.initializer.extend(t for fusion in fusions.values() for t in fusion.initializers)
    return fused


def _fusions(graph) -> dict[int, _Fusion]:
    """The fusion of each group the graph has, by the id of its QuantizeLinear."""
    g = _Graph(graph)
    taken = set(g.initializers) | {o for node in graph.node for o in node.output} | {i.name for i in graph.input}
    fusions = {}
    for node in graph.node:
        fuse = _FUSERS.get(node.op_type) if node.domain in DEFAULT and len(node.input) >= 2 else None
        q = _requantizer(node.output[0], g) if fuse and node.output else None
        fusion = fuse(node, q, g, taken) if q is not None else None
        if fusion is not None:
            fusions[id(q)] = fusion
    return fusions


def _without_unread(nodes: list, fusions, graph) -> list:
    """`nodes` less the DequantizeLinear nodes of the fused groups that nothing reads any more."""
    read = {name for node in nodes for name in node.input} | {o.name for o in graph.output}
    read |= {name for node in nodes for name in _subgraph_inputs(node)}
    unread = {id(dq) for f in fusions for dq in f.dequantized if not any(o in read for o in dq.output)}
    return [node for node in nodes if id(node) not in unread]


def _subgraph_inputs(node) -> Iterator[str]:
    for attribute in node.attribute:
        for sub in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
            yield from _inputs(sub)


def _dequantized(name: str, g: _Graph) -> _Dequantized | None:
    """The DequantizeLinear producing `name`, when its scale and zero point are initializers and it
    is not blocked."""
    dq = g.producers.get(name)
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in DEFAULT or len(dq.output) != 1:
        return None
    attrs = {a.name: a.i for a in dq.attribute if a.name in ("axis", "block_size")}
    params = list(dq.input[1:3])
    if attrs.get("block_size") or not params or not params[0] or any(p and p not in g.initializers for p in params):
        return None
    zero = g.array(params[1]) if len(params) > 1 and params[1] else None
    return _Dequantized(dq, dq.input[0], g.array(params[0]), zero, attrs.get("axis", 1))


def _activation(name: str, g: _Graph) -> _Dequantized | None:
    """A u8 activation dequantised per tensor (an f32 scale and a u8 zero point, one each)."""
    dq = _dequantized(name, g)
    if dq is None or dq.zero is None or dq.zero.dtype != np.uint8 or dq.zero.size != 1:
        return None
    return dq if dq.scale.dtype == np.float32 and dq.scale.size == 1 else None


def _weight(name: str, g: _Graph, ranks: tuple[int, ...], axis: int) -> _Dequantized | None:
    """An int8 initializer (of one of `ranks`) dequantised per tensor or along `axis`, zero points all zero."""
    dq = _dequantized(name, g)
    data = g.array(dq.data) if dq is not None else None
    if data is None or data.dtype != np.int8 or data.ndim not in ranks or dq.scale.dtype != np.float32:
        return None
    return dq if _centred(dq, data.shape, axis) else None


def _centred(dq: _Dequantized, shape: tuple[int, ...], axis: int) -> bool:
    """Whether the scale is one value or one per channel (along `axis` of `shape`) and the zero points all zero."""
    per_channel = dq.scale.ndim == 1 and dq.scale.size == shape[axis] and dq.axis % len(shape) == axis
    if dq.scale.size != 1 and not per_channel:
        return False
    return dq.zero is None or (dq.zero.size in (1, dq.scale.size) and not dq.zero.any())


def _bias(name: str, g: _Graph, x: _Dequantized, w: _Dequantized, channels: int) -> _Dequantized | None:
    """An int32 bias of `channels` values, zero point zero, scale x_scale * w_scale: the scale of the
    i32 sums, so that it adds to them as it is."""
    dq = _dequantized(name, g)
    data = g.array(dq.data) if dq is not None else None
    if data is None or data.dtype != np.int32 or data.shape != (channels,):
        return None
    if (dq.zero is not None and dq.zero.any()) or dq.scale.size not in (1, channels):
        return None
    wanted = x.scale.reshape(()) * w.scale.reshape(-1)
    return dq if np.allclose(dq.scale.reshape(-1), wanted, rtol=SCALE_RTOL, atol=0) else None


def _requantizer(name: str, g: _Graph):
    """The QuantizeLinear that is the only reader of `name` (not a graph output), per tensor, with
    an 8-bit zero point given."""
    readers = g.readers.get(name, [])
    if g.uses[name] != 1 or len(readers) != 1:
        return None
    q = readers[0]
    if q.op_type != "QuantizeLinear" or q.domain not in DEFAULT or list(q.input[:1]) != [name] or len(q.input) < 3:
        return None
    if any(a.name == "block_size" and a.i for a in q.attribute):
        return None
    scale, zero = g.array(q.input[1]), g.array(q.input[2])
    if scale is None or zero is None or scale.dtype != np.float32 or scale.size != 1 or zero.size != 1:
        return None
    return q if zero.dtype in (np.uint8, np.int8) else None


def _zero_point(w: _Dequantized, taken: set[str]) -> tuple[str, list]:
    """The weight's zero point input of a QLinear node: the DQ's own, or a new int8 zero."""
    if w.zero is not None:
        return w.node.input[2], []
    name = _fresh(w.data + "_zero_point", taken)
    return name, [onnx_module().numpy_helper.from_array(np.zeros((), np.int8), name)]


def _qlinear(op: str, inputs: list[str], q, like, attrs: dict | None = None, output: str | None = None):
    """A QLinearConv / QLinearMatMul node named as `like` (the float operator), writing q's output;
    it requantises in f32 as the group it replaces did (REQUANTIZE_F32)."""
    helper = onnx_module().helper
    attrs = {**(attrs or {}), REQUANTIZE_F32: 1}
    return helper.make_node(op, inputs, [output or q.output[0]], name=like.name, **attrs)


def _attributes(node) -> dict:
    helper = onnx_module().helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _fuse_conv(conv, q, g: _Graph, taken: set[str]) -> _Fusion | None:
    """DQ(x), DQ(w), DQ(bias)? -> Conv -> Q as one QLinearConv."""
    x, w = _activation(conv.input[0], g), _weight(conv.input[1], g, (3, 4, 5), 0)
    if x is None or w is None:
        return None
    bias = None
    if len(conv.input) > 2 and conv.input[2]:
        bias = _bias(conv.input[2], g, x, w, g.array(w.data).shape[0])
        if bias is None:
            return None
    zero, inits = _zero_point(w, taken)
    inputs = [x.data, *x.node.input[1:3], w.data, w.node.input[1], zero, *q.input[1:3]]
    inputs += [bias.data] if bias is not None else []
    node = _qlinear("QLinearConv", inputs, q, conv, _attributes(conv))
    return _Fusion([node], inits, (conv, q), tuple(d.node for d in (x, w, bias) if d is not None))


def _fuse_matmul(matmul, q, g: _Graph, taken: set[str]) -> _Fusion | None:
    """DQ(a), DQ(b 2-D) -> MatMul -> Q as one QLinearMatMul."""
    a, b = _activation(matmul.input[0], g), _weight(matmul.input[1], g, (2,), 1)
    if a is None or b is None:
        return None
    zero, inits = _zero_point(b, taken)
    inputs = [a.data, *a.node.input[1:3], b.data, b.node.input[1], zero, *q.input[1:3]]
    return _Fusion([_qlinear("QLinearMatMul", inputs, q, matmul)], inits, (matmul, q), (a.node, b.node))


def _fuse_gemm(gemm, q, g: _Graph, taken: set[str]) -> _Fusion | None:
    """DQ(a), DQ(B), DQ(C int32)? -> Gemm -> Q: without a bias, QLinearMatMul of B as [K, N] (transposed
    at import for transB=1); with one, Reshape(a, [M, K, 1, 1]) -> a 1x1 QLinearConv of B as
    [N, K, 1, 1] -> Reshape to [M, N], so that the bias is added to the i32 sums (exact)."""
    attrs = _attributes(gemm)
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
        return None
    trans = bool(attrs.get("transB", 0))
    a, b = _activation(gemm.input[0], g), _weight(gemm.input[1], g, (2,), 0 if trans else 1)
    if a is None or b is None:
        return None
    nk = g.array(b.data) if trans else g.array(b.data).T  # B as [N, K]
    has_bias = len(gemm.input) > 2 and bool(gemm.input[2])
    bias = _bias(gemm.input[2], g, a, b, nk.shape[0]) if has_bias else None
    if has_bias and bias is None:
        return None
    zero, inits = _zero_point(b, taken)
    if bias is None:
        data = b.data
        if trans:
            inits.append(_initializer(nk.T, b.data + "_kn", taken))
            data = inits[-1].name
        inputs = [a.data, *a.node.input[1:3], data, b.node.input[1], zero, *q.input[1:3]]
        return _Fusion([_qlinear("QLinearMatMul", inputs, q, gemm)], inits, (gemm, q), (a.node, b.node))
    return _gemm_as_conv(gemm, q, (a, b, bias), nk, (zero, inits), taken)


def _gemm_as_conv(gemm, q, dqs: tuple, nk: np.ndarray, zero: tuple[str, list], taken: set[str]) -> _Fusion:
    """A Gemm with an int32 bias as Reshape -> 1x1 QLinearConv -> Reshape (fuse_qdq)."""
    helper = onnx_module().helper
    (a, b, bias), (zero_name, inits) = dqs, zero
    n, k = nk.shape
    weight = _initializer(nk.reshape(n, k, 1, 1), b.data + "_conv", taken)
    to_4d = _initializer(np.array([-1, k, 1, 1], np.int64), gemm.output[0] + "_shape_4d", taken)
    to_2d = _initializer(np.array([-1, n], np.int64), gemm.output[0] + "_shape_2d", taken)
    x4, y4 = _fresh(a.data + "_4d", taken), _fresh(q.output[0] + "_4d", taken)
    inputs = [x4, *a.node.input[1:3], weight.name, b.node.input[1], zero_name, *q.input[1:3], bias.data]
    nodes = [
        helper.make_node("Reshape", [a.data, to_4d.name], [x4], name=f"{gemm.name}_reshape_in"),
        _qlinear("QLinearConv", inputs, q, gemm, output=y4),
        helper.make_node("Reshape", [y4, to_2d.name], [q.output[0]], name=f"{gemm.name}_reshape_out"),
    ]
    return _Fusion(nodes, [*inits, weight, to_4d, to_2d], (gemm, q), (a.node, b.node, bias.node))


def _initializer(array: np.ndarray, name: str, taken: set[str]):
    """A new initializer of `array`, under a name no value of the graph has."""
    return onnx_module().numpy_helper.from_array(np.ascontiguousarray(array), _fresh(name, taken))


_FUSERS = {"Conv": _fuse_conv, "MatMul": _fuse_matmul, "Gemm": _fuse_gemm}
