/* plan_presharded.c - plans for a pre-sharded directory (what sl_reshard writes: each device's
 * parameters, already cut and padded, in model-rank-{d}-part-{p}.safetensors). The parameters are
 * those the config implies for the mesh, as for any plan; only the operations differ: each
 * parameter is one contiguous copy of the tensor of the same name in its own device's files, so a
 * device reads exactly its own bytes. The files must have been written for the same layout, T and
 * P, and hold exactly the device's parameters with exactly their shapes. */
#include "plan/plan_ctx.h"

#include "common/sl_bytes.h"
#include "common/sl_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value of a file's __metadata__ key, or NULL. */
static const char *meta_get(const sl_checkpoint *ck, int64_t file, const char *key)
{
    const int64_t n = sl_checkpoint_metadata_count(ck, file);
    for (int64_t i = 0; i < n; i++) {
        const char *k = NULL, *v = NULL;
        if (sl_checkpoint_metadata(ck, file, i, &k, &v) == SL_OK && !strcmp(k, key))
            return v;
    }
    return NULL;
}

/* The layers of each stage: a part stamped "pp_partition" holds that split (reshard stamps one
 * other than vLLM's default), a part without the stamp vLLM's default split; the load must ask
 * for the same. The stamp is compared as text with the plan's split written as reshard writes it. */
static sl_status check_file_stages(plan_ctx *c, int64_t f)
{
    sl_plan *p = c->p;
    const char *mv = meta_get(c->ck, f, "pp_partition"), *path = sl_checkpoint_file_path(c->ck, f);
    if (!mv && !p->stages_custom)
        return SL_OK;
    char *want = sl_plan_partition_text(p);
    SL_CHECK(want != NULL, &p->err, SL_E_NOMEM, "out of memory");
    sl_status st = SL_OK;
    if (mv && strcmp(mv, want) != 0)
        st = sl_err_set(&p->err, SL_E_CONFIG, "%s: pre-sharded with pp_partition %s (layers per "
                        "pipeline stage); this load asks for %s%s: give --pp-partition %s, or "
                        "reshard the original checkpoint", path, mv, want,
                        p->stages_custom ? "" : " (vLLM's default split)", mv);
    else if (!mv)
        st = sl_err_set(&p->err, SL_E_CONFIG, "%s: pre-sharded with vLLM's default split of the "
                        "layers over pipeline stages; this load asks for pp_partition %s: load it "
                        "without one, or reshard the original checkpoint with it", path, want);
    free(want);
    return st;
}

static sl_status check_file_mesh(plan_ctx *c, int64_t f)
{
    sl_plan *p = c->p;
    const char *layout = p->layout == SL_LAYOUT_SPMD ? "spmd" : "tp";
    char tp[16], pp[16], dev[16];
    snprintf(tp, sizeof(tp), "%d", p->tp);
    snprintf(pp, sizeof(pp), "%d", p->pp);
    snprintf(dev, sizeof(dev), "%d", sl_checkpoint_file_rank(c->ck, f));
    const char *ml = meta_get(c->ck, f, "layout"), *mt = meta_get(c->ck, f, "tp");
    const char *mp = meta_get(c->ck, f, "pp"), *md = meta_get(c->ck, f, "device");
    SL_CHECK(ml && mt && mp && md && !strcmp(ml, layout) && !strcmp(mt, tp) && !strcmp(mp, pp) &&
                 !strcmp(md, dev),
             &p->err, SL_E_CONFIG,
             "%s: pre-sharded for layout %s, tp %s, pp %s, device %s; its name and this load ask for "
             "layout %s, tp %d, pp %d, device %s (reshard the original checkpoint for this mesh)",
             sl_checkpoint_file_path(c->ck, f), ml ? ml : "?", mt ? mt : "?", mp ? mp : "?", md ? md : "?",
             layout, p->tp, p->pp, dev);
    /* the experts a rank holds differ with and without EP, and so its tensors' shapes; where EP
     * changes nothing (a dense model, tp 1) the parts are the same either way (earlier builds
     * stamped a dense or tp 1 --ep reshard "1") */
    const char *me = meta_get(c->ck, f, "ep");
    const int file_ep = me && !strcmp(me, "1");
    SL_CHECK(!sl_plan_ep_matters(c) || file_ep == (p->ep != 0), &p->err, SL_E_CONFIG,
             "%s: pre-sharded %s expert parallelism; asked for a load %s it (give --ep %s, or reshard "
             "the original checkpoint)", sl_checkpoint_file_path(c->ck, f), file_ep ? "with" : "without",
             p->ep ? "with" : "without", file_ep ? "too" : "no more");
    SL_TRY(check_file_stages(c, f));
    SL_CHECK(sl_checkpoint_file_rank(c->ck, f) < p->n_devices, &p->err, SL_E_UNCLAIMED,
             "%s: no device %d in a mesh of %d devices", sl_checkpoint_file_path(c->ck, f),
             sl_checkpoint_file_rank(c->ck, f), p->n_devices);
    return SL_OK;
}

