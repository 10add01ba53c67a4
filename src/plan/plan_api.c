/* plan_api.c - the public getters of a plan (shardload.h, "placement plans"). */
#include "plan/plan_data.h"

#include "common/sl_strbuf.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *sl_plan_errmsg(const sl_plan *p)
{
    return p ? sl_err_msg(&p->err) : "out of memory";
}

/* Getters take a NULL plan (a failed build's out of memory) as a plan of nothing. */
sl_layout sl_plan_layout(const sl_plan *p)
{
    return p ? p->layout : SL_LAYOUT_TP;
}

int32_t sl_plan_tp(const sl_plan *p)
{
    return p ? p->tp : 0;
}

int32_t sl_plan_pp(const sl_plan *p)
{
    return p ? p->pp : 0;
}

int32_t sl_plan_ep(const sl_plan *p)
{
    return p ? p->ep : 0;
}

sl_dtype sl_plan_dtype(const sl_plan *p)
{
    return p ? p->dtype : (sl_dtype)-1;
}

int32_t sl_plan_device_count(const sl_plan *p)
{
    return p && p->devices ? p->n_devices : 0;
}

static const sl_plan_device *plan_device(const sl_plan *p, int32_t dev)
{
    return p && p->devices && dev >= 0 && dev < p->n_devices ? &p->devices[dev] : NULL;
}

int64_t sl_plan_param_count(const sl_plan *p, int32_t dev)
{
    const sl_plan_device *d = plan_device(p, dev);
    return d ? d->n_params : 0;
}

sl_status sl_plan_param(const sl_plan *p, int32_t dev, int64_t i, sl_param_info *out)
{
    const sl_plan_device *d = plan_device(p, dev);
    if (d == NULL || out == NULL || i < 0 || i >= d->n_params)
        return SL_E_INVALID_ARG;
    const sl_plan_param_t *pp = &d->params[i];
    memset(out, 0, sizeof(*out));
    out->name = pp->name;
    out->dtype = pp->dtype;
    out->ndim = pp->ndim;
    out->shape = pp->shape;
    out->nbytes = pp->nbytes;
    out->offset = pp->offset;
    return SL_OK;
}

uint64_t sl_plan_device_bytes(const sl_plan *p, int32_t dev)
{
    const sl_plan_device *d = plan_device(p, dev);
    return d ? d->bytes : 0;
}

sl_status sl_plan_stage_layers(const sl_plan *p, int32_t stage, int64_t *first, int64_t *count)
{
    const int ok = p && p->stage_start && stage >= 0 && stage < p->pp;
    if (first)
        *first = ok ? p->stage_start[stage] : 0;
    if (count)
        *count = ok ? p->stage_start[stage + 1] - p->stage_start[stage] : 0;
    return ok ? SL_OK : SL_E_INVALID_ARG;
}

char *sl_plan_partition_text(const sl_plan *p)
{
    if (!p->stage_start)
        return NULL;
    sl_strbuf b = {0};
    for (int32_t s = 0; s < p->pp; s++)
        sl_strbuf_printf(&b, "%s%" PRId64, s ? "," : "", p->stage_start[s + 1] - p->stage_start[s]);
    if (b.oom || !b.data) {
        sl_strbuf_free(&b);
        return NULL;
    }
    return b.data;   /* taken: sl_strbuf_free would free it */
}

sl_status sl_plan_device_ranks(const sl_plan *p, int32_t dev, int32_t *tp_rank, int32_t *pp_rank)
{
    const sl_plan_device *d = plan_device(p, dev);
    if (!d)
        return SL_E_INVALID_ARG;
    if (tp_rank)
        *tp_rank = d->tp_rank;
    if (pp_rank)
        *pp_rank = d->pp_rank;
    return SL_OK;
}

uint64_t sl_plan_total_bytes(const sl_plan *p)
{
    return p ? p->total_bytes : 0;
}

uint64_t sl_plan_read_bytes(const sl_plan *p)
{
    return p ? p->read_bytes : 0;
}

uint64_t sl_plan_device_file_bytes(const sl_plan *p, int32_t dev, int64_t file)
{
    const sl_plan_device *d = plan_device(p, dev);
    return d && d->file_bytes && file >= 0 && file < p->n_files ? d->file_bytes[file] : 0;
}
