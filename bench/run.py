#!/usr/bin/env python3
"""catenc's benchmark suite (`make bench`): catenc against numpy and PyTorch on this machine.

    .venv/bin/python bench/run.py [--only NAME[,NAME]] [--runs N] [--quick] [--budget S] [--output FILE]
                                  [--tuned-env]

Builds every workload of bench/composites/ with catenc (default level and -O3), measures the
machine's memory bandwidth (STREAM triad) and fp32 FMA peak, then times catenc, numpy and
PyTorch (1 and 2 threads) round-robin on the same inputs, checks every result against a
float64 reference and writes the table to bench/results.md. The suite itself is in
bench/suite.py; this launcher only fixes the environment before numpy is imported.

By default it measures in the environment a user's process has: catenc's libraries need no
variable (an entry call's threads sleep about a millisecond after it returns, docs/abi.md
"Threads"), and numpy, PyTorch and onnxruntime run with their own defaults, spinning pools
included. Only OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed (set on some machines for old
OpenBLAS builds, they slow a current one down). `--tuned-env` also tells the contenders' idle
pools to stop spinning after about a millisecond (KMP_BLOCKTIME=1, OPENBLAS_THREAD_TIMEOUT=22:
2**22 cycles for numpy's OpenBLAS), unless already set: the setting under which each library is
at its best in a round-robin, for comparison with the default one.

When the environment needs changing the script re-executes itself with the fixed one.
"""

from __future__ import annotations

import os
import sys

# Runtime options of every catenc build (`catenc compile --config`); empty: the clang
# runtime's defaults (OpenMP on, MARCH=native), what a user gets.
CATENC_CONFIG = ""

REMOVE = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
TUNED = {"KMP_BLOCKTIME": "1", "OPENBLAS_THREAD_TIMEOUT": "22"}  # --tuned-env
TUNED_FLAG = "--tuned-env"
MARKER = "CATENC_BENCH_ENV_FIXED"


def fixed_environment(tuned: bool) -> dict[str, str] | None:
    """The environment to re-execute with, or None when this one is fine."""
    env = dict(os.environ)
    changed = False
    for name in REMOVE:
        if name in env:
            del env[name]
            changed = True
    for name, value in TUNED.items() if tuned else ():
        if name not in env:
            env[name] = value
            changed = True
    return env if changed else None


def main() -> int:
    env = fixed_environment(TUNED_FLAG in sys.argv[1:])
    if env is not None:
        if os.environ.get(MARKER):
            print("bench: could not fix the environment by re-executing", file=sys.stderr)
            return 1
        env[MARKER] = "1"
        removed = [name for name in REMOVE if name in os.environ]
        if removed:
            print(f"bench: re-executing without {', '.join(removed)}", file=sys.stderr)
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from suite import run  # numpy is imported from here on

    return run([a for a in sys.argv[1:] if a != TUNED_FLAG], catenc_config=CATENC_CONFIG)


if __name__ == "__main__":
    sys.exit(main())
