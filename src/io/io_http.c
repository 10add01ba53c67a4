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
#include "io/http_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct hx_part {
    sl_http_xfer x;         /* first: the pool hands back &x, which is the part */
    sl_io_req *req;
} hx_part;

typedef struct hx_reqs {
    sl_io_req *r;
    hx_part *parts;
    unsigned n_parts, left;
} hx_reqs;

typedef struct hx_ctx {
    sl_http_tune tune;
    xf_pool pool;
    hx_reqs *slots;         /* depth entries; r NULL: free */
    unsigned depth;
    sl_io_req **done;       /* completed requests not yet returned */
    unsigned n_done;
} hx_ctx;

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
    const unsigned n = (unsigned)(r->len / range + (r->len % range != 0));   /* any range, no wrap */
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
        xf_pool_push(&c->pool, &s->parts[i].x);
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

static void part_done(void *user, sl_http_xfer *x)
{
    hx_ctx *c = user;
    hx_part *p = (hx_part *)x;
    hx_reqs *s = slot_of(c, p->req);
    if (s && --s->left == 0) {
        s->r->result = (int64_t)s->r->len;
        c->done[c->n_done++] = s->r;
    }
}

static sl_status hx_wait(void *ctx, sl_io_req **done, sl_err *err)
{
    hx_ctx *c = ctx;
    while (c->n_done == 0) {
        SL_CHECK(xf_pool_busy(&c->pool), err, SL_E_INVALID_ARG, "remote engine: wait with nothing in flight");
        SL_TRY(xf_pool_step(&c->pool, part_done, c, err));
    }
    *done = c->done[--c->n_done];
    hx_reqs *s = (*done)->len ? slot_of(c, *done) : NULL;
    if (s)
        slot_free(s);
    return SL_OK;
}

static void hx_close(void *ctx)
{
    hx_ctx *c = ctx;
    if (!c)
        return;
    for (unsigned i = 0; c->slots && i < c->depth; i++) {
        for (unsigned k = 0; k < c->slots[i].n_parts; k++)
            xf_pool_drop(&c->pool, &c->slots[i].parts[k].x);   /* before the staging it writes into goes */
        slot_free(&c->slots[i]);
    }
    xf_pool_free(&c->pool);
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
    c->slots = calloc(c->depth, sizeof *c->slots);
    c->done = calloc(c->depth, sizeof *c->done);
    sl_status st = c->slots && c->done ? xf_pool_init(&c->pool, tune, tune->connections, err)
                                       : sl_err_set(err, SL_E_NOMEM, "out of memory");
    if (st != SL_OK) {
        hx_close(c);
        return st;
    }
    out->ops = &hx_ops;
    out->ctx = c;
    return SL_OK;
}
