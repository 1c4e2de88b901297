"""Writing a compile's outputs into the -o directory as one transaction (for `build`, and for a
compile-cache hit, which writes what an earlier identical compile stored).

Everything is produced in a private staging directory inside the output directory and moved
into place with `os.replace` at the end, only where the content changed (an unchanged output
only gets a fresh mtime, so Make sees it newer than its inputs, as after gcc): a failed run
leaves no partial file. The moves happen under an exclusive lock on the output directory with
SIGINT and SIGTERM held back, so concurrent runs into one directory each land their whole set
of outputs at once, never a manifest of one beside a source of another. Each staging directory
is locked by its run while it lives; one whose lock is free belongs to a killed run and the next
run removes it.

It imports nothing of the compiler, so that a cache hit starts in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from catenc.cache import Hit, Slot
from catenc.diagnostics import CatencError

ARTIFACT_KINDS = ("c", "h", "manifest", "so", "o", "a")
DUMP_KINDS = ("ir", "schedule", "loops")
EMIT_KINDS = ARTIFACT_KINDS + DUMP_KINDS
LOCK_FILE = ".catenc.lock"  # only where a file system refuses to lock a directory itself


@dataclass
class BuildRequest:
    path: str
    out_dir: str
    emit: tuple[str, ...]
    depfile: str | None = None
    dep_target: str | None = None
    dep_phony: bool = False
    profile: bool = False  # time every kernel call (catenc profile; catenc/emit.py render_source)
    cache: Slot | None = None  # where build stores its outputs in the compile cache
    written: list[str] = field(default_factory=list)  # filled by build: the outputs it rewrote


def default_emit(stop_after_source: bool, stop_after_object: bool) -> tuple[str, ...]:
    if stop_after_source:
        return ("c", "h", "manifest")
    if stop_after_object:
        return ("c", "h", "manifest", "o")
    return ("c", "h", "manifest", "so")


def emit_kinds(listed: tuple[str, ...], stop_after_source: bool, stop_after_object: bool) -> tuple[str, ...]:
    """What --emit LIST writes: dumps in addition to the default outputs, while artifact kinds,
    when the list names any, replace the defaults (docs/cli.md)."""
    artifacts = tuple(k for k in listed if k in ARTIFACT_KINDS) or default_emit(stop_after_source, stop_after_object)
    return artifacts + tuple(k for k in DUMP_KINDS if k in listed)


def output_directory(path: str) -> Path:
    """The -o directory, created if needed."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise CatencError(f"-o {path}: not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CatencError(f"-o {path}: cannot create the directory: {err.strerror}") from None
    return directory


def _lock(directory: Path, blocking: bool) -> int | None:
    """An exclusive flock on the directory itself, so no lock file is left behind (on LOCK_FILE in
    it where the file system cannot lock a directory, as NFS); the returned descriptor holds it
    until closed or the process ends. None when another process holds it and not blocking."""
    flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
    try:
        return _flock(os.open(directory, os.O_RDONLY | os.O_DIRECTORY), flags)
    except OSError:
        return _flock(os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666), flags)


def _flock(fd: int, flags: int) -> int | None:
    """fd, locked; None (fd closed) when another process holds the lock."""
    try:
        fcntl.flock(fd, flags)
    except BaseException as err:
        os.close(fd)
        if isinstance(err, BlockingIOError):
            return None
        raise
    return fd


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the directory's lock (waiting for it) for the duration of the block."""
    fd = _lock(directory, blocking=True)
    try:
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done (they arrive right after it)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _remove_stale_staging(out_dir: Path) -> None:
    """Remove the staging directories of runs that were killed: nothing holds their lock."""
    for path in sorted(out_dir.glob(".catenc-*")):
        if path.is_symlink() or not path.is_dir():
            continue
        fd = _lock(path, blocking=False)
        if fd is not None:
            shutil.rmtree(path, ignore_errors=True)
            os.close(fd)


def _commit(staged: Path, target: Path, stamp: int) -> bool:
    """Move a staged file into place unless the target already holds the same bytes; either way
    its mtime becomes `stamp`. True when it was rewritten."""
    changed = not (target.is_file() and target.read_bytes() == staged.read_bytes())
    if changed:
        os.replace(staged, target)
    os.utime(target, ns=(stamp, stamp))
    return changed


def write_atomic(path: Path, text: str | bytes, stamp: int | None = None) -> bool:
    """Write a file beside its final place and rename it there, with the mode a new file gets
    under the umask; as `_commit` for unchanged content. True when it was rewritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".catenc-{secrets.token_hex(8)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as handle:
            handle.write(text)
        return _commit(temporary, path, time.time_ns() if stamp is None else stamp)
    finally:
        temporary.unlink(missing_ok=True)


def _escape_make(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "\\ ").replace("#", "\\#")


def depfile_text(deps: Sequence[str], request: BuildRequest, final: Mapping[str, str]) -> str:
    """The Make rule: the request's target (else the library, object or source) on `deps`, the
    files the compile read (paths on disk, main file first)."""
    target = request.dep_target or final.get("so") or final.get("o") or final.get("c") or next(iter(final.values()))
    lines = [f"{_escape_make(target)}: " + " ".join(_escape_make(d) for d in deps)]
    if request.dep_phony:  # gcc -MP: a phony target for each dependency but the main file
        lines += [f"\n{_escape_make(d)}:" for d in deps[1:]]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def staging_directory(out_dir: Path) -> Iterator[Path]:
    """A private directory in out_dir, locked by this run while it lives, removed after."""
    staging, staging_lock = None, None
    try:
        with locked(out_dir), signals_deferred():
            _remove_stale_staging(out_dir)
            staging = Path(tempfile.mkdtemp(prefix=".catenc-", dir=out_dir))
            staging_lock = _lock(staging, blocking=True)
        yield staging
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if staging_lock is not None:
            os.close(staging_lock)


def commit_outputs(
    out_dir: Path, staging: Path, outputs: Mapping[str, str], request: BuildRequest, deps: Sequence[str]
) -> dict[str, str]:
    """Move the staged outputs (kind -> file name) into out_dir and write the depfile, at once;
    returns kind -> final path and adds the paths rewritten to request.written."""
    final = {}
    with locked(out_dir), signals_deferred():
        stamp = time.time_ns()
        for kind, name in outputs.items():
            target = out_dir / name
            if _commit(staging / name, target, stamp):
                request.written.append(str(target))
            final[kind] = str(target)
        if request.depfile:
            if write_atomic(Path(request.depfile), depfile_text(deps, request, final), stamp):
                request.written.append(request.depfile)
            final["depfile"] = request.depfile
    return final


def restore(hit: Hit, request: BuildRequest) -> dict[str, str]:
    """Write a compile-cache hit's outputs and the request's depfile, as `build` would have."""
    out_dir = output_directory(request.out_dir)
    with staging_directory(out_dir) as staging:
        hit.write_to(staging)
        return commit_outputs(out_dir, staging, hit.outputs, request, hit.deps)
