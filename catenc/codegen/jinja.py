"""The jinja2 environment of the C scaffolding templates (catenc/codegen/templates/)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import jinja2


class _TemplateBytecode(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept with this package's .pyc files (codegen/__pycache__), as Python
    keeps those: without them every catenc process compiles the templates again (about 0.2 s).
    jinja2 checks each file against the template's source; one that cannot be read or written
    is skipped, and none is written where Python writes no bytecode either."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError, TypeError):  # damaged: compile the template again
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if not sys.dont_write_bytecode:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)


CACHE_DIRECTORY = Path(__file__).parent / "__pycache__"


def _bytecode_cache(variant: str) -> jinja2.BytecodeCache | None:
    """The cache of one environment's options (jinja2 keys a file by template name only)."""
    try:
        CACHE_DIRECTORY.mkdir(exist_ok=True)
    except OSError:
        return None
    return _TemplateBytecode(str(CACHE_DIRECTORY), f"__jinja2_%s.{variant}.cache")


def environment(lstrip_blocks: bool = False) -> jinja2.Environment:
    """Templates rendered strictly (an undefined name is an error), never HTML-escaped."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("catenc.codegen", "templates"),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=lstrip_blocks,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        bytecode_cache=_bytecode_cache("lstrip" if lstrip_blocks else "plain"),
    )
