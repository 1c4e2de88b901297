"""The C ABI of the emitted code (docs/abi.md), checked from plain C programs.

catenc runs once per model (as a subprocess, `-S`); everything after that is C: a `main.c`
written here includes the emitted header, is built with `cc -std=c99 main.c out/model.c -lm`
and run, with no Python at run time. Expected values are computed in C (naive loops) or passed
in from here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.toolchains import SANITIZE

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

ABI_MODEL = """\
[composite.order]
doc = "Argument order: inputs, outputs, free symbols, workspace."
inputs = ["a: f32[P, Q]", "b: i32[R]"]
outputs = ["y: f64[Q, P]", "z: i32[S]"]
body = \"\"\"
y[q, p] = cast(a[p, q], f64) * 2
bs = sum(b)
z[s] = cast(s, i32) + bs
\"\"\"

[composite.scal]
doc = "Rank-0 inputs by value, rank-0 outputs by pointer."
inputs = ["x: f32[N]", "alpha: f32", "k: i64"]
outputs = ["y: f32[N]", "s: f64"]
body = \"\"\"
y = x * alpha + cast(k, f32)
s = cast(sum(x), f64)
\"\"\"

[composite.k4]
doc = "A constraint checked by the entry."
inputs = ["x: f32[K]"]
outputs = ["y: f32[K]"]
where = ["K % 4 == 0"]
body = "y = x * 2"

[composite.firstapp]
doc = "Symbols in order of first appearance, left to right inside a declaration too."
inputs = ["x: f32[Z + B]", "w: f32[A]"]
outputs = ["y: f32[B]"]
body = \"\"\"
s = sum(w)
y[i] = x[i + Z] + s
\"\"\"

[composite.attention]
doc = "Causal attention; the masked scores and probabilities live in the workspace."
inputs = ["q: f32[T, D]", "k: f32[T, D]", "v: f32[T, D]"]
outputs = ["y: f32[T, D]"]
params = { scale = 0.125 }
body = \"\"\"
s[i, j] = sum[d](q[i, d] * k[j, d]) * scale
m[i, j] = where(j <= i, s[i, j], -inf)
p = exp(m - max(m, axis=-1, keepdims=True))
y = (p / sum(p, axis=-1, keepdims=True)) @ v
\"\"\"
"""

# Naive references in C, shared by the programs below.
C_HELPERS = r"""
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; \
    fprintf(stderr, "line %d: %s: ", __LINE__, #cond); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); } } while (0)

static uint32_t lcg_state = 12345u;
static float frand(void) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static void *aligned(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) abort();
    return p;
}

