"""The compile cache (docs/cli.md, "Compile cache"): a compile's outputs, content-addressed by
everything that affects them, so that repeating a compile writes them again without compiling.

A lookup has two stages, as ccache's direct mode. The first key hashes what is known before any
work: the options as given, the bytes of the main file, the runtime descriptor and the tuning
file, catenc's version and a hash of its own source files, Python and the libraries that render
code, this machine's CPU, and the environment variables that reach the toolchain. It names an
index that lists what the stored compile read besides: every file (includes, `ops/`, `-I` files)
with its hash, the listing of each directory it searched, and each tool (the C compiler, `ar`) as
found on PATH with its size and mtime (its `--version` output is memoised by those, so a hit runs
nothing). A hit needs all of them unchanged and an entry made for this very first key (an index
edited to name another compile's entry is a miss); its outputs are then checked against their
hashes.

Under the cache directory (`CATENC_CACHE_DIR`, else `$XDG_CACHE_HOME/catenc`, else
`~/.cache/catenc`), in `compile/`:

    index/<first key>.json    what the compile read, and its entry
    entries/<entry key>/      the outputs and entry.json (the first key, the outputs' hashes,
                              the depfile's inputs)
    tools/<tool id>           a tool's --version output, by its path, size and mtime
    tmp/                      entries being written
    stats.json                hits and misses

Every write is the rename of a complete file or directory, so a reader never sees half of one;
an entry that fails its hashes is ignored and replaced by the next compile that stores it; any
error reading or writing the cache leaves the compile as it would be without one. When the
entries outgrow `CATENC_CACHE_SIZE` (default 2G), the least recently used are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from catenc import __version__, toolchain_memo
from catenc.diagnostics import CatencError
from catenc.resources import user_cache_dir, write_text_atomic
from catenc.toolchain_memo import tool_identity

SCHEMA = "catenc.cache/2"
OFF_ENV = "CATENC_NO_CACHE"  # =1: no lookup, no store
SIZE_ENV = "CATENC_CACHE_SIZE"
DEFAULT_SIZE = "2G"
# Environment variables that change what the runtime or its C toolchain produces.
KEYED_ENV = (
    "CC",
    "CATENC_RUNTIME_PATH",
    "CPATH",
    "C_INCLUDE_PATH",
    "LIBRARY_PATH",
    "COMPILER_PATH",
    "GCC_EXEC_PREFIX",
    "SOURCE_DATE_EPOCH",
)
# Libraries whose version could change the rendered text.
KEYED_LIBRARIES = ("jinja2", "markupsafe", "numpy", "yaml", "click")
# /proc/cpuinfo fields naming the CPU (-march=native and tuning files depend on it).
CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name", "flags", "CPU implementer", "CPU part", "Features")
ENTRY_FILE = "entry.json"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Corrupt(Exception):
    """A cache file that does not hold what its record says."""


# What reading a damaged cache file can raise (RecursionError: JSON nested too deeply).
UNREADABLE = (OSError, ValueError, KeyError, TypeError, RecursionError, Corrupt)


def enabled() -> bool:
    """False when CATENC_NO_CACHE is set to anything but 0."""
    return os.environ.get(OFF_ENV, "") in ("", "0")


def cache_root() -> Path:
    return user_cache_dir() / "compile"


def size_limit() -> int:
    text = os.environ.get(SIZE_ENV) or DEFAULT_SIZE
    number, unit = text.strip().upper().rstrip("B"), ""
    if number[-1:] in _UNITS:
        number, unit = number[:-1], number[-1]
    try:
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise CatencError(f"{SIZE_ENV}={text}: expected a size such as 500M or 2G") from None


@dataclass(frozen=True)
class Inputs:
    """What a compile read beyond its first key, checked again on every hit."""

    files: tuple[str, ...]  # paths on disk
    dirs: tuple[str, ...]  # directories whose listing it searched
    tools: tuple[str, ...]  # executables, by the name looked up on PATH


@dataclass(frozen=True)
class Hit:
    """A stored compile's outputs, checked against their hashes."""

    outputs: dict[str, str]  # kind -> file name, in the order build commits them
    contents: dict[str, tuple[bytes, int]]  # file name -> (bytes, mode)
    deps: tuple[str, ...]  # the depfile's inputs
    notes: tuple[str, ...]  # what the compile printed under -v

    def write_to(self, directory: Path) -> None:
        """Write the outputs into an empty directory, with the modes they were stored with."""
        for name, (data, mode) in self.contents.items():
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(directory / name, mode)


