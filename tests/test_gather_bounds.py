"""take never reads outside the tensor it gathers from (docs/language.md, `take`).

An empty axis (V = 0, where a zero-size table may be NULL), indices outside [-V, V) and
unsigned indices past the int64 range (u64 2**64 - 1 is not -1) make the entry return
CATENC_E_INDEX without touching memory outside its buffers. Checked from C under
AddressSanitizer and UndefinedBehaviorSanitizer (every buffer is allocated at its exact size),
from the loader, on OpenCL (PoCL), and in the CUDA and OpenCL sources, whose gathers are
rendered by the same code.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from catenc.loader import CatencStatusError
from tests.conftest import compile_text
from tests.test_c_abi import C_HELPERS, catenc, cc, run
from tests.toolchains import SANITIZE

MODEL = """\
[composite.rows]
inputs = ["table: f32[V, D]", "ids: i64[B]"]
outputs = ["y: f32[B, D]"]
body = "y = take(table, ids, 0)"

[composite.rows_u64]
inputs = ["table: f32[V, D]", "ids: u64[B]"]
outputs = ["y: f32[B, D]"]
body = "y = take(table, ids, 0)"

[composite.cols]
inputs = ["x: f64[M, N]", "ids: i32[J]"]
outputs = ["y: f64[M, J]"]
body = "y = take(x, ids, 1)"

[composite.embed]
inputs = ["table: f32[V, E]", "ids: i64[B, T]"]
outputs = ["y: f32[B, T, E]"]
body = "y = embedding(table, ids)"
"""

DRIVER = (
    C_HELPERS
    + r"""
#include "out/model.h"

/* exact-size copies, so that AddressSanitizer sees any read past them (malloc(0) too) */
static void *exact(const void *data, size_t bytes) {
    void *p = malloc(bytes);
    if (bytes) memcpy(p, data, bytes);
    return p;
}

static int rows_call(const float *table, int64_t V, int64_t D, const int64_t *ids, int64_t B, float *y) {
    size_t ws = rows_workspace_bytes(V, D, B);
    void *w = ws ? aligned(ws) : NULL;
    void *t = exact(table, sizeof(float) * (size_t)(V * D)), *i = exact(ids, sizeof(int64_t) * (size_t)B);
    float *out = exact(y, sizeof(float) * (size_t)(B * D));
    int rc = rows(t, i, out, V, D, B, w, ws);
    if (B * D) memcpy(y, out, sizeof(float) * (size_t)(B * D));
    free(w); free(t); free(i); free(out);
    return rc;
}

static int u64_call(const float *table, int64_t V, int64_t D, const uint64_t *ids, int64_t B, float *y) {
    size_t ws = rows_u64_workspace_bytes(V, D, B);
    void *w = ws ? aligned(ws) : NULL;
    void *t = exact(table, sizeof(float) * (size_t)(V * D)), *i = exact(ids, sizeof(uint64_t) * (size_t)B);
    float *out = exact(y, sizeof(float) * (size_t)(B * D));
    int rc = rows_u64(t, i, out, V, D, B, w, ws);
    if (B * D) memcpy(y, out, sizeof(float) * (size_t)(B * D));
    free(w); free(t); free(i); free(out);
    return rc;
}

