/* dev_pjrt.c - the "pjrt" device backend: each mesh device's parameters as PJRT buffers, one per
 * parameter with its dtype and shape, through any PJRT plugin (XLA's CPU plugin, JAX's CUDA
 * plugin, libtpu), which is dlopened at run time (dev_pjrt_plugin.c), so that shardload has no
 * build-time XLA dependency. The state and the three ways bytes reach a buffer (direct,
 * assembled, streamed) are described in dev_pjrt.h; the transfers are in dev_pjrt_xfer.c.
 *
 * Open loads and checks the plugin; layout() (before alloc) gets the client every mesh device of
 * the process shares (made with cpu_device_count = the mesh size on the CPU plugin; where the
 * plugin refuses that count, each run of its default count of mesh devices shares one:
 * pj_client_acquire), picks PJRT device (mesh index % addressable devices) and takes the
 * parameters; alloc() makes the buffers of empty parameters. The async part: writes from the
 * pinned staging block may still be read by the plugin after they return (their events are
 * pending); mark() files the pending events under a tag, wait_mark() and fence() wait for them,
 * so the engine refills a slot only after the plugin is done with it. Host memory of the backend itself: the assembly blocks, within the
 * bound `cap` (a share of the staging budget), and during read-back a copy of one parameter where
 * the plugin cannot copy part of a buffer (CopyRawToHost). */
#include "device/dev_pjrt.h"

#include "common/sl_bytes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PJ_MIN_CAP ((uint64_t)64 << 10)

/* ---- the ops -------------------------------------------------------------------------------- */

static sl_status pjrt_check(const pjrt_dev *d, uint64_t off, uint64_t n, sl_err *err)
{
    SL_CHECK(d->allocated, err, SL_E_INVALID_ARG, "%s: written before alloc", d->ctx);
    return sl_device_check_range("pjrt", d->index, d->bytes, off, n, err);
}

static int pjrt_pinned(const pjrt_dev *d, const void *src, uint64_t n)
{
    const uintptr_t p = (uintptr_t)src, b = (uintptr_t)d->pin_ptr;
    return d->pin_ptr && p >= b && p - b <= d->pin_len && n <= d->pin_len - (p - b);
}

