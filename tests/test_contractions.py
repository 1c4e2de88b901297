"""Contractions through the packed gemm driver: recognised, and exact at every edge size.

Each composite is checked to have become a packed gemm kernel (so the driver, not plain loops,
computed it), then compared with numpy (float64) at sizes that hit every remainder of the
micro-tile, the cache blocks and the depth slices: 1, 3, 17, 63, 65 and past 1000.
"""

from __future__ import annotations

from math import erf

import numpy as np
import pytest
from conftest import randn, runtime

from catenc.driver import plan_file
from catenc.lower.loops import Gemm, iter_stmts
from catenc.plan import Options
from catenc.schedule.tiles import default_tiles

EDGE = (1, 3, 17, 63, 65)


def rel_err(got, want) -> float:
    want = np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def check(got, want, k: int, dtype=np.float32) -> None:
    assert got.shape == want.shape
    eps = 1e-6 if dtype == np.float32 else 1e-14
    assert rel_err(got, want) <= eps * 8 * max(1, k) ** 0.5 + eps * 4


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """plan(text) -> the entries' plans, without building (for recognition checks)."""

    def plan(text: str, opt: str = "2"):
        directory = tmp_path_factory.mktemp("plan")
        path = directory / "m.toml"
        path.write_text(text)
        rt = runtime()
        options = Options(rt, config=rt.validate_config({}), opt=opt)
        return plan_file(str(path), options).entries

    return plan


def gemms(entries) -> list[Gemm]:
    return [s for e in entries for k in e.kernels for s in iter_stmts(k.body) if isinstance(s, Gemm)]


GEMM = """
[composite.gemm]
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"

[composite.gemm_tn]
inputs = ["A: f32[K, M]", "B: f32[N, K]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[k, i] * B[j, k])"

[composite.gemm_out_t]
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[N, M]"]
body = "C[j, i] = sum[k](A[i, k] * B[k, j])"

[composite.dgemm]
inputs = ["A: f64[M, K]", "B: f64[K, N]"]
outputs = ["C: f64[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"

[composite.linear_gelu]
inputs = ["x: f32[M, K]", "w: f32[K, N]", "b: f32[N]"]
outputs = ["y: f32[M, N]"]
body = "y = gelu(x @ w + b)"

[composite.bmm]
inputs = ["a: f32[B, M, K]", "b: f32[B, K, N]"]
outputs = ["c: f32[B, M, N]"]
body = "c = a @ b"

[composite.heads]
doc = "per-head scores of packed q and k, scaled and causally masked (guarded contraction)"
inputs = ["q: f32[T, H*D]", "k: f32[T, H*D]"]
outputs = ["s: f32[H, T, T]"]
body = "s[h, i, j] = where(j <= i, sum[d < D](q[i, h*D + d] * k[j, h*D + d]) * 0.125, -inf)"

[composite.rows3]
doc = "a 3-d input times a matrix: the rows flatten over two indices"
inputs = ["x: f32[B, T, K]", "w: f32[K, N]"]
outputs = ["y: f32[B, T, N]"]
body = "y[b, t, n] = sum[k](x[b, t, k] * w[k, n])"

[composite.depth2]
doc = "a contraction over two indices at once, plus a broadcast index neither operand reads"
inputs = ["a: f32[M, P, Q]", "b: f32[P, Q, N]", "c: f32[R]"]
outputs = ["y: f32[M, R, N]"]
body = "y[i, r, j] = sum[p, q](a[i, p, q] * b[p, q, j]) + c[r]"
"""


@pytest.fixture(scope="module")
def lib(compile_composites):
    return compile_composites(GEMM, name="contractions")


def test_every_composite_is_a_packed_gemm(planned):
    entries = planned(GEMM)
    for entry in entries:
        assert gemms([entry]), f"{entry.name} did not become a packed gemm"


def test_no_packed_gemm_at_O0(planned):
    assert not gemms(planned(GEMM, opt="0"))


@pytest.mark.parametrize("m", EDGE)
@pytest.mark.parametrize("n", EDGE)
def test_gemm_edge_sizes(lib, m, n):
    for k in (1, 17, 300):
        a, b = randn((m, k), seed=m), randn((k, n), seed=n)
        check(lib.gemm(a, b), a.astype(np.float64) @ b, k)


@pytest.mark.parametrize("mnk", [(1000, 33, 7), (5, 1100, 9), (31, 29, 1030), (257, 259, 600)])
def test_gemm_beyond_the_cache_blocks(lib, mnk):
    m, n, k = mnk
    a, b = randn((m, k), seed=1), randn((k, n), seed=2)
    check(lib.gemm(a, b), a.astype(np.float64) @ b, k)


def test_depth_slices_accumulate(lib):
    """K past several depth slices (kc) and not a multiple of one."""
    kc = default_tiles("f32", 64).kc
    k = 3 * kc + 5
    a, b = randn((40, k), seed=3), randn((k, 70), seed=4)
    check(lib.gemm(a, b), a.astype(np.float64) @ b, k)


def test_empty_depth_gives_zeros(lib):
    c = lib.gemm(np.zeros((5, 0), np.float32), np.zeros((0, 7), np.float32))
    assert c.shape == (5, 7) and not c.any()


def test_empty_rows(lib):
    assert lib.gemm(np.zeros((0, 4), np.float32), randn((4, 6))).shape == (0, 6)


@pytest.mark.parametrize("shape", [(17, 63, 65), (1, 1, 1), (64, 48, 300)])
def test_transposed_operands_and_output(lib, shape):
    m, n, k = shape
    a, b = randn((k, m), seed=5), randn((n, k), seed=6)
    check(lib.gemm_tn(a, b), a.T.astype(np.float64) @ b.T, k)
    a, b = randn((m, k), seed=7), randn((k, n), seed=8)
    check(lib.gemm_out_t(a, b), (a.astype(np.float64) @ b).T, k)


