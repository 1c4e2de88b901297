"""ONNX model -> composite file: the graph walked in order, each node converted by its family's
converter (registry.py) into statements of the body language, values known at import folded.

The result is the text of a composite file (what `catenc import` writes) and the values of its
constants (the initializers that reach the program), so `catenc compile model.onnx` and
compiling the imported file run the same program (docs/onnx.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from catenc import __version__
from catenc.diagnostics import CatencError
from catenc.dtypes import DTYPES, f32_to_bf16
from catenc.onnx.elementwise import ELEMENTWISE_OPS
from catenc.onnx.emitter import RESERVED, Emitter, Names, sanitise, usable
from catenc.onnx.errors import ModelError, Unsupported
from catenc.onnx.evaluate import NotEvaluated, evaluate
from catenc.onnx.families import FAMILIES  # noqa: F401  (importing them registers their converters)
from catenc.onnx.folding import Decision, Placement, place, repeats
from catenc.onnx.model import IMPORT_NOTE, file_loc, load_model, node_label, onnx_module, opsets, type_name
from catenc.onnx.registry import CONVERTERS, OnnxNode, decode_attribute
from catenc.onnx.rewrite import fold_batchnorm, fuse_qdq
from catenc.onnx.validate import validate
from catenc.onnx.values import NUMPY, ONNX_DTYPES, Value, dims, known_value, static
from catenc.symbolic import sym
from catenc.weights import weights_bytes


# Names a generated tensor must not take: they would hide a function the body calls.
@dataclass(frozen=True)
class Imported:
    """A model as a composite file: its text, and the values of the constants it declares."""

    name: str
    text: str
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # name -> storage values
    dtypes: dict[str, str] = field(default_factory=dict)  # name -> dtype of each constant
    notes: tuple[str, ...] = ()  # where each value computed from constants only is computed (folding.py)

    def weights_bytes(self) -> bytes:
        """The constants as a safetensors file (what `weights =` names in the text)."""
        return weights_bytes({n: (DTYPES[self.dtypes[n]], a) for n, a in self.constants.items()})


def import_model(
    path: str, display: str | None = None, name: str | None = None, weights_file: str | None = None
) -> Imported:
    """The model in `path` as a composite file (errors name `display`); with `weights_file`, the
    text names that file as the one holding its constants (`catenc import`)."""
    display = display or path
    return import_proto(load_model(path, display), display, name, weights_file)


def import_proto(
    model,
    display: str,
    name: str | None = None,
    weights_file: str | None = None,
    fixed_inputs: Mapping[str, np.ndarray] | None = None,
) -> Imported:
    """The model as a composite file; `fixed_inputs` are graph inputs whose values are given now,
    so they become constants (a Reshape target or Pad amounts fed as inputs, as the ONNX node
    tests feed them)."""
    validate(model, display)
    return _Importer(fuse_qdq(fold_batchnorm(model)), display, dict(fixed_inputs or {})).run(name, weights_file)


class _Importer:
    def __init__(self, model, display: str, fixed_inputs: dict[str, np.ndarray]) -> None:
        self.model = model
        self.display = display
        self.fixed_inputs = fixed_inputs
        self.onnx = onnx_module()
        self.opsets = opsets(model)
        self.values: dict[str, Value | None] = {}  # None: produced by a node that did not convert
        self.errors: list[CatencError] = []
        self.inputs: list[tuple[str, Value]] = []
        self._symbols: dict[str, str] = {}  # dim_param -> symbol

    def error(self, message: str) -> None:
        self.errors.append(CatencError(message, file_loc(self.display)))

    def run(self, name: str | None, weights_file: str | None) -> Imported:
        graph = self.model.graph
        names = Names(RESERVED)
        emit = Emitter(names)
        for init in graph.initializer:
            self.values[init.name] = value = self.initializer(init)
            emit.hint(value, init.name)
        for sparse in graph.sparse_initializer:
            self.error(f"sparse initializer '{sparse.values.name}': not supported")
        for vi in graph.input:
            if vi.name in self.fixed_inputs and vi.name not in self.values:
                value = self.graph_input(vi, Names())
                if value is not None:
                    array = np.asarray(self.fixed_inputs[vi.name])
                    value = Value(value.dtype, dims(array.shape), known=array.astype(NUMPY[value.dtype]))
                    emit.hint(value, vi.name)
                self.values[vi.name] = value
            elif vi.name not in self.values:
                value = self.graph_input(vi, names)
                if value is not None:
                    self.inputs.append((vi.name, value))
                self.values[vi.name] = value
        for vi in graph.output:
            emit.output_names[vi.name] = names.fresh(vi.name)
        for index, node in enumerate(graph.node):
            self.convert(node, index, emit)
        outputs = [] if self.errors else self.outputs(emit)
        if self.errors:
            first, *rest = self.errors
            raise CatencError(first.message, first.loc, more=rest)
        entry = self.entry_name(name)
        text = self.render(entry, emit, outputs, weights_file if emit.constants else None)
        storage = {n: f32_to_bf16(a) if d == "bf16" else a for n, (d, a) in emit.constants.items()}
        dtypes = {n: d for n, (d, _) in emit.constants.items()}
        return Imported(entry, text, storage, dtypes, tuple(emit.notes))

    # ---- values ------------------------------------------------------------------------------
    def initializer(self, tensor) -> Value:
        dtype = ONNX_DTYPES[tensor.data_type]  # validate.py refused the types catenc does not read
        array = self.onnx.numpy_helper.to_array(tensor)
        if dtype == "bf16":
            array = array.astype(np.float32)
        known = np.ascontiguousarray(array, dtype=NUMPY[dtype]).reshape(array.shape)  # a scalar stays 0-d
        return Value(dtype, dims(array.shape), known=known)

    def graph_input(self, vi, names: Names) -> Value | None:
        tensor_type = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        dtype = ONNX_DTYPES.get(tensor_type.elem_type) if tensor_type is not None else None
        if dtype is None:
            what = type_name(tensor_type.elem_type) if tensor_type is not None else "a non-tensor"
            self.error(f"graph input '{vi.name}': type {what} is not supported (tensors of numbers or bool only)")
            return None
        if not tensor_type.HasField("shape"):
            self.error(f"graph input '{vi.name}': no shape (even its rank is unknown); catenc needs the rank")
            return None
        name = names.fresh(vi.name, "tensor")
        shape = []
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            else:
                shape.append(sym(self.symbol(dim.dim_param or f"{name}_dim{axis}", names)))
        return Value(dtype, dims(shape), name)

    def symbol(self, dim_param: str, names: Names) -> str:
        """The symbol of a dynamic dimension: one per distinct `dim_param`."""
        found = self._symbols.get(dim_param)
        if found is None:
            found = self._symbols[dim_param] = names.fresh(dim_param, "symbol")
        return found

    # ---- nodes -------------------------------------------------------------------------------
    def convert(self, node, index: int, emit: Emitter) -> None:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        opset = self.opsets.get(domain, 0)
        label = node_label(node, index, self.opsets)
        fn = CONVERTERS.get(node.op_type) if not domain else None
        if node.op_type == "If" and not domain:
            return self.inline_branch(node, label, emit)
        if fn is None:
            self.error(f"{label}: operator not supported")
            return self.poison(node)
        inputs = tuple(self.values.get(i) if i else None for i in node.input)
        missing = [i for i in node.input if i and i not in self.values]
        if missing:
            self.error(f"{label}: input '{missing[0]}' is not produced by any earlier node or graph input")
            return self.poison(node)
        if any(v is None and i for v, i in zip(inputs, node.input, strict=True)):
            return self.poison(node)  # an input from a node that failed: already reported
        attrs = {a.name: decode_attribute(a, self.onnx) for a in node.attribute}
        onnx_node = OnnxNode(node.op_type, node.name, opset, inputs, tuple(node.output), attrs)
        emit.outputs = tuple(node.output)
        emit.op, emit.elementwise = node.op_type, node.op_type in ELEMENTWISE_OPS
        mark, before = len(emit.lines), emit.mark()
        try:
            results = list(fn(onnx_node, emit))
        except Unsupported as error:
            self.error(f"{label}: {error}")
            return self.poison(node)
        except ModelError as error:
            self.error(f"{label}: invalid node: {error}")
            return self.poison(node)
        if _constant(inputs):
            results = self.computed_once(node, label, inputs, results, emit, before)
        if len(emit.lines) > mark + 1:  # a node of several statements says where they come from
            emit.lines.insert(mark, emit.comment(f"{node.name or node.op_type}: {node.op_type}"))
        for onnx_name, value in zip(node.output, results, strict=False):
            if onnx_name:
                self.values[onnx_name] = value
                emit.hint(value, onnx_name)

    def computed_once(
        self, node, label: str, inputs: tuple[Value | None, ...], results: list[Value], emit: Emitter, before
    ) -> list[Value]:
        """A node of constant inputs: its results computed at import, when its converter left them
        to the library and folding.place says so (the statements it wrote are taken back)."""
        outputs = results[: len(node.output)]
        shapes = [static(v.shape) for v in outputs]
        if all(v.is_known for v in outputs):
            # a broadcast (a fill) is decided where it is read (Emitter.broadcast)
            if all(v.known.dtype != object and not repeats(v.known) for v in outputs):
                count = sum(v.known.size for v in outputs)
                self.note(emit, label, outputs, Decision(Placement.IMPORT, f"{count} elements, by its converter"))
            return results
        count = None if None in shapes else sum(math.prod(s) for s in shapes)
        dtypes = [v.dtype for v in (*inputs, *outputs) if v is not None]
        decision = place(node.op_type, count, dtypes, False, False)
        if decision.at_import:
            try:
                arrays = evaluate(node, [None if v is None else v.known for v in inputs], self.opsets)
            except NotEvaluated as error:
                decision = Decision(Placement.CODE, f"onnx's reference evaluator failed: {error}")
            else:
                folded = [known_value(a, v.dtype) for a, v in zip(arrays, outputs, strict=False)]
                if [f.known.shape for f in folded] == shapes:
                    emit.rollback(before)
                    self.note(emit, label, folded, decision)
                    return folded + results[len(folded) :]
                decision = Decision(Placement.CODE, "onnx's reference evaluator disagrees on its shape")
        self.note(emit, label, outputs, decision)
        return results

    @staticmethod
    def note(emit: Emitter, label: str, values: list[Value], decision: Decision) -> None:
        """Say where a constant value is computed: every decision to leave one to the library, and
        each floating-point one computed at import (not the shapes, pads and axes computed there)."""
        if decision.at_import and not any(v.is_float for v in values):
            return
        shapes = ", ".join(f"{v.dtype}[{', '.join(map(str, v.shape))}]" for v in values)
        emit.notes.append(decision.note(f"{label} -> {shapes}"))

    def inline_branch(self, node, label: str, emit: Emitter) -> None:
        """An If whose condition is known at import: the nodes of the branch it takes, converted in
        place (torch.onnx writes one on the input's rank for nn.LocalResponseNorm)."""
        cond = self.values.get(node.input[0]) if node.input else None
        if node.input and node.input[0] in self.values and cond is None:
            return self.poison(node)  # from a node that failed: already reported
        if cond is None or not cond.is_known or cond.known.size != 1:
            self.error(f"{label}: the condition must be one value known when the model is compiled")
            return self.poison(node)
        taken = "then_branch" if bool(cond.known.reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == taken)
        if len(branch.output) != len(node.output):
            self.error(
                f"{label}: invalid node: the {taken} has {len(branch.output)} outputs, the If {len(node.output)}"
            )
            return self.poison(node)
        for init in branch.initializer:
            self.values[init.name] = self.initializer(init)
        for index, inner in enumerate(branch.node):
            self.convert(inner, index, emit)
        for onnx_name, inner in zip(node.output, branch.output, strict=True):
            if onnx_name:
                self.values[onnx_name] = self.values.get(inner.name)

    def poison(self, node) -> None:
        for name in node.output:
            if name:
                self.values[name] = None

    def outputs(self, emit: Emitter) -> list[tuple[str, Value]]:
        result = []
        for vi in self.model.graph.output:
            value = self.values.get(vi.name)
            if vi.name not in self.values:
                self.error(f"graph output '{vi.name}' is not produced by any node")
                continue
            if value is None:
                continue  # from a node that did not convert: reported
            name = emit.output_names[vi.name]
            if value.name != name:
                emit.outputs = (vi.name,)
                try:
                    text = emit.text(value)
                except Unsupported as error:
                    self.error(f"graph output '{vi.name}': {error}")
                    continue
                if value.name is None and value.rank == 0:
                    text = f"cast({text}, {value.dtype})"
                value = emit.out(text, value.dtype, value.shape)
            result.append((name, value))
        return result

    # ---- the composite file ------------------------------------------------------------------
    def entry_name(self, name: str | None) -> str:
        if name is not None:
            return name
        base = sanitise(self.model.graph.name or "model")
        return base if usable(base, "composite") else f"{base}_model"

    def render(self, entry: str, emit: Emitter, outputs: list[tuple[str, Value]], weights_file: str | None) -> str:
        producer = " ".join(p for p in (self.model.producer_name, self.model.producer_version) if p)
        opset = self.opsets.get("", 0)
        header = f"Imported from {self.display} by catenc {__version__} (ONNX opset {opset}"
        header += f", produced by {producer})" if producer else ")"
        lines = [_toml_comment(header), *(_toml_comment(IMPORT_NOTE + n) for n in emit.notes), ""]
        lines.append(f"[composite.{entry}]")
        doc = self.model.graph.doc_string or self.model.doc_string
        if doc:
            lines.append(f"doc = {_toml_string(doc.strip().splitlines()[0])}")
        lines.append(_toml_list("inputs", [_decl(n, v) for n, v in self.input_decls()]))
        lines.append(_toml_list("outputs", [_decl(n, v) for n, v in outputs]))
        if emit.constraints:
            lines.append(_toml_list("where", emit.constraints))
        if weights_file:
            lines.append(f"weights = {_toml_string(weights_file)}")
        if emit.constants:
            lines.append(
                _toml_list(
                    "constants", [f"{n}: {d}[{', '.join(map(str, a.shape))}]" for n, (d, a) in emit.constants.items()]
                )
            )
        lines.append("body = '''")
        lines += emit.lines
        lines.append("'''")
        return "\n".join(lines) + "\n"

    def input_decls(self) -> list[tuple[str, Value]]:
        return [(v.name, v) for _, v in self.inputs]


def _constant(inputs: tuple[Value | None, ...]) -> bool:
    """Whether a node's inputs are all known numbers (a node of a constant subgraph)."""
    given = [v for v in inputs if v is not None]
    return bool(given) and all(v.is_known and v.known.dtype != object for v in given)


def _decl(name: str, value: Value) -> str:
    return f"{name}: {value.dtype}[{', '.join(str(d) for d in value.shape)}]"


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"[\x00-\x1f\x7f]", " ", escaped) + '"'


def _toml_comment(text: str) -> str:
    return "# " + re.sub(r"[\x00-\x1f\x7f]", " ", text)


def _toml_list(key: str, items: list[str]) -> str:
    if len(items) <= 1:
        return f"{key} = [{', '.join(_toml_string(i) for i in items)}]"
    return f"{key} = [\n" + "".join(f"    {_toml_string(i)},\n" for i in items) + "]"