static sl_status pjrt_write(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err)
{
    pjrt_dev *d = ctx;
    SL_TRY(pjrt_check(d, off, n, err));
    pthread_mutex_lock(&d->lock);
    const sl_status st = pj_write_locked(d, off, src, n, pjrt_pinned(d, src, n), err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

static sl_status pjrt_zero(void *ctx, uint64_t off, uint64_t n, sl_err *err)
{
    pjrt_dev *d = ctx;
    SL_TRY(pjrt_check(d, off, n, err));
    pthread_mutex_lock(&d->lock);
    const sl_status st = pj_write_locked(d, off, NULL, n, 0, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

static sl_status pjrt_write2d(void *ctx, uint64_t dst_off, uint64_t dst_pitch, const void *src,
                              size_t src_pitch, size_t width, size_t rows, sl_err *err)
{
    pjrt_dev *d = ctx;
    if (rows == 0 || width == 0)
        return SL_OK;
    SL_CHECK(dst_pitch >= width && src_pitch >= width && width <= d->bytes &&
                 dst_pitch <= d->bytes && rows - 1 <= (d->bytes - width) / dst_pitch,
             err, SL_E_INVALID_ARG, "%s: 2-D copy of %zu rows x %zu bytes (pitch %llu) does not "
             "fit", d->ctx, rows, width, (unsigned long long)dst_pitch);
    SL_TRY(pjrt_check(d, dst_off, (rows - 1) * dst_pitch + width, err));
    const int async = pjrt_pinned(d, src, (rows - 1) * src_pitch + width);
    pthread_mutex_lock(&d->lock);
    const sl_status st = pj_write2d_locked(d, dst_off, dst_pitch, src, src_pitch, width, rows,
                                           async, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

static sl_status pjrt_read(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err)
{
    pjrt_dev *d = ctx;
    SL_TRY(pjrt_check(d, off, n, err));
    pthread_mutex_lock(&d->lock);
    const sl_status st = pj_read_locked(d, off, dst, n, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* Caller holds the lock. */
static sl_status pj_fence_locked(pjrt_dev *d, sl_err *err)
{
    sl_status st = pj_events_finish(d->api, &d->pending, err, d->ctx);
    for (unsigned i = 0; i < SL_DEVICE_MAX_MARKS; i++) {
        const sl_status s = pj_events_finish(d->api, &d->marks[i], err, d->ctx);
        st = st == SL_OK ? s : st;
    }
    return st;
}

static sl_status pjrt_fence(void *ctx, sl_err *err)
{
    pjrt_dev *d = ctx;
    pthread_mutex_lock(&d->lock);
    const sl_status st = pj_fence_locked(d, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

static sl_status pjrt_mark(void *ctx, unsigned tag, sl_err *err)
{
    pjrt_dev *d = ctx;
    SL_CHECK(tag < SL_DEVICE_MAX_MARKS, err, SL_E_INVALID_ARG, "%s: mark %u out of range", d->ctx,
             tag);
    pthread_mutex_lock(&d->lock);
    if (d->marks[tag].n == 0)
        d->mark_first[tag] = d->mark_seq + 1;
    d->mark_last[tag] = ++d->mark_seq;
    const sl_status st = pj_events_move(&d->marks[tag], &d->pending, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* Waits for the events of every tag marked no later than tag's newest mark: the ring's pieces
 * and the read slots are marked in turn, and a slot's mark must cover the copies from it that an
 * earlier piece's mark took from the pending list. */
static sl_status pjrt_wait_mark(void *ctx, unsigned tag, sl_err *err)
{
    pjrt_dev *d = ctx;
    if (tag >= SL_DEVICE_MAX_MARKS)
        return SL_OK;
    pthread_mutex_lock(&d->lock);
    sl_status st = SL_OK;
    const uint64_t upto = d->mark_last[tag];
    for (unsigned t = 0; upto && t < SL_DEVICE_MAX_MARKS; t++)
        if (d->marks[t].n && d->mark_first[t] <= upto) {
            const sl_status s = pj_events_finish(d->api, &d->marks[t], err, d->ctx);
            st = st == SL_OK ? s : st;
        }
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* The staging block: DMA-mapped in the client where the plugin can (once per client, whatever
 * the number of its mesh devices; on CUDA the transfers from it then need no staging copy in the
 * plugin), else plain memory, which the plugin stages itself; a map that fails is not an error
 * (pj_client_dma_map). Recorded so that writes from the range may complete after they return. */
static sl_status pjrt_pin(void *ctx, void *ptr, size_t len, sl_err *err)
{
    pjrt_dev *d = ctx;
    (void)err;
    pthread_mutex_lock(&d->lock);
    if (!d->pin_ptr && ptr && len) {
        d->pin_ptr = ptr;
        d->pin_len = len;
        if (d->no_dma_map)
            snprintf(d->staging_mem, sizeof d->staging_mem, "plain (not mapped: opts.pjrt_dma_map)");
        else if (d->client)
            d->dma = pj_client_dma_map(d->client, ptr, len, d->staging_mem, sizeof d->staging_mem);
        else
            snprintf(d->staging_mem, sizeof d->staging_mem, "plain (pinned before the layout)");
    }
    pthread_mutex_unlock(&d->lock);
    return SL_OK;
}

/* Caller holds the lock: every copy from the range is waited for before it is unmapped. */
static void pj_unpin_locked(pjrt_dev *d)
{
    sl_err ignored = {0};
    (void)pj_fence_locked(d, &ignored);
    sl_err_clear(&ignored);
    if (d->client)
        pj_client_dma_unmap(d->client, d->pin_ptr);
    d->dma = 0;
    d->pin_ptr = NULL;
    d->pin_len = 0;
}

static void pjrt_unpin(void *ctx, void *ptr)
{
    pjrt_dev *d = ctx;
    pthread_mutex_lock(&d->lock);
    if (ptr && d->pin_ptr == ptr)
        pj_unpin_locked(d);
    pthread_mutex_unlock(&d->lock);
}

static uint64_t pjrt_allocated(const void *ctx)
{
    const pjrt_dev *d = ctx;
    return d->allocated ? d->bytes : 0;
}

/* Both UINT64_MAX when the plugin does not tell (device.h). */
static void pjrt_mem_info(const void *ctx, uint64_t *free_before, uint64_t *free_after)
{
    const pjrt_dev *d = ctx;
    *free_before = d->stats ? d->free_before : UINT64_MAX;
    *free_after = d->stats ? d->free_after : UINT64_MAX;
}

/* A PJRT buffer is written whole (BufferFromHostBuffer, strides allowed) or by contiguous ranges
 * (TransferData): part of a parameter in narrow rows would be a transfer per row (on JAX's CUDA
 * plugin, Llama-3-8B at TP 8 on one H200 loaded at 0.29 GB/s that way, bench/RESULTS.md "GPU").
 * Any rows that fit a ring piece are better gathered by the engine. */
static uint64_t pjrt_gather_below(const void *ctx)
{
    (void)ctx;
    return UINT64_MAX;
}

static void *pjrt_handle(const void *ctx, sl_device_handle_kind what, int64_t i)
{
    const pjrt_dev *d = ctx;
    switch (what) {
    case SL_DEVICE_HANDLE_PARAM:
        return i >= 0 && i < d->n_params && d->params[i].state == PJ_DONE ? d->params[i].buf : NULL;
    case SL_DEVICE_HANDLE_CLIENT:
        return d->client ? d->client->client : NULL;
    case SL_DEVICE_HANDLE_API:
        return (void *)(uintptr_t)d->api; /* handed out as const void * by the model */
    case SL_DEVICE_HANDLE_STAGING:
        return d->staging_mem[0] ? (void *)(uintptr_t)d->staging_mem : NULL; /* const char * */
    case SL_DEVICE_HANDLE_ROUTES:
        return d->routes[0] ? (void *)(uintptr_t)d->routes : NULL; /* const char * */
    }
    return NULL;
}

/* ---- layout and alloc ----------------------------------------------------------------------- */

/* The PJRT element type of an sl_dtype and its bytes; -1 for the sub-byte types, which PJRT holds
 * one element per byte on the host (packed safetensors bytes would need unpacking). */
static int pj_type(sl_dtype dt, uint32_t *es)
{
    static const struct { sl_dtype dt; int type; } map[] = {
        {SL_DTYPE_BOOL, PJRT_Buffer_Type_PRED},      {SL_DTYPE_U8, PJRT_Buffer_Type_U8},
        {SL_DTYPE_I8, PJRT_Buffer_Type_S8},          {SL_DTYPE_F8_E5M2, PJRT_Buffer_Type_F8E5M2},
        {SL_DTYPE_F8_E4M3, PJRT_Buffer_Type_F8E4M3FN}, {SL_DTYPE_F8_E8M0, PJRT_Buffer_Type_F8E8M0FNU},
        {SL_DTYPE_F8_E4M3FNUZ, PJRT_Buffer_Type_F8E4M3FNUZ},
        {SL_DTYPE_F8_E5M2FNUZ, PJRT_Buffer_Type_F8E5M2FNUZ},
        {SL_DTYPE_I16, PJRT_Buffer_Type_S16},        {SL_DTYPE_U16, PJRT_Buffer_Type_U16},
        {SL_DTYPE_F16, PJRT_Buffer_Type_F16},        {SL_DTYPE_BF16, PJRT_Buffer_Type_BF16},
        {SL_DTYPE_I32, PJRT_Buffer_Type_S32},        {SL_DTYPE_U32, PJRT_Buffer_Type_U32},
        {SL_DTYPE_F32, PJRT_Buffer_Type_F32},        {SL_DTYPE_C64, PJRT_Buffer_Type_C64},
        {SL_DTYPE_F64, PJRT_Buffer_Type_F64},        {SL_DTYPE_I64, PJRT_Buffer_Type_S64},
        {SL_DTYPE_U64, PJRT_Buffer_Type_U64},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].dt == dt) {
            *es = sl_dtype_bits(dt) / 8;
            return map[i].type;
        }
    return -1;
}

/* Room for the names and dims of every parameter, in two blocks. */
static sl_status pj_alloc_params(pjrt_dev *d, const sl_device_layout *l, sl_err *err)
{
    size_t names = 0, dims = 0;
    for (int64_t i = 0; i < l->n_params; i++) {
        names += strlen(l->params[i].name ? l->params[i].name : "?") + 1;
        dims += l->params[i].ndim;
    }
    d->params = calloc((size_t)l->n_params + 1, sizeof *d->params);
    d->names = malloc(names + 1);
    d->dims = calloc(dims + 1, sizeof *d->dims);
    if (!d->params || !d->names || !d->dims)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

static sl_status pj_take_param(pjrt_dev *d, const sl_param_info *in, pj_param *p, char **name,
                               int64_t **dims, sl_err *err)
{
    const char *src = in->name ? in->name : "?";
    const size_t len = strlen(src) + 1;
    memcpy(*name, src, len);
    p->name = *name;
    *name += len;
    p->type = pj_type(in->dtype, &p->es);
    SL_CHECK(p->type >= 0, err, SL_E_UNSUPPORTED, "%s: parameter '%s': PJRT has no %s buffers "
             "here (sub-byte types are unpacked on the host)", d->ctx, p->name,
             sl_dtype_name(in->dtype) ? sl_dtype_name(in->dtype) : "?");
    SL_CHECK(in->ndim <= PJ_MAX_DIMS, err, SL_E_UNSUPPORTED, "%s: parameter '%s' has %u "
             "dimensions (at most %d)", d->ctx, p->name, in->ndim, PJ_MAX_DIMS);
    uint64_t numel = 1;
    for (uint32_t k = 0; k < in->ndim; k++) {
        SL_CHECK(in->shape[k] <= INT64_MAX && !sl_mul_overflow(numel, in->shape[k], &numel), err,
                 SL_E_INVALID_ARG, "%s: parameter '%s' is too large", d->ctx, p->name);
        (*dims)[k] = (int64_t)in->shape[k];
    }
    SL_CHECK(numel <= UINT64_MAX / p->es && numel * p->es == in->nbytes, err, SL_E_INVALID_ARG,
             "%s: parameter '%s': %llu bytes for its shape and dtype, the plan says %llu", d->ctx,
             p->name, (unsigned long long)(numel * p->es), (unsigned long long)in->nbytes);
    SL_CHECK(in->offset == d->bytes, err, SL_E_INVALID_ARG, "%s: parameters are not packed",
             d->ctx);
    p->dims = *dims;
    *dims += in->ndim;
    p->ndim = in->ndim;
    p->off = in->offset;
    p->nbytes = in->nbytes;
    d->bytes += in->nbytes;
    return SL_OK;
}

static sl_status pjrt_layout(void *ctx, const sl_device_layout *l, sl_err *err)
{
    pjrt_dev *d = ctx;
    SL_CHECK(!d->laid_out, err, SL_E_INVALID_ARG, "%s: layout given twice", d->ctx);
    const int32_t mesh = l->n_mesh > d->index ? l->n_mesh : d->index + 1;
    SL_TRY(pj_client_acquire(d->api, d->given, mesh, d->index, &d->client, err));
    d->device = d->client->devices[(size_t)d->index % d->client->n_devices];
    d->streaming = pj_api_has_streaming(d->api);
    d->raw = pj_api_has_raw_read(d->api);
    d->stats = pj_device_free_bytes(d->api, d->device, &d->free_before) == 0;
    d->free_after = d->free_before;
    d->cap = sl_max_u64(d->assembly_opt ? d->assembly_opt : d->staging / (uint64_t)(mesh > 0 ? mesh : 1),
                        PJ_MIN_CAP);
    SL_TRY(pj_alloc_params(d, l, err));
    char *name = d->names;
    int64_t *dims = d->dims;
    for (int64_t i = 0; i < l->n_params; i++)
        SL_TRY(pj_take_param(d, &l->params[i], &d->params[i], &name, &dims, err));
    d->n_params = l->n_params;
    d->laid_out = 1;
    return SL_OK;
}

static sl_status pjrt_alloc(void *ctx, uint64_t bytes, sl_err *err)
{
    pjrt_dev *d = ctx;
    SL_CHECK(d->laid_out, err, SL_E_INVALID_ARG,
             "%s: no parameter layout before alloc (the pjrt backend needs one)", d->ctx);
    SL_CHECK(bytes == d->bytes, err, SL_E_INVALID_ARG, "%s: alloc of %llu bytes, the parameters "
             "hold %llu", d->ctx, (unsigned long long)bytes, (unsigned long long)d->bytes);
    d->allocated = 1;
    d->cached = -1;
    d->n_left = d->n_params; /* the empty ones are done below */
    pthread_mutex_lock(&d->lock);
    sl_status st = pj_make_empty_buffers(d, err);
    if (st == SL_OK && d->n_params == 0)
        st = pj_complete(d, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* ---- free ----------------------------------------------------------------------------------- */

static void pjrt_free(void *ctx)
{
    pjrt_dev *d = ctx;
    sl_err ignored = {0};
    if (!d)
        return;
    if (d->api) {
        if (d->pin_ptr) /* freed without its unpin: the range is still mapped */
            pj_unpin_locked(d);
        (void)pj_fence_locked(d, &ignored);
        (void)pj_reap(d, 1, &ignored);
        for (int64_t i = 0; i < d->n_params; i++) {
            pj_destroy_tm(d->api, d->params[i].tm);
            pj_destroy_buffer(d->api, d->params[i].buf);
            free(d->params[i].host);
        }
        for (size_t i = 0; i < d->n_tms; i++)
            pj_destroy_tm(d->api, d->tms[i]);
        pj_events_free(d->api, &d->pending);
        for (unsigned i = 0; i < SL_DEVICE_MAX_MARKS; i++)
            pj_events_free(d->api, &d->marks[i]);
    }
    sl_err_clear(&ignored);
    pj_client_release(d->client);
    free(d->retiring);
    free(d->tms);
    free(d->cache);
    free(d->params);
    free(d->names);
    free(d->dims);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static const sl_device_async_ops pjrt_async_ops = {
    .pin = pjrt_pin,
    .unpin = pjrt_unpin,
    .fence = pjrt_fence,
    .mark = pjrt_mark,
    .wait_mark = pjrt_wait_mark,
    .write2d = pjrt_write2d,
};

static const sl_device_ops pjrt_ops = {
    .name = "pjrt",
    .alloc = pjrt_alloc,
    .write = pjrt_write,
    .zero = pjrt_zero,
    .read = pjrt_read,
    .allocated = pjrt_allocated,
    .free = pjrt_free,
    /* no host_ptr or device_ptr: the engine reaches the buffers through handle() */
    .mem_info = pjrt_mem_info,
    .gather_below = pjrt_gather_below,
    .layout = pjrt_layout,
    .handle = pjrt_handle,
    .async = &pjrt_async_ops,
};

/* ---- open ----------------------------------------------------------------------------------- */

static sl_status pj_open_api(const sl_load_opts *o, const PJRT_Api **api, PJRT_Client **given,
                             sl_err *err)
{
    *given = o ? o->pjrt_client : NULL;
    if (o && o->pjrt_api) {
        *api = o->pjrt_api;
        return pj_api_check(*api, "the PJRT_Api given (pjrt_api)", err);
    }
    SL_CHECK(!*given, err, SL_E_INVALID_ARG,
             "device 'pjrt': a client given (pjrt_client) needs its PJRT_Api (pjrt_api)");
    return pj_plugin_load(o ? o->pjrt_plugin : NULL, api, err);
}

sl_status sl_device_pjrt_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                              sl_device *out, sl_err *err)
{
    SL_CHECK(!segs && !sl_device_dest(o, index), err, SL_E_UNSUPPORTED,
             "device 'pjrt' keeps each parameter in a PJRT buffer of its own; it cannot load into "
             "the caller's memory (dest, param_dest)");
    const PJRT_Api *api = NULL;
    PJRT_Client *given = NULL;
    SL_TRY(pj_open_api(o, &api, &given, err));
    pjrt_dev *d = calloc(1, sizeof *d);
    if (!d)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    d->index = index;
    d->api = api;
    d->given = given;
    d->staging = o && o->staging_bytes ? o->staging_bytes : SL_STAGING_DEFAULT;
    d->assembly_opt = o ? o->pjrt_assembly : 0;
    d->no_dma_map = o && o->pjrt_dma_map < 0;
    d->cached = -1;
    snprintf(d->ctx, sizeof d->ctx, "pjrt device %d", (int)index);
    pthread_mutex_init(&d->lock, NULL);
    out->ops = &pjrt_ops;
    out->ctx = d;
    return SL_OK;
}
