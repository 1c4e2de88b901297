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
from catenc.lower.gpu import Barrier, BlockReduce, FirstItem, GpuKernel, GridMapping, ThreadLoop, TiledGemm
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
    return [Launch(k.name, k.groups, k.block, tuple(kernel_args(k, buffers, temps, original))) for k in entry.gpu]


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
    shuffle_down: str | None = None  # value of lane + offset in the warp ({0}, {1}); None: none
    warp_size = 32
    unroll = "#pragma unroll"
    preamble = ""  # the file's first lines (includes, typedefs)
    host_template: str | None = None  # renders an entry's host function (None: the host is elsewhere)
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
            return [
                f"{i}{self.local_qualifier} {ctype} catenc_tile_a[{t.depth}][{t.rows}];",
                f"{i}{self.local_qualifier} {ctype} catenc_tile_b[{t.depth}][{t.cols}];",
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
        depth slice at a time, each work-item accumulating (rows/side) x (cols/side) outputs
        in registers, spread `side` apart so neighbouring items touch neighbouring columns."""
        c, t = stmt.contraction, stmt.tile
        ctype, i, side = self.ctype(c.dtype), self.indent, t.side
        per_row, per_col = t.rows // side, t.cols // side
        rows, cols, depth = flat_extent(c.rows).to_c(), flat_extent(c.cols).to_c(), flat_extent(c.depth).to_c()
        zero = self.literal(0.0, c.dtype)
        lines += [
            f"{i}const int {ITEM} = (int){self.local_id};",
            f"{i}const int catenc_ty = {ITEM} / {side}, catenc_tx = {ITEM} % {side};",
            f"{i}const int64_t catenc_tiles_n = ({cols} + {t.cols - 1}) / {t.cols};",
            f"{i}const int64_t catenc_tiles_m = ({rows} + {t.rows - 1}) / {t.rows};",
            f"{i}const int64_t catenc_group = (int64_t){self.group_id};",
            f"{i}const int64_t catenc_n0 = catenc_group % catenc_tiles_n * {t.cols};",
            f"{i}const int64_t catenc_m0 = catenc_group / catenc_tiles_n % catenc_tiles_m * {t.rows};",
            *self.batch_indices(c, i),
            f"{i}{ctype} catenc_c[{per_row}][{per_col}];",
            f"{i}{self.unroll}",
            f"{i}for (int catenc_i = 0; catenc_i < {per_row}; ++catenc_i)",
            f"{i * 2}{self.unroll}",
            f"{i * 2}for (int catenc_j = 0; catenc_j < {per_col}; ++catenc_j) catenc_c[catenc_i][catenc_j] = {zero};",
            f"{i}for (int64_t catenc_k0 = 0; catenc_k0 < {depth}; catenc_k0 += {t.depth}) {{",
            *self.stage_tile(c, "a", t.rows, t, i * 2),
            *self.stage_tile(c, "b", t.cols, t, i * 2),
            f"{i * 2}{self.barrier};",
            f"{i * 2}{self.unroll}",
            f"{i * 2}for (int catenc_kk = 0; catenc_kk < {t.depth}; ++catenc_kk) {{",
            f"{i * 3}{ctype} catenc_ra[{per_row}], catenc_rb[{per_col}];",
            f"{i * 3}{self.unroll}",
            f"{i * 3}for (int catenc_i = 0; catenc_i < {per_row}; ++catenc_i) "
            f"catenc_ra[catenc_i] = catenc_tile_a[catenc_kk][catenc_ty + catenc_i * {side}];",
            f"{i * 3}{self.unroll}",
            f"{i * 3}for (int catenc_j = 0; catenc_j < {per_col}; ++catenc_j) "
            f"catenc_rb[catenc_j] = catenc_tile_b[catenc_kk][catenc_tx + catenc_j * {side}];",
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
            f"{i * 3}const int64_t catenc_row = catenc_m0 + catenc_ty + catenc_i * {side};",
            f"{i * 3}const int64_t catenc_col = catenc_n0 + catenc_tx + catenc_j * {side};",
            f"{i * 3}if (catenc_row < {rows} && catenc_col < {cols}) {{",
            *[f"{i * 4}{line}" for line in self.indices(unflatten(c.rows), "catenc_row", const=True)],
            *[f"{i * 4}{line}" for line in self.indices(unflatten(c.cols), "catenc_col", const=True)],
            f"{i * 4}const {ctype} {ACC} = catenc_c[catenc_i][catenc_j];",
            *self.assignment(f"{c.output}[{output_position(c).to_c()}]", c.epilogue or Local(c.dtype, ACC), i * 4),
            f"{i * 3}}}",
            f"{i * 2}}}",
            f"{i}}}",
        ]

    def batch_indices(self, c, pad: str) -> list[str]:
        """The batch element of this group's tile (nothing for a single product)."""
        if not c.batch:
            return []
        return [
            f"{pad}const int64_t catenc_b = catenc_group / catenc_tiles_n / catenc_tiles_m;",
            *[f"{pad}{line}" for line in self.indices(unflatten(c.batch), "catenc_b", const=True)],
        ]

    def stage_tile(self, c, side: str, width: int, t, pad: str) -> list[str]:
        """Every work-item stages its share of operand `side`'s tile for this depth slice
        (zero past the edges): a's tile is rows x depth, b's depth x cols, both stored depth-major;
        consecutive items take consecutive positions along a's depth and b's columns."""
        ctype, i = self.ctype(c.dtype), self.indent
        axes, value = (c.rows, c.a) if side == "a" else (c.cols, c.b)
        extent, depth = flat_extent(axes).to_c(), flat_extent(c.depth).to_c()
        origin = "catenc_m0" if side == "a" else "catenc_n0"
        if side == "a":  # depth fastest: a row of a row-major operand is contiguous
            position = [f"const int catenc_p = catenc_e / {t.depth}, catenc_kk = catenc_e % {t.depth};"]
        else:
            position = [f"const int catenc_p = catenc_e % {width}, catenc_kk = catenc_e / {width};"]
        return [
            f"{pad}for (int catenc_e = {ITEM}; catenc_e < {width * t.depth}; catenc_e += {t.threads}) {{",
            *[f"{pad}{i}{line}" for line in position],
            f"{pad}{i}const int64_t catenc_at = {origin} + catenc_p, catenc_q = catenc_k0 + catenc_kk;",
            f"{pad}{i}{ctype} catenc_v = {self.literal(0.0, c.dtype)};",
            f"{pad}{i}if (catenc_at < {extent} && catenc_q < {depth}) {{",
            *[f"{pad}{i * 2}{line}" for line in self.indices(unflatten(axes), "catenc_at", const=True)],
            *[f"{pad}{i * 2}{line}" for line in self.indices(unflatten(c.depth), "catenc_q", const=True)],
            *self.assignment("catenc_v", value, pad + i * 2),
            f"{pad}{i}}}",
            f"{pad}{i}catenc_tile_{side}[catenc_kk][catenc_p] = catenc_v;",
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
    shuffle_down = "__shfl_down_sync(0xffffffffu, {0}, {1})"
    preamble = "#include <cuda_runtime.h>\n#include <math.h>\n#include <stdint.h>\n"
    host_template = "cuda_host.cu.j2"
    unary_float = registry.unary_spellings("float", "cuda")
    binary_float = registry.binary_spellings("float", "cuda")


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
