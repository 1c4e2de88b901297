"""`catenc profile`: run each entry with per-kernel timers and report every kernel against this
machine's measured fp32 FMA peak and memory bandwidth (docs/cli.md, "Profiling").

The timers are compiled in only here (`render_source(profile=True)`, catenc/emit.py): each kernel
call site of an entry reads the monotonic clock before and after the call and adds the time to a
static table of the entry, which `<entry>_profile` copies out and `<entry>_profile_reset` clears.
One build per call of `time_kernels`; the inputs are random (seeded) and allocated once, the
outputs and workspace too (catenc/ccall.py), so no run pays for touching fresh memory.

Machine peaks come from the probes in catenc/peaks/ (built with the runtime's compiler and target
flags, so they use the vectors the kernels use), measured once per machine, compiler and flags and
kept in the user cache directory (catenc/resources.py `user_cache_dir`).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from catenc.build import BuildRequest, build, fused_ops
from catenc.ccall import BoundCall
from catenc.diagnostics import CatencError
from catenc.driver import plan_file
from catenc.emit import size_exprs
from catenc.loader import Library, load
from catenc.lower.loops import LoopKernel
from catenc.outputs import write_atomic
from catenc.plan import EntryPlan, FilePlan, Options
from catenc.resources import user_cache_dir
from catenc.runtime.descriptor import Runtime
from catenc.runtime.machine import host_machine
from catenc.schedule.kernels import Kernel, kernel_cost
from catenc.symbolic import product
from catenc.testing.check import _bytes, _physical_memory, entry_env, entry_sizes, random_inputs

PROFILE_SCHEMA = "catenc.profile/1"
PEAKS_SCHEMA = "catenc.peaks/1"
WARMUP_CALLS = 2  # untimed calls first: page faults of the buffers, the thread pool's start, caches
SEED = 0
# Quick probes (well under a second each): 12 FMA chains for this many steps, best of the passes;
# a STREAM triad over arrays of at least this many MiB (and twice the last-level cache).
FMA_STEPS, FMA_PASSES = 2_000_000, 10
TRIAD_MIB, TRIAD_PASSES = 64, 10
INT64_MAX = (1 << 63) - 1
# The counts are what the loops execute (tests/test_executed_flops.py): a rate above the peak is
# the clock's or the probe's error, not the count's.
OVER_PEAK_NOTE = (
    "!: above the measured FMA peak: the kernel is too short for the clock (give larger --sizes or "
    "more --runs), or the peak was measured on a busy machine (--peaks measure measures it again)"
)


@dataclass(frozen=True)
class KernelTime:
    """One kernel of an entry: its calls during the timed runs, and its seconds per entry call
    (the minimum over the runs)."""

    name: str
    calls: int
    seconds: float


@dataclass(frozen=True)
class EntryTime:
    """One entry: its own wall time per call (from its first check to its return, the minimum
    over the runs) and its kernels in schedule order."""

    entry: str
    seconds: float
    kernels: tuple[KernelTime, ...]


@dataclass(frozen=True)
class Peaks:
    """This machine's fp32 FMA throughput and STREAM triad bandwidth, all threads."""

    fma_gflops: float
    triad_gbs: float
    threads: int = 0  # 0: given, not measured
    vector_bits: int = 0
    fma: bool = True  # the probe used fused multiply-adds (else a multiply and an add)
    source: str = ""  # how they were obtained, for the report

    def fields(self) -> dict[str, object]:
        return {
            "fma_gflops": self.fma_gflops,
            "triad_gbs": self.triad_gbs,
            "threads": self.threads,
            "vector_bits": self.vector_bits,
            "fma": self.fma,
            "source": self.source,
        }


# ------------------------------------------------------------------------------ timing


def check_host_runtime(runtime: Runtime, config: Mapping[str, str]) -> None:
    """Profiling runs the kernels in this process: only a runtime that builds a shared library
    this machine runs can be profiled."""
    if runtime.work_groups or "so" not in runtime.binary_kinds:
        raise CatencError(
            f"profile needs a host runtime (a shared library run in this process); '{runtime.name}' runs its "
            "kernels on a device: profile with --runtime clang"
        )
    if not runtime.runnable(config):
        raise CatencError(f"profile: runtime '{runtime.name}' cannot run on this machine")


