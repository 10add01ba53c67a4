/* reshard.c - pre-sharded output (SHARDING.md "Pre-sharded output"): each device's parameters,
 * with exactly their device shapes, written to OUT/model-rank-{d}-part-{p}.safetensors.
 *
 * The loading engine does the work: every device is a "file device" whose writes land in its part
 * files through the safetensors writer, so resharding reads each checkpoint byte once and keeps the
 * same staging bound as a load; no device buffer is ever held in memory. */
#include "shardload.h"

#include "ckpt/writer.h"
#include "device/device.h"
#include "format/st_format.h"
#include "load/engine.h"
#include "plan/plan_data.h"
#include "common/sl_bytes.h"
#include "common/sl_err.h"
#include "common/sl_file.h"
#include "tools/reshard_outdir.h"
#include "tools/tools_common.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RESHARD_DEFAULT_PART 5000000000ull

typedef struct file_dev {
    const sl_plan *plan;
    const sl_plan_device *pd;
    sl_writer **parts;
    int64_t n_parts;
    int64_t n_finished;       /* parts renamed into place: removed again if the run fails */
    int64_t *param_part;      /* part of each parameter */
    int64_t *param_widx;      /* writer index of each parameter in its part */
    ck_writer_set *set;       /* the run's parts, few of them open at once */
    pthread_mutex_t lock;     /* the engine may write from several threads */
} file_dev;

