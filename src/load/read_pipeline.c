/* read_pipeline.c - up to n_slots reads in flight (io_uring or the pread pool), each completed
 * chunk scattered on the loading thread, and the device waits that make reusing a slot safe: per
 * slot marks when rd_config asks for them and some device is asynchronous (the oldest slot is
 * refilled first), else a fence before a refill (the slot just scattered is refilled first; the
 * stepwise path). docs/engine.md "Pipeline". */
#include "load/read_ctx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_bytes.h"
#include "common/sl_cancel.h"

/* ---- device waits --------------------------------------------------------------------------- */

/* Without marks it is called before a slot is refilled: with the free list's LIFO order the
 * refilled slot is the one just scattered, so the wait overlaps the reads of the other slots still
 * in flight. */
sl_status rd_fence(rd_ctx *x)
{
    for (int32_t d = 0; d < x->p->n_devices; d++)
        if (rd_local(x, d))
            SL_TRY(sl_device_fence(&x->devs[d].dev, x->err));
    x->in_flight = 0;
    x->marks_pending = 0;
    for (unsigned i = 0; x->slots && i < x->n_slots; i++)
        x->slots[i].marked = 0;
    for (unsigned k = 0; k < RD_RING; k++)
        x->ring_dev[k] = -1;
    return SL_OK;
}

/* Records (wait 0) or waits for (wait 1) mark `tag` on every local device (a no-op for
 * synchronous ones). */
static sl_status rd_marks(rd_ctx *x, unsigned tag, int wait)
{
    for (int32_t d = 0; d < x->p->n_devices; d++) {
        const sl_device *dev = &x->devs[d].dev;
        if (rd_local(x, d))
            SL_TRY(wait ? sl_device_wait_mark(dev, tag, x->err) : sl_device_mark(dev, tag, x->err));
    }
    return SL_OK;
}

/* After slot s was scattered: its copies are waited for when s is refilled, not before. */
static sl_status rd_mark(rd_ctx *x, rd_slot *s)
{
    SL_TRY(rd_marks(x, s->index, 0));
    s->marked = 1;
    x->in_flight = 0;
    x->marks_pending = 1;
    return SL_OK;
}

static sl_status rd_wait_mark(rd_ctx *x, rd_slot *s)
{
    SL_TRY(rd_marks(x, s->index, 1));
    s->marked = 0;
    return SL_OK;
}

/* ---- reads ---------------------------------------------------------------------------------- */

sl_status rd_submit(rd_ctx *x, rd_slot *s, int64_t chunk)
{
    if (s->marked)
        SL_TRY(rd_wait_mark(x, s));
    if (x->in_flight)
        SL_TRY(rd_fence(x));
    const rd_chunk *c = &x->chunks.v[chunk];
    if (sl_cancel_requested())   /* sl_cancel: the caller's cleanup runs as after any failure */
        return sl_err_set(x->err, SL_E_CANCELLED, "%s: cancelled before reading offset %llu",
                          x->files.v[c->file].path, (unsigned long long)c->a);
    SL_TRY(rd_file_acquire(&x->files, c->file, x->err));   /* released by rd_check */
    const rd_file *f = &x->files.v[c->file];
    s->chunk = chunk;
    s->req.fd = f->fd;
    s->req.obj = f->remote;
    s->req.buf = c->dst ? c->dst : s->buf;
    s->req.user = s;
    s->req.buffered = !f->direct;
    if (f->direct && !c->dst) {
        s->req.off = c->a / RD_ALIGN * RD_ALIGN;
        s->req.len = (size_t)(sl_align_up(c->b_ext, RD_ALIGN) - s->req.off);
    } else {
        s->req.off = c->a;
        s->req.len = (size_t)(c->b_ext - c->a);
    }
    return x->io.ops->submit(x->io.ctx, &s->req, x->err);
}

sl_status rd_check(rd_ctx *x, rd_slot *s, int *resubmitted)
{
    const rd_chunk *c = &x->chunks.v[s->chunk];
    rd_file *f = &x->files.v[c->file];
    const int64_t res = s->req.result;
    *resubmitted = 0;
    rd_file_release(&x->files, c->file);
    if (res == -EINVAL && s->req.fd == f->fd && f->direct) {
        SL_TRY(rd_file_fallback(f, x->err));
        *resubmitted = 1;
        return rd_submit(x, s, s->chunk);
    }
    if (res == -EINVAL && s->req.fd != f->fd) {
        *resubmitted = 1; /* issued before the fallback */
        return rd_submit(x, s, s->chunk);
    }
    if (res < 0)
        return sl_err_set(x->err, SL_E_IO, "%s: read error at offset %llu: %s", f->path,
                          (unsigned long long)s->req.off, strerror((int)-res));
    x->bytes_read += (uint64_t)res;
    if (s->req.off + (uint64_t)res < c->b_ext)
        return sl_err_set(x->err, SL_E_CHANGED,
                          "%s: short read at offset %llu (file changed since planning?)", f->path,
                          (unsigned long long)(s->req.off + (uint64_t)res));
    return SL_OK;
}

