"""The C compilers and x86-64 targets the suite builds for, queried from this machine.

Every C compiler catenc supports is a test parameter: `make setup` installs clang and gcc is a
precondition, so a missing one fails its tests (with a message that says so) rather than skipping
them. Both vector widths are compiled for on any machine (x86-64-v3: AVX2, 8 f32 lanes; x86-64-v4:
AVX-512, 16 lanes); code is run only for the targets whose features /proc/cpuinfo lists.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from catenc.runtime.descriptor import CRuntime, load_runtime

COMPILERS = ("clang", "gcc")
# -march level -> the CPU features (as /proc/cpuinfo names them) it requires beyond the one below
MARCH_FEATURES = {
    "x86-64-v3": {"avx", "avx2", "fma", "bmi1", "bmi2", "abm", "movbe", "f16c"},
    "x86-64-v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}
MARCHES = tuple(MARCH_FEATURES)
MARCH_LANES = {"x86-64-v3": 8, "x86-64-v4": 16}
# AddressSanitizer and UBSan, stopping at the first report: the flags of every C program the
# suite builds sanitized (with the compiler's own runtime; see test_sanitized_ops for catenc builds).
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1")


def require(compiler: str) -> str:
    """The compiler's path; fails the test when it is not installed."""
    path = shutil.which(compiler)
    assert path, f"{compiler} is not installed (make setup installs clang; gcc is a precondition)"
    return path


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The feature flags of this machine's first CPU."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_runs(march: str) -> bool:
    """Whether this machine runs code built with -march=<march> (each level includes the one below)."""
    needed: set[str] = set()
    for level, features in MARCH_FEATURES.items():
        needed |= features
        if level == march:
            return needed <= cpu_flags()
    raise ValueError(march)


def runnable_marches() -> tuple[str, ...]:
    return tuple(m for m in MARCHES if cpu_runs(m))


def c_runtime() -> CRuntime:
    runtime = load_runtime("clang")
    assert isinstance(runtime, CRuntime)
    return runtime


def runtime_flags(compiler: str, march: str, opt: str = "2") -> list[str]:
    """The flags catenc's default C runtime builds with for this compiler, target and level (no OpenMP)."""
    runtime = c_runtime()
    config = runtime.validate_config({"CC": compiler, "MARCH": march, "OMP": "0"})
    return runtime.flags(config, opt)
