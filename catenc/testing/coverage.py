"""`catenc test-runtime`: run the op library through a runtime and report coverage (docs/cli.md).

Every op (a composite of `ops/` or of an `--ops` directory) is instantiated per dtype of its
type variable, and per batch rank 0-2 when it is rank-polymorphic, as a wrapper composite with
concrete shapes. The wrappers of one op file and dtype compile into one library; each runs at
several size bindings (all ones, the op's test sizes, and those plus two) against the op's
`test.reference`. Elementwise functions and operators of the body language get rows of their own.

A runtime whose toolchain builds binaries but whose target this machine lacks (cuda without a
GPU) reports `compiled` cells; one whose source only a driver compiles, at load time (opencl),
reports `not run` cells when the driver or pyopencl is missing: nothing checked them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from catenc import __version__
from catenc.build import BuildRequest, InternalError, build
from catenc.diagnostics import CatencError
from catenc.driver import plan_entry, search_dirs
from catenc.dtypes import DTYPES
from catenc.frontend.composites import Composite, Library, load_composite_file
from catenc.loader import CatencStatusError, ManifestError, load
from catenc.plan import EntryPlan, FilePlan, Options
from catenc.registry import ROWS, Row
from catenc.resources import package_path
from catenc.runtime.descriptor import Runtime
from catenc.schedule.kernels import Tune
from catenc.testing.check import entry_sizes, run_once

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

STATUSES = ("pass", "fail", "error", "compiled", "not_run", "unsupported", "xfail", "xpass")
BATCH_SIZES = (3, 2)


@dataclass
class Cell:
    status: str
    max_rel_error: float | None = None
    reason: str = ""


@dataclass
class OpRow:
    name: str
    family: str
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass(frozen=True)
class NotRun:
    """Why nothing of a runtime could be checked on this machine, and what to install."""

    reason: str
    advice: str


@dataclass(frozen=True)
class Case:
    """One op at one dtype: its wrappers (one per batch rank) live in `text`."""

    op: Composite
    family: str
    dtype: str
    wrappers: tuple[str, ...]
    text: str


# ---- which ops and dtypes ----------------------------------------------------------------------


BUILTIN_ROWS = Path(__file__).resolve().parent / "builtin_rows"


def library_ops(extra_dirs: tuple[str, ...], primitives: bool = True) -> list[tuple[str, Composite, str]]:
    """(family, composite, search directory) of every op: bundled first, then --ops dirs, then
    the rows of the language's own functions (catenc/testing/builtin_rows and the registry's)."""
    found: dict[str, tuple[str, Composite, str]] = {}
    dirs = [(str(package_path("ops")), "catenc:ops")] + [(d, d) for d in extra_dirs]
    if primitives:
        dirs.append((str(BUILTIN_ROWS), "catenc:builtin_rows"))
    for directory, display in dirs:
        for path in sorted(Path(directory).glob("*")):
            if path.suffix not in (".toml", ".yaml", ".yml"):
                continue
            file = load_composite_file(str(path), f"{display}/{path.name}")
            for name, comp in file.composites.items():
                found[name] = (path.stem, comp, directory)
    if primitives:
        for name, comp in registry_rows().items():
            found[name] = ("primitives", comp, str(BUILTIN_ROWS))
    return list(found.values())


def registry_rows() -> dict[str, Composite]:
    """The rows of the language's own ops, one composite `prim_<row>` per row of the registry."""
    text = "\n".join(_row_text(row) for row in ROWS)
    with tempfile.TemporaryDirectory(prefix="catenc-rows-") as scratch:
        path = Path(scratch) / "primitives.toml"
        path.write_text(text)
        return load_composite_file(str(path), "catenc:registry/primitives.toml").composites


def _row_text(row: Row) -> str:
    names = ["x", "w"][: row.operands]
    dims = "N" if row.reduced else "N, C"
    reference = f"import math\ndef reference({', '.join(names)}, **_):\n    return {row.reference}"
    lines = [
        f"[composite.prim_{row.name}]",
        f"types = {{ T = {json.dumps(list(row.dtypes))} }}",
        f"inputs = {json.dumps([f'{name}: T[N, C]' for name in names])}",
        f"outputs = {json.dumps([f'y: {row.output}[{dims}]'])}",
        f"body = {json.dumps(row.body)}",
        f"test.reference = {json.dumps(reference)}",
    ]
    if row.ranges:
        lines.append("test.ranges = { " + ", ".join(f"{name} = [{lo}, {hi}]" for name, lo, hi in row.ranges) + " }")
    return "\n".join(lines) + "\n"


