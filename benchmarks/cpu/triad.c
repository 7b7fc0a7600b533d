/* STREAM's triad, a[i] = b[i] + s * c[i], over f32 arrays with OpenMP: the memory wall that
   bench_triad.py measures next to Numba's triad. Built by bench_triad.py with the machine's C
   compiler (-O3 -fopenmp -march=native); static schedule, normal stores, as STREAM's. */
#include <stddef.h>

void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}
