"""The table of ONNX operators catenc converts: op type -> converter function.

Each family module registers its converters with `@converter("Relu", "LeakyRelu", ...)`. A
converter receives the node (`OnnxNode`: attributes, opset, inputs as `Value`s) and the
importer's `Emitter`, and returns one `Value` per node output. It raises `Unsupported` for a
form it does not handle (an attribute value, a dtype), which the importer reports with the node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from catenc.onnx.values import Value


class Unsupported(Exception):
    """A node catenc cannot convert; the message says what (an attribute, a dtype, a form)."""


class ModelError(Exception):
    """A node that is wrong as ONNX (shapes that do not agree, a missing input): the model's error."""


@dataclass(frozen=True)
class OnnxNode:
    """A node with its attributes decoded and its inputs resolved."""

    op: str
    name: str
    opset: int
    inputs: tuple[Value | None, ...]  # None for an omitted optional input
    outputs: tuple[str, ...]  # ONNX output names ('' for an omitted optional output)
    attrs: dict[str, Any] = field(default_factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def need(self, i: int) -> Value:
        value = self.input(i)
        if value is None:
            raise ModelError(f"input {i} is required")
        return value


Converter = Callable[[OnnxNode, Any], Sequence[Value]]  # (node, the importer's Emitter: catenc/onnx/emitter.py)
CONVERTERS: dict[str, Converter] = {}


def converter(*ops: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op in ops:
            if op in CONVERTERS:
                raise ValueError(f"two converters for ONNX operator {op}")
            CONVERTERS[op] = fn
        return fn

    return register


def decode_attribute(attribute, onnx) -> Any:
    """An AttributeProto's value as Python data (tensors as numpy arrays)."""
    kind = attribute.type
    A = onnx.AttributeProto
    if kind == A.FLOAT:
        return attribute.f
    if kind == A.INT:
        return attribute.i
    if kind == A.STRING:
        return attribute.s.decode("utf-8", "replace")
    if kind == A.TENSOR:
        return onnx.numpy_helper.to_array(attribute.t)
    if kind == A.FLOATS:
        return list(attribute.floats)
    if kind == A.INTS:
        return list(attribute.ints)
    if kind == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in attribute.strings]
    if kind in (A.GRAPH, A.GRAPHS):
        return attribute  # subgraphs: no converter takes them yet
    return attribute


def need_float(node: OnnxNode, x: Value) -> Value:
    """x, an input the node computes on in floating point; Unsupported for another element type."""
    if not x.is_float:
        raise Unsupported(f"input of type {x.dtype}: {node.op} is computed on floating-point tensors only")
    return x


def axis_of(axis: int, rank: int, what: str = "axis") -> int:
    """A possibly negative axis as 0..rank-1."""
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def known_ints(value: Value | None, what: str) -> list:
    """A known integer input (axes, a shape, pads) as Python ints or expressions."""
    if value is None:
        raise ModelError(f"{what} is required")
    if not value.is_known:
        raise Unsupported(f"{what} must be known when the model is compiled (it is computed at run time here)")
    return [int(e) if isinstance(e, (int, np.integer)) else e for e in np.asarray(value.known).reshape(-1)]
