"""The pipeline for one composite file: frontend -> ir -> schedule -> lower, per entry.

`plan_file` returns an `EntryPlan` per compiled composite, holding every stage's result so the
CLI can print any of them and codegen can render the last.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from catenc.diagnostics import CatencError, closest
from catenc.frontend.check import EntryContext, check_entry
from catenc.frontend.composites import (
    Composite,
    Library,
    load_composite_file,
)
from catenc.ir.build import build_graph
from catenc.lower.gpu import lower_gpu
from catenc.lower.loops import lower_schedule
from catenc.lower.share import share_identical_kernels
from catenc.lower.vectorize import split_reduction_lanes
from catenc.plan import EntryPlan, FilePlan, Options
from catenc.resources import package_path
from catenc.schedule.contractions import Contraction
from catenc.schedule.kernels import schedule_graph
from catenc.schedule.tiles import pack_elements
from catenc.symbolic import Expr, product


def search_dirs(include_dirs: tuple[str, ...]) -> list[tuple[str, str]]:
    dirs = []
    for directory in include_dirs:
        if not Path(directory).is_dir():
            raise CatencError(f"-I {directory}: no such directory")
        dirs.append((directory, directory))
    dirs.append((str(package_path("ops")), "catenc:ops"))
    return dirs


def plan_file(path: str, options: Options) -> FilePlan:
    try:
        return _plan_file(path, options)
    except RecursionError:
        raise CatencError(
            f"{path}: the program nests too deeply for catenc (an expression, shape or chain of "
            "statements thousands of levels deep); split it into shorter statements"
        ) from None


def _plan_file(path: str, options: Options) -> FilePlan:
    root = load_composite_file(path, path)
    library = Library(root, search_dirs(options.include_dirs))
    own = dict(root.composites)
    for inc_name, comp in library.local.items():
        own.setdefault(inc_name, comp)
    names = list(options.composites) or [n for n, c in root.composites.items() if not c.is_batched]
    comps = []
    for name in names:
        comp = library.local.get(name)
        if comp is None:
            raise CatencError(f"--composite {name}: no composite of that name in {path}{closest(name, list(own))}")
        if comp.is_batched:
            raise CatencError(
                f"--composite {name}: '{name}' is rank-polymorphic (declared with '...'), so it has no C entry; "
                "call it from a composite with concrete shapes",
                comp.loc,
            )
        comps.append(comp)
    check_defines(comps, options.defines)
    entries = [plan_entry(comp, library, options) for comp in comps]
    _check_unique_symbols(entries)
    return FilePlan(root, library, tuple(entries))


def check_defines(comps: list[Composite], defines: dict[str, object]) -> None:
    """Each -D names a free symbol, a param or a dtype variable of a compiled composite; a symbol
    that `where` derives cannot be fixed (docs/cli.md)."""
    known: list[str] = []
    for comp in comps:
        known += [n for n in [*comp.symbols(), *comp.params, *comp.types] if n not in known]
    for name, value in defines.items():
        if name not in known:
            raise CatencError(
                f"-D {name}={value}: no composite compiled here has a symbol, param or dtype variable "
                f"'{name}'{closest(name, known)}"
            )
        for comp in comps:
            if name in comp.derived:
                raise CatencError(
                    f"-D {name}={value}: '{name}' is derived by 'where' ({name} = {comp.derived[name]}); "
                    "fix the symbols it is derived from instead",
                    comp.derived_locs[name],
                )


def plan_entry(comp: Composite, library: Library, options: Options) -> EntryPlan:
    ctx = EntryContext(library)
    fixed = {k: v for k, v in options.defines.items()}
    program, bindings = check_entry(comp, ctx, fixed)
    free = [s for s in comp.symbols() if s not in comp.derived and s not in _fixed_symbols(comp, fixed)]
    derived = {name: bindings.symbols[name] for name in comp.derived}
    specialized = {s: int(fixed[s]) for s in comp.symbols() if s in fixed and s not in comp.derived}
    graph = build_graph(program)
    fuse = options.opt != "0"
    tiles = options.gemm_tiles

    parallel = options.runtime.parallel(options.config)

    def pack_size(c: Contraction) -> Expr:
        extent = [product([e for _, e in axes]) for axes in (c.rows, c.cols, c.depth)]
        elements = pack_elements(tiles[c.dtype.name], *extent)
        if not (c.batch and parallel):
            return elements
        per = 64 // c.dtype.itemsize  # each batch thread's panels start 64-byte aligned
        return options.runtime.renderer.batch_slots * ((elements + per - 1) // per) * per

    runtime = options.runtime
    gpu = runtime.target == "gpu"
    schedule = schedule_graph(
        graph,
        fuse=fuse,
        contractions=bool(tiles) or (gpu and fuse),
        pack_size=pack_size if tiles else None,
        views=fuse and not gpu,
    )
    symbol = options.prefix + comp.name
    kernels = lower_schedule(schedule, parallel=not gpu)
    kernels = tuple(replace(kernel, name=f"{symbol}_k{n}") for n, kernel in enumerate(kernels))
    if fuse and not gpu:
        storage = {b.name: b.dtype for b in schedule.graph.buffers}
        kernels = tuple(split_reduction_lanes(k, options.vector_lanes, storage) for k in kernels)
        kernels = share_identical_kernels(kernels, {b.name: b for b in schedule.graph.buffers})
    gpu_kernels = ()
    if gpu:
        block, tile = runtime.block_size(options.config), runtime.gemm_tile(options.config)
        gpu_kernels = tuple(lower_gpu(kernel, block, tile) for kernel in kernels)
    return EntryPlan(
        comp,
        program,
        symbol,
        tuple(free),
        derived,
        specialized,
        tuple(ctx.checks),
        graph,
        schedule,
        kernels,
        gpu_kernels,
        runtime.calling_convention,
    )


def _fixed_symbols(comp: Composite, fixed: dict[str, object]) -> set[str]:
    return {s for s in comp.symbols() if s in fixed}


def _check_unique_symbols(entries: list[EntryPlan]) -> None:
    seen: dict[str, str] = {}
    for entry in entries:
        names = [entry.symbol, entry.workspace_symbol] + [k.name for k in entry.kernels]
        for name in names:
            if name in seen and seen[name] != entry.name:
                raise CatencError(
                    f"the C symbol '{name}' of '{entry.name}' clashes with one of '{seen[name]}'; rename one of them",
                    entry.composite.loc,
                )
            seen[name] = entry.name
