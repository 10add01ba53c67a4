/* http_get.c - the blocking GETs of a remote checkpoint's open (http.h): a file's first bytes and
 * header, the index or config read whole, and the S3 listing of a prefix without an index. They
 * share one curl handle per checkpoint (cfg->conn), so a checkpoint's headers come over one kept-
 * alive connection. */
#include "io/http_list.h"
#include "io/http_xfer.h"
#include "common/sl_cancel.h"
#include "common/sl_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void sl_http_conn_free(void *conn)
{
    if (conn)
        curl_easy_cleanup(conn);
}

enum { SLEEP_SLICE_MS = 50 };   /* a retry's backoff (up to 64 x backoff_ms) looks for a stop this often */

/* Until x's next attempt is due; SL_E_CANCELLED as soon as a stop is asked for. */
static sl_status sleep_until(const sl_http_xfer *x, sl_err *err)
{
    for (uint64_t now = xf_now_ms(); now < x->not_before_ms; now = xf_now_ms()) {
        if (sl_cancel_requested())
            return xf_cancelled(x, err);
        const uint64_t d = x->not_before_ms - now < SLEEP_SLICE_MS ? x->not_before_ms - now : SLEEP_SLICE_MS;
        const struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)d * 1000000L};
        nanosleep(&ts, NULL);   /* a signal ends it early: the loop looks again */
    }
    return SL_OK;
}

static sl_status run_locked(sl_http_xfer *x, sl_http_cfg *c, sl_err *err)
{
    if (!c->conn && !(c->conn = xf_easy_new(&c->tune)))
        return sl_err_set(err, SL_E_NOMEM, "%s: cannot start libcurl", x->obj->name);
    for (;;) {
        sl_status st = xf_prepare(x, c->conn, err);
        if (st != SL_OK)
            return st;
        const CURLcode rc = curl_easy_perform(c->conn);
        const int r = xf_finish(x, rc, err);
        if (r == XF_DONE)
            return SL_OK;
        if (r == XF_FAIL)
            return err->st;
        SL_TRY(sleep_until(x, err));
    }
}

/* The handle is shared, and xf_finish records what the server said on the object: one GET at a
 * time per checkpoint. */
static sl_status run(sl_http_xfer *x, sl_err *err)
{
    sl_http_cfg *c = x->obj->cfg;
    pthread_mutex_lock(&c->conn_lock);
    const sl_status st = run_locked(x, c, err);
    pthread_mutex_unlock(&c->conn_lock);
    return st;
}

sl_status sl_http_get_range(sl_http_obj *o, uint64_t off, size_t len, void *buf, sl_err *err)
{
    sl_http_xfer x;
    xf_init(&x, o, &o->cfg->tune, off, len, buf);
    x.record = o;
    const sl_status st = len ? run(&x, err) : SL_OK;
    xf_release(&x);
    return st;
}

/* A whole object, given as an obj already initialised. */
static sl_status get_all_obj(sl_http_obj *o, size_t max, char **buf, size_t *len, sl_err *err)
{
    sl_http_xfer x;
    xf_init(&x, o, &o->cfg->tune, 0, 0, NULL);
    x.whole = 1;
    x.max = max;
    sl_status st = run(&x, err);
    xf_release(&x);
    if (st == SL_OK && !x.buf && !(x.buf = malloc(1)))
        st = sl_err_set(err, SL_E_NOMEM, "out of memory");
    if (st != SL_OK) {
        free(x.buf);
        return st;
    }
    x.buf[x.got] = '\0';   /* grow keeps a byte spare */
    *buf = (char *)x.buf;
    *len = x.got;
    return SL_OK;
}

sl_status sl_http_get_all(sl_http_cfg *c, const char *name, size_t max, char **buf, size_t *len, sl_err *err)
{
    sl_http_obj o;
    *buf = NULL;
    *len = 0;
    sl_status st = sl_http_obj_init(&o, c, name, err);
    if (st == SL_OK)
        st = get_all_obj(&o, max, buf, len, err);
    sl_http_obj_free(&o);
    return st;
}

/* ---- S3 HeadBucket ---- */

/* "s3://bucket/" of an s3:// URL, malloc'd; NULL when out of memory. */
static char *bucket_url(const char *url)
{
    const size_t bl = strcspn(url + 5, "/");
    char *b = malloc(bl + 7);
    if (b)
        snprintf(b, bl + 7, "s3://%.*s/", (int)bl, url + 5);
    return b;
}

sl_status sl_http_bucket_region(sl_http_cfg *c, const char *url, char *region, size_t n, sl_err *err)
{
    if (n)
        region[0] = '\0';
    if (strncasecmp(url, "s3://", 5) != 0)
        return SL_OK;
    char *name = bucket_url(url);
    SL_CHECK(name, err, SL_E_NOMEM, "out of memory");
    sl_http_obj bucket;
    sl_status st = sl_http_obj_init(&bucket, c, name, err);
    free(name);
    if (st == SL_OK) {
        /* one try: the probe only improves an error already in hand, which retries would delay
         * by the timeout times the tries (30 s x 6) where the bucket's host does not answer */
        sl_http_tune once = c->tune;
        once.retries = 0;
        sl_http_xfer x;
        xf_init(&x, &bucket, &once, 0, 0, NULL);
        x.head = x.probe = 1;
        st = run(&x, err);
        xf_release(&x);
        if (st == SL_OK)
            snprintf(region, n, "%s", x.resp.bucket_region);   /* checked as a region (http_parse.c) */
    }
    sl_http_obj_free(&bucket);
    return st;
}

