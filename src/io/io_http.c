/* io_http.c - the remote read engine (http.h): the loader's requests, each a file range landing in
 * a staging slot (or a device's host memory), served by ranged GETs over a curl multi handle.
 *
 * A request is cut into parts of at most range_bytes; parts wait in a queue and run on up to
 * `connections` easy handles, which keep their connections alive between parts (curl's connection
 * cache lives in the multi handle). A part that fails in a retryable way goes back to the queue
 * with its received bytes kept and a time before which it does not start again (backoff). The
 * transfers advance only inside wait(), on the loading thread: no thread of its own, no locks;
 * while the loader scatters a slot, the sockets' buffers keep filling. A part that fails for good
 * fails wait() with its message; the loader then closes the engine, which drops every transfer
 * before the staging is freed. */
#include "io/http_xfer.h"

#include <stdlib.h>
#include <string.h>

typedef struct hx_part {
    sl_http_xfer x;
    sl_io_req *req;
    struct hx_part *next;   /* in the queue */
    CURL *h;                /* while running */
} hx_part;

typedef struct hx_reqs {
    sl_io_req *r;
    hx_part *parts;
    unsigned n_parts, left;
} hx_reqs;

typedef struct hx_ctx {
    sl_http_tune tune;
    CURLM *multi;
    CURL **idle;            /* easy handles not running a part */
    unsigned n_idle, n_easy;
    hx_reqs *slots;         /* depth entries; r NULL: free */
    unsigned depth;
    hx_part *head, *tail;   /* parts waiting to start */
    sl_io_req **done;       /* completed requests not yet returned */
    unsigned n_done;
    unsigned running;
} hx_ctx;

static void q_push(hx_ctx *c, hx_part *p)
{
    p->next = NULL;
    if (c->tail)
        c->tail->next = p;
    else
        c->head = p;
    c->tail = p;
}

/* The first queued part whose backoff has passed (removed from the queue); *wait_ms: how long
 * until one is due, when none is. */
static hx_part *q_take_due(hx_ctx *c, uint64_t now, long *wait_ms)
{
    hx_part *prev = NULL;
    for (hx_part *p = c->head; p; prev = p, p = p->next) {
        if (p->x.not_before_ms <= now) {
            if (prev)
                prev->next = p->next;
            else
                c->head = p->next;
            if (c->tail == p)
                c->tail = prev;
            return p;
        }
        const long w = (long)(p->x.not_before_ms - now);
        *wait_ms = w < *wait_ms ? w : *wait_ms;
    }
    return NULL;
}

static hx_reqs *slot_of(hx_ctx *c, const sl_io_req *r)
{
    for (unsigned i = 0; i < c->depth; i++)
        if (c->slots[i].r == r)
            return &c->slots[i];
    return NULL;
}

static sl_status hx_submit(void *ctx, sl_io_req *r, sl_err *err)
{
    hx_ctx *c = ctx;
    SL_CHECK(r->obj, err, SL_E_INVALID_ARG, "remote engine: request without an object");
    r->result = 0;
    if (r->len == 0) {   /* nothing to fetch: done at once */
        c->done[c->n_done++] = r;
        return SL_OK;
    }
    hx_reqs *s = slot_of(c, NULL);
    SL_CHECK(s, err, SL_E_INVALID_ARG, "remote engine: more than %u requests in flight", c->depth);
    const uint64_t range = c->tune.range_bytes;
    const unsigned n = (unsigned)((r->len + range - 1) / range);
    s->parts = calloc(n, sizeof *s->parts);
    SL_CHECK(s->parts, err, SL_E_NOMEM, "out of memory");
    s->r = r;
    s->n_parts = s->left = n;
    const sl_http_obj *obj = r->obj;   /* its size, ETag and Last-Modified come from the open */
    for (unsigned i = 0; i < n; i++) {
        const uint64_t a = (uint64_t)i * range;
        const size_t len = (size_t)(r->len - a < range ? r->len - a : range);
        xf_init(&s->parts[i].x, obj, &c->tune, r->off + a, len, (unsigned char *)r->buf + a);
        s->parts[i].req = r;
        q_push(c, &s->parts[i]);
    }
    return SL_OK;
}

static void slot_free(hx_reqs *s)
{
    for (unsigned i = 0; s->parts && i < s->n_parts; i++)
        xf_release(&s->parts[i].x);
    free(s->parts);
    *s = (hx_reqs){0};
}

static sl_status start_due(hx_ctx *c, long *wait_ms, sl_err *err)
{
    const uint64_t now = xf_now_ms();
    while (c->n_idle > 0) {
        hx_part *p = q_take_due(c, now, wait_ms);
        if (!p)
            return SL_OK;
        p->h = c->idle[--c->n_idle];
        SL_TRY(xf_prepare(&p->x, p->h, err));
        curl_easy_setopt(p->h, CURLOPT_PRIVATE, p);
        const CURLMcode mc = curl_multi_add_handle(c->multi, p->h);
        SL_CHECK(mc == CURLM_OK, err, SL_E_IO, "%s: curl: %s", p->x.obj->name, curl_multi_strerror(mc));
        c->running++;
    }
    return SL_OK;
}

