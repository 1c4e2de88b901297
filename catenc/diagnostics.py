"""User-facing errors and their gcc-style rendering.

Every error in the user's input is raised as a :class:`CatencError` carrying a
:class:`Loc` (file, line, column) and optional notes that point at related
places.  :func:`format_diagnostic` renders it the way gcc does::

    model.toml:7:12: error: unknown name 'xx'
        y = xx + 1
               ^
    model.toml:3:5: note: 'x' declared here
        inputs = ["x: f32[N]"]
        ^
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "CatencError",
    "Loc",
    "SourceCache",
    "format_diagnostic",
    "read_source_line",
    "remember_source",
]


@dataclass(frozen=True)
class Loc:
    """A position in a source file; ``line`` and ``col`` are 1-based, ``col`` in characters. Line 0
    means the file as a whole (a binary file such as an ONNX model has no lines)."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}" if self.line else self.path


class CatencError(Exception):
    """A user-facing error: message, location, and related notes; `more` are further errors of the
    same run, reported with it (every unsupported node of a model at once)."""

    def __init__(
        self,
        message: str,
        loc: Loc | None = None,
        notes: Sequence[tuple[str, Loc | None]] = (),
        more: Sequence[CatencError] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.notes: tuple[tuple[str, Loc | None], ...] = tuple(notes)
        self.more: tuple[CatencError, ...] = tuple(more)

    def __str__(self) -> str:
        return f"{self.loc}: {self.message}" if self.loc else self.message


ReadLine = Callable[[str, int], str | None]


class SourceCache:
    """Lines of source files, read once per path.

    Files loaded by the front end are registered with :meth:`add` so that the
    lines shown in diagnostics are exactly the text that was parsed, even if
    the file changed on disk since, or was named by a display path.
    """

    def __init__(self) -> None:
        self._lines: dict[str, list[str] | None] = {}

    def add(self, path: str, text: str) -> None:
        """Register the text of ``path``, replacing any cached version."""
        self._lines[path] = text.split("\n")

    def clear(self) -> None:
        """Forget every cached file."""
        self._lines.clear()

    def read_line(self, path: str, line: int) -> str | None:
        """Return line ``line`` (1-based) of ``path`` without its line break, or None."""
        if path not in self._lines:
            try:
                with open(path, encoding="utf-8", errors="replace", newline="") as f:
                    self.add(path, f.read())
            except (OSError, ValueError):
                self._lines[path] = None
        lines = self._lines[path]
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1].removesuffix("\r")


_default_cache = SourceCache()


def remember_source(path: str, text: str) -> None:
    """Register ``text`` as the contents of ``path`` for diagnostics."""
    _default_cache.add(path, text)


def read_source_line(path: str, line: int) -> str | None:
    """Return a line of ``path`` from the shared cache (reading the file on first use)."""
    return _default_cache.read_line(path, line)


def _caret_line(source_line: str, col: int) -> str:
    """Whitespace up to column ``col`` of ``source_line`` (tabs kept), then ``^``."""
    prefix = source_line[: max(col - 1, 0)]
    pad = "".join("\t" if ch == "\t" else " " for ch in prefix)
    return pad + " " * (col - 1 - len(prefix)) + "^"


def _render(kind: str, message: str, loc: Loc | None, read_line: ReadLine) -> list[str]:
    if loc is None:
        return [f"catenc: {kind}: {message}"]
    out = [f"{loc}: {kind}: {message}"]
    source_line = read_line(loc.path, loc.line)
    if source_line is not None:
        out += [source_line, _caret_line(source_line, loc.col)]
    return out


def format_diagnostic(error: CatencError, read_line: ReadLine | None = None) -> str:
    """Render ``error`` and its notes gcc style (no trailing newline).

    ``read_line(path, line)`` supplies source lines; by default they come from
    the shared :class:`SourceCache`.  When it returns None the source line and
    caret are left out.
    """
    reader = read_line or read_source_line
    lines = []
    for one in (error, *error.more):
        lines += _render("error", one.message, one.loc, reader)
        for message, loc in one.notes:
            lines += _render("note", message, loc, reader)
    return "\n".join(lines)


def closest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ' (did you mean 'x'?)' suffix, or '' when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""