static void attention_ref(const float *q, const float *k, const float *v, double *y,
                          int64_t T, int64_t D, double scale) {
    double *row = malloc(sizeof(double) * (size_t)(T ? T : 1));
    for (int64_t i = 0; i < T; i++) {
        double mx = -INFINITY, total = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            double s = 0.0;
            for (int64_t d = 0; d < D; d++) s += (double)q[i * D + d] * k[j * D + d];
            row[j] = s * scale;
            if (row[j] > mx) mx = row[j];
        }
        for (int64_t j = 0; j <= i; j++) { row[j] = exp(row[j] - mx); total += row[j]; }
        for (int64_t d = 0; d < D; d++) {
            double acc = 0.0;
            for (int64_t j = 0; j <= i; j++) acc += row[j] / total * v[j * D + d];
            y[i * D + d] = acc;
        }
    }
    free(row);
}
"""


def catenc(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "catenc", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def cc(cwd: Path, *args: str, compiler: str = "cc") -> None:
    result = subprocess.run([compiler, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{compiler} {' '.join(args)}\n{result.stderr}"


def run(cwd: Path, exe: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([f"./{exe}", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=full_env)


def build_and_run(cwd: Path, name: str, main: str, *sources: str, flags: tuple[str, ...] = ()) -> str:
    """Write NAME.c, build it with the sources into ./NAME, run it; returns its stdout."""
    (cwd / f"{name}.c").write_text(main)
    strict = ("-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types")
    cc(cwd, "-std=c99", "-O1", *strict, *flags, f"{name}.c", *sources, "-lm", "-o", name)
    result = run(cwd, name)
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def declarations(header: str) -> dict[str, list[str]]:
    """Function name -> parameter names, for every prototype of the header."""
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    found = {}
    for match in re.finditer(r"\b(?:int|size_t|void)\s+(\w+)\s*\(([^)]*)\)\s*;", text):
        params = [p.strip() for p in match[2].split(",") if p.strip()]
        found[match[1]] = [re.findall(r"\w+", p)[-1] for p in params]
    return found


@pytest.fixture(scope="module")
def abi(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("abi")
    (root / "model.toml").write_text(ABI_MODEL)
    catenc(root, "compile", "model.toml", "-S", "-o", "out")
    return root


def entries(directory: Path, stem: str = "model") -> dict[str, dict]:
    data = json.loads((directory / f"{stem}.manifest.json").read_text())
    return {e["name"]: e for e in data["entries"]}


# --------------------------------------------------------------------------- #
# the header
# --------------------------------------------------------------------------- #


def test_header_layout(abi: Path) -> None:
    header = (abi / "out" / "model.h").read_text()
    directives = [line.strip() for line in header.splitlines() if line.strip().startswith("#")]
    guard = re.match(r"#ifndef\s+(\w+)$", directives[0])
    assert guard, directives[:2]
    assert re.match(rf"#define\s+{guard[1]}\b", directives[1]), directives[:2]
    assert directives[-1].startswith("#endif"), directives[-1]
    includes = sorted(d for d in directives if d.startswith("#include"))
    assert includes == ["#include <stddef.h>", "#include <stdint.h>"], includes
    assert re.search(r'#ifdef\s+__cplusplus\s*\n\s*extern\s+"C"\s*\{', header), header
    assert "#ifndef CATENC_OK" in header
    for name, entry in entries(abi / "out").items():
        assert entry["doc"] in header, name
    flat = re.sub(r"[\s()]", "", header)
    assert "K%4==0" in flat, "the header comment names the constraint"


def test_return_codes_are_defined(abi: Path) -> None:
    main = (
        '#include "out/model.h"\n'
        '#include "out/model.h"\n'  # the guard makes a second inclusion harmless
        "#if CATENC_OK != 0 || CATENC_E_SHAPE != 1 || CATENC_E_WORKSPACE != 2 || CATENC_E_INDEX != 3\n"
        '#error "wrong return codes"\n'
        "#endif\n"
        "int main(void) { return CATENC_OK; }\n"
    )
    (abi / "codes.c").write_text(main)
    cc(abi, "-std=c99", "-Wall", "-Werror", "-pedantic", "-fsyntax-only", "codes.c")


def test_header_compiles_as_cpp_and_links_with_c(abi: Path) -> None:
    (abi / "t.cpp").write_text(
        '#include "out/model.h"\n#include "out/model.h"\n#include <cstdio>\n'
        "int main() {\n"
        "    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];\n"
        "    if (k4(x, y, 8, nullptr, 0) != CATENC_OK) return 1;\n"
        "    for (int i = 0; i < 8; i++) if (y[i] != 2 * x[i]) return 2;\n"
        '    std::puts("cpp ok");\n'
        "    return 0;\n"
        "}\n"
    )
    cc(abi, "-x", "c++", "-std=c++11", "-Wall", "-Werror", "-fsyntax-only", "t.cpp", compiler="g++")
    cc(abi, "-std=c99", "-O1", "-c", "out/model.c", "-o", "model.o")
    cc(abi, "t.cpp", "model.o", "-lm", "-o", "tcpp", compiler="g++")
    result = run(abi, "tcpp")
    assert result.returncode == 0 and "cpp ok" in result.stdout, result


# --------------------------------------------------------------------------- #
# signatures and argument order
# --------------------------------------------------------------------------- #

SIGNATURES = r"""
#include "out/model.h"
int (*p_order)(const float *, const int32_t *, double *, int32_t *,
               int64_t, int64_t, int64_t, int64_t, void *, size_t) = order;
size_t (*w_order)(int64_t, int64_t, int64_t, int64_t) = order_workspace_bytes;
int (*p_scal)(const float *, float, int64_t, float *, double *, int64_t, void *, size_t) = scal;
size_t (*w_scal)(int64_t) = scal_workspace_bytes;
int (*p_k4)(const float *, float *, int64_t, void *, size_t) = k4;
int (*p_attention)(const float *, const float *, const float *, float *, int64_t, int64_t,
                   void *, size_t) = attention;
