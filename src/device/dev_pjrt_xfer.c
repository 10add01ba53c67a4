/* dev_pjrt_xfer.c - the pjrt backend's transfers (dev_pjrt.h): a write reaches its parameter's
 * PJRT buffer directly, through an assembly block or through a transfer manager; a read comes
 * back with PJRT_Buffer_ToHostBuffer. Every function here runs with the device's lock held. */
#include "device/dev_pjrt.h"

#include "common/sl_bytes.h"
#include "common/sl_grow.h"
#include "common/sl_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PJ_ZERO_BYTES ((size_t)64 << 10)

static const unsigned char pj_zeros[PJ_ZERO_BYTES];

/* ---- small helpers -------------------------------------------------------------------------- */

/* "PJRT_X for parameter 'name'" */
static const char *pj_call(const pj_param *p, const char *call, char *buf, size_t len)
{
    char name[SL_TEXT_NAME];
    snprintf(buf, len, "%s for parameter '%s'", call, sl_text_name(p->name, name, sizeof name));
    return buf;
}

static sl_status pj_fail_param(pjrt_dev *d, const pj_param *p, PJRT_Error *e, const char *call,
                               sl_err *err)
{
    char what[SL_TEXT_NAME + 96];
    return pj_fail(d->api, e, NULL, err, d->ctx, pj_call(p, call, what, sizeof what));
}

static sl_status pj_finish_param(pjrt_dev *d, const pj_param *p, PJRT_Event *ev, const char *call,
                                 sl_err *err)
{
    char what[SL_TEXT_NAME + 96];
    return pj_event_finish(d->api, ev, err, d->ctx, pj_call(p, call, what, sizeof what));
}

/* An event whose host source is the engine's pinned staging waits for the next mark or fence;
 * any other source may be reused when the write returns, so its event is waited for now (and so
 * is one that the pending list has no room for: waiting is always safe). */
static sl_status pj_track(pjrt_dev *d, const pj_param *p, PJRT_Event *ev, int async,
                          const char *call, sl_err *err)
{
    sl_err full = {0};
    if (async && pj_events_push(&d->pending, (pj_pending){ev, call, p->name}, &full) == SL_OK)
        return SL_OK;
    sl_err_clear(&full);
    return pj_finish_param(d, p, ev, call, err);
}

void pj_destroy_buffer(const PJRT_Api *api, PJRT_Buffer *b)
{
    if (b) {
        PJRT_Buffer_Destroy_Args a = PJ_ARGS(PJRT_Buffer_Destroy_Args, buffer);
        a.buffer = b;
        pj_drop(api, api->Buffer_Destroy(&a));
    }
}

/* Blocks until the manager's transfers in flight are done. */
void pj_destroy_tm(const PJRT_Api *api, PJRT_AsyncHostToDeviceTransferManager *tm)
{
    if (tm) {
        PJRT_AsyncHostToDeviceTransferManager_Destroy_Args a =
            PJ_ARGS(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args, transfer_manager);
        a.transfer_manager = tm;
        pj_drop(api, api->AsyncHostToDeviceTransferManager_Destroy(&a));
    }
}

/* The parameter holding device byte off (< d->bytes): the last one starting at or before it,
 * which skips parameters of 0 bytes. */
