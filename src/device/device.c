/* device.c - picks a device backend by name, checks its ops table once, and is the one place that
 * calls into a backend (the sl_device_* wrappers of device.h): optional members get their
 * defaults here, so the engine never tests a member. */
#include "device/device.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static sl_status device_open_backend(const char *name, int32_t index, const sl_load_opts *o,
                                     const sl_device_segs *segs, sl_device *out, sl_err *err)
{
    if (!name || !strcmp(name, "cpu"))
        return sl_device_cpu_open(index, o, segs, out, err);
    if (!strcmp(name, "cuda"))
        return sl_device_cuda_open(index, o, segs, out, err);
    if (!strcmp(name, "pjrt"))
        return sl_device_pjrt_open(index, o, segs, out, err);
    return sl_err_set(err, SL_E_INVALID_ARG, "unknown device '%s' (expected cpu, cuda or pjrt)",
                      name);
}

sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o,
                         const sl_device_segs *segs, sl_device *out, sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    SL_TRY(device_open_backend(name, index, o, segs, out, err));
    const char *missing = sl_device_ops_check(out->ops);
    assert(!missing); /* a backend of this tree */
    if (missing) {
        const char *backend = out->ops && out->ops->name ? out->ops->name : "?";
        sl_device_close(out);
        return sl_err_set(err, SL_E_DEVICE, "device backend '%s' lacks %s", backend, missing);
    }
    return SL_OK;
}

const char *sl_device_ops_check(const sl_device_ops *ops)
{
    if (!ops)
        return "an ops table";
    const char *missing = !ops->name ? "name" : !ops->alloc ? "alloc" : !ops->write ? "write"
                        : !ops->zero ? "zero" : !ops->read ? "read"
                        : !ops->allocated ? "allocated" : !ops->free ? "free" : NULL;
    if (missing)
        return missing;
    const sl_device_async_ops *a = ops->async;
    if (a && (!a->pin || !a->unpin || !a->fence || !a->mark || !a->wait_mark || !a->write2d))
        return "part of its async ops (pin, unpin, fence, mark, wait_mark and write2d go together)";
    return NULL;
}

sl_status sl_device_check_range(const char *backend, int32_t index, uint64_t size, uint64_t off,
                                uint64_t n, sl_err *err)
{
    if (off > size || n > size - off)
        return sl_err_set(err, SL_E_INVALID_ARG, "%s device %d: range [%llu, +%llu) outside %llu bytes",
                          backend, index, (unsigned long long)off, (unsigned long long)n,
                          (unsigned long long)size);
    return SL_OK;
}

void sl_device_close(sl_device *d)
{
    if (d && d->ops && d->ops->free)
        d->ops->free(d->ctx);
    if (d) {
        d->ops = NULL;
        d->ctx = NULL;
    }
}

sl_status sl_device_blocks_copy(sl_device_blocks *b, const sl_device_segs *segs, sl_err *err)
{
    *b = (sl_device_blocks){0};
    if (!segs || segs->n <= 0)
        return SL_OK;
    const size_t n = (size_t)segs->n;
    b->off = calloc(n, sizeof *b->off);
    b->len = calloc(n, sizeof *b->len);
    b->ptr = calloc(n, sizeof *b->ptr);
    if (!b->off || !b->len || !b->ptr) {
        sl_device_blocks_free(b);
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        b->off[i] = segs->off[i];
        b->len[i] = segs->len[i];
        b->ptr[i] = segs->ptr[i];
    }
    b->n = segs->n;
    return SL_OK;
}

void sl_device_blocks_free(sl_device_blocks *b)
{
    free(b->off);
    free(b->len);
    free(b->ptr);
    *b = (sl_device_blocks){0};
}

