/* fake_cudart.c - a host-memory stand-in for the CUDA runtime, so that the cuda backend
 * (src/device/dev_cuda.c) runs in tests on machines without a GPU: shardload loads it with
 * SL_CUDART=path/to/libfake_cudart.so. It implements only the entry points dev_cuda.c resolves.
 *
 * It is stricter than a real GPU where that exposes bugs:
 * - "Device memory" is host memory from posix_memalign of the exact size (ASan sees overruns);
 *   every copy checks that its device range lies inside one allocation of the right GPU.
 * - Async operations are queued per stream and performed only at cudaStreamSynchronize (or a
 *   synchronous call on the same GPU, as the legacy default stream does), reading the host source
 *   THEN: a staging slot refilled before its copies were fenced yields wrong bytes.
 * - cudaMemGetInfo reports the GPU's size (FAKE_CUDA_MEM, default 1 GiB) minus the bytes
 *   allocated on it, exactly (no allocation granularity).
 * - Host ranges registered with cudaHostRegister are tracked: registering an overlapping range
 *   again fails as CUDA does (cudaErrorHostMemoryAlreadyRegistered), async copies from
 *   unregistered memory and unregistering a range with queued copies are counted.
 *
 * Timed mode (FAKE_CUDA_GBPS=B, GB/s): each GPU has one copy engine that moves B GB/s. A copy
 * starts when it is issued or when the engine finishes the one before, whichever is later, and a
 * synchronization (stream, event, synchronous copy) sleeps until the modelled end of what it waits
 * for. The engine's busy time is reported, so a benchmark can tell how well loads keep the link
 * busy (bench/ring_sim.sh) without a GPU. It measures time only: no byte is moved and device
 * memory is never touched, so that the stand-in's own copies do not slow the load it measures
 * (the strict untimed mode checks the bytes).
 * FAKE_CUDA_EVENTS_AS_STREAM=1 makes an event wait wait for its whole stream, i.e. what an engine
 * that fences the stream before refilling a slot would get, to compare against.
 *
 * Fault injection (FAKE_CUDA_FAIL=NAME:N): the N-th call of entry point NAME (e.g.
 * cudaMemcpyAsync:5) fails with cudaErrorLaunchFailure and does nothing, as an asynchronous fault
 * reported at that call would look to the caller; other calls go on working (a real GPU may
 * refuse every later call of a broken context; the caller's cleanup must be right either way).
 * Tests in one process with the stand-in set it with fake_cuda_fail() instead.
 *
 * Kernels: cudaLibraryLoadData takes the cuda backend's PTX (it must name the kernels of
 * src/device/cuda_kernels.h; FAKE_CUDA_NO_KERNELS=1 refuses it as an invalid PTX, as a driver too
 * old for it would: with CUDA_MODULE_LOADING=EAGER at cudaLibraryLoadData, else, as CUDA 12.2 and
 * later load libraries lazily by default, at every launch, where the driver would JIT-compile it),
 * and cudaLaunchKernel queues a launch in stream order like a copy, which runs
 * the kernel's element function (cuda_kernels.h, the one cuda_kernels.cu compiles) on the device
 * memory when the stream is synchronized; its ranges are checked like a copy's.
 *
 * FAKE_CUDA_GPUS (default 2; 0: no GPU) sets the GPU count. At exit the counters are appended to
 * $FAKE_CUDA_LOG, one line of key=value pairs, for the test to check. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c11 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda_kernels.h"

#define FK_EXPORT __attribute__((visibility("default")))
#define FK_MAX_GPUS 16

typedef int cudaError_t;
typedef struct fk_stream *cudaStream_t;

enum {
    FK_OK = 0,
    FK_INVALID_VALUE = 1,
    FK_MEMORY_ALLOCATION = 2,
    FK_NO_DEVICE = 100,
    FK_INVALID_DEVICE = 101,
    FK_INVALID_HANDLE = 400,
    FK_ALREADY_REGISTERED = 712,
    FK_NOT_REGISTERED = 713,
    FK_LAUNCH_FAILURE = 719,
    FK_INVALID_PTX = 218,
    FK_SYMBOL_NOT_FOUND = 500
};

/* The kernels the stand-in runs: cuda_kernels.h's, by their PTX names. */
typedef struct fk_kernel {
    const char *name;
    unsigned (*elem)(unsigned short);
} fk_kernel;
static const fk_kernel fk_kernels[] = {{SLK_BF16_TO_F32, slk_bf16_to_f32},
                                       {SLK_F16_TO_F32, slk_f16_to_f32}};

