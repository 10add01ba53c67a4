/* read_remote.c - which read engine a load uses: the remote one (io/http.h) when its files are
 * remote, else io_uring or pread (io.h). A checkpoint is all local or all remote. The remote
 * engine's transfers follow the load's options where they set them, else those the checkpoint
 * was opened with. */
#include "load/read_ctx.h"
#include "io/http.h"

const struct sl_http_obj *rd_remote_obj(const rd_ctx *x)
{
    for (int64_t f = 0; f < x->files.n; f++)
        if (x->files.v[f].used && x->files.v[f].remote)
            return x->files.v[f].remote;
    return NULL;
}

sl_status rd_io_open(rd_ctx *x)
{
    const sl_http_obj *obj = rd_remote_obj(x);
    if (!obj) {
        const unsigned threads = x->o->threads > 0 ? (unsigned)x->o->threads : 0;
        return sl_io_open(x->o->io_engine, rd_io_depth(x), threads, &x->io, x->err);
    }
    sl_http_tune t = obj->cfg->tune;
    const sl_load_opts *o = x->o;
    sl_http_tune mine;
    sl_http_tune_from(&mine, o);
    if (o->remote_connections > 0)
        t.connections = mine.connections;
    if (o->remote_range_bytes > 0)
        t.range_bytes = mine.range_bytes;
    if (o->remote_retries != 0)
        t.retries = mine.retries;
    if (o->remote_backoff_ms > 0)
        t.backoff_ms = mine.backoff_ms;
    if (o->remote_timeout_ms > 0)
        t.timeout_ms = mine.timeout_ms;
    return sl_io_http_open(&t, rd_io_depth(x), &x->io, x->err);
}

void rd_remote_counts(const rd_ctx *x, sl_load_stats *stats)
{
    sl_io_counts k;
    sl_io_get_counts(&x->io, &k);
    stats->remote_retries = k.retries;
    stats->remote_restarts = k.restarts;
}
