"""Tiles of the BLIS-style packed gemm: micro-kernel and cache blocks, threading thresholds, and
the packing workspace they imply. The schedule records them; codegen renders from them."""

from __future__ import annotations

from dataclasses import dataclass

from catenc.symbolic import Expr, ExprLike, floordiv, minimum, to_expr

CTYPES = {"f32": ("float", 4), "f64": ("double", 8), "i32": ("int32_t", 4), "i8": ("int8_t", 1), "u8": ("uint8_t", 1)}


@dataclass(frozen=True)
class GemmKind:
    """What a packed gemm multiplies: the element types of A's and B's panels, that of the
    accumulator (the output), and the depth steps one packed group holds (an int8 dot product
    instruction sums 4 byte products into each 32-bit lane: docs/cli.md "int8 products")."""

    name: str
    a: str
    b: str
    acc: str
    group: int = 1

    @property
    def packed_size(self) -> int:
        return CTYPES[self.a][1]


# The float kinds are named by their dtype; an int8 kind by its operands' signedness, A's first
# (unsigned activations times signed weights: a convolution's weight is A, a matmul's is B).
KINDS = {
    "f32": GemmKind("f32", "f32", "f32", "f32"),
    "f64": GemmKind("f64", "f64", "f64", "f64"),
    "s8u8": GemmKind("s8u8", "i8", "u8", "i32", 4),
    "u8s8": GemmKind("u8s8", "u8", "i8", "i32", 4),
}

# Below this many floating-point operations (2*M*N*K) a product runs on the calling thread:
# waking the OpenMP team costs more than the work saves.
PARALLEL_FLOPS = 4_000_000
# A parallel product uses at most one thread per this many operations.
FLOPS_PER_THREAD = 2_000_000
# A batch of products each below this many operations runs one product per thread.
BATCH_FLOPS = 32_000_000
# The micro-kernels' depth loop is unrolled this many times (clang and gcc pragmas): ~5% over 1.
UNROLL = 2


@dataclass(frozen=True)
class GemmTiles:
    mr: int  # micro-tile rows
    nr: int  # micro-tile columns (a multiple of the vector length)
    kc: int  # depth of a packed panel
    mc: int  # rows of A per cache block (multiple of mr)
    nc: int  # columns of B per cache block at depth kc (multiple of nr): a block holds kc x nc elements
    vector_bytes: int  # width of the vector type used in the micro-kernel (64 = AVX-512, 32 = AVX2, 16 = SSE/NEON)

    def lanes(self, kind: str) -> int:
        """Columns per vector of the micro-kernel for gemms of `kind` (16 for every int8 kernel)."""
        spec = KINDS[kind]
        return 16 if spec.group > 1 else self.vector_bytes // CTYPES[spec.acc][1]

    def check(self, kind: str) -> None:
        """Raise ValueError unless the tiles are usable for gemms of `kind` (KINDS)."""
        if kind not in KINDS:
            raise ValueError(f"gemm: unsupported dtype {kind!r} (expected one of {sorted(KINDS)})")
        size = CTYPES[KINDS[kind].acc][1]
        if self.vector_bytes < size or self.vector_bytes > 64 or self.vector_bytes & (self.vector_bytes - 1):
            raise ValueError(f"gemm: vector_bytes {self.vector_bytes} is not a power of two in [{size}, 64]")
        lanes = self.vector_bytes // size
        if min(self.mr, self.nr, self.kc, self.mc, self.nc) <= 0:
            raise ValueError(f"gemm: tile sizes must be positive: {self}")
        if self.nr % lanes or self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"gemm: need nr % {lanes} == 0, mc % mr == 0, nc % nr == 0: {self}")
        group = KINDS[kind].group
        if group > 1 and (self.kc % group or self.nr % 16):
            raise ValueError(f"gemm: an int8 kind needs kc % {group} == 0 and nr % 16 == 0: {self}")


