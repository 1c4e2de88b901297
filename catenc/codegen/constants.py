"""Baked constants in C (docs/language.md, "Constants and weights files"): each is a static,
64-byte aligned union of its little-endian bytes, written as one string literal, and its values.

A string literal is the spelling C compilers read fastest: 10 million floats as one take gcc 12
about 2 s to compile where an initializer list of as many words takes 29 s (clang: 0.8 s and
9 s). Printable bytes stand for themselves, the others are 3-digit octal escapes (about 12
characters a float). numpy formats a block of bytes at a time, so a model's weights render in
seconds."""

from __future__ import annotations

import numpy as np

from catenc.dtypes import DType

PER_LINE = 64  # bytes of a line
_BLOCK = PER_LINE << 14  # bytes formatted at once (bounds the memory of the tables)
_PLAIN = np.zeros(256, dtype=bool)
_PLAIN[0x20:0x7F] = True
_PLAIN[[ord('"'), ord("\\"), ord("?")]] = False  # ends, escapes and trigraphs (-std=c99 reads ??=)
_ESCAPES = np.array([[ord("\\"), *(ord(c) for c in f"{b:03o}")] for b in range(256)], dtype=np.uint8)
_BREAK = np.frombuffer(b'"\n"', dtype=np.uint8)


def constant_array(symbol: str, dtype: DType, values: np.ndarray, comment: str) -> str:
    """The definition of `symbol`, a union of `bytes` (values' bytes, little-endian) and
    `values` (the dtype's C type); `comment` says what it is."""
    count = max(values.size, 1)  # C has no empty arrays
    data = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)
    text = c_string(data) if values.size else '""'
    return (
        f"/* {comment} */\n"
        f"static const union {{ unsigned char bytes[{count * dtype.itemsize}]; {dtype.ctype} values[{count}]; }} "
        f"__attribute__((aligned(64))) {symbol} = {{\n{text}}};"
    )


def c_string(data: np.ndarray) -> str:
    """Bytes (uint8) as a C string literal of exactly that many characters, PER_LINE bytes a line."""
    chunks = []
    for start in range(0, data.size, _BLOCK):
        block = data[start : start + _BLOCK]
        plain = _PLAIN[block]
        cells = np.empty((block.size, 7), dtype=np.uint8)
        cells[:, :4] = _ESCAPES[block]
        cells[:, 0] = np.where(plain, block, ord("\\"))
        cells[:, 4:] = _BREAK
        keep = np.zeros((block.size, 7), dtype=bool)
        keep[:, 0] = True
        keep[:, 1:4] = ~plain[:, None]
        keep[PER_LINE - 1 :: PER_LINE, 4:] = True  # a line ends after every PER_LINE bytes
        if start + block.size == data.size:
            keep[-1, 4:] = False  # but the last
        chunks.append(cells[keep].tobytes())
    return '"' + b"".join(chunks).decode("ascii") + '"'
