"""A runtime of your own: C built by gcc for AVX2 (8 f32 lanes), whatever machine builds it.

It differs from the bundled clang runtime only in its toolchain and target, so it is a
CRuntime with other settings: gcc, `-mavx2 -mfma` instead of `-march=native`, and a vector
width of 8 lanes (gemm micro-tiles 6x16, reductions 16 lanes deep). docs/runtimes.md walks
through it. Use it with `catenc compile model.toml --runtime runtimes/examples/gcc_avx2.py`.
"""

from catenc.runtime import CRuntime, c_config_keys

RUNTIME = CRuntime(
    name="gcc_avx2",
    compilers=("gcc",),
    extra_flags=("-mavx2", "-mfma"),
    config_keys=c_config_keys(omp="1", march="", lanes="8"),
)
