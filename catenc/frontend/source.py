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
and scalar styles) and resolved here with the YAML 1.2 core schema.

All offsets below are character indices into the decoded text; lines are
separated by ``"\\n"`` (a preceding ``"\\r"`` belongs to the line break), the
same convention :mod:`catenc.diagnostics` uses to show source lines.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from catenc.diagnostics import CatencError, Loc, remember_source

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["KeyPath", "SourceFile", "load_source", "source_from_text"]

KeyPath = tuple[str | int, ...]

_SUFFIXES = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}


# --------------------------------------------------------------------------- #
# Positions
# --------------------------------------------------------------------------- #


class _LineIndex:
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
class _Entry:
    """Where one value of the document is written (offsets into the text)."""

    value: int
    key: int | None = None  # None for list elements and the root
    chars: list[int] | None = None  # per decoded character, plus one past the end


_ROOT = _Entry(0)


class _PositionIndex(Protocol):
    def entry(self, keypath: KeyPath) -> _Entry | None:
        """The entry of exactly ``keypath``, or None if unknown."""


class _NoPositions:
    def entry(self, keypath: KeyPath) -> _Entry | None:
        return None


@dataclass
class SourceFile:
    """A loaded composite file: its text, its data, and where each value is written."""

    path: str
    text: str
    data: dict
    _index: _PositionIndex = field(default_factory=_NoPositions, repr=False, compare=False)
    _lines: _LineIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._lines = _LineIndex(self.text)

    def _find(self, keypath: KeyPath) -> tuple[_Entry, bool]:
        """The entry of ``keypath`` or of its nearest known ancestor; True if exact."""
        keypath = tuple(keypath)
        for n in range(len(keypath), 0, -1):
            entry = self._index.entry(keypath[:n])
            if entry is not None:
                return entry, n == len(keypath)
        return _ROOT, not keypath

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
    lines = _LineIndex(text)
    try:
        if kind == "toml":
            data, index = _load_toml(text, shown, lines)
        else:
            data, index = _load_yaml(text, shown, lines)
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


def _load_toml(text: str, path: str, lines: _LineIndex) -> tuple[dict, _PositionIndex]:
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
        self._entries: dict[KeyPath, _Entry] = {}
        for keypath, entry in scanner.entries.items():
            found, value = _lookup(data, keypath)
            if not found:
                continue
            decoded = scanner.strings.get(keypath)
            if decoded is not None and decoded[0] == value:
                entry.chars = decoded[1]
            self._entries[keypath] = entry

    def entry(self, keypath: KeyPath) -> _Entry | None:
        return self._entries.get(keypath)


class _ScanError(Exception):
    """The scanner met text it does not understand; positions stop there."""


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
_HEX_ESCAPE_WIDTH = {"x": 2, "u": 4, "U": 8}
_HEX_DIGITS = re.compile(r"[0-9A-Fa-f]*")
_LOCAL_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _hex_char(text: str, start: int, width: int) -> str:
    """The character of the ``width`` hex digits at ``start``."""
    digits = text[start : start + width]
    if len(digits) != width or not _HEX_DIGITS.fullmatch(digits):
        raise _ScanError
    return chr(int(digits, 16))  # ValueError above U+10FFFF


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
        self.entries: dict[KeyPath, _Entry] = {}
        self.strings: dict[KeyPath, tuple[str, list[int]]] = {}
        self._implicit: set[KeyPath] = set()  # tables only created as parents
        self._array_len: dict[KeyPath, int] = {}  # arrays of tables, by [[header]]

    def scan(self) -> None:
        with contextlib.suppress(_ScanError, ValueError, RecursionError):
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
            raise _ScanError
        self.pos += len(token)

    def _define(self, keypath: KeyPath, key: int | None, value: int, implicit: bool) -> None:
        """Record a table or value; an explicit definition beats an implicit one."""
        if keypath not in self.entries or (keypath in self._implicit and not implicit):
            self.entries[keypath] = _Entry(value, key)
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
                    raise _ScanError
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
                raise _ScanError

    def _scalar(self) -> None:
        """Skip a number, boolean or date/time."""
        start = self.pos
        self._skip_token()
        if self.pos == start:
            raise _ScanError
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
                raise _ScanError
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
                elif esc in _TOML_ESCAPES:
                    chars.append(_TOML_ESCAPES[esc])
                    offsets.append(i)
                    i += 2
                elif esc in _HEX_ESCAPE_WIDTH:
                    width = _HEX_ESCAPE_WIDTH[esc]
                    chars.append(_hex_char(text, i + 2, width))
                    offsets.append(i)
                    i += 2 + width
                else:
                    raise _ScanError
            elif c == "\r" and multiline and text.startswith("\r\n", i):
                chars.append("\n")  # tomllib reads CRLF as LF
                offsets.append(i)
                i += 2
            elif c == "\n" and not multiline:
                raise _ScanError
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