size_t (*w_attention)(int64_t, int64_t) = attention_workspace_bytes;
"""


def test_prototypes_have_the_documented_types(abi: Path) -> None:
    (abi / "sig.c").write_text(SIGNATURES)
    cc(abi, "-std=c99", "-Wall", "-Werror", "-fsyntax-only", "sig.c")


def test_argument_names_and_order(abi: Path) -> None:
    protos = declarations((abi / "out" / "model.h").read_text())
    tail = ["workspace", "workspace_bytes"]
    assert protos["order"] == ["a", "b", "y", "z", "P", "Q", "R", "S", *tail]
    assert protos["order_workspace_bytes"] == ["P", "Q", "R", "S"]
    assert protos["scal"] == ["x", "alpha", "k", "y", "s", "N", *tail]
    assert protos["attention"] == ["q", "k", "v", "y", "T", "D", *tail]
    manifest = entries(abi / "out")
    for name in ("order", "scal", "k4", "attention", "firstapp"):
        assert [a["name"] for a in manifest[name]["args"]] == protos[name], name
        declared = " ".join(manifest[name]["prototype"].split())
        header = " ".join((abi / "out" / "model.h").read_text().split())
        assert declared + ";" in header, name


def test_symbols_in_order_of_first_appearance_within_a_declaration(abi: Path) -> None:
    """`x: f32[Z + B]` mentions Z before B, so Z is the first symbol argument."""
    protos = declarations((abi / "out" / "model.h").read_text())
    assert protos["firstapp"] == ["x", "w", "y", "Z", "B", "A", "workspace", "workspace_bytes"]
    assert protos["firstapp_workspace_bytes"] == ["Z", "B", "A"]


ORDER_AND_SCALARS = (
    C_HELPERS
    + r"""
#include "out/model.h"
int main(void) {
    enum { P = 3, Q = 5, R = 4, S = 6, N = 9 };
    float a[P * Q], a0[P * Q];
    int32_t b[R] = {7, -2, 30, 1}, z[S];
    double y[Q * P];
    for (int i = 0; i < P * Q; i++) a[i] = a0[i] = frand();
    size_t ws = order_workspace_bytes(P, Q, R, S);
    void *w = ws ? aligned(ws) : NULL;
    int rc = order(a, b, y, z, P, Q, R, S, w, ws);
    CHECK(rc == CATENC_OK, "rc=%d", rc);
    for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++)
            CHECK(y[q * P + p] == 2.0 * (double)a[p * Q + q], "y[%d,%d]=%g", q, p, y[q * P + p]);
    for (int s = 0; s < S; s++) CHECK(z[s] == s + 36, "z[%d]=%d", s, (int)z[s]);
    CHECK(memcmp(a, a0, sizeof a) == 0, "input a was written");

    float x[N], yy[N];
    double sum = 0.0, s = -1.0;
    for (int i = 0; i < N; i++) { x[i] = frand(); sum += x[i]; }
    ws = scal_workspace_bytes(N);
    w = ws ? aligned(ws) : NULL;
    rc = scal(x, 0.5f, (int64_t)3, yy, &s, N, w, ws);
    CHECK(rc == CATENC_OK, "rc=%d", rc);
    for (int i = 0; i < N; i++)
        CHECK(fabsf(yy[i] - (x[i] * 0.5f + 3.0f)) < 1e-6f, "yy[%d]=%g", i, yy[i]);
    CHECK(fabs(s - sum) < 1e-5, "s=%g want %g", s, sum);
    ws = scal_workspace_bytes(0);
    w = ws ? aligned(ws) : NULL;
    rc = scal(x, 2.0f, (int64_t)-1, yy, &s, 0, w, ws);
    CHECK(rc == CATENC_OK && s == 0.0, "N=0: rc=%d s=%g", rc, s);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


def test_argument_order_and_rank0_arguments_at_run_time(abi: Path) -> None:
    assert build_and_run(abi, "order", ORDER_AND_SCALARS, "out/model.c").strip() == "ok"


