/* http_none.c - the remote entry points of http.h in a build without libcurl: each one says so,
 * so that `shardload load s3://...` fails with what is missing, not with "no such file". */
#include "io/http.h"

#define SL_NO_CURL "remote checkpoints (http://, https://, s3://) need libcurl: this shardload was built " \
                   "without it (Debian: libcurl4-openssl-dev, then rebuild)"

void sl_http_conn_free(void *conn)
{
    (void)conn;
}

sl_status sl_http_get_range(sl_http_obj *o, uint64_t off, size_t len, void *buf, sl_err *err)
{
    (void)off;
    (void)len;
    (void)buf;
    return sl_err_set(err, SL_E_UNSUPPORTED, "%s: " SL_NO_CURL, o->name);
}

sl_status sl_http_get_many(const sl_http_range *r, size_t n, sl_err *err)
{
    return n ? sl_err_set(err, SL_E_UNSUPPORTED, "%s: " SL_NO_CURL, r[0].obj->name) : SL_OK;
}

/* Local files reach here too (objs[i] NULL): only a remote object is an error. */
sl_status sl_http_stored_sha256(const sl_http_obj *const *objs, size_t n, char (*hex)[65], sl_err *err)
{
    for (size_t i = 0; i < n; i++) {
        hex[i][0] = '\0';
        if (objs[i])
            return sl_err_set(err, SL_E_UNSUPPORTED, "%s: " SL_NO_CURL, objs[i]->name);
    }
    return SL_OK;
}

sl_status sl_http_get_all(sl_http_cfg *c, const char *name, size_t max, char **buf, size_t *len, sl_err *err)
{
    (void)c;
    (void)max;
    *buf = NULL;
    *len = 0;
    return sl_err_set(err, SL_E_UNSUPPORTED, "%s: " SL_NO_CURL, name);
}

sl_status sl_http_bucket_region(sl_http_cfg *c, const char *url, char *region, size_t n, sl_err *err)
{
    (void)c;
    if (n)
        region[0] = '\0';
    return sl_err_set(err, SL_E_UNSUPPORTED, "%s: " SL_NO_CURL, url);
}

sl_status sl_http_list(sl_http_cfg *c, const char *dir, const char *name, char ***names, size_t *n,
                       sl_err *err)
{
    (void)c;
    (void)dir;
    *names = NULL;
    *n = 0;
    return sl_err_set(err, SL_E_UNSUPPORTED, "%s: " SL_NO_CURL, name);
}

sl_status sl_io_http_open(const sl_http_tune *tune, unsigned depth, sl_io *out, sl_err *err)
{
    (void)tune;
    (void)depth;
    out->ops = NULL;
    out->ctx = NULL;
    return sl_err_set(err, SL_E_UNSUPPORTED, SL_NO_CURL);
}