static sl_status rd_complete(rd_ctx *x, rd_slot *s, int *resubmitted)
{
    SL_TRY(rd_check(x, s, resubmitted));
    if (*resubmitted)
        return SL_OK;
    const rd_chunk *c = &x->chunks.v[s->chunk];
    /* By blocks the hash needs no order: it runs while the chunk is scattered (both only read
     * the slot), and the slot comes back through rd_verify_done once both are done. */
    if (x->verify && rd_verify_by_blocks(x->verify))
        rd_verify_push(x->verify, c->file, c->a, c->b, c->dst ? c->dst : s->buf + (c->a - s->req.off), s);
    if (!c->dst)
        SL_TRY(rd_scatter_chunk(x, c, s->buf + (c->a - s->req.off)));
    if (x->use_marks && x->in_flight)
        SL_TRY(rd_mark(x, s));
    x->done_bytes += c->b - c->a;
    if (x->o->progress)
        x->o->progress(x->o->progress_user, x->done_bytes, x->chunks.total_bytes);
    return SL_OK;
}

/* ---- the loop ------------------------------------------------------------------------------- */

/* Free slots: a stack (LIFO) without marks, so that the one fence waits for the copies of the slot
 * just scattered; a queue (FIFO) with marks, so that the slot refilled is the one whose copies
 * were issued longest ago and have most likely finished. */
typedef struct rd_free_list {
    rd_slot **items;
    unsigned head, count, cap;
    int fifo;
} rd_free_list;

static rd_slot *rd_take(rd_free_list *f)
{
    if (!f->fifo)
        return f->items[--f->count];
    rd_slot *s = f->items[f->head];
    f->head = (f->head + 1) % f->cap;
    f->count--;
    return s;
}

static void rd_give(rd_free_list *f, rd_slot *s)
{
    f->items[f->fifo ? (f->head + f->count) % f->cap : f->count] = s;
    f->count++;
}

/* --verify: a completed (and scattered) slot goes to the hashing threads and is reused once
 * hashed. By blocks each chunk is whole blocks and went as soon as it was read. Whole files: it waits until every
 * chunk before it went, so that each file is hashed front to back whatever order the reads
 * complete in; the chunk to hand over next is always being read (chunks are submitted in order),
 * so waiting never stalls the loop. */
static void rd_verify_hand(rd_ctx *x, rd_slot *s)
{
    if (rd_verify_by_blocks(x->verify))   /* already pushed by rd_complete */
        return;
    s->held = 1;
    for (int found = 1; found;) {
        found = 0;
        for (unsigned i = 0; i < x->n_slots; i++) {
            rd_slot *h = &x->slots[i];
            if (!h->held || h->chunk != x->verify_next)
                continue;
            const rd_chunk *c = &x->chunks.v[h->chunk];
            h->held = 0;
            rd_verify_push(x->verify, c->file, c->a, c->b,
                           c->dst ? c->dst : h->buf + (c->a - h->req.off), h);
            x->verify_next++;
            found = 1;
        }
    }
}

/* Slots the hashing thread is done with back to the free list; block: wait for one (there is
 * one: no read in flight means every slot out was handed over). */
static sl_status rd_verify_take(rd_ctx *x, rd_free_list *fl, unsigned *busy, int block)
{
    unsigned n = 0;
    for (rd_slot *s; (s = rd_verify_done(x->verify, block && !n)) != NULL; n++) {
        rd_give(fl, s);
        (*busy)--;
    }
    if (block && !n)
        return sl_err_set(x->err, SL_E_IO, "--verify: %u slots neither read nor hashed", *busy);
    return SL_OK;
}

sl_status rd_pipeline(rd_ctx *x)
{
    rd_free_list fl = {.items = calloc(x->n_slots, sizeof(rd_slot *)), .cap = x->n_slots,
                       .fifo = x->use_marks};
    if (!fl.items)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < x->n_slots; i++)
        rd_give(&fl, &x->slots[i]);
    sl_status st = x->verify ? rd_verify_start(x->verify, x->n_slots, x->err) : SL_OK;
    unsigned busy = 0, reads = 0, peak = 0;   /* slots out of the free list; of them, being read */
    int64_t next = 0;
    while (st == SL_OK && (next < x->chunks.n || busy)) {
        if (x->verify)   /* with no read in flight and none to start, only hashing frees a slot */
            st = rd_verify_take(x, &fl, &busy, !reads && !(next < x->chunks.n && fl.count));
        while (st == SL_OK && next < x->chunks.n && fl.count) {
            st = rd_submit(x, rd_take(&fl), next++);
            busy++;
            reads++;
            peak = busy > peak ? busy : peak;
        }
        if (st != SL_OK || !reads)
            continue;
        sl_io_req *done = NULL;
        st = x->io.ops->wait(x->io.ctx, &done, x->err);
        if (st != SL_OK)
            break;
        int again = 0;
        st = rd_complete(x, done->user, &again);
        if (again)
            continue;
        reads--;
        if (st == SL_OK && x->verify) {
            rd_verify_hand(x, done->user);
        } else {
            busy--;
            rd_give(&fl, done->user);
        }
    }
    x->staging_peak = (uint64_t)peak * x->slot_size;
    free(fl.items);
    return st;
}
