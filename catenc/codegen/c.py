"""The C-family renderer: loop nests to C source text.

A renderer is a table of spellings (types, one expression per primitive op, loop and kernel
syntax) plus a few methods; a runtime picks a renderer class and may override entries. Only
the file scaffolding (header, prelude, entry points) comes from jinja2 templates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from catenc.dtypes import DTYPES, DType
from catenc.ir.nodes import Binary, Buffer, Cast, Const, Gather, Load, Local, SymInt, Unary, Value, Where
from catenc.lower.loops import Assign, Declare, For, If, LoopKernel, Stmt, Store
from catenc.symbolic import Expr, product

FLOAT_FUNCS = (
    "sqrt exp exp2 log log2 log1p expm1 sin cos tan tanh sinh cosh asin acos atan erf floor ceil trunc".split()
)


@dataclass(frozen=True)
class BufferArg:
    """How a kernel sees a buffer: its C name and storage type."""

    name: str
    dtype: DType
    shape: tuple[Expr, ...]
    const: bool


class CRenderer:
    """Renders kernels as C99 functions. Subclasses change spellings, not structure."""

    language = "c"
    indent = "    "
    kernel_qualifier = "static void"
    restrict = "restrict"
    parallel_pragma = "#pragma omp parallel for schedule(static)"
    compute_ctype = {"f16": "float", "bf16": "float", "bool": "uint8_t"}
    load_conversion = {"f16": "catenc_f16_to_f32({0})", "bf16": "catenc_bf16_to_f32({0})"}
    store_conversion = {
        "f16": "catenc_f32_to_f16({0})",
        "bf16": "catenc_f32_to_bf16({0})",
        "bool": "(uint8_t)({0})",
    }
    float_suffix = {"f32": "f", "f64": ""}
    unary_float = {
        "neg": "(-{0})",
        "recip": "({one} / {0})",
        "abs": "fabs{s}({0})",
        "round": "rint{s}({0})",
        "isnan": "(isnan({0}) != 0)",
        "isinf": "(isinf({0}) != 0)",
        "round_f16": "catenc_round_f16_{t}({0})",
        "round_bf16": "catenc_round_bf16_{t}({0})",
        **{f: f + "{s}({0})" for f in FLOAT_FUNCS},
    }
    binary_float = {
        "add": "({0} + {1})",
        "sub": "({0} - {1})",
        "mul": "({0} * {1})",
        "div": "({0} / {1})",
        "floordiv": "catenc_floordiv_{t}({0}, {1})",
        "mod": "catenc_mod_{t}({0}, {1})",
        "max": "catenc_max_{t}({0}, {1})",
        "min": "catenc_min_{t}({0}, {1})",
        "pow": "pow{s}({0}, {1})",
        "atan2": "atan2{s}({0}, {1})",
    }
    # Integer arithmetic wraps: computed in the unsigned type, converted back.
    binary_int = {
        "add": "({c})(({u}){0} + ({u}){1})",
        "sub": "({c})(({u}){0} - ({u}){1})",
        "mul": "({c})(({u}){0} * ({u}){1})",
        "floordiv": "catenc_floordiv_{t}({0}, {1})",
        "mod": "catenc_mod_{t}({0}, {1})",
        "max": "catenc_max_{t}({0}, {1})",
        "min": "catenc_min_{t}({0}, {1})",
        "pow": "catenc_pow_{t}({0}, {1})",
        "and": "({c})({0} & {1})",
        "or": "({c})({0} | {1})",
        "xor": "({c})({0} ^ {1})",
    }
    unary_int = {
        "neg": "({c})(0 - ({u}){0})",
        "abs": "({0} < 0 ? ({c})(0 - ({u}){0}) : {0})",
        "not": "({c})(~{0})",
    }
    compare = {
        "lt": "({0} < {1})",
        "le": "({0} <= {1})",
        "eq": "({0} == {1})",
        "ne": "({0} != {1})",
    }
    bool_ops = {"and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})", "not": "(!{0})"}

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
        self._nesting += 1
        try:
            if self._nesting > self.max_nesting and not self._guarded and v.children():
                return self.hoist(v)
            return self.expression(v)
        finally:
            self._nesting -= 1

    def hoist(self, v: Value) -> str:
        saved, self._nesting = self._nesting, 0
        try:
            text = self.expression(v)
        finally:
            self._nesting = saved
        name = f"catenc_t{len(self._hoisted)}_{self._statement}"
        self._hoisted.append(f"{self.ctype(v.dtype)} {name} = {text};")
        return name

    def expression(self, v: Value) -> str:
        if isinstance(v, Local):
            return v.name
        if isinstance(v, Const):
            return self.literal(v.value, v.dtype)
        if isinstance(v, SymInt):
            text = f"({v.expr.to_c()})"  # an operand of whatever operator surrounds it
            return text if v.dtype.name == "i64" else f"(({self.ctype(v.dtype)}){text})"
        if isinstance(v, Load):
            return self.load(v)
        if isinstance(v, Unary):
            return self.unary(v)
        if isinstance(v, Binary):
            return self.binary(v)
        if isinstance(v, Where):
            cond = self.value(v.cond)
            self._guarded += 1
            try:
                return f"({cond} ? {self.value(v.a)} : {self.value(v.b)})"
            finally:
                self._guarded -= 1
        if isinstance(v, Cast):
            return self.cast(v)
        raise TypeError(f"cannot render {v!r}")

    def spell(self, template: str, args: list[str], dtype: DType) -> str:
        return template.format(
            *args,
            t=dtype.name,
            c=self.ctype(dtype),
            u=self.unsigned(dtype) if dtype.is_int else "",
            s=self.float_suffix.get(dtype.name, "f"),
            one=self.literal(1.0, dtype) if dtype.is_float else "1",
        )

    def unary(self, v: Unary) -> str:
        dtype = v.x.dtype
        arg = self.value(v.x)
        if dtype.name == "bool":
            return self.spell(self.bool_ops[v.op], [arg], dtype)
        table = self.unary_float if dtype.is_float else self.unary_int
        return self.spell(table[v.op], [arg], dtype)

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

    def cast(self, v: Cast) -> str:
        source, target = v.x.dtype, v.dtype
        arg = self.value(v.x)
        if target.name == "bool":
            return f"(uint8_t)({arg} != 0)"
        if source.is_float and target.is_int:
            return f"catenc_cast_{target.name}((double){arg})"
        return f"(({self.ctype(target)}){arg})"

    def flat_index(self, index: tuple[Expr, ...], shape: tuple[Expr, ...]) -> str:
        flat = None
        for i, d in zip(index, shape):
            flat = i if flat is None else flat * d + i
        return "0" if flat is None else flat.to_c()

    def load(self, v: Load) -> str:
        buf = self.buffers[v.buffer]
        flat = self.flat_index(v.index, buf.shape)
        if isinstance(v, Gather):  # index[axis] is 0 in v.index: add the computed position's offset
            stride = product(buf.shape[v.axis + 1 :]).to_c()
            flat = f"{flat} + {self.value(v.position)}*({stride})"
        text = f"{v.buffer}[{flat}]"
        conversion = self.load_conversion.get(buf.dtype.name)
        return conversion.format(text) if conversion else text

    # ---- statements and kernels ----
    def kernel(self, kernel: LoopKernel, buffers: dict[str, BufferArg], parallel: bool) -> str:
        self.buffers = buffers
        self._nesting, self._guarded, self._hoisted, self._statement = 0, 0, [], 0
        params = [self.buffer_param(buffers[name]) for name in kernel.buffers]
        params += [f"int64_t {s}" for s in kernel.symbols]
        lines = [f"{self.kernel_qualifier} {kernel.name}({', '.join(params) or 'void'})", "{"]
        self.statements(kernel.body, 1, lines, parallel)
        lines.append("}")
        return "\n".join(lines)

    def buffer_param(self, buf: BufferArg) -> str:
        const = "const " if buf.const else ""
        return f"{const}{buf.dtype.ctype}* {self.restrict} {buf.name}"

    def statements(self, body: tuple[Stmt, ...], depth: int, lines: list[str], parallel: bool) -> None:
        pad = self.indent * depth
        for stmt in body:
            hoisted = self._hoisted = []  # locals this statement's own expressions need
            self._statement += 1
            mark = len(lines)
            self.statement(stmt, pad, depth, lines, parallel)
            lines[mark:mark] = [f"{pad}{line}" for line in hoisted]

    def statement(self, stmt: Stmt, pad: str, depth: int, lines: list[str], parallel: bool) -> None:
        if isinstance(stmt, For):
            if stmt.parallel and parallel:
                lines.append(f"{pad}{self.parallel_pragma}")
            extent = stmt.extent.to_c()
            lines.append(f"{pad}for (int64_t {stmt.index} = 0; {stmt.index} < {extent}; ++{stmt.index}) {{")
            self.statements(stmt.body, depth + 1, lines, parallel)
            lines.append(f"{pad}}}")
        elif isinstance(stmt, If):
            lines.append(f"{pad}if ({self.value(stmt.cond)}) {{")
            self.statements(stmt.body, depth + 1, lines, parallel)
            lines.append(f"{pad}}}")
        elif isinstance(stmt, Declare):
            lines.append(f"{pad}{self.ctype(stmt.dtype)} {stmt.name} = {self.value(stmt.value)};")
        elif isinstance(stmt, Assign):
            lines.append(f"{pad}{stmt.name} = {self.value(stmt.value)};")
        elif isinstance(stmt, Store):
            buf = self.buffers[stmt.buffer]
            value = self.value(stmt.value)
            conversion = self.store_conversion.get(buf.dtype.name)
            if conversion:
                value = conversion.format(value)
            lines.append(f"{pad}{stmt.buffer}[{self.flat_index(stmt.index, buf.shape)}] = {value};")


def prelude_tables() -> dict:
    """The dtype lists the prelude template loops over."""
    floats = [("f32", "float", "f"), ("f64", "double", "")]
    signed, unsigned = [], []
    for dtype in DTYPES.values():
        if dtype.kind == "int":
            u = "uint64_t" if dtype.bits == 64 else "uint32_t"
            signed.append((dtype.name, dtype.ctype, u, f"INT{dtype.bits}_MIN", f"INT{dtype.bits}_MAX"))
        elif dtype.kind == "uint":
            u = "uint64_t" if dtype.bits == 64 else "uint32_t"
            unsigned.append((dtype.name, dtype.ctype, u, f"UINT{dtype.bits}_MAX"))
    return {"floats": floats, "signed": signed, "unsigned": unsigned}


def buffer_args(buffers: tuple[Buffer, ...]) -> dict[str, BufferArg]:
    return {b.name: BufferArg(b.name, b.dtype, b.shape, b.role == "input") for b in buffers}