def check_sizes(plan: FilePlan, sizes: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Each entry's free sizes from `sizes` (every one given, the entry's constraints met), by
    entry name; a size that is no free symbol of any entry is an error."""
    free = list(dict.fromkeys(dim for entry in plan.entries for dim in entry.dims))
    for name, value in sizes.items():
        if name not in free:
            fixed = any(name in entry.specialized or name in entry.derived for entry in plan.entries)
            why = "fixed by -D or derived by 'where'" if fixed else "no free symbol of the entries profiled"
            raise CatencError(f"--sizes {name}={value}: '{name}' is {why} (free sizes: {', '.join(free) or 'none'})")
    by_entry = {}
    for entry in plan.entries:
        missing = [dim for dim in entry.dims if dim not in sizes]
        if missing:
            raise CatencError(
                f"'{entry.name}' has the free size(s) {', '.join(missing)}: give each with --sizes "
                f'"{missing[0]}=..." (a run-time size) or -D {missing[0]}=... (compiled in)',
                entry.composite.loc,
            )
        by_entry[entry.name] = checked_sizes(entry, {dim: sizes[dim] for dim in entry.dims})
    return by_entry


def checked_sizes(entry: EntryPlan, given: Mapping[str, int]) -> dict[str, int]:
    """The entry's free sizes `given` with --sizes, checked before anything is built or allocated:
    its constraints hold, every size its code computes fits int64 (else the entry refuses them),
    and its inputs, outputs and workspace fit this machine's memory."""
    sizes = entry_sizes(entry, dict(given), "--sizes")
    env = entry_env(entry, sizes)
    at = ", ".join(f"{name}={value}" for name, value in env.items())
    for expr in size_exprs(entry):
        value = expr.evaluate(env)
        if not -INT64_MAX <= value <= INT64_MAX:
            raise CatencError(
                f"'{entry.name}' at {at} computes {expr} = {value}, beyond int64; give smaller sizes",
                entry.composite.loc,
            )
    tensors = [ttype for _, ttype in entry.arguments + entry.program.outputs]
    need = sum(product(t.shape).evaluate(env) * t.dtype.itemsize for t in tensors)
    need += entry.schedule.workspace_bytes.evaluate(env)
    memory = _physical_memory()
    if memory is not None and need > memory:
        raise CatencError(
            f"'{entry.name}' at {at} needs {_bytes(need)} for its inputs, outputs and workspace, more than this "
            f"machine's {_bytes(memory)} of memory; give smaller sizes",
            entry.composite.loc,
        )
    return sizes


def profiled_library(plan: FilePlan, options: Options, path: str, workdir: Path) -> Library:
    """The plan built with the kernel timers into workdir, loaded."""
    _check_profile_symbols(plan)
    request = BuildRequest(path, str(workdir), ("c", "h", "manifest", "so"), profile=True)
    return load(build(plan, options, request)["manifest"])


def _check_profile_symbols(plan: FilePlan) -> None:
    """The timers' functions (`<entry>_profile...`) must not collide with an entry or a kernel."""
    taken = {
        name: e.name for e in plan.entries for name in [e.symbol, e.workspace_symbol, *(k.name for k in e.kernels)]
    }
    for entry in plan.entries:
        for suffix in ("_profile", "_profile_count", "_profile_reset", "_profile_table"):
            clash = taken.get(entry.symbol + suffix)
            if clash is not None:
                raise CatencError(
                    f"profile: the timers of '{entry.name}' are named {entry.symbol}{suffix}, a C symbol of "
                    f"'{clash}' too; rename one of the composites",
                    entry.composite.loc,
                )


def time_entry(entry: EntryPlan, library: Library, sizes: Mapping[str, int], runs: int) -> tuple[EntryTime, float]:
    """Run one entry WARMUP_CALLS times, then `runs` times with its timers reset before each; also
    the sum of its kernels' times in its fastest run (the rest of that run is the entry's own)."""
    if runs < 1:
        raise CatencError(f"--runs {runs}: must be at least 1")
    env = entry_env(entry, dict(sizes))
    bound = BoundCall(library, entry.name, random_inputs(entry, entry.composite, env, SEED), **sizes)
    cdll = ctypes.CDLL(str(library.path))
    count = int(_function(cdll, f"{entry.symbol}_profile_count", ctypes.c_int64)())
    read = _function(cdll, f"{entry.symbol}_profile", None, ctypes.c_void_p, ctypes.c_void_p)
    reset = _function(cdll, f"{entry.symbol}_profile_reset", None)
    ns, calls = (ctypes.c_uint64 * (count + 1))(), (ctypes.c_uint64 * (count + 1))()
    try:
        for _ in range(WARMUP_CALLS):
            bound.call()
    except RuntimeError as error:  # a nonzero status (BoundCall.call)
        raise CatencError(
            f"profile: {error} on random inputs at {dict(sizes)}; give its index inputs a test.ranges "
            '(e.g. ids = [0, "V"])',
            entry.composite.loc,
        ) from None
    best = [math.inf] * (count + 1)
    total = [0] * (count + 1)
    in_best_run = 0.0
    for _ in range(runs):
        reset()
        bound.call()
        read(ns, calls)
        if ns[count] * 1e-9 < best[count]:
            in_best_run = sum(ns[:count]) * 1e-9
        for n in range(count + 1):
            best[n] = min(best[n], ns[n] * 1e-9)
            total[n] += calls[n]
    names = [k.name for k in entry.kernels]
    kernels = tuple(KernelTime(name, total[n], best[n]) for n, name in enumerate(names))
    return EntryTime(entry.name, best[count], kernels), in_best_run


