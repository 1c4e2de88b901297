"""The schedule search of `catenc tune` (docs/cli.md, "Tuning").

Each kernel's decisions (and each dtype's gemm tiles) form a knob. The search starts from the
heuristics' schedule and measures rounds: in each round every knob still searching takes its
next candidate, one library is built with all of them, and per-kernel timers say what each
candidate cost (kernels run one after another, so one build times all knobs at once). A
knob's candidates are the neighbours (one field changed) of its best few measured values, a
beam; fields that cannot change a kernel's code are not searched (no threads for a kernel
without loops, no vector math without a transcendental), and knobs with under 1% of their
entry's cost (cost model, at the sizes measured) keep the heuristics. Gemm tiles are searched
after the kernels, with the kernels at their best. Several size bindings are measured each
round; a candidate's time is the geometric mean over them. At the end the best schedule and
the heuristics' are timed again in turns, and a kernel keeps its tuned decisions only where
they measured no slower than the heuristics'.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from catenc.ir.cost import TRANSCENDENTAL_OPS_WEIGHT
from catenc.ir.nodes import Reduce, Unary, walk
from catenc.registry import TRANSCENDENTAL_OPS
from catenc.schedule.interchange import strided_reduction
from catenc.schedule.kernels import Decisions, Kernel, Schedule, kernel_cost
from catenc.schedule.tiles import GemmTiles
from catenc.schedule.tuning_file import (
    TuningEntry,
    decisions_json,
    kernel_signature,
    kernel_text,
    tiles_json,
    tiles_signature,
)
from catenc.symbolic import Expr

BEAM = 3  # best candidates per knob whose neighbours are tried
TRIALS_KEPT = 8  # measured candidates a tuning entry keeps, for a resumed search
MIN_COST_SHARE = 0.01  # a kernel below this share of its entry's cost keeps the heuristics
MIN_GAIN = 0.02  # a tuned kernel must beat the heuristics by this share in the confirmation
CONFIRM_ROUNDS = 3  # times the best and the heuristics are each timed again, in turns
PARALLEL_WORKS = (1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20)
JAMS = (1, 2, 4)

Candidate = str  # a knob's values as sorted JSON: hashable and printable


@dataclass(frozen=True)
class Site:
    """Where a knob's kernel runs: the entry's name and the kernel's number in its schedule."""

    entry: str
    kernel: int


