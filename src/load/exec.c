/* exec.c - the load executor's frame: check the plan, open and allocate one backend instance per
 * device, pre-fault device memory on a helper thread while the data arrives, fill (read or dummy),
 * and either hand back a complete model or free everything. A failed load never leaves a model
 * with devices: n_devices is 0 and only the message remains. */
#include "load/convert.h"
#include "load/engine.h"
#include "plan/plan_data.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sl_bytes.h"
#include "common/sl_grow.h"
#include "common/sl_text.h"
#include "common/sl_vm.h"

/* ---- plan checks --------------------------------------------------------------------------- */

/* Last byte + 1 of a strided region: off + (rows-1)*stride + row_bytes, overflow-checked. */
static int region_end(uint64_t off, uint64_t rows, uint64_t stride, uint64_t row_bytes, uint64_t *end)
{
    uint64_t span = 0;
    if (rows == 0) {
        *end = off;
        return 0;
    }
    if (sl_mul_overflow(rows - 1, stride, &span) || sl_add_overflow(off, span, &span) ||
        sl_add_overflow(span, row_bytes, end))
        return -1;
    return 0;
}

static sl_status check_op_dst(const sl_plan *p, const sl_plan_device *pd, const sl_op *op, sl_err *err)
{
    (void)p;
    uint64_t row_bytes = 0, end = 0;
    SL_CHECK(op->param >= 0 && op->param < pd->n_params, err, SL_E_INVALID_ARG,
             "plan: device %d operation names parameter %lld of %lld", pd->index,
             (long long)op->param, (long long)pd->n_params);
    const uint64_t es = sl_dtype_bits(pd->params[op->param].dtype) / 8;
    const uint64_t p_off = pd->params[op->param].offset, p_bytes = pd->params[op->param].nbytes;
    const uint64_t stride = op->kind == SL_OP_ZERO ? op->row_elems * es : op->dst_stride;
    SL_CHECK(!sl_mul_overflow(op->row_elems, es, &row_bytes) &&
                 !region_end(op->dst_offset, op->rows, stride, row_bytes, &end) &&
                 op->dst_offset >= p_off && end <= p_off + p_bytes &&
                 (op->rows <= 1 || stride >= row_bytes),
             err, SL_E_INVALID_ARG, "plan: device %d operation outside parameter '%s'", pd->index,
             pd->params[op->param].name);
    return SL_OK;
}

static sl_status check_op_src(const sl_plan *p, const sl_plan_device *pd, const sl_op *op,
                              const sl_load_file *files, int64_t n_files, int dummy, sl_err *err)
{
    const char *name = pd->params[op->param].name;
    const sl_dtype ddt = pd->params[op->param].dtype;
    SL_CHECK(sl_convert_supported(ddt, op->src_dtype), err, SL_E_UNSUPPORTED,
             "plan: parameter '%s': no conversion from %s to %s", name,
             sl_dtype_name(op->src_dtype) ? sl_dtype_name(op->src_dtype) : "?",
             sl_dtype_name(ddt) ? sl_dtype_name(ddt) : "?");
    SL_CHECK(!dummy || ddt == p->dtype, err, SL_E_UNSUPPORTED, "plan: parameter '%s' is %s: dummy "
             "weights are for the plan's dtype only", name, sl_dtype_name(ddt) ? sl_dtype_name(ddt) : "?");
    if (dummy)
        return SL_OK;
    SL_CHECK(op->file >= 0, err, SL_E_INVALID_ARG,
             "plan has no checkpoint for parameter '%s' (only dummy loads can run it)", name);
    SL_CHECK(op->file < n_files, err, SL_E_INVALID_ARG, "plan: parameter '%s' reads file %d of %lld",
             name, op->file, (long long)n_files);
    uint64_t row_bytes = 0, end = 0;
    SL_CHECK(!sl_mul_overflow(op->row_elems, sl_dtype_bits(op->src_dtype) / 8, &row_bytes) &&
                 !region_end(op->src_offset, op->rows, op->src_stride, row_bytes, &end) &&
                 end <= files[op->file].size && (op->rows <= 1 || op->src_stride >= row_bytes),
             err, SL_E_INVALID_ARG, "plan: parameter '%s' reads outside %s", name, files[op->file].path);
    return SL_OK;
}