@dataclass(frozen=True)
class Slot:
    """Where one compile's outputs are (or will be) in the cache."""

    root: Path
    key: str
    started: int  # time.time_ns() before any input was read
    limit: int  # bytes the entries may take (CATENC_CACHE_SIZE)
    notes: tuple[str, ...] = ()

    def find(self) -> Hit | None:
        """The stored outputs when every input is unchanged, else None; counted in the stats."""
        try:
            hit = self._find()
        except UNREADABLE:
            hit = None
        with contextlib.suppress(OSError, ValueError):
            _count(self.root, "hits" if hit else "misses")
        return hit

    def _find(self) -> Hit | None:
        index = _read_json(self.root / "index" / f"{self.key}.json")
        if index.get("schema") != SCHEMA or not _unchanged(index["inputs"]):
            return None
        if not _plain_name(index["entry"]):
            raise Corrupt(index["entry"])
        directory = self.root / "entries" / index["entry"]
        hit = _read_entry(directory, self.key)
        os.utime(directory)  # its age is its last use (eviction)
        return hit

    def store(self, staging: Path, outputs: Mapping[str, str], deps: Sequence[str], inputs: Inputs) -> None:
        """Keep the staged outputs (kind -> file name); silently skipped when an input changed
        during the compile or the cache cannot be written."""
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            self._store(staging, outputs, deps, inputs)

    def _store(self, staging: Path, outputs: Mapping[str, str], deps: Sequence[str], inputs: Inputs) -> None:
        if any(os.stat(path).st_mtime_ns >= self.started for path in inputs.files):
            return  # edited while being compiled: what was read is not what is there now
        record = {
            "files": [[path, _sha_file(path)] for path in inputs.files],
            "dirs": [[directory, _listing(directory)] for directory in inputs.dirs],
            "tools": [[name, tool_identity(name)] for name in inputs.tools],
        }
        versions = [_tool_version(self.root, tool) for _, tool in record["tools"] if tool]
        entry_key = _digest([self.key, record, versions])
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix="entry-", dir=tmp))
        try:
            files = []
            for kind, name in outputs.items():
                shutil.copy(staging / name, building / name)
                files.append([kind, name, _sha_file(building / name)])
            entry = {"schema": SCHEMA, "key": self.key, "outputs": files, "deps": list(deps), "notes": list(self.notes)}
            (building / ENTRY_FILE).write_text(json.dumps(entry, indent=1))
            _place(building, self.root / "entries" / entry_key, tmp, self.key)
        finally:
            shutil.rmtree(building, ignore_errors=True)
        index = {"schema": SCHEMA, "inputs": record, "entry": entry_key}
        write_text_atomic(self.root / "index" / f"{self.key}.json", json.dumps(index, indent=1))
        _evict(self.root, self.limit)


def slot(options: Mapping[str, object], files: Sequence[str]) -> Slot:
    """The slot of a compile given these options (JSON data) that reads these files first."""
    started = time.time_ns()
    key = _digest(
        {
            "schema": SCHEMA,
            "catenc": [__version__, source_hash()],
            "python": sys.version,
            "libraries": {name: _library(name) for name in KEYED_LIBRARIES},
            "machine": machine(),
            "env": {name: os.environ.get(name) for name in KEYED_ENV},
            "options": options,
            "files": [[path, _sha_file(path)] for path in files],
        }
    )
    return Slot(cache_root(), key, started, size_limit())


