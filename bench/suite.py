"""The benchmark suite behind bench/run.py (see its docstring for the environment it sets up).

Steps: build and run the machine-peak kernels (catenc/peaks/), compile every composite of
bench/composites/ (and the GPT-2 sample, samples/gpt2/gpt2.toml, and the ONNX files the model rows
export first, bench/onnx_models.py) with catenc at the default level and at -O3 (timing file ->
loaded library), then for each workload time catenc and its peers round-robin on the same inputs,
check every result against a float64 reference, and print and write the table.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime
import threadpoolctl
import torch
from cases import Case, cases

import catenc
from catenc.ccall import BoundCall
from catenc.diagnostics import CatencError
from catenc.loader import Library, load
from catenc.runtime.descriptor import load_runtime

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEAKS = Path(catenc.__file__).resolve().parent / "peaks"  # the probes catenc profile runs too
BUILD = ROOT / "build" / "bench"
RESULTS = BENCH / "results.md"

RTOL = 1e-3  # a result passes when max|got - ref| <= RTOL * max|ref|
GAP_S = 0.005  # idle time before every timed call: the previous contender's pool falls asleep
SLOW_CALL_S = 1.0  # a warm-up call slower than this counts as the first sample
ATTENTION_COMPILE_LIMIT_S = 3.0
# Machine peaks, each the best of many short passes (a quiet moment on a shared machine).
TRIAD_MIB, TRIAD_PASSES = 512, 20  # MiB per f64 array (3 arrays), timed passes
FMA_ITERATIONS, FMA_PASSES = 4_000_000, 30  # about 15 ms per pass at full speed
THREADS = os.cpu_count() or 1
BUSY_WARNING = 0.15  # warn when other processes used more than this share of the CPUs
PEER_COLUMNS = ["numpy", "numpy out=", "torch 1T", "torch 1T out=", "torch 2T", "torch 2T out="]
PEER_COLUMNS += ["onnxruntime 1T", "onnxruntime 2T"]  # the ONNX model rows


def log(message: str) -> None:
    print(message, flush=True)


# ------------------------------------------------------------------- machine peaks


@dataclass
class Peaks:
    triad_gbs: float = float("nan")
    fma_gflops: float = float("nan")
    others: float = float("nan")  # other processes' share of the CPUs meanwhile
    triad_text: str = ""
    fma_text: str = ""
    problems: list[str] = field(default_factory=list)


def c_compiler() -> str:
    """The compiler catenc's default runtime builds with here ($CC, else clang, gcc or cc)."""
    return load_runtime("clang").compiler({})


