"""Every family of converters, imported so that each registers its operators (registry.py)."""

from catenc.onnx import elementwise, indexing, linalg, shape

FAMILIES = (elementwise, linalg, shape, indexing)
