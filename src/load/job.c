/* job.c - the one way into the engine: what one process loads, built the same way for sl_load,
 * sl_load_files, the MPI ranks and sl_reshard. A job is the resolved options, the checkpoint's
 * files as they were when it was opened (path and size: a different size at read time is
 * SL_E_CHANGED), the plan, checked against those files, and a view of the plan that holds only the
 * mesh devices this process loads, so that the engine reads only the bytes they need; nobody
 * edits a plan handle to get there, and the layers above load/ never look inside the plan. */
#include "load/engine.h"
#include "load/read_manifest.h"
#include "ckpt/checkpoint.h"
#include "io/http.h"
#include "plan/plan_data.h"

#include <stdlib.h>
#include <string.h>

void sl_load_job_init(sl_load_job *j, const sl_load_opts *o)
{
    *j = (sl_load_job){0};
    if (o)
        j->opts = *o;
    else
        sl_load_opts_init(&j->opts);
}

sl_status sl_load_job_files(sl_load_job *j, const sl_checkpoint *ck, sl_err *err)
{
    const int64_t n = ck ? sl_checkpoint_file_count(ck) : 0;
    j->own_files = calloc((size_t)(n > 0 ? n : 0) + 1, sizeof *j->own_files);
    if (!j->own_files)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    j->files = j->own_files;
    j->n_files = n > 0 ? n : 0;
    for (int64_t i = 0; i < j->n_files; i++) {
        j->own_files[i].path = sl_checkpoint_file_path(ck, i);
        j->own_files[i].size = sl_checkpoint_file_size(ck, i);
        (void)ck_file_id(ck, i, &j->own_files[i].id);   /* in range: i < the file count */
        j->own_files[i].remote = ck_file_remote(ck, i);
    }
    j->checkpoint_bytes = ck ? sl_checkpoint_total_bytes(ck) : 0;
    j->ck = ck;
    return SL_OK;
}

const char *sl_load_file_etag(const sl_load_file *f)
{
    return f->remote ? f->remote->etag : NULL;
}

void sl_load_job_use_files(sl_load_job *j, const sl_load_file *files, int64_t n_files)
{
    j->files = files;
    j->n_files = files ? n_files : 0;
    j->checkpoint_bytes = 0;
    for (int64_t i = 0; i < j->n_files; i++)
        j->checkpoint_bytes += files[i].size;
}

/* --verify's manifest, read once: its side files checked here (a checkpoint's), its digests and
 * blocks read from the same text by the read engine. A job planned again with the same manifest
 * (sl_reshard checks its job before it touches OUTDIR, then runs it) keeps what it read. */
static sl_status job_read_manifest(sl_load_job *j, sl_err *err)
{
    sl_load_manifest *m = &j->manifest;
    if (m->text && j->opts.verify && j->opts.manifest_path && !strcmp(m->path, j->opts.manifest_path))
        return SL_OK;
    free(m->text);
    *m = (sl_load_manifest){0};
    if (!j->opts.verify || !j->opts.manifest_path)
        return SL_OK;
    SL_TRY(rd_manifest_load(j->opts.manifest_path, &m->text, &m->len, err));
    m->path = j->opts.manifest_path;
    const sl_status st = j->ck ? rd_manifest_check_side(j->ck, m->path, m->text, m->len, err) : SL_OK;
    if (st != SL_OK) {   /* kept only once checked: a job planned again checks again */
        free(m->text);
        *m = (sl_load_manifest){0};
    }
    return st;
}

