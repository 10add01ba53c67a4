/* read_pipeline.c - up to n_slots slots being read (io_uring or the pread pool), each holding one
 * chunk (in one request or, split, in several) or several small ones (rd_slot), each completed
 * slot scattered on the loading thread, and the device waits that make reusing a slot safe: per
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

/* Before slot s is refilled: no device copy may still read it. */
static sl_status rd_slot_ready(rd_ctx *x, rd_slot *s)
{
    if (s->marked)
        SL_TRY(rd_wait_mark(x, s));
    if (x->in_flight)
        SL_TRY(rd_fence(x));
    return SL_OK;
}

static uint64_t rd_page_down(uint64_t o)
{
    return o / RD_ALIGN * RD_ALIGN;
}

/* Starts reading pt's bytes [lo, hi) of its chunk into the slot (also again, after an O_DIRECT
 * refusal), where read_ctx.h's layout puts them. */
static sl_status rd_submit_part(rd_ctx *x, rd_part *pt)
{
    const rd_chunk *c = &x->chunks.v[pt->chunk];
    if (sl_cancel_requested())   /* sl_cancel: the caller's cleanup runs as after any failure */
        return sl_err_set(x->err, SL_E_CANCELLED, "%s: cancelled before reading offset %llu",
                          x->files.v[c->file].path, (unsigned long long)pt->lo);
    SL_TRY(rd_file_acquire(&x->files, c->file, x->err));   /* released by rd_check */
    const rd_file *f = &x->files.v[c->file];
    sl_io_req *r = &pt->req;
    x->requests++;
    if (++x->reading > x->reading_peak)
        x->reading_peak = x->reading;
    r->fd = f->fd;
    r->obj = f->remote;
    r->user = pt;
    r->buffered = !f->direct;
    if (c->dst) {   /* straight into a host device: never split */
        r->off = c->a;
        r->len = (size_t)(c->b_ext - c->a);
        r->buf = c->dst;
    } else {
        r->off = f->direct ? rd_page_down(pt->lo) : pt->lo;
        r->len = (size_t)((f->direct ? sl_align_up(pt->hi, RD_ALIGN) : pt->hi) - r->off);
        r->buf = pt->buf + (r->off - rd_page_down(c->a));
    }
    return x->io.ops->submit(x->io.ctx, r, x->err);
}

/* The parts chunk c is read in: 1, or with splits (rd_config.split) up to x->split, each at least
 * RD_SPLIT_MIN bytes; *piece: the bytes of each but the first and last, a whole number of pages
 * from c's first page, so that O_DIRECT parts neither overlap nor leave a gap. */
static unsigned rd_split_count(const rd_ctx *x, const rd_chunk *c, uint64_t *piece)
{
    const uint64_t span = sl_align_up(c->b_ext, RD_ALIGN) - rd_page_down(c->a);
    *piece = span;
    if (x->split <= 1 || c->dst || span < 2 * RD_SPLIT_MIN)
        return 1;
    const uint64_t n = sl_min_u64(x->split, span / RD_SPLIT_MIN);
    *piece = sl_align_up((span + n - 1) / n, RD_ALIGN);
    return (unsigned)((span + *piece - 1) / *piece);
}

/* Puts chunk `chunk` into slot s at buf: its parts from s->n_parts on, each submitted. */
static sl_status rd_add_chunk(rd_ctx *x, rd_slot *s, int64_t chunk, unsigned char *buf,
                              unsigned n, uint64_t piece)
{
    const rd_chunk *c = &x->chunks.v[chunk];
    const uint64_t base = rd_page_down(c->a);
    for (unsigned k = 0; k < n; k++) {
        rd_part *pt = &s->parts[s->n_parts++];
        pt->chunk = chunk;
        pt->buf = buf;
        pt->lo = sl_max_u64(c->a, base + k * piece);
        pt->hi = sl_min_u64(c->b_ext, base + (k + 1) * piece);
        s->pending++;
        SL_TRY(rd_submit_part(x, pt));
    }
    return SL_OK;
}

/* Fills slot s from chunk *next on: one chunk, or as many consecutive ones as rd_joins lets in,
 * up to max_chunks and the slot's x->pack parts, side by side in pages. */
static sl_status rd_fill(rd_ctx *x, rd_slot *s, int64_t *next, unsigned max_chunks)
{
    SL_TRY(rd_slot_ready(x, s));
    const rd_chunk *first = &x->chunks.v[*next];
    s->chunk = *next;
    s->n_parts = 0;
    s->pending = 0;
    uint64_t used = 0;
    for (unsigned chunks = 0; *next < x->chunks.n && chunks < max_chunks; chunks++) {
        const rd_chunk *c = &x->chunks.v[*next];
        const uint64_t room = rd_chunk_room(c);
        uint64_t piece = 0;
        const unsigned n = rd_split_count(x, c, &piece);
        if (chunks && (!rd_joins(first, c) || used + room > x->slot_size ||
                       s->n_parts + n > x->pack))
            break;
        SL_TRY(rd_add_chunk(x, s, (*next)++, s->buf + used, n, piece));
        used += room;
    }
    return sl_io_flush(&x->io, x->err);
}

