/* dev_cuda.c - the "cuda" device backend. Always compiled: the CUDA runtime (libcudart) is loaded
 * at run time with dlopen (dev_cuda_rt.c, which also declares the dozen entry points used), so
 * shardload has no build-time CUDA dependency and one binary serves hosts with and without GPUs.
 *
 * Mesh device d lives on GPU o->gpus[d] when a GPU list is given, else on GPU d % count. Each mesh
 * device has one cudaMalloc of exactly the plan's bytes and its own stream.
 *
 * Copies and host memory: copies from the engine's staging slots, which the engine pins once
 * through pin() (cudaHostRegister, portable, refcounted per process because every mesh device pins
 * the same slots), are cudaMemcpyAsync on the device's stream and may still be reading the slot
 * when write() returns: before it refills a slot the engine waits for that slot's copies, with
 * wait_mark() (an event recorded by mark() after the slot's copies) or fence() (the whole stream).
 * (The engine's conversion pieces live in the same pinned block, each with its own mark.) pin,
 * unpin, fence, mark, wait_mark and write2d are the backend's async part (device.h). Copies
 * from any other host memory (dummy buffers, the engine's bounce buffer when its budget is too
 * small for a ring) are synchronous cudaMemcpy, which returns once the source has been consumed,
 * so callers may reuse it at once. Our streams are ordinary (blocking) streams, so such a
 * cudaMemcpy on the legacy default stream is also ordered after the stream's pending copies. */
#include "device/cuda_kernels.h"
#include "device/dev_cuda_rt.h"
#include "device/device.h"

#include "common/sl_bytes.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_MAX_PINS 16

/* One pinned host range, shared by every mesh device that pinned it. */
typedef struct cu_pin {
    void *ptr;
    size_t len;
    int refs;
    int registered;    /* 0: cudaHostRegister failed; copies from it are synchronous */
    char why[128];     /* then its error */
} cu_pin;

/* Process state: the pins every mesh device shares. */
static struct {
    pthread_mutex_t lock;          /* guards pins */
    cu_pin pins[CU_MAX_PINS];
} g_cu = {.lock = PTHREAD_MUTEX_INITIALIZER};

typedef struct cuda_dev {
    int32_t index;
    int gpu;
    cudaStream_t stream;
    unsigned char *base;           /* NULL when bytes == 0 */
    uint64_t bytes;
    unsigned char *dest;           /* the caller's device memory (opts.dest): never freed here */
    sl_device_blocks blocks;       /* or the caller's block per parameter (opts.param_dest) */
    uint64_t free_before, free_after;
    void *pin_ptr;                 /* the range this instance holds a pin reference on, or NULL */
    size_t pin_len;
    int pin_async;                 /* the range is registered: copies from it may be async */
    char staging_mem[160];         /* how the staging reached the GPU: "page-locked" or "plain (why)" */
    cudaEvent_t marks[SL_DEVICE_MAX_MARKS]; /* created on first use; NULL: never marked */
    /* conversions on the GPU (opts.cuda_convert): the 16-bit bytes go to scratch, a kernel writes
     * the f32 values where they belong; scratch lives from the first converts() (the engine asks
     * while it sizes its staging) to the unpin */
    int convert_opt;               /* opts.cuda_convert */
    int convert_state;             /* 0: not tried yet, 1: ready, -1: the host converts (why) */
    cudaKernel_t k_bf16, k_f16;
    unsigned char *scratch;
    char convert_why[256];
    uint64_t conv_elems, conv_kernels;
    char routes[320];              /* sl_model_device_routes: where the conversions ran, at the unpin */
} cuda_dev;

/* ---- helpers -------------------------------------------------------------------------------- */

/* A failed call's error, taken off the runtime's per-thread "last error": the library reports it
 * (or tolerates it), and a process that shares the runtime (PyTorch) would otherwise see it at
 * its own next cudaGetLastError and raise a CUDA error of ours. */
