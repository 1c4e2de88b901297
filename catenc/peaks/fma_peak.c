/* fp32 FMA peak: every thread runs ACC independent chains of fused multiply-adds on the widest
 * vectors the build targets (GCC/clang vector extensions): 512-bit with AVX-512, 256-bit with
 * AVX, else 128-bit (SSE); enough chains to cover the FMA latency on every FMA port. Without FMA
 * instructions (__FMA__ undefined) each step is a multiply and an add, and "fma 0" says so.
 *
 *   cc -O3 -march=native -fopenmp fma_peak.c -o fma_peak && ./fma_peak [iterations] [repeats]
 *
 * Prints the vector width ("vector_bits"), then the best rate as "fma_gflops <GFLOP/s>",
 * counting 2 flops per lane per step. */
#ifdef _OPENMP
#include <omp.h>
#else
#include "no_openmp.h"
#endif
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
#if defined(__FMA__)
#define HAS_FMA 1
#else
#define HAS_FMA 0
#endif

typedef float vec __attribute__((vector_size(4 * LANES)));

#define ACC 12

static float chains(long iterations, float seed) {
    vec m, k;
    for (int l = 0; l < LANES; ++l) {
        m[l] = 0.999999f;
        k[l] = 1e-7f * seed;
    }
    /* ACC = 12 chains held in named registers; the empty asm with every chain as an in-out
     * operand keeps the compiler from folding the loop, and costs nothing. */
    vec a0 = m * seed, a1 = a0 + k, a2 = a1 + k, a3 = a2 + k, a4 = a3 + k, a5 = a4 + k;
    vec a6 = a5 + k, a7 = a6 + k, a8 = a7 + k, a9 = a8 + k, a10 = a9 + k, a11 = a10 + k;
    for (long i = 0; i < iterations; ++i) {
        a0 = a0 * m + k;
        a1 = a1 * m + k;
        a2 = a2 * m + k;
        a3 = a3 * m + k;
        a4 = a4 * m + k;
        a5 = a5 * m + k;
        a6 = a6 * m + k;
        a7 = a7 * m + k;
        a8 = a8 * m + k;
        a9 = a9 * m + k;
        a10 = a10 * m + k;
        a11 = a11 * m + k;
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                         "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    vec total = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
    float sum = 0.0f;
    for (int l = 0; l < LANES; ++l) sum += total[l];
    return sum;
}

int main(int argc, char** argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 20000000L;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    double best = 1e30;
    float sink = 0.0f;
    int threads = 1;
    for (int r = 0; r < repeats; ++r) {
        double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
        {
#pragma omp single
            threads = omp_get_num_threads();
            sink += chains(iterations, 1.0f + (float)omp_get_thread_num());
        }
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    double flops = 2.0 * LANES * ACC * (double)iterations * threads;
    printf("threads %d\n", threads);
    printf("vector_bits %d\n", 32 * LANES);
    printf("fma %d\n", HAS_FMA);
    printf("checksum %g\n", (double)sink);
    printf("best_s %.6f\n", best);
    printf("fma_gflops %.2f\n", flops / best / 1e9);
    return 0;
}
