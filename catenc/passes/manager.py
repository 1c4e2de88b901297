"""The pass manager: runs a pipeline of named passes over one entry, with instruments: hooks
before and after each pass (those of docs/cli.md: --dump-after, --disable-pass, --time-passes,
--verify-ir).

A pass is a function from one printable structure to the next (`Graph -> Graph`,
`Graph -> Schedule`, ...). The manager knows each structure's kind only through the
`Structure` table it is given: how to print it and how to verify it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Structure:
    """One kind of structure a pass takes or gives: its name, printer and verifier."""

    name: str
    kind: type
    format: Callable[[Any], str]
    verify: Callable[[Any], list[str]]


@dataclass(frozen=True)
class Pass:
    """A named transformation with a one-line purpose. A required pass (one that changes the
    kind of structure, or that later passes rely on) cannot be disabled."""

    name: str
    purpose: str
    takes: Structure
    gives: Structure
    run: Callable[[Any], Any]
    required: bool = False


@dataclass(frozen=True)
class Pipeline:
    """The passes of one optimisation level, in order."""

    level: str
    passes: tuple[Pass, ...]

    def __post_init__(self) -> None:
        for before, after in zip(self.passes, self.passes[1:]):
            if before.gives.kind is not after.takes.kind:
                raise ValueError(
                    f"pipeline -O{self.level}: {before.name} gives a {before.gives.name}, "
                    f"{after.name} takes a {after.takes.name}"
                )

    def format(self, disabled: Sequence[str] = ()) -> str:
        width = max(len(p.name) for p in self.passes)
        kinds = [f"{p.takes.name} -> {p.gives.name}" for p in self.passes]
        lines = [f"pipeline -O{self.level}: {len(self.passes)} passes"]
        for n, (p, kind) in enumerate(zip(self.passes, kinds), 1):
            mark = "disabled" if p.name in disabled else "required" if p.required else "optional"
            lines.append(f"  {n:2}. {p.name:<{width}}  {kind:<{max(map(len, kinds))}}  {mark:<8}  {p.purpose}")
        return "\n".join(lines)


class VerifyError(Exception):
    """A structure broke an invariant: a compiler bug, named by the pass that caused it."""


class Instrument(Protocol):
    """Hooks around each pass, as LLVM's PassInstrumentation: `before` says whether the pass runs
    (every instrument is asked), `after` sees what a pass that ran gave."""

    def before(self, p: Pass, structure: Any) -> bool: ...

    def after(self, p: Pass, structure: Any) -> None: ...


@dataclass(frozen=True)
class SkipDisabled:
    """--disable-pass: the named passes do not run."""

    names: frozenset[str]

    def before(self, p: Pass, structure: Any) -> bool:
        return p.name not in self.names

    def after(self, p: Pass, structure: Any) -> None:
        pass


@dataclass
class VerifyIR:
    """--verify-ir: the pipeline's input and every pass's output keep their invariants."""

    verified: Any = None  # the structure last verified: a later pass's input needs no second look

    def before(self, p: Pass, structure: Any) -> bool:
        if structure is not self.verified:
            _verify(p.takes, structure, "the pipeline's input")
            self.verified = structure
        return True

    def after(self, p: Pass, structure: Any) -> None:
        _verify(p.gives, structure, f"pass '{p.name}'")
        self.verified = structure


@dataclass
class DumpAfter:
    """--dump-after: the printed output of the named passes (or "all"), one per entry run."""

    names: frozenset[str]
    dumps: dict[str, list[str]] = field(default_factory=dict)  # pass name -> one dump per entry

    def before(self, p: Pass, structure: Any) -> bool:
        return True

    def after(self, p: Pass, structure: Any) -> None:
        if p.name in self.names or "all" in self.names:
            self.dumps.setdefault(p.name, []).append(p.gives.format(structure))


@dataclass
class TimePasses:
    """--time-passes: the seconds each pass ran, summed over the entries run."""

    seconds: dict[str, float] = field(default_factory=dict)  # pass name -> total time
    start: float = 0.0

    def before(self, p: Pass, structure: Any) -> bool:
        self.start = time.perf_counter()
        return True

    def after(self, p: Pass, structure: Any) -> None:
        self.seconds[p.name] = self.seconds.get(p.name, 0.0) + time.perf_counter() - self.start

    def format(self) -> str:
        total = sum(self.seconds.values())
        width = max((len(n) for n in self.seconds), default=4)
        lines = [f"pass times (total {total * 1000:.1f} ms)"]
        for name, seconds in self.seconds.items():
            share = 100 * seconds / total if total else 0.0
            lines.append(f"  {name:<{width}}  {seconds * 1000:9.2f} ms  {share:5.1f}%")
        return "\n".join(lines)


@dataclass
class Instruments:
    """The instruments the command line asks for (docs/cli.md); collects the dumps and times of
    every entry it runs. Iterating gives a fresh list of hooks for one run of a pipeline."""

    disabled: frozenset[str] = frozenset()
    dump_after: frozenset[str] = frozenset()  # pass names, or "all"
    verify: bool = False
    timing: bool = False
    dumper: DumpAfter = field(init=False)
    timer: TimePasses = field(init=False)

    def __post_init__(self) -> None:
        self.dumper = DumpAfter(self.dump_after)
        self.timer = TimePasses()

    @property
    def dumps(self) -> dict[str, list[str]]:
        return self.dumper.dumps

    def __iter__(self) -> Iterator[Instrument]:
        """The hooks, outermost first: the timer comes last so that it times the pass alone."""
        hooks = [
            (bool(self.disabled), SkipDisabled(self.disabled)),
            (bool(self.dump_after), self.dumper),
            (self.verify, VerifyIR()),
            (self.timing, self.timer),
        ]
        return (hook for wanted, hook in hooks if wanted)

    def check(self, pipeline: Pipeline) -> None:
        """Raise ValueError for a disabled or dumped name the pipeline lacks, or a required pass disabled."""
        names = [p.name for p in pipeline.passes]
        for name in sorted(self.disabled | (self.dump_after - {"all"})):
            if name not in names:
                raise ValueError(f"no pass '{name}' in the -O{pipeline.level} pipeline ({', '.join(names)})")
        for p in pipeline.passes:
            if p.required and p.name in self.disabled:
                raise ValueError(f"pass '{p.name}' is required: {p.purpose}")

    def format_times(self) -> str:
        return self.timer.format()


def run_pipeline(pipeline: Pipeline, structure: Any, instruments: Iterable[Instrument]) -> list[Any]:
    """The structure after each pass of the pipeline that runs, in order. Every instrument's
    `before` is called in turn, the pass runs if all say so, then the `after`s in reverse order."""
    hooks = list(instruments)
    trace = []
    for p in pipeline.passes:
        if not all([hook.before(p, structure) for hook in hooks]):
            continue
        structure = p.run(structure)
        for hook in reversed(hooks):
            hook.after(p, structure)
        trace.append(structure)
    return trace


def _verify(kind: Structure, structure: Any, after: str) -> None:
    problems = kind.verify(structure)
    if problems:
        listed = "\n".join(f"  {problem}" for problem in problems)
        raise VerifyError(f"the {kind.name} after {after} is malformed:\n{listed}")