def source_hash() -> str:
    """A hash of every file of the catenc package (code, templates, bundled data)."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for directory, subdirs, names in os.walk(package):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                path = Path(directory, name)
                digest.update(f"{path.relative_to(package)}\0{_sha_file(path)}\0".encode())
    return digest.hexdigest()


def machine() -> dict[str, object]:
    """This machine's architecture, CPU model and features, and usable cores."""
    lines: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in CPU_FIELDS:
                lines.add(f"{key.strip()}: {value.strip()}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"arch": os.uname().machine, "cpu": sorted(lines), "cores": cores}


def stats() -> dict[str, object]:
    """What `catenc cache stats` prints."""
    root = cache_root()
    entries = _entries(root)
    counts = _read_stats(root)
    return {
        "location": str(root),
        "enabled": enabled(),
        "entries": len(entries),
        "bytes": sum(size for _, _, size in entries),
        "limit": size_limit(),
        "hits": counts.get("hits", 0),
        "misses": counts.get("misses", 0),
    }


def clear() -> int:
    """Remove every entry, index and count, and what the compilers answered; returns how many
    entries there were."""
    toolchain_memo.clear()
    root = cache_root()
    count = len(_entries(root))
    for part in ("index", "entries", "tools", "tmp", "stats.json"):
        path = root / part
        if path.is_dir():
            aside = root / f".clearing-{secrets.token_hex(8)}"  # gone at once for a concurrent reader
            os.rename(path, aside)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return count


def _sha_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _read_json(path: Path) -> dict:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise Corrupt(str(path))
    return data


def _listing(directory: str) -> str:
    return _digest(sorted(os.listdir(directory)))


def _library(name: str) -> list[object] | None:
    """Where a library is installed and its file's size and mtime (found without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    stat = os.stat(spec.origin)
    return [spec.origin, stat.st_size, stat.st_mtime_ns]


def _tool_version(root: Path, tool: list[object]) -> str:
    """The tool's `--version` output, memoised by its path, size and mtime."""
    memo = root / "tools" / _digest(tool)
    with contextlib.suppress(OSError):
        return memo.read_text()
    try:
        done = subprocess.run([str(tool[0]), "--version"], capture_output=True, text=True, timeout=60)
        version = done.stdout + done.stderr
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    write_text_atomic(memo, version)
    return version


def _unchanged(inputs: dict) -> bool:
    try:
        return (
            all(_sha_file(path) == sha for path, sha in inputs["files"])
            and all(_listing(directory) == listing for directory, listing in inputs["dirs"])
            and all(tool_identity(name) == tool for name, tool in inputs["tools"])
        )
    except OSError:
        return False


def _read_entry(directory: Path, key: str) -> Hit:
    """The outputs of the entry made for the first key `key`, each checked against its hash
    (Corrupt where the entry was made for another key or an output fails its hash)."""
    entry = _read_json(directory / ENTRY_FILE)
    if entry.get("schema") != SCHEMA or entry.get("key") != key:
        raise Corrupt(str(directory))
    contents = {}
    for _, name, sha in entry["outputs"]:
        if not _plain_name(name) or name == ENTRY_FILE:
            raise Corrupt(name)
        path = directory / name
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            raise Corrupt(str(path))
        contents[name] = (data, os.stat(path).st_mode & 0o777)
    outputs = {kind: name for kind, name, _ in entry["outputs"]}
    return Hit(outputs, contents, tuple(entry["deps"]), tuple(entry["notes"]))


def _plain_name(name: object) -> bool:
    """A file name of the entry's own, never a path out of it."""
    return isinstance(name, str) and Path(name).name == name and not name.startswith(".")


def _place(building: Path, final: Path, tmp: Path, key: str) -> None:
    """Rename a complete entry into place; an entry already there stays if it is sound (a
    concurrent compile of the same inputs stored the same bytes) and is replaced if not."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(building, final)
        return
    except OSError:
        pass
    try:
        _read_entry(final, key)
        return
    except UNREADABLE:
        pass
    aside = tmp / f"corrupt-{secrets.token_hex(8)}"
    os.rename(final, aside)
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(building, final)


def _entries(root: Path) -> list[tuple[int, Path, int]]:
    """(last use, directory, bytes) of every entry."""
    found = []
    with contextlib.suppress(OSError):
        for directory in (root / "entries").iterdir():
            with contextlib.suppress(OSError):
                size = sum(path.stat().st_size for path in directory.iterdir())
                found.append((directory.stat().st_mtime_ns, directory, size))
    return sorted(found)


def _evict(root: Path, limit: int) -> None:
    """Remove the least recently used entries until the rest take at most 90% of the limit, and
    what killed compiles left in tmp/."""
    entries = _entries(root)
    total = sum(size for _, _, size in entries)
    if total > limit:
        for _, directory, size in entries:  # oldest first
            if total <= limit * 0.9:
                break
            shutil.rmtree(directory, ignore_errors=True)
            total -= size
    hour_ago = time.time() - 3600
    with contextlib.suppress(OSError):
        for path in (root / "tmp").iterdir():
            if path.stat().st_mtime < hour_ago:
                shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _stats_locked(root: Path) -> Iterator[Path]:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "stats.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield root / "stats.json"
    finally:
        os.close(fd)


def _read_stats(root: Path) -> dict[str, int]:
    try:
        data = _read_json(root / "stats.json")
    except (OSError, ValueError, Corrupt):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)}


def _count(root: Path, field: str) -> None:
    with _stats_locked(root) as path:
        counts = _read_stats(root)
        counts[field] = counts.get(field, 0) + 1
        write_text_atomic(path, json.dumps(counts))
