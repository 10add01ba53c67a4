/* plan_totals.c - the last step of planning: ops in (file, src_offset) order, bytes each device
 * needs from each file, and read_bytes, the size of the union of every COPY's source bytes over
 * all devices (what a loader that reads each byte once reads). */
#include "plan/plan_ctx.h"

#include <stdlib.h>
#include <string.h>

static int op_cmp(const void *a, const void *b)
{
    const sl_op *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->src_offset != y->src_offset)
        return x->src_offset < y->src_offset ? -1 : 1;
    return x->dst_offset < y->dst_offset ? -1 : x->dst_offset > y->dst_offset;
}

static uint64_t op_src_bytes(const sl_op *op)
{
    return op->rows * op->row_elems * (sl_dtype_bits(op->src_dtype) / 8);
}

static sl_status device_file_bytes(sl_plan *p, sl_plan_device *d)
{
    d->file_bytes = sl_arena_alloc(&p->arena, (size_t)p->n_files * sizeof(uint64_t) + 1);
    SL_CHECK(d->file_bytes != NULL, &p->err, SL_E_NOMEM, "out of memory");
    memset(d->file_bytes, 0, (size_t)p->n_files * sizeof(uint64_t));
    for (int64_t i = 0; i < d->n_ops; i++) {
        const sl_op *op = &d->ops[i];
        if (op->kind == SL_OP_COPY && op->file >= 0 && op->file < p->n_files)
            d->file_bytes[op->file] += op_src_bytes(op);
    }
    return SL_OK;
}

/* ---- read_bytes: union of rectangles per checkpoint tensor ------------------------------------ */

/* A COPY's source bytes: `rows` runs of `len` bytes, `pitch` apart (pitch 0: one run), from
 * `start` bytes after the tensor's first byte. */
typedef struct rect {
    int64_t tensor;
    uint64_t pitch;             /* src_stride in bytes, 0 for a single run */
    uint64_t start;             /* byte offset of row 0 */
    uint64_t rows, len;         /* rows and bytes per row */
} rect;

static int rect_cmp(const void *a, const void *b)
{
    const rect *x = a, *y = b;
    if (x->tensor != y->tensor)
        return x->tensor < y->tensor ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct ival {
    uint64_t a, b;
} ival;

static int ival_cmp(const void *x, const void *y)
{
    const ival *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* Union of byte intervals [a, b); sorts v. */
static uint64_t ival_union(ival *v, size_t n)
{
    qsort(v, n, sizeof(*v), ival_cmp);
    uint64_t total = 0, end = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t a = v[i].a > end ? v[i].a : end;
        if (v[i].b > a)
            total += v[i].b - a;
        if (v[i].b > end)
            end = v[i].b;
    }
    return total;
}

/* Union of one tensor's rectangles (starts relative to the tensor). When all share one row pitch
 * and cover the same rows from row 0 (the planner's column blocks of o_proj/down_proj), the union
 * is that of their column runs times the rows; otherwise every row is one interval. */
static int rects_same_rows(const rect *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r[i].pitch == 0 || r[i].pitch != r[0].pitch || r[i].rows != r[0].rows ||
            r[i].start + r[i].len > r[i].pitch)
            return 0;
    }
    return 1;
}

static sl_status tensor_union(sl_plan *p, const rect *r, size_t n, uint64_t *out)
{
    const int same = rects_same_rows(r, n);
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++)
        cnt += same || r[i].pitch == 0 ? 1 : (size_t)r[i].rows;
    ival *v = malloc(cnt * sizeof(*v) + 1);
    SL_CHECK(v != NULL, &p->err, SL_E_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t rows = same || r[i].pitch == 0 ? 1 : r[i].rows;
        for (uint64_t j = 0; j < rows; j++, k++) {
            v[k].a = r[i].start + j * r[i].pitch;
            v[k].b = v[k].a + r[i].len;
        }
    }
    *out = ival_union(v, k) * (same ? r[0].rows : 1);
    free(v);
    return SL_OK;
}

