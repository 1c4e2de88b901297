"""The layers of catenc/: no module imports one of a later layer, and no import circle.

Every module under catenc/ is parsed with `ast` (nothing is imported), and every import in it
counts: at module level, inside functions, under `if TYPE_CHECKING:`. A later stage reads the data
of an earlier one, never the other way round, so the arrows all point back along the pipeline.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "catenc"

# In pipeline order; a module may import its own layer and those listed before it. A prefix
# ending in "." is a package (all its modules), anything else one module.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Leaves: diagnostics, dtypes and the symbolic integers every stage uses; they know no stage.
    (
        "leaves",
        (
            "catenc",
            "catenc.diagnostics",
            "catenc.dtypes",
            "catenc.symbolic",
            "catenc.resources",
            "catenc.pyparse",
            "catenc.weights",  # the safetensors reader and writer
            "catenc.dispatch",  # the {type: fn} tables of every tree walk
            "catenc.enums",  # the base of the closed sets printed as their plain values
            "catenc.options",  # compile's options as given, each with its cache role
            "catenc.toolchain_memo",  # what the C compiler answered, kept for the next command
        ),
    ),
    # One declaration per primitive op, read by the checker, the IR builder, renderers and the reference.
    ("registry", ("catenc.registry",)),
    # Files to the typed program: knows no IR, schedule or backend.
    ("frontend", ("catenc.frontend.",)),
    # The second frontend: an ONNX model to a composite file of the first (docs/onnx.md).
    ("onnx", ("catenc.onnx.",)),
    # The typed program lowered to a graph of primitive ops.
    ("ir", ("catenc.ir.",)),
    # Kernel boundaries, tiles and the workspace: decisions recorded over the IR.
    ("schedule", ("catenc.schedule.",)),
    # IR + schedule to loop nests (and GPU work-groups): reads decisions, makes none.
    ("lower", ("catenc.lower.",)),
    # Renderers spell loop nests; templates hold the scaffolding.
    ("codegen", ("catenc.codegen.",)),
    # Runtime descriptors (which renderer, which toolchain), the manifest reader, the device host.
    ("runtime", ("catenc.runtime.",)),
    # Named passes and the pipeline per -O level, over the stages above.
    ("passes", ("catenc.passes.",)),
    # What one compile decided, the data emit, build and --test read.
    ("plan", ("catenc.plan",)),
    # One compile: the one place that wires the stages together.
    ("driver", ("catenc.driver",)),
    # Write sources, header and manifest, run the toolchain, move them into place; the compile cache; load.
    ("outputs", ("catenc.emit", "catenc.build", "catenc.loader", "catenc.outputs", "catenc.cache")),
    # The numpy reference, --test and the coverage report: compile, build and load.
    ("testing", ("catenc.testing.",)),
    # Measure on this machine: the preallocated entry call, per-kernel timers, the schedule search.
    ("measure", ("catenc.ccall", "catenc.peaks", "catenc.profile", "catenc.tune.")),
    # Commands only.
    ("cli", ("catenc.cli", "catenc.__main__")),
)

# Imports that break the layering today, each to be removed by the work named beside it; a test
# below fails once one is gone, so that the list only shrinks.
TEMPORARY: dict[tuple[str, str], str] = {}

# Arrows issue 15 removed, which must stay gone (importer prefix, imported prefix).
REMOVED_ARROWS = (
    ("catenc.runtime.", "catenc.loader"),  # the loader <-> device host circle (runtime/manifest.py now)
    ("catenc.emit", "catenc.driver"),  # emit read EntryPlan from the compiler (catenc/plan.py now)
    ("catenc.emit", "catenc.compiler"),
    ("catenc.codegen.", "catenc.plan"),  # codegen/names.py renamed an EntryPlan (catenc/emit.py does now)
    ("catenc.driver", "catenc.codegen.gemm"),  # the compiler reached into codegen for the gemm tiles
    ("catenc.runtime.", "catenc.frontend."),  # runtime.py used frontend's closest() (diagnostics now)
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_in(source: str, name: str, is_package: bool = False) -> set[str]:
    """The catenc modules module `name` imports anywhere in `source` (`from a import b` is module
    a.b when that is a module, else a)."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `import catenc.x.y` where y is a name
                target = target.rpartition(".")[0]
            if target.split(".")[0] == "catenc" and target != name:
                found.add(target)
    return found


