"""The GPU renderers: the shared GPU lowering (catenc/lower/gpu.py) as CUDA or OpenCL C.

`GpuRenderer` renders every kernel shape once; `CudaRenderer` and `OpenCLRenderer` are tables
of spellings (address spaces, index builtins, barrier, shuffles, qualifiers), as a C-family
renderer's subclasses are meant to be. Values and statements render through `CRenderer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from catenc import registry
from catenc.codegen.names import (
    C_KEYWORDS,
    C_LOCALS,
    C_MACROS_AND_TYPES,
    C_NAMES,
    CUDA_API,
    CUDA_LOCALS,
    CUDA_MACROS_AND_TYPES,
    CUDA_NAMES,
    CXX_KEYWORDS,
    OPENCL_NAMES,
    Reserved,
)
from catenc.dispatch import Table
from catenc.dtypes import DType
from catenc.enums import StrEnum
from catenc.ir.nodes import Binary, Local, Role
from catenc.lower.flat import flat_extent, unflatten
from catenc.lower.gemm import output_position
from catenc.lower.gpu import (
    Barrier,
    BlockReduce,
    FirstItem,
    GemmEngine,
    GpuKernel,
    GridMapping,
    ThreadLoop,
    TiledGemm,
)
from catenc.lower.loops import identity, iter_stmts
from catenc.schedule.contractions import ACC
from catenc.schedule.kernels import Schedule
from catenc.symbolic import Expr

from .c import BufferArg, CRenderer

ITEM = "catenc_item"  # the work-item's index in its group
SCRATCH = "catenc_scratch"  # the group's local memory for reductions
WORKSPACE = "catenc_workspace"  # the kernel parameter temps live in


class ArgKind(StrEnum):
    """What the host passes for a kernel argument."""

    BUFFER = "buffer"  # a device buffer (input or output)
    SCALAR = "scalar"  # a scalar input, by value
    WORKSPACE = "workspace"  # the temps' memory
    DIM = "dim"  # a dimension (int64)


@dataclass(frozen=True)
class KernelArg:
    """One argument of a GPU kernel, as the host passes it."""

    name: str
    kind: ArgKind
    dtype: DType | None = None


def kernel_args(
    kernel: GpuKernel, buffers: dict[str, BufferArg], temps: dict[str, Expr], original: Mapping[str, str] = {}
) -> list[KernelArg]:
    """The kernel's arguments in order: its own buffers, the workspace when it uses temps
    (each at its byte offset in `temps`), then every symbol the kernel or an offset needs, in the
    order of the user's names (`original` maps a renamed symbol back: codegen/names.py)."""
    args, symbols, uses_workspace = [], set(kernel.symbols), False
    for name in kernel.buffers:
        buf = buffers[name]
        if name in temps:
            uses_workspace = True
            symbols |= temps[name].free_symbols()
        elif buf.const and not buf.shape:
            args.append(KernelArg(name, ArgKind.SCALAR, buf.dtype))
        else:
            args.append(KernelArg(name, ArgKind.BUFFER, buf.dtype))
    if uses_workspace:
        args.append(KernelArg(WORKSPACE, ArgKind.WORKSPACE))
    return args + [KernelArg(s, ArgKind.DIM) for s in sorted(symbols, key=lambda s: original.get(s, s))]


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a host entry: `groups` work-groups (evaluated at run time) of
    `block` work-items, with these arguments."""

    kernel: str
    groups: Expr
    block: int
    args: tuple[KernelArg, ...]
    shared: int = 0  # bytes of dynamic local memory per group


def temp_offsets(schedule: Schedule) -> dict[str, Expr]:
    """Byte offset in the workspace of every temp (and status) buffer."""
    return {name: slot.offset for slot in schedule.slots for name in slot.buffers}


def status_offsets(schedule: Schedule) -> list[Expr]:
    """Where the entry's status counters (an i64 each) lie in the workspace."""
    offsets = temp_offsets(schedule)
    return [offsets[b.name] for b in schedule.graph.buffers if b.role == Role.STATUS]


def launch_plan(
    entry, buffers: dict[str, BufferArg], temps: dict[str, Expr], original: Mapping[str, str] = {}
) -> list[Launch]:
    """The launches of an entry's GPU kernels, in order."""
    return [
        Launch(k.name, k.groups, k.block, tuple(kernel_args(k, buffers, temps, original)), k.shared_bytes)
        for k in entry.gpu
    ]


