"""Where the bundled folders (`ops/`, `runtimes/`) are: inside the installed package, or at
the top of a source checkout; which descriptor file a `--runtime` names (found without loading
it, so the compile cache can key on it cheaply)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from catenc.diagnostics import CatencError, closest

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


def write_text_atomic(path: Path, text: str) -> None:
    """Write a small file of the user cache beside its place and rename it there: a concurrent
    reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.{secrets.token_hex(8)}"
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def bundled_runtimes_dir() -> Path:
    return package_path("runtimes")


def bundled_runtime_names() -> list[str]:
    return sorted(p.stem for p in bundled_runtimes_dir().glob("*.py") if not p.name.startswith("_"))


def find_runtime(spec: str) -> tuple[Path, str]:
    """The descriptor file for --runtime NAME|PATH and its display name for the manifest."""
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise CatencError(f"runtime descriptor '{spec}' not found")
        return path, spec
    bundled = bundled_runtimes_dir() / f"{spec}.py"
    if bundled.is_file():
        return bundled, f"catenc:runtimes/{spec}.py"
    for directory in filter(None, os.environ.get("CATENC_RUNTIME_PATH", "").split(os.pathsep)):
        candidate = Path(directory) / f"{spec}.py"
        if candidate.is_file():
            return candidate, str(candidate)
    names = bundled_runtime_names()
    raise CatencError(f"unknown runtime '{spec}'{closest(spec, names)}; bundled runtimes: {', '.join(names)}")
