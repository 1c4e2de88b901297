"""The `weights` argument of a build with --weights external, for the Python loader: the data
section of its weights file, mapped once and checked against the layout the library was compiled
for (docs/abi.md, "External weights"); with --weights packed, the block the entry's pack function
fills from that data once (docs/abi.md, "Packed weights")."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from catenc.runtime.manifest import WORKSPACE_ALIGNMENT, ManifestError
from catenc.weights import Tensor, WeightsError, data_start, map_file, parse_weights


def aligned_buffer(nbytes: int, alignment: int = WORKSPACE_ALIGNMENT) -> np.ndarray:
    """A new uint8 array of nbytes whose data starts at a multiple of alignment.

    Use it for the workspace of :meth:`Entry.call_raw` (pass None, not an empty buffer, for
    a zero-size workspace); calls through :meth:`Entry.__call__` allocate their own.
    """
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = -raw.ctypes.data % alignment
    return raw[offset : offset + nbytes]


class WeightsData:
    """A weights file's data section, mapped read-only at the first call that needs it."""

    def __init__(self, path: Path, specs: Sequence[Mapping[str, Any]]) -> None:
        self.path = path
        self.specs = specs  # the entries' `weights` arguments in the manifest
        self._data: np.ndarray | None = None
        self._lock = threading.Lock()

    def address(self) -> int:
        """Where the data section starts in memory (64-byte aligned)."""
        with self._lock:
            if self._data is None:
                self._data = self._map()
        return self._data.ctypes.data

    def _map(self) -> np.ndarray:
        try:
            buffer = map_file(str(self.path))
            tensors = parse_weights(buffer)
            data = np.frombuffer(buffer, np.uint8)[data_start(buffer) :]
        except WeightsError as err:
            raise ManifestError(f"weights file {self.path}: {err}") from None
        for spec in self.specs:
            self._check(spec, tensors, len(data))
        if data.ctypes.data % WORKSPACE_ALIGNMENT:  # a file not written by catenc: copied, aligned
            aligned = aligned_buffer(len(data))
            aligned[:] = data
            data = aligned
        return data

    def _check(self, spec: Mapping[str, Any], tensors: Mapping[str, Tensor], size: int) -> None:
        """The file must hold each tensor the library reads where, and as, it was compiled to."""
        fits = "a file catenc wrote for this build, or catenc.weights.weights_bytes of the same tensors, fits"
        if size < spec["bytes"]:
            raise ManifestError(
                f"weights file {self.path}: its data has {size} bytes, the library reads {spec['bytes']} ({fits})"
            )
        for want in spec["tensors"]:
            expected = f"{want['dtype']}{want['shape']} at byte {want['offset']}"
            got = tensors.get(want["name"])
            if got is None:
                raise ManifestError(f"weights file {self.path}: no tensor {want['name']!r} ({expected}; {fits})")
            found = f"{got.dtype.name if got.dtype else got.code}{list(got.shape)} at byte {got.offset}"
            if found != expected:
                raise ManifestError(
                    f"weights file {self.path}: tensor {want['name']!r} is {found}, the library reads {expected} "
                    f"({fits})"
                )


class PackedWeights:
    """An entry's `packed_weights` block: allocated and filled by its pack function at the first call."""

    def __init__(self, data: WeightsData, library: ctypes.CDLL, spec: Mapping[str, Any]) -> None:
        self.data = data
        self.pack = library[spec["pack_symbol"]]
        self.pack.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        self.pack.restype = ctypes.c_int
        size = library[spec["packed_bytes_symbol"]]
        size.restype = ctypes.c_size_t
        self.size = int(size())  # what the library itself says
        self._block: np.ndarray | None = None
        self._lock = threading.Lock()

    def address(self) -> int:
        with self._lock:
            if self._block is None:
                block = aligned_buffer(self.size)
                status = self.pack(self.data.address(), block.ctypes.data, self.size)
                if status != 0:
                    raise ManifestError(f"weights file {self.data.path}: packing them returned status {status}")
                self._block = block
        return self._block.ctypes.data