def op_dtypes(comp: Composite) -> tuple[str | None, list[str]]:
    """The type variable of an op (None if it has none) and the dtypes of its columns."""
    if comp.types:
        var = next(iter(comp.types))
        return var, list(comp.types[var])
    first = (comp.inputs or comp.outputs)[0]
    return None, [first.dtype]


def load_expectations(runtime: Runtime) -> dict[tuple[str, str], tuple[str, str]]:
    """(op, dtype) -> (status, reason) from `<runtime>.expect.toml` beside the descriptor."""
    if not runtime.source_file:
        return {}
    path = Path(runtime.source_file).with_suffix(".expect.toml")
    if not path.is_file():
        return {}
    data = tomllib.loads(path.read_text())
    out = {}
    for item in data.get("expect", []):
        out[(item["op"], item["dtype"])] = (item.get("status", "xfail"), item.get("reason", ""))
    return out


# ---- wrappers ----------------------------------------------------------------------------------


def wrapper_text(op: Composite, var: str | None, dtype: str, rank: int | None) -> tuple[str, str]:
    """(name, TOML text) of a composite that calls `op` with concrete shapes."""
    name = f"t_{op.name}_{dtype}" + ("" if rank is None else f"_r{rank}")
    batch = [f"batch{k}" for k in range(rank or 0)]

    def decl(d) -> str:
        dt = dtype if d.dtype == var else (d.dtype if d.dtype in DTYPES else op.types[d.dtype][0])
        dims = (batch if d.batch else []) + [str(x) for x in d.dims]
        return f"{d.name}: {dt}[{', '.join(dims)}]"

    where = [f"{c.lhs} {c.op} {c.rhs}" for c in op.constraints] + [f"{k} = {v}" for k, v in op.derived.items()]
    lines = [
        f"[composite.{name}]",
        f"inputs = {json.dumps([decl(d) for d in op.inputs])}",
        f"outputs = {json.dumps([decl(d) for d in op.outputs])}",
    ]
    if where:
        lines.append(f"where = {json.dumps(where)}")
    if op.params:
        params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in op.params.items())
        lines.append(f"params = {{ {params} }}")
    outs = ", ".join(d.name for d in op.outputs)
    args = ", ".join(d.name for d in op.inputs)
    lines.append(f"body = {json.dumps(f'{outs} = {op_alias(op)}({args})')}")
    return name, "\n".join(lines) + "\n"


def op_alias(op: Composite) -> str:
    """The name a wrapper calls its op by: reaches the op even when a built-in has its name."""
    return f"catenc_op_{op.name}"


def name_matches(name: str, pattern: str | None) -> bool:
    """Whether one of the comma-separated patterns matches, as a glob or a substring."""
    pieces = [p for p in (pattern or "").split(",") if p]
    return not pieces or any(fnmatch.fnmatch(name, p) or p in name for p in pieces)


def make_cases(ops, dtype_filter: set[str] | None, pattern: str | None) -> list[Case]:
    cases = []
    for family, op, _ in ops:
        if not name_matches(op.name, pattern):
            continue
        var, dtypes = op_dtypes(op)
        for dtype in dtypes:
            if dtype_filter and dtype not in dtype_filter:
                continue
            ranks = (0, 1, 2) if op.is_batched else (None,)
            pieces = [wrapper_text(op, var, dtype, r) for r in ranks]
            cases.append(Case(op, family, dtype, tuple(n for n, _ in pieces), "\n".join(t for _, t in pieces)))
    return cases


# ---- sizes -------------------------------------------------------------------------------------