# --------------------------------------------------------------------------- #
# YAML
# --------------------------------------------------------------------------- #

_PLAIN_TAG = "tag:catenc,2025:plain"  # an untagged plain scalar, resolved by us
_YAML = "tag:yaml.org,2002:"
_MAX_YAML_VALUES = 250_000  # guards against alias bombs ("billion laughs")
# PyYAML's scanner takes time quadratic in the depth of flow collections (`[[[...]]]` 10,000 deep:
# 19 s), so deeper ones are refused before it runs; no composite file comes near.
_MAX_YAML_FLOW_DEPTH = 256
_FLOW_SIGNIFICANT = re.compile(r"[#'\"\[\]{}]")

_YAML_NULL = re.compile(r"null|Null|NULL|~|")
_YAML_TRUE = re.compile(r"true|True|TRUE")
_YAML_FALSE = re.compile(r"false|False|FALSE")
_YAML_INT10 = re.compile(r"[-+]?[0-9]+")
_YAML_INT8 = re.compile(r"0o[0-7]+")
_YAML_INT16 = re.compile(r"0x[0-9a-fA-F]+")
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_YAML_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_YAML_NAN = re.compile(r"\.nan|\.NaN|\.NAN")
_SCALAR_KINDS = {  # the kinds of value a scalar with this tag may resolve to, in order
    _PLAIN_TAG: ("null", "bool", "int", "float"),
    _YAML + "null": ("null",),
    _YAML + "bool": ("bool",),
    _YAML + "int": ("int",),
    _YAML + "float": ("float", "int"),
}


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe composer, leaving untagged plain scalars for YAML 1.2 resolution."""

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:
            return _PLAIN_TAG
        return super().resolve(kind, value, implicit)


def _check_flow_depth(text: str, path: str, lines: _LineIndex) -> None:
    """Refuse flow collections nested deeper than _MAX_YAML_FLOW_DEPTH (quotes and comments skipped)."""
    depth, k = 0, 0
    while (found := _FLOW_SIGNIFICANT.search(text, k)) is not None:
        k, char = found.start(), found.group()
        previous = text[k - 1] if k else "\n"
        if char == "#" and previous.isspace():
            k = text.find("\n", k)
            if k < 0:
                return
        elif char in "'\"" and (previous.isspace() or previous in "[{,:"):
            k = _quoted_end(text, k)
        elif char in "[{":
            depth += 1
            if depth > _MAX_YAML_FLOW_DEPTH:
                raise CatencError(
                    f"values are nested too deeply (more than {_MAX_YAML_FLOW_DEPTH} levels)", lines.loc(path, k)
                )
        elif char in "]}":
            depth = max(depth - 1, 0)
        k += 1


def _quoted_end(text: str, start: int) -> int:
    """Index of the quote that closes the YAML quoted scalar opening at ``start`` (or the end)."""
    quote, k = text[start], start + 1
    while k < len(text):
        if quote == '"' and text[k] == "\\":
            k += 2
            continue
        if text[k] == quote:
            if quote == "'" and text[k + 1 : k + 2] == "'":
                k += 2
                continue
            return k
        k += 1
    return len(text) - 1


def _load_yaml(text: str, path: str, lines: _LineIndex) -> tuple[Any, _PositionIndex]:
    _check_flow_depth(text, path, lines)
    try:
        root = yaml.compose(text, Loader=_YamlLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        loc = lines.loc(path, mark.index) if mark else None
        problem = e.problem or e.context or "syntax error"
        notes = []
        if e.context and e.problem and e.problem.startswith("but "):
            problem = f"{e.context}, {e.problem}"  # "expected X, but found Y"
        elif e.context and e.context_mark and e.problem_mark:
            notes.append((e.context, lines.loc(path, e.context_mark.index)))
        raise CatencError(f"invalid YAML: {problem}", loc, notes) from None
    except yaml.reader.ReaderError as e:
        char = e.character  # a code point (int) for str input
        what = f"#x{char:04x}" if isinstance(char, int) else repr(char)
        raise CatencError(
            f"invalid YAML: unacceptable character {what}: {e.reason}",
            lines.loc(path, e.position),
        ) from None
    except yaml.YAMLError as e:
        raise CatencError(f"{path}: invalid YAML: {e}") from None
    if root is None:
        return None, _NoPositions()
    builder = _YamlBuilder(path, lines)
    data = builder.build(root)
    return data, _YamlIndex(text, root, builder.mappings, lines)


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_YAML) :] if tag.startswith(_YAML) else tag


class _YamlBuilder:
    """Turns a composed YAML node tree into plain data (YAML 1.2 core schema)."""

    def __init__(self, path: str, lines: _LineIndex) -> None:
        self.path = path
        self.lines = lines
        # per mapping node: key -> (key node, value node)
        self.mappings: dict[int, dict[str, tuple[Node, Node]]] = {}
        self._active: set[int] = set()  # collection nodes being built (alias cycles)
        self._budget = _MAX_YAML_VALUES

    def _loc(self, node: Node) -> Loc:
        return self.lines.loc(self.path, node.start_mark.index)

    def _error(self, message: str, node: Node) -> CatencError:
        return CatencError(message, self._loc(node))

    def build(self, node: Node) -> Any:
        self._budget -= 1
        if self._budget < 0:
            raise self._error("YAML aliases expand to too many values", node)
        if isinstance(node, ScalarNode):
            return self.scalar(node)
        if id(node) in self._active:
            raise self._error("recursive YAML alias", node)
        self._active.add(id(node))
        try:
            if isinstance(node, SequenceNode) and node.tag == _YAML + "seq":
                return [self.build(item) for item in node.value]
            if isinstance(node, MappingNode) and node.tag == _YAML + "map":
                return {key: self.build(value) for key, (_, value) in self._pairs(node).items()}
            raise self._error(f"unsupported YAML tag '{_tag_name(node.tag)}'", node)
        finally:
            self._active.discard(id(node))

    def _pairs(self, node: MappingNode) -> dict[str, tuple[Node, Node]]:
        """The keys of a mapping node, checked for duplicates (computed once per node)."""
        pairs = self.mappings.get(id(node))
        if pairs is not None:
            return pairs
        pairs = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise self._error("a mapping key must be a scalar", key_node)
            key = self.scalar(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in pairs:
                raise CatencError(
                    f"duplicate key '{key}'",
                    self._loc(key_node),
                    [(f"'{key}' first defined here", self._loc(pairs[key][0]))],
                )
            pairs[key] = (key_node, value_node)
        self.mappings[id(node)] = pairs
        return pairs

    def scalar(self, node: ScalarNode) -> Any:
        """Resolve a scalar: plain ones by the core schema, tagged ones by their tag."""
        value = node.value
        tag = node.tag
        if tag == _YAML + "str":
            return value
        kinds = _SCALAR_KINDS.get(tag)
        if kinds is None:
            raise self._error(f"unsupported YAML tag '{_tag_name(tag)}'", node)
        for kind in kinds:
            if kind == "null" and _YAML_NULL.fullmatch(value):
                return None
            if kind == "bool" and _YAML_TRUE.fullmatch(value):
                return True
            if kind == "bool" and _YAML_FALSE.fullmatch(value):
                return False
            if kind == "int":
                number = self._int(value, node)
                if number is not None:
                    return float(number) if tag == _YAML + "float" else number
            if kind == "float":
                number = _float(value)
                if number is not None:
                    return number
        if tag == _PLAIN_TAG:
            return value
        raise self._error(f"invalid {_tag_name(tag)} value '{value}'", node)

    def _int(self, value: str, node: Node) -> int | None:
        try:
            if _YAML_INT10.fullmatch(value):
                return int(value, 10)
            if _YAML_INT8.fullmatch(value):
                return int(value[2:], 8)
            if _YAML_INT16.fullmatch(value):
                return int(value[2:], 16)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise self._error("integer literal has too many digits", node) from None
        return None


def _float(value: str) -> float | None:
    if _YAML_FLOAT.fullmatch(value):
        return float(value)
    if _YAML_INF.fullmatch(value):
        return -math.inf if value.startswith("-") else math.inf
    if _YAML_NAN.fullmatch(value):
        return math.nan
    return None


class _YamlIndex:
    """Positions of a YAML document, found by walking its node tree."""

    def __init__(
        self,
        text: str,
        root: Node,
        mappings: dict[int, dict[str, tuple[Node, Node]]],
        lines: _LineIndex,
    ) -> None:
        self._text = text
        self._root = root
        self._mappings = mappings
        self._lines = lines
        self._chars: dict[int, list[int] | None] = {}

    def entry(self, keypath: KeyPath) -> _Entry | None:
        if not keypath:
            return _ROOT
        node, key_node = self._root, None
        for key in keypath:
            if isinstance(node, MappingNode) and isinstance(key, str):
                pair = self._mappings.get(id(node), {}).get(key)
                if pair is None:
                    return None
                key_node, node = pair
            elif isinstance(node, SequenceNode) and type(key) is int and 0 <= key < len(node.value):
                key_node, node = None, node.value[key]
            else:
                return None
        key = key_node.start_mark.index if key_node is not None else None
        chars = self._scalar_chars(node) if isinstance(node, ScalarNode) else None
        return _Entry(node.start_mark.index, key, chars)

    def _scalar_chars(self, node: ScalarNode) -> list[int] | None:
        if id(node) not in self._chars:
            self._chars[id(node)] = _yaml_scalar_chars(self._text, node, self._lines)
        return self._chars[id(node)]


_YAML_ESCAPES = {
    "0": "\0",
    "a": "\x07",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}


def _yaml_scalar_chars(text: str, node: ScalarNode, lines: _LineIndex) -> list[int] | None:
    """Offsets of the characters of ``node.value``, or None if they cannot be matched."""
    start = _skip_properties(text, node.start_mark.index)
    end = node.end_mark.index
    try:
        if node.style in ('"', "'"):
            decoded = _yaml_flow_scalar(text, start + 1, end - 1, node.style)
        elif node.style is None:
            decoded = _yaml_flow_scalar(text, start, end, None)
        elif node.style == "|":
            decoded = _yaml_literal(text, start, node.value, lines)
        elif node.style == ">":
            decoded = _yaml_folded(text, start, end, node.value, lines)
        else:
            return None
    except (_ScanError, ValueError):
        return None
    if decoded is None or decoded[0] != node.value:
        return None
    return decoded[1]


def _skip_properties(text: str, i: int) -> int:
    """Skip an anchor (``&a``) and/or a tag (``!!str``) in front of a node."""
    while i < len(text) and text[i] in "&!":
        while i < len(text) and text[i] not in " \t\r\n":
            i += 1
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
    return i


def _line_break_end(text: str, i: int) -> int:
    return i + 2 if text.startswith("\r\n", i) else i + 1


def _yaml_flow_scalar(text: str, i: int, end: int, style: str | None) -> tuple[str, list[int]]:
    """Decode a plain, single- or double-quoted scalar in ``text[i:end]``.

    Implements line folding (one line break is a space, ``n`` breaks are
    ``n - 1`` newlines, whitespace around breaks is dropped) and the escapes
    of the quoted styles.  A folded space maps to the line break it replaces.
    """
    chars: list[str] = []
    offsets: list[int] = []

    def folded_breaks(i: int) -> tuple[int, list[int]]:
        """Skip blank continuation lines from ``i``; the offsets of their breaks."""
        breaks = []
        while True:
            while i < end and text[i] in " \t":
                i += 1
            if i < end and text[i] in "\r\n":
                breaks.append(i)
                i = _line_break_end(text, i)
            else:
                return i, breaks

    while i < end:
        c = text[i]
        if c in " \t":
            j = i
            while j < end and text[j] in " \t":
                j += 1
            if j >= end or text[j] not in "\r\n":  # trailing whitespace is dropped
                chars += text[i:j]
                offsets += range(i, j)
            i = j
        elif c in "\r\n":
            first = i
            i, breaks = folded_breaks(_line_break_end(text, i))
            if breaks:
                chars += "\n" * len(breaks)
                offsets += breaks
            else:
                chars.append(" ")
                offsets.append(first)
        elif c == "\\" and style == '"':
            esc = text[i + 1] if i + 1 < end else ""
            if esc in ("\r", "\n"):  # escaped line break: joined without a space
                i, breaks = folded_breaks(_line_break_end(text, i + 1))
                chars += "\n" * len(breaks)
                offsets += breaks
            elif esc in _YAML_ESCAPES:
                chars.append(_YAML_ESCAPES[esc])
                offsets.append(i)
                i += 2
            elif esc in _HEX_ESCAPE_WIDTH:
                width = _HEX_ESCAPE_WIDTH[esc]
                chars.append(_hex_char(text, i + 2, width))
                offsets.append(i)
                i += 2 + width
            else:
                raise _ScanError
        elif c == "'" and style == "'":  # '' stands for '
            chars.append("'")
            offsets.append(i)
            i += 2
        else:
            chars.append(c)
            offsets.append(i)
            i += 1
    offsets.append(end)
    return "".join(chars), offsets


def _source_line(text: str, lines: _LineIndex, line: int) -> tuple[int, str]:
    """Start offset and text (without the line break) of 0-based line ``line``."""
    start = lines.line_start(line)
    stop = text.find("\n", start)
    return start, text[start : len(text) if stop < 0 else stop].removesuffix("\r")


def _block_indent(text: str, lines: _LineIndex, first_line: int, value: str) -> int | None:
    """Indentation of a block scalar's content, from its first non-blank line."""
    lead_value = value.lstrip("\n")
    lead_value_spaces = len(lead_value) - len(lead_value.lstrip(" "))
    for line in range(first_line, lines.line_count()):
        _, src = _source_line(text, lines, line)
        if src.strip(" "):
            return len(src) - len(src.lstrip(" ")) - lead_value_spaces
    return None