# The A micro-panel (mr x kc) stays in L1; the B block (kc x nc elements, however deep the slice:
# the driver widens the block of a shallower one) stays in L2 while the A micro-panels stream past it,
# reloading 4 B vectors per depth step; in the row-split (tall) mode the A block (mc x kc) is the other
# L2 tenant. B blocks are 512 KiB on AVX-512 machines (L2 of 1-2 MiB per core) and 256 KiB below
# (AVX2 and NEON cores with 256-512 KiB): on one Cascade Lake core (L2 1 MiB) the 6 x 64 kernel ran at
# 83-88 GFLOP/s over blocks of 64-512 KiB, 70-75 at 768 KiB and 62 at 1 MiB. 6 x 4 vectors:
# 24 accumulators, 4 B vectors and a broadcast of the 32 zmm registers.
_DEFAULTS = {
    ("f32", 64): GemmTiles(mr=6, nr=64, kc=512, mc=192, nc=256, vector_bytes=64),
    ("f64", 64): GemmTiles(mr=6, nr=32, kc=256, mc=192, nc=256, vector_bytes=64),
    # 16 ymm registers: 12 accumulators, 2 B vectors, a broadcast (the BLIS Haswell shape).
    ("f32", 32): GemmTiles(mr=6, nr=16, kc=256, mc=144, nc=256, vector_bytes=32),
    ("f64", 32): GemmTiles(mr=6, nr=8, kc=256, mc=96, nc=128, vector_bytes=32),
    # 16 registers and maybe no FMA (SSE2; NEON has 32): 8 accumulators leave room for the products.
    ("f32", 16): GemmTiles(mr=4, nr=8, kc=256, mc=96, nc=256, vector_bytes=16),
    ("f64", 16): GemmTiles(mr=4, nr=4, kc=256, mc=96, nc=128, vector_bytes=16),
}
# int8 (4-deep groups of bytes, i32 accumulators): with AVX-512 VNNI, 8 rows x 2 vectors of 16 columns
# (16 accumulators, 2 B vectors, a broadcast); on 32- and 16-byte vectors 4 x 16 (AVX-VNNI: 8
# accumulators; AVX2's widening path: 8 pairs). kc steps are bytes: the A micro-panel (8 KiB) stays in L1.
for _kind in ("s8u8", "u8s8"):
    _DEFAULTS[(_kind, 64)] = GemmTiles(mr=8, nr=32, kc=1024, mc=192, nc=512, vector_bytes=64)
    for _bytes in (32, 16):
        _DEFAULTS[(_kind, _bytes)] = GemmTiles(mr=4, nr=16, kc=1024, mc=96, nc=512, vector_bytes=_bytes)


def default_tiles(dtype: str, vector_bytes: int) -> GemmTiles:
    """Tiles for gemms of kind `dtype` (KINDS) with `vector_bytes`-wide vectors (64, 32 or 16)."""
    try:
        return _DEFAULTS[(dtype, vector_bytes)]
    except KeyError:
        raise ValueError(f"gemm: no default tiles for dtype {dtype!r} with {vector_bytes}-byte vectors") from None


# Bytes at which each thread's packed panels start, in a batch of products run one per thread:
# the workspace is sized (passes/pipelines.py) and the slots addressed (lower/gemm.py) by it.
PANEL_ALIGN = 64


def _round_up(x: Expr, multiple: int) -> Expr:
    return floordiv(x + (multiple - 1), multiple) * multiple


def pack_elements(tiles: GemmTiles, M: ExprLike, N: ExprLike, K: ExprLike, kind: GemmKind = KINDS["f32"]) -> Expr:
    """Elements (of the accumulator type) of packing workspace `catenc_gemm_<kind>` needs for an M x K
    by K x N product: kc_eff * (round_up(M, mr) + round_up(N, nr)) packed elements with kc_eff =
    min(K, kc) rounded up to whole groups (sizes are >= 0)."""
    M, N, K = to_expr(M), to_expr(N), to_expr(K)
    groups = floordiv(minimum(K, tiles.kc) + (kind.group - 1), kind.group)
    per_group = kind.group * kind.packed_size // CTYPES[kind.acc][1]  # accumulator elements a group of a row fills
    return groups * per_group * (_round_up(M, tiles.mr) + _round_up(N, tiles.nr))


def slice_depth(tiles: GemmTiles, depth: int, group: int = 1) -> int:
    """The depth of the driver's k-slices of a product `depth` deep (catenc_gemm_thread_<T>'s kc):
    all of it up to kc, else as few slices of at most kc as will do, of nearly equal depths, each
    rounded up to whole groups of `group` steps (an int8 kind's)."""
    if depth <= tiles.kc:
        return depth
    slices = -(-depth // tiles.kc)
    even = -(-depth // slices)
    return -(-even // group) * group
