/* read_scatter.c - a completed chunk into every device operation that needs its bytes: row by
 * row, partial rows at chunk boundaries, converting dtypes on the way. Host memory (cpu) is
 * written in place; other devices (cuda, file devices) take one copy per run, several whole rows
 * as one 2-D copy, or, for converted rows and with the ring, rows gathered into ring pieces that
 * are copied asynchronously and reused after their mark (docs/engine.md "CUDA backend"). */
#include "load/convert.h"
#include "load/read_ctx.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_bytes.h"

/* ---- the ring ------------------------------------------------------------------------------- */

/* The ring (asynchronous devices): piece k is filled, copied asynchronously and marked (tag
 * RD_MAX_SLOTS + k), and waited for only when it comes round again, so filling one piece overlaps
 * copying the ones before. */
static uint64_t rd_ring_piece_bytes(const rd_ctx *x)
{
    return x->bounce_bytes / RD_RING;
}

/* The next piece, once the copy that last read it is done; *k: its index. */
static sl_status rd_ring_take(rd_ctx *x, unsigned *k, unsigned char **piece)
{
    *k = x->ring_next++ % RD_RING;
    if (x->ring_dev[*k] >= 0) {
        SL_TRY(sl_device_wait_mark(&x->devs[x->ring_dev[*k]].dev, RD_MAX_SLOTS + *k, x->err));
        x->ring_dev[*k] = -1;
    }
    *piece = x->bounce + (size_t)(*k * rd_ring_piece_bytes(x));
    return SL_OK;
}

/* After piece k's copy to device dev was issued. */
static sl_status rd_ring_mark(rd_ctx *x, unsigned k, int32_t dev)
{
    SL_TRY(sl_device_mark(&x->devs[dev].dev, RD_MAX_SLOTS + k, x->err));
    x->ring_dev[k] = dev;
    x->marks_pending = 1;
    return SL_OK;
}

/* n converted elements through the ring, a piece at a time. */
static sl_status rd_put_ring(rd_ctx *x, const rd_op *r, uint64_t dst_off, const unsigned char *src,
                             uint64_t n)
{
    const sl_device *d = &x->devs[r->dev].dev;
    const uint64_t per = rd_ring_piece_bytes(x) / r->dsize;
    for (uint64_t i = 0; i < n; i += per) {
        unsigned k;
        unsigned char *piece;
        SL_TRY(rd_ring_take(x, &k, &piece));
        const uint64_t m = sl_min_u64(per, n - i);
        sl_convert_rows(x->pool, piece, 0, r->ddt, src + i * r->ssize, 0, r->op->src_dtype,
                        (size_t)m, 1);
        SL_TRY(sl_device_write(d, dst_off + i * r->dsize, piece, (size_t)(m * r->dsize), x->err));
        SL_TRY(rd_ring_mark(x, k, r->dev));
    }
    return SL_OK;
}

/* ---- runs ----------------------------------------------------------------------------------- */

/* Writes n elements of src (in src_dt) to device offset dst_off, converting as needed. */
static sl_status rd_put(rd_ctx *x, const rd_op *r, uint64_t dst_off, const unsigned char *src,
                        uint64_t n)
{
    const sl_device *d = &x->devs[r->dev].dev;
    const sl_dtype sdt = r->op->src_dtype, ddt = r->ddt;
    if (r->host_dst) {
        unsigned char *at = r->host_dst + (dst_off - r->op->dst_offset);
        if (sdt == ddt)
            memcpy(at, src, (size_t)(n * r->ssize));
        else
            sl_convert_rows(x->pool, at, 0, ddt, src, 0, sdt, (size_t)n, 1);
        return SL_OK;
    }
    x->in_flight |= sl_device_is_async(d); /* copies may read staging until rd_fence */
    if (sdt == ddt)
        return sl_device_write(d, dst_off, src, (size_t)(n * r->ssize), x->err);
    if (sl_device_converts(d, dst_off, ddt, sdt))   /* the device converts: it is sent the source bytes */
        return sl_device_write_convert(d, dst_off, ddt, src, sdt, (size_t)n, x->err);
    if (x->ring)
        return rd_put_ring(x, r, dst_off, src, n);
    const uint64_t per = x->bounce_bytes / 4;   /* elements of up to 4 bytes */
    for (uint64_t i = 0; i < n; i += per) {
        const uint64_t m = sl_min_u64(per, n - i);
        sl_convert(x->bounce, ddt, src + i * r->ssize, sdt, (size_t)m);
        SL_TRY(sl_device_write(d, dst_off + i * r->dsize, x->bounce, (size_t)(m * r->dsize), x->err));
    }
    return SL_OK;
}

/* ---- whole rows ----------------------------------------------------------------------------- */

