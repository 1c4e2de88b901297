"""Where the bundled folders (`ops/`, `runtimes/`) are: inside the installed package, or at
the top of a source checkout."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def package_path(name: str) -> Path:
    installed = _PACKAGE / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name


def user_cache_dir() -> Path:
    """Where catenc keeps what it measured or built for reuse: $CATENC_CACHE_DIR, else the user
    cache directory ($XDG_CACHE_HOME, else ~/.cache) /catenc. Not created here."""
    chosen = os.environ.get("CATENC_CACHE_DIR")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "catenc"
