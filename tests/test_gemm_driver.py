"""The BLIS-style GEMM support (catenc/codegen/gemm.py, templates/gemm.c.j2) on its own.

A small C harness supplies the packing functions (strided A and B, so row-major and transposed
operands are one function) and calls `catenc_gemm_f32/f64` for a list of cases read from a file;
the outputs are compared with numpy in float64. Each configuration (compiler, OpenMP or not,
tiles, sanitizers) is compiled once per module and runs all its cases in one process.

Checked: every remainder of MR/NR/KC/MC/NC and empty dims, strided and transposed C (also
negative and rsc < csc strides: nothing outside the C pattern may be written), the workspace
size (allocated exactly as `pack_elements` says, so AddressSanitizer sees any overrun), the
panel ranges and alignment the driver passes to the packing functions, the threaded paths
(forced on for small sizes), a call from inside a parallel region, and A read in place
(`catenc_gemm_direct_a`, bit for bit the packed results). The rendered text must
compile without warnings under -std=c99 -Wall -Wextra -pedantic with clang and gcc.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from catenc.codegen.gemm import render_gemm_support
from catenc.schedule.tiles import GemmTiles, default_tiles, pack_elements
from catenc.symbolic import parse_expr
from tests.toolchains import SANITIZE

CLANG = shutil.which("clang")
CC = CLANG or shutil.which("gcc") or "cc"
GCC = shutil.which("gcc")
WARN = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror")
NATIVE = ("-march=native",) if os.uname().machine in ("x86_64", "AMD64") else ()
FORCE_THREADS = ("-DCATENC_GEMM_PARALLEL_FLOPS=0", "-DCATENC_GEMM_FLOPS_PER_THREAD=1")

HARNESS = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "gemm.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define HDR 17
static void fail(const char* what) { fprintf(stderr, "harness: %s\n", what); exit(3); }
static void read_all(FILE* f, void* p, size_t bytes) {
    if (bytes && fread(p, 1, bytes, f) != bytes) fail("short read");
}
static void* alloc(size_t bytes) {
    void* p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) fail("out of memory");
    return p;
}

/* The depth of the driver's k-slices: K in slices of equal depth, at most kc each. */
static int64_t catenc_gemm_slice(int64_t K, int64_t kc) { int64_t n = (K + kc - 1) / kc; return (K + n - 1) / n; }

#define HARNESS_DTYPE(T, S, VB)                                                                           \
typedef struct { const T* A; const T* B; int64_t M, N, K, sai, sak, sbk, sbj; const T* ws; int64_t ws_n; } ctx_##S; \
static void check_call_##S(const ctx_##S* c, const T* dst, int64_t first, int64_t panels, int64_t k0, int64_t kb,     \
                       int64_t total, int64_t R) {                                                         \
    if (first < 0 || panels < 1 || first + panels > total) fail("panel range out of bounds");            \
    if (k0 < 0 || kb < 1 || k0 + kb > c->K || kb > CATENC_GEMM_KC_##S) fail("k-slice out of bounds");  \
    if (k0 % catenc_gemm_slice(c->K, CATENC_GEMM_KC_##S) != 0) fail("k-slices not of equal depth");       \
    if (dst < c->ws || dst + panels * kb * R > c->ws + c->ws_n) fail("packing outside the workspace");   \
}                                                                                                          \
static void pack_a_##S(const void* vc, T* dst, int64_t first, int64_t panels, int64_t k0, int64_t kb) {   \
    const ctx_##S* c = (const ctx_##S*)vc;                                                                \
    const int64_t MR = CATENC_GEMM_MR_##S;                                                                \
    int64_t p, k, r;                                                                                      \
    check_call_##S(c, dst, first, panels, k0, kb, (c->M + MR - 1) / MR, MR);                                 \
    for (p = first; p < first + panels; ++p)                                                              \
        for (k = 0; k < kb; ++k)                                                                          \
            for (r = 0; r < MR; ++r) {                                                                    \
                int64_t i = p * MR + r;                                                                   \
                dst[(p - first) * kb * MR + k * MR + r] = i < c->M ? c->A[i * c->sai + (k0 + k) * c->sak] : 0; \
            }                                                                                             \
}                                                                                                          \
static void pack_b_##S(const void* vc, T* dst, int64_t first, int64_t panels, int64_t k0, int64_t kb) {   \
    const ctx_##S* c = (const ctx_##S*)vc;                                                                \
    const int64_t NR = CATENC_GEMM_NR_##S;                                                                \
    int64_t q, k, j;                                                                                      \
    check_call_##S(c, dst, first, panels, k0, kb, (c->N + NR - 1) / NR, NR);                                 \
    if ((uintptr_t)dst % (VB) != 0) fail("B panel not aligned to the vector width");                     \
    for (q = first; q < first + panels; ++q)                                                              \
        for (k = 0; k < kb; ++k)                                                                          \
            for (j = 0; j < NR; ++j) {                                                                    \
                int64_t jj = q * NR + j;                                                                  \
                dst[(q - first) * kb * NR + k * NR + j] = jj < c->N ? c->B[(k0 + k) * c->sbk + jj * c->sbj] : 0; \
            }                                                                                             \
}                                                                                                          \
/* The product through catenc_gemm, or (flag 2 of h[15]) through catenc_gemm_direct_a reading A in place. */ \
static void gemm_##S(const int64_t* h, const ctx_##S* c, T* C, T* W) {                                    \
    if (h[15] & 2)                                                                                        \
        catenc_gemm_direct_a_##S(h[1], h[2], h[3], c->A, h[4], pack_a_##S, pack_b_##S, c, C, h[10], h[11], W); \
    else catenc_gemm_##S(h[1], h[2], h[3], pack_a_##S, pack_b_##S, c, C, h[10], h[11], W);               \
}                                                                                                          \
static void run_##S(FILE* in, FILE* out, const int64_t* h) {                                              \
    const int64_t M = h[1], N = h[2], K = h[3], c_off = h[12], c_len = h[13], ws_n = h[16];              \
    T* A = (T*)alloc(sizeof(T) * (size_t)h[6]);                                                           \
    T* B = (T*)alloc(sizeof(T) * (size_t)h[9]);                                                           \
    T* C = (T*)alloc(sizeof(T) * (size_t)c_len);                                                          \
    T* W = (T*)alloc(sizeof(T) * (size_t)ws_n);                                                           \
    int64_t i, helper = catenc_gemm_pack_elements_##S(M, N, K), mismatch = 0;                              \
    ctx_##S c;                                                                                            \
    read_all(in, A, sizeof(T) * (size_t)h[6]);                                                            \
    read_all(in, B, sizeof(T) * (size_t)h[9]);                                                            \
    for (i = 0; i < c_len; ++i) C[i] = (T)NAN;                                                            \
    c.A = A; c.B = B; c.M = M; c.N = N; c.K = K; c.sai = h[4]; c.sak = h[5]; c.sbk = h[7]; c.sbj = h[8];  \
    c.ws = W; c.ws_n = ws_n;                                                                              \
    if (h[15] & 1) {                                                                                      \
        /* from inside a parallel region: each thread its own product, serially */                       \
        T* C2 = (T*)alloc(sizeof(T) * (size_t)c_len);                                                     \
        T* W2 = (T*)alloc(sizeof(T) * (size_t)ws_n);                                                      \
        ctx_##S c2 = c;                                                                                   \
        c2.ws = W2;                                                                                       \
        for (i = 0; i < c_len; ++i) C2[i] = (T)NAN;                                                       \
        PARALLEL2                                                                                         \
        {                                                                                                 \
            if (THREAD_NUM == 0) gemm_##S(h, &c, C + c_off, W);                                           \
            else gemm_##S(h, &c2, C2 + c_off, W2);                                                        \
        }                                                                                                 \
        mismatch = memcmp(C, C2, sizeof(T) * (size_t)c_len) != 0;                                         \
        free(C2);                                                                                         \
        free(W2);                                                                                         \
    } else {                                                                                              \
        gemm_##S(h, &c, C + c_off, W);                                                                    \
    }                                                                                                     \
    fwrite(&helper, sizeof helper, 1, out);                                                               \
    fwrite(&mismatch, sizeof mismatch, 1, out);                                                           \
    fwrite(C, sizeof(T), (size_t)c_len, out);                                                             \
    free(A); free(B); free(C); free(W);                                                                   \
}

#ifdef _OPENMP
#define PARALLEL2 _Pragma("omp parallel num_threads(2)")
#define THREAD_NUM omp_get_thread_num()
#else
#define PARALLEL2
#define THREAD_NUM 0
#endif

HARNESS_DTYPE(float, f32, VB_f32)
HARNESS_DTYPE(double, f64, VB_f64)

/* The stride-2 packing's copy at every length to 70 (vector loops and tails), from a source of exactly
   the 2n - 1 elements it may read (the sanitized builds catch a read past them). */
static void check_copy_even(void) {
    int64_t n, j;
    for (n = 0; n <= 70; ++n) {
        float* src = (float*)malloc(sizeof(float) * (size_t)(n > 0 ? 2 * n - 1 : 1));
        float* dst = (float*)malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
        if (!src || !dst) fail("out of memory");
        for (j = 0; j < 2 * n - 1; ++j) src[j] = (float)j;
        catenc_gemm_copy_even_f32(dst, src, n);
        for (j = 0; j < n; ++j)
            if (dst[j] != (float)(2 * j)) fail("catenc_gemm_copy_even_f32 copied a wrong element");
        free(src);
        free(dst);
    }
}

int main(int argc, char** argv) {
    FILE* in;
    FILE* out;
    int64_t h[HDR];
    check_copy_even();
    if (argc != 3) fail("usage: harness cases.bin out.bin");
    in = fopen(argv[1], "rb");
    out = fopen(argv[2], "wb");
    if (!in || !out) fail("cannot open files");
    while (fread(h, sizeof(int64_t), HDR, in) == HDR) {
#ifdef _OPENMP
        omp_set_num_threads((int)h[14]);
#endif
        if (h[0] == 0) run_f32(in, out, h);
        else run_f64(in, out, h);
    }
    fclose(out);
    fclose(in);
    return 0;
}
"""

