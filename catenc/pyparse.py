"""`ast.parse` for several threads at once (test-runtime plans libraries two at a time).

CPython 3.11 before 3.11.8 keeps the AST constructor's recursion depth in state shared between
threads and can raise `SystemError: AST constructor recursion depth mismatch` when two threads
parse at once (python/cpython#106905); one lock around every parse avoids it.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, mode=mode)
