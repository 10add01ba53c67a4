/* read_chunks.c - the chunk planner (read_chunks.h): the plan's COPY operations, sorted, turned
 * into spans, merged ranges and request-sized chunks. No I/O and no devices. */
#include "load/read_chunks.h"

#include <stdlib.h>

#include "common/sl_bytes.h"

/* ---- operations ----------------------------------------------------------------------------- */

static int rd_op_cmp(const void *x, const void *y)
{
    const rd_op *a = x, *b = y;
    if (a->op->file != b->op->file)
        return a->op->file < b->op->file ? -1 : 1;
    if (a->op->src_offset != b->op->src_offset)
        return a->op->src_offset < b->op->src_offset ? -1 : 1;
    return 0;
}

static int rd_is_copy(const sl_op *op)
{
    return op->kind == SL_OP_COPY && op->rows && op->row_elems;
}

/* Bounds were checked by sl_load_check_plan, so src_end cannot overflow here. */
static void rd_op_init(const sl_plan *p, rd_ops *t, rd_op *r, const sl_op *op, int32_t dev)
{
    r->op = op;
    r->dev = dev;
    r->ssize = sl_dtype_bits(op->src_dtype) / 8;
    const sl_plan_device *pd = &p->devices[dev];   /* unit tests build ops without params */
    r->ddt = pd->params && op->param >= 0 && op->param < pd->n_params ? pd->params[op->param].dtype
                                                                      : p->dtype;
    r->dsize = sl_dtype_bits(r->ddt) / 8;
    const uint64_t dst_row = op->row_elems * r->dsize;
    r->whole = pd->params && op->param >= 0 && op->param < pd->n_params &&
               op->dst_offset == pd->params[op->param].offset && op->dst_stride == dst_row &&
               op->rows * dst_row == pd->params[op->param].nbytes;
    r->src_end = op->src_offset + (op->rows - 1) * op->src_stride + op->row_elems * r->ssize;
    t->used[op->file] = 1;
    if (op->src_offset % r->ssize || op->src_stride % r->ssize)
        t->tail[op->file] = r->ssize - 1 > t->tail[op->file] ? r->ssize - 1 : t->tail[op->file];
}

/* file_first and the prefix maximum of source ends, per file. */
static void rd_ops_index(rd_ops *t)
{
    int64_t i = 0;
    for (int64_t f = 0; f <= t->n_files; f++) {
        t->file_first[f] = i;
        uint64_t mx = 0;
        for (; f < t->n_files && i < t->n && t->v[i].op->file == f; i++) {
            mx = sl_max_u64(mx, t->v[i].src_end);
            t->v[i].max_end = mx;
        }
    }
}

sl_status rd_ops_build(const sl_plan *p, int64_t n_files, rd_ops *t, sl_err *err)
{
    int64_t n = 0;
    *t = (rd_ops){.n_files = n_files, .dtype = p->dtype};
    for (int32_t d = 0; d < p->n_devices; d++)
        for (int64_t k = 0; k < p->devices[d].n_ops; k++)
            n += rd_is_copy(&p->devices[d].ops[k]);
    t->v = calloc((size_t)n + 1, sizeof *t->v);
    t->file_first = calloc((size_t)n_files + 1, sizeof *t->file_first);
    t->used = calloc((size_t)n_files + 1, sizeof *t->used);
    t->tail = calloc((size_t)n_files + 1, sizeof *t->tail);
    if (!t->v || !t->file_first || !t->used || !t->tail)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int32_t d = 0; d < p->n_devices; d++) {
        const sl_plan_device *pd = &p->devices[d];
        for (int64_t k = 0; k < pd->n_ops; k++)
            if (rd_is_copy(&pd->ops[k]))
                rd_op_init(p, t, &t->v[t->n++], &pd->ops[k], d);
    }
    qsort(t->v, (size_t)t->n, sizeof *t->v, rd_op_cmp);
    rd_ops_index(t);
    return SL_OK;
}

void rd_ops_free(rd_ops *t)
{
    free(t->v);
    free(t->file_first);
    free(t->used);
    free(t->tail);
    *t = (rd_ops){0};
}

/* Operations of the file are sorted by start and max_end is non-decreasing, so both ends of the
 * candidates are binary searches. */
void rd_ops_between(const rd_ops *t, int32_t f, uint64_t a, uint64_t b, int64_t *lo_out,
                    int64_t *hi_out)
{
    int64_t lo = t->file_first[f], hi = t->file_first[f + 1];
    int64_t l = lo, h = hi;
    while (l < h) {
        int64_t mid = l + (h - l) / 2;
        if (t->v[mid].op->src_offset < b)
            l = mid + 1;
        else
            h = mid;
    }
    hi = l;
    for (h = hi; lo < h;) {
        int64_t mid = lo + (h - lo) / 2;
        if (t->v[mid].max_end > a)
            h = mid;
        else
            lo = mid + 1;
    }
    *lo_out = lo;
    *hi_out = hi;
}

/* ---- direct reads --------------------------------------------------------------------------- */

