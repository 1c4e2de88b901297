"""GPU runtime descriptors: kernels through the GPU lowering, rendered as CUDA or OpenCL C.

`runtimes/cuda.py` and `runtimes/opencl.py` are instances of these classes; a GPU runtime of
your own (another CUDA architecture list, other nvcc flags) is a short file like them.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from catenc.codegen.gpu import CudaRenderer, OpenCLRenderer
from catenc.diagnostics import CatencError
from catenc.lower.gpu import GemmTile, TensorTiles
from catenc.runtime.descriptor import ConfigKey, Runtime
from catenc.runtime.manifest import ManifestError

_BLOCKS = ("64", "128", "256", "512", "1024")


def gpu_config_keys(block: str = "256") -> dict[str, ConfigKey]:
    """The config keys every GPU runtime has."""
    return {"BLOCK": ConfigKey(block, _BLOCKS, "work-items per group for elementwise and row kernels")}


@dataclass(frozen=True)
class GpuRuntime(Runtime):
    """A runtime whose kernels go through the GPU lowering (work-groups, local-memory tiles)."""

    target: str = "gpu"
    packed_gemm: bool = False
    config_keys: Mapping[str, ConfigKey] = field(default_factory=gpu_config_keys)
    tile: GemmTile = GemmTile()

    def block_size(self, config: Mapping[str, str]) -> int:
        return int(config.get("BLOCK", "256"))

    def gemm_tile(self, config: Mapping[str, str]) -> GemmTile:
        return self.tile

    def mma_tiles(self, config: Mapping[str, str]) -> TensorTiles | None:
        """The tiles of contractions on tensor cores (None: the target has none)."""
        return None


def _arch(value: str) -> bool:
    return re.fullmatch(r"sm_\d{2,3}[af]?", value) is not None


def cuda_config_keys() -> dict[str, ConfigKey]:
    return {
        **gpu_config_keys(),
        "ARCH": ConfigKey("sm_90", None, "GPU architecture, sm_XX (SASS for it and PTX beside)", _arch),
        "NVCCFLAGS": ConfigKey("", None, "extra nvcc flags, space separated", _flags),
    }


def opencl_config_keys() -> dict[str, ConfigKey]:
    return {
        **gpu_config_keys("64"),
        "CLFLAGS": ConfigKey(
            "",
            None,
            "OpenCL C build options the driver gets when it builds the kernels, space separated "
            "(-cl-opt-disable builds fastest)",
            _flags,
        ),
    }


def _flags(value: str) -> bool:
    return all(part.startswith("-") for part in value.split())


@dataclass(frozen=True)
class CudaRuntime(GpuRuntime):
    """CUDA C++ built by nvcc into a shared library of `extern "C"` host entries that take
    device pointers and a trailing cudaStream_t. It runs where there is a GPU."""

    language: str = "cuda"
    source_suffix: str = ".cu"
    renderer: type = CudaRenderer
    calling_convention: str = "cuda"
    config_keys: Mapping[str, ConfigKey] = field(default_factory=cuda_config_keys)
    nvcc: str = "nvcc"
    tile: GemmTile = GemmTile(rows=128, cols=128, depth=8, threads=256)
    # Tensor-core tiles by the least compute capability each is for (mma.sync needs sm_80), as
    # measured on an H200 (bench/gpu_results.md): a 64 x 64 part of the tile per warp with its
    # fragments double-buffered is the fastest (about 1.4x the 64 x 32 parts of twice the warps);
    # it fits Hopper's 255 registers for a single product whose A is depth-major, while sm_80's
    # ptxas, a batch or a transposed A would spill it.
    tensor_tiles: tuple[tuple[int, TensorTiles], ...] = (
        (90, TensorTiles(plain=GemmTile(128, 128, 32, 128, 3), other=GemmTile(128, 128, 32, 256, 3))),
        (80, TensorTiles(plain=GemmTile(128, 128, 32, 256, 3), other=GemmTile(128, 128, 32, 256, 3))),
    )

    def mma_tiles(self, config: Mapping[str, str]) -> TensorTiles | None:
        capability = int(re.sub(r"\D", "", config.get("ARCH", self.config_keys["ARCH"].default)))
        return next((tiles for least, tiles in self.tensor_tiles if capability >= least), None)

    def compiler(self) -> str:
        found = shutil.which(self.nvcc)
        if not found:
            raise CatencError(
                f"runtime '{self.name}': nvcc not found; install the CUDA toolkit and put nvcc on PATH "
                "(or emit the source only, with -S)"
            )
        return self.nvcc

    def runnable(self, config: Mapping[str, str]) -> bool:
        from catenc.runtime.device_host import cuda_available

        return cuda_available()

    def toolchain_version(self, config: Mapping[str, str]) -> str:
        try:
            out = subprocess.run([self.compiler(), "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError, CatencError):
            return "unknown"
        lines = [line for line in out.splitlines() if "release" in line]
        return lines[0].strip() if lines else "unknown"

    def flags(self, config: Mapping[str, str], opt: str) -> list[str]:
        arch = config["ARCH"]
        virtual = "compute_" + arch[len("sm_") :]
        flags = ["-std=c++17", f"-O{'3' if opt == 'fast' else opt}", f"-gencode=arch={virtual},code=[{arch},{virtual}]"]
        if opt == "fast":
            flags.append("--use_fast_math")
        return flags + config.get("NVCCFLAGS", "").split()

    def build_commands(
        self, source: str, output: str, config: Mapping[str, str], opt: str, kind: str
    ) -> list[list[str]]:
        nvcc, flags = self.compiler(), self.flags(config, opt)
        if kind == "so":
            return [[nvcc, *flags, "-Xcompiler", "-fPIC", "-shared", "-o", output, source]]
        obj = output if kind == "o" else output[: -len(".a")] + ".o"
        commands = [[nvcc, *flags, "-Xcompiler", "-fPIC", "-c", "-o", obj, source]]
        if kind == "a":
            commands.append(["ar", "rcs", output, obj])
        return commands


@dataclass(frozen=True)
class OpenCLRuntime(GpuRuntime):
    """OpenCL C kernels (`model.cl`) with the host plan in the manifest: `catenc.loader`
    builds the kernels with the machine's OpenCL driver when it loads them and runs the
    plan through pyopencl (`pip install 'catenc[opencl]'`; PoCL runs it on a CPU)."""

    language: str = "opencl"
    source_suffix: str = ".cl"
    renderer: type = OpenCLRenderer
    header: bool = False  # no C entry: the host plan lives in the manifest
    binary_kinds: tuple[str, ...] = ()  # the driver compiles the source when it is loaded
    config_keys: Mapping[str, ConfigKey] = field(default_factory=opencl_config_keys)

    def runnable(self, config: Mapping[str, str]) -> bool:
        from catenc.runtime.device_host import opencl_available

        return opencl_available()

    def toolchain_version(self, config: Mapping[str, str]) -> str:
        from catenc.runtime.device_host import opencl_version

        return opencl_version()

    def verify_source(self, path: Path, config: Mapping[str, str]) -> str | None:
        """The driver's build log when this machine's OpenCL device rejects the kernels."""
        from catenc.runtime.device_host import build_opencl, build_options

        if not self.runnable(config):
            return None
        try:
            build_opencl(path.read_text(), path.name, build_options(config))
        except ManifestError as error:
            return str(error)
        return None

    def unavailable(self, config: Mapping[str, str]) -> tuple[str, str] | None:
        if self.runnable(config):
            return None
        driver = (
            "an OpenCL driver (Debian/Ubuntu: apt-get install pocl-opencl-icd, which runs the kernels on the "
            "CPU, or your GPU vendor's OpenCL driver)"
        )
        try:
            importlib.import_module("pyopencl")
        except ImportError:
            return "pyopencl missing", f"pip install 'catenc[opencl]' and {driver}"
        return "no OpenCL device", f"install {driver}"

    def build_commands(
        self, source: str, output: str, config: Mapping[str, str], opt: str, kind: str
    ) -> list[list[str]]:
        raise CatencError(
            f"runtime '{self.name}' builds no {kind} file: the OpenCL driver compiles {source} when "
            "catenc.loader loads it (emit c,manifest)"
        )