def size_bindings(entry: EntryPlan, op: Composite) -> list[dict[str, int]]:
    """All ones, the op's test sizes, and those plus two (values off any vector width)."""
    given = {k: int(v) for k, v in op.test.get("sizes", {}).items()}
    base = {d: given.get(d, BATCH_SIZES[int(d[5:])] if d.startswith("batch") else 5) for d in entry.dims}
    candidates = [dict.fromkeys(entry.dims, 1), base, {k: v + 2 for k, v in base.items()}]
    bindings = []
    for candidate in candidates:
        try:
            entry_sizes(entry, candidate)
        except CatencError:
            continue  # the op's constraints exclude these sizes
        if candidate not in bindings:
            bindings.append(candidate)
    return bindings


# ---- running -----------------------------------------------------------------------------------


def run_entry(entry: EntryPlan, op: Composite, function, seed: int) -> tuple[bool, float]:
    """Every size binding of one wrapper; (all passed, max relative error)."""
    bindings = size_bindings(entry, op)
    if not bindings:
        raise CatencError(f"no size binding satisfies the constraints of '{op.name}'")
    checks = [check for sizes in bindings for check in run_once(entry, op, function, sizes, seed)[0]]
    return all(c.ok for c in checks), max((c.max_rel for c in checks), default=0.0)


def not_run(runtime: Runtime, config: dict[str, str]) -> NotRun | None:
    """Why the cells of a runtime whose source only a driver compiles, when it is loaded (OpenCL),
    are not run at all, and what to install (`Runtime.unavailable`). None when the runtime runs here,
    or when a toolchain of its own builds what it emits (its cells then say `compiled`, as cuda's do
    without a GPU)."""
    if runtime.binary_kinds or runtime.runnable(config):
        return None
    missing = runtime.unavailable(config)
    return NotRun(*missing) if missing else None


@dataclass
class Coverage:
    runtime: Runtime
    config: dict[str, str]
    toolchain: str
    rows: list[OpRow]
    not_run: NotRun | None = None

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for row in self.rows:
            for cell in row.cells.values():
                counts[cell.status] += 1
        return counts

    @property
    def regressed(self) -> bool:
        counts = self.counts()
        return bool(counts["fail"] or counts["error"] or counts["xpass"])


def run_coverage(
    runtime: Runtime,
    config: dict[str, str],
    ops_dirs: tuple[str, ...] = (),
    dtypes: set[str] | None = None,
    pattern: str | None = None,
    progress: Callable[[int, int, str], None] = lambda done, total, line: None,
    primitives: bool = True,
    compile_only: bool = False,
    tune: Tune | None = None,
) -> Coverage:
    """Every op case through the runtime; compile_only builds them and runs none; `tune`
    changes every kernel's schedule (a tuner, or a test of the schedule seam)."""
    cases = make_cases(library_ops(ops_dirs, primitives), dtypes, pattern)
    if not cases:
        what = f"no op matches '{pattern}'" if pattern else "no op to test"
        raise CatencError(what + (f" with dtypes {', '.join(sorted(dtypes))}" if dtypes else ""))
    expectations = load_expectations(runtime)
    rows: dict[str, OpRow] = {}
    for case in cases:
        rows.setdefault(case.op.name, OpRow(case.op.name, case.family))
    groups: dict[tuple[str, str], list[Case]] = {}
    for case in cases:
        if case.dtype not in runtime.dtypes or case.op.name in runtime.unsupported_ops:
            rows[case.op.name].cells[case.dtype] = Cell("unsupported", reason="declared by the runtime")
            continue
        groups.setdefault((case.family, case.dtype), []).append(case)
    options = Options(runtime, config, opt="2", include_dirs=ops_dirs + (str(BUILTIN_ROWS),), tune=tune)
    runnable = runtime.runnable(config) and not compile_only
    blocked = not_run(runtime, config)
    with tempfile.TemporaryDirectory(prefix="catenc-coverage-") as scratch:
        jobs = [(Path(scratch) / f"{family}_{dtype}", group) for (family, dtype), group in groups.items()]
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:  # the compilers run apart
            built = pool.map(lambda job: _build_group(job[0], job[1], options, runnable), jobs)  # as groups finish
            for done, ((_, group), (plans, library, errors)) in enumerate(zip(jobs, built), 1):
                for case in group:
                    cell = _run_case(case, plans, library, errors, runnable, blocked)
                    cell = _apply_expectation(cell, expectations.get((case.op.name, case.dtype)))
                    rows[case.op.name].cells[case.dtype] = cell
                statuses = ", ".join(f"{c.op.name} {_cell_text(rows[c.op.name].cells[c.dtype])}" for c in group)
                progress(done, len(jobs), f"{group[0].family} {group[0].dtype}: {statuses}")
    toolchain = runtime.toolchain_version(config)
    ordered = sorted(rows.values(), key=lambda r: (r.family, r.name))
    return Coverage(runtime, config, toolchain, ordered, blocked)


