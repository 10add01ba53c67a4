/* load.c - sl_load: the public entry point. It only turns the checkpoint into the list of files
 * (path and size as seen when it was opened and planned) and runs the executor on them; keeping it
 * apart lets tests drive the executor without the checkpoint reader. */
#include "load/engine.h"

#include <stdlib.h>

sl_status sl_load(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o, sl_model **out)
{
    sl_load_job job;
    sl_err err = {0};
    sl_load_job_init(&job, o);
    if (sl_load_job_files(&job, ck, &err) != SL_OK) {
        sl_err_clear(&err);
        if (out)
            *out = NULL;
        return SL_E_NOMEM;
    }
    /* Without a checkpoint only a dummy load can run: the executor rejects COPY ops on file -1. */
    const sl_status st = sl_load_job_run(&job, p, out);
    sl_load_job_free(&job);
    return st;
}