enum { FK_H2D = 1, FK_D2H = 2 };

typedef struct fk_op {
    unsigned char *dst;
    const unsigned char *src;   /* NULL: memset to value */
    size_t dpitch, spitch, width, height;
    int value;
    double done_at;             /* timed mode: when the copy engine finishes it */
    const fk_kernel *kernel;    /* a launch: n elements from src to dst (device memory) */
    size_t n;
} fk_op;

struct fk_stream {
    int gpu;
    fk_op *q;
    size_t n, cap;
    unsigned long long run;    /* ops performed so far; q[0] is op number run */
    struct fk_stream *next;
};

/* An event is a position in one stream's sequence of ops: synchronizing performs the ops before
 * it, and only those (a real GPU may have done more, never fewer). */
struct fk_event {
    struct fk_stream *s;       /* NULL: never recorded */
    unsigned long long at;
};
typedef struct fk_event *cudaEvent_t;

typedef struct fk_alloc {
    unsigned char *p;
    size_t n;
    int gpu;
    struct fk_alloc *next;
} fk_alloc;

typedef struct fk_reg {
    uintptr_t p;
    size_t n;
    struct fk_reg *next;
} fk_reg;

static struct {
    pthread_mutex_t lock;
    int init, gpus;
    size_t mem;
    size_t used[FK_MAX_GPUS];
    fk_alloc *allocs;
    fk_reg *regs;
    struct fk_stream *streams;
    /* counters reported at exit */
    unsigned long mallocs, frees, async_copies, async_unregistered, sync_copies, copies_2d,
        memsets, registers, register_errors, nonportable, bad_ptr, wrong_gpu, pending_at_unregister,
        max_queue, syncs, event_syncs, legacy_syncs, libraries, launches, converted;
    cudaError_t last_error;     /* cudaGetLastError's (one for the process: the tests' threads
                                   that fail are the ones that would clear it) */
    double bw;                  /* timed mode: bytes per second per copy engine; 0: off */
    int events_as_stream;       /* event waits wait for the whole stream (a baseline to compare) */
    double engine_free[FK_MAX_GPUS], busy, first_start, last_end, slept;
    char fail_name[64];         /* FAKE_CUDA_FAIL: entry point to fail ... */
    unsigned long fail_at, fail_calls, injected; /* ... at its fail_at-th call */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int t_gpu;

static void fk_init(void)
{
    if (g.init)
        return;
    const char *n = getenv("FAKE_CUDA_GPUS"), *m = getenv("FAKE_CUDA_MEM");
    g.gpus = n ? atoi(n) : 2;
    g.gpus = g.gpus < 0 ? 0 : g.gpus > FK_MAX_GPUS ? FK_MAX_GPUS : g.gpus;
    g.mem = m ? (size_t)strtoull(m, NULL, 10) : (size_t)1 << 30;
    const char *bw = getenv("FAKE_CUDA_GBPS");
    g.bw = bw ? strtod(bw, NULL) * 1e9 : 0.0;
    g.bw = g.bw > 0 ? g.bw : 0.0;
    g.events_as_stream = getenv("FAKE_CUDA_EVENTS_AS_STREAM") != NULL;
    const char *f = getenv("FAKE_CUDA_FAIL"), *colon = f ? strchr(f, ':') : NULL;
    if (colon && (size_t)(colon - f) < sizeof g.fail_name) {
        memcpy(g.fail_name, f, (size_t)(colon - f));
        g.fail_at = strtoul(colon + 1, NULL, 10);
    }
    g.init = 1;
}

static double fk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Timed mode: books the copy engine of gpu for o (memsets run in device memory: no link time). */
static void fk_book(fk_op *o, int gpu)
{
    if (g.bw <= 0)
        return;
    const double now = fk_now();
    const double start = g.engine_free[gpu] > now ? g.engine_free[gpu] : now;
    const double dur = o->src ? (double)(o->width * o->height) / g.bw : 0.0;
    o->done_at = start + dur;
    g.engine_free[gpu] = o->done_at;
    g.busy += dur;
    g.first_start = g.first_start > 0 && g.first_start < start ? g.first_start : start;
    g.last_end = o->done_at > g.last_end ? o->done_at : g.last_end;
}

/* Timed mode: sleeps until time t (the caller holds the lock, as a blocking CUDA call would hold
 * the host thread; only the loading thread calls in while reads run in other threads). */
static void fk_wait_until(double t)
{
    const double d = t - fk_now();
    if (g.bw <= 0 || d <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
    g.slept += d;
    nanosleep(&ts, NULL);
}

/* GPU whose allocation holds [p, p + n), or -1. */
static int fk_dev_gpu(const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p;
    for (const fk_alloc *x = g.allocs; x; x = x->next) {
        const uintptr_t b = (uintptr_t)x->p;
        if (a >= b && a - b <= x->n && n <= x->n - (a - b))
            return x->gpu;
    }
    return -1;
}

static int fk_registered(const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p;
    for (const fk_reg *r = g.regs; r; r = r->next) {
        if (a >= r->p && a - r->p <= r->n && n <= r->n - (a - r->p))
            return 1;
    }
    return 0;
}

/* Checks the device side of a copy of `span` bytes at dev, expected on GPU gpu. */
static cudaError_t fk_check_dev(const void *dev, size_t span, int gpu)
{
    const int owner = fk_dev_gpu(dev, span);
    if (owner < 0) {
        g.bad_ptr++;
        return FK_INVALID_VALUE;
    }
    if (owner != gpu)
        g.wrong_gpu++;
    return FK_OK;
}

static void fk_run(const fk_op *o)
{
    if (g.bw > 0)
        return;
    if (o->kernel) {
        for (size_t i = 0; i < o->n; i++) {
            unsigned short h;
            memcpy(&h, o->src + 2 * i, 2);
            const unsigned v = o->kernel->elem(h);
            memcpy(o->dst + 4 * i, &v, 4);
        }
        g.converted += o->n;
        return;
    }
    for (size_t r = 0; r < o->height; r++) {
        if (o->src)
            memcpy(o->dst + r * o->dpitch, o->src + r * o->spitch, o->width);
        else
            memset(o->dst + r * o->dpitch, o->value, o->width);
    }
}

/* Performs the first k queued ops of s. */
static void fk_run_first(struct fk_stream *s, size_t k)
{
    if (k == 0)
        return;   /* s->q may still be NULL */
    fk_wait_until(s->q[k - 1].done_at);
    for (size_t i = 0; i < k; i++)
        fk_run(&s->q[i]);
    memmove(s->q, s->q + k, (s->n - k) * sizeof *s->q);
    s->n -= k;
    s->run += k;
}

static void fk_drain(struct fk_stream *s)
{
    fk_run_first(s, s->n);
}

/* The legacy default stream waits for every blocking stream of its GPU. */
static void fk_drain_gpu(int gpu)
{
    for (struct fk_stream *s = g.streams; s; s = s->next) {
        if (s->gpu == gpu)
            fk_drain(s);
    }
}

static cudaError_t fk_enqueue(struct fk_stream *s, fk_op *o)
{
    fk_book(o, s->gpu);
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        fk_op *q = realloc(s->q, cap * sizeof *q);
        if (!q)
            return FK_MEMORY_ALLOCATION;
        s->q = q;
        s->cap = cap;
    }
    s->q[s->n++] = *o;
    g.max_queue = s->n > g.max_queue ? s->n : g.max_queue;
    return FK_OK;
}

/* Validates a 2-D host<->device copy; span of each side is (height-1)*pitch + width. */
static cudaError_t fk_check_copy(const fk_op *o, int kind, int gpu)
{
    if (!o->height || !o->width)
        return FK_OK;
    if (o->dpitch < o->width || o->spitch < o->width)
        return FK_INVALID_VALUE;
    const size_t dspan = (o->height - 1) * o->dpitch + o->width;
    const size_t sspan = (o->height - 1) * o->spitch + o->width;
    if (kind == FK_H2D)
        return fk_check_dev(o->dst, dspan, gpu);
    if (kind == FK_D2H)
        return fk_check_dev(o->src, sspan, gpu);
    return FK_INVALID_VALUE;
}

static cudaError_t fk_async(fk_op *o, int kind, struct fk_stream *s)
{
    if (!s)
        return FK_INVALID_HANDLE;
    cudaError_t e = fk_check_copy(o, kind, s->gpu);
    if (e != FK_OK)
        return e;
    g.async_copies++;
    if (kind == FK_H2D && !fk_registered(o->src, (o->height - 1) * o->spitch + o->width))
        g.async_unregistered++;
    return fk_enqueue(s, o);
}

static cudaError_t fk_sync(const fk_op *o, int kind)
{
    cudaError_t e = fk_check_copy(o, kind, t_gpu);
    if (e != FK_OK)
        return e;
    g.sync_copies++;
    fk_drain_gpu(t_gpu);
    fk_op timed = *o;
    fk_book(&timed, t_gpu);
    fk_wait_until(timed.done_at);
    fk_run(o);
    return FK_OK;
}

/* ---- the runtime API ------------------------------------------------------------------------- */

FK_EXPORT cudaError_t cudaGetDeviceCount(int *count);
FK_EXPORT cudaError_t cudaSetDevice(int gpu);
FK_EXPORT cudaError_t cudaMalloc(void **ptr, size_t n);
FK_EXPORT cudaError_t cudaFree(void *ptr);
FK_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
FK_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s);
FK_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s);
FK_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s);
FK_EXPORT cudaError_t cudaDeviceSynchronize(void);
FK_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
FK_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
FK_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, int kind);
FK_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, int kind, cudaStream_t s);
FK_EXPORT cudaError_t cudaMemsetAsync(void *ptr, int value, size_t n, cudaStream_t s);
FK_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t n, unsigned flags);
FK_EXPORT cudaError_t cudaHostUnregister(void *ptr);
FK_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
FK_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
FK_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e);
FK_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e);
FK_EXPORT const char *cudaGetErrorString(cudaError_t e);
FK_EXPORT cudaError_t cudaGetLastError(void);
typedef struct fk_dim3 {
    unsigned x, y, z;
} fk_dim3;
FK_EXPORT cudaError_t cudaLibraryLoadData(void **lib, const void *code, int *jit_options, void **jit_values,
                                          unsigned n_jit, int *lib_options, void **lib_values, unsigned n_lib);
