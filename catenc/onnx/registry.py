"""The table of ONNX operators catenc converts: op type -> converter function.

Each family module registers its converters with `@converter("Relu", "LeakyRelu", ...)`. A
converter receives the node (`OnnxNode`: attributes, opset, inputs as `Value`s) and the
importer's `Emitter`, and returns one `Value` per node output. It raises `Unsupported` for a
form it does not handle (an attribute value, a dtype), which the importer reports with the node.

Before a converter runs, `normalize` brings the node to its operator's newest form (NEWEST):
attributes that later opsets take as inputs become known inputs, and older semantics are
spelled with the newer attributes, so each converter reads one form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.values import Value, known_value

if TYPE_CHECKING:
    from catenc.onnx.emitter import Emitter


@dataclass(frozen=True)
class OnnxNode:
    """A node with its attributes decoded and its inputs resolved."""

    op: str
    name: str
    opset: int
    inputs: tuple[Value | None, ...]  # None for an omitted optional input
    outputs: tuple[str, ...]  # ONNX output names ('' for an omitted optional output)
    attrs: dict[str, Any] = field(default_factory=dict)
    # where each input came from, when `normalize` moved them: the ONNX input index, or the
    # attribute it was; empty when they are the node's own
    origins: tuple[int | str, ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def label(self, i: int) -> str:
        """How diagnostics name input i: `input 1`, or the attribute it came from."""
        origin = self.origins[i] if i < len(self.origins) else i
        return f"input {origin}" if isinstance(origin, int) else f"attribute {origin}"

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def need(self, i: int) -> Value:
        value = self.input(i)
        if value is None:
            raise ModelError(f"input {i} is required")
        return value


Converter = Callable[[OnnxNode, "Emitter"], Sequence[Value]]
CONVERTERS: dict[str, Converter] = {}
# op -> its converters, newest first: (the opset they convert from, the converter)
_VARIANTS: dict[str, list[tuple[int, Converter]]] = {}


def converter(*ops: str, since: int = 1) -> Callable[[Converter], Converter]:
    """Register fn for `ops` from opset `since` on: a node runs the variant of the newest `since`
    not above its opset (a meaning an opset changed, as Softmax's at 13). The registered converter
    gets the node in its newest form (`normalize`)."""

    def register(fn: Converter) -> Converter:
        for op in ops:
            variants = _VARIANTS.setdefault(op, [])
            if any(known == since for known, _ in variants):
                raise ValueError(f"two converters for ONNX operator {op} from opset {since}")
            variants.append((since, fn))
            variants.sort(key=lambda variant: -variant[0])
            CONVERTERS[op] = functools.partial(_convert, variants)
        return fn

    return register


def _convert(variants: list[tuple[int, Converter]], node: OnnxNode, emit: Emitter) -> Sequence[Value]:
    node = normalize(node)
    fn = next((fn for since, fn in variants if node.opset >= since), None)
    if fn is None:
        raise Unsupported(f"{node.op} of opset {node.opset}")
    return fn(node, emit)


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


# ---- opset differences ----------------------------------------------------------------------------


class Dtype(Enum):
    """The dtype an attribute becomes as an input."""

    I64 = "i64"
    F32 = "f32"
    DATA = "data"  # the dtype of input 0


ALWAYS = 1 << 30  # a form every opset's node is rewritten into (a deprecated op as its successor)


@dataclass(frozen=True)
class Form:
    """An operator's form from opset `since` on, reached from the older one: `inputs` lists the new
    form's inputs, each the old input at an index, an attribute (name, dtype) or None (absent),
    or is None when they stay; `attrs` are what the old semantics mean in the new form's terms
    (they replace the node's), `renamed` attributes (old, new); `op` the operator it becomes."""

    since: int
    inputs: tuple[int | tuple[str, Dtype] | None, ...] | None = None
    attrs: tuple[tuple[str, Any], ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    keep_empty: bool = True  # an empty attribute list is an input; False: it is absent (Split's `split`)
    op: str | None = None
    opset: int | None = None  # the opset of the form; None: `since`
    # (attribute, its default, the one value the new form can say): an old node with another
    # value has no newest form (Unsupported); the attribute is dropped
    requires: tuple[tuple[str, Any, Any], ...] = ()


def _axes(since: int) -> Form:
    return Form(since, (0, ("axes", Dtype.I64)))


_REDUCE = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare")
_REDUCE += ("ReduceLogSum", "ReduceLogSumExp")
_RESIZE_11 = (0, None, 1, None)  # Resize-11's inputs (X, roi, scales, sizes) from (X, scales)
_RESIZE_10 = (("coordinate_transformation_mode", "asymmetric"), ("nearest_mode", "floor"))

# op -> its forms, oldest first: a node of an opset before a form's `since` is rewritten into it
NEWEST: dict[str, tuple[Form, ...]] = {
    "BatchNormalization": (Form(7, requires=(("is_test", 0, 1),)),),  # is_test=0: batch statistics
    "Clip": (Form(11, (0, ("min", Dtype.DATA), ("max", Dtype.DATA))),),
    "Dropout": (Form(12, (0, ("ratio", Dtype.F32))),),
    "Slice": (Form(10, (0, ("starts", Dtype.I64), ("ends", Dtype.I64), ("axes", Dtype.I64))),),
    "Pad": (Form(2, renamed=(("paddings", "pads"),)), Form(11, (0, ("pads", Dtype.I64), ("value", Dtype.DATA)))),
    "Split": (Form(13, (0, ("split", Dtype.I64)), keep_empty=False),),
    "Squeeze": (_axes(13),),
    "Unsqueeze": (_axes(13),),
    "ReduceSum": (_axes(13),),
    **dict.fromkeys(_REDUCE, (_axes(18),)),
    "TopK": (Form(10, (0, ("k", Dtype.I64))),),
    "Resize": (Form(11, _RESIZE_11, _RESIZE_10),),
    "Upsample": (
        Form(9, (0, ("scales", Dtype.F32))),
        Form(ALWAYS, _RESIZE_11, _RESIZE_10, op="Resize", opset=11),
    ),
}


def normalize(node: OnnxNode) -> OnnxNode:
    """The node in its operator's newest form (NEWEST): a node already in it is returned as is."""
    for form in NEWEST.get(node.op, ()):
        if node.opset < form.since:
            node = _rewrite(node, form)
    return node


def _rewrite(node: OnnxNode, form: Form) -> OnnxNode:
    attrs = dict(node.attrs)
    for name, default, wanted in form.requires:
        given = attrs.pop(name, default)
        if given != wanted:
            raise Unsupported(f"{name}={given} ({node.op} before opset {form.since} has no newer form of it)")
    for old, new in form.renamed:
        if old in attrs:
            attrs[new] = attrs.pop(old)
    inputs, origins = list(node.inputs), [node.origins[i] if node.origins else i for i in range(len(node.inputs))]
    if form.inputs is not None:
        inputs, origins = [], []
        for k, source in enumerate(form.inputs):
            if isinstance(source, int):
                inputs.append(node.input(source))
                origins.append(node.origins[source] if source < len(node.origins) else source)
            else:
                inputs.append(None if source is None else _attribute_input(node, attrs, source, form.keep_empty))
                origins.append(k if source is None else source[0])
        while inputs and inputs[-1] is None:
            inputs.pop()
            origins.pop()
    attrs.update(form.attrs)
    return replace(
        node,
        op=form.op or node.op,
        opset=form.opset or form.since,
        inputs=tuple(inputs),
        attrs=attrs,
        origins=tuple(origins),
    )


def _attribute_input(
    node: OnnxNode, attrs: dict[str, Any], source: tuple[str, Dtype], keep_empty: bool
) -> Value | None:
    """The attribute as a known input (taken out of attrs), or None when the node has none."""
    name, dtype = source
    given = attrs.pop(name, None)
    if given is None or (not keep_empty and isinstance(given, list) and not given):
        return None
    return known_value(np.asarray(given), node.need(0).dtype if dtype == Dtype.DATA else dtype.value)
