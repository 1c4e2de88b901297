"""The `weights` argument of a build with --weights external, for the Python loader: the data
section of its weights file, mapped once and checked against the layout the library was compiled
for (docs/abi.md, "External weights")."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from catenc.runtime.manifest import WORKSPACE_ALIGNMENT, ManifestError
from catenc.weights import Tensor, WeightsError, data_start, map_file, parse_weights


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
            aligned = np.empty(len(data) + WORKSPACE_ALIGNMENT, np.uint8)
            start = -aligned.ctypes.data % WORKSPACE_ALIGNMENT
            aligned[start : start + len(data)] = data
            data = aligned[start : start + len(data)]
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