sl_status sl_load_check_plan(const sl_plan *p, const sl_load_file *files, int64_t n_files, int dummy,
                             sl_err *err)
{
    for (int32_t d = 0; d < p->n_devices; d++) {
        const sl_plan_device *pd = &p->devices[d];
        uint64_t sum = 0;
        for (int64_t i = 0; i < pd->n_params; i++) {
            SL_CHECK(pd->params[i].offset == sum && !sl_add_overflow(sum, pd->params[i].nbytes, &sum),
                     err, SL_E_INVALID_ARG, "plan: device %d parameters are not packed", d);
        }
        SL_CHECK(sum == pd->bytes, err, SL_E_INVALID_ARG, "plan: device %d bytes %llu != %llu", d,
                 (unsigned long long)pd->bytes, (unsigned long long)sum);
        for (int64_t k = 0; k < pd->n_ops; k++) {
            SL_TRY(check_op_dst(p, pd, &pd->ops[k], err));
            if (pd->ops[k].kind == SL_OP_COPY)
                SL_TRY(check_op_src(p, pd, &pd->ops[k], files, n_files, dummy, err));
        }
    }
    return SL_OK;
}

/* ---- padding ------------------------------------------------------------------------------- */

/* A backend's own host memory is fresh anonymous memory, zero already; other memory (cudaMalloc,
 * file devices, the caller's dest) is not, nor memory written before (the dummy fill). */
sl_status sl_load_zero_pads(const sl_plan *p, const sl_model_dev *devs, const unsigned char *local,
                            int written, sl_err *err)
{
    for (int32_t d = 0; d < p->n_devices; d++) {
        const sl_plan_device *pd = &p->devices[d];
        const sl_device *dev = &devs[d].dev;
        if ((local && !local[d]) || (!written && sl_device_zeroed(dev)))
            continue;
        for (int64_t k = 0; k < pd->n_ops; k++) {
            const sl_op *op = &pd->ops[k];
            const uint64_t es = sl_dtype_bits(pd->params[op->param].dtype) / 8;
            if (op->kind == SL_OP_ZERO && op->rows && op->row_elems)
                SL_TRY(sl_device_zero(dev, op->dst_offset, op->rows * op->row_elems * es, err));
        }
    }
    return SL_OK;
}

/* ---- devices ------------------------------------------------------------------------------- */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The caller's per-parameter blocks for mesh device `index` (opts.param_dest), checked: every
 * parameter with bytes has one, and the device is not also given whole (opts.dest). */
static sl_status dev_segs(const sl_plan_device *pd, const sl_model_dev *md, const sl_load_opts *o,
                          sl_device_segs *segs, sl_err *err)
{
    void *const *ptr = o->param_dest[pd->index];
    SL_CHECK(!sl_device_dest(o, pd->index), err, SL_E_INVALID_ARG,
             "device %d has both a buffer (dest) and per-parameter destinations (param_dest)",
             pd->index);
    for (int64_t k = 0; k < pd->n_params; k++)
        SL_CHECK(ptr[k] || !pd->params[k].nbytes, err, SL_E_INVALID_ARG,
                 "device %d: no destination for parameter '%s' (%llu bytes)", pd->index,
                 pd->params[k].name, (unsigned long long)pd->params[k].nbytes);
    *segs = (sl_device_segs){.n = pd->n_params, .off = md->param_off, .len = md->param_bytes,
                             .ptr = ptr};
    return SL_OK;
}

static int has_param_dest(const sl_load_opts *o, int32_t index)
{
    return o->param_dest && index >= 0 && index < o->n_param_dest && o->param_dest[index];
}

/* Device d's parameters, for backends that keep a buffer per parameter (pjrt); the mesh size is
 * tp * pp, also in a view of some of its devices. */
static sl_status describe_device(const sl_device *dev, const sl_plan *p, int32_t d, sl_err *err)
{
    const int64_t n = p->devices[d].n_params;
    sl_param_info *params = calloc((size_t)n + 1, sizeof *params);
    if (!params)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t k = 0; k < n; k++)
        (void)sl_plan_param(p, d, k, &params[k]);
    const sl_device_layout l = {.n_mesh = p->tp * p->pp, .n_params = n, .params = params};
    const sl_status st = sl_device_set_layout(dev, &l, err);
    free(params);
    return st;
}

