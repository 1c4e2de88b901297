"""A Gemm statement as the pieces of one call of the packed gemm driver (the driver itself is
catenc/codegen/templates/gemm.c.j2).

A call needs a context struct (what its helpers read), two packing functions that evaluate the
operands into panels, an optional epilogue applied in place to the output, and a loop over the
batch. Which fields, which axes each helper walks and how, and what runs on threads is decided
here; the renderer spells it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from catenc.dtypes import DType
from catenc.ir.nodes import Value
from catenc.lower.flat import Axes, Divisions, flat_extent, flatten, unflatten
from catenc.lower.lanes import Storage
from catenc.lower.loops import Gemm, LoopKernel
from catenc.schedule.contractions import Contraction
from catenc.schedule.tiles import PANEL_ALIGN
from catenc.symbolic import Expr, sym

AT = "catenc_at"  # the last axis's index where an odometer run starts
EPILOGUE_ROWS = 4  # output rows per epilogue call


@dataclass(frozen=True)
class ContextField:
    """A field of the call's context: a buffer the helpers read (writable: the output an
    epilogue rewrites), or an int64 (dtype None: a symbol or a batch index)."""

    name: str
    dtype: DType | None
    writable: bool = False


@dataclass(frozen=True)
class Odometer:
    """`target = value` at `count` consecutive flattened positions of the axes from `start`.
    One axis (`carried` empty) is indexed directly; over several, the last one (`last`) runs an
    affine inner loop from AT, `begin` gives the other indices and AT at the start, and after
    each run the carried indices (outermost first; the first never wraps) advance by one."""

    value: Value
    begin: Divisions  # lower.flat.unflatten of the start
    last: tuple[str, Expr]
    carried: Axes


@dataclass(frozen=True)
class PackSide:
    """How operand `side` is packed: "a" in panels of MR rows (rows x depth), "b" in panels of
    NR columns (depth x cols); each panel's positions walk `fill`, zero past the end."""

    side: str
    width: str  # the tile dimension a panel spans: "MR" or "NR"
    extent: Expr  # positions along the panel's axes
    fill: Odometer


@dataclass(frozen=True)
class GemmCall:
    """One gemm call: its context fields, its two packing sides, its epilogue (None: none),
    the batch loop, and which of them run on threads."""

    contraction: Contraction
    pack: str  # the workspace buffer of the panels
    fields: tuple[ContextField, ...]
    sides: tuple[PackSide, PackSide]
    epilogue: Odometer | None  # over the columns of one output row
    position: Expr  # the flat output element of the current indices
    rows: Expr
    cols: Expr
    depth: Expr
    count: Expr  # products in the batch
    batch: Divisions  # lower.flat.unflatten of the batch
    row_indices: Divisions  # of an output row (the epilogue)
    depth_indices: Divisions  # of a depth step (packing)
    slot_align: int  # elements: each thread's panels start this aligned
    batch_parallel: bool  # one product per thread
    epilogue_parallel: bool
    epilogue_rows: int = EPILOGUE_ROWS


def odometer(axes: Axes, value: Value) -> Odometer:
    """The walk of `value` over consecutive flattened positions of the axes."""
    if len(axes) == 1:
        return Odometer(value, (), axes[0], ())
    outer = tuple(axes[:-1]) + ((AT, axes[-1][1]),)
    return Odometer(value, unflatten(outer), axes[-1], tuple(axes[:-1]))


def output_position(c: Contraction) -> Expr:
    """The flat position of the contraction's output element at the current indices."""
    rows = flatten([sym(n) for n, _ in c.rows], [e for _, e in c.rows])
    cols = flatten([sym(n) for n, _ in c.cols], [e for _, e in c.cols])
    return c.offset + rows * c.row_stride + cols * c.col_stride


def context_fields(
    c: Contraction, pack: str, kernel: LoopKernel, buffers: Mapping[str, Storage]
) -> tuple[ContextField, ...]:
    """What the packing and epilogue functions read: the operands' buffers (the output too,
    with an epilogue), the symbols, the batch indices."""
    fields = []
    for name in kernel.buffers:
        if name == c.output and c.epilogue is not None:
            fields.append(ContextField(name, buffers[name].dtype, writable=True))
        elif name not in (c.output, pack):
            fields.append(ContextField(name, buffers[name].dtype))
    fields += [ContextField(s, None) for s in kernel.symbols]
    fields += [ContextField(n, None) for n, _ in c.batch]
    return tuple(fields)


def gemm_call(stmt: Gemm, kernel: LoopKernel, buffers: Mapping[str, Storage], parallel: bool) -> GemmCall:
    """The call of a Gemm statement in `kernel`; `parallel`: whether threads are on here (a
    batch of products then runs one product per thread, and the epilogue's rows spread)."""
    c = stmt.contraction
    sides = (
        PackSide("a", "MR", flat_extent(c.rows), odometer(c.rows, c.a)),
        PackSide("b", "NR", flat_extent(c.cols), odometer(c.cols, c.b)),
    )
    return GemmCall(
        c,
        stmt.pack,
        context_fields(c, stmt.pack, kernel, buffers),
        sides,
        None if c.epilogue is None else odometer(c.cols, c.epilogue),
        output_position(c),
        flat_extent(c.rows),
        flat_extent(c.cols),
        flat_extent(c.depth),
        flat_extent(c.batch),
        unflatten(c.batch),
        unflatten(c.rows),
        unflatten(c.depth),
        PANEL_ALIGN // c.dtype.itemsize,
        parallel and bool(c.batch),
        parallel,
    )