sl_status rd_submit(rd_ctx *x, rd_slot *s, int64_t chunk)
{
    return rd_fill(x, s, &chunk, 1);
}

const unsigned char *rd_part_data(const rd_ctx *x, const rd_part *pt)
{
    const rd_chunk *c = &x->chunks.v[pt->chunk];
    return c->dst ? c->dst : pt->buf + (c->a - rd_page_down(c->a));
}

sl_status rd_check(rd_ctx *x, rd_part *pt, int *resubmitted)
{
    const rd_chunk *c = &x->chunks.v[pt->chunk];
    rd_file *f = &x->files.v[c->file];
    const sl_io_req *r = &pt->req;
    const int64_t res = r->result;
    *resubmitted = 0;
    x->reading--;
    rd_file_release(&x->files, c->file);
    /* O_DIRECT refused: the file goes on buffered, and this read again (also one issued through
     * the direct fd before another read made the file fall back) */
    if (res == -EINVAL && (r->fd != f->fd || f->direct)) {
        if (r->fd == f->fd)
            SL_TRY(rd_file_fallback(f, x->err));
        *resubmitted = 1;
        SL_TRY(rd_submit_part(x, pt));
        return sl_io_flush(&x->io, x->err);
    }
    if (res < 0)
        return sl_err_set(x->err, SL_E_IO, "%s: read error at offset %llu: %s", f->path,
                          (unsigned long long)r->off, strerror((int)-res));
    x->bytes_read += (uint64_t)res;
    if (r->off + (uint64_t)res < pt->hi)
        return sl_err_set(x->err, SL_E_CHANGED,
                          "%s: short read at offset %llu (file changed since planning?)", f->path,
                          (unsigned long long)(r->off + (uint64_t)res));
    return SL_OK;
}

/* Every part of s is read: its chunks go to the devices (and, by blocks, to the hash). */
static sl_status rd_complete(rd_ctx *x, rd_slot *s)
{
    for (unsigned k = 0; k < s->n_parts; k++) {
        const rd_part *pt = &s->parts[k];
        const rd_chunk *c = &x->chunks.v[pt->chunk];
        if (k && pt->chunk == s->parts[k - 1].chunk)
            continue;   /* a split chunk's later part: scattered with its first */
        const unsigned char *data = rd_part_data(x, pt);
        /* By blocks the hash needs no order: it runs while the chunk is scattered (both only
         * read the slot), and the slot comes back through rd_verify_done once both are done
         * (one chunk per slot under --verify: rd_config.pack). */
        if (x->verify && rd_verify_by_blocks(x->verify))
            rd_verify_push(x->verify, c->file, c->a, c->b, data, s);
        if (!c->dst)
            SL_TRY(rd_scatter_chunk(x, c, data));
        x->done_bytes += c->b - c->a;
        if (x->o->progress)
            x->o->progress(x->o->progress_user, x->done_bytes, x->chunks.total_bytes);
    }
    if (x->use_marks && x->in_flight)
        SL_TRY(rd_mark(x, s));
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
            rd_verify_push(x->verify, c->file, c->a, c->b, rd_part_data(x, &h->parts[0]), h);
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
    unsigned busy = 0, peak = 0;   /* slots out of the free list (x->reading: parts being read) */
    int64_t next = 0;
    while (st == SL_OK && (next < x->chunks.n || busy)) {
        if (x->verify)   /* with no read in flight and none to start, only hashing frees a slot */
            st = rd_verify_take(x, &fl, &busy, !x->reading && !(next < x->chunks.n && fl.count));
        while (st == SL_OK && next < x->chunks.n && fl.count) {
            st = rd_fill(x, rd_take(&fl), &next, x->pack);
            busy++;
            peak = busy > peak ? busy : peak;
        }
        if (st != SL_OK || !x->reading)
            continue;
        sl_io_req *done = NULL;
        st = x->io.ops->wait(x->io.ctx, &done, x->err);
        if (st != SL_OK)
            break;
        rd_part *pt = done->user;
        rd_slot *s = pt->slot;
        int again = 0;
        st = rd_check(x, pt, &again);
        if (again)
            continue;
        if (st == SL_OK && --s->pending)
            continue;   /* the slot's other parts are still being read */
        if (st == SL_OK)
            st = rd_complete(x, s);
        if (st == SL_OK && x->verify) {
            rd_verify_hand(x, s);
        } else {
            busy--;
            rd_give(&fl, s);
        }
    }
    x->staging_peak = (uint64_t)peak * x->slot_size;
    free(fl.items);
    return st;
}
