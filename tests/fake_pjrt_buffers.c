/* fake_pjrt_buffers.c - the host-memory PJRT plugin's buffers (fake_pjrt.c describes the plugin):
 * BufferFromHostBuffer (copied at the call or later, by the worker), the getters and the layout
 * (tiled with FAKE_PJRT_TILED), ToHostBuffer and CopyRawToHost read-backs (FAKE_PJRT_RAW), and the
 * async host-to-device transfer manager whose TransferData chunks are delayed the same way. */
#define _POSIX_C_SOURCE 200809L
#include "fake_pjrt.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers ---------------------------------------------------------------------------------- */

static const int fp_type_bytes[] = {[PJRT_Buffer_Type_PRED] = 1, [PJRT_Buffer_Type_S8] = 1,
    [PJRT_Buffer_Type_S16] = 2, [PJRT_Buffer_Type_S32] = 4, [PJRT_Buffer_Type_S64] = 8,
    [PJRT_Buffer_Type_U8] = 1, [PJRT_Buffer_Type_U16] = 2, [PJRT_Buffer_Type_U32] = 4,
    [PJRT_Buffer_Type_U64] = 8, [PJRT_Buffer_Type_F16] = 2, [PJRT_Buffer_Type_F32] = 4,
    [PJRT_Buffer_Type_F64] = 8, [PJRT_Buffer_Type_BF16] = 2, [PJRT_Buffer_Type_C64] = 8,
    [PJRT_Buffer_Type_F8E5M2] = 1, [PJRT_Buffer_Type_F8E4M3FN] = 1,
    [PJRT_Buffer_Type_F8E5M2FNUZ] = 1, [PJRT_Buffer_Type_F8E4M3FNUZ] = 1,
    [PJRT_Buffer_Type_F8E8M0FNU] = 1};

/* A new buffer of type/dims on device `device` of c, or NULL (g.mu held). */
static PJRT_Buffer *fp_buffer_new(PJRT_Client *c, int device, int type, const int64_t *dims,
                                  size_t ndim)
{
    const int ntypes = (int)(sizeof fp_type_bytes / sizeof fp_type_bytes[0]);
    if (type < 0 || type >= ntypes || !fp_type_bytes[type] || ndim > PJ_MAX_DIMS_FAKE)
        return NULL;
    size_t count = 1;
    for (size_t k = 0; k < ndim; k++) {
        if (dims[k] < 0)
            return NULL;
        count *= (size_t)dims[k];
    }
    PJRT_Buffer *b = fp_new(sizeof *b, FP_BUFFER);
    b->client = c;
    b->device = device;
    b->type = type;
    b->ndim = ndim;
    for (size_t k = 0; k < ndim; k++) {
        b->dims[k] = dims[k];
        b->minor_to_major[k] = (int64_t)(ndim - 1 - k);
    }
    b->bytes = count * (size_t)fp_type_bytes[type];
    b->data = calloc(1, b->bytes + 1);
    c->live_buffers++;
    return b;
}

static int fp_device_of(const PJRT_Client *c, const PJRT_Device *dev)
{
    for (int d = 0; d < c->n_devices; d++)
        if (dev == &c->dev[d])
            return d;
    return -1;
}