sl_status sl_load_job_plan(sl_load_job *j, const sl_plan *p, sl_err *err)
{
    j->plan = p;
    SL_CHECK(p && p->n_devices > 0 && p->devices, err, SL_E_INVALID_ARG, "plan has no devices");
    SL_CHECK(!(j->opts.dummy && j->opts.verify), err, SL_E_INVALID_ARG,
             "--verify checks checkpoint files; dummy weights read none");
    SL_CHECK(j->opts.dummy || j->n_files >= p->n_files, err, SL_E_INVALID_ARG,
             "plan reads %lld files, %lld given", (long long)p->n_files, (long long)j->n_files);
    /* a plan's operations are byte ranges of the checkpoint it was made for: of another, with
     * other shapes or dtypes, they would load other bytes without an error */
    SL_CHECK(j->opts.dummy || !j->ck || !p->has_checkpoint || p->ck_digest == sl_plan_ckpt_digest(p, j->ck),
             err, SL_E_INVALID_ARG, "%s: the plan was made for another checkpoint (its tensors' "
             "names, dtypes, shapes or places differ): plan this one", sl_checkpoint_dir(j->ck));
    /* (one per mesh device, by mesh index: more is a typo, not ignored) */
    SL_CHECK(!j->opts.gpus || j->opts.n_gpus <= p->n_devices, err, SL_E_INVALID_ARG,
             "--gpus lists %d GPUs for a mesh of %d devices (one per mesh device)",
             (int)j->opts.n_gpus, (int)p->n_devices);
    SL_TRY(job_read_manifest(j, err));
    return sl_load_check_plan(p, j->files, j->n_files, j->opts.dummy, err);
}

sl_status sl_load_job_devices(sl_load_job *j, const int32_t *devices, int32_t n, sl_err *err)
{
    const sl_plan *p = j->plan;
    free(j->view);
    j->view = malloc(sizeof *j->view);
    if (!j->view)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    *j->view = *p;
    j->view->devices = NULL;
    j->view->n_devices = 0;
    n = devices ? n : p->n_devices;
    SL_CHECK(n > 0 && n <= p->n_devices, err, SL_E_INVALID_ARG,
             "devices: %d devices chosen of a %d-device mesh", (int)n, (int)p->n_devices);
    j->view->devices = calloc((size_t)n, sizeof *j->view->devices);
    if (!j->view->devices)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    j->view->n_devices = n;
    for (int32_t i = 0; i < n; i++) {
        const int32_t d = devices ? devices[i] : i;
        SL_CHECK(d >= 0 && d < p->n_devices, err, SL_E_INVALID_ARG,
                 "devices: mesh device %d out of range [0, %d)", (int)d, (int)p->n_devices);
        for (int32_t k = 0; devices && k < i; k++)
            SL_CHECK(devices[k] != d, err, SL_E_INVALID_ARG, "devices: mesh device %d chosen twice",
                     (int)d);
        j->view->devices[i] = p->devices[d];
    }
    return SL_OK;
}

sl_status sl_load_job_range(sl_load_job *j, int32_t first, int32_t count, sl_err *err)
{
    int32_t *d = calloc((size_t)(count > 0 ? count : 0) + 1, sizeof *d);
    if (!d)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < count; i++)
        d[i] = first + i;
    const sl_status st = sl_load_job_devices(j, d, count, err);
    free(d);
    return st;
}

int32_t sl_load_job_device_count(const sl_load_job *j)
{
    return j->view ? j->view->n_devices : 0;
}

int32_t sl_load_job_mesh_index(const sl_load_job *j, int32_t i)
{
    return j->view->devices[i].index;
}

sl_status sl_load_job_fill(const sl_load_job *j, const sl_model_dev *devs, sl_load_stats *stats,
                           sl_err *err)
{
    return j->opts.dummy ? sl_load_dummy(j->view, devs, &j->opts, stats, err)
                         : sl_load_read(j->files, j->n_files, j->view, devs, &j->opts, &j->manifest,
                                        stats, err);
}

void sl_load_job_free(sl_load_job *j)
{
    free(j->own_files);
    free(j->manifest.text);
    j->manifest = (sl_load_manifest){0};
    if (j->view)
        free(j->view->devices);
    free(j->view);
    j->own_files = NULL;
    j->files = NULL;
    j->n_files = 0;
    j->view = NULL;
    j->plan = NULL;
}
