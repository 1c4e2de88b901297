"""One ONNX node evaluated on known inputs with onnx's reference evaluator (numpy), for the nodes
of constant subgraphs that no converter folds (folding.py decides which)."""

from __future__ import annotations

import numpy as np

from catenc.onnx.model import onnx_module


class NotEvaluated(Exception):
    """The reference evaluator could not evaluate the node (its message says why)."""


def evaluate(node, inputs: list[np.ndarray | None], opsets: dict[str, int]) -> list[np.ndarray]:
    """The node's outputs, in order, from its inputs (None for an omitted optional one)."""
    onnx_module()  # a clean error where onnx is missing
    from onnx.reference import ReferenceEvaluator

    feeds = {name: np.ascontiguousarray(a) for name, a in zip(node.input, inputs, strict=True) if name}
    try:
        session = ReferenceEvaluator(node, opsets={d or "": v for d, v in opsets.items()})
        with np.errstate(all="ignore"):
            results = session.run(None, feeds)
    except Exception as error:  # the reference raises what numpy and its kernels raise
        raise NotEvaluated(f"{type(error).__name__}: {error}") from None
    return [np.asarray(r) for r in results]