def _function(cdll: ctypes.CDLL, name: str, restype, *argtypes):
    function = cdll[name]
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


def time_kernels(
    path: str, options: Options, sizes: dict[str, int], runs: int = 5, workdir: Path | None = None
) -> tuple[EntryTime, ...]:
    """Plan `path` under `options` (a tuner's `options.tune` included), build it once with the
    kernel timers (in workdir, else a temporary directory) and time every entry at `sizes`."""
    plan, by_entry = _checked_plan(path, options, sizes)
    return tuple(timed for timed, _ in _timed(plan, by_entry, options, path, runs, workdir))


def _checked_plan(path: str, options: Options, sizes: Mapping[str, int]) -> tuple[FilePlan, dict[str, dict[str, int]]]:
    """The plan and each entry's sizes (`check_sizes`), before anything is built."""
    check_host_runtime(options.runtime, options.config)
    plan = plan_file(path, options)
    if not plan.entries:
        raise CatencError(f"{path}: no composite to profile (rank-polymorphic ones have no entry)")
    return plan, check_sizes(plan, sizes)


def _timed(
    plan: FilePlan, by_entry: dict[str, dict[str, int]], options: Options, path: str, runs: int, workdir: Path | None
) -> list[tuple[EntryTime, float]]:
    with tempfile.TemporaryDirectory(prefix="catenc-profile-") as scratch:
        library = profiled_library(plan, options, path, workdir or Path(scratch))
        return [time_entry(entry, library, by_entry[entry.name], runs) for entry in plan.entries]


# ------------------------------------------------------------------------ the report


def profile_file(
    path: str,
    options: Options,
    sizes: Mapping[str, int],
    runs: int,
    peaks_of: Callable[[], Peaks],
    workdir: Path | None = None,
) -> dict[str, object]:
    """`catenc profile`: the timings of every kernel with their rates and roofline, as the data
    `--json` prints (keys in a fixed order). `peaks_of` is asked once the sizes are checked."""
    plan, by_entry = _checked_plan(path, options, sizes)
    peaks = peaks_of()
    times = _timed(plan, by_entry, options, path, runs, workdir)
    return {
        "schema": PROFILE_SCHEMA,
        "file": path,
        "runtime": options.runtime.name,
        "compiler": options.runtime.toolchain_version(options.config),
        "opt": options.opt,
        "runs": runs,
        "statistic": "min",
        "peaks": peaks.fields(),
        "entries": [
            _entry_report(entry, timed, in_best_run, entry_env(entry, by_entry[entry.name]), peaks)
            for entry, (timed, in_best_run) in zip(plan.entries, times)
        ],
    }


def _entry_report(
    entry: EntryPlan, timed: EntryTime, in_best_run: float, env: dict[str, int], peaks: Peaks
) -> dict[str, object]:
    rows = [
        _kernel_report(entry, group, kernel, timed_kernel, env, peaks)
        for group, kernel, timed_kernel in zip(entry.schedule.kernels, entry.kernels, timed.kernels)
    ]
    return {
        "entry": entry.name,
        "symbol": entry.symbol,
        "sizes": {name: env[name] for name in entry.composite.symbols() if name in env},
        "seconds": timed.seconds,  # its fastest run
        "kernels_seconds": in_best_run,  # its kernels in that run
        "kernels_fastest_seconds": sum(k.seconds for k in timed.kernels),  # each kernel's fastest, summed
        "kernels": rows,
    }


