/* STREAM triad a[i] = b[i] + s*c[i] over arrays much larger than the caches, OpenMP threads.
 *
 *   clang -O3 -march=native -fopenmp triad.c -o triad && ./triad [MiB_per_array] [repeats]
 *
 * Prints the best rate as "triad_gbs <GB/s>", counting 3 arrays x 8 bytes per element (the
 * STREAM convention: the write-allocate read of a is not counted). The arrays are first
 * touched inside the same parallel loops, so pages land where the threads run. */
#ifdef _OPENMP
#include <omp.h>
#else
#include "no_openmp.h"
#endif
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
    long mib = argc > 1 ? atol(argv[1]) : 512;
    int repeats = argc > 2 ? atoi(argv[2]) : 10;
    long n = mib * 1024L * 1024L / (long)sizeof(double);
    double* a = aligned_alloc(64, n * sizeof(double));
    double* b = aligned_alloc(64, n * sizeof(double));
    double* c = aligned_alloc(64, n * sizeof(double));
    if (!a || !b || !c) {
        fprintf(stderr, "triad: cannot allocate 3 x %ld MiB\n", mib);
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
    }
    const double s = 3.0;
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    double check = 0.0;
    for (long i = 0; i < n; i += 4096) check += a[i];
    if (check != 7.0 * (double)((n + 4095) / 4096)) {
        fprintf(stderr, "triad: wrong result %g\n", check);
        return 1;
    }
    printf("threads %d\n", omp_get_max_threads());
    printf("bytes_per_pass %ld\n", 3L * n * (long)sizeof(double));
    printf("best_s %.6f\n", best);
    printf("triad_gbs %.2f\n", 3.0 * (double)n * sizeof(double) / best / 1e9);
    free(a);
    free(b);
    free(c);
    return 0;
}
