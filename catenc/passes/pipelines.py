"""The pipeline of each optimisation level (docs/cli.md, "Optimisation levels and passes").

-O0 builds the IR and runs one kernel per compute on one thread, with plain reductions and libm.
-O1 adds fusion: inlining, row fusion, views of constant slices, shared kernel functions.
-O2 adds the target's speed: packed gemms with cache tiles, threads, vector-lane reductions,
    jammed rows, vector math.
-O3 fuses and unrolls more: expensive values are recomputed at up to 4 sites, rows jam 4 deep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from catenc.frontend import typed as T
from catenc.ir.build import build_graph
from catenc.ir.indices import coalesce_reductions, simplify_indices
from catenc.ir.nodes import Buffer, Graph, format_graph
from catenc.ir.passes import fold_constants, inline_computes, remove_dead_computes, split_constant_slices
from catenc.ir.verify import verify_graph
from catenc.lower.collapse import collapse_loops
from catenc.lower.gpu import GemmTile, GpuProgram, TensorTiles, format_gpu, lower_gpu
from catenc.lower.guards import split_guarded_loops, unswitch_outer_loops
from catenc.lower.loops import LoopKernel, LoopProgram, format_loops, lower_schedule
from catenc.lower.pad import pad_windows
from catenc.lower.share import share_identical_kernels
from catenc.lower.strided import keep_strided_loops_scalar
from catenc.lower.unroll import unroll_windows
from catenc.lower.vectorize import jam_rows, split_reduction_lanes
from catenc.lower.verify import verify_loops
from catenc.passes.manager import Pass, Pipeline, Structure
from catenc.runtime.descriptor import Runtime
from catenc.schedule.contractions import materialise_costly_operands
from catenc.schedule.interchange import interchange_reductions
from catenc.schedule.kernels import (
    Kernel,
    Schedule,
    Tune,
    choose_gemm_tiles,
    choose_winograd,
    decide,
    form_kernels,
    format_schedule,
    fuse_rows,
    plan_storage,
    take_contractions,
)
from catenc.schedule.tiles import KINDS, PANEL_ALIGN, GemmTiles, default_tiles, pack_elements
from catenc.schedule.verify import verify_schedule
from catenc.schedule.winograd import contraction_plan
from catenc.symbolic import Expr, Facts, const, product

ROW_JAM = 2  # rows of a matrix-vector product reduced at once at -O2
ROW_JAM_O3 = 4  # ... at -O3
REREADS_O3 = 4  # sites at which -O3 recomputes an expensive elementwise value (-O2: 2)
WINOGRAD = 2  # the largest Winograd output tile at -O2: F(2x2, 3x3) rounds as the direct sum does
WINOGRAD_O3 = 4  # ... at -O3: F(4x4, 3x3), faster, with larger rounding (schedule/winograd.py ROUNDING)


@dataclass(frozen=True)
class Target:
    """What the passes need to know of the runtime and its config."""

    threads: bool  # OpenMP is on
    vector_lanes: int  # f32 lanes of the target's vectors
    packed_gemm: bool  # contractions go through the packed gemm driver
    work_groups: bool  # kernels run as GPU work-groups
    batch_slots: int  # threads that run a batch of small gemms (each needs its own panels)
    block: int = 0  # work-items per group (GPU)
    gpu_tile: GemmTile | None = None  # a contraction's tile per work-group (GPU)
    mma_tiles: TensorTiles | None = None  # ... on tensor cores (None: the target has none)

    @staticmethod
    def of(runtime: Runtime, config: dict[str, str]) -> Target:
        gpu = runtime.work_groups
        return Target(
            threads=runtime.parallel(config),
            vector_lanes=runtime.vector_lanes(config),
            packed_gemm=runtime.packed_gemm,
            work_groups=gpu,
            batch_slots=runtime.renderer.batch_slots,
            block=runtime.block_size(config) if gpu else 0,
            gpu_tile=runtime.gemm_tile(config) if gpu else None,
            mma_tiles=runtime.mma_tiles(config) if gpu else None,
        )

    def gemm_tiles(self) -> dict[str, GemmTiles]:
        """The default micro-kernel and cache tiles per dtype for these vectors."""
        return {kind: default_tiles(kind, 4 * self.vector_lanes) for kind in sorted(KINDS)}

    def pack_size(self, kernel: Kernel, buffers: dict[str, Buffer], tiles: GemmTiles) -> Expr:
        """Elements of packed panels a gemm kernel needs: one set per thread of a threaded batch (a
        Winograd convolution's: its transforms and products too, a slot per thread)."""
        c, parallel = kernel.contraction, kernel.decisions.parallel
        plan = contraction_plan(c, kernel.decisions.winograd, buffers)
        if plan is not None:
            return const(plan.layout(tiles, parallel).elements)
        extent = [product([e for _, e in axes]) for axes in (c.rows, c.cols, c.depth)]
        elements = pack_elements(tiles, *extent, KINDS[c.kind])
        if not (c.batch and parallel):
            return elements
        per = PANEL_ALIGN // c.dtype.itemsize  # each batch thread's panels start aligned
        return self.batch_slots * ((elements + per - 1) // per) * per


def noted(step: Callable[[Graph], tuple[Graph, list[str]]]) -> Callable[[Graph], Graph]:
    """A graph pass that gives its remarks beside the graph, as one whose graph carries them."""

    def run(graph: Graph) -> Graph:
        result, notes = step(graph)
        return replace(result, notes=result.notes + tuple(notes))

    return run


def _structures(facts: Facts) -> dict[str, Structure]:
    def loops(program: LoopProgram) -> list[str]:
        return verify_loops(program.kernels, program.schedule.graph.buffers, facts)

    return {
        "program": Structure("typed program", T.Program, lambda p: f"typed program of {p.name}", lambda p: []),
        "graph": Structure("graph", Graph, format_graph, lambda g: verify_graph(g, facts)),
        "schedule": Structure("schedule", Schedule, format_schedule, lambda sc: verify_schedule(sc, facts)),
        "loops": Structure("loop nests", LoopProgram, lambda p: format_loops(p.kernels), loops),
        "gpu": Structure("work-groups", GpuProgram, lambda p: format_gpu(p.kernels), lambda p: loops(p.loops)),
    }


def build_pipeline(
    level: str,
    target: Target,
    symbol: str = "",
    facts: Facts | None = None,
    tune: Tune | None = None,
    baked: frozenset[str] = frozenset(),
) -> Pipeline:
    """The passes of -O`level` for `target`; kernels are named `<symbol>_k<n>`; the verifier
    may assume `facts` (what the entry's runtime checks guarantee); `tune` changes the schedule's
    decisions before storage is planned (a tuner, a tuning file, a test's random schedule);
    `baked`: the constants whose gemm panels and transforms are made once, not per call (--weights baked
    or packed)."""
    s = _structures(facts or Facts())
    graph, schedule, loops = s["graph"], s["schedule"], s["loops"]
    fuse = level != "0"
    fast = level not in ("0", "1")
    more = level in ("3", "fast")
    cpu = not target.work_groups
    gemm = fast and (target.packed_gemm or target.work_groups)
    packed = gemm and target.packed_gemm

    def each_kernel(rewrite: Callable[[LoopProgram, LoopKernel], LoopKernel]) -> Callable[[LoopProgram], LoopProgram]:
        return lambda program: replace(program, kernels=tuple(rewrite(program, k) for k in program.kernels))

    def with_buffers(rewrite: Callable[[LoopKernel, dict], LoopKernel]) -> Callable[[LoopProgram], LoopProgram]:
        """each_kernel of a rewrite that also reads the program's buffers by name."""
        return each_kernel(lambda p, k: rewrite(k, {b.name: b for b in p.schedule.graph.buffers}))

    def lanes(program: LoopProgram, kernel: LoopKernel) -> LoopKernel:
        return split_reduction_lanes(kernel, {b.name: b.dtype for b in program.schedule.graph.buffers})

    def share(program: LoopProgram) -> LoopProgram:
        buffers = {b.name: b for b in program.schedule.graph.buffers}
        return replace(program, kernels=share_identical_kernels(program.kernels, buffers))

    def to_gpu(program: LoopProgram) -> GpuProgram:
        buffers = {b.name: b for b in program.schedule.graph.buffers}
        kernels = tuple(lower_gpu(k, target.block, target.gpu_tile, buffers, target.mma_tiles) for k in program.kernels)
        return GpuProgram(program, kernels)

    inline = partial(inline_computes, rereads=REREADS_O3) if more else inline_computes
    rereads = f"an expensive value recomputed at up to {REREADS_O3 if more else 2} readers"
    jam = ROW_JAM_O3 if more else ROW_JAM
    tile = WINOGRAD_O3 if more else WINOGRAD
    # (wanted, name, purpose, takes, gives, run, required)
    table = [
        (True, "build-ir", "typed program to a graph of primitive ops", s["program"], graph, build_graph, True),
        (True, "fold-constants", "evaluate operations on constants", graph, graph, fold_constants, False),
        (True, "remove-dead-computes", "drop computes no output needs", graph, graph, remove_dead_computes, False),
        (gemm, "materialise-costly-operands", "store a contraction operand that is costly to recompute per use",
         graph, graph, noted(materialise_costly_operands), False),
        (fuse, "inline-computes", f"inline a value into its readers where that costs no extra work ({rereads})",
         graph, graph, noted(inline), False),
        (fuse, "simplify-indices", "divisions and remainders of load indices that the loop ranges make trivial",
         graph, graph, lambda g: simplify_indices(g, facts or Facts()), False),
        (fuse, "coalesce-reductions", "a reduction over adjacent axes of its loads as one longer loop",
         graph, graph, coalesce_reductions, False),
        (fuse and cpu, "split-constant-slices", "a constant slice of an input as a pointer of its own",
         graph, graph, split_constant_slices, False),
        (True, "form-kernels", "one kernel per compute", graph, schedule, form_kernels, True),
        (gemm, "take-contractions", "each contraction a gemm kernel of its own",
         schedule, schedule, partial(take_contractions, converts=target.work_groups, integer=cpu), False),
        (fuse, "fuse-rows", "join consecutive kernels over their shared row loops", schedule, schedule, fuse_rows,
         False),
        (packed, "choose-gemm-tiles", "cache and register tiles of each packed gemm",
         schedule, schedule, lambda sc: choose_gemm_tiles(sc, target.gemm_tiles()), True),
        (fast and cpu, "interchange-reductions", "a reduction down a strided axis runs outside the last row loop",
         schedule, schedule, interchange_reductions, False),
        (fast and cpu and target.threads, "parallelize", "run each kernel's outer loop on threads when big enough",
         schedule, schedule, lambda sc: decide(sc, parallel=True), False),
        (fast and cpu, "vector-reductions", "give reductions one partial sum per vector lane",
         schedule, schedule, lambda sc: decide(sc, vector_lanes=target.vector_lanes), False),
        (fast and cpu, "unroll-rows", f"reduce {jam} rows of a matrix-vector product at once",
         schedule, schedule, lambda sc: decide(sc, jam=jam), False),
        (fast and cpu, "vector-math", "f32 transcendentals as vectorisable polynomials",
         schedule, schedule, lambda sc: decide(sc, vector_math=True), False),
        (packed, "winograd-convolutions", f"3x3 stride-1 convolutions as Winograd F({tile}x{tile}, 3x3)",
         schedule, schedule, partial(choose_winograd, largest=tile, baked=baked), False),
        (tune is not None, "apply-tuning", "the tuner's decisions replace the heuristics'",
         schedule, schedule, tune, False),
        (True, "plan-storage", "gemm panels, scalar locals, workspace slots packed by liveness",
         schedule, schedule, lambda sc: plan_storage(sc, target.pack_size if packed else None), True),
        (True, "lower-loops", "each kernel to a loop nest", schedule, loops, partial(lower_schedule, symbol=symbol),
         True),
        (fast and cpu, "split-reduction-lanes", "reductions as lane reductions, reduced values reused",
         loops, loops, each_kernel(lanes), False),
        (fast and cpu, "jam-rows", "rows of lane reductions jammed as decided",
         loops, loops, each_kernel(lambda _, k: jam_rows(k)), False),
        (fast and cpu, "unroll-windows", "short loops of accumulator updates (a pool's taps) as straight code",
         loops, loops, each_kernel(lambda _, k: unroll_windows(k)), False),
        (fast and cpu, "unswitch-concatenations", "a loop over both sides of a concatenation: a body per side",
         loops, loops, each_kernel(lambda _, k: unswitch_outer_loops(k)), False),
        (fast and cpu, "pad-windows", "a padded window reads a padded copy of its plane, without guards",
         loops, loops, with_buffers(pad_windows), False),
        (fast and cpu, "split-guarded-loops", "loops split where padding guards change: an unguarded interior",
         loops, loops, each_kernel(lambda _, k: split_guarded_loops(k)), False),
        (fast and cpu, "collapse-loops", "nested loops over elements stored alike as one loop (a plane as one run)",
         loops, loops, with_buffers(collapse_loops), False),
        (fast and cpu, "scalar-strided-loops", "an innermost loop that reads or writes at a stride stays scalar",
         loops, loops, with_buffers(keep_strided_loops_scalar), False),
        (fuse and cpu, "share-identical-kernels", "kernels equal up to names call one function", loops, loops, share,
         False),
        (target.work_groups, "lower-gpu", "loop nests to GPU work-groups", loops, s["gpu"], to_gpu, True),
    ]  # fmt: skip
    return Pipeline(level, tuple(Pass(*row[1:]) for row in table if row[0]))
