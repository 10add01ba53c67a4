/* model.c - the sl_model handle: per-device buffers of a finished load, and their getters. */
#include "load/engine.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/sl_bytes.h"

void sl_load_opts_init(sl_load_opts *o)
{
    if (!o)
        return;
    *o = (sl_load_opts){0};
    o->device = "cpu";
    o->io = SL_IO_AUTO;
    o->staging_bytes = SL_STAGING_DEFAULT;
    o->seed = 1234;
}

uint64_t sl_xxh3(const void *data, size_t n)
{
    return XXH3_64bits(data, n);
}

size_t sl_struct_size(const char *name)
{
    static const struct { const char *name; size_t size; } sizes[] = {
        {"sl_load_opts", sizeof(sl_load_opts)},   {"sl_plan_opts", sizeof(sl_plan_opts)},
        {"sl_tensor_info", sizeof(sl_tensor_info)}, {"sl_param_info", sizeof(sl_param_info)},
        {"sl_load_stats", sizeof(sl_load_stats)}, {"sl_rank_stats", sizeof(sl_rank_stats)},
        {"sl_dist_opts", sizeof(sl_dist_opts)},   {"sl_box", sizeof(sl_box)},
    };
    for (size_t i = 0; name && i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(name, sizes[i].name))
            return sizes[i].size;
    return 0;
}

sl_model *sl_model_new(void)
{
    sl_model *m = calloc(1, sizeof *m);
    if (m) {
        m->errw = &m->err;
        m->stats.io = m->stats.engine = "none";
    }
    return m;
}

void sl_model_free(sl_model *m)
{
    if (!m)
        return;
    sl_load_drop_devices(m);
    free(m->ranks);
    sl_err_clear(&m->err);
    free(m);
}

const char *sl_model_errmsg(const sl_model *m)
{
    return m ? sl_err_msg(&m->err) : "no model";
}

sl_status sl_model_stats(const sl_model *m, sl_load_stats *out)
{
    if (!m || !out)
        return SL_E_INVALID_ARG;
    *out = m->stats;
    return SL_OK;
}

int32_t sl_model_device_count(const sl_model *m)
{
    return m ? m->n_devices : 0;
}

uint64_t sl_model_device_allocated(const sl_model *m, int32_t dev)
{
    if (!m || dev < 0 || dev >= m->n_devices)
        return 0;
    return sl_device_allocated(&m->devs[dev].dev);
}

sl_status sl_model_device_mem(const sl_model *m, int32_t dev, uint64_t *free_before,
                              uint64_t *free_after)
{
    if (!m || !free_before || !free_after)
        return SL_E_INVALID_ARG;
    if (dev < 0 || dev >= m->n_devices)
        return sl_err_set(m->errw, SL_E_INVALID_ARG, "device %d out of range", dev);
    return sl_device_mem_info(&m->devs[dev].dev, free_before, free_after, m->errw);
}

static sl_status model_param(const sl_model *m, int32_t dev, int64_t i, const sl_model_dev **out)
{
    if (!m)
        return SL_E_INVALID_ARG;
    if (dev < 0 || dev >= m->n_devices || i < 0 || i >= m->devs[dev].n_params)
        return sl_err_set(m->errw, SL_E_INVALID_ARG,
                          "device %d parameter %lld out of range", dev, (long long)i);
    *out = &m->devs[dev];
    return SL_OK;
}

sl_status sl_model_read_param(const sl_model *m, int32_t dev, int64_t i, uint64_t off, void *dst,
                              uint64_t nbytes)
{
    const sl_model_dev *md = NULL;
    SL_TRY(model_param(m, dev, i, &md));
    sl_err *err = m->errw;
    SL_CHECK(dst || nbytes == 0, err, SL_E_INVALID_ARG, "read of %llu bytes of parameter %lld into NULL",
             (unsigned long long)nbytes, (long long)i);
    SL_CHECK(off <= md->param_bytes[i] && nbytes <= md->param_bytes[i] - off && nbytes <= SIZE_MAX,
             err, SL_E_INVALID_ARG, "read of [%llu, +%llu) outside parameter %lld (%llu bytes)",
             (unsigned long long)off, (unsigned long long)nbytes, (long long)i,
             (unsigned long long)md->param_bytes[i]);
    return sl_device_read(&md->dev, md->param_off[i] + off, dst, (size_t)nbytes, err);
}

