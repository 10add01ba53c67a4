/* exec.c - the load executor's frame: check the plan, open and allocate one backend instance per
 * device, pre-fault device memory on a helper thread while the data arrives, fill (read or dummy),
 * and either hand back a complete model or free everything. A failed load never leaves a model
 * with devices: n_devices is 0 and only the message remains. */
#include "load/convert.h"
#include "load/load_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_bytes.h"

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
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    uint64_t row_bytes = 0, end = 0;
    SL_CHECK(op->param >= 0 && op->param < pd->n_params, err, SL_E_INVALID_ARG,
             "plan: device %d operation names parameter %lld of %lld", pd->index,
             (long long)op->param, (long long)pd->n_params);
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
    SL_CHECK(sl_convert_supported(p->dtype, op->src_dtype), err, SL_E_UNSUPPORTED,
             "plan: parameter '%s': no conversion from %s to %s", name,
             sl_dtype_name(op->src_dtype) ? sl_dtype_name(op->src_dtype) : "?",
             sl_dtype_name(p->dtype) ? sl_dtype_name(p->dtype) : "?");
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

/* ---- devices ------------------------------------------------------------------------------- */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static sl_status open_devices(sl_model *m, const sl_plan *p, int32_t first, int32_t count,
                              const sl_load_opts *o)
{
    m->devs = calloc((size_t)count + 1, sizeof *m->devs);
    if (!m->devs)
        return sl_err_set(&m->err, SL_E_NOMEM, "out of memory");
    m->n_devices = count;
    m->first_device = first;
    for (int32_t i = 0; i < count; i++) {
        const sl_plan_device *pd = &p->devices[first + i];
        sl_model_dev *md = &m->devs[i];
        md->n_params = pd->n_params;
        md->bytes = pd->bytes;
        md->param_off = calloc((size_t)pd->n_params + 1, sizeof *md->param_off);
        md->param_bytes = calloc((size_t)pd->n_params + 1, sizeof *md->param_bytes);
        if (!md->param_off || !md->param_bytes)
            return sl_err_set(&m->err, SL_E_NOMEM, "out of memory");
        for (int64_t k = 0; k < pd->n_params; k++) {
            md->param_off[k] = pd->params[k].offset;
            md->param_bytes[k] = pd->params[k].nbytes;
        }
        SL_TRY(sl_device_open(o->device, first + i, o, &md->dev, &m->err));
        SL_TRY(md->dev.ops->alloc(md->dev.ctx, pd->bytes, &m->err));
    }
    return SL_OK;
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
    for (int32_t d = 0; d < m->n_devices; d++) {
        sl_device_close(&m->devs[d].dev);
        free(m->devs[d].param_off);
        free(m->devs[d].param_bytes);
    }
    free(m->devs);
    m->devs = NULL;
    m->n_devices = 0;
}

/* ---- pre-faulting -------------------------------------------------------------------------- */

static void *prefault_main(void *arg)
{
    sl_prefault *j = arg;
    for (int32_t d = 0; d < j->m->n_devices && !j->stop; d++) {
        const sl_device *dev = &j->m->devs[d].dev;
        if (dev->ops->prefault)
            dev->ops->prefault(dev->ctx, &j->stop);
    }
    return NULL;
}

void sl_prefault_start(sl_prefault *j, const sl_model *m)
{
    j->m = m;
    j->stop = 0;
    j->running = pthread_create(&j->th, NULL, prefault_main, j) == 0;
}

void sl_prefault_stop(sl_prefault *j)
{
    j->stop = 1;
    if (j->running)
        pthread_join(j->th, NULL);
    j->running = 0;
}

/* ---- sl_load_files ------------------------------------------------------------------------- */

static sl_status load_run(sl_model *m, const sl_load_file *files, int64_t n_files, const sl_plan *p,
                          const sl_load_opts *o)
{
    SL_CHECK(p->n_devices > 0 && p->devices, &m->err, SL_E_INVALID_ARG, "plan has no devices");
    SL_CHECK(o->dummy || n_files >= p->n_files, &m->err, SL_E_INVALID_ARG,
             "plan reads %lld files, %lld given", (long long)p->n_files, (long long)n_files);
    SL_TRY(sl_load_check_plan(p, files, n_files, o->dummy, &m->err));
    SL_TRY(sl_load_open_devices(m, p, 0, p->n_devices, o));
    sl_prefault pf;
    sl_prefault_start(&pf, m);
    sl_status st = o->dummy ? sl_load_dummy(p, m->devs, o, &m->stats, &m->err)
                            : sl_load_read(files, n_files, p, m->devs, o, &m->stats, &m->err);
    sl_prefault_stop(&pf);
    return st;
}

sl_status sl_load_files(const sl_load_file *files, int64_t n_files, const sl_plan *p,
                        const sl_load_opts *o, sl_model **out)
{
    sl_load_opts defaults;
    if (!out)
        return SL_E_INVALID_ARG;
    *out = NULL;
    sl_model *m = sl_model_new();
    if (!m)
        return SL_E_NOMEM;
    *out = m;
    if (!o) {
        sl_load_opts_init(&defaults);
        o = &defaults;
    }
    if (!p)
        return sl_err_set(&m->err, SL_E_INVALID_ARG, "no plan");
    for (int64_t i = 0; files && i < n_files; i++)
        m->stats.checkpoint_bytes += files[i].size;
    const double t0 = now_seconds();
    sl_status st = load_run(m, files, n_files, p, o);
    m->stats.seconds = now_seconds() - t0;
    if (st != SL_OK)
        sl_load_drop_devices(m);
    return st;
}