@pytest.mark.parametrize("shape", [(3, 17, 65), (70, 9, 130)])
def test_f64(lib, shape):
    m, n, k = shape
    a, b = randn((m, k), np.float64, 9), randn((k, n), np.float64, 10)
    check(lib.dgemm(a, b), a @ b, k, np.float64)


@pytest.mark.parametrize("shape", [(1, 1, 1), (13, 63, 17), (100, 70, 33)])
def test_fused_epilogue(lib, shape):
    m, n, k = shape
    x, w, b = randn((m, k), seed=11), randn((k, n), seed=12), randn((n,), seed=13)
    t = x.astype(np.float64) @ w + b
    want = 0.5 * t * (1 + np.vectorize(erf)(t / np.sqrt(2)))
    check(lib.linear_gelu(x, w, b), want, k)


@pytest.mark.parametrize("bmnk", [(1, 1, 1, 1), (3, 17, 5, 63), (12, 64, 65, 16)])
def test_batched(lib, bmnk):
    bsz, m, n, k = bmnk
    a, b = randn((bsz, m, k), seed=14), randn((bsz, k, n), seed=15)
    check(lib.bmm(a, b), a.astype(np.float64) @ b, k)


@pytest.mark.parametrize("thd", [(1, 1, 1), (17, 3, 8), (70, 2, 64)])
def test_guarded_scores(lib, thd):
    t, h, d = thd
    q, k = randn((t, h * d), seed=16), randn((t, h * d), seed=17)
    qh = q.astype(np.float64).reshape(t, h, d).transpose(1, 0, 2)
    kh = k.astype(np.float64).reshape(t, h, d).transpose(1, 0, 2)
    want = qh @ kh.transpose(0, 2, 1) * 0.125
    want = np.where(np.tril(np.ones((t, t), bool)), want, -np.inf)
    got = lib.heads(q, k, D=d)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite)
    check(np.where(finite, got, 0), np.where(finite, want, 0), d)


@pytest.mark.parametrize("btkn", [(2, 3, 5, 7), (3, 17, 65, 33)])
def test_rows_over_two_indices(lib, btkn):
    bsz, t, k, n = btkn
    x, w = randn((bsz, t, k), seed=18), randn((k, n), seed=19)
    check(lib.rows3(x, w), x.astype(np.float64) @ w, k)


@pytest.mark.parametrize("mpqnr", [(3, 2, 5, 7, 1), (17, 9, 4, 33, 3)])
def test_two_depth_indices_and_a_broadcast_index(lib, mpqnr):
    m, p, q, n, r = mpqnr
    a, b, c = randn((m, p, q), seed=20), randn((p, q, n), seed=21), randn((r,), seed=22)
    prod = np.einsum("ipq,pqj->ij", a.astype(np.float64), b)
    want = prod[:, None, :] + c[None, :, None]
    check(lib.depth2(a, b, c), want, p * q)


CONV = """
[composite.conv]
inputs = ["x: f32[N, C, H, W]", "w: f32[K, C, 3, 3]"]
outputs = ["y: f32[N, K, H, W]"]
body = '''
y[n, k, oh, ow] = sum[c, r, s](
    where((oh + r >= 1) & (oh + r <= H) & (ow + s >= 1) & (ow + s <= W),
          x[n, c, oh + r - 1, ow + s - 1], 0.0) * w[k, c, r, s])
'''
"""


def conv_ref(x, w):
    n, c, h, wd = x.shape
    k = w.shape[0]
    padded = np.zeros((n, c, h + 2, wd + 2))
    padded[:, :, 1:-1, 1:-1] = x
    out = np.zeros((n, k, h, wd))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,kc->nkhw", padded[:, :, r : r + h, s : s + wd], w[:, :, r, s])
    return out


def test_conv_is_an_implicit_gemm(planned):
    (g,) = gemms(planned(CONV))
    assert [n for n, _ in g.contraction.batch] and len(g.contraction.cols) == 2  # per image, columns (oh, ow)


@pytest.mark.parametrize("nchwk", [(1, 1, 1, 1, 1), (2, 3, 13, 11, 8), (1, 5, 7, 40, 17), (2, 16, 9, 9, 33)])
def test_conv_edge_sizes(compile_composites, nchwk):
    lib = compile_composites(CONV, name="conv")
    n, c, h, w, k = nchwk
    x, f = randn((n, c, h, w), seed=23), randn((k, c, 3, 3), seed=24)
    check(lib.conv(x, f), conv_ref(x.astype(np.float64), f), c * 9)


NARROWED = """
[composite.narrowed]
inputs = ["a: f64[M, K]", "b: f64[K, N]"]
outputs = ["c: f32[M, N]"]
body = "c = cast(a @ b, f32)"
"""


@pytest.mark.parametrize("mkn", [(1, 5, 4), (7, 9, 4), (65, 3, 130)])
def test_a_product_cast_to_a_narrower_output_goes_through_a_temp(compile_composites, planned, mkn):
    """The driver writes the product in its own dtype (f64 here): written in place into an f32
    output it overflowed the buffer; the product now lands in a temp and the cast reads it."""
    (entry,) = planned(NARROWED)
    (gemm,) = gemms([entry])
    assert gemm.contraction.output != "c"
    m, k, n = mkn
    a, b = randn((m, k), np.float64, seed=1), randn((k, n), np.float64, seed=2)
    got = compile_composites(NARROWED).narrowed(a, b)
    np.testing.assert_array_equal(got, (a @ b).astype(np.float32))
