/* What the machine-peak probes use of OpenMP, for a build without it (the runtime's OMP=0):
 * one thread, timed by the POSIX monotonic clock. Included by fma_peak.c and triad.c. */
#ifndef CATENC_PEAKS_NO_OPENMP_H
#define CATENC_PEAKS_NO_OPENMP_H
#include <time.h>

static inline double omp_get_wtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static inline int omp_get_num_threads(void) { return 1; }
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
#endif
