"""The tuning file (`catenc.tuning/1`, docs/cli.md "Tuning"): measured schedule decisions keyed
by kernel signature, machine and toolchain, and the tune that applies them to a schedule.

A kernel's signature hashes what it computes (its loops, the values it stores and their bodies,
dtypes and shapes), with buffer and loop index names replaced by their order of appearance: the
same kernel in another file, or under other names, finds the same entry. Gemm tiles are one per
dtype for all the entries of a library, so their entry is keyed by the dtype alone.

Every value read from the file is checked against the legal values of its field; an illegal or
unknown one is dropped with a note and the heuristic's value kept, so a stale or hand-edited
file can change speed, never results.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from catenc.diagnostics import CatencError, Loc
from catenc.ir.nodes import Graph, format_shape, format_value
from catenc.schedule.kernels import Decisions, Kernel, Schedule, Tune
from catenc.schedule.tiles import GemmTiles

FORMAT = "catenc.tuning/1"
_INDEX_NAME = re.compile(r"[a-z]\d+(?:_\d+)*")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Legal values of the decisions' integer fields (booleans are any bool).
_INT_CHECKS = {
    "parallel_work": (lambda v: 0 <= v <= 1 << 40, "an operation count from 0 to 2**40"),
    "vector_lanes": (lambda v: v in (0, 1, 2, 4, 8, 16, 32, 64), "0 or a power of two up to 64"),
    "jam": (lambda v: 1 <= v <= 8, "1 to 8"),
    "winograd": (lambda v: v in (0, 2, 4), "0, 2 or 4"),
}
_TILE_FIELDS = ("mr", "nr", "kc", "mc", "nc", "vector_bytes")
_TILE_LIMIT = 1 << 16


def kernel_text(graph: Graph, kernel: Kernel) -> str:
    """The kernel as its signature sees it: loops, stored values and bodies, names canonical."""
    buffers = {b.name for b in graph.buffers}
    lines = ["gemm" if kernel.contraction is not None else "rows " + ", ".join(f"{n} < {e}" for n, e in kernel.outer)]
    for m in kernel.members:
        buf = graph.buffer(m.name)
        where = "scalar" if m.name in kernel.scalars else buf.role
        index = ", ".join(n for n, _ in m.indices)
        lines.append(f"{m.name}[{index}]: {buf.dtype.name}{format_shape(buf.shape)} ({where}) = {format_value(m.body)}")
    names: dict[str, str] = {}

    def canonical(match: re.Match) -> str:
        word = match.group(0)
        if word in buffers:
            return names.setdefault(word, f"b{len(names)}")
        if _INDEX_NAME.fullmatch(word) and word[0] in "irg":
            return names.setdefault(word, f"{word[0]}{len(names)}")
        return word

    return "\n".join(_IDENTIFIER.sub(canonical, line) for line in lines)


def kernel_signature(graph: Graph, kernel: Kernel) -> str:
    return _digest(kernel_text(graph, kernel))


def tiles_signature(dtype: str) -> str:
    """The key of the gemm tiles of `dtype` (one set serves every gemm of that dtype in a library)."""
    return "gemm-tiles-" + dtype


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class TuningEntry:
    """The decisions measured best for one kernel (or a file's gemm tiles) on one machine."""

    signature: str
    kernel: str  # what it is, for a reader: the kernel's name where it was tuned and its values
    machine: dict[str, Any]  # runtime/machine.py host_machine()
    target: dict[str, Any]  # runtime/machine.py toolchain_target()
    decisions: dict[str, Any]  # Decisions fields, or GemmTiles fields for a tiles entry
    sizes: tuple[dict[str, int], ...] = ()  # the size bindings it was measured at
    seconds: dict[str, float] | None = None  # {"heuristic": ..., "tuned": ...} per entry call
    trials: tuple[dict[str, Any], ...] = ()  # measured candidates, best first: a resumed search skips them

    def key(self) -> str:
        return _key(self.signature, self.machine, self.target)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "signature": self.signature,
            "kernel": self.kernel,
            "machine": self.machine,
            "target": self.target,
            "decisions": self.decisions,
            "sizes": list(self.sizes),
        }
        if self.seconds is not None:
            out["seconds"] = self.seconds
        if self.trials:
            out["trials"] = list(self.trials)
        return out


def _key(signature: str, machine: dict[str, Any], target: dict[str, Any]) -> str:
    return json.dumps([signature, machine, target], sort_keys=True)


@dataclass(frozen=True)
class Tuning:
    """A tuning file's entries, in the file's order (sorted by key when written)."""

    entries: tuple[TuningEntry, ...] = ()
    path: str = ""

    def find(self, signature: str, machine: dict[str, Any], target: dict[str, Any]) -> TuningEntry | None:
        key = _key(signature, machine, target)
        for entry in self.entries:
            if entry.key() == key:
                return entry
        return None

    def merged(self, new: list[TuningEntry]) -> Tuning:
        """These entries with `new` replacing any of the same key."""
        by_key = {e.key(): e for e in self.entries}
        by_key.update((e.key(), e) for e in new)
        return replace(self, entries=tuple(by_key[k] for k in sorted(by_key)))

    def dumps(self) -> str:
        document = {"format": FORMAT, "entries": [e.as_json() for e in self.entries]}
        return json.dumps(document, indent=2, sort_keys=True) + "\n"


