"""What the importer knows about each ONNX value: dtype, symbolic shape, and its value when known.

A value known at import time (an initializer, a `Constant`, anything computed only from those,
the shape of a tensor) is held as a numpy array; integer arrays may hold symbolic entries
(`Expr`, dtype object) so that `Shape -> Gather -> Concat -> Reshape` chains fold even where
a dimension is a symbol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from catenc.dtypes import DTYPES
from catenc.symbolic import Expr, const

# ONNX TensorProto.DataType -> catenc dtype name
ONNX_DTYPES = {
    1: "f32",
    2: "u8",
    3: "i8",
    4: "u16",
    5: "i16",
    6: "i32",
    7: "i64",
    9: "bool",
    10: "f16",
    11: "f64",
    12: "u32",
    13: "u64",
    16: "bf16",
}
# The numpy dtype a known value of each catenc dtype is held in (bf16 as float32 values).
NUMPY = {name: dtype.numpy.type for name, dtype in DTYPES.items()} | {"bf16": np.float32}
FLOATS = ("f16", "bf16", "f32", "f64")
# The most elements of a tensor the importer makes (ConstantOfShape): more is a model's mistake or an attack.
MAX_ELEMENTS = 1 << 36
Dim = Expr
Shape = tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Value:
    """One ONNX value: `name` is the body-language name holding it (None while only known at import)."""

    dtype: str
    shape: Shape
    name: str | None = None
    known: np.ndarray | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_known(self) -> bool:
        return self.known is not None

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS


def dims(values) -> Shape:
    """A shape from ints and expressions."""
    return tuple(v if isinstance(v, Expr) else const(int(v)) for v in values)


def static(shape: Shape) -> tuple[int, ...] | None:
    """The shape as ints, or None when a dimension is symbolic."""
    if all(d.is_const for d in shape):
        return tuple(d.value for d in shape)
    return None


def simplify(entry: object) -> object:
    """An integer entry of a symbolic array as an int where it is one."""
    if isinstance(entry, Expr) and entry.is_const:
        return entry.value
    return entry


def known_value(array: np.ndarray, dtype: str) -> Value:
    """A value known at import time."""
    if not isinstance(array, np.ndarray):
        array = np.array(array, dtype=object if isinstance(array, Expr) else None)
    if array.dtype == object:
        flat = [simplify(e) for e in array.reshape(-1)]
        if all(isinstance(e, (int, np.integer)) for e in flat):
            array = np.array(flat, dtype=NUMPY[dtype]).reshape(array.shape)
        else:
            array = np.array(flat, dtype=object).reshape(array.shape)
    else:
        array = np.asarray(array).astype(NUMPY[dtype], copy=False)
    return Value(dtype, dims(array.shape), known=array)


def symbolic_ints(value: Value) -> list[Expr]:
    """A known integer vector's entries as expressions."""
    return [e if isinstance(e, Expr) else const(int(e)) for e in np.asarray(value.known).reshape(-1)]


def literal(x: object, dtype: str) -> str:
    """A scalar as a literal of the body language (weak: it adopts the dtype of what it meets)."""
    if isinstance(x, Expr):
        return str(x) if x.is_const or x.as_symbol() is not None else f"({x})"
    if dtype == "bool":
        return "True" if bool(x) else "False"
    if dtype in FLOATS:
        f = float(x)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        if dtype in ("f32", "f16"):  # the shortest text that reads back as the same value
            return str(NUMPY[dtype](f))
        return repr(f)
    return str(int(x))


def broadcast(a: Shape, b: Shape) -> Shape | None:
    """numpy broadcasting of two symbolic shapes, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else const(1)
        y = b[-i] if i <= len(b) else const(1)
        if x == y or y == const(1):
            out.append(x)
        elif x == const(1):
            out.append(y)
        else:
            return None
    return tuple(reversed(out))
