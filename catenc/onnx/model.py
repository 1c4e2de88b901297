"""Reading an .onnx file: the protobuf, checked enough that the importer can trust its structure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from catenc.diagnostics import CatencError, Loc

if TYPE_CHECKING:
    import onnx


# How the imported file's header says where a constant value is computed (`--debug 1` prints these).
IMPORT_NOTE = "import: "


def import_notes(text: str) -> list[str]:
    """The notes at the head of an imported model's composite text (`IMPORT_NOTE`), in order."""
    head = text.split("\n[", 1)[0].splitlines()
    return [line[2 + len(IMPORT_NOTE) :] for line in head if line.startswith("# " + IMPORT_NOTE)]


def file_loc(display: str) -> Loc:
    """The place of an error in a binary file: the file as a whole (rendered `model.onnx: error:`)."""
    return Loc(display, 0, 0)


def onnx_module():
    """The onnx package, or an error saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise CatencError("reading ONNX models needs the onnx package: pip install 'catenc[onnx]'") from None
    return onnx


def load_model(path: str, display: str | None = None) -> onnx.ModelProto:
    """The model in `path`, with a clear error for a missing, truncated or non-ONNX file."""
    display = display or path
    onnx = onnx_module()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise CatencError(f"cannot read the model: {error.strerror}", file_loc(display)) from None
    return parse_model(data, display, onnx)


def parse_model(data: bytes, display: str, onnx=None) -> onnx.ModelProto:
    """The model these bytes hold, with a graph and an opset; the rest is validate.py's to check."""
    onnx = onnx or onnx_module()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf raises DecodeError or RuntimeError depending on its backend
        raise CatencError(
            f"not an ONNX model, or a truncated one ({len(data)} bytes that do not parse as an ONNX ModelProto)",
            file_loc(display),
        ) from None
    if not model.HasField("graph") or not model.opset_import:
        raise CatencError(
            "not an ONNX model: the file has no graph or no opset (is it an ONNX file at all?)", file_loc(display)
        )
    return model


def opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Opset version per domain ('' is the default ONNX domain)."""
    versions = {}
    for entry in model.opset_import:
        domain = "" if entry.domain in ("", "ai.onnx") else entry.domain
        versions[domain] = entry.version
    return versions


def text(name: str | bytes) -> str:
    """A name of the model as text: protobuf gives a string that is not valid UTF-8 as bytes."""
    return name if isinstance(name, str) else name.decode("utf-8", "backslashreplace")


def node_label(node: onnx.NodeProto, index: int, versions: dict[str, int]) -> str:
    """How errors name a node: `node 'NAME' (OP, opset N)`, its domain before OP when not ONNX's."""
    domain = "" if node.domain in ("", "ai.onnx") else text(node.domain)
    op = f"{domain}.{text(node.op_type)}" if domain else text(node.op_type)
    name = text(node.name) or f"{text(node.op_type)}_{index}"
    return f"node '{name}' ({op}, opset {versions.get(domain, 0)})"


def type_name(code: int) -> str:
    """ONNX's name of an element type (FLOAT8E4M3FN, STRING, ...)."""
    try:
        return onnx_module().TensorProto.DataType.Name(code)
    except ValueError:
        return f"number {code}"


def with_import_note(error: CatencError) -> CatencError:
    """An error placed at a line of an .onnx file is placed in the composite file catenc imported
    the model as (the file has no lines): a note says so and how to see that file."""
    loc = error.loc
    if loc is None or not loc.line or not loc.path.lower().endswith(".onnx"):
        return error
    note = (
        f"{loc.path}:{loc.line}:{loc.col} is a place in the composite file catenc imports the model as; "
        f"`catenc import {loc.path}` writes that file",
        None,
    )
    return CatencError(error.message, loc, (*error.notes, note), error.more)
