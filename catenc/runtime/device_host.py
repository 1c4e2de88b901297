"""Running GPU-runtime builds from Python: the C entry's calling convention over host memory.

`catenc.loader` calls an entry with host pointers, as it calls a C library. For a GPU build
the callables here stand in for the library's symbols: each copies the inputs to the device,
runs the entry there and copies the outputs back, returning the entry's status code.

- OpenCL (`language: opencl`): the manifest's `host` plan (checks, launches with their
  geometry and arguments, status counters) is the host program; pyopencl runs it.
- CUDA (`language: cuda`): the library's own host entry runs, on device buffers and the
  default stream (needs a GPU and libcudart).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import os
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from catenc.dtypes import DTYPES
from catenc.runtime.manifest import (
    SIZE_MAX,
    WORKSPACE_ALIGNMENT,
    ManifestError,
    Scope,
    ShapeExpr,
    UnsupportedRuntimeError,
)

WEIGHTS = "#weights"  # the `weights` argument's key among the tensors (no tensor's name has a #)


class DeviceEntry:
    """An entry's C-ABI function over host pointers, run on a device (a subclass says how)."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.argtypes: list[Any] = []  # set by catenc.loader.Entry, unused here
        self.restype: Any = None
        self.roles = [(arg["role"], arg) for arg in spec["args"]]
        self.derived = {name: ShapeExpr(expr) for name, expr in (spec.get("derived") or {}).items()}
        self.shapes = {
            arg["name"]: [ShapeExpr(d) for d in arg["shape"]]
            for arg in spec["args"]
            if arg["role"] in ("input", "output")
        }
        self.sizes = [ShapeExpr(size) for size in (spec.get("host") or {}).get("sizes", ())]

    def overflows(self, scope: Mapping[str, int]) -> bool:
        """Whether a size the kernels compute from the dims is outside int64_t (where the C
        entry returns CATENC_E_SHAPE and its workspace function SIZE_MAX)."""
        return any(not -(2**63) <= size(scope) < 2**63 for size in self.sizes)

    def scope(self, args: Sequence[Any]) -> Scope:
        values = dict(self.spec.get("specialized") or {})
        for (role, arg), value in zip(self.roles, args):
            if role == "dim":
                values[arg["name"]] = int(value)
        return Scope(values, self.derived)

    def nbytes(self, arg: Mapping[str, Any], scope: Mapping[str, int]) -> int:
        count = 1
        for dim in self.shapes[arg["name"]]:
            count *= dim(scope)
        return count * np.dtype(DTYPES[arg["dtype"]].numpy).itemsize

    def __call__(self, *args: Any) -> int:
        scope = self.scope(args)
        if any(scope[arg["name"]] < 0 for role, arg in self.roles if role == "dim"):
            return 1
        tensors: dict[str, tuple[int | None, int, bool]] = {}  # name -> host address, bytes, is output
        values: dict[str, Any] = {}
        workspace, workspace_bytes = None, 0
        for (role, arg), value in zip(self.roles, args):
            if role in ("input", "output"):
                if role == "input" and not arg["shape"]:
                    values[arg["name"]] = value
                else:
                    tensors[arg["name"]] = (value, self.nbytes(arg, scope), role == "output")
            elif role == "weights":
                self.bind_weights(arg, value, tensors, values)
            elif role == "workspace":
                workspace = value
            elif role == "workspace_bytes":
                workspace_bytes = int(value)
        return self.run(scope, tensors, values, workspace, workspace_bytes)

    def bind_weights(self, arg: Mapping[str, Any], address: int, tensors: dict, values: dict) -> None:
        """The constants of the `weights` argument (host data at address): each a tensor to copy,
        or a scalar value."""
        for tensor in arg["tensors"]:
            dtype = DTYPES[tensor["dtype"]]
            at = address + tensor["offset"]
            if tensor["shape"]:
                tensors[tensor["name"]] = (at, math.prod(tensor["shape"]) * dtype.itemsize, False)
            else:  # as a scalar input is passed: f16 and bf16 as their bits
                storage = np.uint16 if dtype.is_half else dtype.numpy
                values[tensor["name"]] = _host_view(at, dtype.itemsize).view(storage)[0]

    def run(self, scope, tensors, values, workspace, workspace_bytes) -> int:
        raise NotImplementedError