def _build_group(directory: Path, cases: list[Case], options: Options, runnable: bool):
    """Compile the wrappers of one family and dtype into one library (loaded when `runnable`,
    decided once by the caller: probing a device from the pool's threads races the import); a
    wrapper whose op does not compile is left out and remembered with its error."""
    directory.mkdir(parents=True)
    path = directory / "ops.toml"
    path.write_text("\n".join(c.text for c in cases))
    errors: dict[str, str] = {}
    root = load_composite_file(str(path), path.name)
    library = Library(root, search_dirs(options.include_dirs))
    library.aliases.update({op_alias(case.op): case.op for case in cases})
    plans: dict[str, EntryPlan] = {}
    for case in cases:
        for name in case.wrappers:
            try:
                plans[name] = plan_entry(library.local[name], library, options)
            except CatencError as err:
                errors[name] = err.message
    entries = tuple(plans.values())
    try:
        written = build(
            FilePlan(root, library, entries),
            options,
            BuildRequest(str(path), str(directory), ("c", "h", "manifest", "so")),
        )
    except (InternalError, CatencError):
        return _build_one_by_one(directory, root, library, plans, options, errors, runnable)
    if not runnable:
        return plans, None, errors
    try:
        return plans, load(written["manifest"]), errors
    except (OSError, ManifestError) as err:  # e.g. built with flags whose runtime cannot be loaded here
        reason = f"the library does not load: {err}"
        return {}, None, {**errors, **dict.fromkeys(plans, reason)}


def _build_one_by_one(directory, root, library, plans, options, errors, runnable: bool):
    """When the group's library does not build, build each wrapper alone to find the culprits."""
    good = {}
    for name, plan in plans.items():
        sub = directory / name
        sub.mkdir()
        try:
            build(
                FilePlan(root, library, (plan,)),
                options,
                BuildRequest(str(sub / f"{name}.toml"), str(sub), ("c", "h", "manifest", "so")),
            )
            good[name] = plan
        except (InternalError, CatencError) as err:
            errors[name] = str(err).splitlines()[0]
    libs = {name: load(sub / f"{name}.manifest.json") for name in good} if runnable else None
    return good, libs, errors


def _run_case(case: Case, plans, library, errors, runnable: bool, blocked: NotRun | None) -> Cell:
    failed = [errors[w] for w in case.wrappers if w in errors]
    if failed:
        return Cell("error", reason=failed[0])
    if blocked is not None:
        return Cell("not_run", reason=blocked.reason)
    if not runnable:
        return Cell("compiled")
    worst, ok = 0.0, True
    for seed, name in enumerate(case.wrappers):
        lib = library[name] if isinstance(library, dict) else library
        try:
            good, rel = run_entry(plans[name], case.op, lib[name], seed)
        except (CatencStatusError, CatencError) as err:
            return Cell("error", reason=str(err).splitlines()[0])
        except Exception as err:  # the op's reference is user code
            return Cell("error", reason=f"reference failed: {type(err).__name__}: {err}")
        worst, ok = max(worst, rel), ok and good
    return Cell("pass" if ok else "fail", worst)


def _apply_expectation(cell: Cell, expected: tuple[str, str] | None) -> Cell:
    if expected is None:
        return cell
    status, reason = expected
    if cell.status in ("fail", "error"):
        return Cell("xfail", cell.max_rel_error, reason)
    if cell.status == "pass" and status == "xfail":
        return Cell("xpass", cell.max_rel_error, f"expected to fail ({reason}) but passed")
    return cell


# ---- reports -----------------------------------------------------------------------------------