FK_EXPORT cudaError_t cudaLibraryGetKernel(void **k, void *lib, const char *name);
FK_EXPORT cudaError_t cudaLaunchKernel(const void *func, fk_dim3 grid, fk_dim3 block, void **args,
                                       size_t shared_mem, cudaStream_t s);

/* 1 when this call of entry point name is the one FAKE_CUDA_FAIL picks. */
static int fk_inject(const char *name)
{
    if (!g.fail_at || strcmp(name, g.fail_name) != 0 || ++g.fail_calls != g.fail_at)
        return 0;
    g.injected++;
    return 1;
}

/* For tests that load the stand-in in their own process (test_load_faults): FAKE_CUDA_FAIL from
 * now on; name NULL stops injecting. Returns the failures injected since the previous call. Not
 * part of the CUDA runtime. */
FK_EXPORT unsigned long fake_cuda_fail(const char *name, unsigned long at);
unsigned long fake_cuda_fail(const char *name, unsigned long at)
{
    pthread_mutex_lock(&g.lock);
    fk_init();
    static unsigned long reported;
    const unsigned long n = g.injected - reported;
    reported = g.injected;
    snprintf(g.fail_name, sizeof g.fail_name, "%s", name ? name : "");
    g.fail_at = name ? at : 0;
    g.fail_calls = 0;
    pthread_mutex_unlock(&g.lock);
    return n;
}