def _host_view(address: int | None, nbytes: int) -> np.ndarray:
    if not nbytes:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


# ---- OpenCL ------------------------------------------------------------------------------------


_OPENCL_PROBE = threading.Lock()  # one probe at a time: threads importing pyopencl at once race


def _opencl_context():
    """pyopencl, this process's context and queue, and the lock calls take (a child forked
    after its parent made one makes its own)."""
    with _OPENCL_PROBE:
        return _opencl_context_of(os.getpid())


@functools.cache
def _opencl_context_of(pid: int):
    try:
        import pyopencl as cl
    except ImportError:
        raise UnsupportedRuntimeError(
            "running an OpenCL build needs pyopencl: pip install 'catenc[opencl]' (and an OpenCL "
            "driver, e.g. apt-get install pocl-opencl-icd)"
        ) from None
    try:
        context = cl.create_some_context(interactive=False)
    except cl.Error as error:
        raise UnsupportedRuntimeError(f"no OpenCL device: {error}") from None
    return cl, context, cl.CommandQueue(context), threading.Lock()


def opencl_available() -> bool:
    try:
        _opencl_context()
    except UnsupportedRuntimeError:
        return False
    return True


@functools.cache
def opencl_version() -> str:
    """The OpenCL platform's version and the device's name, for the manifest."""
    try:
        _, context, _, _ = _opencl_context()
    except UnsupportedRuntimeError:
        return "no OpenCL device"
    device = context.devices[0]
    return f"{device.platform.version}, {device.name}"


def build_options(config: Mapping[str, Any]) -> list[str]:
    """The OpenCL build options of a config (`--config CLFLAGS=...`, kept in the manifest)."""
    return str(config.get("CLFLAGS", "")).split()


def build_opencl(source: str, where: str, options: Sequence[str] = ()):
    """The OpenCL program of a source, built for this machine's device with these build options."""
    cl, context, _, lock = _opencl_context()
    with lock:
        try:
            return cl.Program(context, source).build(options=list(options))
        except cl.Error as error:
            raise ManifestError(f"{where}: the OpenCL driver cannot build the kernels: {error}") from None


def _scalar(dtype, value) -> np.generic:
    """A scalar input as the kernel parameter's C type (f16 and bf16 as their bits)."""
    if dtype.is_half:
        return np.uint16(value)
    if dtype.name == "bool":
        return np.uint8(value)
    return np.dtype(dtype.numpy).type(value)


def program_kernel(program, name: str):
    cl, _, _, _ = _opencl_context()
    return cl.Kernel(program, name)


