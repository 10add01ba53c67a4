/* device.h - the device backends the loading engine places shards into. A backend is an ops table
 * plus a void *ctx (STYLE.md rule 11), one instance per mesh device, chosen by name: "cpu"
 * (dev_cpu.c), "cuda" (dev_cuda.c, CUDA runtime loaded at run time) or "pjrt" (dev_pjrt.c, a PJRT
 * plugin loaded at run time, one buffer per parameter). The engine only ever asks
 * a backend to allocate the plan's exact bytes, copy host bytes in, zero a range, copy bytes back
 * out and free.
 *
 * The table has three parts (STYLE.md rule 17): required members, optional members that each have
 * a default, and an optional asynchronous part that is all or nothing (sl_device_async_ops). Code
 * outside src/device/ never reads a member: it calls the sl_device_* wrappers below, which hold
 * the defaults in one place (device.c), so a new backend sets what it has and the engine needs no
 * test for it (docs/design.md "Device backends").
 *
 * Every fallible op returns an sl_status and writes its message into the sl_err passed to it, so
 * that the executor can put it on the model handle. */
#ifndef SL_DEVICE_H
#define SL_DEVICE_H

#include "shardload.h"

#include "common/sl_err.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The asynchronous part of a backend: all of it or none of it (sl_device_ops.async is NULL or
 * points at a table with every member set; sl_device_open refuses a partial one). A backend whose
 * copies run asynchronously (cuda) provides it so that the engine can overlap device copies with
 * reads. Callers reach it only through the wrappers below, which are no-ops (or, for write2d, row
 * writes) for synchronous backends.
 * pin: makes host range [ptr, ptr + len) fast to copy from (page-locked). Writes whose source
 *   lies in a pinned range may complete after write() returns, until the next fence or the mark
 *   that follows them; writes from any other memory are complete on return. Several instances
 *   may pin the same range.
 * unpin: fences, then releases this instance's pin of the range that starts at ptr.
 * fence: returns once every copy issued so far has finished reading its host source.
 * mark: remembers, under tag (0 <= tag < SL_DEVICE_MAX_MARKS), the copies issued so far;
 * wait_mark: returns once those copies have finished reading their host sources. With them the
 *   engine refills the oldest staging slot without waiting for the copies issued after it (fence
 *   waits for all).
 * write2d: rows copies of width bytes, from src + r * src_pitch to dst_off + r * dst_pitch, as
 *   one copy (cudaMemcpy2DAsync); asynchronous like write. */
typedef struct sl_device_async_ops {
    sl_status (*pin)(void *ctx, void *ptr, size_t len, sl_err *err);
    void (*unpin)(void *ctx, void *ptr);
    sl_status (*fence)(void *ctx, sl_err *err);
    sl_status (*mark)(void *ctx, unsigned tag, sl_err *err);
    sl_status (*wait_mark)(void *ctx, unsigned tag, sl_err *err);
    sl_status (*write2d)(void *ctx, uint64_t dst_off, uint64_t dst_pitch, const void *src,
                         size_t src_pitch, size_t width, size_t rows, sl_err *err);
} sl_device_async_ops;

/* What a backend that keeps each parameter in a buffer of its own (pjrt) is told before alloc():
 * the device's parameters, in plan order with their packed offsets. Borrowed for the call. */
typedef struct sl_device_layout {
    int32_t n_mesh;                 /* devices of the plan being loaded */
    int64_t n_params;
    const sl_param_info *params;    /* name, dtype, ndim, shape, nbytes, offset */
} sl_device_layout;

/* What sl_device_handle hands out: a backend's own objects, for engines that call its runtime. */
typedef enum sl_device_handle_kind {
    SL_DEVICE_HANDLE_PARAM = 0,     /* parameter i's buffer (pjrt: PJRT_Buffer *) */
    SL_DEVICE_HANDLE_CLIENT = 1,    /* the runtime's client (pjrt: PJRT_Client *) */
    SL_DEVICE_HANDLE_API = 2,       /* the runtime's entry points (pjrt: const PJRT_Api *) */
    SL_DEVICE_HANDLE_STAGING = 3,   /* how the staging block was handed to the runtime (pjrt: const
                                       char *, "dma-mapped" or "plain (why)"); NULL: not said */
    SL_DEVICE_HANDLE_ROUTES = 4     /* how the bytes reached the device (pjrt: const char *, the
                                       parameters, bytes and calls of each way); NULL: not said */
} sl_device_handle_kind;

