/* http_many.c - many small ranged GETs at once, for a remote checkpoint's open: every file's 8-byte
 * length, then every header. One after the other they cost two round trips per file (a 163-shard
 * checkpoint 326 of them); here up to tune.connections run together on one multi handle, each with
 * the retries and checks of a single GET (http_xfer.c), and the first GET of an object records its
 * size, ETag and Last-Modified. The first failure stops the others and is returned. The HEADs that
 * ask S3 for its checksums (--verify) run the same way. */
#include "io/http_xfer.h"

#include <stdlib.h>

typedef struct many_ctx {
    sl_http_xfer *x;        /* n transfers, the caller's */
    size_t n, done;
    size_t *queue;          /* ring of the transfers waiting to start (or to start again) */
    size_t q_head, q_len;
    CURLM *multi;
    CURL **idle;
    unsigned n_idle, n_easy;
} many_ctx;

static void q_push(many_ctx *m, size_t i)
{
    m->queue[(m->q_head + m->q_len++) % m->n] = i;
}

/* The first queued transfer whose backoff has passed, or n; *wait_ms shortened to the next one. */
static size_t q_take_due(many_ctx *m, uint64_t now, long *wait_ms)
{
    for (size_t k = 0; k < m->q_len; k++) {
        const size_t i = m->queue[m->q_head];
        m->q_head = (m->q_head + 1) % m->n;
        m->q_len--;
        if (m->x[i].not_before_ms <= now)
            return i;
        const long w = (long)(m->x[i].not_before_ms - now);
        *wait_ms = w < *wait_ms ? w : *wait_ms;
        q_push(m, i);
    }
    return m->n;
}

static sl_status start_due(many_ctx *m, long *wait_ms, sl_err *err)
{
    const uint64_t now = xf_now_ms();
    while (m->n_idle > 0) {
        const size_t i = q_take_due(m, now, wait_ms);
        if (i == m->n)
            return SL_OK;
        CURL *h = m->idle[--m->n_idle];
        SL_TRY(xf_prepare(&m->x[i], h, err));
        curl_easy_setopt(h, CURLOPT_PRIVATE, &m->x[i]);
        const CURLMcode mc = curl_multi_add_handle(m->multi, h);
        SL_CHECK(mc == CURLM_OK, err, SL_E_IO, "%s: curl: %s", m->x[i].obj->name, curl_multi_strerror(mc));
    }
    return SL_OK;
}

static sl_status reap(many_ctx *m, sl_err *err)
{
    int left = 0;
    for (CURLMsg *msg; (msg = curl_multi_info_read(m->multi, &left)) != NULL;) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        sl_http_xfer *x = NULL;
        CURL *h = msg->easy_handle;
        const CURLcode rc = msg->data.result;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(m->multi, h);
        m->idle[m->n_idle++] = h;
        const int r = xf_finish(x, rc, err);
        x->h = NULL;   /* not running: many_free leaves its handle alone */
        if (r == XF_FAIL)
            return err->st;
        if (r == XF_RETRY)
            q_push(m, (size_t)(x - m->x));
        else
            m->done++;
    }
    return SL_OK;
}

static sl_status many_run(many_ctx *m, sl_err *err)
{
    while (m->done < m->n) {
        long wait_ms = 1000;
        SL_TRY(start_due(m, &wait_ms, err));
        int still = 0;
        const CURLMcode mc = curl_multi_perform(m->multi, &still);
        SL_CHECK(mc == CURLM_OK, err, SL_E_IO, "curl: %s", curl_multi_strerror(mc));
        SL_TRY(reap(m, err));
        if (m->done < m->n)
            curl_multi_poll(m->multi, NULL, 0, (int)(wait_ms > 0 ? wait_ms : 0), NULL);
    }
    return SL_OK;
}

/* Everything but m->x, which is the caller's. */
static void many_free(many_ctx *m)
{
    for (size_t i = 0; m->x && i < m->n; i++) {
        if (m->x[i].h && m->multi) {   /* still running: out of the multi before it goes */
            curl_multi_remove_handle(m->multi, m->x[i].h);
            curl_easy_setopt(m->x[i].h, CURLOPT_ERRORBUFFER, NULL);
        }
        xf_release(&m->x[i]);
    }
    /* every handle, idle or not, is in `all` (kept at the end of idle's allocation) */
    for (unsigned k = 0; m->idle && k < m->n_easy; k++)
        if (m->idle[m->n_easy + k])
            curl_easy_cleanup(m->idle[m->n_easy + k]);
    if (m->multi)
        curl_multi_cleanup(m->multi);
    free(m->idle);
    free(m->queue);
}

/* The n transfers x (xf_init'ed, queued in order) at once, up to t->connections of them. */
static sl_status many_xfers(sl_http_xfer *x, size_t n, const sl_http_tune *t, sl_err *err)
{
    many_ctx m = {.x = x, .n = n};
    m.n_easy = t->connections < n ? t->connections : (unsigned)n;
    m.queue = calloc(n, sizeof *m.queue);
    m.idle = calloc(2 * (size_t)m.n_easy, sizeof *m.idle);   /* idle stack, then every handle */
    m.multi = curl_multi_init();
    sl_status st = m.queue && m.idle && m.multi ? SL_OK : sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (unsigned k = 0; st == SL_OK && k < m.n_easy; k++) {
        m.idle[m.n_easy + k] = m.idle[k] = xf_easy_new(t);
        st = m.idle[k] ? SL_OK : sl_err_set(err, SL_E_NOMEM, "out of memory (starting libcurl)");
        m.n_idle = k + 1;
    }
    for (size_t i = 0; st == SL_OK && i < n; i++)
        q_push(&m, i);
    if (st == SL_OK)
        st = many_run(&m, err);
    many_free(&m);
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