/* Every entry point runs under the lock; __func__ is its name, for FAKE_CUDA_FAIL. */
#define FK_LOCKED(expr)                                                      \
    do {                                                                     \
        pthread_mutex_lock(&g.lock);                                         \
        fk_init();                                                           \
        cudaError_t fk_e_ = fk_inject(__func__) ? FK_LAUNCH_FAILURE : (expr); \
        if (fk_e_ != FK_OK)                                                  \
            g.last_error = fk_e_;                                            \
        pthread_mutex_unlock(&g.lock);                                       \
        return fk_e_;                                                        \
    } while (0)

static cudaError_t fk_device_count(int *count)
{
    *count = g.gpus;
    return g.gpus ? FK_OK : FK_NO_DEVICE;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    FK_LOCKED(fk_device_count(count));
}

static cudaError_t fk_set_device(int gpu)
{
    if (gpu < 0 || gpu >= g.gpus)
        return FK_INVALID_DEVICE;
    t_gpu = gpu;
    return FK_OK;
}

cudaError_t cudaSetDevice(int gpu)
{
    FK_LOCKED(fk_set_device(gpu));
}

static cudaError_t fk_malloc(void **ptr, size_t n)
{
    fk_alloc *a = calloc(1, sizeof *a);
    void *p = NULL;
    if (!a || n > g.mem - g.used[t_gpu] || posix_memalign(&p, 256, n ? n : 1) != 0) {
        free(a);
        return FK_MEMORY_ALLOCATION;
    }
    if (g.bw <= 0)
        memset(p, 0xA5, n); /* cudaMalloc'd memory is not zero: nor is the stand-in's */
    *a = (fk_alloc){.p = p, .n = n, .gpu = t_gpu, .next = g.allocs};
    g.allocs = a;
    g.used[t_gpu] += n;
    g.mallocs++;
    *ptr = p;
    return FK_OK;
}

