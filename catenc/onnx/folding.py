"""Where a value that depends only on initializers, constants and sizes is computed: once, at
import (a constant of the composite, like an initializer), or by the library on each call. The
one rule for it (docs/onnx.md, "Constants computed at import") is `place`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import numpy as np

# Elements: no value larger is computed at import (a hard cap on the memory import takes).
FOLD_CAP = 1 << 27
# Elements: a value the library computes cheaply from less data (a range, an int8 weight
# dequantised) is stored only up to this size.
SMALL = 1 << 20
# Operators whose result the library computes more cheaply than it stores it, and why.
CHEAP_AS_CODE = {
    "Range": "start + i * delta is cheaper to compute than to store",
    "DequantizeLinear": "the int8 weight is stored, 4x smaller, and dequantised where it is read",
}
# Operators onnx's reference evaluator gets wrong, and so are never evaluated with it at import.
NOT_EVALUATED = {"LRN": "onnx's reference LRN sums the wrong window"}


class Placement(Enum):
    IMPORT = "computed at import"
    CODE = "computed by the library on each call"


@dataclass(frozen=True)
class Decision:
    placement: Placement
    reason: str

    @property
    def at_import(self) -> bool:
        return self.placement is Placement.IMPORT

    def note(self, what: str) -> str:
        return f"{what}: {self.placement.value} ({self.reason})"


def computable(shape: Iterable[int]) -> bool:
    """Whether a value of this static shape may be computed at import (elements counted in Python
    ints: np.prod wraps past 2**63, and a wrapped count looked small)."""
    return math.prod(int(d) for d in shape) <= FOLD_CAP


def repeats(array: np.ndarray) -> bool:
    """Whether a known array is a broadcast (a ConstantOfShape fill, an Expand of a known tensor):
    a view that repeats less data along some axis."""
    return any(s == 0 and n > 1 for s, n in zip(array.strides, array.shape, strict=True))


def compact(array: np.ndarray) -> np.ndarray:
    """The data a broadcast array repeats: size 1 on each axis it repeats along."""
    keep = tuple(slice(0, 1) if s == 0 and n > 1 else slice(None) for s, n in zip(array.strides, array.shape))
    return array[keep]


def place(op: str, count: int | None, dtypes: Iterable[str], broadcast: bool, elementwise: bool) -> Decision:
    """The rule: `count` elements (None when a size is a symbol) computed by `op` from known inputs
    are computed at import unless they are too many, the library computes them more cheaply than
    it stores them, or they are a broadcast that `op` reads elementwise."""
    if count is None:
        return Decision(Placement.CODE, "its size is a symbol")
    if count > FOLD_CAP:
        return Decision(Placement.CODE, f"{count} elements, more than the {FOLD_CAP} catenc computes at import")
    if broadcast and elementwise:
        return Decision(Placement.CODE, f"a broadcast read elementwise by {op}: repeated where it is read")
    if op in CHEAP_AS_CODE and count > SMALL:
        return Decision(Placement.CODE, CHEAP_AS_CODE[op])
    if op in NOT_EVALUATED:
        return Decision(Placement.CODE, NOT_EVALUATED[op])
    if "bf16" in dtypes:
        return Decision(Placement.CODE, "bf16 arithmetic is the library's (numpy has no bf16)")
    return Decision(Placement.IMPORT, f"{count} elements, from constants only")
