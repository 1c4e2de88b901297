"""The one dispatch idiom of the compiler's tree walks: a table from a node's class (or a
function's name) to the function that handles it, each entry filed by a decorator beside its
function. A lookup is one dict probe (the walks run per IR node)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Table(Generic[F]):
    """`@table.register(key, ...)` files a function; `table[key]` finds it. A class without an
    entry of its own takes its nearest base's, as with functools.singledispatch."""

    def __init__(self, what: str, base: Table[F] | None = None) -> None:
        self.what = what  # names the walk in the error of a missing entry
        self._own: dict[Hashable, F] = dict(base._own) if base is not None else {}
        self._found: dict[Hashable, F] = dict(self._own)

    def register(self, *keys: Hashable) -> Callable[[F], F]:
        def file(function: F) -> F:
            for key in keys:
                self._own[key] = self._found[key] = function
            return function

        return file

    def __getitem__(self, key: Hashable) -> F:
        try:
            return self._found[key]
        except KeyError:
            return self._inherited(key)

    def _inherited(self, key: Hashable) -> F:
        for base in key.__mro__[1:] if isinstance(key, type) else ():
            if base in self._own:
                self._found[key] = self._own[base]
                return self._own[base]
        name = key.__name__ if isinstance(key, type) else repr(key)
        raise TypeError(f"{self.what}: no entry for {name}")

    def __contains__(self, key: Hashable) -> bool:
        return key in self._own

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._own)

    def rebound(self, owner: type) -> Table[F]:
        """The table of a subclass: each entry that is a method of `owner`'s bases becomes
        `owner`'s method of that name, so an override takes effect without filing it again."""
        table: Table[F] = Table(self.what)
        for key, function in self._own.items():
            table._own[key] = table._found[key] = getattr(owner, function.__name__, function)
        return table