def imports_of(name: str) -> set[str]:
    path = MODULES[name]
    return imports_in(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(matches(name, p) or name == p.rstrip(".") for p in prefixes):  # a package's __init__ too
            return index
    raise AssertionError(f"{name} is in no layer of tests/test_layers.py: add it to the one it belongs to")


def matches(name: str, prefix: str) -> bool:
    return name.startswith(prefix) if prefix.endswith(".") else name == prefix


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_no_import_circle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in sorted(GRAPH[name]):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    assert not circles, "modules that import each other, directly or around a circle: " + "; ".join(
        " <-> ".join(circle) for circle in circles
    )


def layer_violations() -> list[tuple[str, str]]:
    return sorted(
        (name, target) for name, targets in GRAPH.items() for target in targets if layer_of(target) > layer_of(name)
    )


def test_no_import_from_a_later_layer() -> None:
    found = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, target in layer_violations()
        if (name, target) not in TEMPORARY
    ]
    assert not found, "imports back up the pipeline:\n" + "\n".join(found)


def test_temporary_exceptions_are_still_needed() -> None:
    stale = sorted(set(TEMPORARY) - set(layer_violations()))
    assert not stale, f"these imports are gone: remove them from TEMPORARY: {stale}"


@pytest.mark.parametrize("arrow", REMOVED_ARROWS, ids=lambda arrow: " -> ".join(arrow))
def test_removed_arrows_stay_gone(arrow: tuple[str, str]) -> None:
    importer, imported = arrow
    found = sorted(
        (name, target)
        for name, targets in GRAPH.items()
        if matches(name, importer)
        for target in targets
        if matches(target, imported)
    )
    assert not found, f"{importer}* must not import {imported}*: {found}"


# A backend is a runtime descriptor plus a renderer's spelling table: the rest of catenc asks them
# (capabilities, attributes, tables), never which backend it is working for.
BACKEND_TABLES = ("catenc.runtime.", "catenc.codegen.")
BACKEND_NAMES = frozenset({"c", "cpu", "gpu", "host", "cuda", "opencl"})
BACKEND_FIELDS = frozenset({"language", "target", "calling_convention", "convention"})
BACKEND_CLASSES = frozenset(
    {"Runtime", "CRuntime", "GpuRuntime", "CudaRuntime", "OpenCLRuntime", "CRenderer", "GpuRenderer"}
    | {"CudaRenderer", "OpenCLRenderer"}
)


def backend_branches(source: str) -> list[str]:
    """Comparisons of a backend field with a backend's name (or a tuple of names), and isinstance
    tests of a backend's class, each with its line number, in line order."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            inside = [n for side in sides for n in ast.walk(side)]
            named = any(isinstance(n, ast.Constant) and n.value in BACKEND_NAMES for n in inside)
            field = any(
                (isinstance(side, ast.Attribute) and side.attr in BACKEND_FIELDS)
                or (isinstance(side, ast.Name) and side.id in BACKEND_FIELDS)
                for side in sides
            )
            branch = named and field
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            classes = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(node.args[-1])
                if isinstance(n, (ast.Name, ast.Attribute))
            }
            branch = bool(classes & BACKEND_CLASSES)
        else:
            continue
        if branch:
            found.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def test_no_backend_branches_outside_the_runtime_and_renderer_tables() -> None:
    found = [
        f"{MODULES[name].relative_to(PACKAGE.parent)} {branch}"
        for name in MODULES
        if not any(matches(name, prefix) for prefix in BACKEND_TABLES)
        for branch in backend_branches(MODULES[name].read_text(encoding="utf-8"))
    ]
    assert not found, "branches on a backend (ask the runtime descriptor or the renderer instead):\n" + "\n".join(found)


def test_backend_branches_are_recognised() -> None:
    source = """
if runtime.target == "gpu": pass
if entry.convention != "cuda": pass
if language not in ("c",): pass
if isinstance(renderer, codegen.GpuRenderer): pass
if runtime.language in HOST_LANGUAGES: pass
if stmt.target in outputs: pass
"""
    assert [line.split(":")[0] for line in backend_branches(source)] == ["line 2", "line 3", "line 4", "line 5"]


def test_the_parser_sees_every_kind_of_import() -> None:
    """Imports inside functions, under TYPE_CHECKING and relative ones count."""
    source = """
from typing import TYPE_CHECKING
from catenc.frontend import typed as T
from . import names
from ..ir.nodes import Graph
import catenc.symbolic
if TYPE_CHECKING:
    from catenc.plan import EntryPlan
def f():
    from catenc.runtime.device_host import device_symbols
"""
    assert imports_in(source, "catenc.codegen.c") == {
        "catenc.frontend.typed",
        "catenc.codegen.names",
        "catenc.ir.nodes",
        "catenc.symbolic",
        "catenc.plan",
        "catenc.runtime.device_host",
    }
    assert "catenc.runtime.device_host" in GRAPH["catenc.loader"]  # imported inside a method