static sl_status open_device(sl_model_dev *md, const sl_plan *p, int32_t d, const sl_load_opts *o,
                             sl_err *err)
{
    const sl_plan_device *pd = &p->devices[d];
    md->n_params = pd->n_params;
    md->bytes = pd->bytes;
    md->param_off = calloc((size_t)pd->n_params + 1, sizeof *md->param_off);
    md->param_bytes = calloc((size_t)pd->n_params + 1, sizeof *md->param_bytes);
    if (!md->param_off || !md->param_bytes)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t k = 0; k < pd->n_params; k++) {
        md->param_off[k] = pd->params[k].offset;
        md->param_bytes[k] = pd->params[k].nbytes;
    }
    sl_device_segs segs, *use = NULL;
    if (has_param_dest(o, pd->index)) {
        SL_TRY(dev_segs(pd, md, o, &segs, err));
        md->param_ptr = calloc((size_t)pd->n_params + 1, sizeof *md->param_ptr);
        if (!md->param_ptr)
            return sl_err_set(err, SL_E_NOMEM, "out of memory");
        memcpy(md->param_ptr, segs.ptr, (size_t)pd->n_params * sizeof *md->param_ptr);
        use = &segs;
    }
    SL_TRY(sl_device_open(o->device, pd->index, o, use, &md->dev, err));
    SL_TRY(describe_device(&md->dev, p, d, err));
    return sl_device_alloc(&md->dev, pd->bytes, err);
}

/* One block of caller memory a load writes: a device's (dest) or a parameter's (param_dest). */
typedef struct dest_block {
    uintptr_t at;
    uint64_t bytes;
    int32_t device;
    const char *param;           /* NULL: the device's whole buffer */
} dest_block;

static int dest_cmp(const void *a, const void *b)
{
    const dest_block *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

static void dest_name(const dest_block *b, char *out, size_t len)
{
    char nb[SL_TEXT_NAME];
    if (b->param)
        snprintf(out, len, "device %d's parameter '%s'", b->device, sl_text_name(b->param, nb, sizeof nb));
    else
        snprintf(out, len, "device %d's buffer (dest)", b->device);
}

/* The plan's devices among [first, first + count) that write the caller's memory (dest,
 * param_dest), the only ones both checks below look at: *sel (count + 1 entries, freed by the
 * caller) holds their plan indices, *n how many. */
static sl_status select_dest_devices(const sl_plan *p, int32_t first, int32_t count,
                                     const sl_load_opts *o, int32_t **sel, int32_t *n, sl_err *err)
{
    *n = 0;
    *sel = calloc((size_t)count + 1, sizeof **sel);
    if (!*sel)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int32_t d = first; d < first + count; d++)
        if (has_param_dest(o, p->devices[d].index) || sl_device_dest(o, p->devices[d].index))
            (*sel)[(*n)++] = d;
    return SL_OK;
}

/* The caller's blocks of the selected devices, each checked against the next by address: two
 * that share memory (one tensor under two names, overlapping views) would each get the other's
 * bytes over part of theirs, and the load would succeed with wrong weights. */