/* Number of rows k, k+1, ... lying wholly inside [0, b) (rows > 1, so src_stride > 0). */
static uint64_t rd_whole_rows(const rd_op *r, uint64_t k, uint64_t b)
{
    const sl_op *op = r->op;
    const uint64_t row_bytes = op->row_elems * r->ssize;
    if (op->src_offset + row_bytes > b)
        return 0;
    const uint64_t last = (b - row_bytes - op->src_offset) / op->src_stride;
    return last >= k ? sl_min_u64(last + 1, op->rows) - k : 0;
}

/* 1 when rows [k, k + rows) of r are gathered into ring pieces rather than sent one copy per row
 * (or as one 2-D copy): converted rows always (a copy, an event and a wait per row would make a
 * column split's thousands of rows as many tiny copies), same-dtype rows narrower than
 * gather_rows, and narrower than gather_parts unless they are all of a parameter's rows (one
 * strided upload; an op that is one of several in its parameter, as a stacked expert is, is
 * gathered). */
static int rd_gathers(const rd_ctx *x, const rd_op *r, uint64_t k, uint64_t rows)
{
    const sl_op *op = r->op;
    const uint64_t dst_row = op->row_elems * r->dsize;
    if (!x->ring || op->rows < 2 || dst_row > rd_ring_piece_bytes(x))
        return 0;
    if (op->src_dtype != r->ddt)
        return 1;
    if (op->src_stride == op->row_elems * r->ssize)
        return 0;
    return dst_row < x->gather_rows ||
           (dst_row < x->gather_parts && !(r->whole && k == 0 && rows == op->rows));
}

/* Rows gathered unconverted into ring pieces, each converted by the device on its way (the
 * destination rows adjacent: one run per piece). */
static sl_status rd_gather_rows_raw(rd_ctx *x, const rd_op *r, uint64_t k, uint64_t rows,
                                    const unsigned char *src)
{
    const sl_op *op = r->op;
    const sl_device *d = &x->devs[r->dev].dev;
    const uint64_t src_row = op->row_elems * r->ssize, per = rd_ring_piece_bytes(x) / src_row;
    for (uint64_t i = 0; i < rows; i += per) {
        unsigned p;
        unsigned char *piece;
        SL_TRY(rd_ring_take(x, &p, &piece));
        const uint64_t m = sl_min_u64(per, rows - i);
        sl_convert_rows(NULL, piece, (size_t)src_row, op->src_dtype, src + i * op->src_stride,
                        (size_t)op->src_stride, op->src_dtype, (size_t)op->row_elems, (size_t)m);
        SL_TRY(sl_device_write_convert(d, op->dst_offset + (k + i) * op->dst_stride, r->ddt, piece,
                                       op->src_dtype, (size_t)(m * op->row_elems), x->err));
        SL_TRY(rd_ring_mark(x, p, r->dev));
    }
    return SL_OK;
}

/* rows whole rows from row k, src at row k's first byte: as many as fit in a ring piece are
 * converted (or copied) into it back to back, and the piece goes in one copy (2-D when the
 * destination rows are not adjacent). */
static sl_status rd_gather_rows(rd_ctx *x, const rd_op *r, uint64_t k, uint64_t rows,
                                const unsigned char *src)
{
    const sl_op *op = r->op;
    const sl_device *d = &x->devs[r->dev].dev;
    const uint64_t dst_row = op->row_elems * r->dsize, per = rd_ring_piece_bytes(x) / dst_row;
    x->in_flight |= sl_device_is_async(d);
    if (op->src_dtype != r->ddt && op->dst_stride == dst_row &&
        sl_device_converts(d, op->dst_offset + k * op->dst_stride, r->ddt, op->src_dtype))
        return rd_gather_rows_raw(x, r, k, rows, src);
    for (uint64_t i = 0; i < rows; i += per) {
        unsigned p;
        unsigned char *piece;
        SL_TRY(rd_ring_take(x, &p, &piece));
        const uint64_t m = sl_min_u64(per, rows - i);
        sl_convert_rows(x->pool, piece, (size_t)dst_row, r->ddt, src + i * op->src_stride,
                        (size_t)op->src_stride, op->src_dtype, (size_t)op->row_elems, (size_t)m);
        const uint64_t dst_off = op->dst_offset + (k + i) * op->dst_stride;
        if (op->dst_stride == dst_row)
            SL_TRY(sl_device_write(d, dst_off, piece, (size_t)(m * dst_row), x->err));
        else
            SL_TRY(sl_device_write2d(d, dst_off, op->dst_stride, piece, (size_t)dst_row,
                                     (size_t)dst_row, (size_t)m, x->err));
        SL_TRY(rd_ring_mark(x, p, r->dev));
    }
    return SL_OK;
}

/* Several whole rows of an op, from row k (starting inside the chunk), go to a device that is
 * not host memory in few calls: gathered through the ring (rd_gathers), or else, same dtype, as
 * one 2-D copy (cudaMemcpy2DAsync; one write per row for synchronous backends, as the caller's
 * loop would do). *n: rows written, 0 when neither applies (the caller copies row by row). */
