"""The two ways a node fails to convert, apart from the registry so the builder and the Emitter
need not import it (the registry types its converters with the Emitter)."""


class Unsupported(Exception):
    """A node catenc cannot convert; the message says what (an attribute, a dtype, a form)."""


class ModelError(Exception):
    """A node that is wrong as ONNX (shapes that do not agree, a missing input): the model's error."""