PJRT_Error *fp_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_BufferFromHostBuffer", PJRT_Client_BufferFromHostBuffer_Args, buffer);
    if (!fp_live(a->client, FP_CLIENT))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead client");
    const int dev = fp_device_of(a->client, a->device);
    if (dev < 0 || a->memory || a->device_layout || !a->data)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s",
                "BufferFromHostBuffer: bad device, memory, layout or data");
    if (a->byte_strides && a->num_byte_strides != a->num_dims)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "byte_strides count");
    PJRT_Buffer *b = fp_buffer_new(a->client, dev, a->type, a->dims, a->num_dims);
    if (!b)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "bad type or dims");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->src = a->data;
    j->n = b->bytes;
    j->strided = a->byte_strides != NULL;
    for (size_t k = 0; j->strided && k < a->num_dims; k++)
        j->strides[k] = a->byte_strides[k];
    g.bfhb++;
    g.bfhb_strided += j->strided;
    if (a->host_buffer_semantics == PJRT_HostBufferSemantics_kImmutableOnlyDuringCall) {
        (void)fp_gather(j, b->data); /* copied now: the host buffer is free on return */
        free(j);
        a->done_with_host_buffer = fp_ready_event();
    } else {
        j->hash = fp_gather(j, NULL);
        a->done_with_host_buffer = fp_queue(j);
    }
    a->buffer = b;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Buffer_Destroy(PJRT_Buffer_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    PJRT_Buffer *b = a->buffer;
    if (!fp_live(b, FP_BUFFER)) {
        fp_violation("%s", "Buffer_Destroy of a dead or unknown buffer");
    } else {
        b->client->live_buffers--;
        fp_kill(b);
        if (!b->jobs) {
            free(b->data);
            b->data = NULL;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

#define FP_BUFFER_ARG(name, T, last, field)                                     \
    pthread_mutex_lock(&g.mu);                                                  \
    FP_ENTER(name, T, last);                                                    \
    if (!fp_live(a->field, FP_BUFFER)) {                                        \
        fp_violation("%s", name " of a dead or unknown buffer");                \
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead buffer"); \
    }

PJRT_Error *fp_Buffer_ElementType(PJRT_Buffer_ElementType_Args *a)
{
    FP_BUFFER_ARG("Buffer_ElementType", PJRT_Buffer_ElementType_Args, type, buffer);
    a->type = a->buffer->type;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args *a)
{
    FP_BUFFER_ARG("Buffer_Dimensions", PJRT_Buffer_Dimensions_Args, num_dims, buffer);
    a->dims = a->buffer->dims;
    a->num_dims = a->buffer->ndim;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args *a)
{
    FP_BUFFER_ARG("Buffer_OnDeviceSizeInBytes", PJRT_Buffer_OnDeviceSizeInBytes_Args,
                  on_device_size_in_bytes, buffer);
    a->on_device_size_in_bytes = a->buffer->bytes;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args *a)
{
    static const int64_t tile[2] = {8, 128};
    static const size_t tile_sizes[1] = {2};
    FP_BUFFER_ARG("Buffer_GetMemoryLayout", PJRT_Buffer_GetMemoryLayout_Args, layout, buffer);
    memset(&a->layout, 0, sizeof a->layout);
    a->layout.struct_size = PJRT_STRUCT_SIZE(PJRT_Buffer_MemoryLayout, type);
    a->layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
    a->layout.tiled.struct_size = PJRT_STRUCT_SIZE(PJRT_Buffer_MemoryLayout_Tiled, num_tiles);
    a->layout.tiled.minor_to_major = a->buffer->minor_to_major;
    a->layout.tiled.minor_to_major_size = a->buffer->ndim;
    if (g.tiled) { /* as a TPU reports (8, 128) tiles */
        a->layout.tiled.tile_dims = tile;
        a->layout.tiled.tile_dim_sizes = tile_sizes;
        a->layout.tiled.num_tiles = 1;
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* NULL (the device layout) or dense row-major without tiles. */
static int fp_row_major(const PJRT_Buffer_MemoryLayout *l, size_t ndim)
{
    if (!l)
        return 1;
    if (l->type != PJRT_Buffer_MemoryLayout_Type_Tiled || l->tiled.num_tiles ||
        l->tiled.minor_to_major_size != ndim)
        return 0;
    for (size_t k = 0; k < ndim; k++)
        if (l->tiled.minor_to_major[k] != (int64_t)(ndim - 1 - k))
            return 0;
    return 1;
}

PJRT_Error *fp_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args *a)
{
    FP_BUFFER_ARG("Buffer_ToHostBuffer", PJRT_Buffer_ToHostBuffer_Args, event, src);
    PJRT_Buffer *b = a->src;
    if (!a->dst) {
        a->dst_size = b->bytes;
        pthread_mutex_unlock(&g.mu);
        return NULL;
    }
    if (b->incomplete)
        FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "buffer never completed");
    if (!fp_row_major(a->host_layout, b->ndim) || a->dst_size < b->bytes)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "ToHostBuffer: layout or size");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->dst = a->dst;
    j->n = b->bytes;
    a->event = fp_queue(j);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Raw on-device bytes [offset, offset + transfer_size), delayed like ToHostBuffer. With a tiled
 * layout (FAKE_PJRT_TILED) they come back in another order than row-major, as a TPU's tiles do, so
 * a backend that reads them as logical bytes gets wrong ones. */
PJRT_Error *fp_Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args *a)
{
    FP_BUFFER_ARG("Buffer_CopyRawToHost", PJRT_Buffer_CopyRawToHost_Args, event, buffer);
    PJRT_Buffer *b = a->buffer;
    if (!g.raw)
        FP_FAIL(PJRT_Error_Code_UNIMPLEMENTED, "fake_pjrt: %s", "CopyRawToHost not implemented");
    if (b->incomplete)
        FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "buffer never completed");
    if (!a->dst || a->offset < 0 || a->transfer_size < 0 ||
        (uint64_t)a->offset + (uint64_t)a->transfer_size > b->bytes)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "CopyRawToHost out of range");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->dst = a->dst;
    j->off = (size_t)a->offset;
    j->n = (size_t)a->transfer_size;
    j->scramble = g.tiled;
    a->event = fp_queue(j);
    g.raw_reads++;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* ---- the async host-to-device transfer manager ------------------------------------------------ */

PJRT_Error *fp_CreateBuffersForAsyncHostToDevice(
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_CreateBuffersForAsyncHostToDevice",
             PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, transfer_manager);
    if (!fp_live(a->client, FP_CLIENT) || !a->memory || a->num_shape_specs != 1 ||
        a->shape_specs[0].struct_size < PJRT_STRUCT_SIZE(PJRT_ShapeSpec, element_type))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s",
                "CreateBuffersForAsyncHostToDevice: client, memory or one shape spec");
    const PJRT_ShapeSpec *s = &a->shape_specs[0];
    PJRT_Buffer *b = fp_buffer_new(a->client, a->memory->device, s->element_type, s->dims,
                                   s->num_dims);
    if (!b)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "bad shape spec");
    b->incomplete = 1;
    PJRT_AsyncHostToDeviceTransferManager *tm = fp_new(sizeof *tm, FP_TM);
    tm->buf = b;
    a->transfer_manager = tm;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

