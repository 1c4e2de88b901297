"""Every family of converters, imported so that each registers its operators (registry.py)."""

from catenc.onnx import elementwise, indexing, linalg, quantization, shape

FAMILIES = (elementwise, linalg, shape, indexing, quantization)
