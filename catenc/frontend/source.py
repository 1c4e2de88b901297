"""Loading composite files (TOML or YAML) with the source position of every value.

:func:`load_source` decodes a file into plain Python data and keeps, for every
key path into that data, where the key and the value are written.  For
strings it also maps every character of the *decoded* value back to the file,
so that errors inside a multi-line ``body`` can be reported at the line and
column of the TOML/YAML file itself (:meth:`SourceFile.string_loc`).

TOML is decoded by ``tomllib`` (``tomli`` on Python 3.10), which is the
reference for the data; positions come from a small scanner of our own that
runs over the already-validated text.  Any disagreement between the two only
costs precision (a location falls back to an enclosing value), never an
exception.  YAML is composed by PyYAML into a node tree (which carries marks
and scalar styles) and resolved with the YAML 1.2 core schema in
:mod:`catenc.frontend.yaml_source`, loaded only for a YAML file.

All offsets below are character indices into the decoded text; lines are
separated by ``"\\n"`` (a preceding ``"\\r"`` belongs to the line break), the
same convention :mod:`catenc.diagnostics` uses to show source lines.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from catenc.diagnostics import CatencError, Loc, remember_source
from catenc.frontend.positions import (
    ROOT,
    Entry,
    KeyPath,
    LineIndex,
    NoPositions,
    PositionIndex,
    ScanError,
    escape_at,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["KeyPath", "SourceFile", "load_source", "source_from_text"]

_SUFFIXES = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}


@dataclass
class SourceFile:
    """A loaded composite file: its text, its data, and where each value is written."""

    path: str
    text: str
    data: dict
    _index: PositionIndex = field(default_factory=NoPositions, repr=False, compare=False)
    _lines: LineIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._lines = LineIndex(self.text)

    def _find(self, keypath: KeyPath) -> tuple[Entry, bool]:
        """The entry of ``keypath`` or of its nearest known ancestor; True if exact."""
        keypath = tuple(keypath)
        for n in range(len(keypath), 0, -1):
            entry = self._index.entry(keypath[:n])
            if entry is not None:
                return entry, n == len(keypath)
        return ROOT, not keypath

    def _loc(self, offset: int) -> Loc:
        return self._lines.loc(self.path, offset)

    def loc(self, keypath: KeyPath) -> Loc:
        """Where the value at ``keypath`` starts (an ancestor's value if not found)."""
        return self._loc(self._find(keypath)[0].value)

    def key_loc(self, keypath: KeyPath) -> Loc:
        """Where the key of the last element of ``keypath`` is written.

        For a list element this is the element itself; for a TOML header
        table ``[a.b]`` it is where ``b`` is written in the header.
        """
        entry = self._find(keypath)[0]
        return self._loc(entry.value if entry.key is None else entry.key)

    def string_loc(self, keypath: KeyPath, offset: int) -> Loc:
        """Where character ``offset`` (0-based) of the decoded string at ``keypath`` is written.

        Offsets past the end give the position just after the last character.
        Without a character map (not a string, or not mapped) this is :meth:`loc`.
        """
        entry, exact = self._find(keypath)
        if not exact or not entry.chars:
            return self._loc(entry.value)
        return self._loc(entry.chars[min(max(offset, 0), len(entry.chars) - 1)])


def _lookup(data: Any, keypath: KeyPath) -> tuple[bool, Any]:
    """Follow ``keypath`` into plain data; (False, None) if it leads nowhere."""
    for key in keypath:
        in_dict = isinstance(data, dict) and isinstance(key, str) and key in data
        in_list = isinstance(data, list) and type(key) is int and 0 <= key < len(data)
        if not (in_dict or in_list):
            return False, None
        data = data[key]
    return True, data


# --------------------------------------------------------------------------- #
# Entry point
# --------------------------------------------------------------------------- #


def load_source(path: str | os.PathLike[str], display_path: str | None = None) -> SourceFile:
    """Load a ``.toml``, ``.yaml`` or ``.yml`` composite file.

    ``display_path`` is how the file is named in locations (default: ``path``
    as given).  Every problem with the file is raised as :class:`CatencError`.
    """
    real_path = os.fspath(path)
    shown = display_path if display_path is not None else real_path
    suffix = os.path.splitext(real_path)[1]
    kind = _SUFFIXES.get(suffix.lower())
    if kind is None:
        what = f"'{suffix}'" if suffix else "(no extension)"
        raise CatencError(f"{shown}: unsupported file type {what} (expected .toml, .yaml or .yml)")
    try:
        with open(real_path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CatencError(f"{shown}: cannot read file: {e.strerror or e}") from None
    return source_from_text(_decode_utf8(raw, shown), shown, kind)


def source_from_text(text: str, shown: str, kind: str = "toml") -> SourceFile:
    """A composite file's text (``kind`` "toml" or "yaml") as :func:`load_source` loads it, named ``shown``."""
    remember_source(shown, text)
    lines = LineIndex(text)
    try:
        if kind == "toml":
            data, index = _load_toml(text, shown, lines)
        else:
            from catenc.frontend.yaml_source import load_yaml  # PyYAML only for YAML files

            data, index = load_yaml(text, shown, lines)
    except RecursionError:
        raise CatencError(f"{shown}: values are nested too deeply") from None
    except (ValueError, OverflowError) as err:  # e.g. a YAML escape beyond U+10FFFF
        raise CatencError(f"{shown}: invalid {kind.upper()} value: {err}") from None
    if not isinstance(data, dict):
        raise CatencError(
            "the top level of a composite file must be a mapping (with a 'composite' key)",
            Loc(shown, 1, 1),
        )
    return SourceFile(shown, text, data, index)


def _decode_utf8(raw: bytes, path: str) -> str:
    """Decode ``raw`` as UTF-8 (dropping a byte order mark), locating the first bad byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = raw.rfind(b"\n", 0, e.start) + 1
        line = raw.count(b"\n", 0, e.start) + 1
        col = len(raw[line_start : e.start].decode("utf-8", errors="replace")) + 1
        if line == 1 and raw.startswith(codecs.BOM_UTF8):
            col -= 1
        raise CatencError(f"file is not valid UTF-8 (byte 0x{raw[e.start]:02x})", Loc(path, line, col)) from None
    return text.removeprefix("\ufeff")


# --------------------------------------------------------------------------- #
# TOML
# --------------------------------------------------------------------------- #

_TOML_ERROR_AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")


def _load_toml(text: str, path: str, lines: LineIndex) -> tuple[dict, PositionIndex]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message = str(e).split("\n")[0]
        loc = None
        m = _TOML_ERROR_AT.search(message)
        if m:
            message = message[: m.start()]
            loc = Loc(path, int(m.group(1)), int(m.group(2))) if m.group(1) else lines.loc(path, len(text))
        raise CatencError(f"invalid TOML: {message}", loc) from None
    except ValueError:
        # Python's limit on the digits of an int (4300) is not a TOMLDecodeError.
        m = re.search(r"[0-9_]{4300,}", text)
        loc = lines.loc(path, m.start()) if m else None
        raise CatencError("invalid TOML: integer literal has too many digits", loc) from None
    return data, _TomlIndex(text, data)


class _TomlIndex:
    """Positions of a TOML document, checked against the data tomllib decoded."""

    def __init__(self, text: str, data: dict) -> None:
        scanner = _TomlScanner(text)
        scanner.scan()
        self._entries: dict[KeyPath, Entry] = {}
        for keypath, entry in scanner.entries.items():
            found, value = _lookup(data, keypath)
            if not found:
                continue
            decoded = scanner.strings.get(keypath)
            if decoded is not None and decoded[0] == value:
                entry.chars = decoded[1]
            self._entries[keypath] = entry

    def entry(self, keypath: KeyPath) -> Entry | None:
        return self._entries.get(keypath)


_TOML_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOML_TOKEN_END = frozenset(" \t\r\n,]}#")
_TOML_ESCAPES = {
    "b": "\b",
    "t": "\t",
    "n": "\n",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    '"': '"',
    "\\": "\\",
}
_LOCAL_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class _TomlScanner:
    """Records where every key and value of a TOML document is written.

    It assumes a document tomllib accepted and stops at the first surprise.
    ``entries`` maps key paths to positions (arrays of tables get their list
    index in the path); ``strings`` maps the key path of every string value
    to its decoded text and per-character offsets.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.entries: dict[KeyPath, Entry] = {}
        self.strings: dict[KeyPath, tuple[str, list[int]]] = {}
        self._implicit: set[KeyPath] = set()  # tables only created as parents
        self._array_len: dict[KeyPath, int] = {}  # arrays of tables, by [[header]]

    def scan(self) -> None:
        with contextlib.suppress(ScanError, ValueError, RecursionError):
            self._document()

    # -- low level ----------------------------------------------------------

    def _ch(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.text[i] if i < len(self.text) else ""

    def _skip_ws(self) -> None:
        while self._ch() in (" ", "\t"):
            self.pos += 1

    def _skip_blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while True:
            c = self._ch()
            if c in (" ", "\t", "\r", "\n"):
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def _expect(self, token: str) -> None:
        if not self.text.startswith(token, self.pos):
            raise ScanError
        self.pos += len(token)

    def _define(self, keypath: KeyPath, key: int | None, value: int, implicit: bool) -> None:
        """Record a table or value; an explicit definition beats an implicit one."""
        if keypath not in self.entries or (keypath in self._implicit and not implicit):
            self.entries[keypath] = Entry(value, key)
            if implicit:
                self._implicit.add(keypath)
            else:
                self._implicit.discard(keypath)

    # -- grammar ------------------------------------------------------------

    def _document(self) -> None:
        table: KeyPath = ()
        while True:
            self._skip_blank()
            if self.pos >= len(self.text):
                return
            if self._ch() == "[":
                table = self._header()
            else:
                self._keyval(table)

    def _header(self) -> KeyPath:
        """``[a.b]`` or ``[[a.b]]``; returns the key path of the table it opens."""
        start = self.pos
        is_array = self.text.startswith("[[", start)
        self.pos += 2 if is_array else 1
        keys = self._key()
        self._skip_ws()
        self._expect("]]" if is_array else "]")
        keypath: KeyPath = ()
        for n, (name, key_pos) in enumerate(keys):
            keypath += (name,)
            last = n == len(keys) - 1
            if last and is_array:
                count = self._array_len.get(keypath, 0)
                self._array_len[keypath] = count + 1
                self._define(keypath, key_pos, start, implicit=False)
                keypath += (count,)
                self._define(keypath, None, start, implicit=False)
            else:
                self._define(keypath, key_pos, start if last else key_pos, implicit=not last)
                if keypath in self._array_len:  # [a.b] under [[a]] means the last a
                    keypath += (self._array_len[keypath] - 1,)
        return keypath

    def _keyval(self, table: KeyPath) -> None:
        """``a.b.c = value`` inside ``table``."""
        keys = self._key()
        self._skip_ws()
        self._expect("=")
        self._skip_ws()
        keypath = table
        for name, key_pos in keys[:-1]:
            keypath += (name,)
            self._define(keypath, key_pos, key_pos, implicit=True)
        self._value(keypath + (keys[-1][0],), keys[-1][1])

    def _key(self) -> list[tuple[str, int]]:
        """A dotted key: its parts and where each is written."""
        parts = []
        while True:
            self._skip_ws()
            start = self.pos
            if self._ch() in ('"', "'"):
                name = self._string()[0]
            else:
                while self._ch() in _TOML_BARE_KEY:
                    self.pos += 1
                if self.pos == start:
                    raise ScanError
                name = self.text[start : self.pos]
            parts.append((name, start))
            self._skip_ws()
            if self._ch() != ".":
                return parts
            self.pos += 1

    def _value(self, keypath: KeyPath, key: int | None) -> None:
        start = self.pos
        self._define(keypath, key, start, implicit=False)
        c = self._ch()
        if c in ('"', "'"):
            self.strings[keypath] = self._string()
        elif c == "[":
            self._items("]", lambda n: self._value(keypath + (n,), None))
        elif c == "{":
            self._items("}", lambda n: self._keyval(keypath))
        else:
            self._scalar()

    def _items(self, close: str, item: Callable[[int], None]) -> None:
        """``[``/``{`` then comma-separated items up to ``close``; ``item(n)`` scans item n."""
        self.pos += 1
        index = 0
        while True:
            self._skip_blank()
            if self._ch() == close:
                self.pos += 1
                return
            item(index)
            index += 1
            self._skip_blank()
            if self._ch() == ",":
                self.pos += 1
            elif self._ch() != close:
                raise ScanError

    def _scalar(self) -> None:
        """Skip a number, boolean or date/time."""
        start = self.pos
        self._skip_token()
        if self.pos == start:
            raise ScanError
        token = self.text[start : self.pos]
        if _LOCAL_DATE.fullmatch(token) and self._ch() == " " and self._ch(1).isdigit():
            self.pos += 1  # "1979-05-27 07:32:00"
            self._skip_token()

    def _skip_token(self) -> None:
        while self._ch() and self._ch() not in _TOML_TOKEN_END:
            self.pos += 1

    def _string(self) -> tuple[str, list[int]]:
        """Decode the string at ``pos``: its value and the offset of each character.

        An escape maps to its backslash; the extra offset at the end is the
        closing delimiter.
        """
        text = self.text
        quote = text[self.pos]
        multiline = text.startswith(quote * 3, self.pos)
        i = self.pos + (3 if multiline else 1)
        if multiline:  # a newline right after the opening delimiter is trimmed
            if text.startswith("\n", i):
                i += 1
            elif text.startswith("\r\n", i):
                i += 2
        chars: list[str] = []
        offsets: list[int] = []
        while True:
            if i >= len(text):
                raise ScanError
            c = text[i]
            if c == quote:
                if not multiline:
                    offsets.append(i)
                    self.pos = i + 1
                    break
                run = _run(text, i, quote)
                if run >= 3:  # up to two quotes before the closing three are content
                    extra = min(run - 3, 2)
                    chars += quote * extra
                    offsets += range(i, i + extra)
                    offsets.append(i + extra)
                    self.pos = i + extra + 3
                    break
                chars += quote * run
                offsets += range(i, i + run)
                i += run
            elif c == "\\" and quote == '"':
                esc = text[i + 1 : i + 2]
                if multiline and esc in (" ", "\t", "\r", "\n"):
                    # line-ending backslash: drop all whitespace up to the next text
                    j = i + 1
                    while j < len(text) and text[j] in " \t\r\n":
                        j += 1
                    i = j
                else:
                    char, length = escape_at(text, i, _TOML_ESCAPES)
                    chars.append(char)
                    offsets.append(i)
                    i += length
            elif c == "\r" and multiline and text.startswith("\r\n", i):
                chars.append("\n")  # tomllib reads CRLF as LF
                offsets.append(i)
                i += 2
            elif c == "\n" and not multiline:
                raise ScanError
            else:
                chars.append(c)
                offsets.append(i)
                i += 1
        return "".join(chars), offsets


def _run(text: str, start: int, char: str) -> int:
    """Length of the run of ``char`` starting at ``start``."""
    end = start
    while end < len(text) and text[end] == char:
        end += 1
    return end - start