class OpenCLEntry(DeviceEntry):
    """The manifest's host plan, run by pyopencl."""

    def __init__(self, spec: Mapping[str, Any], program) -> None:
        super().__init__(spec)
        host = spec["host"]
        self.kernels = {k["name"]: program_kernel(program, k["name"]) for k in spec["kernels"]}
        self.checks = [ShapeExpr(text, comparisons=True) for text in host["checks"]]
        self.workspace_expr = ShapeExpr(spec["workspace_bytes"])
        self.launches = [
            (k["name"], ShapeExpr(k["launch"]["groups"]), int(k["launch"]["block"]), k["launch"]["args"])
            for k in spec["kernels"]
        ]
        self.statuses = [ShapeExpr(offset) for offset in host["statuses"]]

    def run(self, scope, tensors, values, workspace, workspace_bytes) -> int:
        cl, context, queue, lock = _opencl_context()
        if self.overflows(scope) or not all(check(scope) for check in self.checks):
            return 1
        need = self.workspace_expr(scope)
        if need > 0 and (workspace is None or workspace_bytes < need or workspace % WORKSPACE_ALIGNMENT):
            return 2
        flags = cl.mem_flags
        with lock:
            device = {name: cl.Buffer(context, flags.READ_WRITE, max(n, 1)) for name, (_, n, _) in tensors.items()}
            for name, (address, n, output) in tensors.items():
                if n and not output:
                    cl.enqueue_copy(queue, device[name], _host_view(address, n))
            space = cl.Buffer(context, flags.READ_WRITE, max(need, 1))
            for kernel_name, groups, block, args in self.launches:
                count = groups(scope)
                if count <= 0:
                    continue
                kernel = self.kernels[kernel_name]
                actuals = []
                for arg in args:
                    if arg["kind"] == "buffer":
                        actuals.append(device[arg["name"]])
                    elif arg["kind"] == "workspace":
                        actuals.append(space)
                    elif arg["kind"] == "scalar":
                        actuals.append(_scalar(DTYPES[arg["dtype"]], values[arg["name"]]))
                    else:
                        actuals.append(np.int64(scope[arg["name"]]))
                kernel(queue, (count * block,), (block,), *actuals)
            for offset in self.statuses:
                count = np.zeros(1, np.int64)
                cl.enqueue_copy(queue, count, space, src_offset=offset(scope))
                if count[0]:
                    return 3
            for name, (address, n, output) in tensors.items():
                if n and output:
                    cl.enqueue_copy(queue, _host_view(address, n), device[name])
            queue.finish()
        return 0


# ---- CUDA --------------------------------------------------------------------------------------


