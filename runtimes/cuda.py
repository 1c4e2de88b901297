"""CUDA: kernels through the GPU lowering as CUDA C++, built by nvcc (--config ARCH=sm_90 by
default: SASS for it and PTX beside) into a shared library whose `extern "C"` entries take
device pointers and a trailing cudaStream_t. `--test` and test-runtime run it where a GPU is."""

from catenc.runtime.gpu_runtime import CudaRuntime

RUNTIME = CudaRuntime(name="cuda")