unsigned char *sl_device_blocks_at(const sl_device_blocks *b, uint64_t off, uint64_t *avail)
{
    int64_t lo = 0, hi = b->n; /* the first block starting after off */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (b->off[mid] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* off lies inside the device, so a non-empty block starts at or before it: lo >= 1 */
    const int64_t i = lo - 1;
    *avail = b->len[i] - (off - b->off[i]);
    return b->ptr[i] + (off - b->off[i]);
}

/* ---- the wrappers ------------------------------------------------------------------------------ */

const char *sl_device_name(const sl_device *d)
{
    return d->ops->name;
}

sl_status sl_device_alloc(const sl_device *d, uint64_t bytes, sl_err *err)
{
    return d->ops->alloc(d->ctx, bytes, err);
}

sl_status sl_device_write(const sl_device *d, uint64_t off, const void *src, size_t n, sl_err *err)
{
    return d->ops->write(d->ctx, off, src, n, err);
}

sl_status sl_device_zero(const sl_device *d, uint64_t off, uint64_t n, sl_err *err)
{
    return d->ops->zero(d->ctx, off, n, err);
}

sl_status sl_device_read(const sl_device *d, uint64_t off, void *dst, size_t n, sl_err *err)
{
    return d->ops->read(d->ctx, off, dst, n, err);
}

uint64_t sl_device_allocated(const sl_device *d)
{
    return d->ops->allocated(d->ctx);
}

void sl_device_prefault(const sl_device *d, const atomic_int *stop)
{
    if (d->ops->prefault)
        d->ops->prefault(d->ctx, stop);
}

void *sl_device_host_ptr(const sl_device *d)
{
    return d->ops->host_ptr ? d->ops->host_ptr(d->ctx) : NULL;
}

void *sl_device_host_at(const sl_device *d, uint64_t off, uint64_t n)
{
    if (d->ops->host_at)
        return d->ops->host_at(d->ctx, off, n);
    unsigned char *base = sl_device_host_ptr(d);
    const uint64_t size = sl_device_allocated(d);
    return base && n && off <= size && n <= size - off ? base + off : NULL;
}

void *sl_device_ptr(const sl_device *d)
{
    return d->ops->device_ptr ? d->ops->device_ptr(d->ctx) : sl_device_host_ptr(d);
}

int sl_device_zeroed(const sl_device *d)
{
    return d->ops->zeroed ? d->ops->zeroed(d->ctx) : 0;
}

int sl_device_gpu(const sl_device *d)
{
    return d->ops->gpu ? d->ops->gpu(d->ctx) : -1;
}

uint64_t sl_device_gather_below(const sl_device *d)
{
    return d->ops->gather_below ? d->ops->gather_below(d->ctx) : 0;
}

int sl_device_converts(const sl_device *d, uint64_t off, sl_dtype dst_dt, sl_dtype src_dt)
{
    return d->ops->converts && d->ops->write_convert && dst_dt != src_dt &&
           d->ops->converts(d->ctx, off, dst_dt, src_dt);
}

sl_status sl_device_write_convert(const sl_device *d, uint64_t off, sl_dtype dst_dt, const void *src,
                                  sl_dtype src_dt, size_t n, sl_err *err)
{
    if (!d->ops->write_convert)   /* (a backend that has it checks the pair itself) */
        return sl_err_set(err, SL_E_UNSUPPORTED, "device '%s' does not convert %s to %s",
                          sl_device_name(d), sl_dtype_name(src_dt), sl_dtype_name(dst_dt));
    return d->ops->write_convert(d->ctx, off, dst_dt, src, src_dt, n, err);
}

sl_status sl_device_mem_info(const sl_device *d, uint64_t *free_before, uint64_t *free_after,
                             sl_err *err)
{
    if (!d->ops->mem_info)
        return sl_err_set(err, SL_E_UNSUPPORTED, "device '%s' does not report free memory",
                          d->ops->name);
    d->ops->mem_info(d->ctx, free_before, free_after);
    if (*free_before == UINT64_MAX && *free_after == UINT64_MAX)
        return sl_err_set(err, SL_E_UNSUPPORTED, "device '%s' does not report free memory here",
                          d->ops->name);
    return SL_OK;
}

sl_status sl_device_set_layout(const sl_device *d, const sl_device_layout *l, sl_err *err)
{
    return d->ops->layout ? d->ops->layout(d->ctx, l, err) : SL_OK;
}

void *sl_device_handle(const sl_device *d, sl_device_handle_kind what, int64_t i)
{
    return d->ops->handle ? d->ops->handle(d->ctx, what, i) : NULL;
}

int sl_device_is_async(const sl_device *d)
{
    return d->ops->async != NULL;
}

sl_status sl_device_pin(const sl_device *d, void *ptr, size_t len, sl_err *err)
{
    return d->ops->async ? d->ops->async->pin(d->ctx, ptr, len, err) : SL_OK;
}

void sl_device_unpin(const sl_device *d, void *ptr)
{
    if (d->ops->async)
        d->ops->async->unpin(d->ctx, ptr);
}

sl_status sl_device_fence(const sl_device *d, sl_err *err)
{
    return d->ops->async ? d->ops->async->fence(d->ctx, err) : SL_OK;
}

sl_status sl_device_mark(const sl_device *d, unsigned tag, sl_err *err)
{
    return d->ops->async ? d->ops->async->mark(d->ctx, tag, err) : SL_OK;
}

sl_status sl_device_wait_mark(const sl_device *d, unsigned tag, sl_err *err)
{
    return d->ops->async ? d->ops->async->wait_mark(d->ctx, tag, err) : SL_OK;
}

sl_status sl_device_write2d(const sl_device *d, uint64_t dst_off, uint64_t dst_pitch,
                            const void *src, size_t src_pitch, size_t width, size_t rows,
                            sl_err *err)
{
    if (d->ops->async)
        return d->ops->async->write2d(d->ctx, dst_off, dst_pitch, src, src_pitch, width, rows, err);
    const unsigned char *s = src;
    for (size_t r = 0; r < rows; r++)
        SL_TRY(d->ops->write(d->ctx, dst_off + r * dst_pitch, s + r * src_pitch, width, err));
    return SL_OK;
}
