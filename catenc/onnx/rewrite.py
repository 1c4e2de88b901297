"""Rewrites of the ONNX graph before conversion, each one a known identity of inference.

`fold_batchnorm`: a Conv whose only consumer is an inference BatchNormalization, with weights and
statistics all initializers, becomes one Conv with scaled weights and a shifted bias
(w' = w * s, b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps)), as onnxruntime does:
the normalisation then costs nothing at run time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np

from catenc.onnx.model import onnx_module


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