/* Tensors sorted by (device, name), so each parameter is found by binary search. */
typedef struct ps_key {
    int32_t dev;
    const char *name;
    int64_t idx;
} ps_key;

static int ps_key_cmp(const void *a, const void *b)
{
    const ps_key *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return strcmp(x->name, y->name);
}

static ps_key *ps_index(const sl_checkpoint *ck, int64_t n)
{
    ps_key *k = malloc((size_t)n * sizeof(*k) + 1);
    if (!k)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        sl_tensor_info t;
        sl_checkpoint_tensor(ck, i, &t);
        k[i] = (ps_key){sl_checkpoint_file_rank(ck, t.file), t.name, i};
    }
    qsort(k, (size_t)n, sizeof(*k), ps_key_cmp);
    return k;
}

/* The tensor named `name` in device dev's files, or -1 (names are unique per device). */
static int64_t find_on_device(const ps_key *idx, int64_t n, int32_t dev, const char *name)
{
    const ps_key key = {dev, name, 0};
    const ps_key *hit = bsearch(&key, idx, (size_t)n, sizeof(*idx), ps_key_cmp);
    return hit ? hit->idx : -1;
}

static int shape_equal(const sl_tensor_info *t, const sl_plan_param_t *pp)
{
    if (t->ndim != pp->ndim)
        return 0;
    for (uint32_t k = 0; k < t->ndim; k++) {
        if (t->shape[k] != pp->shape[k])
            return 0;
    }
    return 1;
}

typedef struct ps_ctx {
    plan_ctx *c;
    ps_key *idx;
    int64_t n;
    char *seen;
} ps_ctx;