@dataclass(eq=False)  # a knob is itself: hashed by identity
class Knob:
    """One kernel's decisions, or one dtype's gemm tiles, and what was measured of them."""

    signature: str
    label: str  # the kernel's name (or "gemm tiles f32")
    text: str  # what it computes, for the tuning file's reader
    base: dict[str, Any]  # the heuristics' values
    space: dict[str, tuple[Any, ...]]  # the values each searched field may take
    sites: list[Site] = field(default_factory=list)
    measured: dict[Candidate, float] = field(default_factory=dict)
    queued: list[Candidate] = field(default_factory=list)
    pruned: str = ""  # why it is not searched
    tiles_of: str = ""  # the dtype, for a tiles knob
    chosen: Candidate | None = None  # what the confirmation kept: the best, or the heuristics
    works: tuple[float, ...] = ()  # the kernel's work at each binding (what a thread threshold is compared with)

    @property
    def heuristic(self) -> Candidate:
        return _candidate(self.base)

    def best(self) -> Candidate:
        if self.chosen is not None:
            return self.chosen
        return self.ranked()[0] if self.measured else self.heuristic

    def ranked(self) -> list[Candidate]:
        """Measured candidates, fastest first; among equal times the one measured first (the
        heuristics, then their nearest neighbours)."""
        order = {c: n for n, c in enumerate(self.measured)}
        return sorted(self.measured, key=lambda c: (self.measured[c], order[c]))

    def next_candidate(self) -> Candidate | None:
        """The first untried neighbour of the beam (the best measured candidates)."""
        if self.pruned:
            return None
        if self.heuristic not in self.measured:
            return self.heuristic
        for value in self.ranked()[:BEAM]:
            for neighbour in self.neighbours(json.loads(value)):
                if neighbour not in self.measured and neighbour not in self.queued:
                    return neighbour
        return None

    def neighbours(self, values: dict[str, Any]) -> list[Candidate]:
        out = []
        for name, choices in self.space.items():
            for choice in choices:
                if choice != values[name]:
                    changed = self.normalised({**values, name: choice})
                    if changed is not None:
                        out.append(_candidate(changed))
        return list(dict.fromkeys(out))

    def normalised(self, values: dict[str, Any]) -> dict[str, Any] | None:
        """Values that emit the same code as these, canonical (or None where illegal)."""
        if self.tiles_of:
            tiles = GemmTiles(**values)
            lanes = tiles.lanes(self.tiles_of)
            registers = tiles.mr * (tiles.nr // lanes)
            base = GemmTiles(**self.base)
            if registers > base.mr * (base.nr // lanes):  # more accumulators than registers hold
                return None
            tiles = replace(
                tiles,
                mc=max(tiles.mr, tiles.mc // tiles.mr * tiles.mr),
                nc=max(tiles.nr, tiles.nc // tiles.nr * tiles.nr),
            )
            try:
                tiles.check(self.tiles_of)
            except ValueError:
                return None
            return tiles_json(tiles)
        if "parallel" in values and not values["parallel"]:
            values = {**values, "parallel_work": self.base["parallel_work"]}
        elif "parallel_work" in values and self.works:
            # thresholds on the same side of the work at every binding run the same way
            def side(threshold: int) -> tuple[bool, ...]:
                return tuple(work >= threshold for work in self.works)

            same = [
                t for t in (self.base["parallel_work"], *PARALLEL_WORKS) if side(t) == side(values["parallel_work"])
            ]
            values = {**values, "parallel_work": same[0]}
        return values


def _candidate(values: dict[str, Any]) -> Candidate:
    return json.dumps(values, sort_keys=True)


def kernel_space(kernel: Kernel, schedule: Schedule, threads: bool, lanes: int) -> dict[str, tuple[Any, ...]]:
    """The values worth measuring for each decision of this kernel: only fields that change its code."""
    bodies = [m.body for m in kernel.members]
    nodes = [n for body in bodies for n in walk(body)]
    has_reduce = any(isinstance(n, Reduce) for n in nodes)
    space: dict[str, tuple[Any, ...]] = {}
    if threads and (kernel.outer or kernel.contraction is not None):
        space["parallel"] = (False, True)
        space["parallel_work"] = PARALLEL_WORKS
    if kernel.contraction is None and has_reduce:
        space["vector_lanes"] = tuple(sorted({0, lanes // 2, lanes} - {1} if lanes > 1 else {0}))
        space["jam"] = JAMS
    if any(isinstance(n, Unary) and n.op in TRANSCENDENTAL_OPS for n in nodes):
        space["vector_math"] = (False, True)
    if kernel.contraction is None and any(
        strided_reduction(m, schedule.graph.buffer(m.name).dtype) is not None for m in kernel.members
    ):
        space["interchange"] = (False, True)
    if kernel.decisions.winograd:  # direct, or a tile up to the one the level's heuristics took
        space["winograd"] = tuple(sorted({0, 2, kernel.decisions.winograd}))
    known = {"parallel", "parallel_work", "vector_lanes", "jam", "vector_math", "interchange", "winograd"}
    for f in fields(Decisions):  # a variant added to Decisions is searched as soon as it exists
        if f.name not in known and isinstance(getattr(kernel.decisions, f.name), bool):
            space[f.name] = (False, True)
    return space


def tiles_space(tiles: GemmTiles, dtype: str) -> dict[str, tuple[int, ...]]:
    lanes = tiles.lanes(dtype)
    return {
        "mr": tuple(sorted({4, 6, 8, tiles.mr})),
        "nr": tuple(sorted({lanes, 2 * lanes, 4 * lanes, tiles.nr})),
        "kc": tuple(sorted({128, 256, 384, 512, tiles.kc})),
        "mc": tuple(sorted({tiles.mr * 8, tiles.mr * 16, tiles.mr * 32, tiles.mc})),
        "nc": tuple(sorted({256, 512, 1024, 2048, tiles.nc})),
    }


def cost_shares(schedule: Schedule, bindings: Sequence[dict[str, int]]) -> list[float]:
    """Each kernel's share of the entry's weighted cost, summed over the bindings."""
    totals = []
    for kernel in schedule.kernels:
        cost = kernel_cost(schedule.graph, kernel)
        weighted = cost.flops + cost.transcendentals * TRANSCENDENTAL_OPS_WEIGHT + cost.bytes_read + cost.bytes_written
        totals.append(sum(_at(weighted, b) for b in bindings))
    whole = sum(totals) or 1
    return [t / whole for t in totals]


def kernel_work(schedule: Schedule, kernel: Kernel) -> Expr:
    """About what the lowering compares a kernel's thread threshold with: its flops plus the
    elements it stores (counted as 4-byte values)."""
    cost = kernel_cost(schedule.graph, kernel)
    return cost.flops + cost.bytes_written // 4


def _at(e, sizes: dict[str, int]) -> float:
    return float(e.evaluate({name: sizes.get(name, 1) for name in e.free_symbols()}))


# Times of one build at one size binding: entry name -> seconds per entry call of each kernel (the
# entries a binding gives every free size of).
Timings = dict[str, list[float]]
Measure = Callable[[Callable[[Schedule], Schedule]], list[Timings]]  # a tune -> one Timings per binding
Progress = Callable[[float, str], None]


@dataclass
class Search:
    """The knobs of every entry, and the rounds measured so far."""

    knobs: list[Knob]
    rounds: int = 0

    def tune_for(self, chosen: dict[str, Candidate]) -> Callable[[Schedule], Schedule]:
        """A tune giving each knob its chosen candidate (the best measured where not chosen)."""
        by_signature = {k.signature: k for k in self.knobs}

        def tune(schedule: Schedule) -> Schedule:
            kernels = []
            for kernel in schedule.kernels:
                knob = by_signature.get(kernel_signature(schedule.graph, kernel))
                if knob is None or knob.pruned:
                    kernels.append(kernel)
                    continue
                values = json.loads(chosen.get(knob.signature, knob.best()))
                kernels.append(replace(kernel, decisions=replace(kernel.decisions, **values)))
            tiles = []
            for dtype, base in schedule.tiles:
                knob = by_signature.get(tiles_signature(dtype))
                if knob is None:
                    tiles.append((dtype, base))
                else:
                    tiles.append((dtype, GemmTiles(**json.loads(chosen.get(knob.signature, knob.best())))))
            return replace(schedule, kernels=tuple(kernels), tiles=tuple(tiles))

        return tune

    def record(self, chosen: dict[str, Candidate], timings: list[Timings]) -> None:
        for knob, seconds in self.times(chosen, timings).items():
            candidate = chosen[knob.signature]
            knob.measured[candidate] = min(seconds, knob.measured.get(candidate, math.inf))

    def times(self, chosen: dict[str, Candidate], timings: list[Timings]) -> dict[Knob, float]:
        """Each chosen knob's time in these timings: the sum over its kernels, the geometric mean
        over the bindings that ran them."""
        out = {}
        for knob in self.knobs:
            if knob.signature not in chosen:
                continue
            seconds = [sum(t[s.entry][s.kernel] for s in knob.sites if s.entry in t) for t in timings]
            seconds = [x for x, t in zip(seconds, timings) if any(s.entry in t for s in knob.sites)]
            if seconds:
                out[knob] = math.exp(sum(math.log(max(x, 1e-9)) for x in seconds) / len(seconds))
        return out


def collect_knobs(
    schedules: Sequence[Schedule], bindings: Sequence[dict[str, int]], threads: bool, lanes: int
) -> list[Knob]:
    """A knob per distinct kernel signature (kernels that compute alike share one) and per
    dtype's gemm tiles, from the heuristics' schedules of the entries, in entry order."""
    knobs: dict[str, Knob] = {}
    for schedule in schedules:
        e = schedule.graph.name
        shares = cost_shares(schedule, bindings)
        for k, kernel in enumerate(schedule.kernels):
            signature = kernel_signature(schedule.graph, kernel)
            if signature not in knobs:
                space = kernel_space(kernel, schedule, threads, lanes)
                knob = Knob(
                    signature, kernel.name, kernel_text(schedule.graph, kernel), decisions_json(kernel.decisions), space
                )
                if kernel.contraction is None:  # a gemm's threads follow its own thresholds too
                    knob.works = tuple(_at(kernel_work(schedule, kernel), b) for b in bindings)
                if not space:
                    knob.pruned = "no decision changes its code"
                elif shares[k] < MIN_COST_SHARE:
                    knob.pruned = f"{100 * shares[k]:.2f}% of the entry's cost"
                knobs[signature] = knob
            knobs[signature].sites.append(Site(e, k))
        for dtype, tiles in schedule.tiles:
            signature = tiles_signature(dtype)
            if signature not in knobs:
                knob = Knob(
                    signature,
                    f"gemm tiles {dtype}",
                    f"gemm tiles {dtype}",
                    tiles_json(tiles),
                    tiles_space(tiles, dtype),
                    tiles_of=dtype,
                )
                knobs[signature] = knob
            gemm_sites = [
                Site(e, k)
                for k, kernel in enumerate(schedule.kernels)
                if kernel.contraction is not None and kernel.contraction.dtype.name == dtype
            ]
            knobs[signature].sites.extend(gemm_sites)
    return list(knobs.values())


def run_search(
    search: Search, measure: Measure, budget: float, progress: Progress | None = None, clock=time.monotonic
) -> None:
    """Rounds until every knob has converged or the budget (seconds) is spent: kernels first,
    then gemm tiles; then the confirmation of the best against the heuristics."""
    start = clock()
    kernels = [k for k in search.knobs if not k.tiles_of and not k.pruned]
    tiles = [k for k in search.knobs if k.tiles_of]
    # the share of the budget each phase may end at; the rest is kept for the confirmation
    phases = [(kernels, 0.55 if tiles else 0.85), (tiles, 0.85)]
    for knobs, share in phases:
        while clock() - start < budget * share:
            chosen: dict[str, Candidate] = {}
            for knob in knobs:
                candidate = knob.next_candidate()
                if candidate is not None:
                    chosen[knob.signature] = candidate
                    knob.queued.append(candidate)
            if not chosen:
                break
            search.record(chosen, measure(search.tune_for(chosen)))
            search.rounds += 1
            if progress:
                progress(min(1.0, (clock() - start) / budget), _best_line(search))
    confirm(search, measure, rounds=CONFIRM_ROUNDS)
    if progress:
        progress(1.0, _best_line(search))


def confirm(search: Search, measure: Measure, rounds: int) -> None:
    """Time the best and the heuristics again, in turns; a knob keeps its best only where that
    was faster by MIN_GAIN in these measurements too (a clock's spike during the search, or
    a build's luck of alignment, does not count)."""
    searched = [k for k in search.knobs if not k.pruned and k.best() != k.heuristic]
    if not searched:
        return
    best = {k.signature: k.best() for k in searched}
    plain = {k.signature: k.heuristic for k in searched}
    fastest: dict[tuple[Knob, bool], float] = {}
    for _ in range(rounds):
        for tuned, chosen in ((False, plain), (True, best)):
            for knob, seconds in search.times(chosen, measure(search.tune_for(chosen))).items():
                fastest[knob, tuned] = min(seconds, fastest.get((knob, tuned), math.inf))
    for knob in searched:
        won = fastest[knob, True] < fastest[knob, False] * (1 - MIN_GAIN)
        knob.chosen = best[knob.signature] if won else knob.heuristic
        # what the file and the summary report: these measurements, taken in turns
        knob.measured[knob.heuristic] = fastest[knob, False]
        knob.measured[best[knob.signature]] = fastest[knob, True]


def _best_line(search: Search) -> str:
    active = [k for k in search.knobs if not k.pruned and k.measured]
    if not active:
        return f"round {search.rounds}"
    gains = []
    for knob in active:
        base = knob.measured.get(knob.heuristic)
        if base:
            gains.append((base - knob.measured[knob.best()], knob))
    if not gains:
        return f"round {search.rounds}"
    gain, knob = max(gains, key=lambda g: (g[0], g[1].label))
    best = knob.measured[knob.best()]
    return f"round {search.rounds}: {knob.label} {1e3 * knob.measured[knob.heuristic]:.3f} -> {1e3 * best:.3f} ms"


def entries_of(
    search: Search, machine: dict[str, Any], target: dict[str, Any], bindings: Sequence[dict[str, int]]
) -> list[TuningEntry]:
    """The tuning file's entries for every knob that was measured."""
    out = []
    for knob in search.knobs:
        if knob.pruned or not knob.measured:
            continue
        best = knob.best()
        trials = [(c, knob.measured[c]) for c in knob.ranked()[:TRIALS_KEPT]]
        out.append(
            TuningEntry(
                knob.signature,
                f"{knob.label}: {knob.text}",
                machine,
                target,
                json.loads(best),
                tuple(dict(b) for b in bindings),
                {"heuristic": knob.measured.get(knob.heuristic, math.nan), "tuned": knob.measured[best]},
                tuple({"decisions": json.loads(c), "seconds": s} for c, s in trials),
            )
        )
    return out


def resume(search: Search, previous: Sequence[TuningEntry]) -> None:
    """Count the previous run's measured candidates as measured (a resumed search skips them)."""
    by_signature = {k.signature: k for k in search.knobs}
    for entry in previous:
        knob = by_signature.get(entry.signature)
        if knob is None or knob.pruned:
            continue
        for trial in entry.trials:
            values, seconds = trial.get("decisions"), trial.get("seconds")
            if isinstance(values, dict) and isinstance(seconds, (int, float)) and set(values) == set(knob.base):
                normal = knob.normalised(values)
                if normal is not None:
                    knob.measured[_candidate(normal)] = float(seconds)
