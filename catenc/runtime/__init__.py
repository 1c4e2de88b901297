"""Runtimes: descriptors (the documented API of `runtimes/*.py`, docs/runtimes.md), the device host
that runs GPU manifests, and the manifest reader the loader shares with it."""

from catenc.runtime.descriptor import ConfigKey, CRuntime, Runtime, c_config_keys, load_runtime

__all__ = ["CRuntime", "ConfigKey", "Runtime", "c_config_keys", "load_runtime"]