static void cu_forget(void)
{
    if (sl_cuda_api.GetLastError)
        (void)sl_cuda_api.GetLastError();
}

static sl_status cu_fail(const cuda_dev *d, sl_err *err, const char *what, cudaError_t e)
{
    cu_forget();
    const char *s = sl_cuda_api.GetErrorString ? sl_cuda_api.GetErrorString(e) : NULL;
    return sl_err_set(err, SL_E_DEVICE, "cuda device %d (GPU %d): %s failed: %s (error %d)",
                      d->index, d->gpu, what, s ? s : "unknown error", e);
}

#define CU_CALL(d, err, what, call)                   \
    do {                                              \
        cudaError_t cu_e_ = (call);                   \
        if (cu_e_ != 0)                               \
            return cu_fail((d), (err), (what), cu_e_); \
    } while (0)

/* The current GPU is per host thread, and the dummy fill writes from worker threads: every op
 * selects its GPU first. */
static sl_status cu_select(const cuda_dev *d, sl_err *err)
{
    CU_CALL(d, err, "cudaSetDevice", sl_cuda_api.SetDevice(d->gpu));
    return SL_OK;
}

static sl_status cu_check_range(const cuda_dev *d, uint64_t off, uint64_t n, sl_err *err)
{
    return sl_device_check_range("cuda", d->index, d->bytes, off, n, err);
}

/* 1 when [src, src + n) lies inside this device's registered range: the copy may be async. */
static int cu_pinned(const cuda_dev *d, const void *src, size_t n)
{
    const uintptr_t p = (uintptr_t)src, b = (uintptr_t)d->pin_ptr;
    return d->pin_async && p >= b && p - b <= d->pin_len && n <= d->pin_len - (p - b);
}

/* ---- ops ------------------------------------------------------------------------------------ */

static sl_status cuda_alloc(void *ctx, uint64_t bytes, sl_err *err)
{
    cuda_dev *d = ctx;
    size_t fr = 0, total = 0;
    void *p = NULL;
    if (bytes > SIZE_MAX)
        return sl_err_set(err, SL_E_NOMEM, "cuda device %d: %llu bytes do not fit in size_t",
                          d->index, (unsigned long long)bytes);
    SL_TRY(cu_select(d, err));
    CU_CALL(d, err, "cudaMemGetInfo", sl_cuda_api.MemGetInfo(&fr, &total));
    d->free_before = d->free_after = fr;
    if (bytes == 0)
        return SL_OK;
    if (d->dest || d->blocks.n) { /* the caller's memory: no base at all with blocks */
        d->base = d->dest;
        d->bytes = bytes;
        return SL_OK;
    }
    cudaError_t e = sl_cuda_api.Malloc(&p, (size_t)bytes);
    if (e != 0) {
        cu_forget();
        return sl_err_set(err, SL_E_NOMEM, "cuda device %d (GPU %d): cudaMalloc of %llu bytes failed: %s "
                          "(%llu bytes free)", d->index, d->gpu, (unsigned long long)bytes,
                          sl_cuda_api.GetErrorString(e), (unsigned long long)fr);
    }
    d->base = p;
    d->bytes = bytes;
    CU_CALL(d, err, "cudaMemGetInfo", sl_cuda_api.MemGetInfo(&fr, &total));
    d->free_after = fr;
    return SL_OK;
}

/* Device address of byte off, and in *avail how many bytes follow it contiguously (to the end
 * of the caller's block that holds it, or of the allocation). */
static unsigned char *cu_addr(const cuda_dev *d, uint64_t off, uint64_t *avail)
{
    if (d->blocks.n)
        return sl_device_blocks_at(&d->blocks, off, avail);
    *avail = d->bytes - off;
    return d->base + off;
}

