/* bench_header.c - how fast sl_validate_buffer handles a large header: builds a file of
 * `count` tensors (default 100,000, about 10 MB of header) in memory and times validation.
 * Usage: bench_header [count] [repeats] */
#include "shardload.h"

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

/* Names in reverse order and long, like model.layers.N.mlp...: the sort does real work. */
static char *build(long count, size_t *len)
{
    const size_t cap = (size_t)count * 160 + 64;
    char *h = malloc(8 + cap);
    if (!h)
        return NULL;
    size_t o = 8;
    h[o++] = '{';
    for (long i = 0; i < count; i++) {
        const long k = count - 1 - i;
        o += (size_t)snprintf(h + o, cap - o, "%s\"model.layers.%ld.mlp.experts.%ld.up_proj.weight\":{\"dtype\":\"BF16\","
                              "\"shape\":[2,2],\"data_offsets\":[%ld,%ld]}", i ? "," : "", k / 64, k % 64, k * 8, k * 8 + 8);
    }
    h[o++] = '}';
    const size_t n = o - 8;
    for (int i = 0; i < 8; i++)
        h[i] = (char)((unsigned long long)n >> (8 * i));
    char *f = realloc(h, o + (size_t)count * 8);
    if (!f)
        return free(h), NULL;
    memset(f + o, 0, (size_t)count * 8);
    *len = o + (size_t)count * 8;
    return f;
}

int main(int argc, char **argv)
{
    const long count = argc > 1 ? atol(argv[1]) : 100000;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    size_t len = 0;
    char *f = build(count, &len);
    if (!f || count < 1 || reps < 1)
        return fprintf(stderr, "bench_header: bad arguments or out of memory\n"), 1;
    char err[256];
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        const sl_status st = sl_validate_buffer(f, len, "bench", err, sizeof err);
        const double dt = now() - t0;
        if (st != SL_OK)
            return fprintf(stderr, "bench_header: %s\n", err), 1;
        best = dt < best ? dt : best;
    }
    printf("bench_header: %ld tensors, header %.1f MB: best of %d = %.1f ms (%.0f MB/s)\n", count,
           (double)(len - 8 - (size_t)count * 8) / 1e6, reps, best * 1e3,
           (double)(len - (size_t)count * 8) / 1e6 / best);
    free(f);
    return 0;
}
