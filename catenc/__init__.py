"""catenc: an ahead-of-time deep-learning kernel compiler that emits plain C."""

__version__ = "0.1.0"
