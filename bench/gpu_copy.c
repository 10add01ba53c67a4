/* gpu_copy.c - what the copy engine gives shardload's cuda backend, measured the way it copies:
 * from host memory that is mmap'd and then page-locked with cudaHostRegister (as the staging block
 * is), with cudaMemcpyAsync on one stream. Answers one open design question of the backend: the
 * narrow rows of column-split weights (TP 8: 1 KiB rows of o_proj, 3.5 KiB of down_proj) go as
 * cudaMemcpy2DAsync; would gathering them on the host first (memcpy into contiguous pinned memory,
 * then one 1-D copy) be faster?
 *
 * Prints one JSON object per line:
 *   {"copy":"1d","chunk":C,"bytes":N,"gbps":G}            1-D copies of C bytes each
 *   {"copy":"2d","width":W,"pitch":P,"bytes":N,"gbps":G}  W of every P bytes (N = bytes moved)
 *   {"copy":"gather","width":W,"pitch":P,"bytes":N,"gbps":G}  host memcpy of the same rows, 1 thread
 * Best of `repeats`; wall-clock time from the first call to the stream's synchronization.
 *
 * Standalone on purpose (libc and libdl only): bench/gpu_check.sh compiles it with cc even where
 * the project's build cannot run. The runtime is loaded as shardload loads it: $SL_CUDART, else
 * libcudart.so.13/.12/.11 from the loader's path or /usr/local/cuda/lib64.
 * Usage: gpu_copy [MiB per measurement, default 1024] [repeats, default 3] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int (*fn_int)(int);
typedef int (*fn_malloc)(void **, size_t);
typedef int (*fn_ptr)(void *);
typedef int (*fn_register)(void *, size_t, unsigned);
typedef int (*fn_stream_create)(void **);
typedef int (*fn_memcpy_async)(void *, const void *, size_t, int, void *);
typedef int (*fn_memcpy2d_async)(void *, size_t, const void *, size_t, size_t, size_t, int, void *);
typedef const char *(*fn_error_string)(int);

static struct {
    fn_int set_device;
    fn_malloc malloc_dev;
    fn_ptr free_dev, unregister, stream_sync;
    fn_register host_register;
    fn_stream_create stream_create;
    fn_memcpy_async memcpy_async;
    fn_memcpy2d_async memcpy2d_async;
    fn_error_string error_string;
} cu;

enum { H2D = 1, PORTABLE = 1 };

static void *open_runtime(void)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11",
                                        "/usr/local/cuda/lib64/libcudart.so.13",
                                        "/usr/local/cuda/lib64/libcudart.so.12",
                                        "/usr/local/cuda/lib64/libcudart.so.11"};
    const char *env = getenv("SL_CUDART");
    if (env && *env)
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
    }
    return NULL;
}

/* memcpy: ISO C has no cast from an object pointer to a function pointer. */
static int resolve(void *lib, const char *name, void *slot)
{
    void *sym = dlsym(lib, name);
    if (!sym) {
        fprintf(stderr, "gpu_copy: the CUDA runtime lacks %s\n", name);
        return -1;
    }
    memcpy(slot, &sym, sizeof sym);
    return 0;
}

static int load_runtime(void)
{
    void *lib = open_runtime();
    if (!lib) {
        fprintf(stderr, "gpu_copy: no CUDA runtime (%s)\n", dlerror());
        return -1;
    }
    return resolve(lib, "cudaSetDevice", &cu.set_device) | resolve(lib, "cudaMalloc", &cu.malloc_dev) |
           resolve(lib, "cudaFree", &cu.free_dev) | resolve(lib, "cudaHostUnregister", &cu.unregister) |
           resolve(lib, "cudaStreamSynchronize", &cu.stream_sync) |
           resolve(lib, "cudaHostRegister", &cu.host_register) |
           resolve(lib, "cudaStreamCreate", &cu.stream_create) |
           resolve(lib, "cudaMemcpyAsync", &cu.memcpy_async) |
           resolve(lib, "cudaMemcpy2DAsync", &cu.memcpy2d_async) |
           resolve(lib, "cudaGetErrorString", &cu.error_string);
}

