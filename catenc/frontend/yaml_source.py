"""YAML composite files with the source position of every value (docs/language.md): PyYAML
composes a node tree (it carries marks and scalar styles), resolved here with the YAML 1.2 core
schema; catenc.frontend.source loads this module only for a YAML file."""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from catenc.diagnostics import CatencError, Loc
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


def _check_flow_depth(text: str, path: str, lines: LineIndex) -> None:
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


def load_yaml(text: str, path: str, lines: LineIndex) -> tuple[Any, PositionIndex]:
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
        return None, NoPositions()
    builder = _YamlBuilder(path, lines)
    data = builder.build(root)
    return data, _YamlIndex(text, root, builder.mappings, lines)


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_YAML) :] if tag.startswith(_YAML) else tag


class _YamlBuilder:
    """Turns a composed YAML node tree into plain data (YAML 1.2 core schema)."""

    def __init__(self, path: str, lines: LineIndex) -> None:
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
        lines: LineIndex,
    ) -> None:
        self._text = text
        self._root = root
        self._mappings = mappings
        self._lines = lines
        self._chars: dict[int, list[int] | None] = {}

    def entry(self, keypath: KeyPath) -> Entry | None:
        if not keypath:
            return ROOT
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
        return Entry(node.start_mark.index, key, chars)

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


def _yaml_scalar_chars(text: str, node: ScalarNode, lines: LineIndex) -> list[int] | None:
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
    except (ScanError, ValueError):
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
            else:
                char, length = escape_at(text, i, _YAML_ESCAPES)
                chars.append(char)
                offsets.append(i)
                i += length
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


def _source_line(text: str, lines: LineIndex, line: int) -> tuple[int, str]:
    """Start offset and text (without the line break) of 0-based line ``line``."""
    start = lines.line_start(line)
    stop = text.find("\n", start)
    return start, text[start : len(text) if stop < 0 else stop].removesuffix("\r")


def _block_indent(text: str, lines: LineIndex, first_line: int, value: str) -> int | None:
    """Indentation of a block scalar's content, from its first non-blank line."""
    lead_value = value.lstrip("\n")
    lead_value_spaces = len(lead_value) - len(lead_value.lstrip(" "))
    for line in range(first_line, lines.line_count()):
        _, src = _source_line(text, lines, line)
        if src.strip(" "):
            return len(src) - len(src.lstrip(" ")) - lead_value_spaces
    return None


def _yaml_literal(text: str, start: int, value: str, lines: LineIndex) -> tuple[str, list[int]] | None:
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


def _yaml_folded(text: str, start: int, end: int, value: str, lines: LineIndex) -> tuple[str, list[int]] | None:
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