def load_tuning(path: str) -> Tuning:
    """Read a tuning file; a file that is not one is an error at its place."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise CatencError(f"{path}: cannot read the tuning file: {error.strerror}") from None
    except UnicodeDecodeError:
        raise CatencError("not a tuning file (not UTF-8 text)", Loc(path, 1, 1)) from None
    return parse_tuning(text, path)


def parse_tuning(text: str, path: str) -> Tuning:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CatencError(f"not a tuning file: {error.msg}", Loc(path, error.lineno, error.colno)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else None
        raise CatencError(
            f'not a {FORMAT} file (its "format" is {json.dumps(found)}); write one with `catenc tune`',
            _place(text, '"format"', 0, path),
        )
    raw = document.get("entries", [])
    if not isinstance(raw, list):
        raise CatencError('"entries" must be a list', _place(text, '"entries"', 0, path))
    entries = []
    for n, item in enumerate(raw):
        problem = _entry_problem(item)
        if problem:
            raise CatencError(f"entry {n}: {problem}", _place(text, '"signature"', n, path))
        entries.append(
            TuningEntry(
                item["signature"],
                str(item.get("kernel", "")),
                item["machine"],
                item["target"],
                item["decisions"],
                tuple(s for s in item.get("sizes", []) if isinstance(s, dict)),
                item.get("seconds") if isinstance(item.get("seconds"), dict) else None,
                tuple(t for t in item.get("trials", []) if isinstance(t, dict)),
            )
        )
    return Tuning(tuple(entries), path)


def _entry_problem(item: object) -> str:
    if not isinstance(item, dict):
        return "not an object"
    for name, kind in (("signature", str), ("machine", dict), ("target", dict), ("decisions", dict)):
        if not isinstance(item.get(name), kind):
            return f'"{name}" missing or not {"a string" if kind is str else "an object"}'
    return ""


def _place(text: str, needle: str, occurrence: int, path: str) -> Loc:
    """Where the `occurrence`-th `needle` stands in the text (the file's start if it does not)."""
    at = -1
    for _ in range(occurrence + 1):
        at = text.find(needle, at + 1)
        if at < 0:
            return Loc(path, 1, 1)
    line = text.count("\n", 0, at) + 1
    return Loc(path, line, at - (text.rfind("\n", 0, at) + 1) + 1)


def checked_decisions(base: Decisions, values: dict[str, Any], notes: list[str], where: str) -> Decisions:
    """`base` with each legal value of `values`; an unknown field or illegal value is noted."""
    known = {f.name: f for f in fields(Decisions)}
    changes: dict[str, Any] = {}
    for name in sorted(values):
        value = values[name]
        default = getattr(base, name, None)
        if name not in known:
            notes.append(f"tuning: {where}: unknown decision '{name}' ignored")
        elif isinstance(default, bool):
            if isinstance(value, bool):
                changes[name] = value
            else:
                notes.append(f"tuning: {where}: {name} must be true or false, not {json.dumps(value)}; ignored")
        elif isinstance(default, int):
            legal, what = _INT_CHECKS.get(name, (lambda v: 0 <= v <= 1 << 40, "a count"))
            if isinstance(value, int) and not isinstance(value, bool) and legal(value):
                changes[name] = value
            else:
                notes.append(f"tuning: {where}: {name} must be {what}, not {json.dumps(value)}; ignored")
        else:
            notes.append(f"tuning: {where}: {name} is not a decision a tuning file sets; ignored")
    return replace(base, **changes)


def checked_tiles(base: GemmTiles, values: dict[str, Any], dtype: str, notes: list[str]) -> GemmTiles:
    """`base` replaced by the file's tiles when they are whole and legal for `dtype` (else noted)."""
    if not all(isinstance(values.get(f), int) and 0 < values[f] <= _TILE_LIMIT for f in _TILE_FIELDS):
        notes.append(f"tuning: gemm tiles {dtype}: need positive integers {', '.join(_TILE_FIELDS)}; ignored")
        return base
    tiles = GemmTiles(**{f: values[f] for f in _TILE_FIELDS})
    try:
        tiles.check(dtype)
    except ValueError as error:
        notes.append(f"tuning: gemm tiles {dtype}: {error}; ignored")
        return base
    return tiles


def decisions_json(decisions: Decisions) -> dict[str, Any]:
    return {f.name: getattr(decisions, f.name) for f in fields(Decisions)}


def tiles_json(tiles: GemmTiles) -> dict[str, int]:
    return {f: getattr(tiles, f) for f in _TILE_FIELDS}


def apply_tuning(tuning: Tuning, machine: dict[str, Any], target: dict[str, Any]) -> Tune:
    """The tune that gives each kernel (and each dtype's gemm tiles) the decisions its entry
    for this machine and toolchain holds; kernels without one keep the heuristics', noted."""

    def tune(schedule: Schedule) -> Schedule:
        notes: list[str] = []
        kernels = []
        missing = []
        for kernel in schedule.kernels:
            entry = tuning.find(kernel_signature(schedule.graph, kernel), machine, target)
            if entry is None:
                missing.append(kernel.name)
                kernels.append(kernel)
                continue
            decisions = checked_decisions(kernel.decisions, entry.decisions, notes, kernel.name)
            kernels.append(replace(kernel, decisions=decisions))
            notes.append(f"tuning: {kernel.name}: {decisions.describe()} (from {tuning.path or 'the tuning file'})")
        tiles = []
        for dtype, base in schedule.tiles:
            entry = tuning.find(tiles_signature(dtype), machine, target)
            tiles.append((dtype, checked_tiles(base, entry.decisions, dtype, notes) if entry else base))
        if missing:
            shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
            notes.append(
                f"tuning: {len(missing)} kernel(s) without an entry for this machine and toolchain keep the "
                f"heuristics: {shown}"
            )
        return replace(schedule, kernels=tuple(kernels), tiles=tuple(tiles), notes=schedule.notes + tuple(notes))

    return tune
