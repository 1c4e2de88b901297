"""Every family of converters, imported so that each registers its operators (registry.py)."""

from catenc.onnx import elementwise, linalg, shape

FAMILIES = (elementwise, linalg, shape)
