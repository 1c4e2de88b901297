"""Sizes computed from the dims never wrap (docs/abi.md).

Every size the emitted code computes from its dims (each tensor's elements and bytes, the
workspace and the offsets in it, flattened loop extents, kernel work) is evaluated with
overflow checks first: when one exceeds int64 the entry returns CATENC_E_SHAPE without
touching any buffer, and NAME_workspace_bytes returns SIZE_MAX, which no entry accepts. The
checks are tested from C (with the compiler's overflow builtins and with the portable
fallback, under UndefinedBehaviorSanitizer), from the loader on C and OpenCL builds, in the
CUDA host source; a constant shape beyond int64 is a diagnostic at its declaration.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catenc.loader import SIZE_MAX, CatencStatusError
from tests.conftest import compile_text
from tests.test_c_abi import C_HELPERS, catenc, cc, run

MODEL = """\
[composite.gemm]
inputs = ["A: f32[M, K]", "B: f32[K, N]"]
outputs = ["C: f32[M, N]"]
body = "C[i, j] = sum[k](A[i, k] * B[k, j])"

[composite.flat]
inputs = ["x: f32[N, D]"]
outputs = ["s: f32"]
body = "s = sum(x)"

[composite.outer]
doc = "The inputs are small, the loop over I*J is not."
inputs = ["a: f32[I]", "b: f32[J]"]
outputs = ["s: f32"]
body = "s = sum(unsqueeze(a, -1) * b)"

[composite.plus1]
inputs = ["x: f32[N + 1]"]
outputs = ["y: f32[N + 1]"]
body = "y = x * 2"

[composite.grid]
doc = "N only in an output shape: the loader takes it as a keyword."
inputs = ["x: f32[K]"]
outputs = ["y: f32[N, N]"]
body = "y[i, j] = cast(i + j, f32) + sum[k](x[k])"
"""

DRIVER = (
    C_HELPERS
    + r"""
#include "out/model.h"
#define BIG ((int64_t)1 << 32)

int main(void) {
    float a[64], b[64], c[64], s = -1.0f;
    void *w = aligned(1 << 16);
    size_t ws;
    for (int i = 0; i < 64; i++) { a[i] = (float)i; b[i] = 1.0f; }

    /* B alone would be 512 * 2^53 * 4 = 2^64 bytes */
    ws = gemm_workspace_bytes(1, 512, (int64_t)1 << 53);
    CHECK(ws == SIZE_MAX, "gemm_workspace_bytes = %zu", ws);
    CHECK(gemm(a, b, c, 1, 512, (int64_t)1 << 53, w, 12288) == CATENC_E_SHAPE, "gemm with 12288 bytes");
    CHECK(gemm(a, b, c, 1, 512, (int64_t)1 << 53, w, ws) == CATENC_E_SHAPE, "gemm with SIZE_MAX bytes");
    CHECK(gemm(a, b, c, (int64_t)1 << 62, 3, 3, w, 1 << 16) == CATENC_E_SHAPE, "gemm with 2^62 rows");

    /* the flattened N*D wraps to 0; N*D = 2^62 fits but its 2^64 bytes do not */
    CHECK(flat_workspace_bytes(BIG, BIG) == SIZE_MAX, "flat ws");
    CHECK(flat(NULL, &s, BIG, BIG, w, 1 << 16) == CATENC_E_SHAPE, "flat 2^32 x 2^32");
    CHECK(flat(NULL, &s, (int64_t)1 << 31, (int64_t)1 << 31, w, 1 << 16) == CATENC_E_SHAPE, "flat 2^31 x 2^31");

    /* the loop over I*J overflows although a and b (16 GiB each) would not */
    CHECK(outer_workspace_bytes(BIG, BIG) == SIZE_MAX, "outer ws");
    CHECK(outer(a, b, &s, BIG, BIG, w, 1 << 16) == CATENC_E_SHAPE, "outer 2^32 x 2^32");

    /* N + 1 itself overflows */
    CHECK(plus1_workspace_bytes(INT64_MAX) == SIZE_MAX, "plus1 ws");
    CHECK(plus1(a, c, INT64_MAX, w, 1 << 16) == CATENC_E_SHAPE, "plus1 INT64_MAX");
    CHECK(plus1(a, c, INT64_MAX / 4, w, 1 << 16) == CATENC_E_SHAPE, "plus1 bytes past INT64_MAX");

    CHECK(s == -1.0f, "nothing written on a failed call");

    /* in range: unchanged */
    ws = gemm_workspace_bytes(2, 3, 4);
    CHECK(ws != SIZE_MAX && gemm(a, b, c, 2, 3, 4, w, ws) == CATENC_OK, "gemm 2x3x4");
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) CHECK(c[i * 4 + j] == (float)(3 * i * 3 + 3), "c[%d,%d]=%g", i, j, c[i * 4 + j]);
    CHECK(flat(a, &s, 4, 8, w, flat_workspace_bytes(4, 8)) == CATENC_OK && s == 496.0f, "flat sum %g", s);
    CHECK(outer(a, b, &s, 4, 3, w, outer_workspace_bytes(4, 3)) == CATENC_OK && s == 18.0f, "outer sum %g", s);
    free(w);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)