typedef struct sl_device_ops {
    /* Required: every backend sets every one of these. */
    const char *name;
    /* Allocates exactly `bytes` (0 is allowed) for this device; called once. */
    sl_status (*alloc)(void *ctx, uint64_t bytes, sl_err *err);
    /* Copies n host bytes to device offset off. Concurrent calls on disjoint ranges are allowed. */
    sl_status (*write)(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err);
    /* Writes n zero bytes at device offset off; complete on return. */
    sl_status (*zero)(void *ctx, uint64_t off, uint64_t n, sl_err *err);
    /* Copies n device bytes at off into host memory dst; sees every write issued before it. */
    sl_status (*read)(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err);
    uint64_t (*allocated)(const void *ctx);
    /* Frees the allocation and ctx. Accepts NULL. */
    void (*free)(void *ctx);

    /* Optional, each on its own; NULL gets the default named in its wrapper below. */
    /* Faults in the allocation ahead of the writes, from a helper thread, without changing its
     * bytes. Returns when done or when *stop becomes nonzero (set by another thread). */
    void (*prefault)(void *ctx, const atomic_int *stop);
    /* Host address of device offset 0 when the memory is host memory; NULL otherwise. */
    void *(*host_ptr)(void *ctx);
    /* Host address of device bytes [off, off + n) when they are one run of host memory (the
     * caller's per-parameter blocks: inside one block), NULL otherwise; default: host_ptr + off. */
    void *(*host_at)(void *ctx, uint64_t off, uint64_t n);
    /* Address of offset 0 in the device's own address space (the CUDA device address), for
     * callers that hand the weights to a framework. */
    void *(*device_ptr)(void *ctx);
    /* 1 when the memory is known to hold zeros before any write (fresh anonymous pages), so that
     * zero-filled padding needs no writes. */
    int (*zeroed)(const void *ctx);
    /* The GPU ordinal. */
    int (*gpu)(const void *ctx);
    /* Same-dtype rows narrower than this many bytes are best gathered by the engine into
     * contiguous pieces of its staging ring: the backend has no strided copy for part of a
     * parameter, so each such row would be a call of its own (pjrt: one TransferData per row). */
    uint64_t (*gather_below)(const void *ctx);
    /* 1 when write_convert turns src_dt elements into dst_dt at device offset off (and at the
     * offsets of the elements after it, inside one parameter) on the device itself (cuda: the
     * widening conversions of cuda_kernels.h, when opts.cuda_convert asks for them, the runtime
     * takes the kernels and the destination is aligned for them), so that the host sends the
     * narrower bytes. May set itself up on the first call (the loading thread's). */
    int (*converts)(void *ctx, uint64_t off, sl_dtype dst_dt, sl_dtype src_dt);
    /* n src_dt elements from host src, as dst_dt at device offset off, converted on the device;
     * asynchronous like write (a pinned source may be read until the next mark or fence). */
    sl_status (*write_convert)(void *ctx, uint64_t off, sl_dtype dst_dt, const void *src,
                               sl_dtype src_dt, size_t n, sl_err *err);
    /* Device free memory (bytes) right before and right after alloc() (pjrt: before the first
     * buffer and after the last); both UINT64_MAX when this instance cannot tell. */
    void (*mem_info)(const void *ctx, uint64_t *free_before, uint64_t *free_after);
    /* The device's parameters, once, before alloc(). */
    sl_status (*layout)(void *ctx, const sl_device_layout *l, sl_err *err);
    /* The backend's own handle of a kind (i: the parameter for SL_DEVICE_HANDLE_PARAM). */
    void *(*handle)(const void *ctx, sl_device_handle_kind what, int64_t i);

    /* NULL for synchronous backends (cpu, file devices); else complete. */
    const sl_device_async_ops *async;
} sl_device_ops;

#define SL_DEVICE_MAX_MARKS 68u

typedef struct sl_device {
    const sl_device_ops *ops;
    void *ctx;
} sl_device;

/* ---- calling a backend: the only way in from outside src/device/ (device.c) ------------------ */

