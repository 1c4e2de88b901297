"""What a C compiler told us once, kept for the next `catenc` command (docs/cli.md, "Compile
cache"): the macros it predefines and whether it links OpenMP each cost a compiler run, and every
command asks. Memoised in the user cache directory by the compiler's path, real path, size and
modification time (as the compile cache memoises `--version`), so a changed compiler is asked again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from catenc.resources import user_cache_dir, write_text_atomic

Answer = TypeVar("Answer", bool, list[str])
SCHEMA = 1


def memo_dir() -> Path:
    return user_cache_dir() / "toolchain"


def tool_identity(name: str) -> list[object] | None:
    """An executable as PATH finds it: path, real path, size and mtime; None where absent."""
    found = shutil.which(name)
    if found is None:
        return None
    real = os.path.realpath(found)
    try:
        stat = os.stat(real)
    except OSError:
        return None
    return [found, real, stat.st_size, stat.st_mtime_ns]


def memoised(
    question: str,
    compiler: str,
    args: Sequence[str],
    ask: Callable[[], Answer],
    keep: Callable[[Answer], bool],
    kind: type[Answer],
) -> Answer:
    """`ask()`'s answer (a `kind`) for this compiler and arguments: from the memo when it was kept
    before, else asked now and kept when `keep(answer)` (a missing OpenMP runtime can be installed
    later, so only a yes is worth keeping). An unreadable, unwritable or damaged memo only means
    asking."""
    identity = tool_identity(compiler)
    if identity is None:
        return ask()
    key = {"schema": SCHEMA, "question": question, "compiler": identity, "args": list(args)}
    path = memo_dir() / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(path.read_text())
        if record["key"] == key and _well_formed(record["answer"], kind):
            return record["answer"]
    answer = ask()
    if keep(answer):
        with contextlib.suppress(OSError):
            write_text_atomic(path, json.dumps({"key": key, "answer": answer}, sort_keys=True))
    return answer


def _well_formed(answer: object, kind: type) -> bool:
    """A bool, or a list of names, as the question's answers are."""
    return isinstance(answer, kind) and (kind is not list or all(isinstance(x, str) for x in answer))


def clear() -> None:
    """Forget every answer (`catenc cache clear`)."""
    shutil.rmtree(memo_dir(), ignore_errors=True)
