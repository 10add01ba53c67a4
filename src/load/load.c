/* load.c - sl_load: the public entry point. It only turns the checkpoint into the list of files
 * (path and size as seen when it was opened and planned) and runs the executor on them; keeping it
 * apart lets tests drive the executor without the checkpoint reader. */
#include "load/load_internal.h"

#include <stdlib.h>

sl_status sl_load(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o, sl_model **out)
{
    sl_load_file *files = NULL;
    int64_t n = ck ? sl_checkpoint_file_count(ck) : 0;
    if (n < 0)
        n = 0;
    if (n) {
        files = calloc((size_t)n, sizeof *files);
        if (!files) {
            if (out)
                *out = NULL;
            return SL_E_NOMEM;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        files[i].path = sl_checkpoint_file_path(ck, i);
        files[i].size = sl_checkpoint_file_size(ck, i);
    }
    /* Without a checkpoint only a dummy load can run: the executor rejects COPY ops on file -1. */
    sl_status st = sl_load_files(files, n, p, o, out);
    if (ck && out && *out)
        (*out)->stats.checkpoint_bytes = sl_checkpoint_total_bytes(ck);
    free(files);
    return st;
}
