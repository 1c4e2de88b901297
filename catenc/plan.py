"""What one compile decided: the options it ran under and, per entry, every stage's result.

The driver (catenc/driver.py) fills these; emit, build and --test read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from catenc.diagnostics import CatencError
from catenc.dtypes import DTYPES, DType
from catenc.frontend import typed as T
from catenc.frontend.composites import Composite, CompositeFile, Library
from catenc.frontend.constraints import RuntimeCheck
from catenc.ir.nodes import Graph
from catenc.lower.gpu import GpuKernel
from catenc.lower.loops import LoopKernel
from catenc.runtime.descriptor import Runtime
from catenc.schedule.kernels import Schedule, Tune
from catenc.schedule.tuning_file import Tuning
from catenc.symbolic import Expr


class WeightsMode(Enum):
    """Where a composite's constants live (--weights; docs/cli.md)."""

    BAKED = "baked"  # in the library, their panels packed at compile time
    EXTERNAL = "external"  # in the weights file: the entry reads its data section
    PACKED = "packed"  # in the weights file, which NAME_pack_weights packs once into the block the entry reads


@dataclass(frozen=True)
class Options:
    runtime: Runtime
    config: dict[str, str] = field(default_factory=dict)
    opt: str = "2"
    prefix: str = ""
    defines: dict[str, object] = field(default_factory=dict)
    include_dirs: tuple[str, ...] = ()
    composites: tuple[str, ...] = ()
    disabled_passes: tuple[str, ...] = ()  # --disable-pass: optional passes skipped
    dump_after: tuple[str, ...] = ()  # --dump-after: passes (or "all") whose result is written out
    verify_ir: bool = False  # --verify-ir: check the invariants after every pass
    time_passes: bool = False  # --time-passes: time every pass
    tune: Tune | None = None  # changes the schedule's decisions (never results): a tuner, a test
    tuning: Tuning | None = None  # --tuning: a tuning file's decisions, where its entries match
    weights: WeightsMode = WeightsMode.BAKED  # --weights


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
    # the values (storage form) of the program's last inputs, its constants
    constants: tuple[np.ndarray, ...] = field(default=(), compare=False)
    weights: WeightsMode = WeightsMode.EXTERNAL  # where the constants live (--weights)

    @property
    def name(self) -> str:
        return self.composite.name

    @property
    def arguments(self) -> tuple[tuple[str, T.TType], ...]:
        """The program's inputs that are arguments of the C entry: its declared inputs, not its
        constants (baked into the library, or read from the one `weights` argument)."""
        inputs = self.program.inputs
        return inputs[: len(inputs) - len(self.constants)]

    @property
    def constant_inputs(self) -> tuple[tuple[str, T.TType], ...]:
        """The program's inputs that are its constants, in the constants' order."""
        return self.program.inputs[len(self.arguments) :]

    @property
    def baked(self) -> bool:
        """Whether the constants are defined in the library (--weights baked)."""
        return self.weights is WeightsMode.BAKED

    @property
    def takes_weights(self) -> bool:
        """Whether the entry has a weights argument (--weights external or packed, and constants to read)."""
        return bool(self.constants) and not self.baked

    @property
    def packs_weights(self) -> bool:
        """Whether that argument is the block NAME_pack_weights fills (--weights packed)."""
        return self.takes_weights and self.weights is WeightsMode.PACKED

    @property
    def pack_symbol(self) -> str:
        return f"{self.symbol}_pack_weights"

    @property
    def packed_bytes_symbol(self) -> str:
        return f"{self.symbol}_packed_weights_bytes"

    @property
    def constant_symbols(self) -> tuple[str, ...]:
        """The C arrays of baked constants in the source, in the constants' order."""
        return tuple(f"{self.symbol}_const_{n}" for n in range(len(self.constants))) if self.baked else ()

    @property
    def workspace_symbol(self) -> str:
        return f"{self.symbol}_workspace_bytes"

    @property
    def threads_symbol(self) -> str | None:
        """The function that sets the thread count of the entry's calls (a CPU entry's; None on a GPU)."""
        return None if self.gpu else f"{self.symbol}_set_num_threads"


def external_weights(entries: tuple[EntryPlan, ...]) -> dict[str, tuple[DType, np.ndarray]]:
    """The tensors of the weights file (--weights external or packed): the entries' constants by name, in
    order. Two entries may share a name only with the same value."""
    tensors: dict[str, tuple[DType, np.ndarray]] = {}
    owners: dict[str, str] = {}
    for entry in entries:
        if not entry.takes_weights:
            continue
        for decl, values in zip(entry.composite.constants, entry.constants):
            tensor = (DTYPES[decl.dtype], values)
            if decl.name in tensors and not _same(tensors[decl.name], tensor):
                raise CatencError(
                    f"--weights {entry.weights.value}: constant '{decl.name}' of '{entry.name}' differs from the "
                    f"one of '{owners[decl.name]}', and the weights file holds one tensor per name; rename one of them",
                    decl.loc,
                )
            tensors[decl.name], owners[decl.name] = tensor, entry.name
    return tensors


def _same(a: tuple[DType, np.ndarray], b: tuple[DType, np.ndarray]) -> bool:
    return a[0] is b[0] and a[1].shape == b[1].shape and a[1].tobytes() == b[1].tobytes()


@dataclass(frozen=True)
class FilePlan:
    root: CompositeFile
    library: Library
    entries: tuple[EntryPlan, ...]
    dumps: tuple[tuple[str, str], ...] = ()  # (pass, its results for every entry), in pipeline order
    pass_times: str = ""  # the --time-passes table

    @property
    def files_read(self) -> dict[str, str]:
        """display path -> path on disk"""
        return dict(self.library.files_read)
