/* read_step.c - the read engine in pieces (read_step.h), for loads that do not run its whole
 * pipeline in one process: src/mpi/'s ranks share one chunk list, each reads its own chunks into
 * two staging slots and scatters what it read or received into its local devices. Set up by
 * rd_setup like the whole load, without direct reads (other ranks may need any chunk's bytes). */
#include "load/read_ctx.h"
#include "load/read_step.h"

#include <stdlib.h>

/* Two slots, so that a rank reads its next chunk while it exchanges and scatters the current
 * one. Chunk i goes to slot i % n_slots: a rank's chunks are consecutive. */
struct sl_rd {
    rd_ctx x;
    int64_t pending[2];   /* chunk being read into slot s, or -1 */
    int complete[2];      /* its read has completed */
};

sl_status sl_rd_open(const sl_rd_setup *s, sl_rd **out)
{
    sl_rd *r = calloc(1, sizeof *r);
    *out = r;
    if (!r)
        return sl_err_set(s->err, SL_E_NOMEM, "out of memory");
    r->pending[0] = r->pending[1] = -1;
    const rd_config c = {.files = s->files, .n_files = s->n_files, .p = s->p, .devs = s->devs,
                         .local = s->local, .o = s->o, .manifest = s->manifest, .err = s->err,
                         .ring_bytes = s->ring_bytes,
                         .slot_bytes = s->slot_bytes, .n_slots = 2,
                         .extra_slots = s->extra_slots, .verify = s->o->verify, .split = 1};
    SL_TRY(rd_setup(&r->x, &c));
    if (!r->x.verify)
        return SL_OK;
    /* A rank reads only some chunks of a file, so it cannot hash a file whole: only blocks. */
    SL_CHECK(rd_verify_by_blocks(r->x.verify), s->err, SL_E_UNSUPPORTED,
             "--verify with --dist cooperative needs a manifest with XXH3 blocks (each rank reads "
             "only part of each file; --write-manifest writes them); for SHA-256 use --dist "
             "independent or one process");
    return rd_verify_start(r->x.verify, r->x.n_slots, s->err);
}

/* --verify: hashed chunks' slots are free again; wait: until slot k is. */
static sl_status rd_step_unhold(rd_ctx *x, rd_slot *k)
{
    while (k->held) {
        rd_slot *d = rd_verify_done(x->verify, 1);
        SL_CHECK(d != NULL, x->err, SL_E_IO, "--verify: a slot is neither read nor hashed");
        d->held = 0;
    }
    return SL_OK;
}

int sl_rd_verifies(const sl_rd *r)
{
    return r->x.verify != NULL;
}

sl_status sl_rd_verify_finish(sl_rd *r, sl_load_stats *stats)
{
    rd_ctx *x = &r->x;
    if (!x->verify)
        return SL_OK;
    for (unsigned i = 0; i < x->n_slots && x->slots; i++)
        SL_TRY(rd_step_unhold(x, &x->slots[i]));
    return rd_verify_finish(x->verify, &stats->verified_bytes, &stats->verified_files, x->err);
}

uint64_t sl_rd_verified_bytes(const sl_rd *r, int32_t file)
{
    return r->x.verify ? rd_verify_file_bytes(r->x.verify, file) : 0;
}

int64_t sl_rd_chunk_count(const sl_rd *r)
{
    return r->x.chunks.n;
}

sl_rd_chunk sl_rd_chunk_at(const sl_rd *r, int64_t i)
{
    const rd_chunk *c = &r->x.chunks.v[i];
    return (sl_rd_chunk){.file = c->file, .a = c->a, .b = c->b, .b_ext = c->b_ext};
}

uint64_t sl_rd_slot_bytes(const sl_rd *r)
{
    return r->x.chunks.n ? r->x.slot_size : 0;
}

unsigned char *sl_rd_extra(sl_rd *r)
{
    const rd_ctx *x = &r->x;
    return x->staging && x->extra_slots ? x->staging + (size_t)x->n_slots * x->slot_size : NULL;
}

sl_status sl_rd_fence(sl_rd *r)
{
    return r->x.in_flight ? rd_fence(&r->x) : SL_OK;
}

sl_status sl_rd_start(sl_rd *r, int64_t i)
{
    rd_ctx *x = &r->x;
    const unsigned k = (unsigned)(i % x->n_slots);
    SL_CHECK(i >= 0 && i < x->chunks.n && r->pending[k] < 0, x->err, SL_E_INVALID_ARG,
             "read of chunk %lld started while its slot is busy", (long long)i);
    if (x->verify)   /* the chunk read into it before may still be being hashed */
        SL_TRY(rd_step_unhold(x, &x->slots[k]));
    SL_TRY(rd_submit(x, &x->slots[k], i));
    r->pending[k] = i;
    r->complete[k] = 0;
    /* both slots are allocated and touched: count them, whether or not one is idle just now */
    x->staging_peak = (uint64_t)x->n_slots * x->slot_size;
    return SL_OK;
}

