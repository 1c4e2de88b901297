"""Checking compiled code: the numpy reference, `--test`, and the op-coverage report."""