def _build_c(source: Path, binary: Path) -> str | None:
    """Built for this machine's widest vectors (-march=native; the probes choose their width from it)."""
    command = [c_compiler(), "-O3", "-march=native", "-fopenmp", "-o", str(binary), str(source)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return f"{' '.join(command)}: {error}"
    if done.returncode:
        return f"{' '.join(command)}: exit {done.returncode}\n{done.stderr.strip()}"
    return None


def _run_peak(binary: Path, args: list[str], key: str) -> tuple[dict[str, str], str | None]:
    """The probe's "name value" lines, or a problem when it failed or printed no `key`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OMP_PROC_BIND="true")
    try:
        done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.SubprocessError) as error:
        return {}, f"{binary.name}: {error}"
    values = dict(re.findall(r"^(\w+) ([0-9.eE+-]+)$", done.stdout, re.M))
    if done.returncode or key not in values:
        return {}, f"{binary.name}: exit {done.returncode}\n{done.stdout}{done.stderr}".strip()
    return values, None


def measure_peaks(quick: bool) -> Peaks:
    """STREAM triad (GB/s) and fp32 FMA peak (GFLOP/s), each the best of several passes."""
    peaks = Peaks()
    BUILD.mkdir(parents=True, exist_ok=True)
    triad = (256, 8) if quick else (TRIAD_MIB, TRIAD_PASSES)
    fma = (2_000_000, 10) if quick else (FMA_ITERATIONS, FMA_PASSES)
    peaks.triad_text = f"{THREADS} threads, 3 x {triad[0]} MiB f64 arrays, best of {triad[1]}; catenc/peaks/triad.c"
    for source, key, args in [
        ("triad.c", "triad_gbs", [str(v) for v in triad]),
        ("fma_peak.c", "fma_gflops", [str(v) for v in fma]),
    ]:
        binary = BUILD / Path(source).stem
        problem = _build_c(PEAKS / source, binary)
        values: dict[str, str] = {}
        if problem is None:
            values, problem = _run_peak(binary, args, key)
        if problem:
            peaks.problems.append(problem)
            log(f"  {source}: FAILED: {problem}")
        setattr(peaks, key, float(values.get(key, "nan")))
        if source == "fma_peak.c":
            op = "FMAs" if values.get("fma") == "1" else "multiplies and adds (no FMA)"
            width = f"{values['vector_bits']}-bit" if "vector_bits" in values else "widest"
            peaks.fma_text = f"{THREADS} threads, 12 chains of {width} {op}, best of {fma[1]}; catenc/peaks/fma_peak.c"
    return peaks


# ------------------------------------------------------------ other processes' load


class CpuMeter:
    """The share of the machine's CPU time that other processes used since the last reading.

    /proc/stat counts every CPU's busy time (steal included); this process's own user and
    system time (and its children's: the compilers) is subtracted. On a shared machine a
    value well above 0 means the 2-thread contenders competed with someone for a core.
    """

    def __init__(self) -> None:
        self._last = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        except (OSError, IndexError):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        values = [int(v) for v in fields]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        busy = (sum(values[:8]) - idle) / ticks  # user nice system idle iowait irq softirq steal
        own = sum(os.times()[:4])  # user, system, children's user and system
        return time.monotonic(), busy, own

    def others(self) -> float:
        """Others' share of all CPUs since the last call, in [0, 1] (nan if unknown)."""
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return float("nan")
        capacity = (now[0] - last[0]) * THREADS
        return min(1.0, max(0.0, ((now[1] - last[1]) - (now[2] - last[2])) / capacity))


# ------------------------------------------------------------------------ compiling


@dataclass
class Build:
    """One composite compiled at one level."""

    composite: str
    level: str  # "-O2" (the default: no flag is passed), "-O3", -O0/-O1 for LEVEL_SWEEP, or TUNED
    outdir: Path
    seconds: float = float("nan")  # catenc compile + load, wall clock
    library: Library | None = None
    source: bytes = b""
    error: str | None = None


# The workload timed at every -O level, to show what each level's passes buy (docs/cli.md).
LEVEL_SWEEP = "softmax_rows"


# The tuning files `make bench-tune` (bench/tune.py) writes: one per composite, entries per machine.
TUNING = BENCH / "tuning"
TUNED = "tuned"  # the level name of a -O2 build with the composite's tuning file


def tuning_file(composite: str) -> Path:
    return TUNING / f"{composite}.tuning.json"


def levels_for(composite: str, no_o3: bool, tuned: bool = True) -> tuple[str, ...]:
    """The catenc levels a composite is built and timed at (and tuned, where it has a tuning file)."""
    levels = ("-O0", "-O1", "-O2", "-O3") if composite == LEVEL_SWEEP else ("-O2", "-O3")
    levels += (TUNED,) if tuned and tuning_file(composite).is_file() else ()
    return tuple(level for level in levels if not (no_o3 and level == "-O3"))


def _o3_differs(o2: Build, o3: Build) -> bool:
    """Whether -O3 (or the tuned build) deserves a row of its own: other C, or a failure the
    default level has not."""
    if o3.error:
        return not o2.error
    return o2.error is not None or o2.source != o3.source


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def compile_composite(composite: str, toml: Path, level: str, config: str, extra: tuple[str, ...] = ()) -> Build:
    """Compile ``toml`` (whose stem is ``composite``; a composite file or an ONNX model) at ``level``, with
    the options ``extra``, and load the library."""
    outdir = BUILD / (
        composite if level == "-O2" else f"{composite}{level}" if level != TUNED else f"{composite}-{TUNED}"
    )
    build = Build(composite, level, outdir)
    command = [sys.executable, "-m", "catenc", "compile", _shown(toml)]
    command += ["-o", _shown(outdir), *extra]
    if config:
        command += ["--config", config]
    if level == TUNED:
        command += ["--tuning", _shown(tuning_file(composite))]
    elif level != "-O2":
        command.append(level)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    except (OSError, subprocess.SubprocessError) as error:
        build.error = f"{' '.join(command)}: {error}"
        return build
    if done.returncode:
        shown = " ".join(command[2:])
        build.error = f"{shown}: exit {done.returncode}\n{(done.stderr or done.stdout).strip()}"
        return build
    try:
        build.library = load(outdir / f"{composite}.manifest.json")
    except Exception as error:  # noqa: BLE001 - reported in the table
        build.error = f"catenc.loader.load({outdir.name}): {type(error).__name__}: {error}"
        return build
    build.seconds = time.perf_counter() - start
    build.source = (outdir / f"{composite}.c").read_bytes()
    return build


# ------------------------------------------------------------------------- timing


@dataclass
class Contender:
    label: str  # "catenc -O2", "numpy out=", "torch 2T", ...
    column: str  # a PEER_COLUMNS entry, or "catenc"
    run: Callable[[], object]
    preallocated: bool
    threads: int | None = None  # torch's thread count
    variant: str = ""
    samples: list[float] = field(default_factory=list)
    target: int = 0
    error: float = float("nan")
    problem: str | None = None  # an exception, or a wrong result
    crashed: bool = False  # raised: not timed

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1e3 if self.samples else float("nan")

    @property
    def ok(self) -> bool:
        return self.problem is None and bool(self.samples)


def _as_numpy(result: object) -> np.ndarray:
    if isinstance(result, torch.Tensor):
        return result.detach().numpy()
    return np.asarray(result)


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (normwise: robust where want crosses zero)."""
    if got.shape != want.shape:
        return float("inf")
    got64 = got.astype(np.float64)
    if not np.all(np.isfinite(got64)):
        return float("inf")
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got64 - want))) / scale


def _call(contender: Contender) -> tuple[float, object]:
    if contender.threads is not None and torch.get_num_threads() != contender.threads:
        torch.set_num_threads(contender.threads)
    time.sleep(GAP_S)
    start = time.perf_counter()
    result = contender.run()
    return time.perf_counter() - start, result


def time_contenders(
    contenders: list[Contender], reference: np.ndarray, runs: int, budget: float, rtol: float = RTOL
) -> None:
    """Warm up and check each contender (its relative error at most `rtol`), then time them round-robin."""
    for contender in contenders:
        try:
            seconds, result = _call(contender)
            contender.error = relative_error(_as_numpy(result), reference)
            del result
            if seconds < 0.2:
                seconds = min(seconds, _call(contender)[0])  # a second warm-up for short calls
        except Exception as error:  # noqa: BLE001 - reported in the table
            contender.problem = f"{type(error).__name__}: {error}"
            contender.crashed = True
            continue
        if not contender.error <= rtol:
            contender.problem = f"wrong result: max rel err {contender.error:.2e} > {rtol:g}"
        if seconds >= SLOW_CALL_S:
            contender.samples.append(seconds)  # first-call effects are noise at this length
            contender.target = max(1, min(runs, int(budget / seconds)))
        else:
            contender.target = max(1, min(runs, int(budget / seconds)))
            contender.target = max(contender.target, min(runs, 3))
    gc.collect()
    gc.disable()
    try:
        for turn in range(max((c.target for c in contenders), default=0)):
            # each round in an order of its own (seeded: the same every run), so that no contender is
            # always timed right after the same peer, while that peer's idle pool may still spin
            order = list(contenders)
            random.Random(turn).shuffle(order)
            for contender in order:
                if not contender.crashed and len(contender.samples) < contender.target:
                    contender.samples.append(_call(contender)[0])
    finally:
        gc.enable()


# --------------------------------------------------------------------------- rows


@dataclass
class Row:
    case: Case
    level: str
    catenc: Contender | None
    peers: list[Contender]
    build: Build | None
    peaks: Peaks
    work: float  # flops or bytes of one call
    others: float = float("nan")  # other processes' share of the CPUs while the row ran

    def best_peer(self) -> Contender | None:
        passing = [p for p in self.peers if p.ok]
        return min(passing, key=lambda p: p.median_ms) if passing else None

    def column(self, name: str) -> Contender | None:
        candidates = [p for p in self.peers if p.column == name]
        passing = [p for p in candidates if p.ok]
        if passing:
            return min(passing, key=lambda p: p.median_ms)
        return candidates[0] if candidates else None


def _fmt_ms(ms: float) -> str:
    if not math.isfinite(ms):
        return "-"
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def _per_second(ms: float, per_call: str) -> str:
    """The calls per second shown after a time, e.g. " (38.1 tok/s)", for rows that set Case.per_call."""
    return f" ({1e3 / ms:.1f} {per_call}/s)" if per_call and math.isfinite(ms) and ms > 0 else ""


def _cell(contender: Contender | None, show_variant: bool = True, per_call: str = "") -> str:
    if contender is None:
        return "n/a"
    if contender.problem and not contender.samples:
        return "**FAIL** (error)"
    text = _fmt_ms(contender.median_ms) + _per_second(contender.median_ms, per_call)
    if show_variant and contender.variant:
        text += f" ({contender.variant})"
    if contender.problem:
        text = f"**FAIL** {text}"
    return text


def _rate(row: Row) -> tuple[str, str]:
    c = row.catenc
    if c is None or not c.samples:
        return "-", "-"
    work = row.work
    seconds = c.median_ms / 1e3
    if row.case.kind == "flops":
        rate = work / seconds / 1e9
        return f"{rate:.1f} GFLOP/s", f"{100 * rate / row.peaks.fma_gflops:.1f}% FMA"
    rate = work / seconds / 1e9
    return f"{rate:.1f} GB/s", f"{100 * rate / row.peaks.triad_gbs:.0f}% triad"


def table(rows: list[Row]) -> list[str]:
    header = ["workload", "size", "catenc ms (prealloc)", "catenc rate", "of peak", "n"]
    header += [f"{c} ms ({'prealloc' if c.endswith('out=') else 'alloc'})" for c in PEER_COLUMNS]
    header += ["best peer", "catenc ÷ best", "catenc rel err", "others' CPU"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        name = row.case.name if row.level == "-O2" else f"{row.case.name} {row.level}"
        c = row.catenc
        if row.build is not None and row.build.error:
            catenc_cell, n, err = "**COMPILE ERROR**", "-", "-"
        elif c is None:
            catenc_cell, n, err = "-", "-", "-"
        else:
            catenc_cell = _cell(c, per_call=row.case.per_call)
            n = str(len(c.samples))
            err = "error" if c.problem and not math.isfinite(c.error) else f"{c.error:.1e}"
            if c.problem and c.samples:
                err = f"**FAIL** {err}"
        rate, share = _rate(row)
        best = row.best_peer()
        ratio = "-"
        if best is not None and c is not None and c.ok:
            ratio = f"{c.median_ms / best.median_ms:.2f}×"
        cells = [name, row.case.size, catenc_cell, rate, share, n]
        if row.level == "-O2":
            cells += [_cell(row.column(col), per_call=row.case.per_call) for col in PEER_COLUMNS]
        else:
            cells += ["〃"] * len(PEER_COLUMNS)
        busy = f"{100 * row.others:.0f}%" if math.isfinite(row.others) else "?"
        cells += [best.label if best else "-", ratio, err, busy]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def accuracy_table(rows: list[Row]) -> list[str]:
    lines = [
        "| workload | contender | writes into | n | median ms | max rel err | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        everyone = ([row.catenc] if row.catenc else []) + (row.peers if row.level == "-O2" else [])
        for c in everyone:
            status = "ok" if c.ok else f"**FAIL**: {c.problem}" if c.problem else "not run"
            label = c.label + (f" ({c.variant})" if c.variant else "")
            where = "preallocated outputs" if c.preallocated else "new arrays"
            err = f"{c.error:.1e}" if math.isfinite(c.error) else "-"
            median = _fmt_ms(c.median_ms)
            lines.append(f"| {row.case.name} | {label} | {where} | {len(c.samples)} | {median} | {err} | {status} |")
    return lines


# ---------------------------------------------------------------------------- main


def _select(all_cases: list[Case], only: str | None) -> list[Case]:
    if not only:
        return all_cases
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    chosen = [
        c for c in all_cases if any(c.name == w or c.composite == w or c.name.startswith(w + "-") for w in wanted)
    ]
    unknown = [
        w for w in wanted if not any(c.name == w or c.composite == w or c.name.startswith(w + "-") for c in all_cases)
    ]
    if unknown:
        names = ", ".join(sorted({c.name for c in all_cases} | {c.composite for c in all_cases}))
        raise SystemExit(f"bench: unknown workload(s) {', '.join(unknown)}; choose from {names}")
    return chosen


def _contenders(case: Case, inputs: list[np.ndarray]) -> list[Contender]:
    out: list[Contender] = []
    for peer in case.peers:
        if peer.is_torch:
            for threads in (1, 2) if THREADS >= 2 else (1,):
                suffix = " out=" if peer.preallocated else ""
                column = f"torch {threads}T{suffix}"
                torch.set_num_threads(threads)
                out.append(Contender(column, column, peer.make(inputs), bool(suffix), threads, peer.variant))
        else:
            out.append(Contender(peer.column, peer.column, peer.make(inputs), peer.preallocated, None, peer.variant))
    return out


def machine_info(peaks: Peaks, config: str) -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    blas_text = "none found"
    if blas:
        b = blas[0]
        blas_text = (
            f"{b.get('internal_api')} {b.get('version')}, kernel/coretype {b.get('architecture')}, "
            f"{b.get('num_threads')} threads ({b.get('threading_layer')})"
        )
    try:
        compiler = subprocess.run([c_compiler(), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError, CatencError):
        compiler = "unknown"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "catenc", "runtimes", "ops"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        commit = (commit or "unknown") + (" + uncommitted changes in catenc/runtimes/ops" if dirty else "")
    except OSError:
        commit = "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "CPU": f"{cpu}, {THREADS} cores",
        "BLAS (numpy, threadpoolctl)": blas_text,
        "numpy": np.__version__,
        "torch": f"{torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}",
        "onnxruntime": f"{onnxruntime.__version__}, CPUExecutionProvider",
        "catenc": f"{catenc.__version__} ({commit}), --config {config or '(defaults)'}",
        "C compiler": compiler,
        "STREAM triad": f"{peaks.triad_gbs:.1f} GB/s ({peaks.triad_text})",
        "fp32 FMA peak": f"{peaks.fma_gflops:.0f} GFLOP/s ({peaks.fma_text})",
        "environment": ", ".join(
            f"{k}={os.environ.get(k, 'unset')}"
            for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "KMP_BLOCKTIME", "OPENBLAS_THREAD_TIMEOUT")
        ),
    }


def run(argv: Sequence[str], catenc_config: str) -> int:
    parser = argparse.ArgumentParser(prog="bench/run.py", description="catenc against numpy and PyTorch.")
    parser.add_argument("--only", metavar="NAME[,NAME]", help="run only these workloads (name or composite)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per contender (default 10)")
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 runs: a smoke run")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds of timed calls per contender and row (default 5; quick 0.5)"
    )
    parser.add_argument("--no-o3", action="store_true", help="do not build or time catenc -O3")
    parser.add_argument(
        "--no-tuned", action="store_true", help="do not build or time catenc with the tuning files of bench/tuning/"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="Markdown file (default bench/results.md; --quick: build/bench/results-quick.md)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or (args.budget is not None and args.budget <= 0):
        parser.error("--runs and --budget must be positive")
    runs = 3 if args.quick and args.runs == 10 else args.runs
    budget = args.budget if args.budget is not None else 0.5 if args.quick else 5.0
    output = args.output or (BUILD / "results-quick.md" if args.quick else RESULTS)
    selected = _select(cases(args.quick), args.only)
    started = time.perf_counter()

    blas = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    for info in blas:
        log(
            f"numpy BLAS: {info.get('internal_api')} {info.get('version')}, kernel/coretype "
            f"{info.get('architecture')}, {info.get('num_threads')} threads"
        )
    log(
        f"torch {torch.__version__}; catenc --config {catenc_config or '(defaults)'}; "
        f"runs {runs}, budget {budget:g} s per contender"
    )

    meter = CpuMeter()
    whole_run = CpuMeter()
    log("==> machine peaks")
    peaks = measure_peaks(args.quick)
    peaks.others = meter.others()
    log(f"  STREAM triad {peaks.triad_gbs:.1f} GB/s, fp32 FMA peak {peaks.fma_gflops:.0f} GFLOP/s")
    if peaks.others > BUSY_WARNING:
        log(f"  (other processes used {100 * peaks.others:.0f}% of the CPUs meanwhile: the peaks are low)")

    log("==> compiling (catenc compile + load)")
    builds: dict[tuple[str, str], Build] = {}
    for case in selected:
        if case.prepare is not None:
            start = time.perf_counter()
            case.prepare()
            log(f"  {case.toml}: written in {time.perf_counter() - start:.1f} s")
    for composite, toml, extra in dict.fromkeys((c.composite, c.toml, c.compile_args) for c in selected):
        for level in levels_for(composite, args.no_o3, not args.no_tuned):
            build = compile_composite(composite, ROOT / toml, level, catenc_config, extra)
            builds[composite, level] = build
            if build.error:
                log(f"  {composite} {level}: COMPILE ERROR\n    " + build.error.replace("\n", "\n    "))
            else:
                log(f"  {composite} {level}: {build.seconds:.2f} s")

    rows: list[Row] = []
    for case in selected:
        log(f"==> {case.name} ({case.size})")
        rng = np.random.default_rng(zlib.crc32(case.name.encode()))
        inputs = case.inputs(rng)
        reference = case.reference(inputs)
        contenders: list[Contender] = []
        catenc_rows: list[tuple[str, Contender | None, Build]] = []
        for level in levels_for(case.composite, args.no_o3, not args.no_tuned):
            build = builds.get((case.composite, level))
            if build is None:
                continue
            default = builds.get((case.composite, "-O2"))
            sweep = case.composite == LEVEL_SWEEP
            shown_anyway = sweep and level != TUNED  # the level sweep shows every -O level
            if level in ("-O3", TUNED) and not shown_anyway and default is not None and not _o3_differs(default, build):
                continue  # the same C as the default level (or the same failure): no row
            contender = None
            if build.library is not None:
                try:
                    bound = BoundCall(build.library, case.entry, inputs)
                    contender = Contender(f"catenc {level}", "catenc", bound, True)
                except Exception as error:  # noqa: BLE001 - reported in the table
                    contender = Contender(f"catenc {level}", "catenc", lambda: None, True, crashed=True)
                    contender.problem = f"binding failed: {type(error).__name__}: {error}"
                contenders.append(contender)
            catenc_rows.append((level, contender, build))
        peers = _contenders(case, inputs)
        meter.others()
        rtol = case.tolerance(reference) if case.tolerance is not None else RTOL
        time_contenders(contenders + peers, reference, runs, budget, rtol)
        others = meter.others()
        for level, contender, build in catenc_rows:
            rows.append(Row(case, level, contender, peers, build, peaks, case.work(inputs), others))
        for c in contenders + peers:
            label = c.label + (f" ({c.variant})" if c.variant else "")
            state = "ok" if c.ok else f"FAIL: {c.problem}"
            rate = _per_second(c.median_ms, case.per_call)
            log(f"  {label:<26} {_fmt_ms(c.median_ms):>9} ms{rate}  n={len(c.samples):<2} err {c.error:.1e}  {state}")
        if others > BUSY_WARNING:
            log(f"  (other processes used {100 * others:.0f}% of the CPUs meanwhile: 2-thread timings suffer)")
        del inputs, reference

    elapsed = time.perf_counter() - started
    others = whole_run.others()
    lines = report(rows, builds, peaks, catenc_config, runs, budget, elapsed, args.quick, others)
    log("")
    log("\n".join(table(rows)))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    log(f"\nwrote {_shown(output)} ({elapsed:.0f} s in all)")
    failed = [r for r in rows if r.catenc is None or not r.catenc.ok]
    slow_attention = [
        b for (comp, _), b in builds.items() if comp == "gpt2_attention" and b.seconds > ATTENTION_COMPILE_LIMIT_S
    ]
    for (composite, level), build in builds.items():
        if composite == "gpt2_attention" and not build.error:
            verdict = "ok" if build.seconds <= ATTENTION_COMPILE_LIMIT_S else "TOO SLOW"
            log(
                f"attention block compile {level}: {build.seconds:.2f} s "
                f"(limit {ATTENTION_COMPILE_LIMIT_S:g} s): {verdict}"
            )
    if others > BUSY_WARNING:
        log(f"warning: other processes used {100 * others:.0f}% of the CPUs during the run; the timings are noisy")
    if failed:
        log(f"catenc FAILED on: {', '.join(sorted({r.case.name for r in failed}))}")
    if slow_attention:
        log(f"the attention block compiled in more than {ATTENTION_COMPILE_LIMIT_S:g} s")
    return 1 if failed or slow_attention else 0


def report(
    rows: list[Row],
    builds: dict[tuple[str, str], Build],
    peaks: Peaks,
    config: str,
    runs: int,
    budget: float,
    elapsed: float,
    quick: bool,
    others: float,
) -> list[str]:
    info = machine_info(peaks, config)
    configs = {
        json.dumps(b.library.runtime.get("config", {}), sort_keys=True)
        for b in builds.values()
        if b.library is not None and b.level == "-O2"
    }
    info["catenc runtime config (manifest, -O2)"] = "; ".join(sorted(configs)) or "-"
    info["other processes"] = (
        f"{100 * others:.0f}% of the CPUs over the whole run, {100 * peaks.others:.0f}% while measuring the peaks"
    )
    lines = ["# catenc benchmark results", ""]
    if quick:
        lines += ["**Quick smoke run: small sizes, few runs; not a measurement.**", ""]
    lines += ["Written by `make bench` (`bench/run.py`); numbers from one run on a shared machine.", ""]
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in info.items()] + [""]
    lines += [
        "## Timings",
        "",
        f"Median of the timed runs (n; at most {runs}) after warm-up, milliseconds. Contenders run",
        "round-robin (catenc, numpy, numpy out=, torch 1T, ..., each round in its own seeded order, so that",
        f"none always follows the same peer), {GAP_S * 1e3:g} ms apart, on the same inputs.",
        "catenc calls the C entry directly (catenc/ccall.py) with **preallocated** outputs and workspace;",
        "the `numpy` and `torch` columns are the peers as users call them, **allocating** their results;",
        "the `out=` columns write into **preallocated** outputs (`np.matmul(out=)`, `torch.matmul(out=)`,",
        "`torch.softmax(out=)`, an in-place numpy chain), where the library offers it. n/a: no such form.",
        "The ONNX model rows (resnet18, mobilenetv2, bert4, gpt2-onnx) time `catenc compile model.onnx` against",
        "onnxruntime on the same file (`onnxruntime 1T`/`2T`: intra_op_num_threads 1 and 2) and the PyTorch module",
        "it was exported from, in eager mode (the `torch` columns).",
        "`catenc ÷ best`: catenc's time over the fastest correct peer (below 1: catenc is faster).",
        f"A row where catenc is slow runs fewer times: at most {budget:g} s of calls per contender, and a call "
        f"over {SLOW_CALL_S:g} s counts its warm-up as a run (n shows how many).",
        "Rates: GFLOP/s as a share of the FMA peak for compute-bound rows, GB/s (inputs read once + outputs",
        "written once) as a share of the triad bandwidth for memory-bound rows (softmax and layernorm fit in",
        "the L3 cache here, so more than 100% is possible). Rows timed per generated token (gpt2-decode) also",
        "show tokens per second, 1 / the median time, next to every time.",
        "`others' CPU`: the share of the machine's CPU time other processes used while the row ran (/proc/stat",
        f"less this process); above {100 * BUSY_WARNING:.0f}% the 2-thread contenders wait for a core and their "
        "times mean little.",
        "`-O3` rows appear only where catenc -O3 emits different C from the default level (-O2).",
        "`tuned` rows: -O2 with `--tuning bench/tuning/<composite>.tuning.json` (written by `make bench-tune`",
        "on the machines its entries name; kernels without an entry for this machine keep the heuristics),",
        "shown only where that emits different C; the -O2 row is the heuristics alone.",
        f"Each result is checked against a float64 numpy reference: max|got − ref| / max|ref| ≤ {RTOL:g}, "
        "else **FAIL**; an int8 row's reference is onnxruntime's int8 result, and it allows one quantisation "
        "step of the output.",
        "",
    ]
    lines += table(rows) + [""]
    lines += ["### Notes per workload", ""]
    seen: set[str] = set()
    for row in rows:
        if row.case.name in seen:
            continue
        seen.add(row.case.name)
        note = f": {row.case.notes}" if row.case.notes else ""
        entry = f", entry `{row.case.entry}`" if row.case.entry != row.case.composite else ""
        lines.append(f"- **{row.case.name}** (`{row.case.toml}`{entry}){note}")
    lines += [
        "",
        "## Compile time (file → loaded library)",
        "",
        "`catenc compile FILE -o build/bench/NAME"
        + (f" --config {config}" if config else "")
        + " [-O3]` plus `catenc.loader.load`, "
        "wall clock.",
        "",
        "| composite | -O2 s | -O3 s | -O3 emits different C |",
        "|---|---|---|---|",
    ]
    for composite in dict.fromkeys(c for c, _ in builds):
        o2 = builds.get((composite, "-O2"))
        o3 = builds.get((composite, "-O3"))

        def cell(b: Build | None, composite: str = composite) -> str:
            if b is None:
                return "-"
            if b.error:
                return "**COMPILE ERROR**"
            text = f"{b.seconds:.2f}"
            if composite == "gpt2_attention" and b.seconds > ATTENTION_COMPILE_LIMIT_S:
                text += f" **over {ATTENTION_COMPILE_LIMIT_S:g} s**"
            return text

        differs = "-"
        if o2 and o3 and not o2.error and not o3.error:
            differs = "yes" if _o3_differs(o2, o3) else "no"
        lines.append(f"| {composite} | {cell(o2)} | {cell(o3)} | {differs} |")
    lines += ["", "## Accuracy and output handling of every contender", ""] + accuracy_table(rows)
    problems = [b for b in builds.values() if b.error]
    failures = [(r, c) for r in rows for c in ([r.catenc] if r.catenc else []) if c.problem]
    if problems or failures or peaks.problems:
        lines += ["", "## Problems", ""]
        for b in problems:
            lines += [f"- `{b.composite}` {b.level}: compile failed:", "", "```", b.error or "", "```", ""]
        for r, c in failures:
            lines.append(f"- {r.case.name} {c.label}: {c.problem}")
        for p in peaks.problems:
            lines += ["- machine peak kernel failed:", "", "```", p, "```"]
    lines += ["", f"Total time of the run: {elapsed:.0f} s.", ""]
    return lines