static size_t rects_collect(const plan_ctx *c, rect *out)
{
    const sl_plan *p = c->p;
    size_t n = 0;
    for (int32_t d = 0; d < p->n_devices; d++) {
        for (int64_t i = 0; i < p->devices[d].n_ops; i++) {
            const sl_op *op = &p->devices[d].ops[i];
            if (op->kind != SL_OP_COPY)
                continue;
            sl_tensor_info ti;
            if (out && sl_checkpoint_tensor(c->ck, op->tensor, &ti) == SL_OK)
                out[n] = (rect){.tensor = op->tensor, .pitch = op->rows > 1 ? op->src_stride : 0,
                                .start = op->src_offset - ti.offset, .rows = op->rows,
                                .len = op->row_elems * (sl_dtype_bits(op->src_dtype) / 8)};
            n++;
        }
    }
    return n;
}

static sl_status read_bytes(plan_ctx *c)
{
    sl_plan *p = c->p;
    const size_t n = rects_collect(c, NULL);
    rect *r = calloc(n + 1, sizeof(*r));
    SL_CHECK(r != NULL, &p->err, SL_E_NOMEM, "out of memory");
    rects_collect(c, r);
    qsort(r, n, sizeof(*r), rect_cmp);
    sl_status st = SL_OK;
    p->read_bytes = 0;
    for (size_t i = 0, j; st == SL_OK && i < n; i = j) {
        for (j = i + 1; j < n && r[j].tensor == r[i].tensor;)
            j++;
        uint64_t bytes = 0;
        st = tensor_union(p, &r[i], j - i, &bytes);
        p->read_bytes += bytes;
    }
    free(r);
    return st;
}

uint64_t sl_plan_ckpt_digest(const sl_plan *p, const sl_checkpoint *ck)
{
    uint64_t h = 0;
    for (int32_t d = 0; d < p->n_devices; d++) {
        const sl_plan_device *dev = &p->devices[d];
        for (int64_t k = 0; k < dev->n_ops; k++) {
            sl_tensor_info ti;
            const sl_op *op = &dev->ops[k];
            if (op->kind != SL_OP_COPY || op->tensor < 0)
                continue;
            if (sl_checkpoint_tensor(ck, op->tensor, &ti) != SL_OK) {
                h = h * 0x9E3779B97F4A7C15ull + 1;   /* the checkpoint lacks that tensor */
                continue;
            }
            uint64_t f[4 + SL_PLAN_MAX_DIMS] = {sl_xxh3(ti.name, strlen(ti.name)),
                                                 ((uint64_t)ti.dtype << 32) | (uint32_t)ti.file,
                                                 ti.offset, ti.nbytes};
            const uint32_t nd = ti.ndim < SL_PLAN_MAX_DIMS ? ti.ndim : SL_PLAN_MAX_DIMS;
            for (uint32_t j = 0; j < nd; j++)
                f[4 + j] = ti.shape[j];
            h = h * 0x9E3779B97F4A7C15ull + sl_xxh3(f, (4 + nd) * sizeof f[0]);
        }
    }
    return h;
}

sl_status sl_plan_finish(plan_ctx *c)
{
    sl_plan *p = c->p;
    for (int32_t d = 0; d < p->n_devices; d++) {
        sl_plan_device *dev = &p->devices[d];
        /* Without a checkpoint every op has file -1 and an offset inside its own tensor: file
         * order means nothing, and sorting DeepSeek-V3's 90,000 ops a device was a third of its
         * plan time. The ops stay in parameter order. */
        if (c->ck != NULL)
            qsort(dev->ops, (size_t)dev->n_ops, sizeof(*dev->ops), op_cmp);
        SL_TRY(device_file_bytes(p, dev));
    }
    if (c->ck != NULL)
        p->ck_digest = sl_plan_ckpt_digest(p, c->ck);
    return c->ck != NULL ? read_bytes(c) : SL_OK;
}