class GpuRenderer(CRenderer):
    """Kernels of the GPU lowering; a subclass fills in the spellings below."""

    work_groups = True
    kernel_qualifier = ""  # before a kernel function
    device_inline = ""  # how prelude helpers are declared
    local_qualifier = ""  # declares work-group memory
    local_space = ""  # address space in a pointer to work-group memory
    barrier = ""
    group_id = ""  # the group's index along dimension 0
    local_id = ""  # the work-item's index in its group
    group_size_hint = ""  # tells the compiler the group size ({0})
    tile_size_hint = ""  # ... of a tensor-core tile, which may take all of a multiprocessor's registers
    shuffle_down: str | None = None  # value of lane + offset in the warp ({0}, {1}); None: none
    warp_size = 32
    unroll = "#pragma unroll"
    preamble = ""  # the file's first lines (includes, typedefs)
    host_template: str | None = None  # renders an entry's host function (None: the host is elsewhere)
    support: dict[GemmEngine, str] = {}  # the source each contraction engine's kernels call
    vector4: dict[str, str] = {}  # a vector of 4 of a scalar type (reads of 16 bytes from local memory)
    align16 = ""  # aligns local memory to 16 bytes
    vector_math_f32: dict[str, str] = {}  # the device's math library is already fast

    # ---- kernels ----
    def gpu_kernel(
        self, kernel: GpuKernel, buffers: dict[str, BufferArg], temps: dict[str, Expr], original: Mapping[str, str] = {}
    ) -> str:
        """The kernel function: its parameters, views of its temps and scalar inputs, the
        grid mapping, and the body."""
        self.start_kernel(kernel, buffers)
        i = self.indent
        args = kernel_args(kernel, buffers, temps, original)
        params, views = [], []
        for arg in args:
            if arg.kind is ArgKind.BUFFER:
                params.append(self.buffer_param(buffers[arg.name]))
            elif arg.kind is ArgKind.SCALAR:
                ctype = arg.dtype.ctype
                params.append(f"{ctype} catenc_value_{arg.name}")
                views.append(f"{i}const {ctype}* {arg.name} = &catenc_value_{arg.name};")
            elif arg.kind is ArgKind.WORKSPACE:
                params.append(f"{self.global_space}unsigned char* {self.restrict} {WORKSPACE}")
            else:
                params.append(f"int64_t {arg.name}")
        for name in kernel.buffers:
            if name in temps:
                ctype = buffers[name].dtype.ctype
                pointer = f"{self.global_space}{ctype}*"
                views.append(
                    f"{i}{pointer} {self.restrict} {name} = ({pointer})({WORKSPACE} + ({temps[name].to_c()}));"
                )
        hint = self.group_size_hint.format(kernel.block)
        if kernel.shared_bytes:  # a tensor-core tile: one group per multiprocessor may take every register
            hint = self.tile_size_hint.format(kernel.block)
        lines = [f"{self.kernel_qualifier} {hint}{kernel.name}({', '.join(params)})", "{"]
        lines += self.local_memory(kernel) + views
        if kernel.mapping is GridMapping.GEMM:
            (stmt,) = kernel.body
            self.tiled_gemm(stmt, lines)
        else:
            lines += self.grid_mapping(kernel)
            self.statements(kernel.body, 1, lines, False)
        lines.append("}")
        return "\n".join(lines)

    def local_memory(self, kernel: GpuKernel) -> list[str]:
        """Work-group memory, declared at kernel scope (OpenCL allows no other place)."""
        i = self.indent
        if kernel.mapping is GridMapping.GEMM:
            (stmt,) = kernel.body
            t, ctype = stmt.tile, self.ctype(stmt.contraction.dtype)
            if stmt.engine is GemmEngine.MMA:  # the tiles live in the support function
                return []
            return [
                # a's rows padded by 4: the items staging one depth slice then store to distinct banks
                f"{i}{self.local_qualifier} {self.align16}{ctype} catenc_tile_a[{t.depth}][{t.rows + 4}];",
                f"{i}{self.local_qualifier} {self.align16}{ctype} catenc_tile_b[{t.depth}][{t.cols}];",
            ]
        if any(isinstance(s, BlockReduce) for s in iter_stmts(kernel.body)):
            return [f"{i}{self.local_qualifier} int64_t {SCRATCH}[{kernel.block}];"]
        return []

    def grid_mapping(self, kernel: GpuKernel) -> list[str]:
        """Which point the work-item (element mapping) or its group (row mapping) computes."""
        i = self.indent
        if kernel.mapping is GridMapping.ELEMENT:
            total = flat_extent(kernel.points).to_c()
            lines = [
                f"{i}const int64_t catenc_point = (int64_t){self.group_id} * {kernel.block} + {self.local_id};",
                f"{i}if (catenc_point >= {total}) return;",
            ]
        else:
            lines = [
                f"{i}const int64_t catenc_point = (int64_t){self.group_id};",
                f"{i}const int {ITEM} = (int){self.local_id};",
            ]
        return lines + [f"{i}{line}" for line in self.indices(unflatten(kernel.points), "catenc_point", const=True)]

    # ---- the group's statements ----
    STATEMENTS = Table("GpuRenderer.statement", base=CRenderer.STATEMENTS)

    @STATEMENTS.register(ThreadLoop)
    def thread_loop(self, stmt: ThreadLoop, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        index, extent = stmt.index, stmt.extent.to_c()
        block = self.state.kernel.block
        lines.append(f"{pad}for (int64_t {index} = {ITEM}; {index} < {extent}; {index} += {block}) {{")
        self.statements(stmt.body, depth + 1, lines, parallel)
        lines.append(f"{pad}}}")

    @STATEMENTS.register(Barrier)
    def wait(self, stmt: Barrier, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        lines.append(f"{pad}{self.barrier};")

    @STATEMENTS.register(FirstItem)
    def first_item(self, stmt: FirstItem, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        lines.append(f"{pad}if ({ITEM} == 0) {{")
        self.statements(stmt.body, depth + 1, lines, parallel)
        lines.append(f"{pad}}}")

    @STATEMENTS.register(BlockReduce)
    def block_reduce(self, stmt: BlockReduce, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        """acc = op over the group: through warp shuffles where the spelling has them (then
        one value per warp in local memory), else a tree in local memory."""
        ctype, i, block = self.ctype(stmt.dtype), self.indent, self.state.kernel.block
        red = f"(({self.local_space}{ctype}*){SCRATCH})"
        acc = Local(stmt.dtype, stmt.acc)

        def combine(target: str, a: str, b: str, at: str) -> list[str]:
            value = Binary(stmt.dtype, stmt.op, Local(stmt.dtype, a), Local(stmt.dtype, b))
            return self.assignment(target, value, at)

        lines.append(f"{pad}{{")
        if self.shuffle_down is not None and block % self.warp_size == 0 and block > self.warp_size:
            warps, w = block // self.warp_size, self.warp_size
            shuffled = self.shuffle_down.format(stmt.acc, "catenc_s")
            lines += [
                f"{pad}{i}for (int catenc_s = {w // 2}; catenc_s > 0; catenc_s >>= 1) {{",
                f"{pad}{i * 2}const {ctype} catenc_other = {shuffled};",
                *combine(stmt.acc, stmt.acc, "catenc_other", pad + i * 2),
                f"{pad}{i}}}",
                f"{pad}{i}if ({ITEM} % {w} == 0) {red}[{ITEM} / {w}] = {acc.name};",
                f"{pad}{i}{self.barrier};",
                f"{pad}{i}if ({ITEM} < {w}) {{",
                f"{pad}{i * 2}{stmt.acc} = {ITEM} < {warps} ? {red}[{ITEM}] : {self.identity(stmt)};",
                f"{pad}{i * 2}for (int catenc_s = {w // 2}; catenc_s > 0; catenc_s >>= 1) {{",
                f"{pad}{i * 3}const {ctype} catenc_other = {shuffled};",
                *combine(stmt.acc, stmt.acc, "catenc_other", pad + i * 3),
                f"{pad}{i * 2}}}",
                f"{pad}{i * 2}if ({ITEM} == 0) {red}[0] = {stmt.acc};",
                f"{pad}{i}}}",
                f"{pad}{i}{self.barrier};",
            ]
        else:
            lines += [
                f"{pad}{i}{red}[{ITEM}] = {stmt.acc};",
                f"{pad}{i}{self.barrier};",
                f"{pad}{i}for (int catenc_s = {block // 2}; catenc_s > 0; catenc_s >>= 1) {{",
                f"{pad}{i * 2}if ({ITEM} < catenc_s) {{",
                *combine(f"{red}[{ITEM}]", f"{red}[{ITEM}]", f"{red}[{ITEM} + catenc_s]", pad + i * 3),
                f"{pad}{i * 2}}}",
                f"{pad}{i * 2}{self.barrier};",
                f"{pad}{i}}}",
            ]
        lines += [f"{pad}{i}{stmt.acc} = {red}[0];", f"{pad}{i}{self.barrier};", f"{pad}}}"]

    def identity(self, stmt: BlockReduce) -> str:
        """The literal that leaves a combine unchanged (the warps past the group's end)."""
        if stmt.dtype.name == "bool":
            return "1" if stmt.op in ("min", "mul") else "0"
        op = {"add": "sum", "mul": "prod"}.get(stmt.op, stmt.op)
        return self.literal(identity(op, stmt.dtype), stmt.dtype)

    # ---- contractions ----
    def tiled_gemm(self, stmt: TiledGemm, lines: list[str]) -> None:
        """Output tile (m0, n0) of one batch element: operand tiles staged in local memory a
        depth slice at a time (the next slice's loads in registers meanwhile), each work-item
        accumulating (rows/side) x (cols/side) outputs in registers."""
        if stmt.engine is GemmEngine.MMA:
            self.mma_gemm(stmt, lines)
            return
        c, t = stmt.contraction, stmt.tile
        ctype, i, side = self.ctype(c.dtype), self.indent, t.side
        per_row, per_col = t.rows // side, t.cols // side
        rows, cols, depth = flat_extent(c.rows).to_c(), flat_extent(c.cols).to_c(), flat_extent(c.depth).to_c()
        zero = self.literal(0.0, c.dtype)
        staged = {side: width * t.depth // t.threads for side, width in (("a", t.rows), ("b", t.cols))}

        def owned(item: str, k: str, per: int) -> str:
            """The tile row (column) of a work-item's k-th output row (column): runs of 4
            adjacent ones (vector loads from local memory), the runs `side` * 4 apart."""
            if per % 4:
                return f"{item} + {k} * {side}"
            return f"{k} / 4 * {side * 4} + {item} * 4 + {k} % 4"

        lines += [
            f"{i}const int {ITEM} = (int){self.local_id};",
            f"{i}const int catenc_ty = {ITEM} / {side}, catenc_tx = {ITEM} % {side};",
            *self.tile_origin(stmt),
            f"{i}{ctype} catenc_c[{per_row}][{per_col}];",
            f"{i}{self.unroll}",
            f"{i}for (int catenc_i = 0; catenc_i < {per_row}; ++catenc_i)",
            f"{i * 2}{self.unroll}",
            f"{i * 2}for (int catenc_j = 0; catenc_j < {per_col}; ++catenc_j) catenc_c[catenc_i][catenc_j] = {zero};",
            f"{i}{ctype} catenc_staged_a[{staged['a']}], catenc_staged_b[{staged['b']}];",
            f"{i}int64_t catenc_k0 = 0;",
            *self.fetch_tile(c, "a", t.rows, t, i),
            *self.fetch_tile(c, "b", t.cols, t, i),
            f"{i}for (; catenc_k0 < {depth}; ) {{",
            *self.put_tile("a", t.rows, t, i * 2),
            *self.put_tile("b", t.cols, t, i * 2),
            f"{i * 2}{self.barrier};",
            f"{i * 2}catenc_k0 += {t.depth};",
            f"{i * 2}if (catenc_k0 < {depth}) {{  /* the next slice's loads overlap this one's products */",
            *self.fetch_tile(c, "a", t.rows, t, i * 3),
            *self.fetch_tile(c, "b", t.cols, t, i * 3),
            f"{i * 2}}}",
            f"{i * 2}{self.unroll}",
            f"{i * 2}for (int catenc_kk = 0; catenc_kk < {t.depth}; ++catenc_kk) {{",
            f"{i * 3}{ctype} catenc_ra[{per_row}], catenc_rb[{per_col}];",
            *self.read_tile(
                "a", "catenc_ra", "catenc_i", owned("catenc_ty", "catenc_i", per_row), per_row, ctype, i * 3
            ),
            *self.read_tile(
                "b", "catenc_rb", "catenc_j", owned("catenc_tx", "catenc_j", per_col), per_col, ctype, i * 3
            ),
            f"{i * 3}{self.unroll}",
            f"{i * 3}for (int catenc_i = 0; catenc_i < {per_row}; ++catenc_i)",
            f"{i * 4}{self.unroll}",
            f"{i * 4}for (int catenc_j = 0; catenc_j < {per_col}; ++catenc_j)",
            f"{i * 5}catenc_c[catenc_i][catenc_j] += catenc_ra[catenc_i] * catenc_rb[catenc_j];",
            f"{i * 2}}}",
            f"{i * 2}{self.barrier};",
            f"{i}}}",
            f"{i}{self.unroll}",
            f"{i}for (int catenc_i = 0; catenc_i < {per_row}; ++catenc_i) {{",
            f"{i * 2}{self.unroll}",
            f"{i * 2}for (int catenc_j = 0; catenc_j < {per_col}; ++catenc_j) {{",
            f"{i * 3}const int64_t catenc_row = catenc_m0 + {owned('catenc_ty', 'catenc_i', per_row)};",
            f"{i * 3}const int64_t catenc_col = catenc_n0 + {owned('catenc_tx', 'catenc_j', per_col)};",
            f"{i * 3}if (catenc_row < {rows} && catenc_col < {cols}) {{",
            f"{i * 4}const {ctype} {ACC} = catenc_c[catenc_i][catenc_j];",
            *self.epilogue_lines(c, i * 4),
            f"{i * 3}}}",
            f"{i * 2}}}",
            f"{i}}}",
        ]

    def read_tile(self, side: str, target: str, k: str, position: str, count: int, ctype: str, pad: str) -> list[str]:
        """A work-item's `count` values of its tile at depth catenc_kk into `target`: four at a
        time where the spelling has a vector of four and they lie in runs of 4 (`position`)."""
        tile = f"catenc_tile_{side}[catenc_kk]"
        vector = self.vector4.get(ctype)
        if vector is None or count % 4:
            return [
                f"{pad}{self.unroll}",
                f"{pad}for (int {k} = 0; {k} < {count}; ++{k}) {target}[{k}] = {tile}[{position}];",
            ]
        lanes = "".join(f" {target}[{k} + {n}] = catenc_v.{lane};" for n, lane in enumerate("xyzw"))
        return [
            f"{pad}{self.unroll}",
            f"{pad}for (int {k} = 0; {k} < {count}; {k} += 4) {{",
            f"{pad}{self.indent}const {vector} catenc_v = *(const {self.local_space}{vector}*)&{tile}[{position}];"
            + lanes,
            f"{pad}}}",
        ]

    def tile_origin(self, stmt: TiledGemm) -> list[str]:
        """The group's output tile: its first row and column (catenc_m0, catenc_n0) and batch element."""
        c, t, i = stmt.contraction, stmt.tile, self.indent
        rows, cols = flat_extent(c.rows).to_c(), flat_extent(c.cols).to_c()
        return [
            f"{i}const int64_t catenc_tiles_n = ({cols} + {t.cols - 1}) / {t.cols};",
            f"{i}const int64_t catenc_tiles_m = ({rows} + {t.rows - 1}) / {t.rows};",
            f"{i}const int64_t catenc_group = (int64_t){self.group_id};",
            f"{i}const int64_t catenc_n0 = catenc_group % catenc_tiles_n * {t.cols};",
            f"{i}const int64_t catenc_m0 = catenc_group / catenc_tiles_n % catenc_tiles_m * {t.rows};",
            *self.batch_indices(c, i),
        ]

    def mma_gemm(self, stmt: TiledGemm, lines: list[str]) -> None:
        """A tile on tensor cores; only a renderer with matrix instructions has one."""
        raise NotImplementedError(f"{self.language}: no tensor-core contractions")

    def epilogue_lines(self, c, pad: str) -> list[str]:
        """Output element (catenc_row, catenc_col) of the tile from its sum ACC: the indices, then
        the store of the epilogue (or the sum)."""
        return [
            *[f"{pad}{line}" for line in self.indices(unflatten(c.rows), "catenc_row", const=True)],
            *[f"{pad}{line}" for line in self.indices(unflatten(c.cols), "catenc_col", const=True)],
            *self.assignment(
                f"{c.output}[{output_position(c).to_c()}]",
                c.epilogue or Local(c.dtype, ACC),
                pad,
                self.store_conversion.get(self.state.buffers[c.output].dtype.name, "{0}"),
            ),
        ]

    def batch_indices(self, c, pad: str) -> list[str]:
        """The batch element of this group's tile (nothing for a single product)."""
        if not c.batch:
            return []
        return [
            f"{pad}const int64_t catenc_b = catenc_group / catenc_tiles_n / catenc_tiles_m;",
            *[f"{pad}{line}" for line in self.indices(unflatten(c.batch), "catenc_b", const=True)],
        ]

    def tile_position(self, side: str, width: int, t) -> str:
        """Position (catenc_p, catenc_kk) of staged element catenc_e in operand `side`'s tile
        (a's is rows x depth, b's depth x cols): consecutive items take consecutive positions
        along a's depth (a row of a row-major operand is contiguous) and along b's columns."""
        if side == "a":
            return f"const int catenc_p = catenc_e / {t.depth}, catenc_kk = catenc_e % {t.depth};"
        return f"const int catenc_p = catenc_e % {width}, catenc_kk = catenc_e / {width};"

    def fetch_tile(self, c, side: str, width: int, t, pad: str) -> list[str]:
        """Every work-item loads its share of operand `side`'s tile at depth catenc_k0 into
        registers (catenc_staged_<side>; zero past the edges)."""
        i = self.indent
        axes, value = (c.rows, c.a) if side == "a" else (c.cols, c.b)
        extent, depth = flat_extent(axes).to_c(), flat_extent(c.depth).to_c()
        origin = "catenc_m0" if side == "a" else "catenc_n0"
        target = f"catenc_staged_{side}[catenc_s]"
        return [
            f"{pad}{self.unroll}",
            f"{pad}for (int catenc_s = 0; catenc_s < {width * t.depth // t.threads}; ++catenc_s) {{",
            f"{pad}{i}const int catenc_e = {ITEM} + catenc_s * {t.threads};",
            f"{pad}{i}{self.tile_position(side, width, t)}",
            f"{pad}{i}const int64_t catenc_at = {origin} + catenc_p, catenc_q = catenc_k0 + catenc_kk;",
            f"{pad}{i}{target} = {self.literal(0.0, c.dtype)};",
            f"{pad}{i}if (catenc_at < {extent} && catenc_q < {depth}) {{",
            *[f"{pad}{i * 2}{line}" for line in self.indices(unflatten(axes), "catenc_at", const=True)],
            *[f"{pad}{i * 2}{line}" for line in self.indices(unflatten(c.depth), "catenc_q", const=True)],
            *self.assignment(target, value, pad + i * 2),
            f"{pad}{i}}}",
            f"{pad}}}",
        ]

    def put_tile(self, side: str, width: int, t, pad: str) -> list[str]:
        """The registers fetch_tile filled, stored into the group's tile (depth-major)."""
        i = self.indent
        return [
            f"{pad}{self.unroll}",
            f"{pad}for (int catenc_s = 0; catenc_s < {width * t.depth // t.threads}; ++catenc_s) {{",
            f"{pad}{i}const int catenc_e = {ITEM} + catenc_s * {t.threads};",
            f"{pad}{i}{self.tile_position(side, width, t)}",
            f"{pad}{i}catenc_tile_{side}[catenc_kk][catenc_p] = catenc_staged_{side}[catenc_s];",
            f"{pad}}}",
        ]


class CudaRenderer(GpuRenderer):
    language = "cuda"
    reserved = Reserved(C_NAMES | C_LOCALS | CXX_KEYWORDS | CUDA_NAMES | CUDA_LOCALS, CUDA_API)
    header_reserved = Reserved(C_KEYWORDS | C_MACROS_AND_TYPES | CXX_KEYWORDS | CUDA_MACROS_AND_TYPES, CUDA_API)
    entry_reserved = Reserved(C_NAMES | CXX_KEYWORDS | CUDA_NAMES, CUDA_API)
    kernel_qualifier = 'extern "C" __global__ void'
    device_inline = "static __host__ __device__ inline __attribute__((unused))"
    restrict = "__restrict__"
    local_qualifier = "__shared__"
    barrier = "__syncthreads()"
    group_id = "blockIdx.x"
    local_id = "threadIdx.x"
    group_size_hint = "__launch_bounds__({0}) "
    tile_size_hint = "__launch_bounds__({0}, 1) "
    shuffle_down = "__shfl_down_sync(0xffffffffu, {0}, {1})"
    preamble = "#include <cuda_runtime.h>\n#include <math.h>\n#include <stdint.h>\n"
    host_template = "cuda_host.cu.j2"
    support = {GemmEngine.MMA: "mma_gemm.cu"}  # templates the kernels of an engine call
    vector4 = {"float": "float4"}
    align16 = "__align__(16) "
    unary_float = registry.unary_spellings("float", "cuda")
    binary_float = registry.binary_spellings("float", "cuda")

    def mma_gemm(self, stmt: TiledGemm, lines: list[str]) -> None:
        """The group's tile through catenc_mma::gemm (templates/mma_gemm.cu), the epilogue a lambda
        it calls for every output element in bounds."""
        c, i, a, b = stmt.contraction, self.indent, stmt.a, stmt.b
        t = stmt.tile
        bf16 = "true" if self.state.buffers[a.buffer].dtype.name == "bf16" else "false"
        warp_cols = t.rows * t.cols * self.warp_size // (64 * t.threads)  # each warp 64 rows of the tile
        sizes = [str(n) for n in (t.rows, t.cols, warp_cols, t.stages)]
        flags = ", ".join(sizes + [bf16] + [str(x.depth_major).lower() for x in (a, b)])
        rows, cols, depth = (flat_extent(axes).to_c() for axes in (c.rows, c.cols, c.depth))
        lines += [
            *self.tile_origin(stmt),
            f"{i}catenc_mma::gemm<{flags}>({a.buffer} + ({a.offset.to_c()}), {a.lead.to_c()}, "
            f"{b.buffer} + ({b.offset.to_c()}), {b.lead.to_c()}, {rows}, {cols}, {depth}, catenc_m0, catenc_n0,",
            f"{i * 2}[&](int64_t catenc_row, int64_t catenc_col, float catenc_sum) {{",
            f"{i * 3}const {self.ctype(c.dtype)} {ACC} = catenc_sum;",
            *self.epilogue_lines(c, i * 3),
            f"{i * 2}}});",
        ]


class OpenCLRenderer(GpuRenderer):
    language = "opencl"
    reserved = Reserved(OPENCL_NAMES)
    entry_reserved = Reserved(frozenset())  # the kernels are NAME_k0, ...; the entry is the manifest's
    kernel_qualifier = "__kernel void"
    device_inline = "static inline"
    math_suffix = {"f32": "", "f64": ""}  # OpenCL C's math functions are overloaded
    unary_float = registry.unary_spellings("float", "opencl")
    binary_float = registry.binary_spellings("float", "opencl")
    global_space = "__global "
    local_qualifier = "__local"
    local_space = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)"
    group_id = "get_group_id(0)"
    local_id = "get_local_id(0)"
    group_size_hint = "__attribute__((reqd_work_group_size({0}, 1, 1))) "
    preamble = "\n".join(
        [
            "#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
            "typedef char int8_t;",
            "typedef short int16_t;",
            "typedef int int32_t;",
            "typedef long int64_t;",
            "typedef uchar uint8_t;",
            "typedef ushort uint16_t;",
            "typedef uint uint32_t;",
            "typedef ulong uint64_t;",
            *(
                f"#define {name} {value}"
                for name, value in [
                    ("INT8_MIN", "(-128)"),
                    ("INT8_MAX", "127"),
                    ("INT16_MIN", "(-32768)"),
                    ("INT16_MAX", "32767"),
                    ("INT32_MIN", "(-2147483647 - 1)"),
                    ("INT32_MAX", "2147483647"),
                    ("INT64_MIN", "(-9223372036854775807L - 1)"),
                    ("INT64_MAX", "9223372036854775807L"),
                    ("UINT8_MAX", "255"),
                    ("UINT16_MAX", "65535"),
                    ("UINT32_MAX", "4294967295u"),
                    ("UINT64_MAX", "18446744073709551615uL"),
                ]
            ),
            "",
        ]
    )