CONSTRAINT = (
    C_HELPERS
    + r"""
#include "out/model.h"
int main(void) {
    float x[8], x0[8], y[8];
    for (int i = 0; i < 8; i++) x[i] = x0[i] = frand();
    /* k4 is elementwise: it needs no workspace, so NULL is a valid workspace */
    CHECK(k4_workspace_bytes(8) == 0, "k4 workspace %zu", k4_workspace_bytes(8));
    CHECK(k4(x, y, 6, NULL, 0) == CATENC_E_SHAPE, "K=6 violates K %% 4 == 0");
    CHECK(k4(x, y, 7, NULL, 0) == CATENC_E_SHAPE, "K=7 violates K %% 4 == 0");
    CHECK(memcmp(x, x0, sizeof x) == 0, "input written on a failed call");
    CHECK(k4(x, y, 0, NULL, 0) == CATENC_OK, "K=0 satisfies K %% 4 == 0");
    CHECK(k4(x, y, 8, NULL, 0) == CATENC_OK, "K=8 satisfies K %% 4 == 0");
    for (int i = 0; i < 8; i++) CHECK(y[i] == 2 * x[i], "y[%d]", i);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


def test_failed_constraint_returns_shape_error(abi: Path) -> None:
    assert build_and_run(abi, "constraint", CONSTRAINT, "out/model.c").strip() == "ok"


# --------------------------------------------------------------------------- #
# workspace
# --------------------------------------------------------------------------- #

WORKSPACE_SIZES = [(0, 3), (1, 1), (5, 3), (17, 8), (45, 64), (100, 7)]

WORKSPACE = (
    C_HELPERS
    + r"""
#include "out/model.h"
int main(int argc, char **argv) {
    if (argc > 1) {  /* print attention_workspace_bytes for T D pairs */
        for (int i = 1; i + 1 < argc; i += 2) {
            int64_t T = atoll(argv[i]), D = atoll(argv[i + 1]);
            printf("%lld %lld %zu\n", (long long)T, (long long)D, attention_workspace_bytes(T, D));
        }
        return 0;
    }
    enum { T = 13, D = 6 };
    float q[T * D], k[T * D], v[T * D], y[T * D], q0[T * D];
    double want[T * D];
    for (int i = 0; i < T * D; i++) { q[i] = q0[i] = frand(); k[i] = frand(); v[i] = frand(); }
    attention_ref(q, k, v, want, T, D, 0.125);
    size_t ws = attention_workspace_bytes(T, D);
    CHECK(ws > 0, "this attention materialises an intermediate");
    char *buf = aligned(ws + 128);
    int rc;
    rc = attention(q, k, v, y, T, D, NULL, 0);
    CHECK(rc == CATENC_E_WORKSPACE, "NULL workspace: rc=%d", rc);
    rc = attention(q, k, v, y, T, D, NULL, ws);
    CHECK(rc == CATENC_E_WORKSPACE, "NULL workspace with a size: rc=%d", rc);
    rc = attention(q, k, v, y, T, D, buf, ws - 1);
    CHECK(rc == CATENC_E_WORKSPACE, "too small: rc=%d", rc);
    rc = attention(q, k, v, y, T, D, buf + 1, ws);
    CHECK(rc == CATENC_E_WORKSPACE, "misaligned by 1: rc=%d", rc);
    rc = attention(q, k, v, y, T, D, buf + 32, ws);
    CHECK(rc == CATENC_E_WORKSPACE, "aligned to 32 only: rc=%d", rc);
    CHECK(memcmp(q, q0, sizeof q) == 0, "input written on a failed call");
    for (int pass = 0; pass < 2; pass++) {
        char *w = pass == 0 ? buf : buf + 64;
        size_t bytes = pass == 0 ? ws : ws + 64;
        memset(w, pass ? 0xFF : 0xA5, bytes);  /* garbage: the entry must not read it first */
        memset(y, 0xFF, sizeof y);
        rc = attention(q, k, v, y, T, D, w, bytes);
        CHECK(rc == CATENC_OK, "pass %d: rc=%d", pass, rc);
        for (int i = 0; i < T * D; i++)
            CHECK(fabs(y[i] - want[i]) < 1e-4, "pass %d: y[%d]=%g want %g", pass, i, y[i], want[i]);
    }
    free(buf);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


def test_workspace(abi: Path) -> None:
    assert build_and_run(abi, "workspace", WORKSPACE, "out/model.c").strip() == "ok"


def test_workspace_bytes_matches_the_manifest(abi: Path) -> None:
    if not (abi / "workspace").exists():
        build_and_run(abi, "workspace", WORKSPACE, "out/model.c")
    args = [str(n) for pair in WORKSPACE_SIZES for n in pair]
    result = run(abi, "workspace", *args)
    assert result.returncode == 0, result
    expression = entries(abi / "out")["attention"]["workspace_bytes"]
    for line in result.stdout.splitlines():
        t, d, got = (int(n) for n in line.split())
        want = expression if isinstance(expression, int) else eval(expression, {}, {"T": t, "D": d})
        assert got == want, (t, d, got, expression)
    assert len(result.stdout.splitlines()) == len(WORKSPACE_SIZES)


THREADS = (
    C_HELPERS
    + r"""
#include <pthread.h>
#include "out/model.h"
enum { T = 24, D = 8, THREADS = 4, ROUNDS = 30 };
static float q[T * D], k[T * D], v[T * D], ys[THREADS][T * D], once[T * D];
static void *work(void *arg) {
    int t = (int)(intptr_t)arg;
    size_t ws = attention_workspace_bytes(T, D);
    void *w = aligned(ws);
    for (int r = 0; r < ROUNDS; r++)
        if (attention(q, k, v, ys[t], T, D, w, ws) != CATENC_OK) failures++;
    free(w);
    return NULL;
}
int main(void) {
    pthread_t threads[THREADS];
    for (int i = 0; i < T * D; i++) { q[i] = frand(); k[i] = frand(); v[i] = frand(); }
    void *w = aligned(attention_workspace_bytes(T, D));
    CHECK(attention(q, k, v, once, T, D, w, attention_workspace_bytes(T, D)) == CATENC_OK, "rc");
    free(w);
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, work, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    for (int t = 0; t < THREADS; t++) CHECK(memcmp(ys[t], once, sizeof once) == 0, "thread %d", t);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


def test_entries_are_thread_safe(abi: Path) -> None:
    out = build_and_run(abi, "threads", THREADS, "out/model.c", flags=("-pthread",))
    assert out.strip() == "ok"


# --------------------------------------------------------------------------- #
# two models in one program
# --------------------------------------------------------------------------- #

OTHER_MODEL = """\
[composite.k4]
inputs = ["x: f32[K]"]
outputs = ["y: f32[K]"]
where = ["K % 4 == 0"]
body = "y = x * 3"

[composite.attention]
inputs = ["q: f32[T, D]", "k: f32[T, D]", "v: f32[T, D]"]
outputs = ["y: f32[T, D]"]
body = \"\"\"
s[i, j] = sum[d](q[i, d] * k[j, d]) * 0.125
m[i, j] = where(j <= i, s[i, j], -inf)
p = exp(m - max(m, axis=-1, keepdims=True))
y = (p / sum(p, axis=-1, keepdims=True)) @ v
\"\"\"
"""

TWO_MODELS = (
    C_HELPERS
    + r"""
#include "out/model.h"
#include "other/other.h"
int main(void) {
    enum { T = 7, D = 5 };
    float x[4] = {1, 2, 3, 4}, y2[4], y3[4];
    CHECK(k4(x, y2, 4, NULL, 0) == CATENC_OK && m2_k4(x, y3, 4, NULL, 0) == CATENC_OK, "rc");
    for (int i = 0; i < 4; i++) CHECK(y2[i] == 2 * x[i] && y3[i] == 3 * x[i], "y[%d]", i);
    float q[T * D], k[T * D], v[T * D], a[T * D], b[T * D];
    for (int i = 0; i < T * D; i++) { q[i] = frand(); k[i] = frand(); v[i] = frand(); }
    size_t wa = attention_workspace_bytes(T, D), wb = m2_attention_workspace_bytes(T, D);
    void *bufa = aligned(wa), *bufb = aligned(wb);
    CHECK(attention(q, k, v, a, T, D, bufa, wa) == CATENC_OK, "attention");
    CHECK(m2_attention(q, k, v, b, T, D, bufb, wb) == CATENC_OK, "m2_attention");
    for (int i = 0; i < T * D; i++) CHECK(fabsf(a[i] - b[i]) < 1e-5f, "a[%d] != b[%d]", i, i);
    free(bufa); free(bufb);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


def test_two_models_link_into_one_program(abi: Path) -> None:
    (abi / "other.toml").write_text(OTHER_MODEL)
    catenc(abi, "compile", "other.toml", "-S", "-o", "other", "--prefix", "m2_")
    out = build_and_run(abi, "two", TWO_MODELS, "out/model.c", "other/other.c")
    assert out.strip() == "ok"


SAME_STEM = (
    C_HELPERS
    + r"""
#include "a/model.h"
#include "b/model.h"
int main(void) {
    float x[4] = {1, 2, 3, 4}, y2[4], y3[4];
    CHECK(a_k4(x, y2, 4, NULL, 0) == CATENC_OK && b_k4(x, y3, 4, NULL, 0) == CATENC_OK, "rc");
    for (int i = 0; i < 4; i++) CHECK(y2[i] == 2 * x[i] && y3[i] == 3 * x[i], "y[%d]", i);
    if (failures) return 1;
    puts("ok");
    return 0;
}
"""
)


def test_two_models_of_the_same_file_name_with_prefixes(tmp_path: Path) -> None:
    """`model.toml` in two directories, compiled with --prefix a_ and b_: both headers can be
    included in one translation unit and both models linked into one program."""
    for prefix, model in (("a", ABI_MODEL), ("b", OTHER_MODEL)):
        (tmp_path / f"src_{prefix}").mkdir()
        (tmp_path / f"src_{prefix}" / "model.toml").write_text(model)
        args = ("-S", "-o", prefix, "--prefix", f"{prefix}_", "--composite", "k4")
        catenc(tmp_path, "compile", f"src_{prefix}/model.toml", *args)
    assert build_and_run(tmp_path, "same", SAME_STEM, "a/model.c", "b/model.c").strip() == "ok"


# --------------------------------------------------------------------------- #
# sanitizers: no undefined behaviour, no out-of-bounds access
# --------------------------------------------------------------------------- #

CTYPES = {
    "bool": "uint8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double",
}  # fmt: skip

SANITIZED_SAMPLES = {
    "gemm": [{"M": 1, "K": 1, "N": 1}, {"M": 7, "K": 13, "N": 5}, {"M": 0, "K": 3, "N": 2}],
    "softmax": [{"N": 1, "D": 1}, {"N": 3, "D": 17}],
    "layernorm": [{"N": 1, "D": 1}, {"N": 4, "D": 19}],
    "attention": [{"T": 1, "D": 1}, {"T": 9, "D": 5}],
    "conv2d": [{"N": 1, "C": 1, "H": 1, "W": 1, "K": 1}, {"N": 2, "C": 3, "H": 5, "W": 4, "K": 3}],
    "mlp": [{"B": 1, "D": 1}, {"B": 3, "D": 5}],
}


def sample_file(stem: str) -> Path:
    for suffix in (".toml", ".yaml", ".yml"):
        if (SAMPLES / f"{stem}{suffix}").is_file():
            return SAMPLES / f"{stem}{suffix}"
    raise AssertionError(f"no sample {stem}")


def evaluate(value, env: dict[str, int]) -> int:
    return value if isinstance(value, int) else int(eval(str(value), {}, dict(env)))


def call_block(entry: dict, env: dict[str, int], tag: str, seed: int) -> tuple[list[str], list[str]]:
    """C statements that call one entry on fresh buffers, and the names of its output buffers."""
    lines = [f"    lcg_state = {seed}u;"]
    call_args, outputs = [], []
    for arg in entry["args"]:
        role, name = arg["role"], f"{tag}_arg_{arg['name']}"
        if role in ("input", "output"):
            ctype = CTYPES[arg["dtype"]]
            count = 1
            for dim in arg["shape"]:
                count *= evaluate(dim, env)
            if role == "input" and not arg["shape"]:
                lines.append(f"    {ctype} {name} = ({ctype})0.75;")
                call_args.append(name)
                continue
            lines.append(f"    {ctype} *{name} = malloc(sizeof({ctype}) * {count} + (({count}) == 0));")
            if role == "input":
                lines.append(f"    for (long i = 0; i < {count}; i++) {name}[i] = ({ctype})frand();")
            else:
                lines.append(f"    memset({name}, {0x5A if tag.endswith('a') else 0xA5}, sizeof({ctype}) * {count});")
                outputs.append((name, count, arg["dtype"]))
            call_args.append(name if arg["shape"] else name)
        elif role == "dim":
            call_args.append(f"(int64_t){env[arg['name']]}")
        elif role == "workspace":
            dims = ", ".join(f"(int64_t){env[a['name']]}" for a in entry["args"] if a["role"] == "dim")
            lines.append(f"    size_t {tag}_ws = {entry['workspace_symbol']}({dims});")
            lines.append(f"    void *{tag}_w = {tag}_ws ? aligned({tag}_ws) : NULL;")
            lines.append(f"    if ({tag}_w) memset({tag}_w, 0xEE, {tag}_ws);")
            call_args.append(f"{tag}_w")
        elif role == "workspace_bytes":
            call_args.append(f"{tag}_ws")
    lines.append(f'    CHECK({entry["symbol"]}({", ".join(call_args)}) == CATENC_OK, "{tag}");')
    return lines, outputs


def sanitizer_driver(models: dict[str, tuple[dict, dict]]) -> str:
    """models: stem -> (entries at -O2, entries at -O0 with prefix o0_)."""
    body = []
    n = 0
    for stem, (fast, plain) in models.items():
        for name, entry in fast.items():
            for sizes in SANITIZED_SAMPLES[stem]:
                env = dict(sizes)
                for key, value in entry.get("specialized", {}).items():
                    env[key] = value
                for key, expr in entry.get("derived", {}).items():
                    env[key] = evaluate(expr, env)
                n += 1
                block_a, outs_a = call_block(entry, env, f"c{n}a", 1000 + n)
                block_b, outs_b = call_block(plain[name], env, f"c{n}b", 1000 + n)
                body += ["  {", f"    /* {name} {sizes} */", *block_a, *block_b]
                for (a, count, dtype), (b, _, _) in zip(outs_a, outs_b):
                    body.append(
                        f"    for (long i = 0; i < {count}; i++) CHECK(fabs((double){a}[i] - "
                        f"(double){b}[i]) <= 1e-4 + 1e-3 * fabs((double){b}[i]), "
                        f'"{name} {dtype} %ld: %g vs %g", i, (double){a}[i], (double){b}[i]);'
                    )
                body.append("  }")
    includes = []
    for stem in models:
        includes += [f'#include "o2/{stem}.h"', f'#include "o0/{stem}_o0.h"']
    return (
        C_HELPERS
        + "\n".join(includes)
        + "\nint main(void) {\n"
        + "\n".join(body)
        + '\n    if (failures) return 1;\n    puts("ok");\n    return 0;\n}\n'
    )


def test_samples_under_address_and_undefined_behaviour_sanitizers(tmp_path: Path) -> None:
    models = {}
    for stem in SANITIZED_SAMPLES:
        source = sample_file(stem)
        (tmp_path / source.name).write_text(source.read_text())
        plain = f"{stem}_o0{source.suffix}"
        (tmp_path / plain).write_text(source.read_text())
        catenc(tmp_path, "compile", source.name, "-S", "-o", "o2", "-O2")
        catenc(tmp_path, "compile", plain, "-S", "-o", "o0", "-O0", "--prefix", "o0_")
        models[stem] = (entries(tmp_path / "o2", stem), entries(tmp_path / "o0", f"{stem}_o0"))
    (tmp_path / "main.c").write_text(sanitizer_driver(models))
    sources = [f"o2/{stem}.c" for stem in models] + [f"o0/{stem}_o0.c" for stem in models]
    cc(tmp_path, "-std=c99", *SANITIZE, "main.c", *sources, "-lm", "-o", "main")
    result = run(tmp_path, "main", env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "runtime error" not in report and "AddressSanitizer" not in report, report
    assert result.stdout.strip() == "ok", report
