"""Closed sets of names as types (Python 3.10 has no enum.StrEnum)."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A closed set of names whose members are their names everywhere text is made: they compare
    and hash as the string, and print, format and serialise to JSON as it (as 3.11's StrEnum)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