static sl_status check_dest_overlap(const sl_plan *p, const int32_t *sel, int32_t n_sel,
                                    const sl_load_opts *o, sl_err *err)
{
    size_t n = 0, cap = 0;
    dest_block *v = NULL;
    sl_status st = SL_OK;
    for (int32_t i = 0; i < n_sel && st == SL_OK; i++) {
        const sl_plan_device *pd = &p->devices[sel[i]];
        void *const *ptr = has_param_dest(o, pd->index) ? o->param_dest[pd->index] : NULL;
        void *whole = sl_device_dest(o, pd->index);
        for (int64_t k = 0; k < (ptr ? pd->n_params : (whole ? 1 : 0)) && st == SL_OK; k++) {
            const uint64_t bytes = ptr ? pd->params[k].nbytes : pd->bytes;
            if (!bytes || (ptr && !ptr[k]))
                continue;
            dest_block *w = sl_grow(v, &cap, n, sizeof *v, 64);
            if (!w) {
                st = sl_err_set(err, SL_E_NOMEM, "out of memory");
                break;
            }
            v = w;
            v[n++] = (dest_block){.at = (uintptr_t)(ptr ? ptr[k] : whole), .bytes = bytes,
                                  .device = pd->index, .param = ptr ? pd->params[k].name : NULL};
        }
    }
    if (st == SL_OK && n > 1)
        qsort(v, n, sizeof *v, dest_cmp);
    for (size_t i = 1; st == SL_OK && i < n; i++) {
        if (v[i].at - v[i - 1].at >= v[i - 1].bytes)
            continue;
        char a[SL_TEXT_NAME + 48], b[SL_TEXT_NAME + 48];
        dest_name(&v[i - 1], a, sizeof a);
        dest_name(&v[i], b, sizeof b);
        st = sl_err_set(err, SL_E_INVALID_ARG, "the destinations of %s and %s overlap (%llu bytes "
                        "at %p and %llu at %p): each needs memory of its own", a, b,
                        (unsigned long long)v[i - 1].bytes, (void *)v[i - 1].at,
                        (unsigned long long)v[i].bytes, (void *)v[i].at);
    }
    free(v);
    return st;
}

/* The caller's host memory the selected devices write, checked writable: a tensor over a
 * read-only mapping (torch.from_numpy of a read-only memmap) would kill the process at the first
 * byte copied into it. Memory of other devices (a GPU's) is left to their backends. */
static sl_status check_dest_writable(const sl_model *m, const sl_plan *p, const int32_t *sel,
                                     int32_t n_sel, sl_err *err)
{
    sl_vm_maps vm = {0};
    sl_status st = n_sel > 0 ? sl_vm_maps_read(&vm, err) : SL_OK;
    for (int32_t i = 0; i < n_sel && st == SL_OK; i++) {
        const sl_plan_device *pd = &p->devices[sel[i]];
        const sl_device *dev = &m->devs[sel[i] - m->first_device].dev;
        for (int64_t k = 0; k < pd->n_params && st == SL_OK; k++) {
            const sl_plan_param_t *q = &pd->params[k];
            const void *h = q->nbytes ? sl_device_host_at(dev, q->offset, q->nbytes) : NULL;
            if (!h || sl_vm_writable(&vm, h, q->nbytes))
                continue;
            char nb[SL_TEXT_NAME];
            st = sl_err_set(err, SL_E_INVALID_ARG, "device %d: the destination of parameter '%s' "
                            "(%llu bytes at %p) is memory this process may not write (a read-only "
                            "mapping, or none)", pd->index, sl_text_name(q->name, nb, sizeof nb),
                            (unsigned long long)q->nbytes, h);
        }
    }
    sl_vm_maps_free(&vm);
    return st;
}

static sl_status open_devices(sl_model *m, const sl_plan *p, int32_t first, int32_t count,
                              const sl_load_opts *o)
{
    int32_t *sel = NULL, n_sel = 0;
    sl_status st = select_dest_devices(p, first, count, o, &sel, &n_sel, &m->err);
    if (st == SL_OK)
        st = check_dest_overlap(p, sel, n_sel, o, &m->err);
    if (st == SL_OK && !(m->devs = calloc((size_t)count + 1, sizeof *m->devs)))
        st = sl_err_set(&m->err, SL_E_NOMEM, "out of memory");
    if (st == SL_OK) {
        m->n_devices = count;
        m->first_device = first;
    }
    for (int32_t i = 0; i < count && st == SL_OK; i++)
        st = open_device(&m->devs[i], p, first + i, o, &m->err);
    if (st == SL_OK)
        st = check_dest_writable(m, p, sel, n_sel, &m->err);
    free(sel);
    return st;
}

/* Timed apart from the reads: for cuda it includes the runtime's and the context's start-up, a
 * fixed cost of the process that benchmarks report separately. */
sl_status sl_load_open_devices(sl_model *m, const sl_plan *p, int32_t first, int32_t count,
                               const sl_load_opts *o)
{
    const double t0 = now_seconds();
    sl_status st = open_devices(m, p, first, count, o);
    m->stats.setup_seconds = now_seconds() - t0;
    return st;
}

