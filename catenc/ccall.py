"""A thin ctypes binding of one catenc entry, for timing (`make bench`, `catenc profile`): every
buffer is preallocated.

``catenc.loader`` (the public loader) allocates outputs and a workspace on every call, which
is right for users and wrong for a benchmark: on this machine touching fresh memory costs
about 30 ms per 64 MB. :class:`BoundCall` reads the entry's C signature from the build
manifest (docs/abi.md: input pointers or by-value scalars, output pointers, the
``int64_t`` free symbols, ``void* workspace``, ``size_t workspace_bytes``), allocates the
outputs and a 64-byte aligned workspace once, converts every argument once, and then each
call is a single foreign-function call that must return 0 (``CATENC_OK``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from catenc.loader import Entry, Library, aligned_buffer

_SCALAR_CTYPES = {
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
    "i8": ctypes.c_int8,
    "i16": ctypes.c_int16,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64,
    "bool": ctypes.c_uint8,
}


class BoundCall:
    """Entry ``name`` of ``library`` bound to fixed inputs and preallocated outputs.

    ``inputs`` are numpy arrays in declared order (rank-0 inputs: numbers or 0-d arrays),
    already of the entry's storage dtype and C-contiguous; they are kept alive, not copied.
    ``dims`` gives the free symbols no input shape holds. After ``call()`` the results are in
    ``outputs`` (a list, declared order).
    """

    def __init__(self, library: Library, name: str, inputs: Sequence[object], **dims: int) -> None:
        entry: Entry = library[name]
        self.name = name
        self.entry = entry
        arrays = [np.asarray(value) for value in inputs]
        if len(arrays) != len(entry.inputs):
            raise TypeError(f"{name}: expected {len(entry.inputs)} inputs, got {len(arrays)}")
        for spec, array in zip(entry.inputs, arrays):
            if spec.rank and (array.dtype != spec.dtype.numpy or not array.flags.c_contiguous):
                raise TypeError(f"{name}: input {spec.name!r} must be a C-contiguous {spec.dtype.numpy} array")
        self.symbols = entry.bind(*arrays, **dims)  # every symbol value, checked against the shapes
        self.outputs = [
            np.empty(tuple(expr(self.symbols) for expr in spec.exprs), dtype=spec.dtype.numpy) for spec in entry.outputs
        ]
        self.workspace_bytes = entry.workspace_bytes(**{d: self.symbols[d] for d in entry.dims})
        self.workspace = aligned_buffer(self.workspace_bytes) if self.workspace_bytes else None
        self._keep = (arrays, self.outputs, self.workspace)

        cdll = ctypes.CDLL(str(library.path))  # the same handle the loader opened
        function = cdll[entry.symbol]
        argtypes: list[type] = []
        args: list[object] = []
        inputs_left = iter(zip(entry.inputs, arrays))
        outputs_left = iter(self.outputs)
        for arg in entry.spec["args"]:
            role = arg["role"]
            if role == "input":
                spec, array = next(inputs_left)
                if spec.rank == 0:
                    ctype = _SCALAR_CTYPES[spec.dtype.name]
                    argtypes.append(ctype)
                    args.append(ctype(array.item()))
                else:
                    argtypes.append(ctypes.c_void_p)
                    args.append(ctypes.c_void_p(array.ctypes.data))
            elif role in ("weights", "packed_weights"):  # the weights file's data, or its packed block (loader)
                argtypes.append(ctypes.c_void_p)
                args.append(ctypes.c_void_p(entry.weights_address()))
            elif role == "output":
                argtypes.append(ctypes.c_void_p)
                args.append(ctypes.c_void_p(next(outputs_left).ctypes.data))
            elif role == "dim":
                argtypes.append(ctypes.c_int64)
                args.append(ctypes.c_int64(self.symbols[arg["name"]]))
            elif role == "workspace":
                argtypes.append(ctypes.c_void_p)
                address = None if self.workspace is None else self.workspace.ctypes.data
                args.append(ctypes.c_void_p(address))
            elif role == "workspace_bytes":
                argtypes.append(ctypes.c_size_t)
                args.append(ctypes.c_size_t(self.workspace_bytes))
            else:
                raise ValueError(f"{name}: unknown argument role {role!r} in the manifest")
        function.argtypes = argtypes
        function.restype = ctypes.c_int
        self._function = function
        self._args = tuple(args)

    def call(self) -> None:
        """One call of the C entry; raises when it returns nonzero."""
        status = self._function(*self._args)
        if status != 0:
            raise RuntimeError(f"{self.name} returned status {status}")

    def __call__(self) -> np.ndarray:
        """One call; returns the first output (the preallocated array)."""
        self.call()
        return self.outputs[0]
