"""`catenc tune`: search the schedule of a file's entries on this machine and write what was
found to a tuning file (docs/cli.md, "Tuning"). The search is catenc/tune/search.py; this
module plans the file, wires the measurements and reads and writes the file."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.outputs import write_atomic
from catenc.passes.pipelines import Target
from catenc.plan import EntryPlan, FilePlan, Options
from catenc.profile import checked_sizes, profiled_library, time_entry
from catenc.runtime.machine import host_machine, toolchain_target
from catenc.schedule.kernels import Schedule
from catenc.schedule.tuning_file import Tuning, load_tuning
from catenc.tune.search import Knob, Measure, Progress, Search, Timings, collect_knobs, entries_of, resume, run_search


@dataclass(frozen=True)
class TuneResult:
    tuning: Tuning  # the whole file as written
    knobs: tuple[Knob, ...]
    rounds: int
    interrupted: bool


def heuristic_schedules(path: str, options: Options) -> tuple[FilePlan, list[Schedule]]:
    """The plan, and each entry's schedule as the tuner sees it (at the pass that applies a tuning)."""
    seen: list[Schedule] = []

    def record(schedule: Schedule) -> Schedule:
        seen.append(schedule)
        return schedule

    return plan_file(path, replace(options, tune=record, tuning=None)), seen


def check_output(output: str) -> None:
    """`-o` names a file that can be written, checked before the search: not a directory, and
    in a directory (or one to be created) where this process can create files."""
    path = Path(output)
    if path.is_dir():
        raise CatencError(f"-o {output}: is a directory; give the path of the tuning file to write")
    existing = next(parent for parent in path.absolute().parents if parent.exists())
    if not existing.is_dir():
        raise CatencError(f"-o {output}: {existing} is not a directory")
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as error:
        raise CatencError(f"-o {output}: cannot write in {existing}: {error.strerror}") from None


def check_bindings(plan: FilePlan, bindings: Sequence[dict[str, int]]) -> None:
    """Each binding gives every free size of one or more entries (and names no other symbol);
    every entry is given all its free sizes by some binding; each entry's sizes meet its
    constraints, fit int64 and this machine's memory (`checked_sizes`)."""
    free = list(dict.fromkeys(dim for entry in plan.entries for dim in entry.dims))
    for sizes in bindings:
        unknown = [name for name in sizes if name not in free]
        if unknown:
            raise CatencError(
                f"--sizes {_format_binding(sizes)}: {', '.join(unknown)} is not a free size here "
                f"(free sizes: {', '.join(free) or 'none'})"
            )
    for entry in plan.entries:
        if not any(set(entry.dims) <= set(sizes) for sizes in bindings or [{}]):
            raise CatencError(
                f"{entry.name} has free sizes {', '.join(entry.dims)}: give them all in one --sizes "
                '"' + ",".join(f"{dim}=..." for dim in entry.dims) + '"'
            )
        for sizes in bindings or [{}]:
            if entry.name in covered(plan, sizes):
                checked_sizes(entry, _given(entry, sizes))


def covered(plan: FilePlan, sizes: dict[str, int]) -> tuple[str, ...]:
    """The entries a binding gives every free size of."""
    return tuple(entry.name for entry in plan.entries if set(entry.dims) <= set(sizes))


def _format_binding(sizes: dict[str, int]) -> str:
    return ",".join(f"{name}={value}" for name, value in sizes.items())


def tune_file(
    path: str,
    options: Options,
    bindings: Sequence[dict[str, int]],
    budget: float,
    output: str,
    measure_for: MeasureFor,
    progress: Progress | None = None,
) -> TuneResult:
    """Search with the measurements `measure_for(plan, bindings)` makes, then merge the entries
    into `output` (its entries for other kernels, machines or toolchains are kept; measured
    candidates of this one count as measured: a resumed run)."""
    check_output(output)
    previous = load_tuning(output) if Path(output).is_file() else Tuning(path=output)
    target = Target.of(options.runtime, options.config)
    plan, schedules = heuristic_schedules(path, options)
    check_bindings(plan, bindings)
    bindings = list(bindings) or [{}]
    measure = measure_for(plan, bindings)
    knobs = collect_knobs(schedules, bindings, target.threads, target.vector_lanes)
    search = Search(knobs)
    machine, toolchain = host_machine(), toolchain_target(options.runtime, options.config)
    resume(search, [e for e in previous.entries if e.machine == machine and e.target == toolchain])
    interrupted = False
    try:
        run_search(search, measure, budget, progress)
    except KeyboardInterrupt:
        interrupted = True
    tuning = previous.merged(entries_of(search, machine, toolchain, bindings))
    write_atomic(Path(output), tuning.dumps())
    return TuneResult(tuning, tuple(knobs), search.rounds, interrupted)


MeasureFor = Callable[[FilePlan, list[dict[str, int]]], Measure]  # the measurements of a plan at bindings


def profile_measure(path: str, options: Options, runs: int) -> MeasureFor:
    """Measurements by the profiler's per-kernel timers: one timed build per round, each entry
    then run at every binding that gives all its free sizes."""

    def measure_for(plan: FilePlan, bindings: list[dict[str, int]]) -> Measure:
        def measure(tune: Callable[[Schedule], Schedule]) -> list[Timings]:
            tuned = replace(options, tune=tune, tuning=None)
            timed = plan_file(path, tuned)
            with tempfile.TemporaryDirectory(prefix="catenc-tune-") as scratch:
                library = profiled_library(timed, tuned, path, Path(scratch))
                return [
                    {
                        entry.name: [
                            k.seconds for k in time_entry(entry, library, _given(entry, sizes), runs)[0].kernels
                        ]
                        for entry in timed.entries
                        if entry.name in covered(plan, sizes)
                    }
                    for sizes in bindings
                ]

        return measure

    return measure_for


def _given(entry: EntryPlan, sizes: dict[str, int]) -> dict[str, int]:
    return {dim: sizes[dim] for dim in entry.dims}


def parse_budget(text: str) -> float:
    """'60s', '2m', '90' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise CatencError(f"--budget {text}: expected seconds, like 60s or 2m") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise CatencError(f"--budget {text}: must be a positive time")
    return seconds


def summary(result: TuneResult) -> list[str]:
    """A line per knob: heuristic and tuned time, and what changed (or why it was not searched)."""
    lines = []
    for knob in result.knobs:
        if knob.pruned:
            lines.append(f"  {knob.label}: heuristics kept ({knob.pruned})")
            continue
        if not knob.measured:
            lines.append(f"  {knob.label}: not measured (budget spent)")
            continue
        base = knob.measured.get(knob.heuristic, math.nan)
        best = knob.best()
        tuned = knob.measured[best]
        changes = knob_changes(knob, best)
        lines.append(
            f"  {knob.label}: {1e3 * base:.3f} ms -> {1e3 * tuned:.3f} ms ({changes}; {len(knob.measured)} tried)"
        )
    return lines


def knob_changes(knob: Knob, candidate: str) -> str:
    values = json.loads(candidate)
    changed = [f"{name}={json.dumps(values[name])}" for name in sorted(values) if values[name] != knob.base.get(name)]
    return ", ".join(changed) or "heuristics kept"
