"""Parsing a body: Python's `ast` over the body text (never executed), with file positions.

Leading whitespace of every line is dropped before parsing (bodies are often indented in
their files); `BodyText.loc` maps an AST position back to the line and column in the file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from catenc import pyparse
from catenc.diagnostics import CatencError, Loc
from catenc.frontend.composites import Composite


@dataclass
class BodyText:
    composite: Composite
    line_starts: list[int]
    strips: list[int]
    lines: list[str]

    @staticmethod
    def of(composite: Composite) -> BodyText:
        raw_lines = composite.body.split("\n")
        starts, strips, lines, offset = [], [], [], 0
        for line in raw_lines:
            stripped = line.lstrip(" \t")
            starts.append(offset)
            strips.append(len(line) - len(stripped))
            lines.append(stripped)
            offset += len(line) + 1
        return BodyText(composite, starts, strips, lines)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def loc(self, lineno: int, col_bytes: int) -> Loc:
        """File position of a (1-based line, 0-based UTF-8 byte column) in the parsed text."""
        index = max(0, min(lineno - 1, len(self.lines) - 1))
        line = self.lines[index]
        col = len(line.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore"))
        return self.composite.body_loc(self.line_starts[index] + self.strips[index] + col)

    def node_loc(self, node: ast.AST) -> Loc:
        return self.loc(getattr(node, "lineno", 1), getattr(node, "col_offset", 0))

    def parse(self) -> list[ast.stmt]:
        try:
            tree = pyparse.parse(self.text, mode="exec")
        except SyntaxError as err:
            message = (err.msg or "invalid syntax").replace("invalid syntax. ", "")
            lineno = err.lineno or 1
            line = self.lines[min(lineno, len(self.lines)) - 1] if self.lines else ""
            col = max(0, (err.offset or 1) - 1)
            col_bytes = len(line[:col].encode("utf-8"))
            raise CatencError(f"syntax error in body: {message}", self.loc(lineno, col_bytes)) from None
        except (ValueError, RecursionError, MemoryError):
            raise CatencError("body cannot be parsed (too deeply nested or invalid)", self.loc(1, 0)) from None
        return tree.body
