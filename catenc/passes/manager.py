"""The pass manager: runs a pipeline of named passes over one entry, with the instruments of
docs/cli.md (--print-passes, --dump-after, --disable-pass, --time-passes, --verify-ir).

A pass is a function from one printable structure to the next (`Graph -> Graph`,
`Graph -> Schedule`, ...). The manager knows each structure's kind only through the
`Structure` table it is given: how to print it and how to verify it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class Instruments:
    """What to do around each pass; collects the dumps and times of every entry it runs."""

    disabled: frozenset[str] = frozenset()
    dump_after: frozenset[str] = frozenset()  # pass names, or "all"
    verify: bool = False
    timing: bool = False
    dumps: dict[str, list[str]] = field(default_factory=dict)  # pass name -> one dump per entry
    seconds: dict[str, float] = field(default_factory=dict)  # pass name -> total time

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
        total = sum(self.seconds.values())
        width = max((len(n) for n in self.seconds), default=4)
        lines = [f"pass times (total {total * 1000:.1f} ms)"]
        for name, seconds in self.seconds.items():
            share = 100 * seconds / total if total else 0.0
            lines.append(f"  {name:<{width}}  {seconds * 1000:9.2f} ms  {share:5.1f}%")
        return "\n".join(lines)


def run_pipeline(pipeline: Pipeline, structure: Any, instruments: Instruments) -> list[Any]:
    """The structure after each enabled pass of the pipeline, in order, instrumented."""
    if instruments.verify:
        _verify(pipeline.passes[0].takes, structure, "the pipeline's input")
    trace = []
    for p in pipeline.passes:
        if p.name in instruments.disabled:
            continue
        start = time.perf_counter()
        structure = p.run(structure)
        if instruments.timing:
            instruments.seconds[p.name] = instruments.seconds.get(p.name, 0.0) + time.perf_counter() - start
        if instruments.verify:
            _verify(p.gives, structure, f"pass '{p.name}'")
        if p.name in instruments.dump_after or "all" in instruments.dump_after:
            instruments.dumps.setdefault(p.name, []).append(p.gives.format(structure))
        trace.append(structure)
    return trace


def _verify(kind: Structure, structure: Any, after: str) -> None:
    problems = kind.verify(structure)
    if problems:
        listed = "\n".join(f"  {problem}" for problem in problems)
        raise VerifyError(f"the {kind.name} after {after} is malformed:\n{listed}")