static sl_status cu_write_1d(cuda_dev *d, unsigned char *dst, const void *src, size_t n, int async,
                             sl_err *err)
{
    if (async)
        CU_CALL(d, err, "cudaMemcpyAsync",
                sl_cuda_api.MemcpyAsync(dst, src, n, CU_MEMCPY_H2D, d->stream));
    else
        CU_CALL(d, err, "cudaMemcpy", sl_cuda_api.Memcpy(dst, src, n, CU_MEMCPY_H2D));
    return SL_OK;
}

static sl_status cuda_write(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err)
{
    cuda_dev *d = ctx;
    SL_TRY(cu_check_range(d, off, n, err));
    if (n == 0)
        return SL_OK;
    SL_TRY(cu_select(d, err));
    const int async = cu_pinned(d, src, n);
    for (const unsigned char *s = src; n;) { /* one copy per block it spans */
        uint64_t avail = 0;
        unsigned char *dst = cu_addr(d, off, &avail);
        const size_t m = (size_t)sl_min_u64(n, avail);
        SL_TRY(cu_write_1d(d, dst, s, m, async, err));
        off += m;
        s += m;
        n -= m;
    }
    return SL_OK;
}

/* A 2-D copy that straddles the caller's blocks goes row by row (never the case for the engine's
 * copies, which stay inside one parameter). */
static sl_status cu_write2d_rows(cuda_dev *d, uint64_t dst_off, uint64_t dst_pitch,
                                 const unsigned char *src, size_t src_pitch, size_t width,
                                 size_t rows, sl_err *err)
{
    for (size_t r = 0; r < rows; r++)
        SL_TRY(cuda_write(d, dst_off + r * dst_pitch, src + r * src_pitch, width, err));
    return SL_OK;
}

static sl_status cuda_write2d(void *ctx, uint64_t dst_off, uint64_t dst_pitch, const void *src,
                              size_t src_pitch, size_t width, size_t rows, sl_err *err)
{
    cuda_dev *d = ctx;
    if (rows == 0 || width == 0)
        return SL_OK;
    /* Pitches are at least the width and rows fit in the allocation: no overflow below. */
    SL_CHECK(dst_pitch >= width && src_pitch >= width && width <= d->bytes &&
                 dst_pitch <= d->bytes && rows - 1 <= (d->bytes - width) / dst_pitch,
             err, SL_E_INVALID_ARG, "cuda device %d: 2-D copy of %zu rows x %zu bytes (pitch %llu) "
             "does not fit", d->index, rows, width, (unsigned long long)dst_pitch);
    const uint64_t span = (rows - 1) * dst_pitch + width;
    SL_TRY(cu_check_range(d, dst_off, span, err));
    SL_TRY(cu_select(d, err));
    uint64_t avail = 0;
    unsigned char *dst = cu_addr(d, dst_off, &avail);
    if (avail < span)
        return cu_write2d_rows(d, dst_off, dst_pitch, src, src_pitch, width, rows, err);
    const size_t src_span = (rows - 1) * src_pitch + width;
    if (cu_pinned(d, src, src_span))
        CU_CALL(d, err, "cudaMemcpy2DAsync",
                sl_cuda_api.Memcpy2DAsync(dst, (size_t)dst_pitch, src, src_pitch, width, rows,
                                       CU_MEMCPY_H2D, d->stream));
    else
        CU_CALL(d, err, "cudaMemcpy2D",
                sl_cuda_api.Memcpy2D(dst, (size_t)dst_pitch, src, src_pitch, width, rows,
                                  CU_MEMCPY_H2D));
    return SL_OK;
}

