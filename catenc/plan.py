"""What one compile decided: the options it ran under and, per entry, every stage's result.

The driver (catenc/driver.py) fills these; emit, build and --test read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from catenc.frontend import typed as T
from catenc.frontend.check import RuntimeCheck
from catenc.frontend.composites import Composite, CompositeFile, Library
from catenc.ir.nodes import Graph
from catenc.lower.gpu import GpuKernel
from catenc.lower.loops import LoopKernel
from catenc.runtime.descriptor import Runtime
from catenc.schedule.contractions import GEMM_DTYPES
from catenc.schedule.kernels import Schedule
from catenc.schedule.tiles import GemmTiles, default_tiles
from catenc.symbolic import Expr


@dataclass(frozen=True)
class Options:
    runtime: Runtime
    config: dict[str, str] = field(default_factory=dict)
    opt: str = "2"
    prefix: str = ""
    defines: dict[str, object] = field(default_factory=dict)
    include_dirs: tuple[str, ...] = ()
    composites: tuple[str, ...] = ()

    @property
    def vector_lanes(self) -> int:
        """f32 lanes per vector of the target (4 at -O0: plain code there)."""
        return self.runtime.vector_lanes(self.config) if self.opt != "0" else 4

    @property
    def gemm_tiles(self) -> dict[str, GemmTiles]:
        """Micro-kernel and cache tiles of the packed gemm, per dtype (empty: no packed gemm)."""
        if self.opt == "0" or not self.runtime.packed_gemm:
            return {}
        return {dtype: default_tiles(dtype, 4 * self.vector_lanes) for dtype in sorted(GEMM_DTYPES)}


@dataclass(frozen=True)
class EntryPlan:
    composite: Composite
    program: T.Program
    symbol: str
    dims: tuple[str, ...]  # free symbols, in argument order
    derived: dict[str, Expr]
    specialized: dict[str, int]
    checks: tuple[RuntimeCheck, ...]
    graph: Graph
    schedule: Schedule
    kernels: tuple[LoopKernel, ...]
    gpu: tuple[GpuKernel, ...] = ()  # the kernels as work-groups, for a GPU runtime
    convention: str = "host"  # "cuda": device pointers and a trailing stream argument

    @property
    def name(self) -> str:
        return self.composite.name

    @property
    def workspace_symbol(self) -> str:
        return f"{self.symbol}_workspace_bytes"


@dataclass(frozen=True)
class FilePlan:
    root: CompositeFile
    library: Library
    entries: tuple[EntryPlan, ...]

    @property
    def files_read(self) -> dict[str, str]:
        """display path -> path on disk"""
        return dict(self.library.files_read)
