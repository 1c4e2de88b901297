"""OpenCL: kernels through the GPU lowering as OpenCL C (`model.cl`), the host plan in the
manifest; catenc.loader builds and runs them with pyopencl (`pip install 'catenc[opencl]'`), on
any OpenCL device: PoCL runs them on this machine's CPU."""

from catenc.runtime.gpu_runtime import OpenCLRuntime

RUNTIME = OpenCLRuntime(name="opencl")
