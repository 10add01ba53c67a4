/* io_http.c - the remote read engine (http.h): the loader's requests, each a file range landing in
 * a staging slot (or a device's host memory), served by ranged GETs over a curl multi handle.
 *
 * A request is cut into parts of at most range_bytes, made when they can run: the engine owns a
 * fixed set of part records (twice `connections`: while some wait out a retry's backoff, others
 * keep every connection busy), and each free one takes the next part of the oldest request that
 * has parts left. What a request costs beyond its staging is then a few counters, whatever its
 * length and the range size (a 64 MiB request of 4 KiB ranges made 16384 transfers of ~3 KB at
 * once, 47 MB outside the staging budget). Parts run on up to `connections` easy handles, which
 * keep their connections alive between parts (curl's connection cache lives in the multi handle).
 * A part that fails in a retryable way goes back to the pool's queue with its received bytes kept
 * and a time before which it does not start again (backoff). The transfers advance only inside
 * wait(), on the loading thread: no thread of its own, no locks; while the loader scatters a slot,
 * the sockets' buffers keep filling. A part that fails for good fails wait() with its message; the
 * loader then closes the engine, which drops every transfer before the staging is freed. */
#include "io/http_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct hx_reqs hx_reqs;

typedef struct hx_part {
    sl_http_xfer x;         /* first: the pool hands back &x, which is the part */
    hx_reqs *slot;          /* NULL: free */
} hx_part;

struct hx_reqs {
    sl_io_req *r;           /* NULL: a free slot */
    uint64_t seq;           /* submission order: parts are made for the oldest request first */
    uint64_t made;          /* bytes of r cut into parts so far */
    unsigned running;       /* its parts alive (running, queued or backing off) */
};

typedef struct hx_ctx {
    sl_http_tune tune;
    xf_pool pool;
    hx_reqs *slots;         /* depth entries */
    unsigned depth;
    uint64_t next_seq;
    hx_part *parts;         /* n_parts records, made once */
    unsigned n_parts;
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
    *s = (hx_reqs){.r = r, .seq = c->next_seq++};
    return SL_OK;
}

/* The oldest request with bytes not yet cut into parts, or NULL. */
static hx_reqs *oldest_unmade(hx_ctx *c)
{
    hx_reqs *best = NULL;
    for (unsigned i = 0; i < c->depth; i++) {
        hx_reqs *s = &c->slots[i];
        if (s->r && s->made < s->r->len && (!best || s->seq < best->seq))
            best = s;
    }
    return best;
}

/* Every free part record takes the next part of the oldest request that has some left, into the
 * pool's queue. */
static void make_parts(hx_ctx *c)
{
    for (unsigned k = 0; k < c->n_parts; k++) {
        hx_part *p = &c->parts[k];
        hx_reqs *s = p->slot ? NULL : oldest_unmade(c);
        if (!s)
            continue;
        const uint64_t left = s->r->len - s->made;
        const size_t len = (size_t)(left < c->tune.range_bytes ? left : c->tune.range_bytes);
        xf_init(&p->x, s->r->obj, &c->tune, s->r->off + s->made, len, (unsigned char *)s->r->buf + s->made);
        p->slot = s;
        s->made += len;
        s->running++;
        xf_pool_push(&c->pool, &p->x);
    }
}

static void part_done(void *user, sl_http_xfer *x)
{
    hx_ctx *c = user;
    hx_part *p = (hx_part *)x;
    hx_reqs *s = p->slot;
    xf_release(&p->x);
    p->slot = NULL;   /* free for the next part */
    if (--s->running == 0 && s->made == s->r->len) {
        s->r->result = (int64_t)s->r->len;
        c->done[c->n_done++] = s->r;
    }
}

static sl_status hx_wait(void *ctx, sl_io_req **done, sl_err *err)
{
    hx_ctx *c = ctx;
    while (c->n_done == 0) {
        make_parts(c);
        SL_CHECK(xf_pool_busy(&c->pool), err, SL_E_INVALID_ARG, "remote engine: wait with nothing in flight");
        SL_TRY(xf_pool_step(&c->pool, part_done, c, err));
    }
    *done = c->done[--c->n_done];
    hx_reqs *s = (*done)->len ? slot_of(c, *done) : NULL;
    if (s)
        *s = (hx_reqs){0};
    return SL_OK;
}

static void hx_close(void *ctx)
{
    hx_ctx *c = ctx;
    if (!c)
        return;
    for (unsigned k = 0; c->parts && k < c->n_parts; k++) {
        if (c->parts[k].slot) {
            xf_pool_drop(&c->pool, &c->parts[k].x);   /* before the staging it writes into goes */
            xf_release(&c->parts[k].x);
        }
    }
    xf_pool_free(&c->pool);
    free(c->parts);
    free(c->slots);
    free(c->done);
    free(c);
}

static void hx_counts(const void *ctx, sl_io_counts *out)
{
    const hx_ctx *c = ctx;
    *out = (sl_io_counts){.retries = c->pool.retries, .restarts = c->pool.restarts};
}

static const sl_io_ops hx_ops = {.name = "http", .submit = hx_submit, .wait = hx_wait, .close = hx_close,
                                 .counts = hx_counts};

sl_status sl_io_http_open(const sl_http_tune *tune, unsigned depth, sl_io *out, sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    xf_global_init();
    hx_ctx *c = calloc(1, sizeof *c);
    SL_CHECK(c, err, SL_E_NOMEM, "out of memory");
    c->tune = *tune;
    c->depth = depth ? depth : 1;
    c->n_parts = 2 * (tune->connections ? tune->connections : 1);
    c->slots = calloc(c->depth, sizeof *c->slots);
    c->done = calloc(c->depth, sizeof *c->done);
    c->parts = calloc(c->n_parts, sizeof *c->parts);
    sl_status st = c->slots && c->done && c->parts ? xf_pool_init(&c->pool, tune, tune->connections, err)
                                                   : sl_err_set(err, SL_E_NOMEM, "out of memory");
    if (st != SL_OK) {
        hx_close(c);
        return st;
    }
    out->ops = &hx_ops;
    out->ctx = c;
    return SL_OK;
}
