"""Rendering a file's entries into the source and header text (jinja2 holds the scaffolding)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from catenc import __version__
from catenc.codegen.c import BufferArg, CRenderer, buffer_args, prelude_tables, region_condition
from catenc.codegen.constants import constant_array
from catenc.codegen.gemm import called_drivers, render_gemm_support, render_work_support
from catenc.codegen.gpu import GpuRenderer, launch_plan, status_offsets, temp_offsets
from catenc.codegen.jinja import environment
from catenc.codegen.names import Renamer, Reserved, collect_names, fresh_names
from catenc.codegen.pack_weights import (
    PackedLayout,
    pack_declarations,
    packed_layout,
    render_pack_functions,
    render_pack_support,
)
from catenc.codegen.prepack import Prepacked, appended_values, prepack
from catenc.codegen.winograd import render_winograd_support, winograd_tiles
from catenc.diagnostics import CatencError
from catenc.frontend.typed import TType
from catenc.ir.nodes import view_stride
from catenc.lower.gpu import TiledGemm
from catenc.lower.loops import iter_stmts
from catenc.plan import EntryPlan, external_weights
from catenc.runtime.conventions import calling_convention
from catenc.schedule.tiles import GemmTiles
from catenc.symbolic import C as C_STYLE
from catenc.symbolic import Call, Expr, Sym, product
from catenc.weights import Placed, layout

_ENV = environment()
WEIGHTS = "weights"  # the parameter that points at the weights file's data section (--weights external)
PACKED_WEIGHTS = "packed_weights"  # ... at the block NAME_pack_weights filled (--weights packed)


@dataclass(frozen=True)
class Parameter:
    name: str
    role: str  # input, weights, output, dim, workspace, workspace_bytes
    ctype: str
    ttype: TType | None = None


def parameters(entry: EntryPlan) -> list[Parameter]:
    """The C arguments of an entry, in ABI order (docs/abi.md)."""
    params = []
    for name, ttype in entry.arguments:
        ctype = ttype.dtype.ctype if ttype.rank == 0 else f"const {ttype.dtype.ctype}*"
        params.append(Parameter(name, "input", ctype, ttype))
    if entry.packs_weights:
        params.append(Parameter(PACKED_WEIGHTS, "packed_weights", "const void*"))
    elif entry.takes_weights:
        params.append(Parameter(WEIGHTS, "weights", "const void*"))
    for name, ttype in entry.program.outputs:
        params.append(Parameter(name, "output", f"{ttype.dtype.ctype}*", ttype))
    params += [Parameter(d, "dim", "int64_t") for d in entry.dims]
    params.append(Parameter("workspace", "workspace", "void*"))
    params.append(Parameter("workspace_bytes", "workspace_bytes", "size_t"))
    params += [Parameter(name, name, ctype) for name, ctype in calling_convention(entry.convention).trailing]
    return params


def header_names(entry: EntryPlan) -> dict[str, str]:
    """How model.h names the entry's arguments: the user's names, each that is a keyword, macro or
    type of C or C++ (or, for CUDA, of CUDA's headers) renamed, so that C and C++ compile it
    (parameter names are no part of the ABI; the manifest's `prototype` is this declaration)."""
    header_reserved = calling_convention(entry.convention).header_reserved
    params = parameters(entry)
    user = [p.name for p in params if p.role in ("input", "output", "dim")]
    own = frozenset(p.name for p in params if p.role not in ("input", "output", "dim"))  # workspace, stream
    reserved = replace(header_reserved, names=header_reserved.names | own)
    return fresh_names(user, reserved, [p.name for p in params])


def prototype(entry: EntryPlan) -> str:
    """The entry's declaration in model.h."""
    return signature(rename_signature(entry, header_names(entry)))


def workspace_prototype(entry: EntryPlan) -> str:
    """The workspace query's declaration in model.h (without its return type)."""
    return workspace_signature(rename_signature(entry, header_names(entry)))


def signature(entry: EntryPlan) -> str:
    """The entry's C signature, in the names its parameters have in entry."""
    args = ", ".join(f"{p.ctype} {p.name}" for p in parameters(entry))
    return f"int {entry.symbol}({args})"


def workspace_signature(entry: EntryPlan) -> str:
    args = ", ".join(f"int64_t {d}" for d in entry.dims) or "void"
    return f"{entry.workspace_symbol}({args})"


def comment_safe(text: str) -> str:
    """Text that cannot end a C comment or smuggle a line break into the header."""
    return re.sub(r"[^\x20-\x7e]", "?", text).replace("*/", "* /").replace("/*", "/ *")


def weights_layout(entries: tuple[EntryPlan, ...]) -> dict[str, Placed]:
    """Where each tensor of the weights file (--weights external) lies in its data section, by name."""
    return {placed.name: placed for placed in layout(external_weights(entries))}


def entry_weights(entry: EntryPlan, placed: Mapping[str, Placed]) -> list[tuple[str, TType, Placed]]:
    """The entry's constants as its code names them, with their types and places in the weights data."""
    if not entry.takes_weights:
        return []
    return [(name, t, placed[d.name]) for (name, t), d in zip(entry.constant_inputs, entry.composite.constants)]


def doc_lines(entry: EntryPlan, placed: Mapping[str, Placed], weights_file: str) -> list[str]:
    comp = entry.composite
    lines = []
    if comp.doc:
        lines += [comment_safe(line) for line in comp.doc.strip().splitlines()]
        lines.append("")
    lines.append(comment_safe(prototype(entry).replace(f"int {entry.symbol}", entry.symbol, 1)))
    for name, ttype in entry.arguments:
        lines.append(f"  input  {name}: {ttype}")
    if entry.packs_weights:
        lines.append(
            f"  packed_weights: {entry.packed_bytes_symbol}() bytes, 64-byte aligned, that {entry.pack_symbol} "
            f"filled from the data section of {weights_file} (catenc_weights_data)"
        )
        lines += [f"  constant {name}: {t} (packed)" for name, t, _ in entry_weights(entry, placed)]
    elif entry.takes_weights:
        lines.append(f"  weights: the data section of {weights_file} (catenc_weights_data), 8-byte aligned")
        lines += [f"  constant {name}: {t} (weights + {p.offset})" for name, t, p in entry_weights(entry, placed)]
    else:
        lines += [f"  constant {name}: {ttype} (baked into the library)" for name, ttype in entry.constant_inputs]
    for name, ttype in entry.program.outputs:
        lines.append(f"  output {name}: {ttype}")
    languages = calling_convention(entry.convention).languages
    for name, renamed in header_names(entry).items():
        lines.append(f"  (argument {name} is declared as {renamed}: {languages} reserves '{name}')")
    for name, expr in entry.derived.items():
        lines.append(f"  where  {name} = {expr}")
    for name, value in entry.specialized.items():
        lines.append(f"  fixed  {name} = {value}")
    for check in entry.checks:
        lines.append(comment_safe(f"  requires {check.render()}   (else CATENC_E_SHAPE)"))
    lines.append(
        f"  workspace: {entry.workspace_symbol}(...) = {entry.schedule.workspace_bytes} bytes, 64-byte aligned"
    )
    return lines


def doc_comment(entry: EntryPlan, placed: Mapping[str, Placed], weights_file: str) -> str:
    body = "\n".join(f" * {line}".rstrip() for line in doc_lines(entry, placed, weights_file))
    return f"/*\n{body}\n */"


def render_header(entries: tuple[EntryPlan, ...], stem: str, source: str, prefix: str = "") -> str:
    guard = "CATENC_" + re.sub(r"[^A-Za-z0-9]", "_", prefix + stem).upper() + "_H"
    placed = weights_layout(entries)
    context = [
        {
            "comment": doc_comment(e, placed, f"{stem}.safetensors"),
            "prototype": prototype(e),
            "workspace_prototype": workspace_prototype(e),
            "threads_symbol": e.threads_symbol,
            "pack": _pack_declarations(e, placed, f"{stem}.safetensors"),
        }
        for e in entries
    ]
    return _ENV.get_template("model.h.j2").render(
        header_name=f"{stem}.h",
        version=__version__,
        source=source,
        guard=guard,
        entries=context,
        weights=any(e.takes_weights for e in entries),
        declarations=list(dict.fromkeys(d for e in entries for d in calling_convention(e.convention).declarations)),
    )


def _pack_declarations(entry: EntryPlan, placed: Mapping[str, Placed], weights_file: str) -> list[str]:
    """The header's declarations of the entry's packing functions, with their doc comments (none
    unless --weights packed)."""
    if not entry.packs_weights:
        return []
    block = f"{entry.packed_bytes_symbol}() = {packed_bytes(entry, placed)} bytes, 64-byte aligned"
    packs = comment_safe(
        f"Fills `{PACKED_WEIGHTS}` ({block}) for {entry.symbol} from `{WEIGHTS}`, the data section of "
        f"{weights_file} (or of a file of the same layout: catenc_weights_data): each constant's values, gemm "
        "panels and Winograd filter transform. Once, before the calls, which then read only the block; "
        "CATENC_E_WORKSPACE when it is too small or not aligned."
    )
    lines = textwrap.wrap(packs, 96)
    comment = "/*\n" + "".join(f" * {line}\n" for line in lines) + " */"
    first, second = pack_declarations(_pack_symbols(entry), WEIGHTS, PACKED_WEIGHTS)
    return [f"/* The bytes of {entry.symbol}'s `{PACKED_WEIGHTS}` block. */\n{first}", f"{comment}\n{second}"]


def packed_bytes(entry: EntryPlan, placed: Mapping[str, Placed]) -> int:
    """The size of the entry's packed weights block (--weights packed)."""
    return packed_layout(entry_weights(entry, placed), _used(entry), prepacked(entry)).nbytes


def _pack_symbols(entry: EntryPlan) -> tuple[str, str]:
    return entry.packed_bytes_symbol, entry.pack_symbol


def _used(entry: EntryPlan) -> set[str]:
    """The buffers the entry's code names."""
    return {b.name for b in entry.schedule.graph.buffers}


def render_source(
    entries: tuple[EntryPlan, ...],
    stem: str,
    source: str,
    renderer: CRenderer,
    suffix: str = ".c",
    profile: bool = False,
) -> str:
    """The source of the entries; with `profile`, a host source also times each kernel call site
    and exports the table (`catenc profile`; catenc/codegen/templates/model.c.j2 says how)."""
    check_entry_names(entries, renderer)
    if renderer.work_groups:
        for entry in entries:
            if entry.packs_weights:
                raise CatencError(
                    f"'{entry.name}': --weights packed packs the constants for the host's gemm, which "
                    f"{renderer.language} kernels do not use; compile with --weights external",
                    entry.composite.loc,
                )
            if entry.constant_symbols:
                raise CatencError(
                    f"'{entry.name}' has constants, which cannot be baked into {renderer.language} source; "
                    "compile with --weights external to pass them as arguments",
                    entry.composite.loc,
                )
        if profile:
            raise CatencError(f"profiling needs a host runtime; {renderer.language} kernels run on a device")
        return render_gpu_source(entries, stem, source, renderer, suffix)
    prelude = _ENV.get_template("prelude.c.j2").render(**prelude_tables())
    prelude += "\n" + _ENV.get_template("vecmath.c.j2").render()
    prelude += "\n" + render_work_support()
    tiles = gemm_tiles(entries)
    if tiles:  # only the drivers a kernel calls: the rest would be compiled for nothing
        calls = ((k, buffer_args(e.schedule.graph.buffers)) for e in entries for k in e.kernels)
        prelude += "\n" + render_gemm_support(tiles, called_drivers(calls), work_support=False)
        if "f32" in tiles:
            prelude += "\n" + render_winograd_support(winograd_tiles(entries), tiles["f32"].vector_bytes // 4)
    if any(e.packs_weights for e in entries):
        prelude += "\n" + render_pack_support()
    placed = weights_layout(entries)
    context = [_entry_context(e, renderer, placed, profile) for e, _ in renamed_entries(entries, renderer)]
    return _ENV.get_template("model.c.j2").render(
        source_name=f"{stem}{suffix}",
        header_name=f"{stem}.h",
        version=__version__,
        source=source,
        prelude=prelude.strip(),
        entries=context,
        profile=profile,
    )


def render_gpu_source(
    entries: tuple[EntryPlan, ...], stem: str, source: str, renderer: GpuRenderer, suffix: str
) -> str:
    """A GPU source: the prelude's helpers for the device, every entry's kernels and, where
    the renderer has one, its host entry (CUDA's launches on a stream)."""
    prelude = _ENV.get_template("prelude.c.j2").render(**prelude_tables(renderer.math_suffix, renderer.device_inline))
    context = []
    placed = weights_layout(entries)
    for entry, names in renamed_entries(entries, renderer):
        original = {new: old for old, new in names.items()}
        buffers, temps = buffer_args(entry.schedule.graph.buffers), temp_offsets(entry.schedule)
        kernels = [renderer.gpu_kernel(k, buffers, temps, original) for k in entry.gpu]
        host = ""
        if renderer.host_template:
            host_context = _gpu_host_context(entry, buffers, temps, original, placed)
            host = _ENV.get_template(renderer.host_template).render(**host_context)
        context.append({"name": entry.name, "kernels": kernels, "host": host})
    engines = {s.engine for e in entries for k in e.gpu for s in k.body if isinstance(s, TiledGemm)}
    for engine in sorted(engines & renderer.support.keys()):
        prelude += "\n" + _ENV.loader.get_source(_ENV, renderer.support[engine])[0]  # plain source, not a template
    return _ENV.get_template("model.gpu.j2").render(
        source_name=f"{stem}{suffix}",
        header_name=f"{stem}.h",
        version=__version__,
        source=source,
        preamble=renderer.preamble,
        prelude=prelude.strip(),
        entries=context,
    )


def check_entry_names(entries: tuple[EntryPlan, ...], renderer: CRenderer) -> None:
    """An entry's name is the user's (its callers link to it), so one the backend reserves is an
    error rather than renamed."""
    for entry in entries:
        if entry.symbol in renderer.entry_reserved:
            what = f"composite name '{entry.name}'"
            if entry.symbol != entry.name:
                what = f"entry name '{entry.symbol}' (--prefix and the composite name)"
            raise CatencError(
                f"{what} is reserved in {renderer.language} (a keyword, built-in or library name) or in C++, "
                "where model.h is also used; rename the composite or give --prefix",
                entry.composite.loc,
            )


def renamed_entries(entries: tuple[EntryPlan, ...], renderer: CRenderer) -> list[tuple[EntryPlan, dict[str, str]]]:
    """Each entry with the user names the renderer reserves, or that collide with a function of
    the file, renamed (codegen/names.py), and its renaming."""
    reserved = renderer.reserved.with_symbols(e.symbol for e in entries)
    return [rename_entry(entry, reserved) for entry in entries]


# ---- renaming an entry's user names in what codegen renders ----

_RENDERED = ("schedule", "kernels", "gpu", "checks")  # the parts of an EntryPlan codegen renders


def user_names(entry: EntryPlan) -> list[str]:
    """The names of the entry that come from the user and reach generated code: its buffers
    (inputs, outputs, intermediates) and its symbols."""
    names = {b.name for b in entry.schedule.graph.buffers} | set(entry.dims)
    for buf in entry.schedule.graph.buffers:
        for dim in buf.shape:
            names |= dim.free_symbols()
    for kernel in entry.kernels:
        names |= set(kernel.symbols)
    return sorted(names)


def rename_signature(entry: EntryPlan, names: Mapping[str, str]) -> EntryPlan:
    """The entry with its arguments (inputs, outputs, dims) renamed: what its C signature shows."""
    if not names:
        return entry
    renamer = Renamer(names)
    program = entry.program
    signature = {
        part: renamer.visit(tuple((names.get(n, n), t) for n, t in getattr(program, part)))
        for part in ("inputs", "outputs")
    }
    return replace(entry, program=replace(program, **signature), dims=renamer.name(entry.dims))


def rename_entry(entry: EntryPlan, reserved: Reserved) -> tuple[EntryPlan, dict[str, str]]:
    """The entry with each user name that is reserved renamed wherever codegen renders it, and
    the renaming; the composite, derived symbols and the pre-schedule graph keep the user's names."""
    users = user_names(entry)
    clashes = [name for name in users if name in reserved]
    if not clashes:
        return entry, {}
    taken = set(users)
    for part in _RENDERED:
        collect_names(getattr(entry, part), taken)
    names = fresh_names(clashes, reserved, taken)
    renamer = Renamer(names)
    entry = replace(entry, **{part: renamer.visit(getattr(entry, part)) for part in _RENDERED})
    return rename_signature(entry, names), names


def _gpu_host_context(entry: EntryPlan, buffers, temps, original: dict[str, str], placed) -> dict:
    launches = []
    for launch in launch_plan(entry, buffers, temps, original):
        actuals = []
        for arg in launch.args:
            actuals.append("(unsigned char*)workspace" if arg.kind == "workspace" else arg.name)
        launches.append(
            {
                "kernel": launch.kernel,
                "groups": launch.groups.to_c(),
                "block": launch.block,
                "shared": launch.shared,
                "args": actuals,
            }
        )
    host = {
        "prototype": signature(entry),
        "workspace_prototype": workspace_signature(entry),
        "workspace_call": f"{entry.workspace_symbol}({', '.join(entry.dims)})",
        "dims": entry.dims,
        "checks": [_render_check(c.lhs, c.op, c.rhs) for c in entry.checks],
        "bindings": weight_bindings(entry, placed, _DEVICE_SCALAR),
        "launches": launches,
        "statuses": [offset.to_c() for offset in status_offsets(entry.schedule)],
        **_size_context(entry),
    }
    return {**host, "host": host}


def gemm_tiles(entries: tuple[EntryPlan, ...]) -> dict[str, GemmTiles]:
    """The tiles of every dtype the entries' packed gemms use: the support code is one per dtype,
    so every entry of a file must have chosen the same."""
    tiles: dict[str, GemmTiles] = {}
    for entry in entries:
        for dtype, chosen in entry.schedule.tiles:
            if tiles.setdefault(dtype, chosen) != chosen:
                raise ValueError(
                    f"{entry.name}: {dtype} gemm tiles {chosen} differ from another entry's {tiles[dtype]}"
                )
    return dict(sorted(tiles.items()))


def _entry_context(entry: EntryPlan, renderer: CRenderer, placed: Mapping[str, Placed], profile: bool = False) -> dict:
    graph = entry.schedule.graph
    args = buffer_args(graph.buffers)
    packed = prepacked(entry)
    kernels = [renderer.kernel(k, with_panels(args, packed, k.name)) for k in entry.kernels if k.shares is None]
    constants, temps = baked_constants(entry, packed)
    pack = ""
    if entry.packs_weights:
        layout = packed_layout(entry_weights(entry, placed), _used(entry), packed)
        temps += packed_bindings(layout)
        pack = render_pack_functions(_pack_symbols(entry), layout, WEIGHTS, PACKED_WEIGHTS)
    else:
        temps += weight_bindings(entry, placed, _HOST_SCALAR)
    for view in graph.buffers:
        if view.view_of is not None:
            base, at = view.view_of
            ctype = view.dtype.ctype
            temps.append(f"const {ctype}* {view.name} = {base} + {at}LL * ({view_stride(graph, view).to_c()});")
    for slot in entry.schedule.slots:
        for name in slot.buffers:
            ctype = graph.buffer(name).dtype.ctype
            temps.append(f"{ctype}* {name} = ({ctype}*)((char*)workspace + {slot.offset.to_c()});")
    scalar_inputs = {name for name, ttype in entry.program.inputs if ttype.rank == 0}
    calls = []
    for n, kernel in enumerate(entry.kernels):
        actuals = [f"&{b}" if b in scalar_inputs else b for b in kernel.buffers] + list(kernel.symbols)
        call = f"{kernel.shares or kernel.name}({', '.join(actuals)})"
        calls.append(f"CATENC_PROFILE_CALL({entry.symbol}_profile_table, {n}, {call})" if profile else call)
    checks = [_render_check(c.lhs, c.op, c.rhs) for c in entry.checks]
    statuses = [b.name for b in graph.buffers if b.role == "status"]
    return {
        "name": entry.name,
        "symbol": entry.symbol,
        "kernels": kernels,
        "prototype": signature(entry),
        "workspace_prototype": workspace_signature(entry),
        "workspace_call": f"{entry.workspace_symbol}({', '.join(entry.dims)})",
        "dims": entry.dims,
        "checks": checks,
        "constants": constants,
        "temps": temps,
        "calls": calls,
        "region": region_condition(entry.kernels),
        "threads_symbol": entry.threads_symbol,
        "statuses": statuses,
        "pack": pack,
        **_size_context(entry),
    }


# How an entry reads a scalar constant at `at` into `name` of C type `ctype`: from host memory, or
# (CUDA, whose weights are device memory) copied back on the stream.
_HOST_SCALAR = "const {ctype} {name} = *(const {ctype}*)({at});"
_DEVICE_SCALAR = (
    "{ctype} {name};\n"
    "if (cudaMemcpyAsync(&{name}, {at}, sizeof {name}, cudaMemcpyDeviceToHost, stream) != cudaSuccess\n"
    "    || cudaStreamSynchronize(stream) != cudaSuccess)\n"
    "    return CATENC_E_DEVICE;"
)


def weight_bindings(entry: EntryPlan, placed: Mapping[str, Placed], scalar: str) -> list[str]:
    """The statements that bind each constant the entry's code reads to its place in the `weights`
    data (--weights external; an unused constant is left out); `scalar` says how a rank-0 one is read."""
    used = _used(entry)
    return [
        _binding(name, ttype, f"(const unsigned char*){WEIGHTS} + {where.offset}", scalar)
        for name, ttype, where in entry_weights(entry, placed)
        if name in used
    ]


def packed_bindings(layout: PackedLayout) -> list[str]:
    """The statements that bind each constant the entry's code reads to its place in the block
    (--weights packed)."""
    at = f"(const unsigned char*){PACKED_WEIGHTS} + {{}}"
    return [_binding(c.name, c.ttype, at.format(c.at), _HOST_SCALAR) for c in layout.constants]


def _binding(name: str, ttype: TType, at: str, scalar: str) -> str:
    """Binds `name` to the constant of type `ttype` at address `at` (`scalar`: how a rank-0 one is read)."""
    ctype = ttype.dtype.ctype
    return (
        f"const {ctype}* {name} = (const {ctype}*)({at});"
        if ttype.rank
        else scalar.format(ctype=ctype, name=name, at=at)
    )


def prepacked(entry: EntryPlan) -> Prepacked:
    """The entry's gemm operands that are constants packed once: at compile time when baked, at load when
    packed (codegen/prepack.py)."""
    graph = entry.schedule.graph
    once = entry.baked or entry.packs_weights
    values = dict(zip((name for name, _ in entry.constant_inputs), entry.constants)) if once else {}
    buffers = {b.name: b for b in graph.buffers}
    aliased = frozenset(b.view_of[0] for b in graph.buffers if b.view_of is not None)
    baked = {n: values[n] for n in buffers if n in values}
    return prepack(entry.kernels, buffers, dict(entry.schedule.tiles), baked, aliased)


def with_panels(args: Mapping[str, BufferArg], packed: Prepacked, function: str) -> dict[str, BufferArg]:
    """The kernel function's buffer arguments, those whose panels it reads marked so."""
    panels = packed.panels.get(function, {})
    return {name: replace(arg, panels=panels[name]) if name in panels else arg for name, arg in args.items()}


def baked_constants(entry: EntryPlan, packed: Prepacked) -> tuple[list[str], list[str]]:
    """The definitions of the entry's baked constants that its code reads (each followed in its array by
    its gemm panels, where `packed` has them), and the statements that bind each one's buffer name to its
    array (an unused constant is left out)."""
    used = {b.name for b in entry.schedule.graph.buffers}
    appended = packed.appended
    definitions, bindings = [], []
    for symbol, (name, ttype), values, decl in zip(
        entry.constant_symbols, entry.constant_inputs, entry.constants, entry.composite.constants
    ):
        if name not in used:
            continue
        comment = comment_safe(f"{entry.name}: constant {decl}")
        if name in packed.replaced:  # read only as panels: the values themselves are not kept
            values = appended_values(appended[name], values)
            comment += f", as its gemm {appended[name].operand} panels only"
        elif name in appended:
            values = np.concatenate([values.reshape(-1), appended_values(appended[name], values)])
            comment += f", then its gemm {appended[name].operand} panels"
        definitions.append(constant_array(symbol, ttype.dtype, values, comment))
        ctype = ttype.dtype.ctype
        bindings.append(
            f"const {ctype}* {name} = {symbol}.values;" if ttype.rank else f"const {ctype} {name} = {symbol}.values[0];"
        )
    return definitions, bindings


def size_exprs(entry: EntryPlan) -> tuple[Expr, ...]:
    """Every size the entry's code computes from its dims, in a fixed order without repeats:
    the bytes of each buffer, the workspace, the offsets in it, loop extents, kernel work,
    gemm extents, GPU launch sizes and both sides of each run-time check. A bare symbol or
    constant cannot overflow and is left out."""
    graph, schedule = entry.schedule.graph, entry.schedule
    found: dict[str, Expr] = {}

    def add(expr: Expr) -> None:
        if not expr.is_const and expr.as_symbol() is None:
            found.setdefault(str(expr), expr)

    for buf in graph.buffers:
        add(product(buf.shape) * buf.dtype.itemsize)
        if buf.view_of is not None:
            add(buf.view_of[1] * view_stride(graph, buf))
    add(schedule.workspace_bytes)
    for slot in schedule.slots:
        add(slot.offset)
    for check in entry.checks:
        add(check.lhs)
        add(check.rhs)
    for kernel in entry.kernels:
        add(kernel.work)
    for gpu in entry.gpu:
        add(gpu.groups)
        add(gpu.groups * gpu.block)
    for kernel in entry.kernels + entry.gpu:
        for stmt in iter_stmts(kernel.body):
            extent = getattr(stmt, "extent", None)
            if isinstance(extent, Expr):
                add(extent)
            contraction = getattr(stmt, "contraction", None)
            if contraction is not None:
                for axes in (contraction.batch, contraction.rows, contraction.cols, contraction.depth):
                    add(product(e for _, e in axes))
                add(product(e for _, e in contraction.rows + contraction.cols))
    return tuple(found.values())


def checked_c(expr: Expr, overflow: str) -> str:
    """expr in C, evaluated in the order `Expr.to_c` evaluates it, with every product, sum and
    difference checked (catenc_size_mul/add/sub of the prelude set *overflow)."""

    def atom(a) -> str:
        if isinstance(a, Sym):
            return a.name
        assert isinstance(a, Call)
        return C_STYLE.funcs[a.func].format(*(checked_c(x, overflow) for x in a.args))

    total = ""
    for monomial, coef in expr.terms:
        factors = [atom(a) for a, power in monomial for _ in range(power)]
        if abs(coef) != 1 or not factors:
            factors.insert(0, C_STYLE.literal(abs(coef)))
        term = factors[0]
        for factor in factors[1:]:
            term = f"catenc_size_mul({term}, {factor}, {overflow})"
        op = "add" if coef > 0 else "sub"
        total = f"catenc_size_{op}({total or '0LL'}, {term}, {overflow})" if total or coef < 0 else term
    return total or "0LL"


def _size_context(entry: EntryPlan) -> dict:
    """The template's size checks: each size evaluated with overflow checks, and the workspace."""
    workspace = entry.schedule.workspace_bytes
    return {
        "size_checks": [checked_c(e, "&catenc_overflow") for e in size_exprs(entry) if e != workspace],
        "workspace_checked": checked_c(workspace, "&catenc_overflow"),
    }


def _render_check(lhs, op, rhs) -> str:
    return f"{lhs.to_c()} {op} {rhs.to_c()}"
