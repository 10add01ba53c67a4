/* bench_baseline.c - the machine's limits and the C baseline that `make bench` measures shardload
 * against, on the same files in the same run. Each mode prints one JSON line.
 *
 *   bench_baseline seq FILE...        sequential 16 MiB buffered reads into newly allocated memory
 *                                     (huge pages requested, like shardload's cpu backend)
 *   bench_baseline direct FILE...     sequential 16 MiB O_DIRECT reads into newly allocated memory
 *   bench_baseline mmapcopy CKPT      the safetensors libraries' way: mmap each file, copy every
 *                                     tensor into its own new allocation (a faithful C rendition
 *                                     of safe_open + get_tensor on CPU)
 *   bench_baseline memcpy MIB         memcpy bandwidth between two buffers of MIB MiB
 *   bench_baseline dropcache FILE...  posix_fadvise(DONTNEED) on every file (cold runs)
 *
 * New memory is part of what a loader pays for, so every mode allocates its destination inside the
 * timed region, as a loader would. */
#include "shardload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (16u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long long peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)ru.ru_maxrss * 1024;
}

static void report(const char *mode, double secs, unsigned long long bytes)
{
    printf("{\"mode\":\"%s\",\"seconds\":%.6f,\"bytes\":%llu,\"gbps\":%.4f,\"peak_rss_bytes\":%lld}\n",
           mode, secs, bytes, secs > 0 ? (double)bytes / secs / 1e9 : 0.0, peak_rss_bytes());
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Reads one file sequentially into dst; returns bytes read or -1. */
static long long read_file(const char *path, int flags, unsigned char *dst, size_t size)
{
    const int fd = open(path, O_RDONLY | flags);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        size_t n = size - done < CHUNK ? size - done : CHUNK;
        if (flags & O_DIRECT)
            n = (n + 4095) & ~(size_t)4095;
        const ssize_t r = pread(fd, dst + done, n, (off_t)done);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    close(fd);
    return (long long)(done < size ? done : size);
}

/* Every file's bytes stay in memory until all are read, as a loader holds the whole model; freeing
 * each buffer before the next read would let the next one reuse already-touched pages. */
static int mode_read(int argc, char **argv, int flags, const char *name)
{
    unsigned long long total = 0;
    unsigned char **bufs = calloc((size_t)argc + 1, sizeof(*bufs));
    size_t *caps = calloc((size_t)argc + 1, sizeof(*caps));
    if (!bufs || !caps)
        return perror("calloc"), 1;
    const double t0 = now_s();
    for (int i = 0; i < argc; i++) {
        const off_t sz = file_size(argv[i]);
        if (sz < 0)
            return fprintf(stderr, "%s: %s\n", argv[i], strerror(errno)), 1;
        /* O_DIRECT needs aligned memory and may read up to one block past the end. */
        caps[i] = sz ? ((size_t)sz + 4095) & ~(size_t)4095 : 4096;
        bufs[i] = mmap(NULL, caps[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (bufs[i] == MAP_FAILED)
            return perror("mmap"), 1;
        /* Huge pages, as shardload's cpu backend asks for: on this kind of VM first touch of 4 KiB
         * pages, not the copy, bounds "reads into new memory", and the limit must be the best case. */
        (void)madvise(bufs[i], caps[i], MADV_HUGEPAGE);
        const long long got = read_file(argv[i], flags, bufs[i], (size_t)sz);
        if (got != (long long)sz)
            return fprintf(stderr, "%s: short read (%s)\n", argv[i], strerror(errno)), 1;
        total += (unsigned long long)got;
    }
    report(name, now_s() - t0, total);
    for (int i = 0; i < argc; i++)
        munmap(bufs[i], caps[i]);
    free(bufs);
    free(caps);
    return 0;
}

static int copy_tensors(const sl_checkpoint *ck, unsigned char **maps, unsigned long long *total)
{
    const int64_t n = sl_checkpoint_tensor_count(ck);
    for (int64_t i = 0; i < n; i++) {
        sl_tensor_info t;
        if (sl_checkpoint_tensor(ck, i, &t) != SL_OK)
            return -1;
        void *dst = malloc(t.nbytes ? t.nbytes : 1);
        if (!dst)
            return -1;
        memcpy(dst, maps[t.file] + t.offset, t.nbytes);
        *total += t.nbytes;
        /* Kept alive on purpose: a loaded state dict holds every tensor. Freed by exit. */
    }
    return 0;
}

static int mode_mmapcopy(const char *path)
{
    sl_checkpoint *ck = NULL;
    const double t0 = now_s();
    if (sl_checkpoint_open(path, &ck) != SL_OK)
        return fprintf(stderr, "%s\n", sl_checkpoint_errmsg(ck)), sl_checkpoint_close(ck), 1;
    const int64_t nf = sl_checkpoint_file_count(ck);
    unsigned char **maps = calloc((size_t)nf, sizeof(*maps));
    for (int64_t f = 0; f < nf; f++) {
        const int fd = open(sl_checkpoint_file_path(ck, f), O_RDONLY);
        const size_t sz = (size_t)sl_checkpoint_file_size(ck, f);
        maps[f] = fd >= 0 ? mmap(NULL, sz, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0)
            close(fd);
        if (maps[f] == MAP_FAILED)
            return perror("mmap"), 1;
    }
    unsigned long long total = 0;
    if (copy_tensors(ck, maps, &total) != 0)
        return fprintf(stderr, "copy failed\n"), 1;
    report("mmapcopy", now_s() - t0, total);
    return 0;
}

static int mode_memcpy(const char *mib)
{
    const size_t n = (size_t)atol(mib) << 20;
    unsigned char *a = malloc(n), *b = malloc(n);
    if (!a || !b)
        return perror("malloc"), 1;
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_s();
        memcpy(b, a, n);
        const double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    report("memcpy", best, (unsigned long long)n);
    return b[n - 1] == 1 ? 0 : 1;
}

static int mode_dropcache(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const int fd = open(argv[i], O_RDONLY);
        if (fd < 0)
            return perror(argv[i]), 1;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_baseline seq|direct|mmapcopy|memcpy|dropcache ARGS...\n");
        return 2;
    }
    if (!strcmp(argv[1], "seq"))
        return mode_read(argc - 2, argv + 2, 0, "seq");
    if (!strcmp(argv[1], "direct"))
        return mode_read(argc - 2, argv + 2, O_DIRECT, "direct");
    if (!strcmp(argv[1], "mmapcopy"))
        return mode_mmapcopy(argv[2]);
    if (!strcmp(argv[1], "memcpy"))
        return mode_memcpy(argv[2]);
    if (!strcmp(argv[1], "dropcache"))
        return mode_dropcache(argc - 2, argv + 2);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
