"""The ONNX rules the converters rely on, checked once before any conversion (docs/onnx.md, "What
the importer refuses"): every tensor anywhere in the model, every name, one definition per value,
the opset, and each node's attributes and input and output counts against its operator's schema.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

from catenc.diagnostics import CatencError
from catenc.dtypes import DTYPES
from catenc.onnx.model import file_loc, node_label, onnx_module, opsets, text, type_name
from catenc.onnx.values import ONNX_DTYPES

OPSETS = range(7, 29)  # the default domain's opsets catenc reads
# INT attributes that are booleans, 0 or 1 (the schemas type them INT and say so only in words).
FLAGS = frozenset(
    (
        "allowzero",
        "align_corners",
        "antialias",
        "ceil_mode",
        "count_include_pad",
        "detect_negative",
        "detect_positive",
        "exclude_outside",
        "exclusive",
        "fmod",
        "input_forget",
        "interleaved",
        "is_causal",
        "keepdims",
        "largest",
        "layout",
        "linear_before_reset",
        "noop_with_empty_axes",
        "reverse",
        "saturate",
        "select_last_index",
        "sorted",
        "training_mode",
        "transA",
        "transB",
        "upper",
    )
)
# Where a value of the graph is named, by the field that holds it.
PLACES = {
    "initializer": "initializer",
    "sparse_initializer": "sparse initializer",
    "input": "graph input",
    "output": "graph output",
    "value_info": "value_info",
    "node": "node",
    "attribute": "attribute",
    "functions": "function",
}


def validate(model, display: str) -> None:
    """Every rule the model breaks, as one error each (all at once); nothing when it keeps them."""
    problems = list(_problems(model))
    if problems:
        first, *rest = (CatencError(p, file_loc(display)) for p in problems)
        raise CatencError(first.message, first.loc, more=rest)


def _problems(model) -> Iterator[str]:
    onnx = onnx_module()
    versions = opsets(model)
    opset_problems = list(_opset_problems(model, versions))
    yield from opset_problems
    yield from _everything(model, versions)
    yield from _definitions(model.graph, versions)
    if not opset_problems:
        graph = model.graph
        typed = [vi for vi in graph.input if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type]
        types = {vi.name: vi.type.tensor_type.elem_type for vi in typed} | {
            t.name: t.data_type for t in graph.initializer
        }
        for index, node in enumerate(graph.node):
            if node.domain in ("", "ai.onnx") and isinstance(node.op_type, str):
                yield from _node_problems(node, node_label(node, index, versions), versions[""], onnx, types)


def _opset_problems(model, versions: dict[str, int]) -> Iterator[str]:
    domains = Counter("" if e.domain in ("", "ai.onnx") else text(e.domain) for e in model.opset_import)
    for domain, n in domains.items():
        if n > 1:
            yield f"opset_import lists the domain '{domain or 'ai.onnx'}' {n} times"
    advice = (
        f"catenc reads opsets {OPSETS[0]} to {OPSETS[-1]} "
        "(onnx.version_converter.convert_version converts a model to another)"
    )
    version = versions.get("")
    if version is None and any(node.domain in ("", "ai.onnx") for node in model.graph.node):
        listed = ", ".join(f"{d} {v}" for d, v in versions.items())
        yield f"the model imports no opset of the default ONNX domain (only {listed}): {advice}"
    elif version is not None and version not in OPSETS:
        yield f"opset {version} of the default ONNX domain: {advice}"


# ---- every string and tensor, wherever it is -------------------------------------------------


def _everything(model, versions: dict[str, int]) -> Iterator[str]:
    """The problems of every name and tensor of the model, each placed by what holds it."""
    for field, value in model.ListFields():
        if field.name != "graph":
            yield from _field(field, value, "the model")
    for field, value in model.graph.ListFields():
        if field.name == "node":
            for index, node in enumerate(value):
                yield from _walk(node, node_label(node, index, versions))
        else:
            yield from _field(field, value, "the graph")


def _field(field, value, where: str) -> Iterator[str]:
    if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
        return
    repeated = not isinstance(value, (str, bytes)) and not hasattr(value, "ListFields")
    items = value if repeated else [value]
    for item in items:
        if field.type == field.TYPE_STRING and isinstance(item, bytes):
            yield f"{where}: its {field.name} {item!r} is not valid UTF-8"
        elif field.type == field.TYPE_MESSAGE:
            yield from _walk(item, _inside(field.name, item, where))


def _inside(field_name: str, item, where: str) -> str:
    """The place of `item`, held in field `field_name` of what `where` names."""
    kind = PLACES.get(field_name)
    if kind is None:
        return where
    name = text(item.values.name if kind == "sparse initializer" else item.name)
    label = f"{kind} '{name}'" + (f" ({text(item.op_type)})" if kind == "node" else "")
    return label if where in ("the model", "the graph") else f"{where}, {label}"


def _walk(message, where: str) -> Iterator[str]:
    name = type(message).__name__
    if name == "TensorProto":
        yield from _tensor_problems(message, where)
    elif name == "Dimension" and message.HasField("dim_value") and message.dim_value < 0:
        yield f"{where}: a negative dimension {message.dim_value}"
    for field, value in message.ListFields():
        yield from _field(field, value, where)


def _tensor_problems(tensor, where: str) -> Iterator[str]:
    """A tensor's data must be in the file, whole, of a type catenc reads and as many as its dims say."""
    TensorProto = type(tensor)
    if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        yield (
            f"{where}: its data is in an external file ({location!r}), which catenc never reads; save the model "
            "with its data inside: onnx.save_model(model, path, save_as_external_data=False)"
        )
        return
    if tensor.HasField("segment"):
        yield f"{where}: a segment of a tensor (a tensor split across several TensorProtos) is not supported"
        return
    if tensor.data_type == TensorProto.UNDEFINED:
        yield f"{where}: no element type (data_type 0, UNDEFINED)"
        return
    dtype = ONNX_DTYPES.get(tensor.data_type)
    if dtype is None:
        yield f"{where}: element type {type_name(tensor.data_type)} is not supported"
        return
    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        yield f"{where}: a negative dimension in its dims {dims}"
        return
    count = math.prod(dims)
    if tensor.HasField("raw_data"):
        need = count * DTYPES[dtype].itemsize
        if len(tensor.raw_data) != need:
            kind = type_name(tensor.data_type)
            yield f"{where}: raw_data holds {len(tensor.raw_data)} bytes; dims {dims} of {kind} need {need}"
        return
    field = onnx_module().helper.tensor_dtype_to_field(tensor.data_type)
    held = len(getattr(tensor, field))
    if held != count:
        yield f"{where}: dims {dims} make {count} elements, its {field} holds {held}"