/* The bytes of v[i] are read by no other operation of its file. */
static int rd_exclusive(const rd_ops *t, int64_t i)
{
    const rd_op *r = &t->v[i];
    const int64_t first = t->file_first[r->op->file], end = t->file_first[r->op->file + 1];
    return (i == first || t->v[i - 1].max_end <= r->op->src_offset) &&
           (i + 1 == end || t->v[i + 1].op->src_offset >= r->src_end);
}

static void rd_mark_direct(rd_ops *t, const rd_chunk_opts *o)
{
    for (int64_t i = 0; o->direct && i < t->n; i++) {
        rd_op *r = &t->v[i];
        const sl_op *op = r->op;
        const uint64_t row_bytes = op->row_elems * r->ssize;
        r->direct = r->host_dst && !(o->file_direct && o->file_direct[op->file]) &&
                    !(o->whole && o->whole[op->file]) && !(o->block && o->block[op->file]) &&
                    op->src_dtype == r->ddt &&
                    (op->rows == 1 || (op->src_stride == row_bytes && op->dst_stride == row_bytes)) &&
                    r->src_end - op->src_offset >= RD_DIRECT_MIN && rd_exclusive(t, i);
    }
}

/* ---- spans, ranges and chunks --------------------------------------------------------------- */

typedef struct rd_span {
    int32_t file;
    uint64_t start, end;
} rd_span;

/* The gaps of file f that are read rather than skipped: under this many bytes. */
static uint64_t rd_gap(const rd_chunk_opts *o, int32_t f)
{
    return o->file_direct && o->file_direct[f] ? sl_max_u64(o->merge_gap, RD_ALIGN) : o->merge_gap;
}

/* Rows that touch, or are closer than the gaps read, are one span: the gap would be merged later
 * anyway. */
static int64_t rd_op_span_count(const rd_chunk_opts *o, const rd_op *r)
{
    const uint64_t row_bytes = r->op->row_elems * r->ssize;
    const uint64_t gap = r->op->src_stride - row_bytes;
    if (r->op->rows == 1 || gap == 0 || gap < rd_gap(o, r->op->file))
        return 1;
    return (int64_t)r->op->rows;
}

static int rd_span_cmp(const void *x, const void *y)
{
    const rd_span *a = x, *b = y;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* A span of a file verified by blocks, widened to whole blocks (the last ends at the size). */
static rd_span rd_widen(const rd_chunk_opts *o, rd_span s)
{
    const uint64_t bs = o->block ? o->block[s.file] : 0;
    if (!bs)
        return s;
    s.start = s.start / bs * bs;
    s.end = sl_min_u64(o->size[s.file], sl_align_up(s.end, bs));
    return s;
}

/* The header spans of a load verified by blocks: [0, head) of each used file. */
static int rd_head_span(const rd_ops *t, const rd_chunk_opts *o, int64_t f)
{
    return o->block && o->head && o->block[f] && t->used[f] && o->head[f] > 0;
}

static int64_t rd_merge_spans(const rd_chunk_opts *o, rd_span *s, int64_t n)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m && s[m - 1].file == s[i].file && s[i].start <= s[m - 1].end + rd_gap(o, s[i].file)) {
            s[m - 1].end = sl_max_u64(s[m - 1].end, s[i].end);
            continue;
        }
        s[m++] = s[i];
    }
    return m;
}

/* The spans of the staged (not direct) operations, sorted and merged into ranges. */
static sl_status rd_ranges(const rd_ops *t, const rd_chunk_opts *o, rd_span **out, int64_t *n_out,
                           sl_err *err)
{
    int64_t n = 0, k = 0;
    for (int64_t i = 0; i < t->n; i++)
        n += t->v[i].direct ? 0 : rd_op_span_count(o, &t->v[i]);
    for (int64_t f = 0; f < t->n_files; f++)
        n += (o->whole && o->whole[f] > 0) + rd_head_span(t, o, f);
    rd_span *s = calloc((size_t)n + 1, sizeof *s);
    if (!s)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t f = 0; o->whole && f < t->n_files; f++)
        if (o->whole[f] > 0)   /* merges with every span of the file into one range */
            s[k++] = (rd_span){.file = (int32_t)f, .start = 0, .end = o->whole[f]};
    for (int64_t f = 0; f < t->n_files; f++)
        if (rd_head_span(t, o, f))
            s[k++] = rd_widen(o, (rd_span){.file = (int32_t)f, .start = 0, .end = o->head[f]});
    for (int64_t i = 0; i < t->n; i++) {
        const rd_op *r = &t->v[i];
        if (r->direct)
            continue;
        const int64_t cnt = rd_op_span_count(o, r);
        const uint64_t row_bytes = r->op->row_elems * r->ssize;
        for (int64_t j = 0; j < cnt; j++) {
            s[k].file = r->op->file;
            s[k].start = r->op->src_offset + (uint64_t)j * r->op->src_stride;
            s[k].end = cnt == 1 ? r->src_end : s[k].start + row_bytes;
            s[k] = rd_widen(o, s[k]);
            k++;
        }
    }
    qsort(s, (size_t)n, sizeof *s, rd_span_cmp);
    *out = s;
    *n_out = rd_merge_spans(o, s, n);
    return SL_OK;
}