DTYPES = {"f32": np.float32, "f64": np.float64}


@dataclass(frozen=True)
class Case:
    dtype: str
    M: int
    N: int
    K: int
    a_layout: str = "row"  # row: A is M x K row-major; col: stored as K x M
    b_layout: str = "row"
    c_layout: str = "row"  # row, pad, col, strided, neg
    threads: int = 1
    nested: bool = False
    direct: bool = False  # catenc_gemm_direct_a, A (row-major) read in place

    def c_strides(self) -> tuple[int, int, int, int]:
        """(rsc, csc, offset of C(0,0), buffer length)."""
        M, N = self.M, self.N
        if self.c_layout == "row":
            rsc, csc = N, 1
        elif self.c_layout == "pad":
            rsc, csc = N + 3, 1
        elif self.c_layout == "col":
            rsc, csc = 1, M + 2
        elif self.c_layout == "strided":
            rsc, csc = 2 * N + 1, 2
        elif self.c_layout == "rsc_lt_csc":
            rsc, csc = 2, 2 * M + 1
        elif self.c_layout == "neg":
            rsc, csc = -(N + 1), 1
        else:
            raise ValueError(self.c_layout)
        if M == 0 or N == 0:
            return rsc, csc, 0, 1
        lo = min(0, (M - 1) * rsc) + min(0, (N - 1) * csc)
        hi = max(0, (M - 1) * rsc) + max(0, (N - 1) * csc)
        return rsc, csc, -lo, hi - lo + 2  # one spare element past the end


