/* mpi_stub.c - multi-process loading when shardload is built without MPI (SL_WITH_MPI off):
 * one process, rank 0 of 1; the calls that need MPI return SL_E_UNSUPPORTED. */
#include "load/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl_dist_opts_init(sl_dist_opts *o)
{
    if (o)
        *o = (sl_dist_opts){.devices_per_rank = 1, .strategy = SL_DIST_COOPERATIVE};
}

int sl_dist_available(void)
{
    return 0;
}

sl_status sl_dist_init(void)
{
    return SL_E_UNSUPPORTED;
}

void sl_dist_finalize(void)
{
}

int32_t sl_dist_rank(void)
{
    return 0;
}

int32_t sl_dist_size(void)
{
    return 1;
}

sl_status sl_dist_agree(sl_status st, const char *msg, char *out, size_t outlen)
{
    if (st != SL_OK && out && outlen)
        snprintf(out, outlen, "%s", msg ? msg : "");
    return st;
}

sl_status sl_dist_gather_text(const char *text, char **out)
{
    if (!out)
        return SL_E_INVALID_ARG;
    *out = strdup(text ? text : "");
    return *out ? SL_OK : SL_E_NOMEM;
}

sl_status sl_load_dist_devices(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                               const sl_dist_opts *d, sl_open_devices_fn open, void *user,
                               sl_model **out)
{
    (void)ck, (void)p, (void)o, (void)d, (void)open, (void)user;
    if (!out)
        return SL_E_INVALID_ARG;
    sl_model *m = sl_model_new();
    *out = m;
    if (!m)
        return SL_E_NOMEM;
    return sl_err_set(&m->err, SL_E_UNSUPPORTED,
                      "multi-process loading needs MPI: this build has none (SL_WITH_MPI)");
}

sl_status sl_load_dist(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                       const sl_dist_opts *d, sl_model **out)
{
    return sl_load_dist_devices(ck, p, o, d, NULL, NULL, out);
}