const void *sl_model_param_host_ptr(const sl_model *m, int32_t dev, int64_t i)
{
    if (!m || dev < 0 || dev >= m->n_devices || i < 0 || i >= m->devs[dev].n_params)
        return NULL;
    const sl_model_dev *md = &m->devs[dev];
    if (md->param_ptr)
        return md->param_ptr[i];
    const unsigned char *base = sl_device_host_ptr(&md->dev);
    return base ? base + md->param_off[i] : NULL;
}

void *sl_model_param_ptr(const sl_model *m, int32_t dev, int64_t i)
{
    if (!m || dev < 0 || dev >= m->n_devices || i < 0 || i >= m->devs[dev].n_params)
        return NULL;
    const sl_model_dev *md = &m->devs[dev];
    if (md->param_ptr)
        return md->param_bytes[i] ? md->param_ptr[i] : NULL;
    unsigned char *base = sl_device_ptr(&md->dev);
    return base ? base + md->param_off[i] : NULL;
}

int32_t sl_model_device_gpu(const sl_model *m, int32_t dev)
{
    if (!m || dev < 0 || dev >= m->n_devices)
        return -1;
    return sl_device_gpu(&m->devs[dev].dev);
}

/* Host memory is hashed in place; other backends stream through a bounded bounce buffer. */
sl_status sl_model_param_xxh3(const sl_model *m, int32_t dev, int64_t i, uint64_t *out)
{
    const sl_model_dev *md = NULL;
    SL_TRY(model_param(m, dev, i, &md));
    SL_CHECK(out != NULL, m->errw, SL_E_INVALID_ARG, "checksum of parameter %lld into NULL", (long long)i);
    const unsigned char *base = sl_device_host_ptr(&md->dev);
    if (base || md->param_bytes[i] == 0) {
        *out = base ? XXH3_64bits(base + md->param_off[i], (size_t)md->param_bytes[i])
                    : XXH3_64bits(NULL, 0);
        return SL_OK;
    }
    XXH3_state_t *s = XXH3_createState();
    const size_t chunk = (size_t)4 << 20;
    void *buf = malloc(chunk);
    sl_status st = SL_OK;
    if (!s || !buf || XXH3_64bits_reset(s) != XXH_OK)
        st = sl_err_set(m->errw, SL_E_NOMEM, "out of memory");
    for (uint64_t off = 0; st == SL_OK && off < md->param_bytes[i]; off += chunk) {
        size_t n = (size_t)sl_min_u64(chunk, md->param_bytes[i] - off);
        st = sl_model_read_param(m, dev, i, off, buf, n);
        if (st == SL_OK)
            XXH3_64bits_update(s, buf, n);
    }
    if (st == SL_OK)
        *out = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    free(buf);
    return st;
}

int32_t sl_model_device_index(const sl_model *m, int32_t dev)
{
    if (!m || dev < 0 || dev >= m->n_devices)
        return -1;
    return m->mesh_index ? m->mesh_index[dev] : m->first_device + dev;
}

int32_t sl_model_rank_count(const sl_model *m)
{
    return !m ? 0 : m->n_ranks ? m->n_ranks : 1;
}

/* A single-process load is rank 0 of 1, holding every device. */
sl_status sl_model_rank_stats(const sl_model *m, int32_t rank, sl_rank_stats *out)
{
    if (!m || !out || rank < 0 || rank >= sl_model_rank_count(m))
        return SL_E_INVALID_ARG;
    if (m->n_ranks) {
        *out = m->ranks[rank];
        return SL_OK;
    }
    *out = (sl_rank_stats){.rank = 0, .first_device = 0, .devices = m->n_devices,
                           .bytes_read = m->stats.bytes_read, .staging_peak = m->stats.staging_peak,
                           .seconds = m->stats.seconds, .read_requests = m->stats.read_requests,
                           .read_depth_peak = m->stats.read_depth_peak,
                           .setup_seconds = m->stats.setup_seconds,
                           .remote_retries = m->stats.remote_retries,
                           .remote_restarts = m->stats.remote_restarts};
    return SL_OK;
}