/* Synchronous: zeroing is rare (padding) and callers (the dummy fill) do not fence. */
static sl_status cuda_zero(void *ctx, uint64_t off, uint64_t n, sl_err *err)
{
    cuda_dev *d = ctx;
    SL_TRY(cu_check_range(d, off, n, err));
    if (n == 0)
        return SL_OK;
    SL_TRY(cu_select(d, err));
    while (n) {
        uint64_t avail = 0;
        unsigned char *dst = cu_addr(d, off, &avail);
        const uint64_t m = sl_min_u64(n, avail);
        CU_CALL(d, err, "cudaMemsetAsync", sl_cuda_api.MemsetAsync(dst, 0, (size_t)m, d->stream));
        off += m;
        n -= m;
    }
    CU_CALL(d, err, "cudaStreamSynchronize", sl_cuda_api.StreamSynchronize(d->stream));
    return SL_OK;
}

/* The stream is drained first, so a read sees every write issued before it. */
static sl_status cuda_read(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err)
{
    cuda_dev *d = ctx;
    SL_TRY(cu_check_range(d, off, n, err));
    if (n == 0)
        return SL_OK;
    SL_TRY(cu_select(d, err));
    CU_CALL(d, err, "cudaStreamSynchronize", sl_cuda_api.StreamSynchronize(d->stream));
    for (unsigned char *h = dst; n;) {
        uint64_t avail = 0;
        const unsigned char *src = cu_addr(d, off, &avail);
        const size_t m = (size_t)sl_min_u64(n, avail);
        CU_CALL(d, err, "cudaMemcpy", sl_cuda_api.Memcpy(h, src, m, CU_MEMCPY_D2H));
        off += m;
        h += m;
        n -= m;
    }
    return SL_OK;
}

/* Everything queued is done: the stream's copies, and the synchronous cudaMemcpy ones (from
 * pageable memory: unpinned staging, the bounce buffer, dummy fills) on the legacy default
 * stream, which may return once the source is in the driver's buffer, before the DMA lands. */
static sl_status cuda_fence(void *ctx, sl_err *err)
{
    cuda_dev *d = ctx;
    SL_TRY(cu_select(d, err));
    CU_CALL(d, err, "cudaStreamSynchronize", sl_cuda_api.StreamSynchronize(d->stream));
    CU_CALL(d, err, "cudaStreamSynchronize (the legacy default stream)", sl_cuda_api.StreamSynchronize(NULL));
    return SL_OK;
}

static sl_status cuda_mark(void *ctx, unsigned tag, sl_err *err)
{
    cuda_dev *d = ctx;
    SL_CHECK(tag < SL_DEVICE_MAX_MARKS, err, SL_E_INVALID_ARG, "cuda device %d: mark %u out of range",
             d->index, tag);
    SL_TRY(cu_select(d, err));
    if (!d->marks[tag])
        CU_CALL(d, err, "cudaEventCreateWithFlags",
                sl_cuda_api.EventCreateWithFlags(&d->marks[tag], CU_EVENT_DISABLE_TIMING));
    CU_CALL(d, err, "cudaEventRecord", sl_cuda_api.EventRecord(d->marks[tag], d->stream));
    return SL_OK;
}

static sl_status cuda_wait_mark(void *ctx, unsigned tag, sl_err *err)
{
    cuda_dev *d = ctx;
    if (tag >= SL_DEVICE_MAX_MARKS || !d->marks[tag])
        return SL_OK;
    SL_TRY(cu_select(d, err));
    CU_CALL(d, err, "cudaEventSynchronize", sl_cuda_api.EventSynchronize(d->marks[tag]));
    return SL_OK;
}

/* ---- conversions on the GPU ------------------------------------------------------------------ */

#define CU_SCRATCH ((size_t)8 << 20)   /* 16-bit source bytes per kernel */
#define CU_THREADS 256u
#define CU_MAX_BLOCKS 4096u

static void cu_scratch_free(cuda_dev *d)
{
    if (d->scratch)
        (void)sl_cuda_api.Free(d->scratch);
    d->scratch = NULL;
    if (d->convert_state > 0)
        d->convert_state = 0;   /* set up again if another load of this device converts */
}

