/* http_many.c - many small ranged GETs at once, for a remote checkpoint's open: every file's 8-byte
 * length, then every header. One after the other they cost two round trips per file (a 163-shard
 * checkpoint 326 of them); here up to tune.connections run together on one multi handle, each with
 * the retries and checks of a single GET (http_xfer.c), and the first GET of an object records its
 * size, ETag and Last-Modified. The first failure stops the others and is returned. The HEADs that
 * ask S3 for its checksums (--verify) run the same way. */
#include "io/http_pool.h"

#include <stdlib.h>

typedef struct many_ctx {
    xf_pool pool;
    size_t done;
} many_ctx;

static void many_done(void *user, sl_http_xfer *x)
{
    (void)x;
    ((many_ctx *)user)->done++;
}

/* The n transfers x (xf_init'ed, queued in order) at once, up to t->connections of them. */
static sl_status many_xfers(sl_http_xfer *x, size_t n, const sl_http_tune *t, sl_err *err)
{
    many_ctx m = {0};
    SL_TRY(xf_pool_init(&m.pool, t, t->connections < n ? t->connections : (unsigned)n, err));
    for (size_t i = 0; i < n; i++)
        xf_pool_push(&m.pool, &x[i]);
    sl_status st = SL_OK;
    while (st == SL_OK && m.done < n)
        st = xf_pool_step(&m.pool, many_done, &m, err);
    for (size_t i = 0; i < n; i++) {
        xf_pool_drop(&m.pool, &x[i]);   /* still running after a failure: out before x goes */
        xf_release(&x[i]);
    }
    xf_pool_free(&m.pool);
    return st;
}

sl_status sl_http_get_many(const sl_http_range *r, size_t n, sl_err *err)
{
    size_t n_live = 0;
    for (size_t i = 0; i < n; i++)
        n_live += r[i].len > 0;
    if (n_live <= 1) {   /* nothing to overlap */
        for (size_t i = 0; i < n; i++)
            if (r[i].len)
                SL_TRY(sl_http_get_range(r[i].obj, r[i].off, r[i].len, r[i].buf, err));
        return SL_OK;
    }
    sl_http_xfer *x = calloc(n_live, sizeof *x);
    SL_CHECK(x, err, SL_E_NOMEM, "out of memory");
    for (size_t i = 0, j = 0; i < n; i++) {
        if (!r[i].len)
            continue;
        xf_init(&x[j], r[i].obj, &r[i].obj->cfg->tune, r[i].off, r[i].len, r[i].buf);
        x[j++].record = r[i].obj;
    }
    const sl_status st = many_xfers(x, n_live, &r[0].obj->cfg->tune, err);
    free(x);
    return st;
}

/* One HEAD per S3 object, on handles of its own (never cfg->conn: loads of one checkpoint may run
 * at once), all at once. */
sl_status sl_http_stored_sha256(const sl_http_obj *const *objs, size_t n, char (*hex)[65], sl_err *err)
{
    size_t n_s3 = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        hex[i][0] = '\0';
        if (objs[i] && objs[i]->s3 && !n_s3++)
            first = i;
    }
    if (!n_s3)
        return SL_OK;
    sl_http_xfer *x = calloc(n_s3, sizeof *x);
    SL_CHECK(x, err, SL_E_NOMEM, "out of memory");
    for (size_t i = 0, j = 0; i < n; i++)
        if (objs[i] && objs[i]->s3) {
            xf_init(&x[j], objs[i], &objs[i]->cfg->tune, 0, 0, NULL);
            x[j++].head = 1;
        }
    const sl_status st = many_xfers(x, n_s3, &objs[first]->cfg->tune, err);
    for (size_t i = 0, j = 0; st == SL_OK && i < n; i++)
        if (objs[i] && objs[i]->s3)
            xf_whole_sha256(&x[j++], hex[i]);
    free(x);
    return st;
}
