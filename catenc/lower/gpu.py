"""GPU lowering: loop kernels to work-groups and work-items, shared by every GPU renderer.

Each loop kernel takes one of three shapes (its `mapping`):

- "element": one work-item per point of the kernel's perfect loop nest (the flattened points,
  last index fastest, so neighbouring work-items touch neighbouring elements); whatever loops
  remain run sequentially in the work-item.
- "row": one work-group per point of the outer loops (a row of a softmax or a layernorm): the
  row's loops are shared by the group's work-items (`ThreadLoop`), each loop's reductions are
  combined across the group (`BlockReduce`), and barriers order the row's steps.
- "gemm": a contraction as tiles of the output, one work-group per tile, operand tiles staged
  in local memory (`TiledGemm`). Its engine is "simt" (each work-item a register block of
  outputs, any operand expression) or, where the target has tensor cores and both operands are
  f16 or bf16 tensors read in place with one unit stride (`StridedOperand`), "mma": warps of
  matrix instructions over operand tiles copied asynchronously, f32 accumulators.

The renderers decide only spelling (index builtins, barrier, shuffles, qualifiers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from catenc.dispatch import Table
from catenc.dtypes import I64, DType
from catenc.enums import StrEnum
from catenc.ir.nodes import Binary, Const, Load, Local, SymInt, format_value, walk
from catenc.lower.flat import indices_at
from catenc.lower.gemm import StridedOperand, strided_operand
from catenc.lower.lanes import Storage
from catenc.lower.loops import (
    Assign,
    Declare,
    For,
    Gemm,
    If,
    LoopKernel,
    LoopProgram,
    Stmt,
    Store,
    format_body,
    iter_stmts,
    stmt_values,
)
from catenc.schedule.contractions import Contraction
from catenc.schedule.kernels import Decisions
from catenc.symbolic import Expr, product, sym


@dataclass(frozen=True)
class ThreadLoop(Stmt):
    """`for index = local_id; index < extent; index += block`: the work-group shares the loop."""

    index: str
    extent: Expr
    body: tuple[Stmt, ...]
    child_fields = ("body",)


@dataclass(frozen=True)
class BlockReduce(Stmt):
    """Every work-item's partial `acc` combined with `op` across the work-group; all get the result."""

    acc: str
    op: str
    dtype: DType


@dataclass(frozen=True)
class Barrier(Stmt):
    """Every work-item of the group waits here; memory written before is visible after."""


@dataclass(frozen=True)
class FirstItem(Stmt):
    """Statements only the group's first work-item runs (a row's single stores)."""

    body: tuple[Stmt, ...]
    child_fields = ("body",)


@dataclass(frozen=True)
class GemmTile:
    """Output tile of a work-group, depth slice staged per step, and work-items per group
    (each computes (rows x cols) / threads outputs in registers)."""

    rows: int = 64
    cols: int = 64
    depth: int = 16
    threads: int = 256
    stages: int = 1  # depth slices in flight (tensor-core tiles: copies run stages - 1 slices ahead)

    @property
    def side(self) -> int:
        """Work-items along each side of the tile (the group is side x side)."""
        return int(round(self.threads**0.5))


@dataclass(frozen=True)
class TensorTiles:
    """A target's tensor-core tiles: `plain` for a single product whose A is depth-major (a
    matmul, a linear layer), `other` for the rest (a batch, or A read transposed: their
    addressing needs registers that `plain` may spend on double-buffered fragments)."""

    plain: GemmTile
    other: GemmTile

    def of(self, c: Contraction, a: StridedOperand) -> GemmTile:
        return self.plain if a.depth_major and not c.batch else self.other


class GemmEngine(StrEnum):
    """What computes a tiled contraction (the module doc says each)."""

    SIMT = "simt"
    MMA = "mma"


MMA_DTYPES = ("f16", "bf16")  # storage dtypes of the tensor-core operands (f32 accumulation)


@dataclass(frozen=True)
class TiledGemm(Stmt):
    contraction: Contraction
    tile: GemmTile
    engine: GemmEngine = GemmEngine.SIMT
    a: StridedOperand | None = None  # MMA: the operands as strided tensors
    b: StridedOperand | None = None


class GridMapping(StrEnum):
    """How a kernel's work spreads over the grid (the module doc says each)."""

    ELEMENT = "element"
    ROW = "row"
    GEMM = "gemm"