cudaError_t cudaMalloc(void **ptr, size_t n)
{
    FK_LOCKED(fk_malloc(ptr, n));
}

static cudaError_t fk_free(void *ptr)
{
    if (!ptr)
        return FK_OK;
    for (fk_alloc **pp = &g.allocs; *pp; pp = &(*pp)->next) {
        fk_alloc *a = *pp;
        if (a->p != ptr)
            continue;
        fk_drain_gpu(a->gpu); /* cudaFree synchronizes the device */
        *pp = a->next;
        g.used[a->gpu] -= a->n;
        g.frees++;
        free(a->p);
        free(a);
        return FK_OK;
    }
    g.bad_ptr++;
    return FK_INVALID_VALUE;
}

cudaError_t cudaFree(void *ptr)
{
    FK_LOCKED(fk_free(ptr));
}

static cudaError_t fk_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    if (!g.gpus)
        return FK_NO_DEVICE;
    *free_bytes = g.mem - g.used[t_gpu];
    *total_bytes = g.mem;
    return FK_OK;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    FK_LOCKED(fk_mem_info(free_bytes, total_bytes));
}

static cudaError_t fk_stream_create(cudaStream_t *out)
{
    struct fk_stream *s = calloc(1, sizeof *s);
    if (!s)
        return FK_MEMORY_ALLOCATION;
    s->gpu = t_gpu;
    s->next = g.streams;
    g.streams = s;
    *out = s;
    return FK_OK;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    FK_LOCKED(fk_stream_create(s));
}

static cudaError_t fk_stream_destroy(cudaStream_t s)
{
    for (struct fk_stream **pp = &g.streams; *pp; pp = &(*pp)->next) {
        if (*pp != s)
            continue;
        fk_drain(s); /* pending work completes, as in CUDA */
        *pp = s->next;
        free(s->q);
        free(s);
        return FK_OK;
    }
    return FK_INVALID_HANDLE;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    FK_LOCKED(fk_stream_destroy(s));
}

static cudaError_t fk_stream_sync(cudaStream_t s)
{
    if (!s) {   /* the legacy default stream: waits for the GPU's blocking streams too */
        g.legacy_syncs++;
        fk_drain_gpu(t_gpu);
        return FK_OK;
    }
    g.syncs++;
    fk_drain(s);
    return FK_OK;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    FK_LOCKED(fk_stream_sync(s));
}

