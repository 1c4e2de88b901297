"""One compile: the frontend checks each composite, then the pass pipeline of the -O level
(catenc/passes/pipelines.py) takes it from typed program to loop nests.

`plan_file` returns an `EntryPlan` per compiled composite, holding every stage's result so the
CLI can print any of them and codegen can render the last.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from catenc.diagnostics import CatencError, Loc, closest
from catenc.frontend.check import EntryContext, check_entry
from catenc.frontend.composites import (
    Composite,
    CompositeFile,
    Library,
    check_name,
    composite_file_from_text,
    load_composite_file,
)
from catenc.ir.verify import check_facts
from catenc.lower.gpu import GpuProgram
from catenc.passes.manager import Instruments, Pipeline, VerifyError, run_pipeline
from catenc.passes.pipelines import Target, build_pipeline
from catenc.plan import EntryPlan, FilePlan, Options, WeightsMode
from catenc.resources import package_path
from catenc.runtime.machine import host_machine, toolchain_target
from catenc.schedule.kernels import Tune
from catenc.schedule.tuning_file import apply_tuning
from catenc.symbolic import Facts


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
        with _fewer_collections():
            return _plan_file(path, options)
    except RecursionError:
        raise CatencError(
            f"{path}: the program nests too deeply for catenc (an expression, shape or chain of "
            "statements thousands of levels deep); split it into shorter statements"
        ) from None


_GC_LOCK = threading.Lock()
_gc_state = {"plans": 0, "thresholds": gc.get_threshold()}  # plans running; the thresholds before them


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """The cycle collector looks at young objects every 100,000 allocations instead of 700 while a
    file is planned: the IR is hundreds of thousands of small acyclic nodes, which reference
    counting frees, and scanning them again and again took a fifth of GPT-2's planning time."""
    with _GC_LOCK:
        if _gc_state["plans"] == 0:
            first, *rest = _gc_state["thresholds"] = gc.get_threshold()
            gc.set_threshold(max(first, 100_000), *rest)
        _gc_state["plans"] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_state["plans"] -= 1
            if _gc_state["plans"] == 0:
                gc.set_threshold(*_gc_state["thresholds"])


def load_root(path: str, options: Options) -> CompositeFile:
    """The file to compile: a composite file, or an ONNX model imported as one (docs/onnx.md),
    its entry renamed by `--composite NAME`."""
    if Path(path).suffix.lower() != ".onnx":
        return load_composite_file(path, path)
    if len(options.composites) > 1:
        raise CatencError(
            f"--composite: an ONNX model has one entry, which --composite renames; got {len(options.composites)}"
        )
    name = options.composites[0] if options.composites else None
    if name is not None:
        check_name(name, "composite", Loc("--composite", 0, 0))
    from catenc.onnx.importer import import_model  # the converters load only for an ONNX model

    imported = import_model(path, path, name)
    return composite_file_from_text(imported.text, path, imported.constants)


def _plan_file(path: str, options: Options) -> FilePlan:
    root = load_root(path, options)
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
    instruments = instruments_for(options)
    entries = [plan_entry(comp, library, options, instruments) for comp in comps]
    _check_unique_symbols(entries)
    dumps = tuple((name, "\n\n".join(texts) + "\n") for name, texts in instruments.dumps.items())
    times = instruments.format_times() if options.time_passes else ""
    return FilePlan(root, library, tuple(entries), dumps, times)


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


def plan_entry(
    comp: Composite, library: Library, options: Options, instruments: Instruments | None = None
) -> EntryPlan:
    """Check one composite and run the pipeline of its -O level over it."""
    instruments = instruments or instruments_for(options)
    ctx = EntryContext(library)
    fixed = {k: v for k, v in options.defines.items()}
    program, bindings = check_entry(comp, ctx, fixed)
    free = [s for s in comp.symbols() if s not in comp.derived and s not in _fixed_symbols(comp, fixed)]
    derived = {name: bindings.symbols[name] for name in comp.derived}
    specialized = {s: int(fixed[s]) for s in comp.symbols() if s in fixed and s not in comp.derived}
    symbol = options.prefix + comp.name
    held = options.weights is not WeightsMode.EXTERNAL  # constants whose gemm panels are not packed per call
    baked = frozenset(d.name for d in comp.constants) if held else frozenset()
    pipeline = pipeline_for(options, symbol, check_facts(ctx.checks), baked)
    try:
        trace = run_pipeline(pipeline, program, instruments)
    except VerifyError as error:
        raise VerifyError(f"{comp.name}: {error}") from None
    graph, final = trace[0], trace[-1]
    loops = final.loops if isinstance(final, GpuProgram) else final
    return EntryPlan(
        comp,
        program,
        symbol,
        tuple(free),
        derived,
        specialized,
        tuple(ctx.checks),
        graph,
        loops.schedule,
        loops.kernels,
        final.kernels if isinstance(final, GpuProgram) else (),
        options.runtime.calling_convention,
        tuple(comp.constant_values[d.name] for d in comp.constants),
        options.weights,
    )


def pipeline_for(
    options: Options, symbol: str = "", facts: Facts | None = None, baked: frozenset[str] = frozenset()
) -> Pipeline:
    """The pipeline of the options' level, runtime and tuner (kernels named `<symbol>_k<n>`; `baked`: the
    constants the library holds)."""
    tune = tune_of(options)
    return build_pipeline(options.opt, Target.of(options.runtime, options.config), symbol, facts, tune, baked)


def tune_of(options: Options) -> Tune | None:
    """The options' tuner, else their tuning file's decisions for this machine and toolchain."""
    if options.tune is not None or options.tuning is None:
        return options.tune
    return apply_tuning(options.tuning, host_machine(), toolchain_target(options.runtime, options.config))


def print_pipeline(options: Options) -> str:
    """--print-passes: the pipeline the options give, the disabled passes marked."""
    return pipeline_for(options).format(options.disabled_passes)


def instruments_for(options: Options) -> Instruments:
    """The pass instruments the options ask for; CATENC_VERIFY_IR=1 turns the verifier on too."""
    instruments = Instruments(
        disabled=frozenset(options.disabled_passes),
        dump_after=frozenset(options.dump_after),
        verify=options.verify_ir or os.environ.get("CATENC_VERIFY_IR") == "1",
        timing=options.time_passes,
    )
    try:
        instruments.check(pipeline_for(options))
    except ValueError as error:
        raise CatencError(str(error)) from None
    return instruments


def _fixed_symbols(comp: Composite, fixed: dict[str, object]) -> set[str]:
    return {s for s in comp.symbols() if s in fixed}


def _check_unique_symbols(entries: list[EntryPlan]) -> None:
    seen: dict[str, str] = {}
    for entry in entries:
        names = [entry.symbol, entry.workspace_symbol, *entry.constant_symbols] + [k.name for k in entry.kernels]
        names += [entry.threads_symbol] if entry.threads_symbol else []
        for name in names:
            if name in seen and seen[name] != entry.name:
                raise CatencError(
                    f"the C symbol '{name}' of '{entry.name}' clashes with one of '{seen[name]}'; rename one of them",
                    entry.composite.loc,
                )
            seen[name] = entry.name
