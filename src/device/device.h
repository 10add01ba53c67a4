/* device.h - the device backends the loading engine places shards into. A backend is an ops table
 * plus a void *ctx (STYLE.md rule 11), one instance per mesh device, chosen by name: "cpu" here,
 * "cuda" in dev_cuda.c when built with CUDA. The engine only ever asks a backend to allocate the
 * plan's exact bytes, copy host bytes in, zero a range, copy bytes back out and free.
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
} sl_device_ops;

typedef struct sl_device {
    const sl_device_ops *ops;
    void *ctx;
} sl_device;

/* Creates the backend instance for mesh device `index` ("cpu" or "cuda", NULL = "cpu").
 * Nothing is allocated yet. SL_E_UNSUPPORTED when the backend is not available here. */
sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o, sl_device *out,
                         sl_err *err);
void sl_device_close(sl_device *d);

/* Backend constructors, one per file. */
sl_status sl_device_cpu_open(int32_t index, const sl_load_opts *o, sl_device *out, sl_err *err);
sl_status sl_device_cuda_open(int32_t index, const sl_load_opts *o, sl_device *out, sl_err *err);

#endif /* SL_DEVICE_H */