/* Launches each kernel on no elements. CUDA 12.2 and later load a library into a context lazily,
 * at its first launch (CUDA_MODULE_LOADING=LAZY, the default), so a driver that refuses the PTX
 * (one older than the PTX's ISA) says so there, not at cudaLibraryLoadData. Finding out before
 * any byte relies on a kernel leaves the host to convert instead; a refusal is an error of the
 * launch call itself, not a fault of the context. */
static int cu_convert_probe(cuda_dev *d)
{
    const cudaKernel_t ks[] = {d->k_bf16, d->k_f16};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        unsigned long long n = 0;
        void *dst_arg = d->scratch, *src_arg = d->scratch;
        void *args[] = {&dst_arg, &src_arg, &n};
        const cu_dim3 one = {1, 1, 1};
        const cudaError_t e = sl_cuda_api.LaunchKernel((const void *)ks[i], one, one, args, 0, d->stream);
        if (e != 0) {
            cu_forget();
            snprintf(d->convert_why, sizeof d->convert_why, "the driver refused the conversion kernels: "
                     "cudaLaunchKernel: %s", sl_cuda_api.GetErrorString(e));
            return 0;
        }
    }
    return 1;
}

/* The kernels and the scratch, once; a failure leaves the conversions to the host, with why. */
static int cu_convert_setup(cuda_dev *d)
{
    if (d->convert_state)
        return d->convert_state > 0;
    d->convert_state = -1;
    if (!d->convert_opt) {
        snprintf(d->convert_why, sizeof d->convert_why, "off (opts.cuda_convert)");
        return 0;
    }
    sl_err e = {0};
    void *p = NULL;
    if (sl_cuda_kernel(SLK_BF16_TO_F32, &d->k_bf16, d->convert_why, sizeof d->convert_why) != 0 ||
        sl_cuda_kernel(SLK_F16_TO_F32, &d->k_f16, d->convert_why, sizeof d->convert_why) != 0)
        return 0;
    if (cu_select(d, &e) != SL_OK || sl_cuda_api.Malloc(&p, CU_SCRATCH) != 0) {
        cu_forget();
        snprintf(d->convert_why, sizeof d->convert_why, "no %zu bytes of GPU scratch: %s", CU_SCRATCH,
                 e.msg ? e.msg : "cudaMalloc failed");
        sl_err_clear(&e);
        return 0;
    }
    d->scratch = p;
    if (!cu_convert_probe(d)) {
        cu_scratch_free(d);
        return 0;
    }
    d->convert_state = 1;
    snprintf(d->convert_why, sizeof d->convert_why, "on the GPU");
    return 1;
}

/* What sl_model_device_routes says, with opts.cuda_convert: where this load's conversions ran. */
static void cu_convert_report(cuda_dev *d)
{
    if (!d->convert_opt)
        return;
    if (d->conv_kernels)
        snprintf(d->routes, sizeof d->routes, "converted on the GPU: %llu elements, %llu kernels",
                 (unsigned long long)d->conv_elems, (unsigned long long)d->conv_kernels);
    else if (d->convert_state < 0)
        snprintf(d->routes, sizeof d->routes, "converted on the host: %s", d->convert_why);
    else
        snprintf(d->routes, sizeof d->routes, "nothing converted on the GPU");
}

/* The kernels store whole 32-bit words: a destination off 4-byte alignment (a caller's block at
 * an odd address) is converted on the host. */
static int cuda_converts(void *ctx, uint64_t off, sl_dtype dst_dt, sl_dtype src_dt)
{
    cuda_dev *d = ctx;
    uint64_t avail = 0;
    if (dst_dt != SL_DTYPE_F32 || (src_dt != SL_DTYPE_BF16 && src_dt != SL_DTYPE_F16) ||
        off >= d->bytes || (uintptr_t)cu_addr(d, off, &avail) % 4 != 0)
        return 0;
    return cu_convert_setup(d);
}

