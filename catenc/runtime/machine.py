"""What the machine and the toolchain are, as a tuning file keys its entries (docs/cli.md,
"Tuning"): the CPU's architecture, the vector and FMA features code generation uses, its cores;
the runtime, its compiler's version and the config keys that change the generated code."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping
from pathlib import Path

from catenc.runtime.descriptor import Runtime

# The /proc/cpuinfo flags (x86) and features (Arm) that change what the compiled kernels can use.
CODEGEN_FEATURES = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
)
# Config keys that change the generated code or how it is built.
TARGET_CONFIG = ("MARCH", "OMP", "VECTOR_WIDTH", "CFLAGS")


@functools.cache
def host_machine() -> dict[str, object]:
    """This machine: `arch`, the codegen `features` its CPU reports, and `cores`."""
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags.update(value.split())
    return {
        "arch": platform.machine(),
        "features": [f for f in CODEGEN_FEATURES if f in flags],
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
    }


def toolchain_target(runtime: Runtime, config: Mapping[str, str]) -> dict[str, object]:
    """The runtime by name, its compiler's version and the config keys that change the code."""
    key = (runtime.name, tuple(sorted(config.items())))
    if key not in _VERSIONS:  # asked once per entry: run the compiler once per process
        _VERSIONS[key] = runtime.toolchain_version(config)
    return {
        "runtime": runtime.name,
        "compiler": _VERSIONS[key],
        "config": {name: config[name] for name in TARGET_CONFIG if config.get(name)},
    }


_VERSIONS: dict[tuple, str] = {}