/* The last parameter whose offset is <= off (parameters are packed in offset order). */
static int64_t file_dev_param_at(const file_dev *f, uint64_t off)
{
    int64_t lo = 0, hi = f->pd->n_params - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (f->pd->params[mid].offset <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static sl_status file_dev_alloc(void *ctx, uint64_t bytes, sl_err *err)
{
    const file_dev *f = ctx;
    SL_CHECK(bytes == f->pd->bytes, err, SL_E_INVALID_ARG, "reshard: device %d size mismatch", f->pd->index);
    return SL_OK;
}

static sl_status file_dev_write_locked(file_dev *f, uint64_t off, const unsigned char *src, size_t n,
                                       sl_err *err)
{
    while (n > 0) {
        const int64_t i = file_dev_param_at(f, off);
        const sl_plan_param_t *pp = &f->pd->params[i];
        const uint64_t in_param = off - pp->offset;
        SL_CHECK(i >= 0 && in_param < pp->nbytes, err, SL_E_INVALID_ARG,
                 "reshard: device %d write at %llu outside every parameter", f->pd->index,
                 (unsigned long long)off);
        const size_t k = (size_t)sl_min_u64(n, pp->nbytes - in_param);
        sl_writer *w = f->parts[f->param_part[i]];
        const sl_status st = ck_writer_set_write(f->set, w, f->param_widx[i], in_param, src, k);
        if (st != SL_OK)
            return sl_err_set(err, st == SL_E_CANCELLED ? st : SL_E_IO, "%s", sl_writer_errmsg(w));
        off += k;
        src += k;
        n -= k;
    }
    return SL_OK;
}

static sl_status file_dev_write(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err)
{
    file_dev *f = ctx;
    pthread_mutex_lock(&f->lock);
    const sl_status st = file_dev_write_locked(f, off, src, n, err);
    pthread_mutex_unlock(&f->lock);
    return st;
}

static sl_status file_dev_zero(void *ctx, uint64_t off, uint64_t n, sl_err *err)
{
    static const unsigned char zeros[64 * 1024];
    while (n > 0) {
        const size_t k = (size_t)sl_min_u64(n, sizeof(zeros));
        SL_TRY(file_dev_write(ctx, off, zeros, k, err));
        off += k;
        n -= k;
    }
    return SL_OK;
}

static sl_status file_dev_read(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err)
{
    (void)ctx, (void)off, (void)dst, (void)n;
    return sl_err_set(err, SL_E_UNSUPPORTED, "reshard devices are write-only");
}

static void *file_dev_host_ptr(void *ctx)
{
    (void)ctx;
    return NULL;   /* the engine then writes through .write, converting in its bounce buffer */
}

static uint64_t file_dev_allocated(const void *ctx)
{
    return ((const file_dev *)ctx)->pd->bytes;
}

static void file_dev_free(void *ctx)
{
    (void)ctx;   /* owned by the reshard run */
}

static const sl_device_ops file_dev_ops = {
    .name = "file",
    .alloc = file_dev_alloc,
    .write = file_dev_write,
    .zero = file_dev_zero,
    .read = file_dev_read,
    .prefault = NULL,
    .host_ptr = file_dev_host_ptr,
    .allocated = file_dev_allocated,
    .free = file_dev_free,
};

/* ---- one device's part files --------------------------------------------------------------- */

typedef struct reshard {
    const sl_plan *plan;
    const sl_checkpoint *ck;
    const char *outdir;
    uint64_t max_part;
    int32_t first, count;     /* the mesh devices this process writes (over MPI: its rank's) */
    file_dev *fdevs;          /* plan->n_devices entries; only [first, first + count) are opened */
    sl_model_dev *mdevs;      /* likewise */
    ck_writer_set *parts_open;
    int made_outdir;          /* directories this run created for outdir: removed (if empty) on failure */
    sl_err err;
} reshard;

static int64_t split_parts(const sl_plan_device *pd, uint64_t max_part, int64_t *param_part)
{
    int64_t n = 0;
    uint64_t fill = 0;
    for (int64_t i = 0; i < pd->n_params; i++) {
        if (n == 0 || (fill > 0 && fill + pd->params[i].nbytes > max_part)) {
            n++;
            fill = 0;
        }
        param_part[i] = n - 1;
        fill += pd->params[i].nbytes;
    }
    return n;
}

static void part_path(const reshard *r, int32_t dev, int64_t k, char *path, size_t len)
{
    snprintf(path, len, "%s/model-rank-%d-part-%lld.safetensors", r->outdir, (int)dev, (long long)k);
}

static sl_status part_open(reshard *r, file_dev *f, int64_t k)
{
    char path[4096], num[32];
    part_path(r, f->pd->index, k, path, sizeof(path));
    sl_writer **w = &f->parts[k];
    if (sl_writer_open(path, w) != SL_OK)
        return sl_err_set(&r->err, SL_E_IO, "%s", sl_writer_errmsg(*w));
    sl_status st = sl_writer_set_metadata(*w, "format", "pt");
    if (st == SL_OK)
        st = sl_writer_set_metadata(*w, "layout", r->plan->layout == SL_LAYOUT_SPMD ? "spmd" : "tp");
    snprintf(num, sizeof(num), "%d", r->plan->tp);
    if (st == SL_OK)
        st = sl_writer_set_metadata(*w, "tp", num);
    snprintf(num, sizeof(num), "%d", r->plan->pp);
    if (st == SL_OK)
        st = sl_writer_set_metadata(*w, "pp", num);
    snprintf(num, sizeof(num), "%d", f->pd->index);
    if (st == SL_OK)
        st = sl_writer_set_metadata(*w, "device", num);
    /* only with EP, so that files without it stay byte for byte what they were */
    if (st == SL_OK && r->plan->ep)
        st = sl_writer_set_metadata(*w, "ep", "1");
    /* only a split other than vLLM's default (pp_partition), for the same reason */
    if (st == SL_OK && r->plan->stages_custom) {
        char *part = sl_plan_partition_text(r->plan);
        st = part ? sl_writer_set_metadata(*w, "pp_partition", part) : SL_E_NOMEM;
        free(part);
        if (st == SL_E_NOMEM)
            return sl_err_set(&r->err, st, "out of memory");
    }
    if (st != SL_OK)
        return sl_err_set(&r->err, st, "%s", sl_writer_errmsg(*w));
    return SL_OK;
}

static sl_status file_dev_init(reshard *r, file_dev *f, const sl_plan_device *pd)
{
    f->plan = r->plan;
    f->pd = pd;
    f->set = r->parts_open;
    pthread_mutex_init(&f->lock, NULL);
    const size_t np = (size_t)pd->n_params + 1;
    f->param_part = calloc(np, sizeof(*f->param_part));
    f->param_widx = calloc(np, sizeof(*f->param_widx));
    f->parts = calloc(np, sizeof(*f->parts));
    if (!f->param_part || !f->param_widx || !f->parts)
        return sl_err_set(&r->err, SL_E_NOMEM, "out of memory");
    f->n_parts = split_parts(pd, r->max_part, f->param_part);
    /* part by part (a part's parameters are consecutive), each left to the set once begun, so
     * that thousands of parts never hold a descriptor each */
    for (int64_t k = 0, i = 0; k < f->n_parts; k++) {
        SL_TRY(part_open(r, f, k));
        sl_writer *w = f->parts[k];
        for (; i < pd->n_params && f->param_part[i] == k; i++) {
            const sl_plan_param_t *pp = &pd->params[i];
            if (sl_writer_add(w, sl_plan_stored_name(r->plan, pd, pp->name), pp->dtype, pp->ndim,
                              pp->shape, &f->param_widx[i]) != SL_OK)
                return sl_err_set(&r->err, SL_E_INVALID_ARG, "%s", sl_writer_errmsg(w));
        }
        if (sl_writer_begin(w) != SL_OK)
            return sl_err_set(&r->err, SL_E_IO, "%s", sl_writer_errmsg(w));
        SL_TRY(ck_writer_set_join(r->parts_open, w, &r->err));
    }
    return SL_OK;
}

static void file_dev_destroy(file_dev *f)
{
    for (int64_t k = 0; f->parts && k < f->n_parts; k++)
        sl_writer_free(f->parts[k]);   /* removes a part that was not finished */
    free(f->parts);
    free(f->param_part);
    free(f->param_widx);
    if (f->pd)
        pthread_mutex_destroy(&f->lock);
}

/* ---- the run ------------------------------------------------------------------------------- */

static sl_status reshard_drop_stale(reshard *r);

static sl_status reshard_finish(reshard *r)
{
    SL_TRY(reshard_drop_stale(r));   /* the first rename ends the earlier output */
    for (int32_t d = r->first; d < r->first + r->count; d++) {
        file_dev *f = &r->fdevs[d];
        for (int64_t k = 0; k < f->n_parts; k++) {
            const sl_status st = ck_writer_set_finish(r->parts_open, f->parts[k]);
            if (st != SL_OK)
                return sl_err_set(&r->err, st == SL_E_CANCELLED ? st : SL_E_IO, "%s",
                                  sl_writer_errmsg(f->parts[k]));
            f->n_finished = k + 1;
        }
    }
    return SL_OK;
}

/* The config's text with its dtype ("torch_dtype", and "dtype" where newer transformers wrote
 * that) set to what the parts hold: with --dtype f16 a config still saying bfloat16 made a load
 * of the output convert the F16 parts to BF16, rounding twice. NULL: the text as it is. */
static char *config_with_dtype(const char *text, sl_dtype dt)
{
    const char *name = sl_tools_torch_dtype(dt);
    json_t *root = name ? json_loads(text, 0, NULL) : NULL;
    char *out = NULL;
    if (json_is_object(root)) {
        const json_t *tdt = json_object_get(root, "torch_dtype"), *ndt = json_object_get(root, "dtype");
        int changed = 0;
        if (!tdt || !json_is_string(tdt) || strcmp(json_string_value(tdt), name) != 0)
            changed |= json_object_set_new(root, "torch_dtype", json_string(name)) == 0;
        if (ndt && json_is_string(ndt) && strcmp(json_string_value(ndt), name) != 0)
            changed |= json_object_set_new(root, "dtype", json_string(name)) == 0;
        out = changed ? json_dumps(root, JSON_PRESERVE_ORDER | JSON_INDENT(2)) : NULL;
    }
    json_decref(root);
    return out;
}

/* The config the plan was built from (--config FILE, text in memory, or the checkpoint's own,
 * local or remote), with the parts' dtype, so that the output directory plans back to the same
 * parts. */
static sl_status reshard_write_config(reshard *r)
{
    char dst[4096];
    snprintf(dst, sizeof(dst), "%s/config.json", r->outdir);
    char *typed = config_with_dtype(r->plan->config_text, r->plan->dtype);
    const char *text = typed ? typed : r->plan->config_text;
    const sl_status st = sl_file_write_atomic(dst, text, strlen(text), &r->err);   /* marks the output complete */
    free(typed);
    return st;
}

/* config.json is what makes a directory loadable, and it is written last. One left by an earlier
 * run would make a failed run's mix of new and old parts look complete: it goes before the first
 * part is renamed into place (not before the parts are written: a run that fails before then,
 * out of space or stopped, leaves the earlier output whole), with the earlier run's SHA256SUMS,
 * which would call the new parts corrupt (unless they are the checkpoint's own). Every rank may
 * try. */
static sl_status reshard_drop_stale(reshard *r)
{
    static const char *const names[] = {"config.json", SL_TOOLS_MANIFEST};
    return sl_tools_remove_stale_names(r->outdir, sl_checkpoint_dir(r->ck), names,
                                       sizeof names / sizeof names[0], &r->err);
}

/* Before anything is created or removed: outdir must not be the input, nor hold another
 * checkpoint or rank files this run would not overwrite (reshard_outdir.h). Every device's part
 * count is needed, also over MPI where this process writes only some devices. */
static sl_status reshard_check_outdir(reshard *r)
{
    const int32_t n = r->plan->n_devices;
    int64_t max_params = 0;
    for (int32_t d = 0; d < n; d++)
        max_params = r->plan->devices[d].n_params > max_params ? r->plan->devices[d].n_params : max_params;
    int64_t *n_parts = calloc((size_t)n + 1, sizeof(*n_parts));
    int64_t *scratch = calloc((size_t)max_params + 1, sizeof(*scratch));
    sl_status st = n_parts && scratch ? SL_OK : sl_err_set(&r->err, SL_E_NOMEM, "out of memory");
    for (int32_t d = 0; st == SL_OK && d < n; d++)
        n_parts[d] = split_parts(&r->plan->devices[d], r->max_part, scratch);
    if (st == SL_OK)
        st = sl_reshard_check_outdir(r->outdir, r->ck, n_parts, n, &r->err);
    free(n_parts);
    free(scratch);
    return st;
}

/* The part files of devices [first, first + count) against the free space (a header of up to
 * 512 bytes per tensor besides the data). Parts of the same names they replace free nothing
 * meanwhile: they stay until every new part is written and renamed over them (reshard_finish). */
static sl_status reshard_check_space(reshard *r, int32_t first, int32_t count)
{
    uint64_t need = 0;
    for (int32_t d = first; d < first + count; d++) {
        const sl_plan_device *pd = &r->plan->devices[d];
        need += pd->bytes + (uint64_t)pd->n_params * 512;   /* the plan's total did not overflow */
    }
    return sl_tools_check_space(r->outdir, need, 0, &r->err);
}

/* Temporary part files of devices [first, first + count) that a run which died left (no live
 * writer holds them), and config.json's for the process that writes it: they would pile up, run
 * after run. Only this process's devices: over MPI the other ranks' parts are theirs. */
typedef struct reshard_span {
    int32_t first, count;
} reshard_span;

static int reshard_ours(void *user, const char *name)
{
    const reshard_span *s = user;
    int32_t rank = -1;
    if (!strcmp(name, "config.json"))   /* written by the process with device 0 */
        return s->first == 0;
    return st_rank_file_name(name, &rank, NULL) && rank >= s->first && rank - s->first < s->count;
}

/* Creates outdir and the file devices [first, first + count), each with its part files begun. */
static sl_status reshard_open(reshard *r, int32_t first, int32_t count)
{
    const int32_t n = r->plan->n_devices;
    SL_TRY(sl_tools_make_dir(r->outdir, &r->made_outdir, &r->err));
    SL_TRY(reshard_check_space(r, first, count));
    reshard_span span = {first, count};
    SL_TRY(ck_writer_remove_stale(r->outdir, reshard_ours, &span, &r->err));
    SL_TRY(ck_writer_set_new(&r->parts_open, &r->err));
    r->fdevs = calloc((size_t)n, sizeof(*r->fdevs));
    r->mdevs = calloc((size_t)n, sizeof(*r->mdevs));
    if (!r->fdevs || !r->mdevs)
        return sl_err_set(&r->err, SL_E_NOMEM, "out of memory");
    r->first = first;
    r->count = count;
    for (int32_t d = first; d < first + count; d++) {
        SL_TRY(file_dev_init(r, &r->fdevs[d], &r->plan->devices[d]));
        r->mdevs[d].dev.ops = &file_dev_ops;
        r->mdevs[d].dev.ctx = &r->fdevs[d];
        r->mdevs[d].n_params = r->plan->devices[d].n_params;
        r->mdevs[d].bytes = r->plan->devices[d].bytes;
    }
    return SL_OK;
}

/* After the engine (which also wrote the padding: file devices are not host memory): finish the
 * parts, and (one process only) write config.json. */
static sl_status reshard_complete(reshard *r, int write_config)
{
    SL_TRY(reshard_finish(r));
    return write_config ? reshard_write_config(r) : SL_OK;
}

/* sl_open_devices_fn: this process's (over MPI: this rank's) file devices become the model's
 * devices. They stay owned by the reshard run (their free op does nothing), so the model only
 * borrows them. */
static sl_status reshard_open_devices(void *user, sl_model *m, const sl_plan *p, int32_t first,
                                      int32_t count, const sl_load_opts *o)
{
    reshard *r = user;
    (void)p, (void)o;
    if (reshard_open(r, first, count) != SL_OK)
        return sl_err_copy(&m->err, &r->err);
    m->devs = calloc((size_t)count + 1, sizeof(*m->devs));
    if (!m->devs)
        return sl_err_set(&m->err, SL_E_NOMEM, "out of memory");
    memcpy(m->devs, r->mdevs + first, (size_t)count * sizeof(*m->devs));
    m->n_devices = count;
    m->first_device = first;
    return SL_OK;
}

/* The single-process run is a load job like sl_load's, whose devices are this run's file
 * devices. */
static sl_status reshard_run(reshard *r, const sl_checkpoint *ck, const sl_load_opts *o)
{
    sl_load_job job;
    sl_model *m = NULL;
    sl_load_job_init(&job, o);
    job.opts.dummy = 0;        /* resharding copies the checkpoint */
    job.opts.devices = NULL;   /* and writes every device */
    job.opts.n_devices = 0;
    job.open = reshard_open_devices;
    job.open_user = r;
    sl_status st = sl_load_job_files(&job, ck, &r->err);
    if (st == SL_OK)
        st = sl_load_job_plan(&job, r->plan, &r->err);   /* checked before outdir is touched */
    if (st == SL_OK)
        st = reshard_check_outdir(r);
    if (st == SL_OK && (st = sl_load_job_run(&job, r->plan, &m)) != SL_OK)
        sl_err_set(&r->err, st, "%s", m ? sl_model_errmsg(m) : "out of memory");
    if (st == SL_OK)
        st = reshard_complete(r, 1);
    sl_model_free(m);
    sl_load_job_free(&job);
    return st;
}

static void reshard_init(reshard *r, const sl_checkpoint *ck, const sl_plan *p, const char *outdir,
                         uint64_t max_part_bytes)
{
    *r = (reshard){.plan = p, .ck = ck, .outdir = outdir,
                   .max_part = max_part_bytes ? max_part_bytes : RESHARD_DEFAULT_PART};
}

/* Frees the file devices (removing parts not finished, and on failure the finished ones too) and
 * exports the message. */
static void reshard_done(reshard *r, char *err, size_t errlen)
{
    char path[4096];
    for (int32_t d = 0; r->fdevs && d < r->plan->n_devices; d++) {
        for (int64_t k = 0; r->err.st != SL_OK && k < r->fdevs[d].n_finished; k++) {
            part_path(r, d, k, path, sizeof(path));   /* no partial output: a failed run's parts go */
            unlink(path);
        }
        file_dev_destroy(&r->fdevs[d]);
    }
    free(r->fdevs);
    free(r->mdevs);
    ck_writer_set_free(r->parts_open);
    if (r->err.st != SL_OK)   /* its unfinished parts are gone: nothing stays */
        sl_tools_unmake_dir(r->outdir, r->made_outdir);
    sl_err_export(&r->err, err, errlen);
    sl_err_clear(&r->err);
}

sl_status sl_reshard(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                     const char *outdir, uint64_t max_part_bytes, char *err, size_t errlen)
{
    reshard r;
    sl_load_opts defaults;
    if (!o) {
        sl_load_opts_init(&defaults);
        o = &defaults;
    }
    reshard_init(&r, ck, p, outdir, max_part_bytes);
    sl_status st = SL_OK;
    if (!ck || !p || !outdir)
        st = sl_err_set(&r.err, SL_E_INVALID_ARG, "reshard needs a checkpoint, a plan and an output directory");
    else if (p->layout == SL_LAYOUT_BOXES) /* no layout rule to plan the rank files back with */
        st = sl_err_set(&r.err, SL_E_INVALID_ARG, "a plan from boxes cannot be resharded: "
                        "reshard with layout tp or spmd");
    else
        st = reshard_run(&r, ck, o);
    reshard_done(&r, err, errlen);
    return st;
}

/* ---- over MPI ------------------------------------------------------------------------------ */

/* Collective: agrees on the local steps after the engine, with the failing rank's message. */
static sl_status reshard_agree(reshard *r, sl_status st)
{
    char msg[1024] = "", out[1024] = "";
    if (st != SL_OK)
        snprintf(msg, sizeof(msg), "rank %d: %s", (int)sl_dist_rank(), sl_err_msg(&r->err));
    const sl_status all = sl_dist_agree(st, msg, out, sizeof(out));
    if (all != SL_OK)
        sl_err_set(&r->err, all, "%s", out);
    return all;
}

sl_status sl_reshard_dist(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                          const sl_dist_opts *d, const char *outdir, uint64_t max_part_bytes,
                          char *err, size_t errlen)
{
    reshard r;
    sl_model *m = NULL;
    sl_load_opts lo;
    if (o)
        lo = *o;
    else
        sl_load_opts_init(&lo);
    lo.dummy = 0;   /* resharding copies the checkpoint */
    reshard_init(&r, ck, p, outdir, max_part_bytes);
    sl_status st = SL_OK;
    if (!ck || !p || !outdir)
        st = sl_err_set(&r.err, SL_E_INVALID_ARG, "reshard needs a checkpoint, a plan and an output directory");
    else /* before any rank writes anything */
        st = reshard_agree(&r, reshard_check_outdir(&r));
    if (st == SL_OK && (st = sl_load_dist_devices(ck, p, &lo, d, reshard_open_devices, &r, &m)) != SL_OK)
        sl_err_set(&r.err, st, "%s", m ? sl_model_errmsg(m) : "out of memory");
    else if (st == SL_OK) /* every rank got here: the engine's last agreement succeeded */
        st = reshard_agree(&r, reshard_complete(&r, 0));
    /* config.json only once every rank's parts are in place, so a failed job does not leave a
     * directory that looks complete */
    if (st == SL_OK)
        st = reshard_agree(&r, sl_dist_rank() == 0 ? reshard_write_config(&r) : SL_OK);
    sl_model_free(m);
    reshard_done(&r, err, errlen);
    return st;
}
