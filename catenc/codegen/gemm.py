"""BLIS-style contraction support for the generated C: micro-kernel, macro-kernel and driver.

The compiler generates, per contraction, two packing functions that evaluate the operand
expressions into the packed panel layouts documented in ``templates/gemm.c.j2`` and calls
``catenc_gemm_<dtype>``; this module renders that support code from the tiles the schedule chose
(catenc/schedule/tiles.py).
"""

from __future__ import annotations

from catenc.codegen.jinja import environment
from catenc.schedule.tiles import (
    BATCH_FLOPS,
    CTYPES,
    FLOPS_PER_THREAD,
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


def render_gemm_support(tiles: dict[str, GemmTiles]) -> str:
    """C text defining the packing typedef, tile macros, micro-kernel and driver for each dtype in `tiles`."""
    dtypes = []
    for dtype in sorted(tiles):
        t = tiles[dtype]
        t.check(dtype)
        ctype, size = CTYPES[dtype]
        lanes = t.vector_bytes // size
        nv = t.nr // lanes
        dtypes.append(
            {
                "s": dtype,
                "t": ctype,
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
                "col_variants": list(range(1, nv)),
                "kernels": _kernels(t.mr, nv),
                "unroll": UNROLL,
                "pack_elements": pack_elements(t, sym("M"), sym("N"), sym("K")).render(_NONNEGATIVE_C),
            }
        )
    return _ENV.get_template("gemm.c.j2").render(
        dtypes=dtypes, parallel_flops=PARALLEL_FLOPS, flops_per_thread=FLOPS_PER_THREAD, batch_flops=BATCH_FLOPS
    )
