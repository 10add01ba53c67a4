/* bench_convert.c - how fast the engine converts dtypes on one thread (sl_convert, what the scatter
 * runs for --dtype conversions): every pair of f32, f16 and bf16 over `count` elements (default
 * 32 Mi, well past the caches), best of `repeats` runs, in elements per second. Then the cuda
 * ring's bf16 -> f32 conversions in the same run: the source converted piece by piece into a ring
 * of 4 pieces, each piece one sl_convert_rows job on a pool of `helpers` threads (default as the
 * engine starts: CPUs - 1, at most 7), with the plain ring's pieces (256 Ki f32 elements, under
 * CONVERT_PAR_MIN: one thread) and the pieces of the ring grown for the helpers (2 *
 * CONVERT_PAR_MIN: shared by them; sl_rd_ring_for_helpers). Conversion alone: no reads, no copies.
 * Usage: bench_convert [count] [repeats] [helpers]
 * Builds with the compiler alone (bench/gpu_check.sh): cc -O2 -Iinclude -Isrc bench/bench_convert.c
 * src/load/convert.c src/common/sl_pool.c src/common/sl_dtype.c -lpthread */
#include "load/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_pool.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds for n bf16 elements of src into f32 through a ring of 4 pieces of `piece` elements,
 * each piece one sl_convert_rows job on pool; best of repeats. */
static double ring_seconds(sl_pool *pool, unsigned char *ring, const unsigned char *src, size_t n,
                           size_t piece, int repeats)
{
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        const double t = now();
        for (size_t i = 0, k = 0; i < n; i += piece, k = (k + 1) % 4) {
            const size_t m = n - i < piece ? n - i : piece;
            sl_convert_rows(pool, ring + k * piece * 4, 0, SL_DTYPE_F32, src + i * 2, 0,
                            SL_DTYPE_BF16, m, 1);
        }
        const double e = now() - t;
        best = e < best ? e : best;
    }
    return best;
}

static void ring_table(const unsigned char *bf16, size_t n, int repeats, unsigned helpers)
{
    const size_t plain = ((size_t)4 << 20) / 4 / 4, grown = 2 * CONVERT_PAR_MIN;
    unsigned char *ring = malloc(4 * grown * 4);
    sl_pool *pool = sl_pool_new(helpers);
    if (!ring) {
        fprintf(stderr, "bench_convert: out of memory\n");
        exit(2);
    }
    memset(ring, 1, 4 * grown * 4);
    const double a = ring_seconds(pool, ring, bf16, n, plain, repeats);
    const double b = ring_seconds(pool, ring, bf16, n, grown, repeats);
    printf("ring bf16 -> f32, pieces of %zu Ki elements (%u thread%s): %6.2f G elements/s\n",
           plain >> 10, plain < CONVERT_PAR_MIN ? 1 : sl_pool_parts(pool),
           plain < CONVERT_PAR_MIN || sl_pool_parts(pool) == 1 ? "" : "s", (double)n / a / 1e9);
    printf("ring bf16 -> f32, pieces of %zu Ki elements (%u thread%s): %6.2f G elements/s (x%.2f)\n",
           grown >> 10, sl_pool_parts(pool), sl_pool_parts(pool) == 1 ? "" : "s",
           (double)n / b / 1e9, a / b);
    sl_pool_free(pool);
    free(ring);
}

int main(int argc, char **argv)
{
    const size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)32 << 20;
    const int repeats = argc > 2 ? atoi(argv[2]) : 3;
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const unsigned helpers = argc > 3 ? (unsigned)atoi(argv[3]) : cpus > 8 ? 7 : cpus > 1 ? (unsigned)(cpus - 1) : 0;
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
    sl_convert(mid, SL_DTYPE_BF16, src, SL_DTYPE_F32, n);
    ring_table(mid, n, repeats, helpers);
    free(src);
    free(mid);
    free(dst);
    return 0;
}
