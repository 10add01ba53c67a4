/* populate.c - how long first touch of fresh anonymous memory takes, the cost a cpu-device load
 * pays before its bytes land (src/device/dev_cpu.c pre-faults with one helper thread): one mapping
 * of MiB mebibytes, advised MADV_HUGEPAGE or MADV_NOHUGEPAGE, populated with MADV_POPULATE_WRITE
 * split over THREADS threads. Not built by CMake (a probe, like gpu_copy.c):
 *
 *   cc -O2 -pthread -o /tmp/populate bench/populate.c
 *   for r in 1 2 3; do for c in "1 1" "1 2" "0 1" "0 2"; do
 *       sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/populate 2048 $c; done; done
 *
 * Prints one line per run: the seconds, GB/s and the AnonHugePages the kernel gave. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

typedef struct span {
    char *p;
    size_t n;
    int rc;
} span;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *populate(void *arg)
{
    span *s = arg;
    s->rc = madvise(s->p, s->n, MADV_POPULATE_WRITE);
    return NULL;
}

static long anon_huge_kib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "AnonHugePages:", 14))
            kib = atol(line + 14);
    if (f)
        fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: populate MiB HUGE(0|1) THREADS(1-16)\n");
        return 2;
    }
    const size_t n = (size_t)atol(argv[1]) << 20;
    const int huge = atoi(argv[2]), threads = atoi(argv[3]);
    if (n == 0 || threads < 1 || threads > 16 || n % ((size_t)threads << 21)) {
        fprintf(stderr, "populate: MiB must be > 0 and a multiple of 2 MiB per thread\n");
        return 2;
    }
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("populate: mmap");
        return 1;
    }
    (void)madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    pthread_t tid[16];
    span s[16];
    const double t0 = now();
    for (int i = 0; i < threads; i++) {
        s[i] = (span){.p = p + n / (size_t)threads * (size_t)i, .n = n / (size_t)threads};
        if (pthread_create(&tid[i], NULL, populate, &s[i]) != 0) {
            fprintf(stderr, "populate: pthread_create failed\n");
            return 1;
        }
    }
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        failed |= s[i].rc != 0;
    }
    const double secs = now() - t0;
    if (failed) {
        fprintf(stderr, "populate: MADV_POPULATE_WRITE failed (Linux < 5.14?)\n");
        return 1;
    }
    printf("huge=%d threads=%d: %.3f s (%.2f GB/s), AnonHugePages %ld MiB\n", huge, threads, secs,
           (double)n / secs / 1e9, anon_huge_kib() / 1024);
    return 0;
}
