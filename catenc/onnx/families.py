"""Every family of converters, imported so that each registers its operators (registry.py)."""

from catenc.onnx import (
    einsum,
    elementwise,
    indexing,
    linalg,
    losses,
    nn,
    normalization,
    quantization,
    recurrent,
    reduce,
    sequence,
    shape,
)

FAMILIES = (
    elementwise,
    linalg,
    shape,
    indexing,
    nn,
    normalization,
    reduce,
    quantization,
    einsum,
    losses,
    sequence,
    recurrent,
)