/* ---- S3 ListObjectsV2 ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* s3://bucket/?continuation-token=..&delimiter=%2F&encoding-type=url&list-type=2&prefix=..
 * (sorted: SigV4's canonical query string is sorted, and curl signs the query as it is given).
 * encoding-type=url, as botocore asks for on every listing: a key may hold any character, and
 * without it S3 writes those XML 1.0 cannot hold raw as numeric references (&#13;), and control
 * characters in a form XML 1.0 cannot parse at all (AWS's words), while moto writes them raw (an
 * XML reader would turn a raw CR into a LF); percent-encoded (moto too), every key comes back as
 * plain ASCII and decodes exactly. A page whose server ignored it (no <EncodingType>) is still
 * decoded, its references strictly. */
static char *list_url(const char *bucket_url, const char *prefix, const char *token)
{
    const size_t n = strlen(bucket_url) + 3 * strlen(prefix) + (token ? 3 * strlen(token) : 0) + 128;
    char *u = malloc(n), *ep = malloc(3 * strlen(prefix) + 1), *et = malloc(token ? 3 * strlen(token) + 1 : 1);
    if (u && ep && et) {
        sl_http_pct_encode(ep, prefix, 0);
        sl_http_pct_encode(et, token ? token : "", 0);
        snprintf(u, n, "%s?%s%s%sdelimiter=%%2F&encoding-type=url&list-type=2&prefix=%s", bucket_url,
                 token ? "continuation-token=" : "", token ? et : "", token ? "&" : "", ep);
    } else {
        free(u);
        u = NULL;
    }
    free(ep);
    free(et);
    return u;
}

/* A listing ends when a page has no continuation token. A server that hands back the token it was
 * given, or more pages than LIST_PAGES (10M keys), would keep the open listing: both are errors,
 * never a partial list taken for the whole. */
#define LIST_PAGES 10000

/* One page into acc; its malformations are named with the bucket, the listing and the page. */
static sl_status page_read(const sl_http_obj *bucket, const char *prefix, int page, const char *xml,
                           sl_http_names *acc, char **token, sl_err *err)
{
    char where[1280];   /* a prefix is at most 1024 bytes */
    const sl_status st = sl_http_list_page(xml, prefix, acc, token, err);
    if (st != SL_E_IO)
        return st;
    snprintf(where, sizeof where, "%s: listing '%s', page %d", bucket->name, prefix, page + 1);
    return sl_err_prefix(err, where);
}

static sl_status list_pages(sl_http_obj *bucket, const char *prefix, sl_http_names *acc, sl_err *err)
{
    char *base = bucket->url, *token = NULL, *prev = NULL;
    sl_status st = SL_OK;
    int page = 0;
    for (; st == SL_OK && page < LIST_PAGES; page++) {
        char *xml = NULL;
        size_t len = 0;
        bucket->url = list_url(base, prefix, token);
        free(prev);
        prev = token;
        token = NULL;
        st = bucket->url ? get_all_obj(bucket, (size_t)16 << 20, &xml, &len, err)
                         : sl_err_set(err, SL_E_NOMEM, "out of memory");
        free(bucket->url);
        bucket->url = NULL;
        if (st == SL_OK)
            st = page_read(bucket, prefix, page, xml, acc, &token, err);
        free(xml);
        if (st != SL_OK || !token)
            break;
        if (prev && !strcmp(prev, token))
            st = sl_err_set(err, SL_E_IO, "%s: listing '%s': the server sent back the continuation "
                            "token it was given (page %d): the listing would not end", bucket->name,
                            prefix, page + 1);
    }
    if (st == SL_OK && token)
        st = sl_err_set(err, SL_E_IO, "%s: listing '%s': more than %d pages (%d million keys): not "
                        "listed; give the index's URL (model.safetensors.index.json)", bucket->name,
                        prefix, LIST_PAGES, LIST_PAGES / 1000);
    bucket->url = base;
    free(prev);
    free(token);
    return st;   /* the message names the bucket (s3://bucket/: not found, NoSuchBucket) */
}

sl_status sl_http_list(sl_http_cfg *c, const char *dir, const char *name, char ***names, size_t *n,
                       sl_err *err)
{
    *names = NULL;
    *n = 0;
    SL_CHECK(!strncasecmp(dir, "s3://", 5), err, SL_E_NOT_FOUND,
             "%s: no model.safetensors.index.json, and an HTTP directory cannot be listed: give the URL of "
             "the index's directory or of a .safetensors file", name);
    const char *rest = dir + 5, *slash = strchr(rest, '/');
    const size_t bl = slash ? (size_t)(slash - rest) : strlen(rest);
    char *bucket_name = malloc(bl + 8), *prefix = slash ? sl_http_join(slash + 1, "") : strdup("");
    if (!bucket_name || !prefix) {
        free(bucket_name);
        free(prefix);
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    if (!strcmp(prefix, "/"))
        prefix[0] = '\0';   /* the bucket's top level */
    snprintf(bucket_name, bl + 8, "s3://%.*s/", (int)bl, rest);
    sl_http_obj bucket;
    sl_http_names acc = {0};
    sl_status st = sl_http_obj_init(&bucket, c, bucket_name, err);
    if (st == SL_OK)
        st = list_pages(&bucket, prefix, &acc, err);
    sl_http_obj_free(&bucket);
    free(bucket_name);
    free(prefix);
    if (st != SL_OK) {
        sl_http_names_free(&acc);
        return st;
    }
    if (acc.n > 1)
        qsort(acc.v, acc.n, sizeof *acc.v, cmp_str);
    *names = acc.v;
    *n = acc.n;
    return SL_OK;
}