static void part_done(hx_ctx *c, hx_part *p)
{
    hx_reqs *s = slot_of(c, p->req);
    if (s && --s->left == 0) {
        s->r->result = (int64_t)s->r->len;
        c->done[c->n_done++] = s->r;
    }
}

/* Judges the transfers that ended. */
static sl_status reap(hx_ctx *c, sl_err *err)
{
    int left = 0;
    for (CURLMsg *m; (m = curl_multi_info_read(c->multi, &left)) != NULL;) {
        if (m->msg != CURLMSG_DONE)
            continue;
        hx_part *p = NULL;
        CURL *h = m->easy_handle;
        const CURLcode rc = m->data.result;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&p);
        curl_multi_remove_handle(c->multi, h);
        c->idle[c->n_idle++] = h;
        c->running--;
        p->h = NULL;
        const int r = xf_finish(&p->x, rc, err);
        if (r == XF_FAIL)
            return err->st;
        if (r == XF_RETRY)
            q_push(c, p);
        else
            part_done(c, p);
    }
    return SL_OK;
}

static sl_status hx_wait(void *ctx, sl_io_req **done, sl_err *err)
{
    hx_ctx *c = ctx;
    for (;;) {
        if (c->n_done > 0) {
            *done = c->done[--c->n_done];
            hx_reqs *s = (*done)->len ? slot_of(c, *done) : NULL;
            if (s)
                slot_free(s);
            return SL_OK;
        }
        SL_CHECK(c->running || c->head, err, SL_E_INVALID_ARG, "remote engine: wait with nothing in flight");
        long wait_ms = 1000;
        SL_TRY(start_due(c, &wait_ms, err));
        int still = 0;
        const CURLMcode mc = curl_multi_perform(c->multi, &still);
        SL_CHECK(mc == CURLM_OK, err, SL_E_IO, "curl: %s", curl_multi_strerror(mc));
        SL_TRY(reap(c, err));
        if (c->n_done > 0)
            continue;
        if (c->head && c->n_idle > 0 && wait_ms == 1000 && c->head->x.not_before_ms <= xf_now_ms())
            continue;   /* a part is due and a handle free */
        curl_multi_poll(c->multi, NULL, 0, (int)(wait_ms > 0 ? wait_ms : 0), NULL);
    }
}

static void hx_close(void *ctx)
{
    hx_ctx *c = ctx;
    if (!c)
        return;
    for (unsigned i = 0; c->slots && i < c->depth; i++) {
        for (unsigned k = 0; k < c->slots[i].n_parts; k++) {
            hx_part *p = &c->slots[i].parts[k];
            if (p->h) {   /* still running: dropped before the staging it writes into goes */
                curl_multi_remove_handle(c->multi, p->h);
                curl_easy_setopt(p->h, CURLOPT_ERRORBUFFER, NULL);   /* in p, freed below */
                c->idle[c->n_idle++] = p->h;
                p->h = NULL;
            }
        }
        slot_free(&c->slots[i]);
    }
    for (unsigned i = 0; c->idle && i < c->n_idle; i++)
        curl_easy_cleanup(c->idle[i]);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    free(c->idle);
    free(c->slots);
    free(c->done);
    free(c);
}

static const sl_io_ops hx_ops = {.name = "http", .submit = hx_submit, .wait = hx_wait, .close = hx_close};

sl_status sl_io_http_open(const sl_http_tune *tune, unsigned depth, sl_io *out, sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    xf_global_init();
    hx_ctx *c = calloc(1, sizeof *c);
    SL_CHECK(c, err, SL_E_NOMEM, "out of memory");
    c->tune = *tune;
    c->depth = depth ? depth : 1;
    c->n_easy = tune->connections ? tune->connections : 1;
    c->multi = curl_multi_init();
    c->idle = calloc(c->n_easy, sizeof *c->idle);
    c->slots = calloc(c->depth, sizeof *c->slots);
    c->done = calloc(c->depth, sizeof *c->done);
    int ok = c->multi && c->idle && c->slots && c->done;
    for (unsigned i = 0; ok && i < c->n_easy; i++)
        ok = (c->idle[c->n_idle++] = xf_easy_new(tune)) != NULL;
    if (!ok) {
        if (c->n_idle && !c->idle[c->n_idle - 1])
            c->n_idle--;
        hx_close(c);
        return sl_err_set(err, SL_E_NOMEM, "out of memory (starting libcurl)");
    }
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)c->n_easy);
    curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    out->ops = &hx_ops;
    out->ctx = c;
    return SL_OK;
}
