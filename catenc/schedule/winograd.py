"""Winograd convolution: a 3x3 stride-1 convolution's contraction computed as F(m x m, 3 x 3).

A gemm kernel whose contraction is `out[k, h, w] = sum[c, r, s](w[k, c, r, s] * x[c, h + r, w + s])`
(x zero outside a rectangle: the padding) can instead cut the output into m x m tiles, each read from
an (m + 2) x (m + 2) tile of x, and compute `Y = A^T [(G g G^T) . (B^T d B)] A` per tile and channel
pair (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks"): (m + 2)^2 batched
products of K x C filters by C x tiles, (m + 2)^2 / (9 m^2) of the direct multiplies (F(2,3): 0.44,
F(4,3): 0.25), plus the transforms. The results differ from the direct sum by rounding only (docs/cli.md
"Winograd convolutions" gives the measured error). The tile is a schedule decision (`winograd`: 0
direct, 2 or 4); the matrices are data, and the C that applies them is written from them
(catenc/codegen/winograd.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from catenc.ir.nodes import Buffer, Const, Load, Value, Where, value_symbols
from catenc.ir.verify import as_nonnegative, conjuncts
from catenc.schedule.contractions import Contraction
from catenc.schedule.tiles import GemmTiles, pack_elements

if TYPE_CHECKING:  # the schedule's types, which import this module's plans (kernel_cost)
    pass
from catenc.symbolic import ONE, Expr, row_major, sym

Matrix = tuple[tuple[Fraction, ...], ...]


def _matrix(rows: Sequence[Sequence[int | str]]) -> Matrix:
    return tuple(tuple(Fraction(x) for x in row) for row in rows)


@dataclass(frozen=True)
class Transform:
    """F(m, 3): B^T (alpha x alpha) transforms an input tile, G (alpha x 3) a filter, A^T (m x
    alpha) the product back to m outputs; alpha = m + 2. The 2-D transform applies each on both sides."""

    m: int
    bt: Matrix
    g: Matrix
    at: Matrix

    @property
    def alpha(self) -> int:
        return self.m + 2


# Lavin and Gray's matrices: F(2,3) on the points 0, 1, -1; F(4,3) on 0, 1, -1, 2, -2 (and infinity).
TRANSFORMS = {
    2: Transform(
        2,
        _matrix([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        _matrix([[1, 0, 0], ["1/2", "1/2", "1/2"], ["1/2", "-1/2", "1/2"], [0, 0, 1]]),
        _matrix([[1, 1, 1, 0], [0, 1, -1, -1]]),
    ),
    4: Transform(
        4,
        _matrix(
            [
                [4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1],
            ]
        ),
        _matrix(
            [
                ["1/4", 0, 0],
                ["-1/6", "-1/6", "-1/6"],
                ["-1/6", "1/6", "-1/6"],
                ["1/24", "1/12", "1/6"],
                ["1/24", "-1/12", "1/6"],
                [0, 0, 1],
            ]
        ),
        _matrix([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
    ),
}


@dataclass(frozen=True)
class WinogradConv:
    """A contraction read as a 3x3 stride-1 correlation of planes: out position
    `offset + k*row_stride + h*width + w` (the contraction's) is the sum over c, r, s of
    weight[weight_at + k*wk + c*wc + r*wr + s*ws] times x[input_at + c*channel_stride +
    (h + r)*row_stride_in + (w + s)] where `rows[0] <= h + r < rows[1]` and `cols[0] <= w + s <
    cols[1]`, and 0 elsewhere (the padding). input_at may read batch indices; the rest are constants."""

    input: str
    input_at: Expr
    channel_stride: int
    input_row_stride: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    weight: str
    weight_at: int
    weight_strides: tuple[int, int, int, int]  # k, c, r, s
    channels: int
    filters: int
    height: int
    width: int


def _flat(load: Load, buffers: Mapping[str, Buffer]) -> Expr:
    return row_major(list(load.index), list(buffers[load.buffer].shape))


def _constant_coefficients(e: Expr, names: Sequence[str]) -> tuple[list[int], Expr] | None:
    """The constant coefficients of `names` in e, and the rest (free of them), if they are constants."""
    rest, found = e, []
    for name in names:
        coefficient = e.coefficient(name)
        if not coefficient.is_const:
            return None
        found.append(coefficient.value)
        rest = rest - coefficient * sym(name)
    if rest.free_symbols() & set(names):
        return None
    return found, rest


def _bounds(cond: Value | None, along: tuple[str, str], natural: int) -> tuple[int, int] | None:
    """The range [lo, hi) of `along[0] + along[1]` the conjuncts of cond that read them allow
    (each must compare that sum alone with a constant), within [0, natural)."""
    lo, hi = 0, natural
    for term in [] if cond is None else conjuncts(cond):
        if not set(along) & value_symbols(term):
            continue
        e = as_nonnegative(term)  # the conjunct: e >= 0
        if e is None:
            return None
        a, b = e.coefficient(along[0]), e.coefficient(along[1])
        rest = e - a * sym(along[0]) - b * sym(along[1])
        if a != b or not a.is_const or abs(a.value) != 1 or not rest.is_const:
            return None
        if a.value == 1:  # u + rest >= 0
            lo = max(lo, -rest.value)
        else:  # rest - u >= 0
            hi = min(hi, rest.value + 1)
    return lo, max(lo, hi)


def match_conv(c: Contraction, buffers: Mapping[str, Buffer]) -> WinogradConv | None:
    """The contraction as a WinogradConv when it is one (f32, every extent and stride constant), else None."""
    if c.kind != "f32" or len(c.rows) != 1 or len(c.cols) != 2 or len(c.depth) != 3:
        return None
    if not all(e.is_const for _, e in c.rows + c.cols + c.depth) or not c.row_stride.is_const:
        return None
    if c.col_stride != ONE:
        return None
    (k, filters), (h, height), (w, width) = c.rows[0], *c.cols
    a, b = c.a, c.b
    guard = None
    if isinstance(b, Where):
        if not (isinstance(b.b, Const) and b.b.value == 0):
            return None
        guard, b = b.cond, b.a
    for operand in (a, b):
        if type(operand) is not Load or operand.dtype != buffers[operand.buffer].dtype:
            return None
    depth = [name for name, _ in c.depth]
    extents = {name: e.value for name, e in c.depth}
    found = _constant_coefficients(_flat(b, buffers), [h, w, *depth])
    if found is None:
        return None
    (ch, cw, *cd), input_at = found
    columns = [d for d, co in zip(depth, cd) if co == 1 and extents[d] == 3]
    rows = [d for d, co in zip(depth, cd) if co == ch and extents[d] == 3 and d not in columns]
    if cw != 1 or ch <= 1 or len(columns) != 1 or len(rows) != 1:
        return None
    (s,), (r,) = columns, rows
    (channel,) = [d for d in depth if d not in (r, s)]
    channel_stride = cd[depth.index(channel)]
    if input_at.free_symbols() & {k, h, w, *depth}:
        return None
    if guard is not None and value_symbols(guard) - {h, w, r, s}:
        return None
    row_range = _bounds(guard, (h, r), height.value + 2)
    col_range = _bounds(guard, (w, s), width.value + 2)
    weights = _constant_coefficients(_flat(a, buffers), [k, channel, r, s])
    if row_range is None or col_range is None or weights is None or not weights[1].is_const:
        return None
    strides, weight_at = weights
    return WinogradConv(
        b.buffer,
        input_at,
        channel_stride,
        ch,
        row_range,
        col_range,
        a.buffer,
        weight_at.value,
        tuple(strides),
        extents[channel],
        filters.value,
        height.value,
        width.value,
    )


# The heuristics' choice (docs/cli.md "Winograd convolutions"), from one-layer timings: F(4,3) with at
# least FOUR_CHANNELS input channels on planes of at least FOUR_SIDE a side, F(2,3) with at least
# MIN_CHANNELS input channels and MIN_FILTERS filters on planes of at least TWO_SIDE, else the direct
# product: with fewer channels the products are too shallow to pay for their outputs (16 -> 64 at
# 55x55 ran 1.3x slower as F(2,3)), on smaller planes the tiles waste too much.
FOUR_SIDE = 14
FOUR_CHANNELS = 64
TWO_SIDE = 6
MIN_CHANNELS = 32
MIN_FILTERS = 16
# With filters transformed per call (not baked or packed), at least this many tiles: a 512-channel layer at 7x7
# ran 1.8x slower than direct (a 2.9 ms direct layer spent 4 ms transforming 16 MB of filters), one at
# 14x14 (49 tiles of F(2x2)) 1.15x faster.
PER_CALL_TILES = 48
# Tiles per block: the transformed input and the products of a block (the unit of work a thread
# takes) span about this many tiles, whole tile rows.
BLOCK_TILES = 128
# Threads that take units of tile rows apart, each with a slot of the workspace of its own (more
# threads share each unit instead).
SLOTS = 2
# Threads that transform tiles at once, each with a copy of one channel group of a unit's input.
GATHERS = 64
# The multiple of the direct sum's rounding (catenc/testing/check.py reduction_rounding) each tile's
# results may show. Measured on random normal and uniform inputs, 16 to 512 channels, as a share of
# eps * sqrt(9 C) * max|y|: direct 0.06-0.30, F(2,3) 0.09-0.15, F(4,3) 0.79-2.33.
ROUNDING = {2: 1.0, 4: 4.0}


def heuristic_tile(conv: WinogradConv, largest: int, baked: bool = True) -> int:
    """The output tile side the heuristics choose for a convolution, at most `largest`: 4, 2 or 0 (direct);
    `baked`: its filters are transformed once (at compile time or load), else on every call (then it must have
    PER_CALL_TILES tiles at least: the transform writes (m+2)^2 x C x K elements)."""
    side = min(conv.height, conv.width)
    if conv.channels < MIN_CHANNELS or conv.filters < MIN_FILTERS or side < TWO_SIDE or largest < 2:
        return 0
    m = 4 if largest >= 4 and side >= FOUR_SIDE and conv.channels >= FOUR_CHANNELS else 2
    while m and not baked and _ceil(conv.height, m) * _ceil(conv.width, m) < PER_CALL_TILES:
        m -= 2
    return m


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class WinogradPlan:
    """How a WinogradConv runs: its transform and the tile rows of each block of work."""

    conv: WinogradConv
    transform: Transform
    block_rows: int

    @property
    def tile_rows(self) -> int:
        return _ceil(self.conv.height, self.transform.m)

    @property
    def tile_cols(self) -> int:
        return _ceil(self.conv.width, self.transform.m)

    @property
    def block_tiles(self) -> int:
        return self.block_rows * self.tile_cols

    def layout(self, tiles: GemmTiles, parallel: bool) -> WinogradLayout:
        """Where the convolution's parts lie in its workspace: on threads (`parallel`), SLOTS slots."""
        slots = SLOTS if parallel else 1
        conv, a2, m, t = self.conv, self.transform.alpha**2, self.transform.m, self.block_tiles
        gathered = (self.block_rows * m + 2) * (self.tile_cols * m + 2) * (tiles.vector_bytes // 4)
        pack = pack_elements(tiles, t, conv.filters, conv.channels).value
        at = [0]
        for n in (
            a2 * (_ceil(t * conv.channels, LINE) + 1) * LINE,
            a2 * (_ceil(t * conv.filters, LINE) + 1) * LINE,
            pack,
        ):
            at.append(at[-1] + _ceil(n, LINE) * LINE)
        filters = _ceil(a2 * conv.channels * _ceil(conv.filters, tiles.nr) * tiles.nr, LINE) * LINE
        x_size = _ceil(gathered, LINE) * LINE
        return WinogradLayout(filters, at[3], at[1], at[2], filters + slots * at[3], x_size, slots, GATHERS)


LINE = 16  # f32 elements of a 64-byte line: every part of the workspace starts on one


@dataclass(frozen=True)
class WinogradLayout:
    """A convolution's workspace, in elements: the transformed filters U first, then `slots` slots
    from at_slots, each holding the transformed tiles V, then the products M at at_m and the gemm's
    panels at at_pack; then, from at_x, `gathers` copies of one channel group of a unit's input
    (x_size elements each), one per thread that transforms."""

    at_slots: int
    slot: int
    at_m: int
    at_pack: int
    at_x: int
    x_size: int
    slots: int
    gathers: int

    @property
    def elements(self) -> int:
        return self.at_x + self.gathers * self.x_size


def plan_for(conv: WinogradConv, m: int) -> WinogradPlan:
    transform = TRANSFORMS[m]
    tile_rows, tile_cols = _ceil(conv.height, m), _ceil(conv.width, m)
    return WinogradPlan(conv, transform, min(tile_rows, max(1, _ceil(BLOCK_TILES, tile_cols))))


def contraction_plan(c: Contraction | None, m: int, buffers: Mapping[str, Buffer]) -> WinogradPlan | None:
    """The plan of a gemm kernel's contraction under its `winograd` decision m, when m names a transform
    and the contraction is a convolution it applies to; else None (the direct product)."""
    if c is None or m not in TRANSFORMS:
        return None
    conv = match_conv(c, buffers)
    return None if conv is None else plan_for(conv, m)


def combination_ops(row: Sequence[Fraction]) -> int:
    """Operations of one linear combination as codegen/winograd.py writes it: an add per term
    past the first, a multiply per coefficient other than 0 and +-1."""
    terms = [x for x in row if x]
    return max(len(terms) - 1, 0) + sum(1 for x in terms if abs(x) != 1)


def winograd_ops(plan: WinogradPlan) -> int:
    """Operations one convolution (one batch element) executes: the (m + 2)^2 products and the input and
    output transforms; not the filter transform, done at compile time for baked filters and once per
    call (not per element) otherwise."""
    t, conv = plan.transform, plan.conv
    alpha, m = t.alpha, t.m
    tiles = plan.tile_rows * plan.tile_cols
    bt = sum(combination_ops(row) for row in t.bt)
    at = sum(combination_ops(row) for row in t.at)
    products = 2 * alpha**2 * conv.filters * conv.channels * tiles
    inputs = conv.channels * tiles * 2 * alpha * bt
    outputs = conv.filters * tiles * (alpha + m) * at
    return products + inputs + outputs