def _cell_text(cell: Cell | None) -> str:
    if cell is None:
        return ""
    if cell.status in ("pass", "fail", "xpass") and cell.max_rel_error is not None:
        return f"{cell.status} ({cell.max_rel_error:.1e})"
    if cell.status == "not_run":
        return f"not run: {cell.reason}"
    return cell.status


def summary_line(coverage: Coverage) -> str:
    c = coverage.counts()
    return (
        f"{c['pass']} passed, {c['fail']} failed, {c['error']} error, {c['unsupported']} unsupported, "
        f"{c['xfail']} xfail, {c['xpass']} xpass, {c['compiled']} compiled"
        + (f", {c['not_run']} not run ({coverage.not_run.reason})" if coverage.not_run and c["not_run"] else "")
    )


def not_run_note(coverage: Coverage) -> str:
    """Why cells were not run and what to install ("" when none was left out)."""
    blocked = coverage.not_run
    if blocked is None or not coverage.counts()["not_run"]:
        return ""
    return blocked.reason + (f"; to run them, {blocked.advice}" if blocked.advice else "")


def render_markdown(coverage: Coverage) -> str:
    order = ["f32", "f64", "f16", "bf16"] + [d for d in DTYPES if d not in ("f32", "f64", "f16", "bf16")]
    columns = [d for d in order if any(d in row.cells for row in coverage.rows)]
    config = ", ".join(f"{k}={v}" for k, v in sorted(coverage.config.items()) if v) or "defaults"
    lines = [
        f"# Op coverage: runtime `{coverage.runtime.name}`",
        "",
        f"- runtime: `{coverage.runtime.name}` ({coverage.runtime.language}), config: {config}",
        f"- toolchain: {coverage.toolchain}",
        f"- catenc: {__version__}",
        "",
        f"**{summary_line(coverage)}**",
        "",
        *([f"Not run: {not_run_note(coverage)}.", ""] if not_run_note(coverage) else []),
        "Cells: `pass (max relative error)`, `fail` (wrong values), `error` (compile or run failure), "
        "`compiled` (built, not runnable here), `not run` (nothing could build or run it here: see the "
        "summary), `unsupported` (declared by the runtime), `xfail` "
        "(expected, see below); empty: the op does not declare that dtype.",
        "",
    ]
    for family in dict.fromkeys(row.family for row in coverage.rows):
        rows = [r for r in coverage.rows if r.family == family]
        used = [d for d in columns if any(d in r.cells for r in rows)]
        lines += [f"## {family}", "", "| op | " + " | ".join(used) + " |", "|---|" + "---|" * len(used)]
        for row in rows:
            cells = [_cell_text(row.cells.get(d)) for d in used]
            lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
        lines.append("")
    notes = [
        (row.name, d, c)
        for row in coverage.rows
        for d, c in row.cells.items()
        if c.reason and c.status not in ("unsupported", "not_run")
    ]
    if notes:
        lines += ["## Notes", ""]
        lines += [f"- `{name}` {dtype}: {cell.status}: {cell.reason}" for name, dtype, cell in notes]
        lines.append("")
    return "\n".join(lines)


def render_json(coverage: Coverage) -> str:
    data = {
        "schema": "catenc.coverage/1",
        "catenc_version": __version__,
        "runtime": {"name": coverage.runtime.name, "config": coverage.config, "toolchain": coverage.toolchain},
        "summary": coverage.counts(),
        "ops": [
            {
                "name": row.name,
                "family": row.family,
                "cells": {
                    d: {"status": c.status, "max_rel_error": c.max_rel_error, "reason": c.reason}
                    for d, c in row.cells.items()
                },
            }
            for row in coverage.rows
        ],
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def progress_printer(stream=sys.stdout) -> Callable[[int, int, str], None]:
    """A progress bar rewritten in place on a terminal; one plain line per group otherwise."""
    if stream.isatty():

        def bar(done: int, total: int, line: str) -> None:
            filled = 30 * done // max(total, 1)
            text = f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {line}"
            print(f"\r\033[K{text[:110]}", end="", file=stream, flush=True)

        return bar
    return lambda done, total, line: print(f"[{done}/{total}] {line}", file=stream, flush=True)