def _yaml_literal(text: str, start: int, value: str, lines: _LineIndex) -> tuple[str, list[int]] | None:
    """Map a ``|`` block scalar: line k of the value is source line k after the header."""
    first_line = lines.line_of(start) + 1
    indent = _block_indent(text, lines, first_line, value) if value.strip("\n") else 0
    if indent is None or indent < 0:
        return None
    value_lines = value.split("\n")
    offsets: list[int] = []
    for k, part in enumerate(value_lines):
        last = k == len(value_lines) - 1
        if last and not part:
            break
        if first_line + k >= lines.line_count():
            return None
        line_start, src = _source_line(text, lines, first_line + k)
        if src[indent:] != part or src[:indent].strip(" "):
            return None
        offsets += range(line_start + indent, line_start + indent + len(part))
        if not last:
            offsets.append(line_start + len(src))  # the line break
    offsets.append(offsets[-1] + 1 if offsets else _line_break_end(text, start))
    return value, offsets


def _yaml_folded(text: str, start: int, end: int, value: str, lines: _LineIndex) -> tuple[str, list[int]] | None:
    """Map a ``>`` block scalar by finding each source line's text in the value.

    Folding only rewrites the line breaks between lines, so every line's
    content appears verbatim and in order; what lies between consecutive
    lines must be spaces and newlines, which map to the preceding line break.
    """
    first_line = lines.line_of(start) + 1
    indent = _block_indent(text, lines, first_line, value)
    offsets: list[int | None] = [None] * len(value)
    if indent is None or indent < 0:
        return None
    pos = 0
    for line in range(first_line, min(lines.line_of(end) + 1, lines.line_count())):
        if not value[pos:].strip(" \n"):
            break
        line_start, src = _source_line(text, lines, line)
        content = src[indent:]
        if not content:
            continue
        found = value.find(content, pos)
        if found < 0 or value[pos:found].strip(" \n"):
            return None
        offsets[found : found + len(content)] = range(line_start + indent, line_start + indent + len(content))
        pos = found + len(content)
    filled: list[int] = []
    after = _line_break_end(text, start)  # just after the last mapped character
    for offset in offsets:
        if offset is None:
            filled.append(after)
        else:
            filled.append(offset)
            after = offset + 1
    filled.append(after)
    return value, filled