const char *sl_device_name(const sl_device *d);
sl_status sl_device_alloc(const sl_device *d, uint64_t bytes, sl_err *err);
sl_status sl_device_write(const sl_device *d, uint64_t off, const void *src, size_t n, sl_err *err);
sl_status sl_device_zero(const sl_device *d, uint64_t off, uint64_t n, sl_err *err);
sl_status sl_device_read(const sl_device *d, uint64_t off, void *dst, size_t n, sl_err *err);
uint64_t sl_device_allocated(const sl_device *d);
/* Optional members, with their defaults: */
/* nothing to fault in */
void sl_device_prefault(const sl_device *d, const atomic_int *stop);
/* NULL: not host memory */
void *sl_device_host_ptr(const sl_device *d);
/* NULL: bytes [off, off + n) are not one run of host memory (or not inside the device) */
void *sl_device_host_at(const sl_device *d, uint64_t off, uint64_t n);
/* the host address when there is no other address space */
void *sl_device_ptr(const sl_device *d);
/* 0: must be zeroed */
int sl_device_zeroed(const sl_device *d);
/* -1: no GPU */
int sl_device_gpu(const sl_device *d);
/* 0: strided copies are as good as contiguous ones (the engine gathers nothing by itself) */
uint64_t sl_device_gather_below(const sl_device *d);
/* 0: the host converts */
int sl_device_converts(const sl_device *d, uint64_t off, sl_dtype dst_dt, sl_dtype src_dt);
/* SL_E_UNSUPPORTED where the backend has no write_convert, or (its own check) where
 * sl_device_converts would say 0 */
sl_status sl_device_write_convert(const sl_device *d, uint64_t off, sl_dtype dst_dt, const void *src,
                                  sl_dtype src_dt, size_t n, sl_err *err);
/* SL_E_UNSUPPORTED "device 'NAME' does not report free memory" */
sl_status sl_device_mem_info(const sl_device *d, uint64_t *free_before, uint64_t *free_after,
                             sl_err *err);
/* SL_OK: the backend needs no layout */
sl_status sl_device_set_layout(const sl_device *d, const sl_device_layout *l, sl_err *err);
/* NULL: no such handle */
void *sl_device_handle(const sl_device *d, sl_device_handle_kind what, int64_t i);
/* The asynchronous part, all no-ops (SL_OK) for synchronous backends: */
/* 1 when writes may complete after they return (d has the async part) */
int sl_device_is_async(const sl_device *d);
sl_status sl_device_pin(const sl_device *d, void *ptr, size_t len, sl_err *err);
void sl_device_unpin(const sl_device *d, void *ptr);
sl_status sl_device_fence(const sl_device *d, sl_err *err);
sl_status sl_device_mark(const sl_device *d, unsigned tag, sl_err *err);
sl_status sl_device_wait_mark(const sl_device *d, unsigned tag, sl_err *err);
/* one 2-D copy, or one write per row for synchronous backends */
sl_status sl_device_write2d(const sl_device *d, uint64_t dst_off, uint64_t dst_pitch,
                            const void *src, size_t src_pitch, size_t width, size_t rows,
                            sl_err *err);

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
 * SL_E_UNSUPPORTED when the backend is not available here, or cannot use segs; SL_E_DEVICE when
 * its ops table breaks the rules above (sl_device_ops_check). */
sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o,
                         const sl_device_segs *segs, sl_device *out, sl_err *err);
void sl_device_close(sl_device *d);
/* NULL when ops has every required member and an async part that is NULL or complete; else the
 * name of the first member missing. Backends built outside sl_device_open (file devices) may
 * check themselves with it. */
const char *sl_device_ops_check(const sl_device_ops *ops);
/* SL_OK when [off, off + n) lies inside a device of size bytes, else SL_E_INVALID_ARG naming the
 * backend and device (overflow-safe). */
sl_status sl_device_check_range(const char *backend, int32_t index, uint64_t size, uint64_t off,
                                uint64_t n, sl_err *err);

/* Backend constructors, one per file. */
sl_status sl_device_cpu_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                             sl_device *out, sl_err *err);
sl_status sl_device_cuda_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                              sl_device *out, sl_err *err);
sl_status sl_device_pjrt_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                              sl_device *out, sl_err *err);

#endif /* SL_DEVICE_H */