static cudaError_t fk_device_sync(void)
{
    fk_drain_gpu(t_gpu);
    return FK_OK;
}

cudaError_t cudaDeviceSynchronize(void)
{
    FK_LOCKED(fk_device_sync());
}

static fk_op fk_op_1d(void *dst, const void *src, size_t n)
{
    return (fk_op){.dst = dst, .src = src, .dpitch = n, .spitch = n, .width = n, .height = 1};
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    const fk_op o = fk_op_1d(dst, src, n);
    FK_LOCKED(fk_sync(&o, kind));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
    fk_op o = fk_op_1d(dst, src, n);
    FK_LOCKED(fk_async(&o, kind, s));
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, int kind)
{
    const fk_op o = {.dst = dst, .src = src, .dpitch = dpitch, .spitch = spitch, .width = width,
                     .height = height};
    pthread_mutex_lock(&g.lock);
    g.copies_2d++;
    pthread_mutex_unlock(&g.lock);
    FK_LOCKED(fk_sync(&o, kind));
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, int kind, cudaStream_t s)
{
    fk_op o = {.dst = dst, .src = src, .dpitch = dpitch, .spitch = spitch, .width = width,
                     .height = height};
    pthread_mutex_lock(&g.lock);
    g.copies_2d++;
    pthread_mutex_unlock(&g.lock);
    FK_LOCKED(fk_async(&o, kind, s));
}

static cudaError_t fk_memset_async(void *ptr, int value, size_t n, cudaStream_t s)
{
    if (!s)
        return FK_INVALID_HANDLE;
    cudaError_t e = fk_check_dev(ptr, n, s->gpu);
    if (e != FK_OK)
        return e;
    g.memsets++;
    fk_op o = {.dst = ptr, .dpitch = n, .width = n, .height = 1, .value = value};
    return fk_enqueue(s, &o);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t n, cudaStream_t s)
{
    FK_LOCKED(fk_memset_async(ptr, value, n, s));
}

static cudaError_t fk_register(void *ptr, size_t n, unsigned flags)
{
    const uintptr_t a = (uintptr_t)ptr;
    if (!ptr || !n)
        return FK_INVALID_VALUE;
    for (const fk_reg *r = g.regs; r; r = r->next) {
        if (a < r->p + r->n && r->p < a + n) {
            g.register_errors++;
            return FK_ALREADY_REGISTERED;
        }
    }
    fk_reg *r = calloc(1, sizeof *r);
    if (!r)
        return FK_MEMORY_ALLOCATION;
    *r = (fk_reg){.p = a, .n = n, .next = g.regs};
    g.regs = r;
    g.registers++;
    g.nonportable += !(flags & 1u);
    return FK_OK;
}

cudaError_t cudaHostRegister(void *ptr, size_t n, unsigned flags)
{
    FK_LOCKED(fk_register(ptr, n, flags));
}

/* Queued copies reading from the range would be reading unpinned (or freed) memory. */
static void fk_check_pending(const fk_reg *r)
{
    for (const struct fk_stream *s = g.streams; s; s = s->next) {
        for (size_t i = 0; i < s->n; i++) {
            const uintptr_t src = (uintptr_t)s->q[i].src;
            if (s->q[i].src && src >= r->p && src - r->p < r->n)
                g.pending_at_unregister++;
        }
    }
}

static cudaError_t fk_unregister(void *ptr)
{
    for (fk_reg **pp = &g.regs; *pp; pp = &(*pp)->next) {
        fk_reg *r = *pp;
        if (r->p != (uintptr_t)ptr)
            continue;
        fk_check_pending(r);
        *pp = r->next;
        free(r);
        return FK_OK;
    }
    g.register_errors++;
    return FK_NOT_REGISTERED;
}

cudaError_t cudaHostUnregister(void *ptr)
{
    FK_LOCKED(fk_unregister(ptr));
}

static cudaError_t fk_event_create(cudaEvent_t *e)
{
    *e = calloc(1, sizeof **e);
    return *e ? FK_OK : FK_MEMORY_ALLOCATION;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    FK_LOCKED(fk_event_create(e));
}