static sl_status bind_param(ps_ctx *x, sl_plan_device *d, int64_t i, sl_op *op)
{
    plan_ctx *c = x->c;
    sl_plan *p = c->p;
    const sl_plan_param_t *pp = &d->params[i];
    const char *name = sl_plan_stored_name(c->p, d, pp->name);
    const int64_t ti = find_on_device(x->idx, x->n, d->index, name);
    SL_CHECK(ti >= 0, &p->err, SL_E_MISSING,
             "%s: Following weights were not initialized from checkpoint: {'%s'} (device %d has no tensor "
             "'%s')", sl_checkpoint_dir(c->ck), pp->name, d->index, name);
    sl_tensor_info t;
    sl_checkpoint_tensor(c->ck, ti, &t);
    SL_CHECK(shape_equal(&t, pp), &p->err, SL_E_SHAPE, "%s: tensor '%s' has a shape other than device %d's",
             sl_checkpoint_file_path(c->ck, t.file), name, d->index);
    /* As for any checkpoint (plan_ckpt.c): floats convert, nothing else does; an FP8 weight is
     * copied bit for bit, so it must be one (each parameter has its own dtype). Before the size
     * check, which means nothing for sub-byte dtypes. */
    const int fp8 = pp->dtype == SL_DTYPE_F8_E4M3;
    SL_CHECK(fp8 ? t.dtype == SL_DTYPE_F8_E4M3
                 : t.dtype == SL_DTYPE_F32 || t.dtype == SL_DTYPE_F16 || t.dtype == SL_DTYPE_BF16,
             &p->err, SL_E_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which cannot be %s %s",
             sl_checkpoint_file_path(c->ck, t.file), name,
             sl_dtype_name(t.dtype) ? sl_dtype_name(t.dtype) : "?", fp8 ? "copied bit for bit as" :
             "converted to", sl_dtype_name(pp->dtype));
    const uint64_t elems = pp->nbytes / (sl_dtype_bits(pp->dtype) / 8);
    SL_CHECK(t.nbytes == elems * (sl_dtype_bits(t.dtype) / 8), &p->err, SL_E_SHAPE,
             "%s: tensor '%s' holds %llu bytes, not %llu elements", sl_checkpoint_file_path(c->ck, t.file),
             name, (unsigned long long)t.nbytes, (unsigned long long)elems);
    x->seen[ti] = 1;
    *op = (sl_op){.kind = SL_OP_COPY, .src_dtype = t.dtype, .file = t.file, .tensor = ti, .param = i,
                  .src_offset = t.offset, .src_stride = t.nbytes, .dst_offset = pp->offset,
                  .dst_stride = pp->nbytes, .rows = 1, .row_elems = elems};
    return SL_OK;
}

static sl_status bind_device(ps_ctx *x, sl_plan_device *d)
{
    sl_plan *p = x->c->p;
    sl_op *ops = sl_arena_alloc(&p->arena, (size_t)d->n_params * sizeof(*ops) + 1);
    SL_CHECK(ops != NULL, &p->err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < d->n_params; i++)
        SL_TRY(bind_param(x, d, i, &ops[i]));
    d->ops = ops;   /* padding is in the files: no zero fill */
    d->n_ops = d->n_params;
    return SL_OK;
}

/* Every tensor of the directory must be some device's parameter. */
static sl_status check_claimed(const plan_ctx *c, const char *seen)
{
    const int64_t n = sl_checkpoint_tensor_count(c->ck);
    for (int64_t i = 0; i < n; i++) {
        sl_tensor_info t;
        if (seen[i] || sl_checkpoint_tensor(c->ck, i, &t) != SL_OK)
            continue;
        char nb[SL_TEXT_NAME];
        return sl_err_set(&c->p->err, SL_E_UNCLAIMED, "%s: tensor '%s' is not a parameter of device %d",
                          sl_checkpoint_file_path(c->ck, t.file), sl_text_name(t.name, nb, sizeof nb),
                          sl_checkpoint_file_rank(c->ck, t.file));
    }
    return SL_OK;
}

sl_status sl_plan_bind_presharded(plan_ctx *c)
{
    sl_plan *p = c->p;
    const int64_t nf = sl_checkpoint_file_count(c->ck);
    for (int64_t f = 0; f < nf; f++)
        SL_TRY(check_file_mesh(c, f));
    p->n_files = nf;
    p->has_checkpoint = 1;
    ps_ctx x = {.c = c, .n = sl_checkpoint_tensor_count(c->ck)};
    x.seen = calloc((size_t)x.n + 1, 1);
    x.idx = ps_index(c->ck, x.n);
    sl_status st = x.seen && x.idx ? SL_OK : sl_err_set(&p->err, SL_E_NOMEM, "out of memory");
    for (int32_t d = 0; d < p->n_devices && st == SL_OK; d++)
        st = bind_device(&x, &p->devices[d]);
    if (st == SL_OK)
        st = check_claimed(c, x.seen);
    free(x.seen);
    free(x.idx);
    return st;
}
