"""Baked constants in C (docs/language.md, "Constants and weights files"): each is a static,
64-byte aligned array holding its values' exact bit patterns as fixed-width hex words (a union
gives them their type), formatted by numpy a block at a time, so that a model's millions of
weights render in seconds and stay compact (11 characters a float)."""

from __future__ import annotations

import numpy as np

from catenc.dtypes import DType

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_BLOCK = 1 << 20  # words formatted at once (bounds the memory of the nibble table)
PER_LINE = 16  # words on a line


def constant_array(symbol: str, dtype: DType, values: np.ndarray, comment: str) -> str:
    """The definition of `symbol`, a union of `bits` (unsigned words) and `values` (the dtype's C
    type) holding values' bit patterns; `comment` says what it is."""
    word = f"uint{dtype.itemsize * 8}_t"
    count = max(values.size, 1)  # C has no empty arrays
    native = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("="))
    bits = native.reshape(-1).view(f"u{dtype.itemsize}")
    words = hex_words(bits) if values.size else "0"
    return (
        f"/* {comment} */\n"
        f"static const union {{ {word} bits[{count}]; {dtype.ctype} values[{count}]; }} "
        f"__attribute__((aligned(64))) {symbol} = {{{{\n{words}\n}}}};"
    )


def hex_words(bits: np.ndarray) -> str:
    """Unsigned integers as C hex literals of their full width, each followed by a comma,
    PER_LINE to a line."""
    digits = bits.dtype.itemsize * 2
    width = digits + 3  # 0x, the digits, a comma
    shifts = np.arange(digits - 1, -1, -1, dtype=np.uint64) * np.uint64(4)
    chunks = []
    for start in range(0, bits.size, _BLOCK):
        block = bits[start : start + _BLOCK].astype(np.uint64)
        cells = np.empty((block.size, width), dtype=np.uint8)
        cells[:, 0], cells[:, 1], cells[:, -1] = ord("0"), ord("x"), ord(",")
        cells[:, 2:-1] = _HEX[(block[:, None] >> shifts) & np.uint64(15)]
        chunks.append(cells.reshape(-1))
    flat = np.concatenate(chunks)
    full = bits.size // PER_LINE * PER_LINE * width
    rows = flat[:full].reshape(-1, PER_LINE * width)
    lines = np.empty((rows.shape[0], rows.shape[1] + 1), dtype=np.uint8)
    lines[:, :-1], lines[:, -1] = rows, ord("\n")
    text = (lines.tobytes() + flat[full:].tobytes()).decode("ascii")
    return text.rstrip("\n")