sl_status sl_rd_read(sl_rd *r, int64_t i, const unsigned char **data)
{
    rd_ctx *x = &r->x;
    const unsigned k = (unsigned)(i % x->n_slots);
    if (r->pending[k] != i)
        SL_TRY(sl_rd_start(r, i));
    while (!r->complete[k]) {
        sl_io_req *done = NULL;
        int again = 0;
        SL_TRY(x->io.ops->wait(x->io.ctx, &done, x->err));
        rd_part *d = done->user;
        SL_TRY(rd_check(x, d, &again));
        if (!again && --d->slot->pending == 0)   /* a split chunk: its last part */
            r->complete[d->slot->index] = 1;
    }
    r->pending[k] = -1;
    rd_slot *s = &x->slots[k];
    const rd_chunk *c = &x->chunks.v[i];
    *data = rd_part_data(x, &s->parts[0]);
    if (x->verify) {   /* hashed while the caller exchanges and scatters it (both only read it) */
        s->held = 1;
        rd_verify_push(x->verify, c->file, c->a, c->b, *data, s);
    }
    return SL_OK;
}

sl_status sl_rd_scatter(sl_rd *r, const sl_rd_chunk *c, const unsigned char *data)
{
    const rd_chunk rc = {.file = c->file, .a = c->a, .b = c->b, .b_ext = c->b_ext};
    return rd_scatter_chunk(&r->x, &rc, data);
}

/* ---- segments ------------------------------------------------------------------------------- */

static int rd_seg_cmp(const void *x, const void *y)
{
    const sl_rd_seg *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

static sl_status rd_seg_push(sl_rd_segs *s, uint64_t off, uint64_t len)
{
    if (s->n > 0 && s->seg[s->n - 1].off + s->seg[s->n - 1].len == off) {
        s->seg[s->n - 1].len += len;   /* rows that touch: one range */
        return SL_OK;
    }
    if (s->n == s->cap) {
        const int64_t cap = s->cap ? 2 * s->cap : 64;
        sl_rd_seg *g = realloc(s->seg, (size_t)cap * sizeof *g);
        if (!g)
            return SL_E_NOMEM;
        s->seg = g;
        s->cap = cap;
    }
    s->seg[s->n++] = (sl_rd_seg){.off = off, .len = len};
    return SL_OK;
}

/* The rows of op r that meet [a, e), clipped to it, relative to a. */
static sl_status rd_op_segments(const rd_op *r, uint64_t a, uint64_t e, sl_rd_segs *s)
{
    const sl_op *op = r->op;
    const uint64_t row_bytes = op->row_elems * r->ssize;
    const uint64_t stride = op->rows > 1 ? op->src_stride : row_bytes;
    uint64_t k = op->rows > 1 && a > op->src_offset ? (a - op->src_offset) / stride : 0;
    for (; k < op->rows; k++) {
        const uint64_t rs = op->src_offset + k * stride, re = rs + row_bytes;
        if (rs >= e)
            break;
        if (re <= a)
            continue;
        const uint64_t lo = rs > a ? rs : a, hi = re < e ? re : e;
        SL_TRY(rd_seg_push(s, lo - a, hi - lo));
    }
    return SL_OK;
}

/* Several devices (or operations) may need the same bytes: sorted, then overlaps merged. */
static void rd_segs_merge(sl_rd_segs *s)
{
    if (s->n > 1)
        qsort(s->seg, (size_t)s->n, sizeof *s->seg, rd_seg_cmp);
    int64_t w = 0;
    for (int64_t i = 0; i < s->n; i++) {
        const uint64_t end = s->seg[i].off + s->seg[i].len;
        if (w > 0 && s->seg[i].off <= s->seg[w - 1].off + s->seg[w - 1].len) {
            const uint64_t prev = s->seg[w - 1].off + s->seg[w - 1].len;
            s->seg[w - 1].len = (end > prev ? end : prev) - s->seg[w - 1].off;
        } else {
            s->seg[w++] = s->seg[i];
        }
    }
    s->n = w;
}

/* The candidates are those of rd_scatter_chunk (rd_ops_between). */
sl_status sl_rd_segments(const sl_rd *r, const sl_rd_chunk *c, int32_t d0, int32_t d1, sl_rd_segs *s)
{
    const rd_ctx *x = &r->x;
    int64_t lo = 0, hi = 0;
    s->n = 0;
    rd_ops_between(&x->ops, c->file, c->a, c->b, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const rd_op *o = &x->ops.v[i];
        if (o->src_end <= c->a || o->dev < d0 || o->dev >= d1)
            continue;
        if (rd_op_segments(o, c->a, c->b_ext, s) != SL_OK)
            return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    }
    rd_segs_merge(s);
    return SL_OK;
}

void sl_rd_close(sl_rd *r, sl_load_stats *stats)
{
    if (!r)
        return;
    if (stats) {
        stats->bytes_read = r->x.bytes_read;
        stats->read_requests = r->x.requests;
        stats->read_depth_peak = r->x.reading_peak;
        stats->staging_peak = r->x.staging_peak + r->x.bounce_bytes;
        stats->io = rd_files_io_name(&r->x.files);
        stats->engine = r->x.io.ops ? r->x.io.ops->name : "none";
        rd_remote_counts(&r->x, stats);
    }
    rd_free(&r->x);
    free(r);
}