def _kernel_report(
    entry: EntryPlan, group: Kernel, kernel: LoopKernel, timed: KernelTime, env: dict[str, int], peaks: Peaks
) -> dict:
    """One kernel's row: time, the work its cost (catenc/schedule/kernels.py) counts at these
    sizes, the rates, and where it stands against the roofline."""
    cost = kernel_cost(entry.schedule.graph, group)
    flops = cost.flops.evaluate(env)
    moved = cost.bytes_read.evaluate(env) + cost.bytes_written.evaluate(env)
    rates = rates_of(flops, moved, timed.seconds, peaks)
    return {
        "name": timed.name,
        "calls": timed.calls,
        "seconds": timed.seconds,
        "flops": flops,
        "bytes_read": cost.bytes_read.evaluate(env),
        "bytes_written": cost.bytes_written.evaluate(env),
        **rates,
        "computes": list(kernel.fused),
        "ops": fused_ops(group),
        **({"shares": kernel.shares} if kernel.shares else {}),
    }


def rates_of(flops: int, moved: int, seconds: float, peaks: Peaks) -> dict[str, float | str | None]:
    """GFLOP/s and GB/s of a kernel, its arithmetic intensity, which roof bounds it (compute when
    its intensity reaches the machine's FMA peak over its bandwidth, else memory), and its rates
    as percents of the peak and of the bandwidth (None where not defined)."""
    gflops = flops / seconds / 1e9 if seconds > 0 else None
    gbs = moved / seconds / 1e9 if seconds > 0 else None
    intensity = flops / moved if moved else None
    compute = intensity is None or intensity >= peaks.fma_gflops / peaks.triad_gbs
    return {
        "gflops": gflops,
        "gbs": gbs,
        "intensity": intensity,
        "bound": "compute" if compute else "memory",
        "fma_percent": None if gflops is None else 100 * gflops / peaks.fma_gflops,
        "bandwidth_percent": None if gbs is None else 100 * gbs / peaks.triad_gbs,
    }


def format_report(report: Mapping) -> str:
    """The text `catenc profile` prints: a table per entry, then the entry's wall time against
    the sum of its kernels."""
    peaks = report["peaks"]
    lines = [
        f"{report['file']}: {report['runtime']} ({report['compiler']}), -O{report['opt']}, "
        f"time per entry call = min of {report['runs']} runs",
        f"machine: {peaks['fma_gflops']:.1f} GFLOP/s fp32 FMA peak, {peaks['triad_gbs']:.1f} GB/s triad "
        f"({peaks['source']})",
    ]
    header = ("kernel", "calls", "time", "GFLOP/s", "GB/s", "flop/B", "%FMA", "%BW", "bound", "fuses")
    for entry in report["entries"]:
        sizes = ", ".join(f"{k}={v}" for k, v in entry["sizes"].items())
        lines += ["", f"{entry['entry']} ({sizes or 'no sizes'})"]
        rows = [header]
        for k in entry["kernels"]:
            fuses = f"{', '.join(k['computes'])}: {' '.join(k['ops']) or 'copy'}"
            if "shares" in k:
                fuses += f" (runs {k['shares']}'s code)"
            rows.append(
                (
                    k["name"],
                    str(k["calls"]),
                    _duration(k["seconds"]),
                    _number(k["gflops"]),
                    _number(k["gbs"]),
                    _number(k["intensity"], 2),
                    _percent(k["fma_percent"]),
                    _number(k["bandwidth_percent"]),
                    k["bound"],
                    fuses,
                )
            )
        lines += _columns(rows)
        if any((k["fma_percent"] or 0) > 100 for k in entry["kernels"]):
            lines.append(OVER_PEAK_NOTE)
        share = entry["kernels_seconds"] / entry["seconds"] if entry["seconds"] else math.nan
        lines.append(
            f"entry {_duration(entry['seconds'])} per call (its fastest run; the kernels {100 * share:.1f}% of it); "
            f"each kernel's fastest, summed: {_duration(entry['kernels_fastest_seconds'])}"
        )
    return "\n".join(lines)


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows aligned: the first column and the last left, the numbers right."""
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    return out


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _percent(value: float | None) -> str:
    """A share of the FMA peak, marked `!` above 100% (see OVER_PEAK_NOTE)."""
    return _number(value) + ("!" if value is not None and value > 100 else "")


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def dumps(report: Mapping) -> str:
    """The report as JSON (`--json`): keys in the order above, every number a JSON number."""
    return json.dumps(report, indent=2) + "\n"


# ------------------------------------------------------------------- machine peaks


def parse_peaks(text: str) -> Peaks:
    """`--peaks GFLOPS,GBS`: this machine's fp32 FMA peak and bandwidth, given."""
    try:
        fma, bandwidth = (float(piece) for piece in text.split(","))
    except ValueError:
        raise CatencError(
            f"--peaks {text}: expected GFLOPS,GBS (the fp32 FMA peak and the bandwidth), or 'measure'"
        ) from None
    if not (math.isfinite(fma) and math.isfinite(bandwidth) and fma > 0 and bandwidth > 0):
        raise CatencError(f"--peaks {text}: both must be positive numbers")
    return Peaks(fma, bandwidth, source="given with --peaks")


