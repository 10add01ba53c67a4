/* device.c - picks a device backend by name. */
#include "device/device.h"

#include <string.h>

sl_status sl_device_open(const char *name, int32_t index, const sl_load_opts *o, sl_device *out,
                         sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    if (!name || !strcmp(name, "cpu"))
        return sl_device_cpu_open(index, o, out, err);
    if (!strcmp(name, "cuda"))
        return sl_device_cuda_open(index, o, out, err);
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