static pj_param *pj_param_at(pjrt_dev *d, uint64_t off)
{
    int64_t lo = 0, hi = d->n_params;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (d->params[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return &d->params[lo - 1];
}

/* p in the routes, under the way it first went (a parameter the dummy fill reopens is not
 * counted twice). */
static void pj_count(pj_param *p, uint64_t *n, uint64_t *bytes)
{
    if (p->counted)
        return;
    p->counted = 1;
    ++*n;
    *bytes += p->nbytes;
}

static sl_status pj_param_done(pjrt_dev *d, pj_param *p, sl_err *err)
{
    p->state = PJ_DONE;
    return --d->n_left == 0 ? pj_complete(d, err) : SL_OK;
}

/* ---- completion ----------------------------------------------------------------------------- */

sl_status pj_reap(pjrt_dev *d, int wait, sl_err *err)
{
    sl_status st = SL_OK;
    size_t keep = 0;
    for (size_t i = 0; i < d->n_retiring; i++) {
        pj_block *b = &d->retiring[i];
        if (!wait && !pj_event_ready(d->api, b->done)) {
            d->retiring[keep++] = *b;
            continue;
        }
        char call[SL_TEXT_NAME + 96], name[SL_TEXT_NAME];
        snprintf(call, sizeof call, "PJRT_Client_BufferFromHostBuffer for parameter '%s'",
                 sl_text_name(b->name, name, sizeof name));
        const sl_status s = pj_event_finish(d->api, b->done, err, d->ctx, call);
        st = st == SL_OK ? s : st;
        free(b->host);
        d->assembly -= b->bytes;
    }
    d->n_retiring = keep;
    return st;
}

/* "direct 3 (1024 B, 3 uploads), assembled ..., streamed 2 (.. B, 40 transfers)" */
static void pj_routes(pjrt_dev *d)
{
    snprintf(d->routes, sizeof d->routes,
             "direct %llu (%llu B), assembled %llu (%llu B), streamed %llu (%llu B); "
             "%llu uploads, %llu transfers",
             (unsigned long long)d->n_direct, (unsigned long long)d->b_direct,
             (unsigned long long)d->n_assembled, (unsigned long long)d->b_assembled,
             (unsigned long long)d->n_streamed, (unsigned long long)d->b_streamed,
             (unsigned long long)d->n_uploads, (unsigned long long)d->n_transfers);
}

sl_status pj_complete(pjrt_dev *d, sl_err *err)
{
    SL_TRY(pj_reap(d, 1, err));
    for (size_t i = 0; i < d->n_tms; i++)
        pj_destroy_tm(d->api, d->tms[i]);
    d->n_tms = 0;
    if (d->stats && pj_device_free_bytes(d->api, d->device, &d->free_after) != 0)
        d->free_after = d->free_before;
    pj_routes(d);
    return SL_OK;
}

/* ---- direct: one BufferFromHostBuffer ------------------------------------------------------- */

static PJRT_Client_BufferFromHostBuffer_Args pj_bfhb_args(const pjrt_dev *d, const pj_param *p,
                                                          const void *data)
{
    PJRT_Client_BufferFromHostBuffer_Args a = PJ_ARGS(PJRT_Client_BufferFromHostBuffer_Args, buffer);
    a.client = d->client->client;
    a.data = data;
    a.type = p->type;
    a.dims = p->dims;
    a.num_dims = p->ndim;
    a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
    a.device = d->device;
    return a;
}

/* The whole parameter from data (strides: NULL for dense), into a new buffer. */
static sl_status pj_upload(pjrt_dev *d, pj_param *p, const void *data, const int64_t *strides,
                           int async, sl_err *err)
{
    PJRT_Client_BufferFromHostBuffer_Args a = pj_bfhb_args(d, p, data);
    a.byte_strides = strides;
    a.num_byte_strides = strides ? p->ndim : 0;
    PJRT_Error *e = d->api->Client_BufferFromHostBuffer(&a);
    if (e)
        return pj_fail_param(d, p, e, "PJRT_Client_BufferFromHostBuffer", err);
    p->buf = a.buffer;
    d->n_uploads++;
    pj_count(p, &d->n_direct, &d->b_direct);
    const sl_status st = pj_track(d, p, a.done_with_host_buffer, async,
                                  "PJRT_Client_BufferFromHostBuffer", err);
    if (st != SL_OK) { /* the copy failed: no buffer */
        pj_destroy_buffer(d->api, p->buf);
        p->buf = NULL;
        return st;
    }
    return pj_param_done(d, p, err);
}

sl_status pj_make_empty_buffers(pjrt_dev *d, sl_err *err)
{
    for (int64_t i = 0; i < d->n_params; i++)
        if (d->params[i].nbytes == 0)
            SL_TRY(pj_upload(d, &d->params[i], pj_zeros, NULL, 0, err));
    return SL_OK;
}

/* ---- assembled ------------------------------------------------------------------------------ */

static sl_status pj_assemble(pjrt_dev *d, pj_param *p, sl_err *err)
{
    SL_CHECK(p->nbytes <= SIZE_MAX, err, SL_E_NOMEM, "%s: parameter of %llu bytes", d->ctx,
             (unsigned long long)p->nbytes);
    p->host = malloc((size_t)p->nbytes);
    if (!p->host)
        return sl_err_set(err, SL_E_NOMEM, "%s: out of memory for a %llu-byte assembly block",
                          d->ctx, (unsigned long long)p->nbytes);
    d->assembly += p->nbytes;
    d->assembly_peak = sl_max_u64(d->assembly_peak, d->assembly);
    p->state = PJ_ASSEMBLING;
    p->got = 0;
    return SL_OK;
}

/* The block is complete: it becomes the buffer, and stays until the plugin has read it. */
static sl_status pj_assembled(pjrt_dev *d, pj_param *p, sl_err *err)
{
    pj_block *v = sl_grow(d->retiring, &d->cap_retiring, d->n_retiring, sizeof *v, 16);
    if (!v)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    d->retiring = v;
    PJRT_Client_BufferFromHostBuffer_Args a = pj_bfhb_args(d, p, p->host);
    PJRT_Error *e = d->api->Client_BufferFromHostBuffer(&a);
    if (e)
        return pj_fail_param(d, p, e, "PJRT_Client_BufferFromHostBuffer", err);
    p->buf = a.buffer;
    d->n_uploads++;
    pj_count(p, &d->n_assembled, &d->b_assembled);
    d->retiring[d->n_retiring++] = (pj_block){.host = p->host, .bytes = p->nbytes,
                                               .done = a.done_with_host_buffer, .name = p->name};
    p->host = NULL;
    return pj_param_done(d, p, err);
}

/* ---- streamed ------------------------------------------------------------------------------- */

/* Raw chunks are the device format only for a dense row-major layout (not TPU's tiles). */
static int pj_dense(pjrt_dev *d, const pj_param *p)
{
    PJRT_Buffer_GetMemoryLayout_Args a = PJ_ARGS(PJRT_Buffer_GetMemoryLayout_Args, layout);
    a.buffer = p->buf;
    PJRT_Error *e = d->api->Buffer_GetMemoryLayout(&a);
    if (e) {
        pj_drop(d->api, e);
        return 0;
    }
    const PJRT_Buffer_MemoryLayout_Tiled *t = &a.layout.tiled;
    if (a.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || t->num_tiles != 0 ||
        t->minor_to_major_size != p->ndim || (p->ndim && !t->minor_to_major))
        return 0;
    for (uint32_t k = 0; k < p->ndim; k++)
        if (t->minor_to_major[k] != (int64_t)(p->ndim - 1 - k))
            return 0;
    return 1;
}

static sl_status pj_default_memory(pjrt_dev *d, sl_err *err)
{
    if (d->memory)
        return SL_OK;
    PJRT_Device_DefaultMemory_Args a = PJ_ARGS(PJRT_Device_DefaultMemory_Args, memory);
    a.device = d->device;
    PJRT_Error *e = d->api->Device_DefaultMemory(&a);
    if (e)
        return pj_fail(d->api, e, NULL, err, d->ctx, "PJRT_Device_DefaultMemory");
    d->memory = a.memory;
    return SL_OK;
}

static sl_status pj_retrieve(pjrt_dev *d, pj_param *p, sl_err *err)
{
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args a =
        PJ_ARGS(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_out);
    a.transfer_manager = p->tm;
    a.buffer_index = 0;
    PJRT_Error *e = d->api->AsyncHostToDeviceTransferManager_RetrieveBuffer(&a);
    if (e)
        return pj_fail_param(d, p, e, "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer", err);
    p->buf = a.buffer_out;
    return SL_OK;
}

/* A transfer manager for p. When the buffer's layout is not dense the manager goes and the
 * device stops streaming (p stays empty). */
static sl_status pj_stream_open(pjrt_dev *d, pj_param *p, sl_err *err)
{
    SL_TRY(pj_default_memory(d, err));
    PJRT_ShapeSpec spec = PJ_ARGS(PJRT_ShapeSpec, element_type);
    spec.dims = p->dims;
    spec.num_dims = p->ndim;
    spec.element_type = p->type;
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args a =
        PJ_ARGS(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, transfer_manager);
    a.client = d->client->client;
    a.shape_specs = &spec;
    a.num_shape_specs = 1;
    a.memory = d->memory;
    PJRT_Error *e = d->api->Client_CreateBuffersForAsyncHostToDevice(&a);
    if (e)
        return pj_fail_param(d, p, e, "PJRT_Client_CreateBuffersForAsyncHostToDevice", err);
    p->tm = a.transfer_manager;
    sl_status st = pj_retrieve(d, p, err);
    if (st == SL_OK && pj_dense(d, p)) {
        p->state = PJ_STREAMING;
        p->got = 0;
        pj_count(p, &d->n_streamed, &d->b_streamed);
        return SL_OK;
    }
    pj_destroy_buffer(d->api, p->buf);
    pj_destroy_tm(d->api, p->tm);
    p->buf = NULL;
    p->tm = NULL;
    d->streaming = st == SL_OK ? 0 : d->streaming;
    return st;
}

static sl_status pj_tm_retire(pjrt_dev *d, pj_param *p, sl_err *err)
{
    PJRT_AsyncHostToDeviceTransferManager **v = sl_grow(d->tms, &d->cap_tms, d->n_tms, sizeof *v, 16);
    if (!v)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    d->tms = v;
    d->tms[d->n_tms++] = p->tm;
    p->tm = NULL;
    return pj_param_done(d, p, err);
}

static sl_status pj_stream(pjrt_dev *d, pj_param *p, uint64_t rel, const unsigned char *src,
                           uint64_t n, int async, sl_err *err)
{
    const char *call = "PJRT_AsyncHostToDeviceTransferManager_TransferData";
    PJRT_AsyncHostToDeviceTransferManager_TransferData_Args a =
        PJ_ARGS(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, done_with_h2d_transfer);
    a.transfer_manager = p->tm;
    a.buffer_index = 0;
    a.data = src;
    a.offset = (int64_t)rel;
    a.transfer_size = (int64_t)n;
    a.is_last_transfer = p->got + n == p->nbytes;
    PJRT_Error *e = d->api->AsyncHostToDeviceTransferManager_TransferData(&a);
    if (e)
        return pj_fail_param(d, p, e, call, err);
    d->n_transfers++;
    p->got += n;
    SL_TRY(pj_track(d, p, a.done_with_h2d_transfer, async, call, err));
    return a.is_last_transfer ? pj_tm_retire(d, p, err) : SL_OK;
}

/* ---- routing a write ------------------------------------------------------------------------ */

/* The first bytes of p that are not all of it: assembled while the device's blocks stay within
 * the bound, else streamed, else (no usable transfer manager) assembled after the blocks in
 * flight have been freed, even past the bound. */
static sl_status pj_begin(pjrt_dev *d, pj_param *p, sl_err *err)
{
    SL_TRY(pj_reap(d, 0, err));
    if (d->assembly + p->nbytes <= d->cap)
        return pj_assemble(d, p, err);
    if (d->streaming) {
        SL_TRY(pj_stream_open(d, p, err));
        if (p->state == PJ_STREAMING)
            return SL_OK;
    }
    SL_TRY(pj_reap(d, 1, err));
    return pj_assemble(d, p, err);
}

static sl_status pj_to_host(pjrt_dev *d, const pj_param *p, void *dst, sl_err *err);

/* A write to a parameter that is done (the dummy fill writes padding zeros over values): the
 * buffer comes back into an assembly block that lacks only the bytes being written. */
static sl_status pj_reopen(pjrt_dev *d, pj_param *p, uint64_t n, sl_err *err)
{
    SL_TRY(pj_assemble(d, p, err));
    const sl_status st = pj_to_host(d, p, p->host, err);
    if (st != SL_OK)
        return st; /* the block stays on p, freed with the device */
    pj_destroy_buffer(d->api, p->buf);
    p->buf = NULL;
    p->got = p->nbytes - n;
    d->n_left++;
    return SL_OK;
}

static sl_status pj_put(pjrt_dev *d, pj_param *p, uint64_t rel, const unsigned char *src,
                        uint64_t n, int async, sl_err *err)
{
    if (p->state == PJ_DONE)
        SL_TRY(pj_reopen(d, p, n, err));
    if (p->state == PJ_EMPTY && rel == 0 && n == p->nbytes)
        return pj_upload(d, p, src, NULL, async, err);
    if (p->state == PJ_EMPTY)
        SL_TRY(pj_begin(d, p, err));
    SL_CHECK(n <= p->nbytes - p->got, err, SL_E_INVALID_ARG,
             "%s: parameter '%s' written twice (%llu bytes more than its %llu)", d->ctx, p->name,
             (unsigned long long)(n - (p->nbytes - p->got)), (unsigned long long)p->nbytes);
    if (p->state == PJ_STREAMING)
        return pj_stream(d, p, rel, src, n, async, err);
    memcpy(p->host + rel, src, (size_t)n);
    p->got += n;
    return p->got == p->nbytes ? pj_assembled(d, p, err) : SL_OK;
}

sl_status pj_write_locked(pjrt_dev *d, uint64_t off, const unsigned char *src, uint64_t n,
                          int async, sl_err *err)
{
    if (!src) { /* zero(): from a static block of zeros, which never changes */
        for (uint64_t done = 0; done < n; done += PJ_ZERO_BYTES)
            SL_TRY(pj_write_locked(d, off + done, pj_zeros, sl_min_u64(PJ_ZERO_BYTES, n - done),
                                   0, err));
        return SL_OK;
    }
    while (n) {
        pj_param *p = pj_param_at(d, off);
        const uint64_t rel = off - p->off, m = sl_min_u64(n, p->nbytes - rel);
        SL_TRY(pj_put(d, p, rel, src, m, async, err));
        off += m;
        src += m;
        n -= m;
    }
    return SL_OK;
}

/* Byte strides of p's dimensions for rows `rows` of `width` bytes, pitch apart: the leading
 * dimensions make the rows, the trailing ones are dense. 0 when p's shape splits no such way. */
static int pj_row_strides(const pj_param *p, size_t width, size_t rows, size_t pitch,
                          int64_t *strides)
{
    uint64_t inner = p->es;
    for (uint32_t j = p->ndim; j-- > 1;) {
        inner *= (uint64_t)p->dims[j];
        if (inner != width)
            continue;
        uint64_t outer = 1;
        for (uint32_t k = 0; k < j; k++)
            outer *= (uint64_t)p->dims[k];
        if (outer != rows)
            return 0;
        strides[p->ndim - 1] = p->es;
        for (uint32_t k = p->ndim - 1; k-- > 0;)
            strides[k] = k == j - 1 ? (int64_t)pitch : strides[k + 1] * p->dims[k + 1];
        return 1;
    }
    return 0;
}

sl_status pj_write2d_locked(pjrt_dev *d, uint64_t dst_off, uint64_t dst_pitch,
                            const unsigned char *src, size_t src_pitch, size_t width, size_t rows,
                            int async, sl_err *err)
{
    pj_param *p = rows > 1 && width ? pj_param_at(d, dst_off) : NULL;
    int64_t strides[PJ_MAX_DIMS];
    if (p && p->state == PJ_EMPTY && p->off == dst_off && dst_pitch == width &&
        p->nbytes / width == rows && p->nbytes % width == 0 &&
        pj_row_strides(p, width, rows, src_pitch, strides))
        return pj_upload(d, p, src, strides, async, err);
    for (size_t r = 0; r < rows; r++)
        SL_TRY(pj_write_locked(d, dst_off + r * dst_pitch, src + r * src_pitch, width, async, err));
    return SL_OK;
}

/* ---- reading back --------------------------------------------------------------------------- */

/* The whole of p, row-major, into dst (p->nbytes bytes). */
static sl_status pj_to_host(pjrt_dev *d, const pj_param *p, void *dst, sl_err *err)
{
    int64_t minor_to_major[PJ_MAX_DIMS];
    for (uint32_t k = 0; k < p->ndim; k++)
        minor_to_major[k] = (int64_t)(p->ndim - 1 - k);
    PJRT_Buffer_MemoryLayout layout = PJ_ARGS(PJRT_Buffer_MemoryLayout, type);
    layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
    layout.tiled = (PJRT_Buffer_MemoryLayout_Tiled)PJ_ARGS(PJRT_Buffer_MemoryLayout_Tiled, num_tiles);
    layout.tiled.minor_to_major = minor_to_major;
    layout.tiled.minor_to_major_size = p->ndim;
    PJRT_Buffer_ToHostBuffer_Args a = PJ_ARGS(PJRT_Buffer_ToHostBuffer_Args, event);
    a.src = p->buf;
    a.host_layout = &layout;
    a.dst = dst;
    a.dst_size = (size_t)p->nbytes;
    PJRT_Error *e = d->api->Buffer_ToHostBuffer(&a);
    if (e)
        return pj_fail_param(d, p, e, "PJRT_Buffer_ToHostBuffer", err);
    return pj_finish_param(d, p, a.event, "PJRT_Buffer_ToHostBuffer", err);
}

/* Bytes [rel, rel + n) of p straight from its buffer with Buffer_CopyRawToHost, which copies the
 * on-device bytes: p's logical bytes only when its layout is dense row-major (asked once per
 * parameter; a failed query counts as not dense). *done 0 with SL_OK: not possible here, read the
 * whole parameter instead; that includes a plugin whose CopyRawToHost says UNIMPLEMENTED (the call
 * is optional), which this device then stops asking. Any other failure fails the read. */
static sl_status pj_read_raw(pjrt_dev *d, pj_param *p, uint64_t rel, unsigned char *dst,
                             uint64_t n, int *done, sl_err *err)
{
    *done = 0;
    if (d->raw && !p->raw) /* offsets travel as int64_t */
        p->raw = p->nbytes <= (uint64_t)INT64_MAX && pj_dense(d, p) ? 1 : -1;
    if (!d->raw || p->raw < 0)
        return SL_OK;
    const char *call = "PJRT_Buffer_CopyRawToHost";
    char what[SL_TEXT_NAME + 96];
    PJRT_Buffer_CopyRawToHost_Args a = PJ_ARGS(PJRT_Buffer_CopyRawToHost_Args, event);
    a.buffer = p->buf;
    a.dst = dst;
    a.offset = (int64_t)rel;       /* rel + n <= p->nbytes <= INT64_MAX (above) */
    a.transfer_size = (int64_t)n;
    PJRT_Error *e = d->api->Buffer_CopyRawToHost(&a);
    int code = -1;
    sl_err mine = {0};
    pj_call(p, call, what, sizeof what);
    const sl_status st = e ? pj_fail(d->api, e, &code, &mine, d->ctx, what)
                           : pj_event_finish_code(d->api, a.event, &code, &mine, d->ctx, what);
    *done = st == SL_OK;
    if (st != SL_OK && code == PJRT_Error_Code_UNIMPLEMENTED)
        d->raw = 0;
    else if (st != SL_OK)
        sl_err_copy(err, &mine);
    sl_err_clear(&mine);
    return d->raw ? st : SL_OK;
}

/* Part of p: straight from the buffer where the plugin can (pj_read_raw), else through a copy of
 * the whole parameter, kept while the reads walk through it (the checksums read 4 MiB at a time)
 * and dropped after its last byte. */
static sl_status pj_read_part(pjrt_dev *d, pj_param *p, uint64_t rel, unsigned char *dst,
                              uint64_t n, sl_err *err)
{
    const int64_t i = p - d->params;
    int done = 0;
    SL_TRY(pj_read_raw(d, p, rel, dst, n, &done, err));
    if (done)
        return SL_OK;
    if (d->cached != i) {
        free(d->cache);
        d->cached = -1;
        d->cache = malloc((size_t)p->nbytes);
        if (!d->cache)
            return sl_err_set(err, SL_E_NOMEM, "%s: out of memory reading back %llu bytes", d->ctx,
                              (unsigned long long)p->nbytes);
        SL_TRY(pj_to_host(d, p, d->cache, err));
        d->cached = i;
    }
    memcpy(dst, d->cache + rel, (size_t)n);
    if (rel + n == p->nbytes) {
        free(d->cache);
        d->cache = NULL;
        d->cached = -1;
    }
    return SL_OK;
}

sl_status pj_read_locked(pjrt_dev *d, uint64_t off, unsigned char *dst, uint64_t n, sl_err *err)
{
    while (n) {
        pj_param *p = pj_param_at(d, off);
        const uint64_t rel = off - p->off, m = sl_min_u64(n, p->nbytes - rel);
        if (p->state == PJ_ASSEMBLING)
            memcpy(dst, p->host + rel, (size_t)m);
        else if (p->state == PJ_DONE && rel == 0 && m == p->nbytes)
            SL_TRY(pj_to_host(d, p, dst, err));
        else if (p->state == PJ_DONE)
            SL_TRY(pj_read_part(d, p, rel, dst, m, err));
        else
            return sl_err_set(err, SL_E_INVALID_ARG, "%s: parameter '%s' is not loaded", d->ctx,
                              p->name);
        off += m;
        dst += m;
        n -= m;
    }
    return SL_OK;
}
