"""The jinja2 environment of the C scaffolding templates (catenc/codegen/templates/)."""

from __future__ import annotations

import jinja2


def environment(lstrip_blocks: bool = False) -> jinja2.Environment:
    """Templates rendered strictly (an undefined name is an error), never HTML-escaped."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("catenc.codegen", "templates"),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=lstrip_blocks,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