static int check(int e, const char *what)
{
    if (e != 0)
        fprintf(stderr, "gpu_copy: %s failed: %s (error %d)\n", what, cu.error_string(e), e);
    return e;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct bench {
    unsigned char *host, *host2;   /* registered: the source, and a gather target */
    unsigned char *dev;
    size_t n;
    void *stream;
    int repeats;
} bench;

/* 1-D copies of `chunk` bytes covering n: what a staging slot's contiguous pieces become. */
static int time_1d(const bench *b, size_t chunk)
{
    double best = 1e30;
    for (int r = 0; r < b->repeats; r++) {
        const double t = now();
        for (size_t off = 0; off < b->n; off += chunk) {
            const size_t len = b->n - off < chunk ? b->n - off : chunk;
            if (check(cu.memcpy_async(b->dev + off, b->host + off, len, H2D, b->stream), "cudaMemcpyAsync"))
                return -1;
        }
        if (check(cu.stream_sync(b->stream), "cudaStreamSynchronize"))
            return -1;
        const double e = now() - t;
        best = e < best ? e : best;
    }
    printf("{\"copy\":\"1d\",\"chunk\":%zu,\"bytes\":%zu,\"gbps\":%.3f}\n", chunk, b->n, (double)b->n / best / 1e9);
    return 0;
}

/* Width w of every `pitch` source bytes, in 2-D copies of at most 16 MiB of source each (a slot),
 * to a packed destination; and the same rows gathered by memcpy on the host. */
static int time_rows(const bench *b, size_t w, size_t pitch)
{
    const size_t rows_per_copy = ((size_t)16 << 20) / pitch, rows = b->n / pitch, moved = rows * w;
    double best = 1e30, best_gather = 1e30;
    for (int r = 0; r < b->repeats; r++) {
        double t = now();
        for (size_t row = 0; row < rows; row += rows_per_copy) {
            const size_t h = rows - row < rows_per_copy ? rows - row : rows_per_copy;
            if (check(cu.memcpy2d_async(b->dev + row * w, w, b->host + row * pitch, pitch, w, h, H2D,
                                        b->stream), "cudaMemcpy2DAsync"))
                return -1;
        }
        if (check(cu.stream_sync(b->stream), "cudaStreamSynchronize"))
            return -1;
        double e = now() - t;
        best = e < best ? e : best;
        t = now();
        for (size_t row = 0; row < rows; row++)
            memcpy(b->host2 + row * w, b->host + row * pitch, w);
        e = now() - t;
        best_gather = e < best_gather ? e : best_gather;
    }
    printf("{\"copy\":\"2d\",\"width\":%zu,\"pitch\":%zu,\"bytes\":%zu,\"gbps\":%.3f}\n", w, pitch, moved,
           (double)moved / best / 1e9);
    printf("{\"copy\":\"gather\",\"width\":%zu,\"pitch\":%zu,\"bytes\":%zu,\"gbps\":%.3f}\n", w, pitch,
           moved, (double)moved / best_gather / 1e9);
    return 0;
}

static unsigned char *pinned(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, 0x5A, n);
    if (check(cu.host_register(p, n, PORTABLE), "cudaHostRegister")) {
        munmap(p, n);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    bench b = {.n = (size_t)(argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20,
               .repeats = argc > 2 ? atoi(argv[2]) : 3};
    if (b.n == 0 || b.repeats < 1) {
        fprintf(stderr, "usage: gpu_copy [MiB > 0] [repeats > 0]\n");
        return 2;
    }
    if (load_runtime() != 0 || check(cu.set_device(0), "cudaSetDevice") ||
        check(cu.stream_create(&b.stream), "cudaStreamCreate") ||
        check(cu.malloc_dev((void **)&b.dev, b.n), "cudaMalloc"))
        return 1;
    b.host = pinned(b.n);
    b.host2 = pinned(b.n);
    if (!b.host || !b.host2)
        return 1;
    static const size_t chunks[] = {(size_t)1 << 20, (size_t)4 << 20, (size_t)16 << 20};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        if (time_1d(&b, chunks[i]) != 0)
            return 1;
    /* Llama-3-8B rows at TP 8: o_proj 4096 bf16 (8 KiB) -> 1 KiB, down_proj 14336 -> 3.5 KiB */
    static const size_t widths[][2] = {{1024, 8192}, {3584, 28672}, {512, 4096}, {16384, 131072}};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (time_rows(&b, widths[i][0], widths[i][1]) != 0)
            return 1;
    cu.stream_sync(b.stream);
    cu.unregister(b.host);
    cu.unregister(b.host2);
    cu.free_dev(b.dev);
    munmap(b.host, b.n);
    munmap(b.host2, b.n);
    return 0;
}