def _cudart_candidates() -> list[str]:
    """Where libcudart may be: the loader's search path, then beside the nvcc on PATH (a toolkit
    whose lib64 is not in ld.so.conf)."""
    found = [ctypes.util.find_library("cudart") or "libcudart.so"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        toolkit = Path(nvcc).resolve().parent.parent
        for folder in (toolkit / "lib64", toolkit / "targets" / "x86_64-linux" / "lib"):
            found += sorted(str(p) for p in folder.glob("libcudart.so*"))
    return found


@functools.cache
def _cudart():
    lib = None
    for name in _cudart_candidates():
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise UnsupportedRuntimeError("running a CUDA build needs libcudart (the CUDA toolkit) and a GPU")
    count = ctypes.c_int(0)
    if lib.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise UnsupportedRuntimeError("running a CUDA build needs a GPU; this machine has none")
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    return lib


def cuda_available() -> bool:
    try:
        _cudart()
    except UnsupportedRuntimeError:
        return False
    return True


class CudaEntry(DeviceEntry):
    """The library's own host entry, given device copies of the buffers and the default stream."""

    HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2

    def __init__(self, spec: Mapping[str, Any], function) -> None:
        super().__init__(spec)
        self.function = function
        self.function.restype = ctypes.c_int

    def bind_weights(self, arg: Mapping[str, Any], address: int, tensors: dict, values: dict) -> None:
        """The whole weights data, one device copy (the entry binds its constants in it)."""
        tensors[WEIGHTS] = (address, int(arg["bytes"]), False)

    def run(self, scope, tensors, values, workspace, workspace_bytes) -> int:
        cuda = _cudart()
        allocated: list[ctypes.c_void_p] = []

        def alloc(n: int) -> ctypes.c_void_p:
            pointer = ctypes.c_void_p()
            if cuda.cudaMalloc(ctypes.byref(pointer), max(n, 1)) != 0:
                raise MemoryError("cudaMalloc failed")
            allocated.append(pointer)
            return pointer

        try:
            device = {name: alloc(n) for name, (_, n, _) in tensors.items()}
            for name, (address, n, output) in tensors.items():
                if n and not output:
                    cuda.cudaMemcpy(device[name], address, n, self.HOST_TO_DEVICE)
            space = alloc(workspace_bytes) if workspace is not None else None
            args: list[Any] = []
            for role, arg in self.roles:
                if role in ("input", "output"):
                    args.append(values[arg["name"]] if arg["name"] in values else device[arg["name"]])
                elif role == "weights":
                    args.append(device[WEIGHTS])
                elif role == "dim":
                    args.append(ctypes.c_int64(scope[arg["name"]]))
                elif role == "workspace":
                    args.append(space)
                elif role == "workspace_bytes":
                    args.append(ctypes.c_size_t(workspace_bytes))
                else:  # the stream: the default one
                    args.append(None)
            self.function.argtypes = self.argtypes
            status = int(self.function(*args))
            cuda.cudaDeviceSynchronize()
            for name, (address, n, output) in tensors.items():
                if n and output and status == 0:
                    cuda.cudaMemcpy(address, device[name], n, self.DEVICE_TO_HOST)
            return status
        finally:
            for pointer in allocated:
                cuda.cudaFree(pointer)


class DeviceSymbols:
    """Stands in for a ctypes library: symbol name -> a callable with the C convention."""

    def __init__(self, functions: Mapping[str, Any]) -> None:
        self.functions = dict(functions)

    def __getitem__(self, name: str) -> Any:
        if name not in self.functions:
            raise AttributeError(name)
        return self.functions[name]


class _WorkspaceSize:
    """`NAME_workspace_bytes(dims...)` evaluated from the manifest."""

    def __init__(self, entry: DeviceEntry) -> None:
        self.entry, self.argtypes, self.restype = entry, None, None
        self.dims = [arg["name"] for role, arg in entry.roles if role == "dim"]
        self.expr = ShapeExpr(entry.spec["workspace_bytes"])

    def __call__(self, *dims: int) -> int:
        values = dict(self.entry.spec.get("specialized") or {})
        values.update(zip(self.dims, (int(d) for d in dims)))
        scope = Scope(values, self.entry.derived)
        if self.entry.overflows(scope):
            return SIZE_MAX
        return self.expr(scope)


def _opencl_entries(manifest: Mapping[str, Any], directory: Path, where: str) -> list[DeviceEntry]:
    sources = [f for f in manifest["files"] if f.get("role") == "source"]
    config = (manifest.get("runtime") or {}).get("config") or {}  # the options the kernels were checked with
    program = build_opencl((directory / sources[0]["path"]).read_text(), where, build_options(config))
    return [OpenCLEntry(spec, program) for spec in manifest["entries"]]


def _cuda_entries(manifest: Mapping[str, Any], directory: Path, where: str) -> list[DeviceEntry]:
    libraries = [f for f in manifest["files"] if f.get("role") == "shared_library"]
    _cudart()
    library = ctypes.CDLL(str(directory / libraries[0]["path"]))
    return [CudaEntry(spec, library[spec["symbol"]]) for spec in manifest["entries"]]


# The languages (the manifest's runtime.language) this module runs, and how it makes their entries.
DEVICE_HOSTS: dict[str, Callable[[Mapping[str, Any], Path, str], list[DeviceEntry]]] = {
    "opencl": _opencl_entries,
    "cuda": _cuda_entries,
}


def device_symbols(manifest: Mapping[str, Any], directory: Path, language: str, where: str) -> DeviceSymbols:
    """The symbols of a GPU build, callable from this process."""
    host = DEVICE_HOSTS.get(language)
    if host is None:
        raise UnsupportedRuntimeError(f"{where}: catenc.loader cannot run builds of language {language!r}")
    functions: dict[str, Any] = {}
    for entry in host(manifest, directory, where):
        functions[entry.spec["symbol"]] = entry
        if entry.spec.get("workspace_symbol"):
            functions[entry.spec["workspace_symbol"]] = _WorkspaceSize(entry)
    return DeviceSymbols(functions)