static int fk_stream_live(const struct fk_stream *s)
{
    for (const struct fk_stream *x = g.streams; x; x = x->next) {
        if (x == s)
            return 1;
    }
    return 0;
}

static cudaError_t fk_event_record(cudaEvent_t e, cudaStream_t s)
{
    if (!e || !s || !fk_stream_live(s))
        return FK_INVALID_HANDLE;
    e->s = s;
    e->at = s->run + s->n;
    return FK_OK;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    FK_LOCKED(fk_event_record(e, s));
}

static cudaError_t fk_event_sync(cudaEvent_t e)
{
    if (!e)
        return FK_INVALID_HANDLE;
    g.event_syncs++;
    if (e->s && fk_stream_live(e->s) && g.events_as_stream)
        fk_drain(e->s);
    else if (e->s && fk_stream_live(e->s) && e->at > e->s->run)
        fk_run_first(e->s, (size_t)(e->at - e->s->run));
    return FK_OK;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    FK_LOCKED(fk_event_sync(e));
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return FK_OK;
}

/* ---- kernels --------------------------------------------------------------------------------- */

static char fk_library;   /* the one library handle: its address */

/* FAKE_CUDA_NO_KERNELS: the driver refuses the PTX when it compiles it */
static int fk_refuses_ptx(void)
{
    const char *refuse = getenv("FAKE_CUDA_NO_KERNELS");
    return refuse && *refuse && strcmp(refuse, "0") != 0;
}

/* CUDA_MODULE_LOADING, the runtime's own variable: libraries are compiled at load when EAGER,
 * at their first launch otherwise (LAZY, CUDA 12.2's default) */
static int fk_lazy(void)
{
    const char *mode = getenv("CUDA_MODULE_LOADING");
    return !mode || strcmp(mode, "EAGER") != 0;
}

static cudaError_t fk_library_load(void **lib, const void *code)
{
    const char *ptx = code;
    if ((fk_refuses_ptx() && !fk_lazy()) || !ptx || strncmp(ptx, ".version ", 9) != 0)
        return FK_INVALID_PTX;
    for (size_t i = 0; i < sizeof fk_kernels / sizeof fk_kernels[0]; i++) {
        char entry[64];
        snprintf(entry, sizeof entry, ".entry %s(", fk_kernels[i].name);
        if (!strstr(ptx, entry))
            return FK_INVALID_PTX;   /* the PTX lacks a kernel the stand-in would run */
    }
    g.libraries++;
    *lib = &fk_library;
    return FK_OK;
}

cudaError_t cudaLibraryLoadData(void **lib, const void *code, int *jit_options, void **jit_values,
                                unsigned n_jit, int *lib_options, void **lib_values, unsigned n_lib)
{
    (void)jit_options, (void)jit_values, (void)n_jit, (void)lib_options, (void)lib_values, (void)n_lib;
    FK_LOCKED(fk_library_load(lib, code));
}

static cudaError_t fk_get_kernel(void **k, const void *lib, const char *name)
{
    if (lib != &fk_library)
        return FK_INVALID_HANDLE;
    for (size_t i = 0; i < sizeof fk_kernels / sizeof fk_kernels[0]; i++) {
        if (strcmp(name, fk_kernels[i].name) == 0) {
            *k = (void *)(uintptr_t)&fk_kernels[i];
            return FK_OK;
        }
    }
    return FK_SYMBOL_NOT_FOUND;
}

cudaError_t cudaLibraryGetKernel(void **k, void *lib, const char *name)
{
    FK_LOCKED(fk_get_kernel(k, lib, name));
}