def run_cases(exe: Path, tiles: dict[str, GemmTiles], cases: list[Case], workdir: Path, seed: int = 0):
    """Run `cases` through the harness; returns [(case, C buffer, expected, mask, tolerance, helper, mismatch)]."""
    payload = bytearray()
    prepared = []
    msym, nsym, ksym = parse_expr("M"), parse_expr("N"), parse_expr("K")
    for case in cases:
        dt = DTYPES[case.dtype]
        M, N, K = case.M, case.N, case.K
        rng = np.random.default_rng([seed, M, N, K])  # a case and its direct twin: the same operands
        a = rng.standard_normal((M, K)).astype(dt)
        b = rng.standard_normal((K, N)).astype(dt)
        a_store = a if case.a_layout == "row" else np.ascontiguousarray(a.T)
        sai, sak = (K, 1) if case.a_layout == "row" else (1, M)
        b_store = b if case.b_layout == "row" else np.ascontiguousarray(b.T)
        sbk, sbj = (N, 1) if case.b_layout == "row" else (1, K)
        rsc, csc, c_off, c_len = case.c_strides()
        ws = pack_elements(tiles[case.dtype], msym, nsym, ksym).evaluate({"M": M, "N": N, "K": K})
        assert ws == pack_elements(tiles[case.dtype], M, N, K).value
        header = [0 if case.dtype == "f32" else 1, M, N, K, sai, sak, a.size, sbk, sbj, b.size]
        header += [rsc, csc, c_off, c_len, case.threads, int(case.nested) | 2 * int(case.direct), ws]
        payload += struct.pack(f"<{len(header)}q", *header)
        payload += a_store.tobytes() + b_store.tobytes()
        prepared.append((case, a, b, rsc, csc, c_off, c_len))
    (workdir / "cases.bin").write_bytes(bytes(payload))
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1", OMP_WAIT_POLICY="passive")
    result = subprocess.run(
        [str(exe), str(workdir / "cases.bin"), str(workdir / "out.bin")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "runtime error" not in report and "Sanitizer" not in report, report
    data = (workdir / "out.bin").read_bytes()
    pos = 0
    out = []
    for case, a, b, rsc, csc, c_off, c_len in prepared:
        dt = DTYPES[case.dtype]
        helper, mismatch = struct.unpack_from("<2q", data, pos)
        pos += 16
        buf = np.frombuffer(data, dtype=dt, count=c_len, offset=pos).astype(np.float64)
        pos += c_len * np.dtype(dt).itemsize
        expected = np.full(c_len, np.nan)
        bound = np.zeros(c_len)
        mask = np.zeros(c_len, dtype=bool)
        if case.M and case.N:
            idx = c_off + np.arange(case.M)[:, None] * rsc + np.arange(case.N)[None, :] * csc
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            expected[idx] = a64 @ b64
            bound[idx] = np.abs(a64) @ np.abs(b64)
            mask[idx] = True
        out.append((case, buf, expected, mask, bound, helper, mismatch))
    assert pos == len(data), "harness output has the wrong length"
    return out


def check_results(results, tiles: dict[str, GemmTiles]) -> None:
    failures = []
    for case, buf, expected, mask, bound, helper, mismatch in results:
        problems = []
        ws = pack_elements(tiles[case.dtype], case.M, case.N, case.K).value
        if case.M and case.N and helper != ws:
            problems.append(f"C pack_elements {helper} != Python {ws}")
        if mismatch:
            problems.append("nested-parallel result differs from the serial one")
        if not np.all(np.isnan(buf[~mask])):
            problems.append(f"wrote outside C: {np.flatnonzero(~np.isnan(buf) & ~mask)[:8]}")
        eps = 1e-5 if case.dtype == "f32" else 1e-13
        tol = eps * math.sqrt(max(case.K, 1)) * bound[mask] + (0 if case.K else 0.0)
        err = np.abs(buf[mask] - expected[mask])
        if not np.all(err <= tol):  # NaN (unwritten) fails here too
            worst = int(np.nanargmax(np.where(np.isnan(err), np.inf, err - tol)))
            got, want = buf[mask][worst], expected[mask][worst]
            problems.append(
                f"wrong values: {np.count_nonzero(~(err <= tol))} of {err.size}, e.g. got {got} want {want}"
            )
        if problems:
            failures.append(f"{case}: {'; '.join(problems)}")
    assert not failures, "\n".join(failures[:20])


# ------------------------------------------------------------------ cases


def shapes_for(t: GemmTiles, lanes: int) -> list[tuple[int, int, int]]:
    """(M, N, K) hitting remainders and exact multiples of every tile size, plus empty dims; edge
    panels of a whole number of vectors and of an even number of rows (the narrower kernels)."""
    return [(2 * t.mr - 2, t.nr + lanes, 33), (t.mr + 2, 2 * t.nr - lanes, t.kc + 7), (4, lanes, 3), 
        (0, 5, 7), (5, 0, 7), (0, 0, 3), (5, 7, 0), (1, 1, 1), (3, 17, 1), (17, 3, 65), (63, 65, 17),
        (65, 63, 63), (t.mr, t.nr, t.kc), (t.mr + 1, t.nr + 1, t.kc + 1), (t.mr - 1, t.nr - 1, t.kc - 1),
        (t.mc + t.mr + 1, 2 * t.nr + 3, 2 * t.kc + 3), (t.mc, t.nc, 5), (7, t.nc + 5, t.kc + 2),
        (2 * t.mc + 3, 2, 9), (1, 2 * t.nc + 1, 2), (3 * t.mr + 2, 3 * t.nr - 1, 3 * t.kc),
        (t.mr + 1, 9 * t.nc + 5, max(1, t.kc // 4)),  # a shallow slice: B blocks of ~4 NC columns
    ]  # fmt: skip


def cases_for(tiles: dict[str, GemmTiles], threads: tuple[int, ...], big: bool) -> list[Case]:
    layouts = [("row", "row", "row"), ("col", "row", "pad"), ("row", "col", "col"), ("col", "col", "strided"),
               ("row", "row", "rsc_lt_csc"), ("row", "col", "neg")]  # fmt: skip
    cases = []
    for dtype in sorted(tiles):
        shapes = shapes_for(tiles[dtype], tiles[dtype].vector_bytes // np.dtype(DTYPES[dtype]).itemsize)
        if big:
            shapes += [(1037, 3, 5), (3, 1037, 5), (33, 41, 1100), (100, 1030, 1100), (1030, 70, 520), (256, 256, 64)]
        for n, (M, N, K) in enumerate(shapes):
            for t in threads:
                a, b, c = layouts[(n + t) % len(layouts)]
                cases.append(Case(dtype, M, N, K, a, b, c, t))
                if M * N * K <= 200_000:
                    a, b, c = layouts[(n + t + 3) % len(layouts)]
                    cases.append(Case(dtype, M, N, K, a, b, c, t))
        cases.append(Case(dtype, 40, 70, 30, "row", "row", "pad", 2, nested=True))
    # A read in place: every case with a row-major A again
    cases += [dataclasses.replace(c, direct=True) for c in cases if c.a_layout == "row"]
    return cases


SMALL_TILES = {  # tiny blocks: every loop of the driver runs several times on small sizes
    "f32": GemmTiles(mr=5, nr=16, kc=7, mc=10, nc=32, vector_bytes=32),
    "f64": GemmTiles(mr=3, nr=8, kc=5, mc=6, nc=16, vector_bytes=64),
}
DEFAULT_TILES = {"f32": default_tiles("f32", 64), "f64": default_tiles("f64", 64)}


@dataclass(frozen=True)
class Config:
    name: str
    compiler: str | None
    flags: tuple[str, ...]
    tiles: dict
    threads: tuple[int, ...] = (1,)
    big: bool = True
    prefix: str = ""  # text before the support code in gemm.h


def _omp_ok(compiler: str | None) -> bool:
    return compiler is not None and _try_compile(compiler, ("-fopenmp",))


def _try_compile(compiler: str, flags: tuple[str, ...]) -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text("#include <stdlib.h>\nint main(void) { return 0; }\n")
        return (
            subprocess.run([compiler, *flags, str(src), "-o", str(Path(d) / "t")], capture_output=True).returncode == 0
        )


CONFIGS = [
    Config("serial", CC, ("-O2", *NATIVE), DEFAULT_TILES),
    Config("openmp", CC, ("-O2", *NATIVE, "-fopenmp", *FORCE_THREADS), DEFAULT_TILES, (1, 2, 3)),
    Config("small-tiles-openmp", CC, ("-O2", *NATIVE, "-fopenmp", *FORCE_THREADS), SMALL_TILES, (1, 2, 3), False),
    Config(
        "small-tiles-sse", CC, ("-O2",), {"f32": GemmTiles(4, 8, 9, 8, 24, 16), "f64": GemmTiles(4, 4, 9, 8, 8, 16)}
    ),
    Config("gcc-openmp", GCC, ("-O2", *NATIVE, "-fopenmp", *FORCE_THREADS), SMALL_TILES, (1, 2), False),
    # the branch for compilers without GNU C extensions: plain loops (system headers are already in)
    Config(
        "no-gnu-c",
        CC,
        ("-O1", "-Wno-builtin-macro-redefined"),
        SMALL_TILES,
        big=False,
        prefix="#undef __GNUC__\n#undef __clang__\n",
    ),
    Config("sanitized", CLANG, (*SANITIZE, *NATIVE), SMALL_TILES, (1,), False),
    Config("sanitized-openmp", CLANG, (*SANITIZE, *NATIVE, "-fopenmp", *FORCE_THREADS), DEFAULT_TILES, (2,), False),
]


def build(config: Config, workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "gemm.h").write_text(config.prefix + render_gemm_support(config.tiles))
    src = workdir / "harness.c"
    vb = {s: t.vector_bytes for s, t in config.tiles.items()}
    src.write_text(f"#define VB_f32 {vb['f32']}\n#define VB_f64 {vb['f64']}\n" + HARNESS)
    exe = workdir / "harness"
    cmd = [config.compiler, *WARN, *config.flags, f"-I{workdir}", str(src), "-o", str(exe), "-lm"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, " ".join(cmd) + "\n" + result.stderr
    return exe


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_gemm_matches_numpy(config: Config, tmp_path: Path) -> None:
    # make setup installs clang and libomp; gcc is a precondition of the Makefile
    assert config.compiler is not None, f"{config.name}: its compiler is not installed"
    if "-fopenmp" in config.flags:
        assert _omp_ok(config.compiler), f"{config.compiler} has no OpenMP runtime (make setup installs libomp-dev)"
    if "-fsanitize=address,undefined" in config.flags and not _try_compile(config.compiler, SANITIZE):
        pytest.fail("sanitizer runtimes missing (make setup installs clang's)")
    exe = build(config, tmp_path)
    cases = cases_for(config.tiles, config.threads, config.big)
    if not any("-fopenmp" in f for f in config.flags):
        cases = [c for c in cases if not c.nested]
    results = run_cases(exe, config.tiles, cases, tmp_path)
    check_results(results, config.tiles)
    packed = {dataclasses.replace(case, direct=False): buf for case, buf, *_ in results if not case.direct}
    differ = [
        case
        for case, buf, *_ in results
        if case.direct and not np.array_equal(buf, packed[dataclasses.replace(case, direct=False)], equal_nan=True)
    ]
    assert not differ, f"A read in place gives other bits than A packed: {differ[:5]}"


# ------------------------------------------------------------------ the C text itself


@pytest.mark.parametrize("compiler", ["clang", "gcc"])
@pytest.mark.parametrize("openmp", [False, True])
def test_support_compiles_without_warnings(compiler: str, openmp: bool, tmp_path: Path) -> None:
    path = shutil.which(compiler)
    assert path is not None, f"{compiler} is not installed (make setup installs clang; gcc is a precondition)"
    if openmp:
        assert _omp_ok(path), f"{compiler} has no OpenMP runtime (make setup installs libomp-dev)"
    tiles = {"f32": default_tiles("f32", 64), "f64": default_tiles("f64", 32)}
    (tmp_path / "g.c").write_text(render_gemm_support(tiles) + render_gemm_support(tiles))  # twice: guarded
    flags = [*WARN, "-O2", *NATIVE, "-fno-math-errno", *(["-fopenmp"] if openmp else []), "-c"]
    result = subprocess.run(
        [path, *flags, str(tmp_path / "g.c"), "-o", str(tmp_path / "g.o")], capture_output=True, text=True
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


# ------------------------------------------------------------------ Python side


def test_pack_elements_is_exact_and_simplifies() -> None:
    t = GemmTiles(mr=12, nr=32, kc=256, mc=384, nc=3072, vector_bytes=64)
    M, N, K = parse_expr("M"), parse_expr("N"), parse_expr("K")
    expr = pack_elements(t, M, N, K)
    for m, n, k in [(0, 0, 0), (1, 1, 1), (12, 32, 256), (13, 33, 257), (1000, 3, 5000), (0, 7, 9)]:
        want = min(k, 256) * ((m + 11) // 12 * 12 + (n + 31) // 32 * 32)
        assert expr.evaluate({"M": m, "N": n, "K": k}) == want
    assert pack_elements(t, 256, 3072, 768).value == 256 * (252 + 12 + 3072)  # constants fold
    assert str(pack_elements(t, 12 * M, 64, K)) in (
        "12*M*min(256, K) + 64*min(256, K)",
        "64*min(256, K) + 12*M*min(256, K)",
    )
    assert pack_elements(t, M, N, 100).free_symbols() == {"M", "N"}  # min(100, 256) folds
    assert pack_elements(t, M, N, 1000) == 256 * pack_elements(t, M, N, 1)


def test_default_tiles_are_consistent() -> None:
    for dtype, size in (("f32", 4), ("f64", 8)):
        for vb in (64, 32, 16):
            t = default_tiles(dtype, vb)
            assert t.vector_bytes == vb and t.nr % (vb // size) == 0
            assert t.mc % t.mr == 0 and t.nc % t.nr == 0
    with pytest.raises(ValueError):
        default_tiles("f16", 64)
    with pytest.raises(ValueError):
        render_gemm_support({"f32": GemmTiles(mr=4, nr=10, kc=8, mc=8, nc=20, vector_bytes=64)})
