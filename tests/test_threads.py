"""Threads of an entry call (docs/abi.md, "Threads"): one parallel region per call, the thread count
a caller sets (NAME_set_num_threads, CATENC_NUM_THREADS, else OpenMP's default), and good manners
in a shared process: the caller's OpenMP settings are restored and the library's threads sleep
soon after the call returns instead of spinning on the process's cores.

The C checks run a small program linked against the built library, with clang's runtime (LLVM
OpenMP, whose threads spin 200 ms after a region unless told otherwise) and gcc's (libgomp).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_text, randn

# A gemm with an epilogue (shared by the team), a batch of small gemms (one product per thread),
# a row-parallel reduction and an elementwise tail: every way a kernel meets the team.
SOURCE = """
[composite.block]
inputs = ["x: f32[B, M, K]", "w: f32[K, N]", "b: f32[N]", "v: f32[B, N, N]"]
outputs = ["y: f32[B, M, N]", "s: f32[B, M]", "z: f32[B, M, N]"]
body = '''
h = relu(x @ w + b)
y = h * 0.5
s = sum(h, axis=-1)
z = h @ v
'''
"""

PROGRAM = r"""
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "threads.h"

static int tasks(void) /* threads of this process */
{
    int n = 0;
    DIR* d = opendir("/proc/self/task");
    struct dirent* e;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int main(int argc, char** argv)
{
    enum { B = 4, M = 96, K = 80, N = 120 };
    static float x[B * M * K], w[K * N], b[N], v[B * N * N], y[B * M * N], s[B * M], z[B * M * N];
    const int setting = atoi(argv[1]);
    size_t bytes = block_workspace_bytes(B, M, K, N);
    void* ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    int i, before_threads, after_threads;
    double before_cpu;
    for (i = 0; i < B * M * K; ++i) x[i] = (float)((i * 7) % 13) - 6.0f;
    for (i = 0; i < K * N; ++i) w[i] = (float)((i * 5) % 11) * 0.125f - 0.5f;
    for (i = 0; i < N; ++i) b[i] = (float)(i % 3) - 1.0f;
    for (i = 0; i < B * N * N; ++i) v[i] = (float)((i * 3) % 7) * 0.25f - 0.75f;
    if (setting != 0) block_set_num_threads(setting);
    before_threads = omp_get_max_threads();
    if (block(x, w, b, v, y, s, z, B, M, K, N, ws, bytes) != CATENC_OK) return 2;
    after_threads = omp_get_max_threads();
    before_cpu = cpu_ms();
    usleep(300000);
    printf("tasks %d\n", tasks());
    printf("idle_cpu_ms %.1f\n", cpu_ms() - before_cpu);
    printf("restored %d\n", before_threads == after_threads);
#if defined(KMP_VERSION_MAJOR)
    printf("blocktime %d\n", kmp_get_blocktime());
#endif
    printf("checksum %.6e %.6e %.6e\n", (double)y[B * M * N - 1], (double)s[B * M - 1], (double)z[B * M * N - 1]);
    free(ws);
    return 0;
}
"""


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    h = np.maximum(x.astype(np.float64) @ w + b, 0.0)
    return h * 0.5, h.sum(axis=-1), h @ v


@pytest.fixture(scope="module", params=["clang", "gcc"])
def built(request, tmp_path_factory):
    """The library built with one compiler, and a program linked against it."""
    directory = tmp_path_factory.mktemp(f"threads_{request.param}")
    lib = compile_text(directory, SOURCE, name="threads", config={"CC": request.param})
    out = lib.path.parent
    (directory / "main.c").write_text(PROGRAM)
    program = directory / "main"
    command = [request.param, "-std=c11", "-O1", "-fopenmp", f"-I{out}", str(directory / "main.c"), str(lib.path)]
    built = subprocess.run([*command, f"-Wl,-rpath,{out}", "-o", str(program)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return lib, program


def _run(program: Path, setting: int, environment: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "CATENC_NUM_THREADS", "KMP_BLOCKTIME")}
    env.update({"OMP_NUM_THREADS": "2", **(environment or {})})
    done = subprocess.run([str(program), str(setting)], env=env, check=True, capture_output=True, text=True)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def test_results_do_not_depend_on_the_thread_count(built):
    lib, _ = built
    entry = lib["block"]
    x, w, b = randn((6, 37, 70), seed=1), randn((70, 150), seed=2), randn((150,), seed=3)
    v = randn((6, 150, 150), seed=4)
    results = []
    for n in (1, 2, 3, 0):
        entry.set_num_threads(n)
        results.append(entry(x, w, b, v))
    for got, want in zip(results[0], _reference(x, w, b, v), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    for got in results[1:]:  # every team splits the same sums in the same order
        for a, want in zip(got, results[0], strict=True):
            np.testing.assert_array_equal(a, want)


def test_more_threads_than_cores_take_every_chunk_once(built):
    """Teams larger than the machine (threads descheduled while holding chunks, or arriving after the
    others took them all) still compute each chunk exactly once, k-slice after k-slice: every call gives
    the one-thread bits."""
    lib, _ = built
    entry = lib["block"]
    x, w, b = randn((3, 50, 1100), seed=5), randn((1100, 200), seed=6), randn((200,), seed=7)  # 3 k-slices
    v = randn((3, 200, 200), seed=8)
    entry.set_num_threads(1)
    want = entry(x, w, b, v)
    try:
        for n in (5, 8):
            entry.set_num_threads(n)
            for _ in range(10):
                for got, expected in zip(entry(x, w, b, v), want, strict=True):
                    np.testing.assert_array_equal(got, expected)
    finally:
        entry.set_num_threads(0)


def test_the_thread_count_a_caller_sets_is_the_teams(built):
    """The process's threads after one call: the main thread and the team's others."""
    _, program = built
    assert _run(program, 1)["tasks"] == "1"
    assert _run(program, 3)["tasks"] == "3"
    assert _run(program, 0, {"CATENC_NUM_THREADS": "3"})["tasks"] == "3"
    assert _run(program, 1, {"CATENC_NUM_THREADS": "3"})["tasks"] == "1"  # the call's setting wins
    assert _run(program, 0, {"CATENC_NUM_THREADS": "a lot"})["tasks"] == "2"  # not a count: OpenMP's default
    checksums = {_run(program, n)["checksum"] for n in (1, 2, 3)}
    assert len(checksums) == 1


def test_the_callers_openmp_settings_are_restored(built):
    _, program = built
    for setting in (1, 3):
        report = _run(program, setting)
        assert report["restored"] == "1"
        assert report.get("blocktime", "200") == "200"  # LLVM OpenMP's default, the caller's


def test_the_team_sleeps_soon_after_the_call(built):
    """The team's threads used to spin for LLVM OpenMP's 200 ms block time after every call, taking
    a core from the rest of the process (numpy's, PyTorch's or onnxruntime's threads)."""
    _, program = built
    report = _run(program, 2)
    assert float(report["idle_cpu_ms"]) < 60, report
