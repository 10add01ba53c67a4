/* model_pjrt.c - the sl_model getters of the pjrt backend: the PJRT objects a C engine passes to
 * PJRT_LoadedExecutable_Execute (docs/design.md "The pjrt backend"), and how its staging memory
 * reached the plugin. */
#include "load/engine.h"

#include <stddef.h>

static const sl_device *model_dev(const sl_model *m, int32_t dev)
{
    return m && dev >= 0 && dev < m->n_devices ? &m->devs[dev].dev : NULL;
}

void *sl_model_param_pjrt_buffer(const sl_model *m, int32_t dev, int64_t i)
{
    const sl_device *d = model_dev(m, dev);
    if (!d || i < 0 || i >= m->devs[dev].n_params)
        return NULL;
    return sl_device_handle(d, SL_DEVICE_HANDLE_PARAM, i);
}

void *sl_model_pjrt_client(const sl_model *m, int32_t dev)
{
    const sl_device *d = model_dev(m, dev);
    return d ? sl_device_handle(d, SL_DEVICE_HANDLE_CLIENT, 0) : NULL;
}

const void *sl_model_pjrt_api(const sl_model *m, int32_t dev)
{
    const sl_device *d = model_dev(m, dev);
    return d ? sl_device_handle(d, SL_DEVICE_HANDLE_API, 0) : NULL;
}

const char *sl_model_device_staging(const sl_model *m, int32_t dev)
{
    const sl_device *d = model_dev(m, dev);
    return d ? sl_device_handle(d, SL_DEVICE_HANDLE_STAGING, 0) : NULL;
}

const char *sl_model_device_routes(const sl_model *m, int32_t dev)
{
    const sl_device *d = model_dev(m, dev);
    return d ? sl_device_handle(d, SL_DEVICE_HANDLE_ROUTES, 0) : NULL;
}