/* m elements (m * 2 bytes at most CU_SCRATCH) into scratch, then the kernel into dst; in stream
 * order, so the next piece's copy into scratch waits for this kernel. */
static sl_status cu_convert_piece(cuda_dev *d, unsigned char *dst, const unsigned char *src,
                                  cudaKernel_t k, size_t m, int async, sl_err *err)
{
    SL_TRY(cu_write_1d(d, d->scratch, src, m * 2, async, err));
    unsigned long long n = m;
    void *dst_arg = dst, *src_arg = d->scratch;
    void *args[] = {&dst_arg, &src_arg, &n};
    const size_t blocks = (m + CU_THREADS - 1) / CU_THREADS;
    const cu_dim3 grid = {(unsigned)(blocks < CU_MAX_BLOCKS ? blocks : CU_MAX_BLOCKS), 1, 1};
    const cu_dim3 block = {CU_THREADS, 1, 1};
    CU_CALL(d, err, "cudaLaunchKernel (a conversion)",
            sl_cuda_api.LaunchKernel((const void *)k, grid, block, args, 0, d->stream));
    d->conv_elems += m;
    d->conv_kernels++;
    return SL_OK;
}

static sl_status cuda_write_convert(void *ctx, uint64_t off, sl_dtype dst_dt, const void *src,
                                    sl_dtype src_dt, size_t n, sl_err *err)
{
    cuda_dev *d = ctx;
    if (n == 0)
        return SL_OK;
    SL_CHECK(cuda_converts(d, off, dst_dt, src_dt), err, SL_E_UNSUPPORTED, "cuda device %d: %s -> %s on the "
             "GPU: %s", d->index, sl_dtype_name(src_dt), sl_dtype_name(dst_dt), d->convert_why);
    SL_CHECK(n <= SIZE_MAX / 4, err, SL_E_INVALID_ARG, "cuda device %d: %zu elements", d->index, n);
    SL_TRY(cu_check_range(d, off, (uint64_t)n * 4, err));
    SL_TRY(cu_select(d, err));
    const int async = cu_pinned(d, src, n * 2);
    const cudaKernel_t k = src_dt == SL_DTYPE_BF16 ? d->k_bf16 : d->k_f16;
    for (const unsigned char *s = src; n;) { /* pieces of scratch, within one block each */
        uint64_t avail = 0;
        unsigned char *dst = cu_addr(d, off, &avail);
        const size_t m = (size_t)sl_min_u64(sl_min_u64(n, CU_SCRATCH / 2), avail / 4);
        SL_CHECK(m > 0, err, SL_E_INVALID_ARG, "cuda device %d: a converted element straddles the "
                 "caller's blocks at offset %llu", d->index, (unsigned long long)off);
        SL_TRY(cu_convert_piece(d, dst, s, k, m, async, err));
        off += (uint64_t)m * 4;
        s += m * 2;
        n -= m;
    }
    return SL_OK;
}

/* Caller holds g_cu.lock. Returns the entry for ptr, or a free one (refs == 0), or NULL. */
static cu_pin *cu_pin_slot(void *ptr)
{
    cu_pin *spare = NULL;
    for (int i = 0; i < CU_MAX_PINS; i++) {
        if (g_cu.pins[i].refs && g_cu.pins[i].ptr == ptr)
            return &g_cu.pins[i];
        if (!g_cu.pins[i].refs && !spare)
            spare = &g_cu.pins[i];
    }
    return spare;
}

/* A range that cannot be registered (no slot, or cudaHostRegister refuses: locked-memory limits,
 * some containers) is still usable: copies from it are then synchronous, only slower. */
