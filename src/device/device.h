/* device.h - the device backends the loading engine places shards into. A backend is an ops table
 * plus a void *ctx (STYLE.md rule 11), one instance per mesh device, chosen by name: "cpu"
 * (dev_cpu.c) or "cuda" (dev_cuda.c, CUDA runtime loaded at run time). The engine only ever asks
 * a backend to allocate the plan's exact bytes, copy host bytes in, zero a range, copy bytes back
 * out and free.
 *
 * Every fallible op returns an sl_status and writes its message into the sl_err passed to it, so
 * that the executor can put it on the model handle. */
#ifndef SL_DEVICE_H
#define SL_DEVICE_H

#include "shardload.h"

#include "sl_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl_device_ops {
    const char *name;
    /* Allocates exactly `bytes` (0 is allowed) for this device; called once. */
    sl_status (*alloc)(void *ctx, uint64_t bytes, sl_err *err);
    /* Copies n host bytes to device offset off. Concurrent calls on disjoint ranges are allowed. */
    sl_status (*write)(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err);
    /* Writes n zero bytes at device offset off. */
    sl_status (*zero)(void *ctx, uint64_t off, uint64_t n, sl_err *err);
    /* Copies n device bytes at off into host memory dst. */
    sl_status (*read)(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err);
    /* Faults in the allocation ahead of the writes, from a helper thread, without changing its
     * bytes (may be NULL: nothing to do). Returns when done or when *stop becomes nonzero. */
    void (*prefault)(void *ctx, const volatile int *stop);
    /* Host address of device offset 0 when the memory is host memory; NULL otherwise. */
    void *(*host_ptr)(void *ctx);
    uint64_t (*allocated)(const void *ctx);
    /* Frees the allocation and ctx. Accepts NULL. */
    void (*free)(void *ctx);

    /* Optional ops (NULL for host backends). A backend whose copies run asynchronously (cuda)
     * provides them so that the engine can overlap device copies with reads:
     * pin: makes host range [ptr, ptr + len) fast to copy from (page-locked). Writes whose source
     *   lies in a pinned range may complete after write() returns, until the next fence; writes
     *   from any other memory are complete on return. Several instances may pin the same range.
     * unpin: fences, then releases this instance's pin of the range that starts at ptr.
     * fence: returns once every copy issued so far has finished reading its host source.
     * write2d: rows copies of width bytes, from src + r * src_pitch to dst_off + r * dst_pitch.
     * mem_info: device free memory (bytes) right before and right after alloc().
     * device_ptr: address of offset 0 in the device's own address space (the CUDA device address),
     *   for callers that hand the weights to a framework; gpu: the GPU ordinal.
     * mark: remembers, under tag (0 <= tag < SL_DEVICE_MAX_MARKS), the copies issued so far;
     * wait_mark: returns once those copies have finished reading their host sources. With them the
     *   engine refills the oldest staging slot without waiting for the copies issued after it
     *   (fence waits for all). Both or neither. */
    sl_status (*pin)(void *ctx, void *ptr, size_t len, sl_err *err);
    void (*unpin)(void *ctx, void *ptr);
    sl_status (*fence)(void *ctx, sl_err *err);
    sl_status (*write2d)(void *ctx, uint64_t dst_off, uint64_t dst_pitch, const void *src,
                         size_t src_pitch, size_t width, size_t rows, sl_err *err);
    void (*mem_info)(const void *ctx, uint64_t *free_before, uint64_t *free_after);
    void *(*device_ptr)(void *ctx);
    /* 1 when the memory is known to hold zeros before any write (fresh anonymous pages), so that
     * zero-filled padding needs no writes; NULL or 0: it must be zeroed. */
    int (*zeroed)(const void *ctx);
    int (*gpu)(const void *ctx);
    sl_status (*mark)(void *ctx, unsigned tag, sl_err *err);
    sl_status (*wait_mark)(void *ctx, unsigned tag, sl_err *err);
} sl_device_ops;

#define SL_DEVICE_MAX_MARKS 68u

typedef struct sl_device {
    const sl_device_ops *ops;
    void *ctx;
} sl_device;

/* The caller's memory for mesh device index (opts.dest), or NULL: allocate. */
static inline void *sl_device_dest(const sl_load_opts *o, int32_t index)
{
    return o && o->dest && index >= 0 && index < o->n_dest ? o->dest[index] : NULL;
}

/* A device whose parameters live in the caller's memory, one block each (opts.param_dest):
 * segment i holds device bytes [off[i], off[i] + len[i]) at ptr[i]. Segments are sorted, packed
 * and cover the device, as the plan's parameters do. Borrowed for the call only. */
typedef struct sl_device_segs {
    int64_t n;
    const uint64_t *off;
    const uint64_t *len;
    void *const *ptr;
} sl_device_segs;

/* A backend's own copy of the caller's blocks (the table passed in need not outlive the load). */
typedef struct sl_device_blocks {
    int64_t n;               /* 0: none, the device is one allocation */
    uint64_t *off, *len;
    unsigned char **ptr;
} sl_device_blocks;

sl_status sl_device_blocks_copy(sl_device_blocks *b, const sl_device_segs *segs, sl_err *err);
void sl_device_blocks_free(sl_device_blocks *b);
/* Address of device byte off, in the block that holds it, and in *avail the bytes from there to
 * the end of that block (empty blocks are skipped). off must lie inside the device. */
unsigned char *sl_device_blocks_at(const sl_device_blocks *b, uint64_t off, uint64_t *avail);

/* Creates the backend instance for mesh device `index` ("cpu" or "cuda", NULL = "cpu"), in the
 * caller's per-parameter blocks when segs is not NULL. Nothing is allocated yet.
 * SL_E_UNSUPPORTED when the backend is not available here, or cannot use segs. */
sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o,
                         const sl_device_segs *segs, sl_device *out, sl_err *err);
void sl_device_close(sl_device *d);
/* SL_OK when [off, off + n) lies inside a device of size bytes, else SL_E_INVALID_ARG naming the
 * backend and device (overflow-safe). */
sl_status sl_device_check_range(const char *backend, int32_t index, uint64_t size, uint64_t off,
                                uint64_t n, sl_err *err);

/* Backend constructors, one per file. */
sl_status sl_device_cpu_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                             sl_device *out, sl_err *err);
sl_status sl_device_cuda_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                              sl_device *out, sl_err *err);

#endif /* SL_DEVICE_H */
