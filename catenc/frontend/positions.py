"""Where the values of a composite file are written: offsets to lines and columns, each value's
entry (key, value and, for strings, every decoded character), and the escapes the TOML and YAML
scanners (catenc/frontend/source.py, yaml_source.py) both decode."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Protocol

from catenc.diagnostics import Loc

KeyPath = tuple[str | int, ...]
_HEX_ESCAPE_WIDTH = {"x": 2, "u": 4, "U": 8}
_HEX_DIGITS = re.compile(r"[0-9A-Fa-f]*")


class LineIndex:
    """Converts character offsets of a text into 1-based line/column pairs."""

    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._size = len(text)

    def line_count(self) -> int:
        return len(self._starts)

    def line_start(self, line: int) -> int:
        """Offset of the first character of 0-based line ``line``."""
        return self._starts[line]

    def line_of(self, offset: int) -> int:
        """0-based line that holds ``offset``."""
        return bisect.bisect_right(self._starts, offset) - 1

    def loc(self, path: str, offset: int) -> Loc:
        offset = min(max(offset, 0), self._size)
        line = self.line_of(offset)
        return Loc(path, line + 1, offset - self._starts[line] + 1)


@dataclass
class Entry:
    """Where one value of the document is written (offsets into the text)."""

    value: int
    key: int | None = None  # None for list elements and the root
    chars: list[int] | None = None  # per decoded character, plus one past the end


ROOT = Entry(0)


class PositionIndex(Protocol):
    def entry(self, keypath: KeyPath) -> Entry | None:
        """The entry of exactly ``keypath``, or None if unknown."""


class NoPositions:
    def entry(self, keypath: KeyPath) -> Entry | None:
        return None


class ScanError(Exception):
    """The scanner met text it does not understand; positions stop there."""


def _hex_char(text: str, start: int, width: int) -> str:
    """The character of the ``width`` hex digits at ``start``."""
    digits = text[start : start + width]
    if len(digits) != width or not _HEX_DIGITS.fullmatch(digits):
        raise ScanError
    return chr(int(digits, 16))  # ValueError above U+10FFFF


def escape_at(text: str, i: int, simple: dict[str, str]) -> tuple[str, int]:
    """The character the backslash escape at `i` stands for and the escape's length: one of
    `simple` (`\\n`) or `\\xHH`, `\\uHHHH`, `\\UHHHHHHHH`; anything else is a ScanError."""
    esc = text[i + 1 : i + 2]
    if esc in simple:
        return simple[esc], 2
    if esc in _HEX_ESCAPE_WIDTH:
        width = _HEX_ESCAPE_WIDTH[esc]
        return _hex_char(text, i + 2, width), 2 + width
    raise ScanError
