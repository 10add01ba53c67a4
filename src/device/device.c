/* device.c - picks a device backend by name. */
#include "device/device.h"

#include <stdlib.h>
#include <string.h>

sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o,
                         const sl_device_segs *segs, sl_device *out, sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    if (!name || !strcmp(name, "cpu"))
        return sl_device_cpu_open(index, o, segs, out, err);
    if (!strcmp(name, "cuda"))
        return sl_device_cuda_open(index, o, segs, out, err);
    return sl_err_set(err, SL_E_INVALID_ARG, "unknown device '%s' (expected cpu or cuda)", name);
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
    if (d && d->ops)
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
