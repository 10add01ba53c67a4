/* device.c - picks a device backend by name. */
#include "device/device.h"

#include <string.h>

sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o,
                         const sl_device_segs *segs, sl_device *out, sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    if (!name || !strcmp(name, "cpu"))
        return sl_device_cpu_open(index, o, segs, out, err);
    if (!strcmp(name, "cuda")) {
        if (segs)
            return sl_err_set(err, SL_E_UNSUPPORTED,
                              "cuda device %d: per-parameter destinations are host memory only "
                              "(cpu device); give the GPU one buffer per device (dest) instead",
                              index);
        return sl_device_cuda_open(index, o, out, err);
    }
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

int64_t sl_device_seg_find(const uint64_t *seg_off, int64_t n, uint64_t off)
{
    int64_t lo = 0, hi = n; /* first segment starting after off */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (seg_off[mid] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}