static sl_status cuda_pin(void *ctx, void *ptr, size_t len, sl_err *err)
{
    cuda_dev *d = ctx;
    if (d->pin_ptr || !ptr || !len)
        return SL_OK;
    SL_TRY(cu_select(d, err));
    pthread_mutex_lock(&g_cu.lock);
    cu_pin *p = cu_pin_slot(ptr);
    if (p && p->refs == 0) {
        const cudaError_t e_reg = sl_cuda_api.HostRegister(ptr, len, CU_HOST_REGISTER_PORTABLE);
        *p = (cu_pin){.ptr = ptr, .len = len, .registered = e_reg == 0};
        if (!p->registered) {
            snprintf(p->why, sizeof p->why, "cudaHostRegister: %s", sl_cuda_api.GetErrorString(e_reg));
            cu_forget();   /* tolerated: copies are synchronous then */
        }
    }
    if (p && p->len == len) {
        p->refs++;
        d->pin_ptr = ptr;
        d->pin_len = len;
        d->pin_async = p->registered;
        snprintf(d->staging_mem, sizeof d->staging_mem, p->registered ? "page-locked" : "plain (%s)",
                 p->why);
    }
    pthread_mutex_unlock(&g_cu.lock);
    return SL_OK;
}

/* Copies may still read the range: drain the stream before the range can be unregistered. */
static void cuda_unpin(void *ctx, void *ptr)
{
    cuda_dev *d = ctx;
    sl_err ignored = {0};
    if (!ptr || d->pin_ptr != ptr)
        return;
    (void)cuda_fence(d, &ignored);
    sl_err_clear(&ignored);
    cu_convert_report(d);
    cu_scratch_free(d);   /* the load is over: the GPU holds the shard's bytes and no more */
    pthread_mutex_lock(&g_cu.lock);
    cu_pin *p = cu_pin_slot(ptr);
    if (p && p->refs && p->ptr == ptr && --p->refs == 0 && p->registered)
        (void)sl_cuda_api.HostUnregister(ptr);
    pthread_mutex_unlock(&g_cu.lock);
    d->pin_ptr = NULL;
    d->pin_len = 0;
    d->pin_async = 0;
}

/* How the staging reached the GPU (sl_model_device_staging): a slow load on a real GPU whose
 * staging could not be page-locked (locked-memory limits) is told apart from a slow link. */
static void *cuda_handle(const void *ctx, sl_device_handle_kind what, int64_t i)
{
    const cuda_dev *d = ctx;
    (void)i;
    if (what == SL_DEVICE_HANDLE_ROUTES)
        return d->routes[0] ? (void *)(uintptr_t)d->routes : NULL;
    return what == SL_DEVICE_HANDLE_STAGING && d->staging_mem[0] ? (void *)(uintptr_t)d->staging_mem : NULL;
}

static void *cuda_device_ptr(void *ctx)
{
    return ((cuda_dev *)ctx)->base;
}

static int cuda_gpu(const void *ctx)
{
    return ((const cuda_dev *)ctx)->gpu;
}

static uint64_t cuda_allocated(const void *ctx)
{
    return ((const cuda_dev *)ctx)->bytes;
}

static void cuda_mem_info(const void *ctx, uint64_t *free_before, uint64_t *free_after)
{
    const cuda_dev *d = ctx;
    *free_before = d->free_before;
    *free_after = d->free_after;
}

static void cuda_free(void *ctx)
{
    cuda_dev *d = ctx;
    if (!d)
        return;
    if (d->pin_ptr)
        cuda_unpin(d, d->pin_ptr);
    /* freed whichever GPU is current: the runtime finds a pointer's, stream's and event's own */
    (void)sl_cuda_api.SetDevice(d->gpu);
    if (d->stream)
        (void)sl_cuda_api.StreamSynchronize(d->stream);
    for (unsigned i = 0; i < SL_DEVICE_MAX_MARKS; i++) {
        if (d->marks[i])
            (void)sl_cuda_api.EventDestroy(d->marks[i]);
    }
    if (d->base && !d->dest)
        (void)sl_cuda_api.Free(d->base);
    cu_scratch_free(d);
    if (d->stream)
        (void)sl_cuda_api.StreamDestroy(d->stream);
    cu_forget();
    sl_device_blocks_free(&d->blocks);
    free(d);
}

