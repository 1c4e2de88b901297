"""The element types of the body language, with their C and numpy spellings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    ctype: str
    itemsize: int
    kind: str  # "bool", "int", "uint", "float"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def is_half(self) -> bool:
        """f16 and bf16 are stored as uint16 bits and computed in f32."""
        return self.name in ("f16", "bf16")

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype of a buffer of this type (bf16 is held as its uint16 bits)."""
        return np.dtype(_NUMPY_STORAGE[self.name])

    def __repr__(self) -> str:
        return self.name


_TABLE = [
    DType("bool", "uint8_t", 1, "bool"),
    DType("i8", "int8_t", 1, "int"),
    DType("i16", "int16_t", 2, "int"),
    DType("i32", "int32_t", 4, "int"),
    DType("i64", "int64_t", 8, "int"),
    DType("u8", "uint8_t", 1, "uint"),
    DType("u16", "uint16_t", 2, "uint"),
    DType("u32", "uint32_t", 4, "uint"),
    DType("u64", "uint64_t", 8, "uint"),
    DType("f16", "uint16_t", 2, "float"),
    DType("bf16", "uint16_t", 2, "float"),
    DType("f32", "float", 4, "float"),
    DType("f64", "double", 8, "float"),
]
_NUMPY_STORAGE = {
    "bool": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "f16": "float16",
    "bf16": "uint16",
    "f32": "float32",
    "f64": "float64",
}

DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}
BOOL, I64, F32, F64 = DTYPES["bool"], DTYPES["i64"], DTYPES["f32"], DTYPES["f64"]


def numpy_bfloat16() -> np.dtype | None:
    """numpy's bfloat16 dtype where ml_dtypes (which onnx, JAX and TensorFlow bring) is installed, else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def is_bfloat16(array: np.ndarray) -> bool:
    """Whether an array holds ml_dtypes' bfloat16 values: its bytes are catenc's bf16 storage."""
    return array.dtype.name == "bfloat16" and array.dtype.itemsize == 2


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16, or an ml_dtypes bfloat16 array) to float32 values."""
    bits = np.asarray(bits)
    bits = bits.view(np.uint16) if is_bfloat16(bits) else bits.astype(np.uint16, copy=False)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 bit patterns, nearest-even, NaN kept quiet."""
    x = np.asarray(values, dtype=np.float32, order="C").view(np.uint32)
    rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    nan = (x & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (x >> 16) | 0x40, rounded).astype(np.uint16)


def to_storage(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert numpy values to the buffer representation catenc's C ABI uses for dtype."""
    values = np.asarray(values)
    if dtype.name == "bf16" and is_bfloat16(values):
        return np.ascontiguousarray(values).view(np.uint16).reshape(values.shape)
    if dtype.name == "bf16":
        return f32_to_bf16(np.asarray(values, dtype=np.float32))
    return np.asarray(values, dtype=dtype.numpy, order="C")  # keeps rank 0 (ascontiguousarray does not)


def from_storage(buffer: np.ndarray, dtype: DType) -> np.ndarray:
    """Values of a buffer in the C ABI representation, as a numpy array (bf16 widened to f32,
    from its uint16 bits or an ml_dtypes bfloat16 array)."""
    if dtype.name == "bf16":
        return bf16_to_f32(buffer)
    return buffer
