"""The ONNX frontend: an .onnx model becomes a composite file in the body language (docs/onnx.md).

model.py reads and checks the protobuf, importer.py walks the graph, and one module per family
of operators (elementwise.py, linalg.py, shape.py, ...) converts each node through registry.py.
"""
