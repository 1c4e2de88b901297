"""C support of the Winograd convolutions (catenc/schedule/winograd.py): the transforms written
out from their matrices, one straight-line sum per output with the zero terms left out, and the
driver that runs a convolution block by block over the packed gemm (templates/gemm.c.j2).

Layouts, per block of whole tile rows (`tb` tiles, `np` = tb rounded up to NR):
- U[xi][k][c], the transformed filters: each product's A, read in place (lda = C);
- V_xi, the transformed input of the block: each product's B as the driver's packed panels
  (`bp`), so nothing is packed per product; columns past tb are 0;
- M_xi[k][t]: each product's output, rows of tb.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

from catenc.codegen.jinja import environment
from catenc.lower.loops import WinogradGemm, iter_stmts
from catenc.schedule.winograd import TRANSFORMS, Transform

_ENV = environment(lstrip_blocks=True)


def _literal(x: Fraction) -> str:
    return f"{float(x)!r}f"


def combination(row: Sequence[Fraction], terms: Sequence[str]) -> str:
    """`sum(row[i] * terms[i])` as C: zero terms left out, +-1 as an add or a subtract (the
    operations schedule/winograd.py combination_ops counts)."""
    parts: list[str] = []
    for x, term in zip(row, terms):
        if not x:
            continue
        negative = x < 0
        factor = term if abs(x) == 1 else f"{_literal(abs(x))} * {term}"
        if not parts:
            parts.append(f"-{factor}" if negative else factor)
        else:
            parts.append(f"{'-' if negative else '+'} {factor}")
    return " ".join(parts) if parts else "0.0f"


def _transform_context(t: Transform) -> dict:
    """The statements of each transform of F(m, 3), by the template's names."""
    a, m = t.alpha, t.m
    # filters: f[i][s] = sum_r G[i][r] g[r][s]; U[i*alpha + j] = sum_s G[j][s] f[i][s]
    filter_rows = [
        f"const float f{i}_{s} = {combination(t.g[i], [f'g{r}_{s}' for r in range(3)])};"
        for i in range(a)
        for s in range(3)
    ]
    filter_out = [(i * a + j, combination(t.g[j], [f"f{i}_{s}" for s in range(3)])) for i in range(a) for j in range(a)]
    # input: e[i][j] = sum_r BT[i][r] d[r][j]; V[i*alpha + j] = sum_s BT[j][s] e[i][s]
    input_rows = [
        f"const float e{i}_{j} = {combination(t.bt[i], [f'd{r}_{j}' for r in range(a)])};"
        for i in range(a)
        for j in range(a)
    ]
    input_out = [(i * a + j, combination(t.bt[j], [f"e{i}_{s}" for s in range(a)])) for i in range(a) for j in range(a)]
    # output: s[i][j] = sum_b AT[j][b] M[i*alpha + b]; y[r][j] = sum_i AT[r][i] s[i][j]
    output_rows = [
        f"const float s{i}_{j} = {combination(t.at[j], [f'm{i * a + b}' for b in range(a)])};"
        for i in range(a)
        for j in range(m)
    ]
    output_out = [(r, j, combination(t.at[r], [f"s{i}_{j}" for i in range(a)])) for r in range(m) for j in range(m)]
    return {
        "m": m,
        "alpha": a,
        "filter_loads": [(r, s) for r in range(3) for s in range(3)],
        "filter_rows": filter_rows,
        "filter_out": filter_out,
        "tile_loads": [(i, j) for i in range(a) for j in range(a)],
        "input_rows": input_rows,
        "input_out": input_out,
        "output_rows": output_rows,
        "output_out": output_out,
    }


def render_winograd_support(tiles: Iterable[int], lanes: int) -> str:
    """C text of the Winograd support for each output tile side in `tiles` (after the gemm support), the
    transforms a vector of `lanes` channels (or filters) at a time."""
    chosen = sorted(set(tiles))
    if not chosen:
        return ""
    contexts = [_transform_context(TRANSFORMS[m]) for m in chosen]
    return _ENV.get_template("winograd.c.j2").render(transforms=contexts, lanes=lanes)


def winograd_tiles(entries) -> list[int]:
    """The output tile sides of the Winograd convolutions the entries' kernels run."""
    found = {
        stmt.plan.transform.m
        for entry in entries
        for kernel in entry.kernels
        for stmt in iter_stmts(kernel.body)
        if isinstance(stmt, WinogradGemm)
    }
    return sorted(found)
