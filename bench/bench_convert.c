/* bench_convert.c - how fast the engine converts dtypes on one thread (sl_convert, what the scatter
 * runs for --dtype conversions): every pair of f32, f16 and bf16 over `count` elements (default
 * 32 Mi, well past the caches), best of `repeats` runs, in elements per second.
 * Usage: bench_convert [count] [repeats] */
#include "load/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)32 << 20;
    const int repeats = argc > 2 ? atoi(argv[2]) : 3;
    float *src = malloc(n * sizeof *src);
    unsigned char *mid = malloc(n * 2), *dst = malloc(n * 4);
    if (!n || repeats < 1 || !src || !mid || !dst) {
        fprintf(stderr, "usage: bench_convert [count > 0] [repeats > 0] (or out of memory)\n");
        return 2;
    }
    for (size_t i = 0; i < n; i++) /* weights-like values, every source page touched */
        src[i] = (float)((long)(i % 2001) - 1000) * 1e-3f;
    memset(dst, 1, n * 4);
    const sl_dtype dt[3] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};
    for (int s = 0; s < 3; s++) {
        const void *in = src;
        if (s > 0) { /* 16-bit sources: the same values, converted once */
            sl_convert(mid, dt[s], src, SL_DTYPE_F32, n);
            in = mid;
        }
        for (int d = 0; d < 3; d++) {
            if (d == s)
                continue;
            double best = 1e30;
            for (int r = 0; r < repeats; r++) {
                const double t = now();
                sl_convert(dst, dt[d], in, dt[s], n);
                const double e = now() - t;
                best = e < best ? e : best;
            }
            printf("%-5s -> %-5s %6.2f G elements/s\n", sl_dtype_name(dt[s]), sl_dtype_name(dt[d]),
                   (double)n / best / 1e9);
        }
    }
    free(src);
    free(mid);
    free(dst);
    return 0;
}