static const sl_device_async_ops cuda_async_ops = {
    .pin = cuda_pin,
    .unpin = cuda_unpin,
    .fence = cuda_fence,
    .mark = cuda_mark,
    .wait_mark = cuda_wait_mark,
    .write2d = cuda_write2d,
};

static const sl_device_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .write = cuda_write,
    .zero = cuda_zero,
    .read = cuda_read,
    .allocated = cuda_allocated,
    .free = cuda_free,
    /* no host_ptr: device memory is not host memory (the default) */
    .device_ptr = cuda_device_ptr,
    .gpu = cuda_gpu,
    .mem_info = cuda_mem_info,
    .handle = cuda_handle,
    .converts = cuda_converts,
    .write_convert = cuda_write_convert,
    .async = &cuda_async_ops,
};

/* ---- open ----------------------------------------------------------------------------------- */

static sl_status cu_pick_gpu(int32_t index, const sl_load_opts *o, int count, int *gpu, sl_err *err)
{
    if (!o || !o->gpus || o->n_gpus <= 0) {
        *gpu = (int)(index % count);
        return SL_OK;
    }
    SL_CHECK(index < o->n_gpus, err, SL_E_INVALID_ARG,
             "--gpus lists %d GPUs but the mesh has at least %d devices", (int)o->n_gpus,
             (int)index + 1);
    SL_CHECK(o->gpus[index] >= 0 && o->gpus[index] < count, err, SL_E_INVALID_ARG,
             "--gpus: device %d maps to GPU %d, but this host has %d GPUs (0..%d)", (int)index,
             (int)o->gpus[index], count, count - 1);
    *gpu = (int)o->gpus[index];
    return SL_OK;
}

static sl_status cu_gpu_count(int *count, sl_err *err)
{
    cudaError_t e = sl_cuda_api.GetDeviceCount(count);
    if (e != 0) {
        cu_forget();
        return sl_err_set(err, SL_E_DEVICE, "device 'cuda': no CUDA GPU available (cudaGetDeviceCount: "
                          "%s); use --device cpu", sl_cuda_api.GetErrorString(e));
    }
    SL_CHECK(*count > 0, err, SL_E_DEVICE, "device 'cuda': no CUDA GPU available (0 devices); use "
             "--device cpu");
    return SL_OK;
}

int32_t sl_cuda_gpu_count(void)
{
    sl_err e = {0};
    int n = 0;
    if (sl_cuda_rt_load(&e) != SL_OK) {
        n = 0;
    } else if (sl_cuda_api.GetDeviceCount(&n) != 0 || n < 0) {
        n = 0;
        cu_forget();
    }
    sl_err_clear(&e);
    return n;
}

sl_status sl_device_cuda_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                              sl_device *out, sl_err *err)
{
    int count = 0, gpu = 0;
    SL_TRY(sl_cuda_rt_load(err));
    SL_TRY(cu_gpu_count(&count, err));
    SL_TRY(cu_pick_gpu(index, o, count, &gpu, err));
    cuda_dev *d = calloc(1, sizeof *d);
    if (!d)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    d->index = index;
    d->gpu = gpu;
    d->dest = sl_device_dest(o, index);
    d->convert_opt = o && o->cuda_convert > 0;
    sl_status st = sl_device_blocks_copy(&d->blocks, segs, err);
    if (st == SL_OK)
        st = cu_select(d, err);
    cudaError_t e = st == SL_OK ? sl_cuda_api.StreamCreate(&d->stream) : 0;
    if (st == SL_OK && e != 0)
        st = cu_fail(d, err, "cudaStreamCreate", e);
    if (st != SL_OK) {
        sl_device_blocks_free(&d->blocks);
        free(d);
        return st;
    }
    out->ops = &cuda_ops;
    out->ctx = d;
    return SL_OK;
}