def machine_peaks(runtime: Runtime, config: Mapping[str, str], remeasure: bool = False) -> Peaks:
    """The peaks measured on this machine with the runtime's compiler and target flags: from the
    user cache when measured before (unless remeasure), else measured now and kept there."""
    host = runtime.host_c_compiler(config)
    if host is None:
        raise CatencError(f"profile: runtime '{runtime.name}' is no C runtime; give the machine's peaks with --peaks")
    compiler, flags = host[0], ["-O3", *host[1]]
    key = {
        "cpu": _cpu_model(),
        "machine": host_machine(),
        "compiler": runtime.toolchain_version(config),
        "flags": flags,
        "threads": os.environ.get("OMP_NUM_THREADS", ""),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cached = user_cache_dir() / "peaks" / f"{digest}.json"
    if cached.is_file() and not remeasure:
        try:
            data = json.loads(cached.read_text())
            if data.get("schema") == PEAKS_SCHEMA and data.get("key") == key:
                return Peaks(**{**data["peaks"], "source": f"measured {data['date']}, kept in {cached}"})
        except (OSError, ValueError, TypeError, KeyError):
            pass  # unreadable: measure again and replace it
    peaks = _measure(compiler, flags)
    date = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    record = {"schema": PEAKS_SCHEMA, "key": key, "date": date, "peaks": {**peaks.fields(), "source": ""}}
    try:
        write_atomic(cached, json.dumps(record, indent=2) + "\n")
        where = f"kept in {cached}"
    except OSError as error:
        where = f"not kept: {cached.parent}: {error.strerror}"
    return Peaks(**{**peaks.fields(), "source": f"measured now, {where}"})


def _measure(compiler: str, flags: list[str]) -> Peaks:
    """Build and run both probes of catenc/peaks/ (each about a tenth of a second)."""
    sources = Path(__file__).resolve().parent / "peaks"
    with tempfile.TemporaryDirectory(prefix="catenc-peaks-") as scratch:
        fma = _probe(compiler, flags, sources / "fma_peak.c", Path(scratch), [str(FMA_STEPS), str(FMA_PASSES)])
        mib = max(TRIAD_MIB, 2 * _last_level_cache_mib())
        triad = _probe(compiler, flags, sources / "triad.c", Path(scratch), [str(mib), str(TRIAD_PASSES)])
    return Peaks(
        float(fma["fma_gflops"]),
        float(triad["triad_gbs"]),
        int(fma["threads"]),
        int(fma["vector_bits"]),
        fma["fma"] == "1",
    )


def _probe(compiler: str, flags: list[str], source: Path, scratch: Path, args: list[str]) -> dict[str, str]:
    """The `name value` lines a probe prints."""
    binary = scratch / source.stem
    steps = [[compiler, *flags, "-o", str(binary), str(source)], [str(binary), *args]]
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as error:
            raise CatencError(f"measuring the machine's peaks: {' '.join(argv)}: {error}") from None
        if done.returncode != 0:
            raise CatencError(
                f"measuring the machine's peaks: {' '.join(argv)} failed (exit {done.returncode}):\n"
                f"{(done.stderr or done.stdout).strip()[:2000]}\ngive them with --peaks GFLOPS,GBS instead"
            )
    return dict(re.findall(r"^(\w+) (\S+)$", done.stdout, re.M))


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.M)
        if found:
            return found.group(1).strip()
    return platform.processor() or platform.machine()


def _last_level_cache_mib() -> int:
    """The largest cache this CPU reports (Linux sysfs), in MiB; 0 when it cannot say."""
    largest = 0
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip()
        scale = {"K": 1 / 1024, "M": 1, "G": 1024}.get(text[-1:], 1 / (1024 * 1024))
        try:
            largest = max(largest, math.ceil(float(text.rstrip("KMG")) * scale))
        except ValueError:
            continue
    return largest