/* Frees every device: what a failed load leaves behind is the message only. */
void sl_load_drop_devices(sl_model *m)
{
    for (int32_t d = 0; m->devs && d < m->n_devices; d++) {
        sl_device_close(&m->devs[d].dev);
        free(m->devs[d].param_off);
        free(m->devs[d].param_bytes);
        free(m->devs[d].param_ptr);
    }
    free(m->devs);
    free(m->mesh_index);
    m->devs = NULL;
    m->mesh_index = NULL;
    m->n_devices = 0;
}

/* ---- pre-faulting -------------------------------------------------------------------------- */

static void *prefault_main(void *arg)
{
    sl_prefault *j = arg;
    /* relaxed: the flag only asks the helper to stop soon; it publishes no data */
    for (int32_t d = 0; d < j->m->n_devices; d++) {
        if (atomic_load_explicit(&j->stop, memory_order_relaxed))
            break;
        sl_device_prefault(&j->m->devs[d].dev, &j->stop);
    }
    return NULL;
}

void sl_prefault_start(sl_prefault *j, const sl_model *m)
{
    j->m = m;
    atomic_init(&j->stop, 0);
    j->running = pthread_create(&j->th, NULL, prefault_main, j) == 0;
}

void sl_prefault_stop(sl_prefault *j)
{
    atomic_store_explicit(&j->stop, 1, memory_order_relaxed);
    if (j->running)
        pthread_join(j->th, NULL);
    j->running = 0;
}

/* ---- sl_load_files ------------------------------------------------------------------------- */

/* Remembers which mesh device each local device is, when they were chosen. */
static sl_status load_mesh_index(sl_model *m, const sl_load_job *j)
{
    if (!j->opts.devices)
        return SL_OK;
    const int32_t n = sl_load_job_device_count(j);
    m->mesh_index = calloc((size_t)n, sizeof *m->mesh_index);
    if (!m->mesh_index)
        return sl_err_set(&m->err, SL_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++)
        m->mesh_index[i] = sl_load_job_mesh_index(j, i);
    return SL_OK;
}

static sl_status load_run(sl_model *m, sl_load_job *j, const sl_plan *p)
{
    SL_TRY(sl_load_job_plan(j, p, &m->err));
    SL_TRY(sl_load_job_devices(j, j->opts.devices, j->opts.n_devices, &m->err));
    /* a caller's opener is given mesh indices: it opens a job of the whole mesh */
    SL_CHECK(!j->open || !j->opts.devices, &m->err, SL_E_INVALID_ARG,
             "devices: these devices load the whole mesh");
    const int32_t n = sl_load_job_device_count(j);
    sl_status st = j->open ? j->open(j->open_user, m, j->view, 0, n, &j->opts)
                           : sl_load_open_devices(m, j->view, 0, n, &j->opts);
    if (st == SL_OK)
        st = load_mesh_index(m, j);
    if (st == SL_OK) {
        sl_prefault pf;
        sl_prefault_start(&pf, m);
        st = sl_load_job_fill(j, m->devs, &m->stats, &m->err);
        sl_prefault_stop(&pf);
    }
    return st;
}

sl_status sl_load_job_run(sl_load_job *j, const sl_plan *p, sl_model **out)
{
    if (!out)
        return SL_E_INVALID_ARG;
    *out = NULL;
    sl_model *m = sl_model_new();
    if (!m)
        return SL_E_NOMEM;
    *out = m;
    if (!p)
        return sl_err_set(&m->err, SL_E_INVALID_ARG, "no plan");
    m->stats.checkpoint_bytes = j->checkpoint_bytes;
    const double t0 = now_seconds();
    sl_status st = load_run(m, j, p);
    m->stats.seconds = now_seconds() - t0;
    if (st != SL_OK)
        sl_load_drop_devices(m);
    return st;
}

sl_status sl_load_files(const sl_load_file *files, int64_t n_files, const sl_plan *p,
                        const sl_load_opts *o, sl_model **out)
{
    sl_load_job j;
    sl_load_job_init(&j, o);
    sl_load_job_use_files(&j, files, n_files);
    const sl_status st = sl_load_job_run(&j, p, out);
    sl_load_job_free(&j);
    return st;
}