/* args: (unsigned *dst, const unsigned short *src, unsigned long long n), cuda_kernels.cu's. */
static cudaError_t fk_launch(const void *func, fk_dim3 grid, fk_dim3 block, void **args, cudaStream_t s)
{
    const fk_kernel *k = NULL;
    for (size_t i = 0; i < sizeof fk_kernels / sizeof fk_kernels[0]; i++)
        k = func == (const void *)&fk_kernels[i] ? &fk_kernels[i] : k;
    if (!k || !s || !args)
        return FK_INVALID_HANDLE;
    if (!grid.x || !block.x || grid.y != 1 || block.y != 1 || block.x > 1024)
        return FK_INVALID_VALUE;
    if (fk_refuses_ptx() && fk_lazy())
        return FK_INVALID_PTX;
    unsigned char *dst = *(void **)args[0];
    const unsigned char *src = *(void **)args[1];
    const unsigned long long n = *(unsigned long long *)args[2];
    if (n > SIZE_MAX / 4)
        return FK_INVALID_VALUE;
    cudaError_t e = n ? fk_check_dev(dst, (size_t)n * 4, s->gpu) : FK_OK;
    if (e == FK_OK && n)
        e = fk_check_dev(src, (size_t)n * 2, s->gpu);
    if (e != FK_OK)
        return e;
    g.launches++;
    fk_op o = {.dst = dst, .src = src, .kernel = k, .n = (size_t)n};
    return fk_enqueue(s, &o);
}

cudaError_t cudaLaunchKernel(const void *func, fk_dim3 grid, fk_dim3 block, void **args,
                             size_t shared_mem, cudaStream_t s)
{
    (void)shared_mem;
    FK_LOCKED(fk_launch(func, grid, block, args, s));
}

/* Returns and clears the last error, as the runtime's per-thread one (not injected into). */
cudaError_t cudaGetLastError(void)
{
    pthread_mutex_lock(&g.lock);
    const cudaError_t e = g.last_error;
    g.last_error = FK_OK;
    pthread_mutex_unlock(&g.lock);
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case FK_OK: return "no error";
    case FK_INVALID_VALUE: return "invalid argument";
    case FK_MEMORY_ALLOCATION: return "out of memory";
    case FK_NO_DEVICE: return "no CUDA-capable device is detected";
    case FK_INVALID_DEVICE: return "invalid device ordinal";
    case FK_INVALID_HANDLE: return "invalid resource handle";
    case FK_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
    case FK_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
    case FK_LAUNCH_FAILURE: return "unspecified launch failure";
    case FK_INVALID_PTX: return "a PTX JIT compilation failed";
    case FK_SYMBOL_NOT_FOUND: return "named symbol not found";
    default: return "unknown error";
    }
}

/* ---- report ---------------------------------------------------------------------------------- */

__attribute__((destructor)) static void fk_report(void)
{
    const char *path = getenv("FAKE_CUDA_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    unsigned long live_allocs = 0, live_regs = 0, pending = 0;
    size_t live_bytes = 0;
    for (const fk_alloc *a = g.allocs; a; a = a->next, live_allocs++)
        live_bytes += a->n;
    for (const fk_reg *r = g.regs; r; r = r->next)
        live_regs++;
    for (const struct fk_stream *s = g.streams; s; s = s->next)
        pending += s->n;
    fprintf(f,
            "fake_cudart mallocs=%lu frees=%lu live_allocs=%lu live_bytes=%zu async=%lu "
            "async_unregistered=%lu sync=%lu copies_2d=%lu memsets=%lu syncs=%lu registers=%lu "
            "register_errors=%lu nonportable=%lu live_registers=%lu bad_ptr=%lu wrong_gpu=%lu "
            "pending_at_unregister=%lu pending_at_exit=%lu max_queue=%lu event_syncs=%lu "
            "injected=%lu engine_busy_s=%.6f engine_span_s=%.6f slept_s=%.6f legacy_syncs=%lu "
            "last_error=%d libraries=%lu launches=%lu converted=%lu\n",
            g.mallocs, g.frees, live_allocs, live_bytes, g.async_copies, g.async_unregistered,
            g.sync_copies, g.copies_2d, g.memsets, g.syncs, g.registers, g.register_errors,
            g.nonportable, live_regs, g.bad_ptr, g.wrong_gpu, g.pending_at_unregister, pending,
            g.max_queue, g.event_syncs, g.injected, g.busy, g.last_end > g.first_start ? g.last_end - g.first_start : 0.0,
            g.slept, g.legacy_syncs, (int)g.last_error, g.libraries, g.launches, g.converted);
    fclose(f);
}
