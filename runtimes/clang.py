"""The default runtime: C99 built by clang, else gcc, else cc (`--config CC=...` or `$CC` chooses
one), OpenMP with --config OMP=1."""

from catenc.runtime import CRuntime

RUNTIME = CRuntime(name="clang", compilers=("clang", "gcc", "cc"))
