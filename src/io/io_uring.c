/* io_uring.c - the io_uring read engine (built only with liburing, SL_WITH_URING). One ring whose
 * submission queue holds `depth` entries; every request is one IORING_OP_READ. A short read is
 * resubmitted for the rest until the file ends, so callers see whole requests. The kernel may
 * refuse io_uring (seccomp, ENOSYS, EPERM): sl_io_open then falls back to the pread pool. */
#include "io/io.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

#define URING_ASYNC_MIN (64u << 10)   /* buffered reads from this size go to the kernel's workers */

typedef struct uring_ctx {
    struct io_uring ring;
    unsigned depth, in_flight;
    unsigned unsent;     /* prepared, not yet given to the kernel (uring_send) */
    int inline_cached;   /* 1: leave buffered reads inline (SL_IO_ENGINE=uring-inline, to compare) */
} uring_ctx;

/* Prepares r's read (what is left of it) in the submission queue; uring_send sends it. */
static sl_status uring_prep(uring_ctx *c, sl_io_req *r, sl_err *err)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
    if (!sqe)
        return sl_err_set(err, SL_E_INVALID_ARG, "io_uring: more than %u requests in flight", c->depth);
    size_t left = r->len - r->done;
    unsigned n = left > (1u << 30) ? (1u << 30) : (unsigned)left;
    io_uring_prep_read(sqe, r->fd, (char *)r->buf + r->done, n, r->off + r->done);
    io_uring_sqe_set_data(sqe, r);
#ifdef IOSQE_ASYNC
    /* A buffered read that hits the page cache would otherwise be copied inline, inside
     * io_uring_submit, one request at a time on the caller's thread: punting it to the kernel's
     * workers copies several requests in parallel, which the cuda backend needs to keep the
     * host-to-device link busy. A small read is cheaper copied inline than handed to a worker
     * (rows read without gaps: 90,226 requests of a few KiB took 0.21 s with every one punted,
     * 0.15 s inline), and one that misses the cache goes to a worker anyway. */
    if (r->buffered && !c->inline_cached && n >= URING_ASYNC_MIN)
        io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
#endif
    c->unsent++;
    return SL_OK;
}

/* One io_uring_submit for every read prepared since the last: a slot of small chunks is one
 * system call, not one per chunk. */
static sl_status uring_send(uring_ctx *c, sl_err *err)
{
    while (c->unsent) {
        int rc = io_uring_submit(&c->ring);
        if (rc == -EINTR)
            continue;
        if (rc < 0) {   /* never sent: nothing will complete for them */
            c->in_flight -= c->unsent;
            c->unsent = 0;
            return sl_err_set(err, SL_E_IO, "io_uring_submit: %s", strerror(-rc));
        }
        /* 0: the ring held none (it counts what it sent, so this does not happen) */
        c->unsent = rc == 0 || (unsigned)rc >= c->unsent ? 0 : c->unsent - (unsigned)rc;
    }
    return SL_OK;
}

static sl_status uring_queue(uring_ctx *c, sl_io_req *r, sl_err *err)
{
    SL_TRY(uring_prep(c, r, err));
    return uring_send(c, err);
}

static sl_status uring_submit(void *ctx, sl_io_req *r, sl_err *err)
{
    uring_ctx *c = ctx;
    r->done = 0;
    r->result = 0;
    SL_TRY(uring_prep(c, r, err));
    c->in_flight++;
    return SL_OK;
}

static sl_status uring_flush(void *ctx, sl_err *err)
{
    return uring_send(ctx, err);
}

/* Returns 1 when r is complete, 0 when it was resubmitted for its remaining bytes. */
static int uring_account(uring_ctx *c, sl_io_req *r, int res, sl_status *st, sl_err *err)
{
    if (res == -EINVAL && r->buffered && !c->inline_cached) {
        /* kernels before 5.6 do not know IOSQE_ASYNC: go on without it */
        c->inline_cached = 1;
        *st = uring_queue(c, r, err);
        return *st != SL_OK;
    }
    if (res == -EINTR || res == -EAGAIN || (res > 0 && r->done + (size_t)res < r->len)) {
        if (res > 0)
            r->done += (size_t)res;
        *st = uring_queue(c, r, err);
        return *st != SL_OK;
    }
    if (res < 0)
        r->result = res;
    else
        r->result = (int64_t)(r->done + (size_t)res);
    return 1;
}

static sl_status uring_wait(void *ctx, sl_io_req **out, sl_err *err)
{
    uring_ctx *c = ctx;
    if (!c->in_flight)
        return sl_err_set(err, SL_E_INVALID_ARG, "io_uring: wait with nothing in flight");
    SL_TRY(uring_send(c, err));
    for (;;) {
        struct io_uring_cqe *cqe = NULL;
        int rc = io_uring_wait_cqe(&c->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            return sl_err_set(err, SL_E_IO, "io_uring_wait_cqe: %s", strerror(-rc));
        sl_io_req *r = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&c->ring, cqe);
        sl_status st = SL_OK;
        if (!uring_account(c, r, res, &st, err))
            continue;
        c->in_flight--;
        if (st != SL_OK)
            return st;
        *out = r;
        return SL_OK;
    }
}

/* Drains what is still in flight so the kernel no longer writes into the caller's buffers. */
static void uring_close(void *ctx)
{
    uring_ctx *c = ctx;
    if (!c)
        return;
    sl_err ignored = {0};
    (void)uring_send(c, &ignored);   /* what was prepared completes before the buffers go */
    sl_err_clear(&ignored);
    while (c->in_flight) {
        struct io_uring_cqe *cqe = NULL;
        int rc = io_uring_wait_cqe(&c->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break;
        io_uring_cqe_seen(&c->ring, cqe);
        c->in_flight--;
    }
    io_uring_queue_exit(&c->ring);
    free(c);
}

static const sl_io_ops uring_ops = {
    .name = "io_uring",
    .submit = uring_submit,
    .flush = uring_flush,
    .wait = uring_wait,
    .close = uring_close,
};

static const sl_io_ops uring_inline_ops = {
    .name = "io_uring-inline",
    .submit = uring_submit,
    .flush = uring_flush,
    .wait = uring_wait,
    .close = uring_close,
};

sl_status sl_io_uring_open(unsigned depth, int inline_cached, sl_io *out, sl_err *err)
{
    if (depth == 0)
        depth = 1;
    uring_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    int rc = io_uring_queue_init(depth, &c->ring, 0);
    if (rc < 0) {
        free(c);
        return sl_err_set(err, SL_E_UNSUPPORTED, "io_uring_queue_init: %s", strerror(-rc));
    }
    c->depth = depth;
    c->inline_cached = inline_cached;
    out->ops = inline_cached ? &uring_inline_ops : &uring_ops;
    out->ctx = c;
    return SL_OK;
}