REDUCIBLE = ("add", "mul", "max", "min")  # the combine ops of `_accumulate`'s accumulators


@dataclass(frozen=True)
class GpuKernel:
    name: str
    mapping: GridMapping
    points: tuple[tuple[str, Expr], ...]  # the indices the grid enumerates (not for gemm)
    body: tuple[Stmt, ...]
    block: int  # work-items per group
    buffers: tuple[str, ...]
    symbols: tuple[str, ...]
    fused: tuple[str, ...]
    flops: Expr
    decisions: Decisions

    @property
    def shared_bytes(self) -> int:
        """Dynamic local memory of a work-group (tensor-core tiles: every stage's operand tiles)."""
        if self.mapping is not GridMapping.GEMM or self.body[0].engine is not GemmEngine.MMA:
            return 0
        t = self.body[0].tile
        return t.stages * (t.rows + t.cols) * t.depth * 2

    @property
    def groups(self) -> Expr:
        """Work-groups to launch (the host evaluates this at run time)."""
        if self.mapping is GridMapping.GEMM:
            (stmt,) = self.body
            c, tile = stmt.contraction, stmt.tile
            rows, cols = (product([e for _, e in axes]) for axes in (c.rows, c.cols))
            batch = product([e for _, e in c.batch])
            return batch * ((rows + tile.rows - 1) // tile.rows) * ((cols + tile.cols - 1) // tile.cols)
        total = product([e for _, e in self.points])
        if self.mapping is GridMapping.ROW:
            return total
        return (total + self.block - 1) // self.block


@dataclass(frozen=True)
class GpuProgram:
    """The loop nests of one schedule and their GPU form, one work-group kernel each."""

    loops: LoopProgram
    kernels: tuple[GpuKernel, ...]


def lower_gpu(
    kernel: LoopKernel,
    block: int,
    tile: GemmTile,
    buffers: Mapping[str, Storage] | None = None,
    mma_tiles: TensorTiles | None = None,
) -> GpuKernel:
    """The GPU form of one loop kernel (see the module doc for the three mappings); contractions
    take a tensor-core tile of `mma_tiles` (None: the target has none) where their operands allow."""
    base = dict(
        buffers=kernel.buffers,
        symbols=kernel.symbols,
        fused=kernel.fused,
        flops=kernel.flops,
        decisions=kernel.decisions,
    )
    if len(kernel.body) == 1 and isinstance(kernel.body[0], Gemm):
        c = kernel.body[0].contraction
        operands = mma_operands(c, buffers) if mma_tiles is not None and buffers is not None else None
        if operands is not None:
            mma_tile = mma_tiles.of(c, operands[0])
            body: tuple[Stmt, ...] = (TiledGemm(c, mma_tile, GemmEngine.MMA, *operands),)
            return GpuKernel(kernel.name, GridMapping.GEMM, (), body, mma_tile.threads, **base)
        body = (TiledGemm(c, tile),)
        return GpuKernel(kernel.name, GridMapping.GEMM, (), body, tile.threads, **base)
    prefix, points, row = _peel_nest(kernel.body)
    if _shares_well(row, alone=not points):
        shared = _share_row(row)
        if shared and isinstance(shared[-1], Barrier):  # nothing follows in the group
            shared = shared[:-1]
        return GpuKernel(kernel.name, GridMapping.ROW, points, prefix + shared, block, **base)
    return GpuKernel(kernel.name, GridMapping.ELEMENT, points, prefix + row, block, **base)


def mma_operands(c: Contraction, buffers: Mapping[str, Storage]) -> tuple[StridedOperand, StridedOperand] | None:
    """Both operands as strided tensors of one tensor-core dtype, computed in f32; else None."""
    if c.dtype.name != "f32" or not (c.rows and c.cols and c.depth):
        return None
    a, b = strided_operand(c.a, c.rows, c.depth, buffers), strided_operand(c.b, c.cols, c.depth, buffers)
    if a is None or b is None:
        return None
    kinds = {buffers[a.buffer].dtype.name, buffers[b.buffer].dtype.name}
    return (a, b) if len(kinds) == 1 and kinds <= set(MMA_DTYPES) else None


def _peel_nest(body: tuple[Stmt, ...]) -> tuple[tuple[Stmt, ...], tuple[tuple[str, Expr], ...], tuple[Stmt, ...]]:
    """The perfect loop nest at the top of a body: (the constant index declarations of unit
    loops, the nest's indices, what the innermost loop runs)."""
    prefix: list[Stmt] = []
    points: list[tuple[str, Expr]] = []
    while True:
        constants = [s for s in body if isinstance(s, Declare) and isinstance(s.value, Const)]
        rest = [s for s in body if s not in constants]
        if len(rest) != 1 or not isinstance(rest[0], For):
            return tuple(prefix), tuple(points), body
        prefix += constants
        points.append((rest[0].index, rest[0].extent))
        body = rest[0].body


def _shares_well(row: tuple[Stmt, ...], alone: bool) -> bool:
    """Whether a row's loops can be shared by a work-group: every loop only reduces into
    accumulators declared in the row, and one of them walks memory along its last index
    (or the row is the whole kernel, which one work-item alone would take long over)."""
    loops = list(_row_loops(row))
    if not loops:
        return False
    declared = {s.name for s in _row_level(row) if isinstance(s, Declare)}
    if not all(_reductions(loop, declared) is not None for loop in loops):
        return False
    return alone or any(_walks_last_index(_collapse(loop)) for loop in loops)


def _collapse(loop: For) -> For:
    """A perfect nest of loops as one loop over the flattened positions (last index fastest),
    each index declared from the position: the group then shares every element of the nest."""
    nest, body = [loop], loop.body
    while len(body) == 1 and isinstance(body[0], For):
        nest.append(body[0])
        body = body[0].body
    if len(nest) == 1:
        return loop
    flat = "catenc_flat_" + nest[0].index
    at = indices_at(sym(flat), [(f.index, f.extent) for f in nest])
    declares = tuple(Declare(f.index, I64, SymInt(I64, at[f.index])) for f in nest)
    return For(flat, product([f.extent for f in nest]), declares + body)


def _row_level(row: tuple[Stmt, ...]):
    """The row's statements outside its loops (through `if`s, whose conditions the whole
    group computes alike)."""
    for stmt in row:
        yield stmt
        if isinstance(stmt, If):
            yield from _row_level(stmt.body)


def _row_loops(row: tuple[Stmt, ...]):
    return (s for s in _row_level(row) if isinstance(s, For))


def _reductions(loop: For, declared: set[str]) -> dict[str, tuple[str, DType]] | None:
    """acc -> (op, dtype) for the row accumulators the loop updates; None when it assigns a
    row variable any other way (argmax's best-so-far), which a group cannot share."""
    inner = {s.name for s in iter_stmts(loop.body) if isinstance(s, Declare)}
    found: dict[str, tuple[str, DType]] = {}
    for stmt in iter_stmts(loop.body):
        if not isinstance(stmt, Assign) or stmt.name in inner:
            continue
        v = stmt.value
        shaped = (
            stmt.name in declared
            and isinstance(v, Binary)
            and v.op in REDUCIBLE
            and v.a == Local(v.dtype, stmt.name)
            and not any(isinstance(n, Local) and n.name == stmt.name for n in walk(v.b))
        )
        if not shaped or found.get(stmt.name, (v.op, v.dtype)) != (v.op, v.dtype):
            return None
        found[stmt.name] = (v.op, v.dtype)
    return found


def _walks_last_index(loop: For) -> bool:
    """Whether some access in the loop has the loop's index in its last position (so
    neighbouring work-items read neighbouring elements)."""
    for stmt in iter_stmts(loop.body):
        accesses = [n for v in stmt_values(stmt) for n in walk(v) if isinstance(n, Load) and n.index]
        last = [a.index[-1] for a in accesses]
        if isinstance(stmt, Store) and stmt.index:
            last.append(stmt.index[-1])
        if any(loop.index in e.free_symbols() for e in last):
            return True
    return False


def _share_row(row: tuple[Stmt, ...], declared: set[str] | None = None) -> tuple[Stmt, ...]:
    """The row's loops shared by the group, each followed by the group reductions of the
    accumulators it updates (declared: the row's accumulators, from outside any `if`)."""
    if declared is None:
        declared = {s.name for s in _row_level(row) if isinstance(s, Declare)}
    return tuple(shared for stmt in row for shared in _SHARED[type(stmt)](stmt, declared))


_SHARED: Table[Callable[[Stmt, set[str]], tuple[Stmt, ...]]] = Table("_share_row")


@_SHARED.register(Stmt)
def _shared_as_is(stmt: Stmt, declared: set[str]) -> tuple[Stmt, ...]:
    """What every work-item of the group runs alike (declarations, assignments)."""
    return (stmt,)


@_SHARED.register(For)
def _shared_loop(stmt: For, declared: set[str]) -> tuple[Stmt, ...]:
    reductions = _reductions(stmt, declared) or {}
    loop = _collapse(stmt)
    out: tuple[Stmt, ...] = (ThreadLoop(loop.index, loop.extent, loop.body),)
    out += tuple(BlockReduce(acc, op, dtype) for acc, (op, dtype) in reductions.items())
    if not reductions and any(isinstance(s, Store) for s in iter_stmts(loop.body)):
        out += (Barrier(),)
    return out


@_SHARED.register(If)
def _shared_branch(stmt: If, declared: set[str]) -> tuple[Stmt, ...]:
    return (If(stmt.cond, _share_row(stmt.body, declared)),)


@_SHARED.register(Store)
def _shared_store(stmt: Store, declared: set[str]) -> tuple[Stmt, ...]:
    """One work-item stores; the others wait for it."""
    return (FirstItem((stmt,)), Barrier())


# ---- printing ----------------------------------------------------------------------------------


def format_gpu(kernels: tuple[GpuKernel, ...]) -> str:
    """The GPU kernels as readable pseudo-code: grid, work-group and what each item runs."""
    lines: list[str] = []
    for kernel in kernels:
        args = ", ".join(list(kernel.buffers) + list(kernel.symbols))
        lines.append(f"kernel {kernel.name}({args}):  # fuses {', '.join(kernel.fused)}")
        lines.append(f"  grid {kernel.groups} x block {kernel.block}, {kernel.mapping} mapping")
        if kernel.points:
            per = "group" if kernel.mapping is GridMapping.ROW else "work-item"
            points = ", ".join(f"{n} < {e}" for n, e in kernel.points)
            lines.append(f"  one {per} per ({points}):")
        _format_gpu_body(kernel.body, 2, lines)
    return "\n".join(lines)


_FORMAT: Table[Callable[[Stmt, str, int, list[str]], None]] = Table("format_gpu")


def _format_gpu_body(body: tuple[Stmt, ...], depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for stmt in body:
        _FORMAT[type(stmt)](stmt, pad, depth, lines)


@_FORMAT.register(Stmt)
def _format_loop_stmt(stmt: Stmt, pad: str, depth: int, lines: list[str]) -> None:
    format_body((stmt,), depth, lines)


@_FORMAT.register(ThreadLoop)
def _format_thread_loop(stmt: ThreadLoop, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}for {stmt.index} in 0..{stmt.extent} shared by the group:")
    format_body(stmt.body, depth + 1, lines)


@_FORMAT.register(BlockReduce)
def _format_block_reduce(stmt: BlockReduce, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}{stmt.acc} = group_{stmt.op}({stmt.acc})")


@_FORMAT.register(Barrier)
def _format_barrier(stmt: Barrier, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}barrier")


@_FORMAT.register(FirstItem)
def _format_first_item(stmt: FirstItem, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}first item only:")
    format_body(stmt.body, depth + 1, lines)


@_FORMAT.register(TiledGemm)
def _format_tiled_gemm(stmt: TiledGemm, pad: str, depth: int, lines: list[str]) -> None:
    c, t = stmt.contraction, stmt.tile
    lines.append(
        f"{pad}{c.output} += a * b in {t.rows}x{t.cols} tiles, depth {t.depth} per step, "
        f"{t.threads} items, {stmt.engine}: a = {format_value(c.a)}, b = {format_value(c.b)}"
    )
    for side, operand in (("a", stmt.a), ("b", stmt.b)):
        if operand is not None:
            major = "depth" if operand.depth_major else "rows" if side == "a" else "cols"
            where = f"{operand.buffer}[{operand.offset} + p*{operand.outer} + k*{operand.depth}]"
            lines.append(f"{pad}{side} in place: {where}, {major}-major")
    if c.epilogue is not None:
        lines.append(f"{pad}epilogue: {format_value(c.epilogue)}")


@_FORMAT.register(If)
def _format_group_if(stmt: If, pad: str, depth: int, lines: list[str]) -> None:
    lines.append(f"{pad}if {format_value(stmt.cond)}:")
    _format_gpu_body(stmt.body, depth + 1, lines)
