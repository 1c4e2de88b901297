"""Convolution patches packed by windows, and how the packed gemm driver shares work among threads.

A padded read `where(in bounds, x[..., ow + s - p], 0)` packs as three spans per run of the
last index (zeros, the unguarded inside, zeros), the inside as one block copy where it is
contiguous (stride 1): checked by counting the copies in the C, and against numpy at odd sizes,
paddings wider than the kernel, strides, dilations and depths past one k-slice. The threading
decisions of templates/gemm.c.j2 (threads per product, columns or rows, a batch one product per
thread or each product on all) are called from C and counted; batched and skinny products with
threads forced on for every size are checked against numpy.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_close, compile_text, randn

from catenc.codegen.gemm import render_gemm_support
from catenc.schedule.tiles import BATCH_FLOPS, PARALLEL_FLOPS, default_tiles

# name -> (stride, padding, dilation); "wide": padding past the kernel, whole rows and runs are zeros
CONV = {"s1p1": (1, 1, 1), "s2p1": (2, 1, 1), "d2p2": (1, 2, 2), "wide": (1, 3, 1), "s3p0": (3, 0, 1)}
FORCE_THREADS = "CFLAGS=-DCATENC_GEMM_PARALLEL_FLOPS=0 -DCATENC_GEMM_FLOPS_PER_THREAD=1"


def _conv_source(tags=tuple(CONV)) -> str:
    out = []
    for tag in tags:
        s, p, d = CONV[tag]
        oh = f"(H + {2 * p} - {d}*(R - 1) - 1) // {s} + 1"
        ow = f"(W + {2 * p} - {d}*(S - 1) - 1) // {s} + 1"
        out.append(f"""
[composite.conv_{tag}]
inputs = ["x: f32[N, C, H, W]", "w: f32[K, C, R, S]"]
outputs = ["y: f32[N, K, {oh}, {ow}]"]
body = "y = conv2d(x, w, stride={s}, padding={p}, dilation={d})"
""")
    return "".join(out)


GEMMS = """
[composite.bmm]
inputs = ["a: f32[B, M, K]", "b: f32[B, K, N]"]
outputs = ["y: f32[B, M, N]"]
body = "y = a @ b"

