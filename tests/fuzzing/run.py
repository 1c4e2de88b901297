"""Differential fuzzing of catenc: compile random composites at several optimisation levels and
compare every build with catenc's reference interpreter and with the -O0 build.

    python -m tests.fuzzing.run --minutes 10 --seed 1       # or: make fuzz MINUTES=10

Programs come from `tests/fuzzing/programs.py`, several composites to a file. Each file is checked
in a forked child process (a miscompiled kernel that crashes takes only the child down) that
compiles it in-process at -O0, -O2 and sometimes -O3 with OMP=1, runs every entry at several
symbol bindings (0 and 1 where the program allows) on the same random inputs, and classifies
each program:

    ok            every build agrees with the reference and with the -O0 build
    rejected      catenc refused the program with a CatencError (a generator bug, unless right)
    internal      any other exception while compiling, or the C toolchain failing
    mismatch      a build disagrees with the reference or with the -O0 build
    crash         the child died (a signal) or a call raised, or the run timed out
    inconsistent  some optimisation levels accept the program and others reject it

Every program that is not ok or rejected is written to build/fuzz/failures/ as a composite file
headed by comments saying what happened; the rejected ones go to build/fuzz/rejected/.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

import numpy as np

from .programs import SYMBOLS, Program, RandomChooser, batch_toml, random_program

FAILURES = ("internal", "mismatch", "crash", "inconsistent")
BASE_LEVELS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (("0", ()), ("2", ()))
OMP_LEVEL = ("3", (("OMP", "1"),))
# the GPU lowering, run on PoCL (built unoptimised: PoCL's optimiser takes 10x the time per kernel)
OPENCL_LEVEL = ("2", (("BLOCK", "64"), ("CLFLAGS", "-cl-opt-disable")), "opencl")


@dataclass
class Outcome:
    name: str
    status: str
    detail: str
    toml: str
    levels: list[str] = field(default_factory=list)
    bindings: list[dict[str, int]] = field(default_factory=list)

    def report(self) -> str:
        header = [f"# status: {self.status}", f"# levels: {', '.join(self.levels)}"]
        header += [f"# {line}" for line in self.detail.strip().splitlines()]
        return "\n".join(header) + "\n\n" + self.toml


def level_name(level) -> str:
    opt, config, runtime = _parts(level)
    name = f"-O{opt}" + (" --config " + ",".join(f"{k}={v}" for k, v in config) if config else "")
    return name if runtime == "clang" else f"--runtime {runtime} {name}"


def _parts(level) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """(opt, config, runtime) of a level: (opt, config) on clang, or (opt, config, runtime)."""
    return (*level, "clang") if len(level) == 2 else level


# ------------------------------------------------------------------------ checking in-process


def _options(level, composites: Sequence[str], defines: dict[str, int] | None = None):
    from catenc.plan import Options

    opt, config, runtime = _parts(level)
    rt = _runtime(runtime)
    return Options(
        rt,
        config=rt.validate_config(dict(config)),
        opt=opt,
        composites=tuple(composites),
        defines=dict(defines or {}),
    )


_RUNTIMES: dict = {}


def _runtime(name: str = "clang"):
    if name not in _RUNTIMES:
        from catenc.runtime.descriptor import load_runtime

        _RUNTIMES[name] = load_runtime(name)
    return _RUNTIMES[name]


def _short(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def _trace(error: BaseException) -> str:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    return "".join(lines[-6:])


def check_batch_inprocess(
    programs: Sequence[Program],
    workdir: Path,
    bindings: Sequence[Sequence[dict[str, int]]],
    levels: Sequence = BASE_LEVELS,
    seed: int = 0,
    defines: dict[str, int] | None = None,
) -> list[Outcome]:
    """Compile the programs as one file at each level (with -D defines), run each at its
    bindings, classify."""
    from catenc.build import BuildRequest, build
    from catenc.diagnostics import CatencError
    from catenc.driver import plan_file
    from catenc.loader import load

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "batch.toml"
    path.write_text(batch_toml(programs))
    names = [level_name(v) for v in levels]
    if defines:
        names = [f"{n} " + " ".join(f"-D {k}={v}" for k, v in defines.items()) for n in names]
    outcomes = {p.name: Outcome(p.name, "ok", "", p.toml(), names, list(b)) for p, b in zip(programs, bindings)}

    # 1. the frontend and the middle end, one composite at a time
    accepted = []
    for p in programs:
        verdicts = []
        for level in levels:
            try:
                plan_file(str(path), _options(level, [p.name], defines))
                verdicts.append(None)
            except CatencError as error:
                verdicts.append(("rejected", str(error)))
            except Exception as error:  # any other exception is catenc's fault
                verdicts.append(("internal", f"{level_name(level)}: {_trace(error)}"))
        out = outcomes[p.name]
        internal = [v for v in verdicts if v and v[0] == "internal"]
        rejected = [v for v in verdicts if v and v[0] == "rejected"]
        if internal:
            out.status, out.detail = "internal", internal[0][1]
        elif rejected and len(rejected) < len(levels):
            out.status = "inconsistent"
            out.detail = "rejected at some levels only: " + rejected[0][1]
        elif rejected:
            out.status, out.detail = "rejected", rejected[0][1]
        else:
            accepted.append(p)

    # 2. build every level; a failing build is retried one composite at a time
    libraries: dict[str, list] = {p.name: [] for p in accepted}
    for n, level in enumerate(levels):
        group = [p for p in accepted if outcomes[p.name].status == "ok"]
        if not group:
            break
        try:
            plan = plan_file(str(path), _options(level, [p.name for p in group], defines))
            written = build(plan, _options(level, [], defines), BuildRequest(str(path), str(workdir / f"L{n}"), _EMIT))
            library = load(written["manifest"])
            for entry in plan.entries:
                libraries[entry.name].append((entry, library[entry.name]))
        except Exception:  # isolate the culprit below
            for p in group:
                try:
                    plan = plan_file(str(path), _options(level, [p.name], defines))
                    out_dir = workdir / f"L{n}_{p.name}"
                    written = build(plan, _options(level, [], defines), BuildRequest(str(path), str(out_dir), _EMIT))
                    library = load(written["manifest"])
                    libraries[p.name].append((plan.entries[0], library[p.name]))
                except Exception as error:
                    outcomes[p.name].status = "internal"
                    outcomes[p.name].detail = f"build at {level_name(level)}: {_trace(error)}"

    # 3. run every build at every binding on the same inputs
    for p, binds in zip(programs, bindings):
        out = outcomes[p.name]
        if out.status != "ok":
            continue
        problems = _run_program(p, libraries[p.name], levels, binds, seed)
        if problems:
            kinds = {k for k, _ in problems}
            out.status = "crash" if "crash" in kinds else "internal" if "internal" in kinds else "mismatch"
            out.detail = "\n".join(text for _, text in problems[:12])
    return [outcomes[p.name] for p in programs]


_EMIT = ("c", "h", "manifest", "so")


def _run_program(program: Program, builds: list, levels: Sequence, binds, seed: int) -> list[tuple[str, str]]:
    from catenc.testing.check import compare, run_once, stored_values

    problems: list[tuple[str, str]] = []
    rtol, atol = program.tolerance()
    for binding in binds:
        shown = ", ".join(f"{k}={v}" for k, v in binding.items()) or "no symbols"
        first: list[np.ndarray] | None = None
        for level, (entry, function) in zip(levels, builds):
            sizes = {d: binding[d] for d in entry.dims}
            where = f"{level_name(level)} [{shown}]"
            try:
                checks, storage = run_once(entry, entry.composite, function, sizes, seed)
            except Exception as error:
                text = _trace(error)
                kind = "internal" if "reference" in text or "catenc/testing/reference.py" in text else "crash"
                problems.append((kind, f"{where}: {text}"))
                continue
            for check in checks:
                if not check.ok:
                    problems.append(
                        (
                            "mismatch",
                            f"{where}: output {check.output} differs from the reference: "
                            f"max abs err {check.max_abs:.3g}, max rel err {check.max_rel:.3g}",
                        )
                    )
            result = function(*storage, **sizes)
            outputs = list(result) if isinstance(result, tuple) else [result]
            if first is None:
                first = outputs
                continue
            for (name, ttype), got, want in zip(entry.program.outputs, outputs, first):
                got_v = stored_values(np.asarray(got), ttype.dtype)
                want_v = stored_values(np.asarray(want), ttype.dtype)
                max_abs, max_rel, _, ok = compare(got_v, want_v, ttype.dtype, rtol, atol)
                if not ok:
                    problems.append(
                        (
                            "mismatch",
                            f"{where}: output {name} differs from {level_name(levels[0])}: "
                            f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}",
                        )
                    )
    return problems


# ----------------------------------------------------------------------- in a forked child


def _child(conn, programs, workdir, bindings, levels, seed, defines) -> None:
    warnings.simplefilter("ignore")  # numpy's "mean of empty slice" and such, from the reference
    try:
        result = check_batch_inprocess(programs, workdir, bindings, levels, seed, defines)
    except BaseException as error:
        result = [Outcome(p.name, "internal", f"harness: {_trace(error)}", p.toml()) for p in programs]
    conn.send(result)
    conn.close()
    os._exit(0)


@dataclass
class Job:
    programs: list[Program]
    workdir: Path
    bindings: list[list[dict[str, int]]]
    levels: tuple
    seed: int = 0
    defines: dict[str, int] = field(default_factory=dict)


def _start(job: Job):
    for level in job.levels:  # the toolchain probes (OpenMP, macros), once here, not in every child
        _options(level, ())
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child,
        args=(sender, job.programs, job.workdir, job.bindings, job.levels, job.seed, job.defines),
        daemon=True,
    )
    proc.start()
    sender.close()
    return proc, receiver


def run_jobs(jobs: Iterable[Job], parallel: int = 1, timeout: float = 300.0) -> Iterator[tuple[Job, list[Outcome]]]:
    """Check each job in its own forked child, `parallel` at a time; yields (job, outcomes).
    A job whose child dies is split into one child per program to find the crashing ones."""
    pending = iter(jobs)
    running: dict = {}  # receiver -> (proc, job, started)
    exhausted = False
    while running or not exhausted:
        while not exhausted and len(running) < parallel:
            job = next(pending, None)
            if job is None:
                exhausted = True
                break
            proc, receiver = _start(job)
            running[receiver] = (proc, job, time.monotonic())
        if not running:
            break
        for receiver in wait(list(running), timeout=1.0):
            proc, job, _ = running.pop(receiver)
            try:
                outcomes = receiver.recv()
            except (EOFError, OSError):
                outcomes = None
            proc.join(5)
            receiver.close()
            yield job, outcomes if outcomes is not None else _split(job, proc.exitcode, timeout)
        now = time.monotonic()
        for receiver, (proc, job, started) in list(running.items()):
            if now - started > timeout:
                proc.kill()
                proc.join(5)
                receiver.close()
                del running[receiver]
                yield job, _split(job, "timeout", timeout)


def _split(job: Job, exitcode, timeout: float) -> list[Outcome]:
    if len(job.programs) == 1:
        p = job.programs[0]
        what = "timed out" if exitcode == "timeout" else f"the child process died (exit code {exitcode})"
        return [Outcome(p.name, "crash", what, p.toml(), [level_name(v) for v in job.levels], job.bindings[0])]
    outcomes = []
    for k, (p, b) in enumerate(zip(job.programs, job.bindings)):
        single = Job([p], job.workdir / f"alone{k}", [b], job.levels, job.seed, job.defines)
        for _, result in run_jobs([single], 1, timeout):
            outcomes += result
    return outcomes


def check_batch(
    programs: Sequence[Program],
    workdir: Path,
    bindings: Sequence[Sequence[dict[str, int]]],
    levels: Sequence = BASE_LEVELS,
    seed: int = 0,
    defines: dict[str, int] | None = None,
    timeout: float = 300.0,
) -> list[Outcome]:
    """check_batch_inprocess in a forked child (isolating crashes)."""
    job = Job(list(programs), Path(workdir), [list(b) for b in bindings], tuple(levels), seed, dict(defines or {}))
    return next(iter(run_jobs([job], 1, timeout)))[1]


# --------------------------------------------------------------------------------- the runner


def choose_defines(programs: Sequence[Program], chooser, p: float = 0.2) -> dict[str, int]:
    """Sometimes fix one symbol for the whole file with -D (never one a test.ranges bound uses)."""
    if not chooser.chance(p):
        return {}
    ranged = {s for prog in programs for bounds in prog.ranges.values() for s in SYMBOLS if s in "".join(bounds)}
    used = sorted({s for prog in programs for s in prog.symbols()} - ranged)
    if not used:
        return {}
    symbol = chooser.choice(used)
    low = max(prog.minimums.get(symbol, 0) for prog in programs)
    return {symbol: chooser.choice([v for v in (0, 1, 2, 3, 5, 16) if v >= low] or [low])}


def make_job(seed: int, index: int, workroot: Path, batch: int, nbindings: int, omp_every: int) -> Job:
    rng = random.Random(f"catenc-fuzz-{seed}-{index}")
    programs = [random_program(rng, f"p{index}_{k}") for k in range(batch)]
    chooser = RandomChooser(rng)
    defines = choose_defines(programs, chooser)
    bindings = [p.bindings(chooser, nbindings, defines) for p in programs]
    levels = BASE_LEVELS + ((OMP_LEVEL,) if omp_every and index % omp_every == 0 else ())
    return Job(programs, workroot / f"b{index}", bindings, levels, seed=index, defines=defines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzzing.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="time budget (default 10)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8, help="composites per compiled file (default 8)")
    parser.add_argument("--bindings", type=int, default=3, help="symbol bindings per program (default 3)")
    parser.add_argument("--omp-every", type=int, default=4, help="add -O3 OMP=1 to every Nth file (0: never)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="files checked at once")
    parser.add_argument("--max-batches", type=int, default=0, help="stop after this many files (0: no limit)")
    parser.add_argument("--out", default="build/fuzz", help="where failures go (default build/fuzz)")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    args = parser.parse_args(argv)

    out = Path(args.out)
    (out / "failures").mkdir(parents=True, exist_ok=True)
    (out / "rejected").mkdir(parents=True, exist_ok=True)
    workroot = Path(tempfile.mkdtemp(prefix="catenc-fuzz-"))
    deadline = time.monotonic() + args.minutes * 60
    stats: Counter = Counter()
    kinds: Counter = Counter()
    rejections: Counter = Counter()
    started = time.monotonic()

    def jobs() -> Iterator[Job]:
        index = 0
        while time.monotonic() < deadline and (not args.max_batches or index < args.max_batches):
            try:
                yield make_job(args.seed, index, workroot, args.batch, args.bindings, args.omp_every)
            except Exception:  # a generator bug: report it, keep fuzzing
                stats["generator_error"] += 1
                target = out / "failures" / f"{args.seed}-generator-{index}.txt"
                target.write_text(traceback.format_exc())
                print(f"generator error: {target}", flush=True)
            index += 1

    try:
        for n, (job, outcomes) in enumerate(run_jobs(jobs(), args.jobs)):
            programs = {p.name: p for p in job.programs}
            for outcome in outcomes:
                stats[outcome.status] += 1
                for kind in programs[outcome.name].kinds:
                    kinds[kind] += 1
                if outcome.status == "rejected":
                    rejections[_first_line(outcome.detail)] += 1
                    target = out / "rejected" / f"{args.seed}-{outcome.name}.toml"
                    target.write_text(outcome.report())
                elif outcome.status in FAILURES:
                    target = out / "failures" / f"{args.seed}-{outcome.name}.toml"
                    target.write_text(outcome.report())
                    print(f"{outcome.status}: {target}\n  {_first_line(outcome.detail)}", flush=True)
            if not args.keep:
                shutil.rmtree(job.workdir, ignore_errors=True)
            if (n + 1) % 10 == 0:
                print(f"[{time.monotonic() - started:6.0f} s] {n + 1} files, {_summary(stats)}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workroot, ignore_errors=True)
    total = sum(stats.values())
    print(f"done in {time.monotonic() - started:.0f} s: {total} programs, {_summary(stats)}")
    if rejections:
        print("most common rejections:")
        for message, count in rejections.most_common(10):
            print(f"  {count:4d}  {message}")
    summary = {
        "seed": args.seed,
        "programs": total,
        "statuses": dict(stats),
        "rejection_rate": stats["rejected"] / total if total else 0.0,
        "statement_kinds": dict(kinds),
        "rejections": dict(rejections.most_common(30)),
    }
    (out / f"summary-{args.seed}.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 1 if any(stats[s] for s in FAILURES) else 0


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if ".toml:" in line:  # drop the work directory: FILE:LINE:COL: message -> message
        line = line.split(".toml:", 1)[1].split(": ", 1)[-1]
    return line[:200]


def _summary(stats: Counter) -> str:
    total = sum(stats.values()) or 1
    parts = [f"{k} {v}" for k, v in sorted(stats.items())]
    return ", ".join(parts) + f" (rejected {100 * stats['rejected'] / total:.1f}%)"


if __name__ == "__main__":
    sys.exit(main())
