/* reshard_outdir.c - refusing an output directory a reshard would leave unloadable, or that is its
 * own input (see reshard_outdir.h). The checks only read: they run before the directory is created
 * or anything in it is removed. */
#include "tools/reshard_outdir.h"

#include "format/st_format.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* inner is outer, or lies below it (both real paths). */
static bool path_within(const char *inner, const char *outer)
{
    const size_t n = strlen(outer);
    if (strncmp(inner, outer, n) != 0)
        return false;
    return inner[n] == '\0' || inner[n] == '/' || (n > 0 && outer[n - 1] == '/');
}

static bool real_within(const char *path, const char *real_out)
{
    char *real = realpath(path, NULL);
    const bool in = real && path_within(real, real_out);
    free(real);
    return in;
}

static sl_status outdir_not_input(const char *outdir, const char *real_out, const sl_checkpoint *ck,
                                  sl_err *err)
{
    /* the directory too: the files of a Hugging Face cache snapshot are links to elsewhere */
    const char *hit = real_within(sl_checkpoint_dir(ck), real_out) ? sl_checkpoint_dir(ck) : NULL;
    for (int64_t f = 0; !hit && f < sl_checkpoint_file_count(ck); f++) {
        if (real_within(sl_checkpoint_file_path(ck, f), real_out))
            hit = sl_checkpoint_file_path(ck, f);
    }
    SL_CHECK(!hit, err, SL_E_INVALID_ARG, "%s: is or contains the checkpoint being resharded (%s): "
             "the output would overwrite its own input; choose another directory", outdir, hit);
    return SL_OK;
}

/* A stale rank file: one this run does not write. */
static bool rank_file_stale(const char *name, const int64_t *n_parts, int32_t n_devices)
{
    int32_t d = -1;
    int64_t p = -1;
    if (!st_rank_file_name(name, &d, &p))
        return false;
    return d >= n_devices || p >= n_parts[d];
}

static bool is_hf_file(const char *name)
{
    if (strcmp(name, ST_INDEX_NAME) == 0)
        return true;
    return st_has_suffix(name, strlen(name)) && !st_rank_file_name(name, NULL, NULL);
}

typedef struct outdir_scan {
    char hf[256], stale[256];      /* the first file of each kind by name, "" when none */
    int64_t n_stale;
} outdir_scan;

/* Keeps the name that sorts first, so that the message does not depend on readdir's order. */
static void keep_first(char *kept, size_t len, const char *name)
{
    if (!kept[0] || strcmp(name, kept) < 0)
        snprintf(kept, len, "%s", name);
}

static void scan_entry(outdir_scan *s, const char *name, const int64_t *n_parts, int32_t n_devices)
{
    if (is_hf_file(name))
        keep_first(s->hf, sizeof s->hf, name);
    if (rank_file_stale(name, n_parts, n_devices)) {
        keep_first(s->stale, sizeof s->stale, name);
        s->n_stale++;
    }
}

static sl_status outdir_contents(const char *outdir, const int64_t *n_parts, int32_t n_devices,
                                 sl_err *err)
{
    char b[160];
    outdir_scan s = {.hf = "", .stale = "", .n_stale = 0};
    DIR *d = opendir(outdir);
    if (!d)
        return SL_OK;   /* not a directory: creating it reports that */
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        scan_entry(&s, de->d_name, n_parts, n_devices);
    closedir(d);
    SL_CHECK(!s.hf[0], err, SL_E_INVALID_ARG, "%s: holds a Hugging Face checkpoint (%s): rank files next to "
             "it would make a directory of two checkpoints; choose an empty directory", outdir,
             st_display(s.hf, strlen(s.hf), b, sizeof b));
    SL_CHECK(s.n_stale == 0, err, SL_E_INVALID_ARG, "%s: holds %lld rank file(s) that this reshard (%d "
             "devices) does not write, such as %s, left by a reshard for another mesh or part size: they "
             "would make the output unloadable; remove them or choose an empty directory", outdir,
             (long long)s.n_stale, (int)n_devices, st_display(s.stale, strlen(s.stale), b, sizeof b));
    return SL_OK;
}

sl_status sl_reshard_check_outdir(const char *outdir, const sl_checkpoint *ck, const int64_t *n_parts,
                                  int32_t n_devices, sl_err *err)
{
    char *real_out = realpath(outdir, NULL);
    if (!real_out)
        return SL_OK;   /* does not exist yet (or cannot be resolved: mkdir says why) */
    sl_status st = outdir_not_input(outdir, real_out, ck, err);
    free(real_out);
    return st == SL_OK ? outdir_contents(outdir, n_parts, n_devices, err) : st;
}
