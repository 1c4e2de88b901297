/* Calling a catenc entry from a plain C program: no Python at build or run time.
 *
 * `make` here runs `catenc compile ../gemm.toml -S -o build` (C source, header and manifest
 * only), then builds this file together with build/gemm.c using nothing but a C compiler
 * and libm:
 *
 *     cc -O2 -std=c99 -Ibuild main.c build/gemm.c -lm -o build/gemm_demo
 *
 * Usage: gemm_demo [M K N]   (default 100 37 64)
 */
#if !defined(_ISOC11_SOURCE)
#define _ISOC11_SOURCE 1 /* aligned_alloc under -std=c99 */
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gemm.h"

/* Deterministic inputs: small multiples of 1/8, so every product and partial sum is exact in
   float and the result does not depend on the order of the reduction. */
static void fill(float* x, int64_t n, int64_t seed) {
    for (int64_t i = 0; i < n; ++i) x[i] = (float)((i * 7 + seed * 5 + 3) % 13 - 6) / 8.0f;
}

int main(int argc, char** argv) {
    int64_t M = 100, K = 37, N = 64;
    if (argc == 4) {
        M = atoll(argv[1]);
        K = atoll(argv[2]);
        N = atoll(argv[3]);
    }
    if (M < 1 || K < 1 || N < 1) {
        fprintf(stderr, "usage: %s [M K N]  (all >= 1)\n", argv[0]);
        return 2;
    }

    float* A = malloc(sizeof(float) * (size_t)(M * K));
    float* B = malloc(sizeof(float) * (size_t)(K * N));
    float* C = malloc(sizeof(float) * (size_t)(M * N));
    if (!A || !B || !C) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    fill(A, M * K, 1);
    fill(B, K * N, 2);

    /* gemm.toml declares A: f32[M, K], B: f32[K, N], C: f32[M, N]. Free symbols are passed in
       order of first appearance, reading the input declarations then the output declarations:
       M, K (from A), then N (from B). So the signature is
         int gemm(const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N,
                  void* workspace, size_t workspace_bytes);                               */
    size_t ws_bytes = gemm_workspace_bytes(M, K, N);
    void* ws = NULL;
    if (ws_bytes > 0) {
        ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64); /* size: a multiple of 64 */
        if (!ws) {
            fprintf(stderr, "out of memory (workspace of %zu bytes)\n", ws_bytes);
            return 1;
        }
    }

    int rc = gemm(A, B, C, M, K, N, ws, ws_bytes);
    if (rc != CATENC_OK) {
        fprintf(stderr, "gemm returned %d\n", rc);
        return 1;
    }

    /* Naive reference. */
    double max_err = 0.0;
    int bad = 0;
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            double ref = 0.0;
            for (int64_t k = 0; k < K; ++k) ref += (double)A[i * K + k] * (double)B[k * N + j];
            double err = fabs((double)C[i * N + j] - ref);
            if (!(err <= 1e-4 * (1.0 + fabs(ref)))) bad = 1; /* also catches NaN */
            if (err > max_err || err != err) max_err = err;
        }
    }

    printf("gemm M=%lld K=%lld N=%lld workspace=%zu bytes: max abs error %g\n", (long long)M,
           (long long)K, (long long)N, ws_bytes, max_err);
    free(ws);
    free(A);
    free(B);
    free(C);
    if (bad) {
        printf("MISMATCH\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
