/* job.c - the one way into the engine: what one process loads, built the same way for sl_load,
 * the MPI ranks and reshard. A job is the checkpoint's files as they were when it was opened
 * (path and size: a different size at read time is SL_E_CHANGED) and a view of the plan that
 * holds only the mesh devices this process loads, so that the engine reads only the bytes they
 * need; nobody edits a plan handle to get there. */
#include "load/engine.h"

#include <stdlib.h>

sl_status sl_load_job_files(sl_load_job *j, const sl_checkpoint *ck, sl_err *err)
{
    const int64_t n = ck ? sl_checkpoint_file_count(ck) : 0;
    j->files = calloc((size_t)(n > 0 ? n : 0) + 1, sizeof *j->files);
    if (!j->files)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    j->n_files = n > 0 ? n : 0;
    for (int64_t i = 0; i < j->n_files; i++) {
        j->files[i].path = sl_checkpoint_file_path(ck, i);
        j->files[i].size = sl_checkpoint_file_size(ck, i);
    }
    j->checkpoint_bytes = ck ? sl_checkpoint_total_bytes(ck) : 0;
    return SL_OK;
}

sl_status sl_load_job_devices(sl_load_job *j, const sl_plan *p, const int32_t *devices,
                              int32_t n, sl_err *err)
{
    j->view = *p;
    j->view.devices = NULL;
    n = devices ? n : p->n_devices;
    SL_CHECK(n > 0 && n <= p->n_devices, err, SL_E_INVALID_ARG,
             "devices: %d devices chosen of a %d-device mesh", (int)n, (int)p->n_devices);
    j->view.devices = calloc((size_t)n, sizeof *j->view.devices);
    if (!j->view.devices)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    j->view.n_devices = n;
    for (int32_t i = 0; i < n; i++) {
        const int32_t d = devices ? devices[i] : i;
        SL_CHECK(d >= 0 && d < p->n_devices, err, SL_E_INVALID_ARG,
                 "devices: mesh device %d out of range [0, %d)", (int)d, (int)p->n_devices);
        for (int32_t k = 0; devices && k < i; k++)
            SL_CHECK(devices[k] != d, err, SL_E_INVALID_ARG, "devices: mesh device %d chosen twice",
                     (int)d);
        j->view.devices[i] = p->devices[d];
    }
    return SL_OK;
}

sl_status sl_load_job_range(sl_load_job *j, const sl_plan *p, int32_t first, int32_t count,
                            sl_err *err)
{
    int32_t *d = calloc((size_t)(count > 0 ? count : 0) + 1, sizeof *d);
    if (!d)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < count; i++)
        d[i] = first + i;
    const sl_status st = sl_load_job_devices(j, p, d, count, err);
    free(d);
    return st;
}

void sl_load_job_free(sl_load_job *j)
{
    free(j->files);
    free(j->view.devices);
    *j = (sl_load_job){0};
}