static sl_status rd_put_rows(rd_ctx *x, const rd_op *r, uint64_t k, uint64_t a, uint64_t b,
                             const unsigned char *data, uint64_t *n)
{
    const sl_op *op = r->op;
    const sl_device *d = &x->devs[r->dev].dev;
    const uint64_t rs = op->src_offset + k * op->src_stride;
    *n = 0;
    if (r->host_dst || op->rows < 2 || rs < a || op->src_stride > SIZE_MAX)
        return SL_OK;
    const uint64_t rows = rd_whole_rows(r, k, b);
    const int gather = rows >= 2 && rd_gathers(x, r, k, rows);
    if (rows < 2 || (!gather && op->src_dtype != r->ddt))
        return SL_OK;
    *n = rows;
    if (gather)
        return rd_gather_rows(x, r, k, rows, data + (rs - a));
    x->in_flight |= sl_device_is_async(d);
    return sl_device_write2d(d, op->dst_offset + k * op->dst_stride, op->dst_stride,
                             data + (rs - a), (size_t)op->src_stride,
                             (size_t)(op->row_elems * r->ssize), (size_t)rows, x->err);
}

/* ---- chunks --------------------------------------------------------------------------------- */

/* Copies the elements of op rows that chunk [a, b) owns; data holds file bytes from offset a. */
static sl_status rd_scatter_op(rd_ctx *x, const rd_op *r, uint64_t a, uint64_t b,
                               const unsigned char *data)
{
    const sl_op *op = r->op;
    const uint64_t es = r->ssize, row_bytes = op->row_elems * es;
    uint64_t k = 0;
    if (a > op->src_offset && op->rows > 1) {
        k = (a - op->src_offset) / op->src_stride;
        if (op->src_offset + k * op->src_stride + row_bytes <= a)
            k++;
    }
    for (; k < op->rows; k++) {
        const uint64_t rs = op->src_offset + k * op->src_stride;
        if (rs >= b)
            break;
        if (rs + row_bytes <= a)
            continue;
        uint64_t rows2d = 0;
        SL_TRY(rd_put_rows(x, r, k, a, b, data, &rows2d));
        if (rows2d) {
            k += rows2d - 1;
            continue;
        }
        const uint64_t j0 = rs >= a ? 0 : sl_cdiv_u64(a - rs, es);
        const uint64_t j1 = sl_min_u64(op->row_elems, sl_cdiv_u64(b - rs, es));
        if (j0 < j1)
            SL_TRY(rd_put(x, r, op->dst_offset + k * op->dst_stride + j0 * r->dsize,
                          data + (rs + j0 * es - a), j1 - j0));
    }
    return SL_OK;
}

sl_status rd_scatter_chunk(rd_ctx *x, const rd_chunk *c, const unsigned char *data)
{
    int64_t lo = 0, hi = 0;
    rd_ops_between(&x->ops, c->file, c->a, c->b, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        const rd_op *r = &x->ops.v[i];
        if (r->src_end > c->a && !r->direct && rd_local(x, r->dev))
            SL_TRY(rd_scatter_op(x, r, c->a, c->b, data));
    }
    return SL_OK;
}

/* ---- conversions ---------------------------------------------------------------------------- */

int rd_staged_work(const rd_ctx *x, int narrow_too)
{
    for (int64_t i = 0; i < x->ops.n; i++) {
        const rd_op *r = &x->ops.v[i];
        if (r->host_dst || !rd_local(x, r->dev))
            continue;
        if (r->op->src_dtype != r->ddt)
            return 1;
        const uint64_t row = r->op->row_elems * r->ssize;
        if (narrow_too && r->op->rows > 1 && r->op->src_stride != row &&
            (row < x->gather_rows || row < x->gather_parts))
            return 1;
    }
    return 0;
}

/* Conversions run on the loading thread and, when they are large (sl_convert_rows), on helper
 * threads too: up to 7, fewer on smaller hosts, started only when some local device receives
 * converted elements. Converting is the one CPU-bound step of a load: single-threaded, f32 ->
 * bf16 runs at ~2.7 G elements/s here (bench_convert), below the page cache and a PCIe 5 link. */
unsigned rd_pool_helpers(const rd_ctx *x)
{
    int converts = 0;
    for (int64_t i = 0; i < x->ops.n && !converts; i++)
        converts = x->ops.v[i].op->src_dtype != x->ops.v[i].ddt && rd_local(x, x->ops.v[i].dev);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return converts && cpus > 1 ? (unsigned)(cpus > 8 ? 7 : cpus - 1) : 0;
}

void rd_start_pool(rd_ctx *x)
{
    const unsigned helpers = rd_pool_helpers(x);
    if (helpers)
        x->pool = sl_pool_new(helpers);
}
