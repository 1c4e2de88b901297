"""BLIS-style contraction support for the generated C: micro-kernel, macro-kernel and driver.

The compiler generates, per contraction, two packing functions that evaluate the operand
expressions into the packed panel layouts documented in ``templates/gemm.c.j2`` and calls
``catenc_gemm_<dtype>`` (or ``catenc_gemm_direct_a_<dtype>``); this module renders that support
code from the tiles the schedule chose (catenc/schedule/tiles.py), for the drivers a file calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from catenc.codegen.jinja import environment
from catenc.lower.gemm import GemmCall, direct_a, gemm_call
from catenc.lower.lanes import Storage
from catenc.lower.loops import Gemm, LoopKernel, WinogradGemm, iter_stmts
from catenc.schedule.tiles import (
    BATCH_FLOPS,
    CTYPES,
    FLOPS_PER_THREAD,
    KINDS,
    PARALLEL_FLOPS,
    UNROLL,
    GemmTiles,
    pack_elements,
)
from catenc.symbolic import RenderStyle, sym

_ENV = environment(lstrip_blocks=True)

# The support code compiles without catenc's prelude (no catenc_floordiv_i64), and it evaluates
# sizes only of M, N, K >= 0, where C's division, which truncates, floors.
_NONNEGATIVE_C = RenderStyle(
    "*",
    "LL",
    {
        "floordiv": "(({0}) / ({1}))",
        "mod": "(({0}) % ({1}))",
        "max": "(({0}) > ({1}) ? ({0}) : ({1}))",
        "min": "(({0}) < ({1}) ? ({0}) : ({1}))",
    },
)


def _row_variants(mr: int) -> list[int]:
    """Row counts of the micro-kernels: edge panels round their rows up to one of these."""
    step = 4 if mr > 8 else 2 if mr > 4 else 1
    return sorted({*range(step, mr, step), mr})


def _kernels(mr: int, nv: int) -> list[tuple[int, int]]:
    """(rows, vectors) of every micro-kernel: the full one, fewer rows, fewer vectors."""
    return [(rows, nv) for rows in _row_variants(mr)] + [(mr, v) for v in range(1, nv)]


class Driver(Enum):
    """An entry point of the support code: both operands packed, or A read in place; or a helper the
    packing functions call (the copy of every other element of a stride-2 convolution's patches)."""

    PACKED = "catenc_gemm"
    DIRECT_A = "catenc_gemm_direct_a"
    COPY_EVEN = "catenc_gemm_copy_even"


def called_drivers(kernels: Iterable[tuple[LoopKernel, Mapping[str, Storage]]]) -> dict[str, frozenset[Driver]]:
    """The drivers the Gemm statements of these kernels (each with its buffers) call, by dtype."""
    called: dict[str, set[Driver]] = {}
    for kernel, buffers in kernels:
        for stmt in iter_stmts(kernel.body):
            if isinstance(stmt, Gemm):
                c = stmt.contraction
                winograd = isinstance(stmt, WinogradGemm)  # its products read the transformed filters in place
                driver = Driver.PACKED if direct_a(c, buffers) is None and not winograd else Driver.DIRECT_A
                called.setdefault(c.kind, set()).add(driver)
                if not winograd and _copies_even(gemm_call(stmt, kernel, buffers, False)):
                    called[c.kind].add(Driver.COPY_EVEN)
    return {dtype: frozenset(drivers) for dtype, drivers in called.items()}


def _copies_even(call: GemmCall) -> bool:
    """Whether a packing function of the call copies every other element (lower/gemm.py copy_step)."""
    walks = [w for side in call.sides for w in (side.fill, *(case.fill for case in side.cases))]
    return any(w.step == 2 or (w.window is not None and w.window.step == 2) for w in walks)


def render_gemm_support(
    tiles: dict[str, GemmTiles], drivers: Mapping[str, frozenset[Driver]] | None = None, work_support: bool = True
) -> str:
    """C text defining the packing typedef, tile macros, micro-kernels and drivers for each dtype in
    `tiles`: only the `drivers` called of each (None: all of every dtype; a dtype without any: none),
    after the work sharing they use unless the file has it already (`work_support` false)."""
    dtypes = []
    for name in sorted(tiles):
        t = tiles[name]
        t.check(name)
        called = frozenset(Driver) if drivers is None else drivers.get(name, frozenset())
        if not called:
            continue
        kind = KINDS[name]
        ctype, size = CTYPES[kind.acc]
        lanes = t.vector_bytes // size
        nv = t.nr // lanes if kind.group == 1 else t.nr // 16  # an int8 kernel's vectors: 16 columns each
        kernels = _kernels(t.mr, nv) if kind.group == 1 else [(rows, nv) for rows in _row_variants(t.mr)]
        dtypes.append(
            {
                "s": name,
                "t": ctype,
                "ta": CTYPES[kind.a][0],
                "tb": CTYPES[kind.b][0],
                "pack_t": ctype if kind.group == 1 else "void",
                "group": kind.group,
                "kq": "kb" if kind.group == 1 else "kq",
                "b_unsigned": kind.b == "u8",
                "widen_a": "_mm_cvtepu8_epi16" if kind.a == "u8" else "_mm_cvtepi8_epi16",
                "widen_b": "_mm256_cvtepu8_epi16" if kind.b == "u8" else "_mm256_cvtepi8_epi16",
                "size": size,
                "mr": t.mr,
                "nr": t.nr,
                "kc": t.kc,
                "mc": t.mc,
                "nc": t.nc,
                "vector_bytes": t.vector_bytes,
                "lanes": lanes,
                "nv": nv,
                "row_variants": _row_variants(t.mr),
                "col_variants": list(range(1, nv)) if kind.group == 1 else [],
                "kernels": kernels,
                "unroll": UNROLL,
                "pack_elements": pack_elements(t, sym("M"), sym("N"), sym("K"), kind).render(_NONNEGATIVE_C),
                "packed": Driver.PACKED in called,
                "direct": Driver.DIRECT_A in called,
                "copy_even": Driver.COPY_EVEN in called,
            }
        )
    if not dtypes:
        return ""
    drivers_text = _ENV.get_template("gemm.c.j2").render(
        dtypes=dtypes, parallel_flops=PARALLEL_FLOPS, flops_per_thread=FLOPS_PER_THREAD, batch_flops=BATCH_FLOPS
    )
    return (render_work_support() + "\n" if work_support else "") + drivers_text


def render_work_support() -> str:
    """C text sharing a call's work among its team in chunks (templates/work.c.j2): the loops of
    every kernel and the gemm drivers use it."""
    return _ENV.get_template("work.c.j2").render()