[composite.mm]
inputs = ["a: f32[M, K]", "b: f32[K, N]"]
outputs = ["y: f32[M, N]"]
body = "y = a @ b"
"""


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return compile_text(tmp_path_factory.mktemp("conv"), _conv_source(), name="convs")


@pytest.fixture(scope="module", params=["default", "threads-forced"])
def gemms(request, tmp_path_factory):
    config = {"CFLAGS": FORCE_THREADS.split("=", 1)[1]} if request.param == "threads-forced" else None
    return compile_text(tmp_path_factory.mktemp("gemms"), GEMMS, name="gemms", config=config)


def np_conv(x, w, stride, padding, dilation):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - dilation * (r - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (s - 1) - 1) // stride + 1
    y = np.zeros((n, k, oh, ow))
    for i in range(r):
        for j in range(s):
            a, b = i * dilation, j * dilation
            patch = xp[:, :, a : a + stride * (oh - 1) + 1 : stride, b : b + stride * (ow - 1) + 1 : stride]
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j].astype(np.float64))
    return y


def test_contiguous_windows_pack_by_block_copies(conv):
    """Stride 1 (any padding or dilation): one block copy per pack of the patches; stride 2: a copy of
    every other element (two vectors' even elements); stride 3: the window's inside is a strided loop,
    no copy, kept scalar (clang's gathers were slower); the
    weights (no guard) pack as before. (The window
    sizes are symbolic here, so no patch packs as masked rows: test_masked_pack.py.)"""
    source = (conv.path.parent / "convs.c").read_text()
    for tag, (stride, _, _) in CONV.items():
        pack_b = source.split(f"static void conv_{tag}_k0_g0_pack_b(")[1].split("\n}\n")[0]
        pack_a = source.split(f"static void conv_{tag}_k0_g0_pack_a(")[1].split("\n}\n")[0]
        assert pack_b.count("catenc_lo") >= 3, tag  # the window's bounds and spans
        assert pack_b.count("CATENC_GEMM_COPY(") == (1 if stride == 1 else 0), tag
        assert pack_b.count("catenc_gemm_copy_even_f32(") == (1 if stride == 2 else 0), tag  # vector shuffles
        assert ("CATENC_SCALAR_LOOP" in pack_b) == (stride > 2), tag  # no gathers for a strided inside
        assert "catenc_lo" not in pack_a and "CATENC_GEMM_COPY(" not in pack_a, tag


# (N, C, H, W, K, R, S): W under and over the 64-column panel, runs across panels and rows, one
# column, one row, a depth C*R*S past the 512-deep k-slice (two equal slices), K not a multiple of 6
CONV_SIZES = [(1, 1, 1, 1, 1, 3, 3), (2, 3, 13, 11, 8, 3, 3), (1, 5, 7, 70, 13, 3, 2), (2, 2, 40, 1, 7, 1, 3)]
CONV_SIZES += [(1, 60, 9, 9, 5, 3, 3), (1, 4, 23, 37, 17, 3, 3)]


@pytest.mark.parametrize("config", [{"MARCH": "x86-64"}, {"MARCH": "x86-64-v3"}, {"CC": "gcc"}])
def test_stride_two_patches_copy_every_other_element_on_any_vectors(tmp_path, config):
    """4- and 8-lane vectors and gcc's __builtin_shufflevector; rows of 1 to 40 columns (the copy's
    vector loop, its scalar tail, and a row that ends the input: its last element read is the row's)."""
    lib = compile_text(tmp_path, _conv_source(["s2p1"]), name="even", config=config)
    assert "catenc_gemm_copy_even_f32(&" in (tmp_path / "out_even_O2" / "even.c").read_text()
    for width in (1, 2, 17, 33, 80):
        x, w = randn((1, 3, 5, width), seed=width), randn((4, 3, 3, 3), seed=1)
        assert_close(lib["conv_s2p1"](x, w), np_conv(x, w, 2, 1, 1), rtol=1e-5, atol=1e-5)


def _fits(tag: str, size: tuple[int, ...]) -> bool:
    """Whether the dilated kernel fits the padded input (else a shape error, tested in test_ops_conv)."""
    _, padding, dilation = CONV[tag]
    _, _, h, w, _, r, s = size
    return h + 2 * padding >= dilation * (r - 1) + 1 and w + 2 * padding >= dilation * (s - 1) + 1


@pytest.mark.parametrize("tag,size", [(tag, size) for tag in CONV for size in CONV_SIZES if _fits(tag, size)])
def test_windowed_conv_matches_numpy(conv, tag, size):
    stride, padding, dilation = CONV[tag]
    n, c, h, w_, k, r, s = size
    x, w = randn((n, c, h, w_), seed=1), randn((k, c, r, s), seed=2)
    want = np_conv(x, w, stride, padding, dilation)
    assert_close(conv[f"conv_{tag}"](x, w), want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("bmkn", [(12, 64, 64, 64), (12, 256, 64, 256), (3, 17, 600, 65), (8, 64, 576, 200)])
def test_batched_products(gemms, bmkn):
    b, m, k, n = bmkn
    a, bb = randn((b, m, k), seed=1), randn((b, k, n), seed=2)
    assert_close(gemms["bmm"](a, bb), a.astype(np.float64) @ bb, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("mkn", [(64, 512, 1536), (64, 1536, 512), (1, 700, 3000), (5, 1100, 70), (7, 3, 2000)])
def test_skinny_products(gemms, mkn):
    m, k, n = mkn
    a, b = randn((m, k), seed=1), randn((k, n), seed=2)
    assert_close(gemms["mm"](a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5 * np.sqrt(k))


DECISIONS = r"""
#include <stdio.h>
#include "gemm.h"
int main(void) {
    /* M, N, K: the threads of the product out of 2, then columns (1) or rows (0) for a team of 2 */
    static const long long p[][3] = {{4, 4, 4}, {64, 512, 1536}, {64, 1536, 512}, {4096, 16, 256}, {6, 16, 100000},
                                     {7, 10, 10000}};
    static const long long b[][5] = {{12, 256, 256, 64, 2}, {12, 64, 64, 64, 2}, {8, 64, 3136, 576, 2},
                                     {8, 64, 3136, 576, 16}, {3, 1024, 1024, 1024, 2}, {12, 4, 4, 4, 2},
                                     {1, 256, 256, 64, 2}};
    unsigned i;
    for (i = 0; i < sizeof p / sizeof p[0]; ++i)
        printf("team %d split_n %d\n", catenc_gemm_team_f32(p[i][0], p[i][1], p[i][2], 2),
               catenc_gemm_split_n_f32(p[i][0], p[i][1], 2));
    printf("of 16: %d %d %d\n", catenc_gemm_team_f32(1024, 1024, 1024, 16), catenc_gemm_team_f32(64, 64, 64, 16),
           catenc_gemm_team_f32(60, 64, 100000, 16));
    for (i = 0; i < sizeof b / sizeof b[0]; ++i)
        printf("apart %d\n", (int)CATENC_GEMM_APART(b[i][0], b[i][1], b[i][2], b[i][3], 2, b[i][4]));
    return 0;
}
"""


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_threading_decisions(tmp_path: Path, vector_bytes: int):
    """Counted, not timed: tiny products stay on the calling thread, threads stop at one per
    FLOPS_PER_THREAD and at the panels there are, skinny products (few rows) split their columns,
    tall ones their rows; a batch runs one product per thread when its products are small or it
    splits evenly among the (2) slots with no more threads on offer, and not at all on threads below
    PARALLEL_FLOPS in all."""
    assert (PARALLEL_FLOPS, BATCH_FLOPS) == (4_000_000, 32_000_000)  # the expectations below assume these
    compiler = shutil.which("gcc") or shutil.which("clang")
    assert compiler, "a C compiler with OpenMP (gcc has it built in) is needed"
    (tmp_path / "gemm.h").write_text(render_gemm_support({"f32": default_tiles("f32", vector_bytes)}))
    (tmp_path / "main.c").write_text(DECISIONS)
    exe = tmp_path / "decide"
    cmd = [compiler, "-std=c99", "-O1", "-fopenmp", f"-I{tmp_path}", str(tmp_path / "main.c"), "-o", str(exe)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines == [
        "team 1 split_n 1",  # 128 flops: one thread
        "team 2 split_n 1",  # skinny (64 rows): columns
        "team 2 split_n 1",
        "team 2 split_n 0",  # tall (one column panel): rows
        "team 1 split_n 1",  # one micro-tile of output, however deep: the depth is not split
        "team 1 split_n 0",  # 1.4 Mflop: below the threshold
        "of 16: 16 1 10",  # all 16; 0.5 Mflop: one; ten row panels: ten
        "apart 1",  # small products
        "apart 1",
        "apart 1",  # large products, 8 on 2 threads: one per thread, no barrier
        "apart 0",  # ... but with 16 threads on offer, each product on all 16
        "apart 0",  # large products, 3 on 2 threads: each on both
        "apart 0",  # 1.5 kflop in all: no threads
        "apart 0",  # one product
    ]


STATIC_WEIGHTS = """
[composite.conv_static]
inputs = ["x: f32[2, 5, 9, 9]", "w: f32[13, 5, 3, 3]"]
outputs = ["y: f32[2, 13, 9, 9]"]
body = "y = conv2d(x, w, stride=1, padding=1, dilation=1)"

[composite.bmm_static]
inputs = ["a: f32[3, 13, 40]", "b: f32[3, 40, 70]"]
outputs = ["y: f32[3, 13, 70]"]
body = "y = a @ b"
"""


@pytest.mark.parametrize("threads", ["serial", "threads-forced"])
def test_a_stored_rows_by_depth_is_read_in_place(tmp_path: Path, threads: str):
    """A weight stored [rows, depth] (a convolution's [K, C, R, S], a batch of row-major A) is not packed:
    the driver reads it in place from its offset, packing only the last partial panel (13 rows)."""
    config = {"CFLAGS": FORCE_THREADS.split("=", 1)[1]} if threads == "threads-forced" else None
    lib = compile_text(tmp_path, STATIC_WEIGHTS, name="static", config=config)
    source = (lib.path.parent / "static.c").read_text()
    assert "catenc_gemm_call_f32(13LL, 81LL, 45LL, w, 45LL," in source
    assert "catenc_gemm_call_f32(13LL, 70LL, 40LL, a + (520LL*i" in source
    x, w = randn((2, 5, 9, 9), seed=1), randn((13, 5, 3, 3), seed=2)
    assert_close(lib["conv_static"](x, w), np_conv(x, w, 1, 1, 1), rtol=1e-5, atol=1e-5)
    a, b = randn((3, 13, 40), seed=3), randn((3, 40, 70), seed=4)
    assert_close(lib["bmm_static"](a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


CONTIGUOUS = """
[composite.pointwise_silu]
inputs = ["x: f32[C, H, W]", "w: f32[K, C]", "bias: f32[K]", "skip: f32[K, H, W]"]
outputs = ["y: f32[K, H, W]"]
body = '''
t[k, h, j] = sum[c](w[k, c] * x[c, h, j]) + bias[k]
y = t * sigmoid(t) + skip
'''

[composite.pointwise_concat]
inputs = ["a: f32[3, H, W]", "b: f32[5, H, W]", "w: f32[K, 8]"]
outputs = ["y: f32[K, H, W]"]
body = '''
x = concat([a, b], 0)
y[k, h, j] = sum[c](w[k, c] * x[c, h, j])
'''

[composite.pointwise_transposed_skip]
inputs = ["x: f32[C, H, W]", "w: f32[K, C]", "skip: f32[K, W, H]"]
outputs = ["y: f32[K, H, W]"]
body = '''
t[k, h, j] = sum[c](w[k, c] * x[c, h, j]) + skip[k, j, h]
y = t
'''
"""


def test_an_output_plane_is_walked_as_one_run(tmp_path: Path):
    """A 1x1 convolution's columns (h, w) are one run where every element read and written
    steps alike along them: the packing and the epilogue (SiLU, a residual) loop once over the
    plane (vectorised) instead of once per row of 14; a residual read transposed keeps the rows."""
    lib = compile_text(tmp_path, CONTIGUOUS, name="contiguous")
    source = (lib.path.parent / "contiguous.c").read_text()

    def function(name: str) -> str:
        return source.split(f"static void {name}(")[1].split("\n}\n")[0]

    for part in ("pack_b", "epilogue"):
        assert "catenc_run" not in function(f"pointwise_silu_k0_g0_{part}"), part
        assert "catenc_flat_" in function(f"pointwise_silu_k0_g0_{part}"), part
    assert "catenc_run" in function("pointwise_transposed_skip_k0_g0_epilogue")
    # a concatenation along the depth: each depth step copies one part, as one run (lower/gemm.py depth_cases)
    concat = function("pointwise_concat_k0_g0_pack_b")
    assert "if (catenc_case0)" in concat and "catenc_run" not in concat
    c, h, w, k = 19, 14, 14, 37
    x, wt, bias, skip = randn((c, h, w), seed=1), randn((k, c), seed=2), randn((k,), seed=3), randn((k, h, w), seed=4)
    t = np.einsum("kc,chw->khw", wt.astype(np.float64), x) + bias[:, None, None]
    assert_close(lib["pointwise_silu"](x, wt, bias, skip), t / (1 + np.exp(-t)) + skip, rtol=1e-5, atol=1e-5)
    skip_t = randn((k, w, h), seed=5)
    want = np.einsum("kc,chw->khw", wt.astype(np.float64), x) + skip_t.transpose(0, 2, 1)
    assert_close(lib["pointwise_transposed_skip"](x, wt, skip_t), want, rtol=1e-5, atol=1e-5)
    a, b, w8 = randn((3, h, w), seed=6), randn((5, h, w), seed=7), randn((k, 8), seed=8)
    want = np.einsum("kc,chw->khw", w8.astype(np.float64), np.concatenate([a, b]))
    assert_close(lib["pointwise_concat"](a, b, w8), want, rtol=1e-5, atol=1e-5)