# ---- values are defined once -----------------------------------------------------------------


def _definitions(graph, versions: dict[str, int]) -> Iterator[str]:
    """ONNX's single assignment: each value has one definition; an initializer may also be an input."""
    defined: dict[object, str] = {}
    for kind, names in (
        ("graph input", [vi.name for vi in graph.input]),
        ("initializer", [t.name for t in graph.initializer] + [s.values.name for s in graph.sparse_initializer]),
    ):
        for name, n in Counter(names).items():
            if n > 1:
                yield f"{kind} '{text(name)}' is declared {'twice' if n == 2 else f'{n} times'}"
            defined.setdefault(name, kind)
    for index, node in enumerate(graph.node):
        label = node_label(node, index, versions)
        for name in node.output:
            if name in defined:
                yield f"{label}: output '{text(name)}' is already defined by {defined[name]}"
            elif name:
                defined[name] = label
    for name, n in Counter(vi.name for vi in graph.output).items():
        if n > 1:
            yield f"graph output '{text(name)}' is listed {'twice' if n == 2 else f'{n} times'}"


# ---- nodes against their operator's schema ---------------------------------------------------


def _node_problems(node, label: str, opset: int, onnx, types: dict[str, int]) -> Iterator[str]:
    op = node.op_type
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        if onnx.defs.has(op):
            yield f"{label}: {op} is not an operator of opset {opset} (a later opset added it)"
        return  # not an ONNX operator: the importer says it is not supported
    kinds = onnx.AttributeProto.AttributeType
    given = Counter(a.name for a in node.attribute)
    for name, n in given.items():
        if n > 1:
            yield f"{label}: attribute '{text(name)}' is given {n} times"
    for attribute in node.attribute:
        yield from _attribute_problems(attribute, schema, label, kinds)
    for name, formal in schema.attributes.items():
        if formal.required and name not in given:
            yield f"{label}: attribute '{name}' is required"
    yield from _count_problems("input", len(node.input), schema.min_input, schema.max_input, label)
    yield from _count_problems("output", len(node.output), schema.min_output, schema.max_output, label)
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    for i, (formal, name) in enumerate(zip(schema.inputs, node.input, strict=False)):
        if formal.option == single and not name:
            yield f"{label}: input {i} ({formal.name}) is required, and is empty"
        kind = f"tensor({type_name(types[name]).lower()})" if name in types else None
        takes = allowed.get(formal.type_str, [formal.type_str])
        if kind is not None and kind not in takes:
            yield f"{label}: input {i} ({formal.name}) is a {kind}; {schema.name} takes {_either(takes)} there"


def _attribute_problems(attribute, schema, label: str, kinds) -> Iterator[str]:
    name = text(attribute.name)
    formal = schema.attributes.get(attribute.name)
    if attribute.type == kinds.UNDEFINED:
        yield f"{label}: attribute '{name}' has no type (UNDEFINED)"
    elif formal is None:
        takes = ", ".join(sorted(schema.attributes)) or "none"
        yield f"{label}: {schema.name} has no attribute '{name}' (its attributes: {takes})"
    elif attribute.type != formal.type.value:
        yield f"{label}: attribute '{name}' is a {kinds.Name(attribute.type)}; {schema.name} takes a {formal.type.name}"
    elif attribute.type == kinds.INT and name in FLAGS and attribute.i not in (0, 1):
        yield f"{label}: attribute '{name}' is {attribute.i}; it is a flag, 0 or 1"
    elif attribute.type == kinds.TENSOR and not attribute.HasField("t"):
        yield f"{label}: attribute '{name}' holds no tensor"


def _count_problems(what: str, n: int, least: int, most: int, label: str) -> Iterator[str]:
    if not least <= n <= most:
        takes = f"{least}" if least == most else f"{least} to {most}" if most < 2**31 - 1 else f"at least {least}"
        yield f"{label}: {n} {what}s; it takes {takes}"


def _either(kinds) -> str:
    """`a`, `a or b`, `a, b or c`: the types a formal parameter allows, in the schema's order."""
    *rest, last = kinds
    return f"{', '.join(rest)} or {last}" if rest else last