int main(void) {
    float table[5 * 4], y[3 * 4];
    for (int i = 0; i < 5 * 4; i++) table[i] = (float)i;
    memset(y, 0, sizeof y);
    int64_t zeros[3] = {0, 0, 0};

    /* an empty table: NULL (no elements), and every index out of range */
    {
        size_t ws = rows_workspace_bytes(0, 4, 3);
        void *w = ws ? aligned(ws) : NULL;
        CHECK(rows(NULL, zeros, y, 0, 4, 3, w, ws) == CATENC_E_INDEX, "V=0, table NULL");
        free(w);
    }
    CHECK(rows_call(table, 0, 4, zeros, 3, y) == CATENC_E_INDEX, "V=0");
    CHECK(rows_call(table, 0, 4, zeros, 0, y) == CATENC_OK, "V=0 and no index");

    /* out of range after one wrap of negatives */
    int64_t bad[5] = {5, -6, INT64_MIN, INT64_MAX, 1000};
    for (int k = 0; k < 5; k++) CHECK(rows_call(table, 5, 4, &bad[k], 1, y) == CATENC_E_INDEX, "index %d", k);
    int64_t good[3] = {-5, 4, -1};
    CHECK(rows_call(table, 5, 4, good, 3, y) == CATENC_OK, "in range");
    for (int d = 0; d < 4; d++)
        CHECK(y[d] == table[d] && y[4 + d] == table[16 + d] && y[8 + d] == table[16 + d], "row values %d", d);

    /* unsigned indices never wrap: 2**64 - 1 is far out of range, not -1 */
    uint64_t ubad[3] = {UINT64_MAX, (uint64_t)INT64_MAX + 1u, 5u};
    for (int k = 0; k < 3; k++) CHECK(u64_call(table, 5, 4, &ubad[k], 1, y) == CATENC_E_INDEX, "u64 index %d", k);
    CHECK(u64_call(table, 0, 4, ubad, 1, y) == CATENC_E_INDEX, "u64 with V=0");
    uint64_t ugood[2] = {4u, 0u};
    CHECK(u64_call(table, 5, 4, ugood, 2, y) == CATENC_OK, "u64 in range");
    for (int d = 0; d < 4; d++) CHECK(y[d] == table[16 + d] && y[4 + d] == table[d], "u64 values %d", d);

    /* an inner axis of extent 0, and the op library's embedding */
    {
        int32_t ids[2] = {0, -1};
        double out[3 * 2];
        size_t ws = cols_workspace_bytes(3, 0, 2);
        void *w = ws ? aligned(ws) : NULL;
        double *o = malloc(sizeof out);
        CHECK(cols(NULL, ids, o, 3, 0, 2, w, ws) == CATENC_E_INDEX, "N=0, x NULL");
        free(o); free(w);
    }
    {
        size_t ws = embed_workspace_bytes(0, 4, 2, 2);
        void *w = ws ? aligned(ws) : NULL;
        float *o = malloc(sizeof(float) * 2 * 2 * 4);
        int64_t *ids = calloc(4, sizeof(int64_t));
        CHECK(embed(NULL, ids, o, 0, 4, 2, 2, w, ws) == CATENC_E_INDEX, "embedding with V=0, table NULL");
        free(o); free(w); free(ids);
    }
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gather")
    (root / "model.toml").write_text(MODEL)
    catenc(root, "compile", "model.toml", "-S", "-o", "out")
    return root


def test_no_read_outside_the_table_under_sanitizers(built: Path) -> None:
    (built / "main.c").write_text(DRIVER)
    cc(built, "-std=c99", *SANITIZE, "main.c", "out/model.c", "-lm", "-o", "main")
    result = run(built, "main", env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    report = result.stdout + result.stderr
    assert result.returncode == 0 and result.stdout.strip() == "ok", report
    assert "AddressSanitizer" not in report and "runtime error" not in report, report


@pytest.mark.parametrize("runtime,suffix", [("cuda", "cu"), ("opencl", "cl"), ("clang", "c")])
def test_every_gather_is_guarded_in_every_backend(tmp_path: Path, runtime: str, suffix: str) -> None:
    """Each backend renders a gather as a read at a clamped index under `0 < extent ?`: with
    an empty axis there is no element to clamp to, so nothing is read."""
    (tmp_path / "model.toml").write_text(MODEL)
    catenc(tmp_path, "compile", "model.toml", "-S", "-o", "out", "--runtime", runtime)
    source = (tmp_path / "out" / f"model.{suffix}").read_text()
    kernels = source[source.index("/* ---- rows ---- */") :]
    reads = re.findall(r"(.{0,16})\b(table|x)\[", kernels)
    assert len(reads) >= 4, reads
    for before, name in reads:
        axis = "N" if name == "x" else "V"
        assert before.endswith(f"(0LL < ({axis})) ? "), (runtime, before, name)


def _check_loader(lib) -> None:
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    with pytest.raises(CatencStatusError) as info:
        lib["rows_u64"](table, np.array([2**64 - 1, 0], dtype=np.uint64))
    assert info.value.code == "CATENC_E_INDEX"
    np.testing.assert_array_equal(lib["rows_u64"](table, np.array([4, 0], dtype=np.uint64)), table[[4, 0]])
    for ids in (np.zeros(2, np.int64), np.array([5]), np.array([-6])):
        source = table[:0] if len(ids) == 2 else table
        with pytest.raises(CatencStatusError) as info:
            lib["rows"](source, ids)
        assert info.value.code == "CATENC_E_INDEX"
    np.testing.assert_array_equal(lib["rows"](table[:0], np.zeros(0, np.int64)), np.zeros((0, 3), np.float32))


def test_loader_reports_e_index(tmp_path: Path) -> None:
    _check_loader(compile_text(tmp_path, MODEL, name="model"))


def test_loader_reports_e_index_on_opencl(tmp_path: Path) -> None:
    _check_loader(compile_text(tmp_path, MODEL, name="model", runtime_name="opencl"))