# The prelude's checked arithmetic at its edges: the model's source is included for its
# static helpers.
HELPERS = r"""
#include <stdio.h>
#include "out/model.c"
static int failures = 0;
static void expect(int64_t got, int overflow, int64_t want, int want_overflow, int line) {
    if (overflow != want_overflow || (!want_overflow && got != want)) {
        failures++;
        fprintf(stderr, "line %d: got %lld (overflow %d)\n", line, (long long)got, overflow);
    }
}
#define CALL(f, a, b, want, bad) \
    do { int o = 0; int64_t r = catenc_size_##f(a, b, &o); expect(r, o, want, bad, __LINE__); } while (0)
#define MUL(a, b, want, bad) CALL(mul, a, b, want, bad)
#define ADD(a, b, want, bad) CALL(add, a, b, want, bad)
#define SUB(a, b, want, bad) CALL(sub, a, b, want, bad)
int main(void) {
    MUL(INT64_MAX, 1, INT64_MAX, 0); MUL(INT64_MAX, 2, 0, 1); MUL(2, INT64_MAX, 0, 1);
    MUL(INT64_MIN, 1, INT64_MIN, 0); MUL(INT64_MIN, -1, 0, 1); MUL(-1, INT64_MIN, 0, 1);
    MUL(0, INT64_MIN, 0, 0); MUL(INT64_MIN, 0, 0, 0); MUL(-3, -5, 15, 0); MUL(-3, 5, -15, 0);
    MUL((int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 62, 0); MUL((int64_t)1 << 32, (int64_t)1 << 31, 0, 1);
    MUL(-((int64_t)1 << 32), (int64_t)1 << 31, INT64_MIN, 0); MUL(-((int64_t)1 << 32), -((int64_t)1 << 31), 0, 1);
    MUL(3037000500LL, 3037000500LL, 0, 1); MUL(3037000499LL, 3037000499LL, 9223372030926249001LL, 0);
    ADD(INT64_MAX, 0, INT64_MAX, 0); ADD(INT64_MAX, 1, 0, 1);
    ADD(INT64_MIN, -1, 0, 1); ADD(INT64_MIN, INT64_MAX, -1, 0);
    SUB(INT64_MIN, 1, 0, 1); SUB(0, INT64_MIN, 0, 1); SUB(-1, INT64_MIN, INT64_MAX, 0); SUB(INT64_MAX, -1, 0, 1);
    if (catenc_size_bytes(64, 0) != 64 || catenc_size_bytes(64, 1) != SIZE_MAX) failures++;
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""

UBSAN = ("-fsanitize=undefined", "-fno-sanitize-recover=all", "-g", "-O1")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sizes")
    (root / "model.toml").write_text(MODEL)
    catenc(root, "compile", "model.toml", "-S", "-o", "out")
    (root / "main.c").write_text(DRIVER)
    (root / "helpers.c").write_text(HELPERS)
    return root


@pytest.mark.parametrize("portable", [False, True], ids=["builtins", "portable"])
def test_entries_reject_sizes_that_overflow(built: Path, portable: bool) -> None:
    define = ("-DCATENC_NO_OVERFLOW_BUILTINS",) if portable else ()
    exe = f"main_{int(portable)}"
    cc(built, "-std=c99", *UBSAN, *define, "main.c", "out/model.c", "-lm", "-o", exe)
    result = run(built, exe, env={"UBSAN_OPTIONS": "print_stacktrace=1"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


@pytest.mark.parametrize("portable", [False, True], ids=["builtins", "portable"])
def test_checked_arithmetic_at_its_edges(built: Path, portable: bool) -> None:
    define = ("-DCATENC_NO_OVERFLOW_BUILTINS",) if portable else ()
    exe = f"helpers_{int(portable)}"
    cc(built, "-std=c99", *UBSAN, *define, "helpers.c", "-lm", "-o", exe)
    result = run(built, exe, env={"UBSAN_OPTIONS": "print_stacktrace=1"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_cuda_host_rejects_sizes_that_overflow(tmp_path: Path) -> None:
    """The CUDA host entry has the same checks as the C one (compiled where nvcc is, in
    tests/test_cuda_runtime.py; here its text)."""
    (tmp_path / "model.toml").write_text(MODEL)
    catenc(tmp_path, "compile", "model.toml", "-S", "-o", "out", "--runtime", "cuda")
    source = (tmp_path / "out" / "model.cu").read_text()
    host = source[source.index('extern "C" size_t flat_workspace_bytes') :]
    host = host[: host.index("cudaPeekAtLastError")]
    assert "catenc_size_mul(catenc_size_mul(4LL, D, &catenc_overflow), N, &catenc_overflow)" in host
    assert "return catenc_size_bytes(catenc_bytes, catenc_overflow);" in host
    assert "if (need == SIZE_MAX) return CATENC_E_SHAPE;" in host
    assert host.index("need == SIZE_MAX") < host.index("<<<"), "checked before any launch"


@pytest.mark.parametrize("runtime", ["clang", "opencl"])
def test_loader_raises_e_shape_before_allocating(tmp_path: Path, runtime: str) -> None:
    lib = compile_text(tmp_path, MODEL, name="model", runtime_name=runtime)
    x = np.ones(3, np.float32)
    assert lib["grid"].workspace_bytes(K=3, N=2**32) == SIZE_MAX
    with pytest.raises(CatencStatusError) as info:
        lib["grid"](x, N=2**32)  # 2^64 elements: never allocated
    assert info.value.code == "CATENC_E_SHAPE" and "overflows int64" in str(info.value)
    y = lib["grid"](x, N=3)
    np.testing.assert_array_equal(y, np.add.outer(np.arange(3), np.arange(3)) + 3.0)


def big_model(decl: str) -> str:
    return f'[composite.big]\ninputs = ["x: {decl}"]\noutputs = ["y: f32"]\nbody = "y = 1.0"\n'


@pytest.mark.parametrize(
    "decl,message",
    [
        ("f32[4294967296, 4294967296]", "'x' is too large: 18446744073709551616 elements of 4 bytes"),
        ("f64[B, 2147483648, 2147483648]", "'x' is too large: its constant dims alone hold 4611686018427387904"),
    ],
)
def test_a_constant_shape_beyond_int64_is_a_diagnostic(tmp_path: Path, decl: str, message: str) -> None:
    (tmp_path / "big.toml").write_text(big_model(decl))
    result = subprocess.run(
        [sys.executable, "-m", "catenc", "compile", "big.toml", "-S", "-o", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"big.toml:2:12: error: {message}"), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_the_largest_constant_shape_compiles(tmp_path: Path) -> None:
    """2^61 - 1 f32 elements: 2^63 - 4 bytes, the largest multiple of 4 in int64."""
    (tmp_path / "big.toml").write_text(big_model("f32[2305843009213693951]"))
    catenc(tmp_path, "compile", "big.toml", "-S", "-o", "out")
