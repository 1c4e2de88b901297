"""The C-family renderer: loop nests to C source text.

A renderer is a table of spellings (types, one expression per primitive op, loop and kernel
syntax) plus a few methods; a runtime picks a renderer class and may override entries. Only
the file scaffolding (header, prelude, entry points) comes from jinja2 templates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from catenc import registry
from catenc.codegen.names import C_KEYWORDS, C_LOCALS, C_MACROS_AND_TYPES, C_NAMES, CXX_KEYWORDS, Reserved
from catenc.codegen.prepack import TransformedFilters
from catenc.dispatch import Table
from catenc.dtypes import BOOL, DTYPES, DType
from catenc.ir.nodes import Binary, Buffer, Cast, Const, Gather, Load, Local, Role, SymInt, Unary, Value, Where
from catenc.ir.passes import substitute
from catenc.lower.flat import flatten, unflatten
from catenc.lower.gemm import (
    AT,
    WINDOW_HIGH,
    WINDOW_LOW,
    ContextField,
    GemmCall,
    MaskedRow,
    Odometer,
    PackedPanels,
    PackSide,
    gemm_call,
    window_bounds,
)
from catenc.lower.lanes import BASE, FULL, LANE, LANES, WIDTH, expand_lanes, lane
from catenc.lower.loops import (
    PLANE_COL,
    PLANE_ROW,
    Assign,
    Declare,
    For,
    Gemm,
    If,
    LaneReduce,
    LoopKernel,
    PaddedPlane,
    Stmt,
    Store,
    WinogradGemm,
)
from catenc.schedule.contractions import ACC
from catenc.schedule.tiles import KINDS
from catenc.symbolic import ZERO, Expr, const, product, sym


@dataclass(frozen=True)
class BufferArg:
    """How a kernel sees a buffer: its C name and storage type."""

    name: str
    dtype: DType
    shape: tuple[Expr, ...]
    const: bool
    # a baked constant's gemm panels, packed at compile time, or its Winograd transform (codegen/prepack.py)
    panels: PackedPanels | TransformedFilters | None = None


@dataclass
class KernelState:
    """What rendering one kernel accumulates (a fresh record per kernel: `start_kernel`)."""

    kernel: LoopKernel  # or a GpuKernel (catenc/lower/gpu.py)
    buffers: dict[str, BufferArg]
    params: list[str] = dataclasses.field(default_factory=list)  # the kernel's, which its row functions repeat
    functions: list[str] = dataclasses.field(default_factory=list)  # helpers rendered before it (rows, gemm packing)
    hoisted: list[str] = dataclasses.field(default_factory=list)  # locals the current statement's values need first
    statement: int = 0  # statements begun: tells the hoisted locals of different statements apart
    nesting: int = 0  # how deep the value being rendered sits in its expression
    guarded: int = 0  # how many `where` branches enclose it (their reads stay inside the branch)


PACK_CHUNK = 16  # int8 panels packed together: a depth step's row spans them (templates/gemm.c.j2 q8 layout)
MASK = "catenc_mask"  # a MaskedRow walk's masks: [combination of guard indices][panel position]
SCALAR_LOOP = "CATENC_SCALAR_LOOP"  # the prelude's request not to vectorise the loop that follows
SIMD_LOOP = "CATENC_SIMD_LOOP"  # ... and to vectorise it (its iterations are independent)


def _table(name: str) -> str:
    """A MaskedRow walk's table of axis `name`'s index at each position of the panel."""
    return f"catenc_tab_{name}"


def _panel_width(call: GemmCall, side: PackSide) -> str:
    """The C macro of the width of one operand's panels: MR or NR of the gemm's kind."""
    return f"CATENC_GEMM_{side.width}_{call.contraction.kind}"


def _panel_depth(group: int) -> str:
    """A panel's depth in C: the slice's steps (catenc_kb), rounded up to whole groups."""
    return "catenc_kb" if group == 1 else f"((catenc_kb + {group - 1}) / {group} * {group})"


class CRenderer:
    """Renders kernels as C99 functions. Subclasses change spellings, not structure; a method
    a subclass overrides replaces its entry in the dispatch tables (catenc/dispatch.py)."""

    language = "c"
    work_groups = False  # renders GPU work-group kernels (catenc/lower/gpu.py), not loop nests
    # Names (codegen/names.py): the user names the generated code renames; those model.h, which
    # is C and C++, renames in its declarations (where only keywords, macros and types break a
    # parameter's name); and those an entry, a function of the file, cannot take.
    reserved = Reserved(C_NAMES | C_LOCALS)
    header_reserved = Reserved(C_KEYWORDS | C_MACROS_AND_TYPES | CXX_KEYWORDS)
    entry_reserved = Reserved(C_NAMES | CXX_KEYWORDS)
    indent = "    "
    kernel_qualifier = "static void"
    restrict = "restrict"
    # Threads (docs/abi.md, "Threads"): an entry call opens one parallel region and runs every kernel
    # on its team, which takes the kernels' work in chunks (templates/work.c.j2). A kernel the schedule
    # runs on threads cuts its parallel loop into a few chunks per thread (one below the kernel's work
    # threshold); any other is one chunk. Without OpenMP the same loops run every chunk in order.
    # A batch of small products runs one product per thread (at most this many), each with its own panels.
    batch_slots = 2
    compute_ctype = {"f16": "float", "bf16": "float", "bool": "uint8_t"}
    load_conversion = {"f16": "catenc_f16_to_f32({0})", "bf16": "catenc_bf16_to_f32({0})"}
    store_conversion = {
        "f16": "catenc_f32_to_f16({0})",
        "bf16": "catenc_f32_to_bf16({0})",
        "bool": "(uint8_t)({0})",
    }
    float_suffix = {"f32": "f", "f64": ""}  # of literals
    math_suffix = {"f32": "f", "f64": ""}  # of libm function names (expf, exp)
    global_space = ""  # address space of the buffers a kernel takes
    # The primitives' spellings (catenc/registry.py): on float operands, on integer ones (their
    # arithmetic wraps: computed in the unsigned type), comparisons of any dtype, bool operands.
    unary_float = registry.unary_spellings("float")
    # Transcendentals of values computed in float: branch-free polynomials the loop vectoriser
    # can inline (templates/vecmath.c.j2 states each one's accuracy), not a libm call per element.
    vector_math_f32 = registry.vector_math_f32()
    binary_float = registry.binary_spellings("float")
    binary_int = registry.binary_spellings("int")
    unary_int = registry.unary_spellings("int")
    compare = registry.binary_spellings("any")
    bool_ops = registry.spellings("bool")
    # How each kind of node renders: value -> C expression; statement -> lines; a statement of
    # straight-line code in a frame of its own (the lane loops') -> lines.
    EXPRESSIONS: Table[Callable[..., str]] = Table("CRenderer.expression")
    STATEMENTS: Table[Callable[..., None]] = Table("CRenderer.statement")
    STRAIGHT: Table[Callable[..., list[str]]] = Table("CRenderer.straight")

    def __init__(self) -> None:
        self.state: KernelState | None = None  # of the kernel being rendered

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.EXPRESSIONS = cls.EXPRESSIONS.rebound(cls)
        cls.STATEMENTS = cls.STATEMENTS.rebound(cls)
        cls.STRAIGHT = cls.STRAIGHT.rebound(cls)

    # ---- types and literals ----
    def ctype(self, dtype: DType) -> str:
        """The C type a value of dtype is computed in."""
        return self.compute_ctype.get(dtype.name, dtype.ctype)

    def unsigned(self, dtype: DType) -> str:
        return "uint64_t" if dtype.bits == 64 else "uint32_t"

    def literal(self, value: bool | int | float, dtype: DType) -> str:
        if dtype.name == "bool":
            return "1" if value else "0"
        if dtype.is_float:
            return self.float_literal(float(value), dtype)
        value = int(value)
        if dtype.name == "i64" and value == -(1 << 63):
            return "(-9223372036854775807LL - 1)"
        if dtype.kind == "uint":
            return f"{value}u" + ("LL" if dtype.bits == 64 else "")
        if dtype.bits == 64:
            return f"{value}LL"
        if dtype.bits == 32 and value == -(1 << 31):
            return "(-2147483647 - 1)"
        return str(value)

    def float_literal(self, value: float, dtype: DType) -> str:
        suffix = self.float_suffix.get(dtype.name, "f")
        if math.isnan(value):
            return "NAN" if suffix else "(double)NAN"
        if math.isinf(value):
            text = "INFINITY" if suffix else "(double)INFINITY"
            return text if value > 0 else f"(-{text})"
        if suffix:
            with np.errstate(over="ignore"):  # a literal beyond f32's range is inf, as in numpy
                value = float(np.float32(value))
            if math.isinf(value):
                return self.float_literal(value, dtype)
        text = repr(value)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}{suffix}" if not text.startswith("-") else f"({text}{suffix})"

    # ---- values ----
    max_nesting = 48  # compilers limit bracket nesting (clang: 256); deeper values go to locals

    def value(self, v: Value) -> str:
        """The C expression of a value; a value nested too deeply is computed into a local first
        (never one under a where branch, whose reads must stay guarded)."""
        state = self.state
        state.nesting += 1
        try:
            if state.nesting > self.max_nesting and not state.guarded and v.children():
                return self.hoist(v)
            return self.expression(v)
        finally:
            state.nesting -= 1

    def hoist(self, v: Value) -> str:
        state = self.state
        saved, state.nesting = state.nesting, 0
        try:
            text = self.expression(v)
        finally:
            state.nesting = saved
        name = f"catenc_t{len(state.hoisted)}_{state.statement}"
        state.hoisted.append(f"{self.ctype(v.dtype)} {name} = {text};")
        return name

    def expression(self, v: Value) -> str:
        return self.EXPRESSIONS[type(v)](self, v)

    @EXPRESSIONS.register(Local)
    def local(self, v: Local) -> str:
        return v.name

    @EXPRESSIONS.register(Const)
    def const(self, v: Const) -> str:
        return self.literal(v.value, v.dtype)

    @EXPRESSIONS.register(SymInt)
    def symint(self, v: SymInt) -> str:
        text = f"({v.expr.to_c()})"  # an operand of whatever operator surrounds it
        return text if v.dtype.name == "i64" else f"(({self.ctype(v.dtype)}){text})"

    @EXPRESSIONS.register(Where)
    def where(self, v: Where) -> str:
        cond = self.value(v.cond)
        self.state.guarded += 1
        try:
            return f"({cond} ? {self.value(v.a)} : {self.value(v.b)})"
        finally:
            self.state.guarded -= 1

    def spell(self, template: str, args: list[str], dtype: DType) -> str:
        return template.format(
            *args,
            t=dtype.name,
            c=self.ctype(dtype),
            u=self.unsigned(dtype) if dtype.is_int else "",
            s=self.math_suffix.get(dtype.name, self.math_suffix["f32"]),
            one=self.literal(1.0, dtype) if dtype.is_float else "1",
        )

    @EXPRESSIONS.register(Unary)
    def unary(self, v: Unary) -> str:
        dtype = v.x.dtype
        vector_math = self.state.kernel.decisions.vector_math and self.ctype(dtype) == "float"
        if vector_math and v.op == "exp" and isinstance(v.x, Binary) and v.x.op == "min" and v.x.b == Const(dtype, 0.0):
            return f"catenc_vexp_le0_f32({self.value(v.x.a)})"  # exp(min(a, 0)), without overflow handling
        if vector_math and (a := sigmoid_argument(v)) is not None:
            return f"catenc_vsigmoid_f32({self.value(a)})"  # one cheap exp of -|a| and a division
        arg = self.value(v.x)
        if dtype.name == "bool":
            return self.spell(self.bool_ops[v.op], [arg], dtype)
        if vector_math and v.op in self.vector_math_f32:
            return self.vector_math_f32[v.op].format(arg)
        table = self.unary_float if dtype.is_float else self.unary_int
        return self.spell(table[v.op], [arg], dtype)

    @EXPRESSIONS.register(Binary)
    def binary(self, v: Binary) -> str:
        dtype = v.a.dtype
        args = [self.value(v.a), self.value(v.b)]
        if v.op in self.compare:
            return self.spell(self.compare[v.op], args, dtype)
        if dtype.name == "bool":
            if v.op in ("max", "min"):
                return self.spell(self.bool_ops["or" if v.op == "max" else "and"], args, dtype)
            return self.spell(self.bool_ops[v.op], args, dtype)
        table = self.binary_float if dtype.is_float else self.binary_int
        return self.spell(table[v.op], args, dtype)

    @EXPRESSIONS.register(Cast)
    def cast(self, v: Cast) -> str:
        source, target = v.x.dtype, v.dtype
        arg = self.value(v.x)
        if target.name == "bool":
            return f"(uint8_t)({arg} != 0)"
        if source.is_float and target.is_int:  # saturating; a float stays a float (16 lanes, not 8)
            if self.ctype(source) == "float":
                return f"catenc_cast_{target.name}_f32({arg})"
            return f"catenc_cast_{target.name}((double){arg})"
        return f"(({self.ctype(target)}){arg})"

    def flat_index(self, index: tuple[Expr, ...], shape: tuple[Expr, ...]) -> str:
        return flatten(index, shape).to_c()

    @EXPRESSIONS.register(Load)
    def load(self, v: Load) -> str:
        buf = self.state.buffers[v.buffer]
        flat = self.flat_index(v.index, buf.shape)
        if isinstance(v, Gather):  # index[axis] is 0 in v.index: add the computed position's offset
            stride = product(buf.shape[v.axis + 1 :]).to_c()
            flat = f"{flat} + {self.value(v.position)}*({stride})"
        text = f"{v.buffer}[{flat}]"
        conversion = self.load_conversion.get(buf.dtype.name)
        return conversion.format(text) if conversion else text

    # ---- statements and kernels ----
    def kernel(self, kernel: LoopKernel, buffers: dict[str, BufferArg]) -> str:
        """The kernel's C function, preceded by the helper functions it calls (gemm packing)."""
        state = self.start_kernel(kernel, buffers)
        state.params = [self.buffer_param(buffers[name]) for name in kernel.buffers]
        state.params += [f"int64_t {s}" for s in kernel.symbols]
        lines = [f"{self.kernel_qualifier} {kernel.name}({', '.join(state.params) or 'void'})", "{"]
        if shares_work(kernel):
            self.statements(kernel.body, 1, lines, True)
        else:  # one chunk: the thread that takes it runs the kernel
            body: list[str] = []
            self.statements(kernel.body, 3, body, False)
            lines += self.chunk_loop("1", body, self.indent)
        lines.append("}")
        return "\n\n".join(state.functions + ["\n".join(lines)])

    def start_kernel(self, kernel, buffers: dict[str, BufferArg]) -> KernelState:
        """The state of rendering one kernel: its buffers, and no locals or helpers yet."""
        self.state = KernelState(kernel, buffers)
        return self.state

    def buffer_param(self, buf: BufferArg) -> str:
        const = "const " if buf.const else ""
        return f"{self.global_space}{const}{buf.dtype.ctype}* {self.restrict} {buf.name}"

    def statements(self, body: tuple[Stmt, ...], depth: int, lines: list[str], parallel: bool) -> None:
        pad = self.indent * depth
        state = self.state
        for stmt in body:
            hoisted = state.hoisted = []  # locals this statement's own expressions need
            state.statement += 1
            mark = len(lines)
            self.statement(stmt, pad, depth, lines, parallel)
            lines[mark:mark] = [f"{pad}{line}" for line in hoisted]

    def statement(self, stmt: Stmt, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        self.STATEMENTS[type(stmt)](self, stmt, pad, depth, lines, parallel)

    @STATEMENTS.register(For)
    def loop(self, stmt: For, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        if stmt.parallel and parallel:
            self.parallel_loop(stmt, pad, lines)
            return
        extent = stmt.extent.to_c()
        if stmt.scalar:
            lines.append(f"{pad}{SCALAR_LOOP}")
        lines.append(f"{pad}for (int64_t {stmt.index} = 0; {stmt.index} < {extent}; ++{stmt.index}) {{")
        self.statements(stmt.body, depth + 1, lines, parallel)
        lines.append(f"{pad}}}")

    @STATEMENTS.register(If)
    def branch(self, stmt: If, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        lines.append(f"{pad}if ({self.value(stmt.cond)}) {{")
        self.statements(stmt.body, depth + 1, lines, parallel)
        lines.append(f"{pad}}}")

    @STATEMENTS.register(Declare)
    def declare(self, stmt: Declare, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        lines.append(f"{pad}{self.ctype(stmt.dtype)} {stmt.name} = {self.value(stmt.value)};")

    @STATEMENTS.register(Assign)
    def assign(self, stmt: Assign, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        lines.append(f"{pad}{stmt.name} = {self.value(stmt.value)};")

    @STATEMENTS.register(Store)
    def store(self, stmt: Store, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        buf = self.state.buffers[stmt.buffer]
        value = self.value(stmt.value)
        conversion = self.store_conversion.get(buf.dtype.name)
        if conversion:
            value = conversion.format(value)
        lines.append(f"{pad}{stmt.buffer}[{self.flat_index(stmt.index, buf.shape)}] = {value};")

    @STATEMENTS.register(PaddedPlane)
    def padded_plane(self, stmt: PaddedPlane, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        """The local array filled with the padding value, then the plane's values written in, a
        row at a time (a group of `phases` consecutive columns per step: one interleaved read,
        not a strided one per phase); the loads that follow read it as a buffer of its shape."""
        (rows, cols), (top, left), phases = stmt.shape, stmt.offset, stmt.phases
        (height, width), ctype = stmt.plane, self.ctype(stmt.value.dtype)
        r, c, i = f"{stmt.name}_r", f"{stmt.name}_c", self.indent

        def copy(column: int, group: str, inner: str) -> list[str]:
            """The statement writing plane column group*phases + column (group: a C index, or
            none) to its phase and position in the copy."""
            at = column + left
            target = f"({at % phases * rows} + {r} + {top})*{cols} + {at // phases}"
            position = const(column) + (sym(group) * phases if group else 0)
            if group:
                target = f"{target} + {group}"
            value = substitute(stmt.value, {PLANE_ROW: sym(r), PLANE_COL: position})
            return self.assignment(f"{stmt.name}[{target}]", value, inner)

        groups, size = width // phases, phases * rows * cols
        fill = self.literal(stmt.fill.value, stmt.fill.dtype)
        lines += [f"{pad}{ctype} {stmt.name}[{size}];"]
        for start, length, count, stride in plane_border(stmt):  # the padding: the values cover the rest
            run = f"for (int64_t {c} = 0; {c} < {length}; ++{c}) {stmt.name}[{start} + {r} * {stride} + {c}] = {fill};"
            lines.append(f"{pad}for (int64_t {r} = 0; {r} < {count}; ++{r}) {run}")
        lines += [
            f"{pad}for (int64_t {r} = 0; {r} < {height}; ++{r}) {{",
            f"{pad}{i}for (int64_t {c} = 0; {c} < {groups}; ++{c}) {{",
            *[line for p in range(phases) for line in copy(p, c, pad + i * 2)],
            f"{pad}{i}}}",
            *[line for q in range(width % phases) for line in copy(groups * phases + q, "", pad + i)],
            f"{pad}}}",
        ]
        plane = BufferArg(stmt.name, stmt.value.dtype, (const(phases), const(rows), const(cols)), const=False)
        self.state.buffers = {**self.state.buffers, stmt.name: plane}

    def chunk_loop(self, chunks: str, body: list[str], pad: str, before: tuple[str, ...] = ()) -> list[str]:
        """A construct of `chunks` chunks (templates/work.c.j2) around `body` (indented two levels
        deeper than `pad`), which reads its chunk as `catenc_c`; `before`: declarations ahead of it."""
        i = self.indent
        first, next_chunk = "catenc_chunk_first(catenc_chunks)", "catenc_chunk_next(catenc_c, catenc_chunks)"
        loop = f"int64_t catenc_c = {first}; catenc_c >= 0; catenc_c = {next_chunk}"
        return [
            f"{pad}{{",
            *(f"{pad}{i}{line}" for line in before),
            f"{pad}{i}const int64_t catenc_chunks = {chunks};",
            f"{pad}{i}for ({loop}) {{",
            *body,
            f"{pad}{i}}}",
            f"{pad}{i}catenc_chunk_end(catenc_chunks);",
            f"{pad}}}",
        ]

    def parallel_loop(self, loop: For, pad: str, lines: list[str]) -> None:
        """A parallel loop whose body is a function of its own: the body keeps its restrict
        pointers (an OpenMP-outlined body loses them, and with them vector registers)."""
        state = self.state
        row = f"{state.kernel.name}_row{len(state.functions)}"
        body = [f"static void {row}({', '.join(state.params + [f'int64_t {loop.index}'])})", "{"]
        self.statements(loop.body, 1, body, False)
        body.append("}")
        state.functions.append("\n".join(body))
        args = ", ".join([*state.kernel.buffers, *state.kernel.symbols, loop.index])
        extent, work = loop.extent.to_c(), state.kernel.work.to_c()
        worth = f"({work}) >= {state.kernel.decisions.parallel_work}"
        i, index = self.indent, loop.index
        body = [
            f"{pad}{i * 2}int64_t catenc_lo, catenc_hi;",
            f"{pad}{i * 2}catenc_chunk_span(catenc_extent, catenc_chunks, catenc_c, &catenc_lo, &catenc_hi);",
            f"{pad}{i * 2}for (int64_t {index} = catenc_lo; {index} < catenc_hi; ++{index}) {row}({args});",
        ]
        before = (f"const int64_t catenc_extent = {extent};",)
        lines += self.chunk_loop(f"catenc_loop_chunks(catenc_extent, {worth})", body, pad, before)

    def assignment(self, target: str, v: Value, pad: str, conversion: str = "{0}") -> list[str]:
        """`target = v;` with the locals v's rendering hoisted, as lines (for statements that
        render their values inside loops of their own); `conversion` spells the stored value."""
        state = self.state
        state.statement += 1
        saved, state.hoisted = state.hoisted, []
        try:
            text = conversion.format(self.value(v))
            return [f"{pad}{line}" for line in state.hoisted] + [f"{pad}{target} = {text};"]
        finally:
            state.hoisted = saved

    @STATEMENTS.register(LaneReduce)
    def lane_reduce(self, stmt: LaneReduce, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        """The loops lowering gives the statement (catenc/lower/lanes.py), in their frame."""
        loops = expand_lanes(stmt, self.state.buffers)
        ctype, i, n, extent = self.ctype(loops.dtype), self.indent, loops.lanes, loops.extent.to_c()
        start = self.value(loops.start)
        lines += [
            f"{pad}{{",
            f"{pad}{i}{ctype} {LANES}[{loops.count}][{n}];",
            f"{pad}{i}const int64_t {FULL} = ({extent}) - ({extent}) % {n};",
            f"{pad}{i}for (int64_t {LANE} = 0; {LANE} < {n}; ++{LANE}) {{",
            *[f"{pad}{i * 2}{lane(k, LANE)} = {start};" for k in range(loops.count)],
            f"{pad}{i}}}",
            f"{pad}{i}for (int64_t {BASE} = 0; {BASE} < {FULL}; {BASE} += {n}) {{",
            *[f"{pad}{i * 2}CATENC_PREFETCH({buffer}, {flat.to_c()});" for buffer, flat in loops.prefetches],
            f"{pad}{i * 2}for (int64_t {LANE} = 0; {LANE} < {n}; ++{LANE}) {{",
            f"{pad}{i * 3}const int64_t {loops.index} = {BASE} + {LANE};",
            *self.straight(loops.body, pad + i * 3),
            f"{pad}{i * 2}}}",
            f"{pad}{i}}}",
            f"{pad}{i}for (int64_t {loops.index} = {FULL}; {loops.index} < {extent}; ++{loops.index}) {{",
            *self.straight(loops.tail, pad + i * 2),
            f"{pad}{i}}}",
            f"{pad}{i}for (int64_t {WIDTH} = {n // 2}; {WIDTH} > 0; {WIDTH} /= 2)",
            f"{pad}{i * 2}for (int64_t {LANE} = 0; {LANE} < {WIDTH}; ++{LANE}) {{",
            *self.straight(loops.combine, pad + i * 3),
            f"{pad}{i * 2}}}",
            *self.straight(loops.finish, pad + i),
            f"{pad}}}",
        ]

    def straight(self, body: tuple[Stmt, ...], pad: str) -> list[str]:
        """Straight-line statements inside a frame of their own (a declaration is const), each
        with the locals its value needs hoisted before it."""
        return [line for stmt in body for line in self.STRAIGHT[type(stmt)](self, stmt, pad)]

    @STRAIGHT.register(Declare)
    def straight_declare(self, stmt: Declare, pad: str) -> list[str]:
        return self.assignment(f"const {self.ctype(stmt.dtype)} {stmt.name}", stmt.value, pad)

    @STRAIGHT.register(Assign)
    def straight_assign(self, stmt: Assign, pad: str) -> list[str]:
        return self.assignment(stmt.name, stmt.value, pad)

    @STRAIGHT.register(Store)
    def straight_store(self, stmt: Store, pad: str) -> list[str]:
        flat = self.flat_index(stmt.index, self.state.buffers[stmt.buffer].shape)
        return [f"{pad}{stmt.buffer}[{flat}] = {self.value(stmt.value)};"]

    # ---- contractions: packing functions and one call of the gemm driver ----
    @STATEMENTS.register(Gemm)
    def gemm(self, stmt: Gemm, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        """The call lowering gives the statement (catenc/lower/gemm.py): its helper functions,
        then the batch loop around the driver and the epilogue."""
        state = self.state
        panels = {n: arg.panels for n, arg in state.buffers.items() if arg.panels is not None}
        call = gemm_call(stmt, state.kernel, state.buffers, parallel, panels)
        c = call.contraction
        name = f"{state.kernel.name}_g{len(state.functions)}"
        state.functions.append(self.gemm_context(name, call.fields))
        packed = {"a": call.packed_a, "b": call.packed_b}  # panels packed at compile time: no packing function
        state.functions += [self.pack_function(name, call, side) for side in call.sides if packed[side.side] is None]
        if call.epilogue is not None:
            state.functions.append(self.epilogue_function(name, call))
        t, i = c.kind, self.indent
        init = ", ".join(f".{f.name} = {f.name}" for f in call.fields)
        out = f"{c.output} + ({c.offset.to_c()})"
        rows, cols, depth = call.rows.to_c(), call.cols.to_c(), call.depth.to_c()
        per = call.slot_align
        slot = f"((catenc_gemm_pack_elements_{t}({rows}, {cols}, {depth}) + {per - 1}) / {per} * {per})"
        pack = f"{call.pack} + catenc_slot * {slot}"
        epilogue = f"{name}_epilogue" if call.epilogue is not None else "0"  # the driver applies it per block
        args = [rows, cols, depth, "0", "0", "0", f"{name}_pack_a", f"{name}_pack_b", "&catenc_ctx", epilogue, out]
        if call.direct_a is not None:  # A read in place: its buffer and row stride
            direct = call.direct_a
            at = direct.buffer if direct.offset == ZERO else f"{direct.buffer} + ({direct.offset.to_c()})"
            args[3:5] = [at, f"{direct.lda}LL"]
        if call.packed_b is not None:  # B's panels packed at compile time, after its constant's values
            args[5], args[7] = f"{call.packed_b.source.buffer} + {call.packed_b.at}LL", "0"
        if call.packed_a is not None:
            args[6] = "0"
        args += [c.row_stride.to_c(), c.col_stride.to_c(), pack, "catenc_shared"]
        if KINDS[c.kind].group > 1:  # an int8 gemm's A panels packed at compile time, or 0
            packed_a = call.packed_a
            args.append("0" if packed_a is None else f"{packed_a.source.buffer} + {packed_a.at}LL")
        lines += [f"{pad}{{", f"{pad}{i}const int64_t catenc_count = {call.count.to_c()};"]
        # Every thread of the team runs this statement (`parallel`): a batch of small products runs
        # one product per thread (catenc_apart), else the team shares each product and its epilogue.
        if call.batch_parallel:
            slots = self.batch_slots
            apart = f"CATENC_GEMM_APART(catenc_count, {rows}, {cols}, {depth}, {slots}, catenc_team_size())"
            lines += [
                f"{pad}{i}const int catenc_apart = {apart};",
                f"{pad}{i}const int catenc_ways = catenc_apart ? CATENC_GEMM_WAYS({slots}) : 1;",
                f"{pad}{i}const int catenc_slot = catenc_apart ? catenc_thread_index() : 0;",
                f"{pad}{i}const int catenc_shared = !catenc_apart;",
                f"{pad}{i}if (catenc_apart) catenc_work_wait(); /* what the chunks before wrote */",
            ]
        else:
            shared = "1" if parallel else "0"
            lines += [f"{pad}{i}const int catenc_ways = 1, catenc_slot = 0, catenc_shared = {shared};"]
        lines += [
            f"{pad}{i}for (int64_t catenc_b = catenc_slot; catenc_slot < catenc_ways && catenc_b < catenc_count;"
            " catenc_b += catenc_ways) {",
            *[f"{pad}{i * 2}{line}" for line in self.indices(call.batch, "catenc_b", const=True)],
            f"{pad}{i * 2}const struct {name}_ctx catenc_ctx = {{{init}}};",
            f"{pad}{i * 2}catenc_gemm_call_{t}({', '.join(args)});",
        ]
        lines.append(f"{pad}{i}}}")
        if call.batch_parallel:  # products apart are split by thread numbers, not chunks: the team meets
            lines += [f"{pad}{i}if (catenc_apart) {{", f"{pad}{i * 2}CATENC_GEMM_BARRIER();", f"{pad}{i}}}"]
        lines.append(f"{pad}}}")

    @STATEMENTS.register(WinogradGemm)
    def winograd(self, stmt: WinogradGemm, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        """A Winograd convolution (codegen/winograd.py): per batch element, one call of its driver on
        that element's input and output, with the contraction's epilogue as a function."""
        state = self.state
        call = gemm_call(stmt, state.kernel, state.buffers, parallel, {})
        c, plan, layout, conv = call.contraction, stmt.plan, stmt.layout, stmt.plan.conv
        name = f"{state.kernel.name}_g{len(state.functions)}"
        state.functions.append(self.gemm_context(name, call.fields))
        epilogue = "0"
        if call.epilogue is not None:
            state.functions.append(self.epilogue_function(name, call))
            epilogue = f"{name}_epilogue"
        i = self.indent
        init = ", ".join(f".{f.name} = {f.name}" for f in call.fields)
        fields = [
            conv.input,
            conv.input_at.to_c(),
            f"{conv.channel_stride}LL",
            f"{conv.input_row_stride}LL",
            *(f"{n}LL" for n in (*conv.rows, *conv.cols)),
            conv.weight,
            f"{conv.weight_at}LL",
            *(f"{n}LL" for n in conv.weight_strides),
            self.transformed_filters(conv.weight, stmt.pack),
            *(f"{n}LL" for n in (conv.channels, conv.filters, conv.height, conv.width)),
            f"{c.output} + ({c.offset.to_c()})",
            c.row_stride.to_c(),
            epilogue,
            "&catenc_ctx",
            f"{plan.block_rows}LL",
            stmt.pack,
            *(
                f"{n}LL"
                for n in (layout.slot, layout.at_slots, layout.at_m, layout.at_pack, layout.at_x, layout.x_size)
            ),
            str(layout.slots),
            str(layout.gathers),
        ]
        lines += [
            f"{pad}{{",
            f"{pad}{i}for (int64_t catenc_b = 0; catenc_b < {call.count.to_c()}; ++catenc_b) {{",
            *[f"{pad}{i * 2}{line}" for line in self.indices(call.batch, "catenc_b", const=True)],
            f"{pad}{i * 2}const struct {name}_ctx catenc_ctx = {{{init}}};",
            f"{pad}{i * 2}const catenc_wino_f32 catenc_wino = {{{', '.join(fields)}}};",
            f"{pad}{i * 2}catenc_wino{plan.transform.m}_f32(&catenc_wino, {1 if parallel else 0});",
            f"{pad}{i}}}",
            f"{pad}}}",
        ]

    def transformed_filters(self, weight: str, pack: str) -> str:
        """A Winograd convolution's `u`: its filters transformed at compile time (codegen/prepack.py),
        else those the first batch element's call transforms into the workspace (0 for that call)."""
        found = self.state.buffers[weight].panels
        if isinstance(found, TransformedFilters):
            return f"{weight} + {found.at}LL"
        return f"catenc_b > 0 ? {pack} : 0"

    def field_type(self, field: ContextField) -> str:
        if field.dtype is None:
            return "int64_t"
        return f"{field.dtype.ctype}*" if field.writable else f"const {field.dtype.ctype}*"

    def gemm_context(self, name: str, fields: tuple[ContextField, ...]) -> str:
        members = "".join(f" {self.field_type(f)} {f.name};" for f in fields)
        return f"struct {name}_ctx {{{members or ' int catenc_unused;'} }};"

    def unpack_context(self, name: str, fields: tuple[ContextField, ...]) -> list[str]:
        """The first lines of a gemm helper: the context's fields as locals of their own names."""
        i = self.indent
        lines = [f"{i}const struct {name}_ctx* catenc_c = (const struct {name}_ctx*)catenc_ctx;"]
        for field in fields:
            restrict = f" {self.restrict}" if field.dtype is not None else ""
            lines.append(f"{i}{self.field_type(field)}{restrict} {field.name} = catenc_c->{field.name};")
            lines.append(f"{i}(void){field.name};")
        return lines

    def epilogue_function(self, name: str, call: GemmCall) -> str:
        """Applies the fused epilogue in place to rows [m0, m0+mb) x columns [n0, n0+nb)."""
        c, i = call.contraction, self.indent
        pad = i * 2
        element = f"{c.output}[{call.position.to_c()}]"
        return "\n".join(
            [
                f"static void {name}_epilogue(const void* catenc_ctx, int64_t catenc_m0, int64_t catenc_mb, "
                "int64_t catenc_n0, int64_t catenc_nb)",
                "{",
                *self.unpack_context(name, call.fields),
                f"{i}for (int64_t catenc_m = catenc_m0; catenc_m < catenc_m0 + catenc_mb; ++catenc_m) {{",
                *[f"{pad}{line}" for line in self.indices(call.row_indices, "catenc_m", const=True)],
                *self.odometer_loop(
                    call.epilogue,
                    "catenc_n0",
                    "catenc_j",
                    "catenc_nb",
                    element,
                    pad,
                    prologue=[f"const {self.ctype(c.dtype)} {ACC} = {element};"],
                ),
                f"{i}}}",
                "}",
            ]
        )

    def pack_function(self, name: str, call: GemmCall, side: PackSide) -> str:
        """Packs panels of one operand for the driver: position j of panel p at depth k goes to
        out[k*width + j], zero past the end. Depth outside, positions inside: each depth step
        writes one contiguous row of the panel (A's rows and B's columns alike). An int8 kind's
        panels hold groups of depth steps (word_pack_body, chunked_pack_body)."""
        c = call.contraction
        value = side.fill.value
        ctype, i = self.ctype(value.dtype), self.indent
        width, extent = _panel_width(call, side), side.extent.to_c()
        group = KINDS[c.kind].group
        head = [
            f"static void {name}_pack_{side.side}(const void* catenc_ctx, "
            f"{'void' if group > 1 else ctype}* catenc_dst, int64_t catenc_first,",
            f"{i * 2}int64_t catenc_panels, int64_t catenc_k0, int64_t catenc_kb)",
            "{",
            *self.unpack_context(name, call.fields),
        ]
        if group > 1 and side.runs is None:
            return "\n".join(head + self.chunked_pack_body(call, side, ctype, group) + ["}"])
        start = "catenc_dst" if group == 1 else f"({ctype}*)catenc_dst"
        body = [
            f"{i}for (int64_t catenc_p = 0; catenc_p < catenc_panels; ++catenc_p) {{",
            f"{i * 2}{ctype}* {self.restrict} catenc_out = {start} + catenc_p * {_panel_depth(group)} * {width};",
            f"{i * 2}const int64_t catenc_n0 = (catenc_first + catenc_p) * {width};",
            f"{i * 2}const int64_t catenc_valid = {extent} - catenc_n0 < {width} ? {extent} - catenc_n0 : {width};",
        ]
        if group == 1:
            body += self.guard_masks(side.fill, width, i * 2)
            body += self.depth_step(call, side, "catenc_k0 + catenc_k", "catenc_out[catenc_k * {w} + catenc_j]", 2)
        else:
            body += self.word_pack_body(side, ctype, group, width)
        return "\n".join(head + body + [f"{i}}}", "}"])

    def depth_step(
        self, call: GemmCall, side: PackSide, depth: str, out: str, level: int, span: str | None = None
    ) -> list[str]:
        """`for catenc_k < catenc_kb`: the panel row of depth step `depth` into `out` ({w}: the
        panel's width), zero past the valid positions up to `span` (None: the width)."""
        i, width, walk = self.indent, _panel_width(call, side), side.fill
        out, pad = out.format(w=width), i * (level + 1)
        masked = walk.masked  # its masks were made for the panels (guard_masks)
        if masked:
            row = self.masked_row(masked, out, pad)
        elif side.cases:  # a select along the depth: each step's row walks one of its sides
            row = []
            for n, case in enumerate(side.cases):
                row += self.assignment(f"const unsigned char catenc_case{n}", case.cond, pad, "(unsigned char){0}")
            for n, case in enumerate(side.cases):
                row.append(f"{pad}{'if' if n == 0 else '} else if'} (catenc_case{n}) {{")
                row += self.odometer_loop(case.fill, "catenc_n0", "catenc_j", "catenc_valid", out, pad + i)
            row.append(f"{pad}}} else {{")
            row += self.odometer_loop(walk, "catenc_n0", "catenc_j", "catenc_valid", out, pad + i)
            row.append(f"{pad}}}")
        else:
            row = self.odometer_loop(walk, "catenc_n0", "catenc_j", "catenc_valid", out, pad)
        return [
            f"{i * level}for (int64_t catenc_k = 0; catenc_k < catenc_kb; ++catenc_k) {{",
            f"{pad}const int64_t catenc_q = {depth};",
            *[f"{pad}{line}" for line in self.indices(call.depth_indices, "catenc_q", const=True)],
            *row,
            f"{pad}for (int64_t catenc_j = catenc_valid; catenc_j < {span or width}; ++catenc_j) {out} = 0;",
            f"{i * level}}}",
        ]

    def guard_masks(self, walk: Odometer, width: str, pad: str) -> list[str]:
        """A MaskedRow walk's masks for the `width` positions from catenc_n0 (a panel's, or an int8
        chunk's): the guard at each valid position (its axes' indices tabled first) for each
        combination of the depth indices it reads; none for another walk."""
        i, (last, extent), rows = self.indent, walk.last, walk.masked
        if rows is None:
            return []
        names = [name for name, _ in walk.carried] + [last]
        return [
            f"{pad}unsigned char {MASK}[{rows.masks}][{width}];",
            f"{pad}{{",
            *[f"{pad}{i}int64_t {_table(name)}[{width}];" for name in names],
            *[f"{pad}{i}{line}" for line in self.indices(walk.begin, "catenc_n0", const=False)],
            f"{pad}{i}for (int64_t catenc_j = 0; catenc_j < catenc_valid; ++catenc_j) {{",
            *[f"{pad}{i * 2}{_table(name)}[catenc_j] = {name};" for name, _ in walk.carried],
            f"{pad}{i * 2}{_table(last)}[catenc_j] = {AT};",
            f"{pad}{i * 2}if (++{AT} == {extent.to_c()}) {{",
            f"{pad}{i * 3}{AT} = 0;",
            f"{pad}{i * 3}{self.carry(walk.carried)}",
            f"{pad}{i * 2}}}",
            f"{pad}{i}}}",
            f"{pad}{i}for (int64_t catenc_g = 0; catenc_g < {rows.masks}; ++catenc_g) {{",
            *[f"{pad}{i * 2}{line}" for line in self.indices(unflatten(rows.guard_axes), "catenc_g", const=True)],
            f"{pad}{i * 2}for (int64_t catenc_j = 0; catenc_j < catenc_valid; ++catenc_j) {{",
            *[f"{pad}{i * 3}const int64_t {name} = {_table(name)}[catenc_j];" for name in names],
            *self.assignment(f"{MASK}[catenc_g][catenc_j]", rows.value.cond, pad + i * 3, "(unsigned char){0}"),
            f"{pad}{i * 2}}}",
            f"{pad}{i}}}",
            f"{pad}}}",
        ]

    def masked_row(self, rows: MaskedRow, target: str, pad: str) -> list[str]:
        """A MaskedRow walk's panel row at a depth step: the inside, read along the flattened
        position, where the step's mask is set; an OpenMP simd loop (gcc -O2 vectorises it only
        so: without, it packed 56-wide rows 1.7x slower than the runs did)."""
        i = self.indent
        mask = f"{MASK}[{flatten([sym(n) for n, _ in rows.guard_axes], [e for _, e in rows.guard_axes]).to_c()}]"
        chosen = Where(rows.value.dtype, Local(BOOL, "catenc_on"), rows.value.a, rows.value.b)
        return [
            f"{pad}{SIMD_LOOP}",
            f"{pad}for (int64_t catenc_j = 0; catenc_j < catenc_valid; ++catenc_j) {{",
            f"{pad}{i}const int64_t {rows.flat} = catenc_n0 + catenc_j;",
            f"{pad}{i}const unsigned char catenc_on = {mask}[catenc_j];",
            *self.assignment(target, chosen, pad + i),
            f"{pad}}}",
        ]

    def word_pack_body(self, side: PackSide, ctype: str, group: int, width: str) -> list[str]:
        """An int8 panel of an operand whose depth steps are consecutive in memory (side.runs): each
        position's steps copied a group (one word) at a time, the last group and the positions
        past the end zeros."""
        i, runs = self.indent, side.runs
        offset = "" if runs.offset == ZERO else f" + ({runs.offset.to_c()})"
        at = f"catenc_out + catenc_g * {width} + catenc_j * {group}"
        return [
            f"{i * 2}for (int64_t catenc_j = 0; catenc_j < {width}; ++catenc_j) {{",
            f"{i * 3}const int64_t catenc_n = catenc_j < catenc_valid ? catenc_kb : 0; /* steps it has */",
            f"{i * 3}const {ctype}* {self.restrict} catenc_src = catenc_j < catenc_valid ? {runs.buffer}{offset}"
            f" + (catenc_n0 + catenc_j) * ({runs.outer.to_c()}) + catenc_k0 : 0;",
            f"{i * 3}int64_t catenc_g = 0;",
            f"{i * 3}for (; catenc_g + {group} <= catenc_n; catenc_g += {group}) "
            f"memcpy({at}, catenc_src + catenc_g, {group});",
            f"{i * 3}for (; catenc_g < catenc_kb; catenc_g += {group}) {{",
            f"{i * 4}{ctype} catenc_word[{group}] = {{0}};",
            f"{i * 4}for (int64_t catenc_t = 0; catenc_t < {group} && catenc_g + catenc_t < catenc_n; ++catenc_t)",
            f"{i * 5}catenc_word[catenc_t] = catenc_src[catenc_g + catenc_t];",
            f"{i * 4}memcpy({at}, catenc_word, {group});",
            f"{i * 3}}}",
            f"{i * 2}}}",
        ]

    def chunked_pack_body(self, call: GemmCall, side: PackSide, ctype: str, group: int) -> list[str]:
        """int8 panels of any other operand, PACK_CHUNK panels at a time: per group of `group` depth
        steps, each step's row across the chunk's positions (one long run: block copies where the
        walk has them), then interleaved into each panel, position j's steps at out[j*group +
        step]; the steps past the slice, to a whole group, zeros."""
        i, width, extent = self.indent, _panel_width(call, side), side.extent.to_c()
        row = f"{PACK_CHUNK} * {width}"  # a row of the chunk: its panels' positions
        return [
            f"{i}for (int64_t catenc_c0 = 0; catenc_c0 < catenc_panels; catenc_c0 += {PACK_CHUNK}) {{",
            f"{i * 2}const int64_t catenc_cn = catenc_panels - catenc_c0 < {PACK_CHUNK} ? "
            f"catenc_panels - catenc_c0 : {PACK_CHUNK};",
            f"{i * 2}const int64_t catenc_span = catenc_cn * {width};",
            f"{i * 2}const int64_t catenc_n0 = (catenc_first + catenc_c0) * {width};",
            f"{i * 2}const int64_t catenc_valid = {extent} - catenc_n0 < catenc_span ? {extent} - catenc_n0"
            " : catenc_span;",
            *self.guard_masks(side.fill, row, i * 2),
            f"{i * 2}for (int64_t catenc_g = 0; catenc_g < catenc_kb; catenc_g += {group}) {{",
            f"{i * 3}CATENC_GEMM_ALIGN64 {ctype} catenc_rows[{group} * {row}];",
            f"{i * 3}{{",
            f"{i * 4}const int64_t catenc_left = catenc_kb - catenc_g;",
            f"{i * 4}const int64_t catenc_kb = catenc_left < {group} ? catenc_left : {group};",
            *self.depth_step(
                call,
                side,
                "catenc_k0 + catenc_g + catenc_k",
                f"catenc_rows[catenc_k * {row} + catenc_j]",
                4,
                "catenc_span",
            ),
            f"{i * 4}for (int64_t catenc_k = catenc_kb; catenc_k < {group}; ++catenc_k)",
            f"{i * 5}memset(catenc_rows + catenc_k * {row}, 0, (size_t)catenc_span);",
            f"{i * 3}}}",
            f"{i * 3}for (int64_t catenc_p = 0; catenc_p < catenc_cn; ++catenc_p) {{",
            f"{i * 4}{ctype}* {self.restrict} catenc_out = ({ctype}*)catenc_dst + (catenc_c0 + catenc_p) * "
            f"{_panel_depth(group)} * {width} + catenc_g * {width};",
            f"{i * 4}const {ctype}* {self.restrict} catenc_in = catenc_rows + catenc_p * {width};",
            f"{i * 4}for (int64_t catenc_j = 0; catenc_j < {width}; ++catenc_j) {{",
            *[
                f"{i * 5}catenc_out[catenc_j * {group} + {step}] = catenc_in[{step} * {row} + catenc_j];"
                for step in range(group)
            ],
            f"{i * 4}}}",
            f"{i * 3}}}",
            f"{i * 2}}}",
            f"{i}}}",
        ]

    def odometer_loop(
        self, walk: Odometer, start: str, counter: str, count: str, target: str, pad: str, prologue=()
    ) -> list[str]:
        """`for counter < count: target = value` along the walk lowering chose (lower/gemm.py)."""
        i = self.indent
        if walk.window is not None and not walk.carried:
            return self.window_run(walk, start, None, count, counter, target, pad)
        if walk.step and not walk.carried:
            return [
                f"{pad}{{",
                *self.copy_run(walk.step, walk.value, walk.last[0], start, counter, "0", target, count, pad + i),
                f"{pad}}}",
            ]
        if not walk.carried:
            return [
                *self.scalar_loop(walk, pad),
                f"{pad}for (int64_t {counter} = 0; {counter} < {count}; ++{counter}) {{",
                f"{pad}{i}const int64_t {walk.last[0]} = {start} + {counter};",
                *[f"{pad}{i}{line}" for line in prologue],
                *self.assignment(target, walk.value, pad + i),
                f"{pad}}}",
            ]
        last, extent = walk.last[0], walk.last[1].to_c()
        left = f"{count} - catenc_done"
        if walk.window is not None:
            run = self.window_run(walk, AT, "catenc_done", "catenc_run", counter, target, pad + i)
        elif walk.step:
            run = [
                f"{pad}{i}{{",
                *self.copy_run(
                    walk.step, walk.value, last, AT, counter, "catenc_done", target, "catenc_run", pad + i * 2
                ),
                f"{pad}{i}}}",
            ]
        else:
            run = [
                *self.scalar_loop(walk, pad + i),
                f"{pad}{i}for (int64_t catenc_t = 0; catenc_t < catenc_run; ++catenc_t) {{",
                f"{pad}{i * 2}const int64_t {last} = {AT} + catenc_t;",
                f"{pad}{i * 2}const int64_t {counter} = catenc_done + catenc_t;",
                *[f"{pad}{i * 2}{line}" for line in prologue],
                *self.assignment(target, walk.value, pad + i * 2),
                f"{pad}{i}}}",
            ]
        return [
            *[f"{pad}{line}" for line in self.indices(walk.begin, start, const=False)],
            f"{pad}for (int64_t catenc_done = 0; catenc_done < {count};) {{",
            f"{pad}{i}const int64_t catenc_run = {left} < {extent} - {AT} ? {left} : {extent} - {AT};",
            *run,
            f"{pad}{i}catenc_done += catenc_run;",
            f"{pad}{i}{AT} = 0;",
            f"{pad}{i}{self.carry(walk.carried)}",
            f"{pad}}}",
        ]

    def copy_run(
        self, step: int, value: Value, last: str, at: str, counter: str, first: str, target: str, count: str, pad: str
    ) -> list[str]:
        """`count` positions of a plain load `value` copied into `target` from the last index `at` and the
        counter `first`: a block copy (`step` 1, memcpy: fast at any length, with any compiler), or of
        every other element (2, templates/gemm.c.j2's vector shuffles)."""
        copy = "CATENC_GEMM_COPY" if step == 1 else "catenc_gemm_copy_even_f32"
        return [
            f"{pad}const int64_t {last} = {at};",
            f"{pad}const int64_t {counter} = {first};",
            f"{pad}{copy}(&{target}, &{self.value(value)}, {count});",
        ]

    def scalar_loop(self, walk: Odometer, pad: str) -> list[str]:
        """The line that keeps the loop after it scalar when the walk reads a strided operand."""
        return [f"{pad}{SCALAR_LOOP}"] if walk.strided else []

    def window_run(
        self, walk: Odometer, base: str, done: str | None, length: str, counter: str, target: str, pad: str
    ) -> list[str]:
        """`length` positions of a windowed walk whose last index starts at `base` (the counter
        at `done`, None: 0): the outside value before and after the window, the inside between."""
        window, i = walk.window, self.indent
        low, high = window_bounds(window, base, length)
        at = f"{done} + catenc_t" if done else "catenc_t"
        lines = [f"{pad}{{", f"{pad}{i}const int64_t {WINDOW_LOW} = {low.to_c()};"]
        lines.append(f"{pad}{i}int64_t {WINDOW_HIGH} = {high.to_c()};")
        if window.keep is not None:
            lines += self.assignment("const int catenc_keep", window.keep, pad + i)
            lines.append(f"{pad}{i}if (!catenc_keep) {WINDOW_HIGH} = {WINDOW_LOW};")
        spans = (("0", WINDOW_LOW, False), (WINDOW_LOW, WINDOW_HIGH, True), (WINDOW_HIGH, length, False))
        for first, end, inside in spans:
            if inside and window.step:  # a copy of a block, or of every other element
                first_at = f"{done} + {WINDOW_LOW}" if done else WINDOW_LOW
                lines += [
                    f"{pad}{i}if ({WINDOW_HIGH} > {WINDOW_LOW}) {{",
                    *self.copy_run(
                        window.step,
                        window.inside,
                        walk.last[0],
                        f"{base} + {WINDOW_LOW}",
                        counter,
                        first_at,
                        target,
                        f"{WINDOW_HIGH} - {WINDOW_LOW}",
                        pad + i * 2,
                    ),
                    f"{pad}{i}}}",
                ]
                continue
            lines += [
                *(self.scalar_loop(walk, pad + i) if inside else []),
                f"{pad}{i}for (int64_t catenc_t = {first}; catenc_t < {end}; ++catenc_t) {{",
                *([f"{pad}{i * 2}const int64_t {walk.last[0]} = {base} + catenc_t;"] if inside else []),
                f"{pad}{i * 2}const int64_t {counter} = {at};",
                *self.assignment(target, window.inside if inside else window.outside, pad + i * 2),
                f"{pad}{i}}}",
            ]
        return [*lines, f"{pad}}}"]

    def indices(self, divisions, flat: str, const: bool) -> list[str]:
        """Declarations of indices from a flattened position, as lower.flat.unflatten divides it."""
        qualifier = "const int64_t" if const else "int64_t"
        lines = []
        for name, divisor, modulus in divisions:
            value = flat if divisor is None else f"({flat}) / ({divisor.to_c()})"
            if modulus is not None:
                value = f"{value} % ({modulus.to_c()})"
            lines.append(f"{qualifier} {name} = {value};")
        return lines

    def carry(self, axes) -> str:
        """Advance a multi-index by one, last index fastest (the first one never wraps)."""
        text = f"++{axes[0][0]};"
        for name, extent in axes[1:]:
            text = f"if (++{name} == {extent.to_c()}) {{ {name} = 0; {text} }}"
        return text


def sigmoid_argument(v: Unary) -> Value | None:
    """The a of `recip(1 + exp(-a))` (the sum in either order), the sigmoid of registry.py."""
    if not (v.op == "recip" and isinstance(v.x, Binary) and v.x.op == "add"):
        return None
    one = Const(v.dtype, 1.0)
    for constant, term in ((v.x.a, v.x.b), (v.x.b, v.x.a)):
        exp = isinstance(term, Unary) and term.op == "exp"
        if constant == one and exp and isinstance(term.x, Unary) and term.x.op == "neg":
            return term.x.x
    return None


def shares_work(kernel: LoopKernel) -> bool:
    """Whether the team shares the kernel: the schedule runs it on threads, and each of its statements is a
    parallel loop or a gemm (anything else runs on one thread)."""
    body = kernel.body
    return kernel.decisions.parallel and all(isinstance(s, Gemm) or (isinstance(s, For) and s.parallel) for s in body)


def region_condition(kernels: tuple[LoopKernel, ...]) -> str | None:
    """When an entry call of these kernels opens its parallel region, as the C condition of the region's
    `if` clause ("1": always); None: never (no kernel is shared, or none does enough work)."""
    worth = []
    for kernel in kernels:
        if not shares_work(kernel):
            continue
        work, threshold = kernel.work, kernel.decisions.parallel_work
        if work.is_const:
            if work.value >= threshold:
                return "1"
        else:
            worth.append(f"({work.to_c()}) >= {threshold}")
    return " || ".join(worth) if worth else None


def prelude_tables(math_suffix: dict[str, str] = CRenderer.math_suffix, device_inline: str = "") -> dict:
    """What the prelude template needs: the dtype lists it loops over, and how its helpers are
    declared on a device (empty: plain C)."""
    floats = [("f32", "float", math_suffix["f32"]), ("f64", "double", math_suffix["f64"])]
    signed, unsigned = [], []
    for dtype in DTYPES.values():
        if dtype.kind == "int":
            u = "uint64_t" if dtype.bits == 64 else "uint32_t"
            signed.append((dtype.name, dtype.ctype, u, f"INT{dtype.bits}_MIN", f"INT{dtype.bits}_MAX"))
        elif dtype.kind == "uint":
            u = "uint64_t" if dtype.bits == 64 else "uint32_t"
            unsigned.append((dtype.name, dtype.ctype, u, f"UINT{dtype.bits}_MAX"))
    return {"floats": floats, "signed": signed, "unsigned": unsigned, "device_inline": device_inline}


def buffer_args(buffers: tuple[Buffer, ...]) -> dict[str, BufferArg]:
    return {b.name: BufferArg(b.name, b.dtype, b.shape, b.role in (Role.INPUT, Role.VIEW)) for b in buffers}


def plane_border(stmt: PaddedPlane) -> list[tuple[int, int, int, int]]:
    """The parts of a padded plane's array its values do not cover (the padding), as (start, length,
    count, stride): `count` runs of `length` elements `stride` apart. Per phase: the rows above the
    plane and its first row's left columns, the columns right of one row and left of the next, the last
    row's right columns and the rows below."""
    (rows, cols), (top, left), phases = stmt.shape, stmt.offset, stmt.phases
    height, width = stmt.plane
    parts = []
    for p in range(phases):
        base = p * rows * cols
        first = max(0, -(-(left - p) // phases))  # the first position of phase p that holds a plane column
        last = min(cols, (width - 1 + left - p) // phases + 1)  # ... one past the last
        if first >= last or height == 0:
            parts.append((base, rows * cols, 1, 0))
            continue
        parts.append((base, top * cols + first, 1, 0))
        parts.append((base + top * cols + last, cols - last + first, height - 1, cols))
        end = base + (top + height - 1) * cols + last
        parts.append((end, base + rows * cols - end, 1, 0))
    return [part for part in parts if part[1] > 0 and part[2] > 0]