static sl_status rd_push_chunk(rd_chunks *cs, const rd_chunk *c, sl_err *err)
{
    if (cs->n == cs->cap) {
        int64_t cap = cs->cap ? 2 * cs->cap : 64;
        rd_chunk *n = realloc(cs->v, (size_t)cap * sizeof *n);
        if (!n)
            return sl_err_set(err, SL_E_NOMEM, "out of memory");
        cs->v = n;
        cs->cap = cap;
    }
    cs->v[cs->n++] = *c;
    cs->total_bytes += c->b - c->a;
    return SL_OK;
}

/* Interior boundaries are 4096-aligned, so O_DIRECT reads of neighbours never overlap; in a file
 * verified by blocks they are block boundaries (the range starts at one and the step is whole
 * blocks), so each chunk is whole blocks. */
static sl_status rd_cut_range(const rd_ops *t, const rd_chunk_opts *o, const rd_span *r,
                              rd_chunks *cs, sl_err *err)
{
    const uint64_t bs = o->block ? o->block[r->file] : 0;
    const uint64_t step = bs ? o->request / bs * bs : o->request;
    for (uint64_t a = r->start; a < r->end;) {
        rd_chunk c = {.file = r->file, .a = a};
        c.b = sl_min_u64(r->end, a / RD_ALIGN * RD_ALIGN + step);
        c.b_ext = sl_min_u64(r->end, c.b + t->tail[r->file]);
        SL_TRY(rd_push_chunk(cs, &c, err));
        a = c.b;
    }
    return SL_OK;
}

static sl_status rd_cut_direct(const rd_chunk_opts *o, const rd_op *r, rd_chunks *cs, sl_err *err)
{
    for (uint64_t a = r->op->src_offset; a < r->src_end;) {
        rd_chunk c = {.file = r->op->file, .a = a};
        c.b = c.b_ext = sl_min_u64(r->src_end, a + o->request);
        c.dst = r->host_dst + (a - r->op->src_offset);
        SL_TRY(rd_push_chunk(cs, &c, err));
        a = c.b;
    }
    return SL_OK;
}

static int rd_chunk_cmp(const void *p, const void *q)
{
    const rd_chunk *a = p, *b = q;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->a < b->a ? -1 : a->a > b->a;
}

sl_status rd_chunks_build(rd_ops *t, const rd_chunk_opts *o, rd_chunks *cs, sl_err *err)
{
    rd_span *s = NULL;
    int64_t n = 0;
    *cs = (rd_chunks){0};
    for (int64_t f = 0; o->block && f < t->n_files; f++)
        SL_CHECK(o->block[f] <= o->request && (o->block[f] % RD_ALIGN) == 0, err, SL_E_INVALID_ARG,
                 "--verify: the manifest's blocks (%llu bytes) do not fit a read request of %llu "
                 "bytes: give a larger --staging (or --request)", (unsigned long long)o->block[f],
                 (unsigned long long)o->request);
    rd_mark_direct(t, o);
    SL_TRY(rd_ranges(t, o, &s, &n, err));
    sl_status st = SL_OK;
    for (int64_t i = 0; i < n && st == SL_OK; i++)
        st = rd_cut_range(t, o, &s[i], cs, err);
    free(s);
    int any_direct = 0;
    for (int64_t i = 0; i < t->n && st == SL_OK; i++) {
        if (t->v[i].direct) {
            st = rd_cut_direct(o, &t->v[i], cs, err);
            any_direct = 1;
        }
    }
    if (st == SL_OK && any_direct)   /* one pass through each file, in order */
        qsort(cs->v, (size_t)cs->n, sizeof *cs->v, rd_chunk_cmp);
    return st;
}

sl_status rd_chunks_interleave(rd_chunks *cs, sl_err *err)
{
    if (cs->n < 2)
        return SL_OK;
    /* runs of one file each: [start[k], start[k + 1]), the list being sorted by (file, a) */
    int64_t *start = calloc((size_t)cs->n + 1, sizeof *start), *pos = NULL;
    rd_chunk *out = calloc((size_t)cs->n, sizeof *out);
    int64_t runs = 0;
    if (start && out) {
        for (int64_t i = 0; i < cs->n; i++)
            if (i == 0 || cs->v[i].file != cs->v[i - 1].file)
                start[runs++] = i;
        start[runs] = cs->n;
        pos = calloc((size_t)runs, sizeof *pos);
    }
    if (!start || !out || !pos) {
        free(start);
        free(out);
        free(pos);
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    for (int64_t k = 0; k < runs; k++)
        pos[k] = start[k];
    for (int64_t m = 0; m < cs->n;)
        for (int64_t k = 0; k < runs; k++)
            if (pos[k] < start[k + 1])
                out[m++] = cs->v[pos[k]++];
    free(cs->v);
    cs->v = out;
    cs->cap = cs->n;
    free(start);
    free(pos);
    return SL_OK;
}

void rd_chunks_free(rd_chunks *c)
{
    free(c->v);
    *c = (rd_chunks){0};
}
