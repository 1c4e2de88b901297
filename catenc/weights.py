"""Safetensors files, read and written with numpy alone (docs/language.md, "Constants and weights files").

A file is an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}
(offsets into the data that follows) and the raw little-endian data. Tensors are read as views of
the mapped file, in the storage form of catenc's C ABI (bf16 as its uint16 bits). A file catenc
writes has its data 64-byte aligned and each tensor at a multiple of its element size
(docs/abi.md, "External weights").
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from catenc.dtypes import DTYPES, DType

SAFETENSORS_DTYPES = {
    "F64": "f64",
    "F32": "f32",
    "F16": "f16",
    "BF16": "bf16",
    "I64": "i64",
    "I32": "i32",
    "I16": "i16",
    "I8": "i8",
    "U64": "u64",
    "U32": "u32",
    "U16": "u16",
    "U8": "u8",
    "BOOL": "bool",
}
_CODES = {name: code for code, name in SAFETENSORS_DTYPES.items()}
_MAX_HEADER = 100 << 20  # a larger header is a corrupt length field


class WeightsError(Exception):
    """A file that is not a readable safetensors file; the message says why."""


@dataclass(frozen=True)
class Tensor:
    """One tensor of a weights file: its dtype code as written (F32, ...), shape, storage and
    where it starts in the data section."""

    code: str
    shape: tuple[int, ...]
    data: np.ndarray | None  # None when the code is no dtype of catenc's
    offset: int = 0

    @property
    def dtype(self) -> DType | None:
        name = SAFETENSORS_DTYPES.get(self.code)
        return DTYPES[name] if name else None


def read_weights(path: str) -> dict[str, Tensor]:
    """Every tensor of a safetensors file, in the header's order; the data maps the file."""
    return parse_weights(map_file(path))


def map_file(path: str) -> memoryview:
    """A safetensors file, mapped read-only."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size < 8:
                raise WeightsError(f"the file is truncated ({size} bytes, no header)")
            return memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
    except OSError as err:
        raise WeightsError(f"cannot read it: {err.strerror or err}") from None


def data_start(buffer: memoryview) -> int:
    """Where the data section of the safetensors file held in buffer starts (8 + the header length)."""
    (length,) = struct.unpack("<Q", buffer[:8])
    if length > min(len(buffer) - 8, _MAX_HEADER):
        raise WeightsError(f"the header length {length} runs past the end of the file ({len(buffer)} bytes)")
    return 8 + length


def parse_weights(buffer: memoryview) -> dict[str, Tensor]:
    """The tensors of a safetensors file held in buffer (views of it)."""
    start = data_start(buffer)
    try:
        header = json.loads(bytes(buffer[8:start]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise WeightsError(f"the header is not JSON ({err})") from None
    if not isinstance(header, dict):
        raise WeightsError("the header is not a JSON object")
    data = buffer[start:]
    tensors: dict[str, Tensor] = {}
    for name, record in header.items():
        if name != "__metadata__":
            tensors[name] = _tensor(name, record, data)
    return tensors


def _tensor(name: str, record: object, data: memoryview) -> Tensor:
    ok = isinstance(record, dict) and isinstance(record.get("dtype"), str)
    shape, offsets = (record.get("shape"), record.get("data_offsets")) if ok else (None, None)
    ok = (
        ok and isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    )
    ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
    if not ok:
        raise WeightsError(f"the header's entry for '{name}' is not {{dtype, shape, data_offsets}}")
    begin, end = offsets
    if not 0 <= begin <= end <= len(data):
        raise WeightsError(
            f"tensor '{name}' lies at bytes {begin}..{end} of the data, which has {len(data)} (a truncated file?)"
        )
    tensor = Tensor(record["dtype"], tuple(shape), None, begin)
    dtype = tensor.dtype
    if dtype is None:
        return tensor
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if (end - begin) != count * dtype.itemsize:
        raise WeightsError(
            f"tensor '{name}' ({record['dtype']}{list(shape)}) needs {count * dtype.itemsize} bytes, "
            f"its offsets give {end - begin}"
        )
    storage = np.dtype(dtype.numpy).newbyteorder("<")
    return Tensor(tensor.code, tensor.shape, np.frombuffer(data[begin:end], dtype=storage).reshape(shape), begin)


DATA_ALIGNMENT = 64  # where the data section starts in a file catenc writes


@dataclass(frozen=True)
class Placed:
    """Where a tensor lies in the data section of a weights file catenc writes."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the data section
    nbytes: int


def layout(tensors: Mapping[str, tuple[DType, np.ndarray]]) -> tuple[Placed, ...]:
    """The tensors in the order catenc writes them: the widest elements first (else as given), so
    with no gap between them (the format allows none) each starts at a multiple of its element size."""
    placed, offset = [], 0
    for name, (dtype, values) in sorted(tensors.items(), key=lambda item: -item[1][0].itemsize):
        nbytes = int(values.size) * dtype.itemsize
        placed.append(Placed(name, dtype, tuple(values.shape), offset, nbytes))
        offset += nbytes
    return tuple(placed)


def weights_bytes(tensors: Mapping[str, tuple[DType, np.ndarray]]) -> bytes:
    """A safetensors file of these tensors (name -> dtype and storage values), laid out by `layout`,
    its header padded with spaces so that the data starts DATA_ALIGNMENT-aligned in the file."""
    placed = layout(tensors)
    header = {
        p.name: {"dtype": _CODES[p.dtype.name], "shape": list(p.shape), "data_offsets": [p.offset, p.offset + p.nbytes]}
        for p in placed
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % DATA_ALIGNMENT)
    storage = (np.dtype(p.dtype.numpy).newbyteorder("<") for p in placed)
    chunks = (np.ascontiguousarray(tensors[p.name][1], dtype=s).tobytes() for p, s in zip(placed, storage))
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)