#define FP_TM_ARG(name, T, last)                                               \
    pthread_mutex_lock(&g.mu);                                                 \
    FP_ENTER(name, T, last);                                                   \
    if (!fp_live(a->transfer_manager, FP_TM)) {                                \
        fp_violation("%s", name " of a dead or unknown transfer manager");     \
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead manager"); \
    }

PJRT_Error *fp_TM_RetrieveBuffer(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args *a)
{
    FP_TM_ARG("AsyncHostToDeviceTransferManager_RetrieveBuffer",
              PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_out);
    PJRT_AsyncHostToDeviceTransferManager *tm = a->transfer_manager;
    if (a->buffer_index != 0 || tm->retrieved)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "buffer retrieved twice");
    tm->retrieved = 1;
    a->buffer_out = tm->buf;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_TM_TransferData(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args *a)
{
    FP_TM_ARG("AsyncHostToDeviceTransferManager_TransferData",
              PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, done_with_h2d_transfer);
    PJRT_AsyncHostToDeviceTransferManager *tm = a->transfer_manager;
    PJRT_Buffer *b = tm->buf;
    if (tm->closed) {
        fp_violation("%s", "TransferData after the last transfer");
        FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "transfer after the last");
    }
    if (a->buffer_index != 0 || a->offset < 0 || a->transfer_size < 0 || !a->data ||
        (uint64_t)a->offset + (uint64_t)a->transfer_size > b->bytes)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "TransferData out of range");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->tm = tm;
    j->src = a->data;
    j->off = (size_t)a->offset;
    j->n = (size_t)a->transfer_size;
    j->hash = fp_gather(j, NULL);
    a->done_with_h2d_transfer = fp_queue(j);
    g.transfers++;
    if (a->is_last_transfer) {
        tm->closed = 1;
        b->incomplete = 0;
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Blocks until the manager's transfers in flight are done, as the real one does. */
PJRT_Error *fp_TM_Destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    PJRT_AsyncHostToDeviceTransferManager *tm = a->transfer_manager;
    if (!fp_live(tm, FP_TM)) {
        fp_violation("%s", "transfer manager destroyed twice or unknown");
    } else {
        while (tm->jobs)
            pthread_cond_wait(&g.cv, &g.mu);
        if (!tm->retrieved && fp_live(tm->buf, FP_BUFFER)) { /* its buffer goes with it */
            tm->buf->client->live_buffers--;
            fp_kill(tm->buf);
            free(tm->buf->data);
            tm->buf->data = NULL;
        }
        fp_kill(tm);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}
