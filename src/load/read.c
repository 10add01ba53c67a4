/* read.c - "read once, place everywhere": the checkpoint side of a load.
 *
 * 1. Gather every COPY operation of every device and sort them by (file, source offset).
 * 2. Turn them into source spans (one per operation, or one per row when the rows are far apart),
 *    sort and merge them into ranges; gaps under merge_gap are read rather than skipped, so that
 *    requests stay large (the extra bytes count in bytes_read).
 * 3. Cut the ranges into chunks of at most `request` bytes at 4096-aligned boundaries, so that
 *    O_DIRECT reads of neighbouring chunks never overlap.
 * 4. Read chunks into a fixed set of staging slots, several in flight, and scatter each completed
 *    chunk into every operation (of any device) that intersects it, converting dtypes on the way.
 *
 * A chunk "owns" the source bytes [a, b); an element belongs to the chunk holding its first byte.
 * When a file's elements may straddle a 4096 boundary (tensor data not aligned to the element
 * size, which safetensors allows) each chunk reads up to `tail` bytes past b, so owned elements
 * are whole. Host memory: the slots (staging budget) plus the metadata arrays.
 *
 * Direct reads: an operation that is one contiguous run, needs no conversion, goes to host memory
 * (cpu devices), is the only reader of its bytes and is large, is read straight into the device
 * buffer from a buffered file: no staging, no second copy. Its chunks carry the destination. */
#include "io/io.h"
#include "load/convert.h"
#include "load/load_internal.h"
#include "load/read_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_bytes.h"
#include "sl_pool.h"

#define RD_ALIGN 4096u
#define RD_SLOT_SLACK (3u * RD_ALIGN)      /* alignment below a and above b_ext, plus the tail */
#define RD_MAX_SLOTS 64u
#define RD_MAX_REQUEST ((uint64_t)256 << 20)
#define RD_DEFAULT_REQUEST ((uint64_t)16 << 20)
#define RD_MIN_AUTO_REQUEST ((uint64_t)4 << 20)
#define RD_BOUNCE ((size_t)256 << 10)      /* conversion buffer, synchronous copies (no marks) */
#define RD_RING 4u                          /* pieces of the conversion ring in flight (cuda) */
#define RD_RING_MIN ((uint64_t)64 << 10)    /* the ring: a sixteenth of the budget, within these */
#define RD_RING_MAX ((uint64_t)4 << 20)
#define RD_CACHE_SAMPLES 64u
#define RD_DIRECT_MIN ((uint64_t)2 << 20)   /* above merge_gap, so merged gaps never cross one */

typedef struct rd_file {
    const char *path;
    uint64_t size;
    int fd;
    int fd_direct_old;   /* direct fd kept open after an EINVAL fallback, until the end */
    int direct;
    int used;
    unsigned tail;
} rd_file;

typedef struct rd_op {
    const sl_op *op;
    int32_t dev;
    int direct;          /* read straight into the device buffer (see the top of this file) */
    uint32_t ssize, dsize;
    uint64_t src_end;
    uint64_t max_end;    /* max src_end of the file's operations up to this one */
} rd_op;

typedef struct rd_span {
    int32_t file;
    uint64_t start, end;
} rd_span;

typedef struct rd_chunk {
    int32_t file;
    uint64_t a, b, b_ext;
    unsigned char *dst;  /* direct chunk: bytes [a, b) go here; NULL: through a staging slot */
} rd_chunk;

typedef struct rd_slot {
    sl_io_req req;
    unsigned char *buf;
    int64_t chunk;
    unsigned index;
    int marked;          /* device copies from buf are pending under mark `index` */
} rd_slot;

typedef struct rd_ctx {
    const sl_plan *p;
    const sl_model_dev *devs;
    const sl_load_opts *o;
    sl_err *err;
    const unsigned char *local;   /* per device: scatter into it; NULL: every device (read_internal.h) */
    rd_file *files;
    int64_t n_files;
    rd_op *ops;
    int64_t n_ops;
    int64_t *file_first;          /* n_files + 1 */
    rd_chunk *chunks;
    int64_t n_chunks, cap_chunks;
    unsigned char **host;         /* per device: host base or NULL */
    int allow_direct;             /* sl_load_read: whole devices are local, direct reads allowed */
    uint64_t request, merge_gap, slot_size;
    unsigned n_slots;
    unsigned extra_slots;         /* sl_rd_setup.extra_slots, after the read slots */
    unsigned char *staging;
    rd_slot *slots;
    unsigned char *bounce;        /* converted pieces for non-host devices */
    uint64_t bounce_bytes;        /* its size */
    sl_pool *pool;                /* helper threads for conversions (rd_start_pool), or NULL */
    uint64_t gather_rows;         /* SL_GATHER_ROWS: same-dtype rows narrower than this many bytes
                                     are gathered through the ring (rd_gathers); 0: never */
    int ring;                     /* bounce lies in the page-locked staging block: RD_RING pieces,
                                     each copied asynchronously and reused after its mark; its
                                     bytes come out of the staging budget */
    unsigned ring_next;
    int32_t ring_dev[RD_RING];    /* device whose copy still reads piece k, or -1 */
    sl_io io;
    uint64_t bytes_read, done_bytes, total_bytes, staging_peak;
    int in_flight;                /* device copies (async: cuda) issued since the last rd_fence */
    int use_marks;                /* every async device has mark/wait_mark: per-slot waits */
    int marks_pending;            /* a mark was recorded since the last rd_fence */
    int32_t n_pinned;             /* devices [0, n_pinned) went through ops->pin */
} rd_ctx;

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
static void rd_op_init(rd_ctx *x, rd_op *r, const sl_op *op, int32_t dev)
{
    r->op = op;
    r->dev = dev;
    r->ssize = sl_dtype_bits(op->src_dtype) / 8;
    r->dsize = sl_dtype_bits(x->p->dtype) / 8;
    r->src_end = op->src_offset + (op->rows - 1) * op->src_stride + op->row_elems * r->ssize;
    rd_file *f = &x->files[op->file];
    f->used = 1;
    if (op->src_offset % r->ssize || op->src_stride % r->ssize)
        f->tail = r->ssize - 1 > f->tail ? r->ssize - 1 : f->tail;
}

static sl_status rd_collect_ops(rd_ctx *x)
{
    int64_t n = 0;
    for (int32_t d = 0; d < x->p->n_devices; d++)
        for (int64_t k = 0; k < x->p->devices[d].n_ops; k++)
            n += rd_is_copy(&x->p->devices[d].ops[k]);
    x->ops = calloc((size_t)n + 1, sizeof *x->ops);
    x->file_first = calloc((size_t)x->n_files + 1, sizeof *x->file_first);
    if (!x->ops || !x->file_first)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    for (int32_t d = 0; d < x->p->n_devices; d++) {
        const sl_plan_device *pd = &x->p->devices[d];
        for (int64_t k = 0; k < pd->n_ops; k++)
            if (rd_is_copy(&pd->ops[k]))
                rd_op_init(x, &x->ops[x->n_ops++], &pd->ops[k], d);
    }
    qsort(x->ops, (size_t)x->n_ops, sizeof *x->ops, rd_op_cmp);
    int64_t i = 0;
    for (int64_t f = 0; f <= x->n_files; f++) {
        x->file_first[f] = i;
        uint64_t mx = 0;
        for (; f < x->n_files && i < x->n_ops && x->ops[i].op->file == f; i++) {
            mx = sl_max_u64(mx, x->ops[i].src_end);
            x->ops[i].max_end = mx;
        }
    }
    return SL_OK;
}

/* ---- spans, ranges and chunks --------------------------------------------------------------- */

/* Rows closer than merge_gap are one span: the gap would be merged later anyway. */
static int64_t rd_op_span_count(const rd_ctx *x, const rd_op *r)
{
    const uint64_t row_bytes = r->op->row_elems * r->ssize;
    if (r->op->rows == 1 || r->op->src_stride - row_bytes < x->merge_gap)
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

static int64_t rd_merge_spans(const rd_ctx *x, rd_span *s, int64_t n)
{
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m && s[m - 1].file == s[i].file && s[i].start <= s[m - 1].end + x->merge_gap) {
            s[m - 1].end = sl_max_u64(s[m - 1].end, s[i].end);
            continue;
        }
        s[m++] = s[i];
    }
    return m;
}

static sl_status rd_push_chunk(rd_ctx *x, const rd_chunk *c)
{
    if (x->n_chunks == x->cap_chunks) {
        int64_t cap = x->cap_chunks ? 2 * x->cap_chunks : 64;
        rd_chunk *n = realloc(x->chunks, (size_t)cap * sizeof *n);
        if (!n)
            return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
        x->chunks = n;
        x->cap_chunks = cap;
    }
    x->chunks[x->n_chunks++] = *c;
    return SL_OK;
}

static sl_status rd_cut_range(rd_ctx *x, const rd_span *r)
{
    for (uint64_t a = r->start; a < r->end;) {
        rd_chunk c = {.file = r->file, .a = a};
        c.b = sl_min_u64(r->end, a / RD_ALIGN * RD_ALIGN + x->request);
        c.b_ext = sl_min_u64(r->end, c.b + x->files[r->file].tail);
        SL_TRY(rd_push_chunk(x, &c));
        x->total_bytes += c.b - c.a;
        a = c.b;
    }
    return SL_OK;
}

/* The bytes of ops[i] are read by no other operation of its file. */
static int rd_exclusive(const rd_ctx *x, int64_t i)
{
    const rd_op *r = &x->ops[i];
    const int64_t first = x->file_first[r->op->file], end = x->file_first[r->op->file + 1];
    return (i == first || x->ops[i - 1].max_end <= r->op->src_offset) &&
           (i + 1 == end || x->ops[i + 1].op->src_offset >= r->src_end);
}

static void rd_mark_direct(rd_ctx *x)
{
    for (int64_t i = 0; x->allow_direct && i < x->n_ops; i++) {
        rd_op *r = &x->ops[i];
        const sl_op *op = r->op;
        const uint64_t row_bytes = op->row_elems * r->ssize;
        r->direct = x->host[r->dev] && !x->files[op->file].direct && op->src_dtype == x->p->dtype &&
                    (op->rows == 1 || (op->src_stride == row_bytes && op->dst_stride == row_bytes)) &&
                    r->src_end - op->src_offset >= RD_DIRECT_MIN && rd_exclusive(x, i);
    }
}

static sl_status rd_cut_direct(rd_ctx *x, const rd_op *r)
{
    for (uint64_t a = r->op->src_offset; a < r->src_end;) {
        rd_chunk c = {.file = r->op->file, .a = a};
        c.b = c.b_ext = sl_min_u64(r->src_end, a + x->request);
        c.dst = x->host[r->dev] + r->op->dst_offset + (a - r->op->src_offset);
        SL_TRY(rd_push_chunk(x, &c));
        x->total_bytes += c.b - c.a;
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

static sl_status rd_build_chunks(rd_ctx *x)
{
    int64_t n = 0;
    for (int64_t i = 0; i < x->n_ops; i++)
        n += x->ops[i].direct ? 0 : rd_op_span_count(x, &x->ops[i]);
    rd_span *s = calloc((size_t)n + 1, sizeof *s);
    if (!s)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    int64_t k = 0;
    for (int64_t i = 0; i < x->n_ops; i++) {
        const rd_op *r = &x->ops[i];
        if (r->direct)
            continue;
        const int64_t cnt = rd_op_span_count(x, r);
        const uint64_t row_bytes = r->op->row_elems * r->ssize;
        for (int64_t j = 0; j < cnt; j++) {
            s[k].file = r->op->file;
            s[k].start = r->op->src_offset + (uint64_t)j * r->op->src_stride;
            s[k].end = cnt == 1 ? r->src_end : s[k].start + row_bytes;
            k++;
        }
    }
    qsort(s, (size_t)n, sizeof *s, rd_span_cmp);
    n = rd_merge_spans(x, s, n);
    sl_status st = SL_OK;
    for (int64_t i = 0; i < n && st == SL_OK; i++)
        st = rd_cut_range(x, &s[i]);
    free(s);
    int any_direct = 0;
    for (int64_t i = 0; i < x->n_ops && st == SL_OK; i++) {
        if (x->ops[i].direct) {
            st = rd_cut_direct(x, &x->ops[i]);
            any_direct = 1;
        }
    }
    if (st == SL_OK && any_direct)   /* one pass through each file, in order */
        qsort(x->chunks, (size_t)x->n_chunks, sizeof *x->chunks, rd_chunk_cmp);
    return st;
}

/* ---- files ---------------------------------------------------------------------------------- */

/* Samples page residency with mincore over a mapping that is never touched (so nothing is read).
 * Returns 1 when at least half of the sampled pages are cached. */
static int rd_mostly_cached(int fd, uint64_t size)
{
    if (size == 0 || size > SIZE_MAX)
        return 1;
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return 0;
    const uint64_t pages = (size + RD_ALIGN - 1) / RD_ALIGN;
    const uint64_t samples = sl_min_u64(pages, RD_CACHE_SAMPLES);
    uint64_t hit = 0;
    for (uint64_t i = 0; i < samples; i++) {
        unsigned char v = 0;
        uint64_t page = i * pages / samples;
        if (mincore((char *)m + page * RD_ALIGN, RD_ALIGN, &v) == 0 && (v & 1))
            hit++;
    }
    munmap(m, (size_t)size);
    return 2 * hit >= samples;
}

static sl_status rd_open_buffered(rd_ctx *x, rd_file *f)
{
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return sl_err_set(x->err, errno == ENOENT ? SL_E_NOT_FOUND : SL_E_IO, "%s: cannot open: %s",
                          f->path, strerror(errno));
    f->direct = 0;
    return SL_OK;
}

/* Tries O_DIRECT; filesystems without it (tmpfs) answer EINVAL and get buffered reads. */
static sl_status rd_open_file(rd_ctx *x, rd_file *f)
{
    SL_TRY(rd_open_buffered(x, f));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return sl_err_set(x->err, SL_E_IO, "%s: stat: %s", f->path, strerror(errno));
    if ((uint64_t)sb.st_size != f->size)
        return sl_err_set(x->err, SL_E_CHANGED,
                          "%s: size is %llu bytes, planned %llu: short read at offset %llu (file "
                          "changed since planning?)",
                          f->path, (unsigned long long)sb.st_size, (unsigned long long)f->size,
                          (unsigned long long)sl_min_u64((uint64_t)sb.st_size, f->size));
    int want_direct = x->o->io == SL_IO_DIRECT ||
                      (x->o->io == SL_IO_AUTO && !rd_mostly_cached(f->fd, f->size));
    if (!want_direct)
        return SL_OK;
    int dfd = open(f->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (dfd < 0 && errno != EINVAL)
        return sl_err_set(x->err, SL_E_IO, "%s: cannot open with O_DIRECT: %s", f->path,
                          strerror(errno));
    if (dfd >= 0) {
        close(f->fd);
        f->fd = dfd;
        f->direct = 1;
    }
    return SL_OK;
}

static sl_status rd_open_files(rd_ctx *x)
{
    for (int64_t i = 0; i < x->n_files; i++) {
        if (x->files[i].used)
            SL_TRY(rd_open_file(x, &x->files[i]));
    }
    return SL_OK;
}

static const char *rd_io_name(const rd_ctx *x)
{
    int direct = 0, buffered = 0;
    for (int64_t i = 0; i < x->n_files; i++) {
        if (x->files[i].used) {
            direct += x->files[i].direct;
            buffered += !x->files[i].direct;
        }
    }
    if (!direct && !buffered)
        return "none";
    return direct && buffered ? "mixed" : direct ? "direct" : "buffered";
}

/* ---- scatter -------------------------------------------------------------------------------- */

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

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
        const sl_device *prev = &x->devs[x->ring_dev[*k]].dev;
        SL_TRY(prev->ops->wait_mark(prev->ctx, RD_MAX_SLOTS + *k, x->err));
        x->ring_dev[*k] = -1;
    }
    *piece = x->bounce + (size_t)(*k * rd_ring_piece_bytes(x));
    return SL_OK;
}

/* After piece k's copy to device dev was issued. */
static sl_status rd_ring_mark(rd_ctx *x, unsigned k, int32_t dev)
{
    const sl_device *d = &x->devs[dev].dev;
    SL_TRY(d->ops->mark(d->ctx, RD_MAX_SLOTS + k, x->err));
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
        sl_convert_rows(x->pool, piece, 0, x->p->dtype, src + i * r->ssize, 0, r->op->src_dtype,
                        (size_t)m, 1);
        SL_TRY(d->ops->write(d->ctx, dst_off + i * r->dsize, piece, (size_t)(m * r->dsize), x->err));
        SL_TRY(rd_ring_mark(x, k, r->dev));
    }
    return SL_OK;
}

/* Writes n elements of src (in src_dt) to device offset dst_off, converting as needed. */
static sl_status rd_put(rd_ctx *x, const rd_op *r, uint64_t dst_off, const unsigned char *src,
                        uint64_t n)
{
    const sl_device *d = &x->devs[r->dev].dev;
    const sl_dtype sdt = r->op->src_dtype, ddt = x->p->dtype;
    if (x->host[r->dev]) {
        if (sdt == ddt)
            memcpy(x->host[r->dev] + dst_off, src, (size_t)(n * r->ssize));
        else
            sl_convert_rows(x->pool, x->host[r->dev] + dst_off, 0, ddt, src, 0, sdt, (size_t)n, 1);
        return SL_OK;
    }
    x->in_flight |= d->ops->fence != NULL; /* copies may read staging until rd_fence */
    if (sdt == ddt)
        return d->ops->write(d->ctx, dst_off, src, (size_t)(n * r->ssize), x->err);
    if (x->ring)
        return rd_put_ring(x, r, dst_off, src, n);
    const uint64_t per = RD_BOUNCE / 4;
    for (uint64_t i = 0; i < n; i += per) {
        const uint64_t m = sl_min_u64(per, n - i);
        sl_convert(x->bounce, ddt, src + i * r->ssize, sdt, (size_t)m);
        SL_TRY(d->ops->write(d->ctx, dst_off + i * r->dsize, x->bounce, (size_t)(m * r->dsize), x->err));
    }
    return SL_OK;
}

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

/* 1 when whole rows of r are gathered into ring pieces rather than sent one copy per row (or as
 * one 2-D copy): converted rows always (a copy, an event and a wait per row would make a column
 * split's thousands of rows as many tiny copies), and same-dtype rows narrower than gather_rows. */
static int rd_gathers(const rd_ctx *x, const rd_op *r)
{
    const sl_op *op = r->op;
    const uint64_t dst_row = op->row_elems * r->dsize;
    return x->ring && op->rows > 1 && dst_row <= rd_ring_piece_bytes(x) &&
           (op->dst_stride == dst_row || x->devs[r->dev].dev.ops->write2d) &&
           (op->src_dtype != x->p->dtype ||
            (dst_row < x->gather_rows && op->src_stride != op->row_elems * r->ssize));
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
    x->in_flight = 1;
    for (uint64_t i = 0; i < rows; i += per) {
        unsigned p;
        unsigned char *piece;
        SL_TRY(rd_ring_take(x, &p, &piece));
        const uint64_t m = sl_min_u64(per, rows - i);
        sl_convert_rows(x->pool, piece, (size_t)dst_row, x->p->dtype, src + i * op->src_stride,
                        (size_t)op->src_stride, op->src_dtype, (size_t)op->row_elems, (size_t)m);
        const uint64_t dst_off = op->dst_offset + (k + i) * op->dst_stride;
        if (op->dst_stride == dst_row)
            SL_TRY(d->ops->write(d->ctx, dst_off, piece, (size_t)(m * dst_row), x->err));
        else
            SL_TRY(d->ops->write2d(d->ctx, dst_off, op->dst_stride, piece, (size_t)dst_row,
                                   (size_t)dst_row, (size_t)m, x->err));
        SL_TRY(rd_ring_mark(x, p, r->dev));
    }
    return SL_OK;
}

/* Several whole rows of an op, from row k (starting inside the chunk), go to a device that is
 * not host memory in few calls: gathered through the ring (rd_gathers), or else, same dtype, as
 * one 2-D copy (cudaMemcpy2DAsync) instead of a copy per row. *n: rows written, 0 when neither
 * applies (the caller copies row by row). */
static sl_status rd_put_rows(rd_ctx *x, const rd_op *r, uint64_t k, uint64_t a, uint64_t b,
                             const unsigned char *data, uint64_t *n)
{
    const sl_op *op = r->op;
    const sl_device *d = &x->devs[r->dev].dev;
    const uint64_t rs = op->src_offset + k * op->src_stride;
    *n = 0;
    if (x->host[r->dev] || op->rows < 2 || rs < a || op->src_stride > SIZE_MAX)
        return SL_OK;
    const int gather = rd_gathers(x, r);
    if (!gather && (!d->ops->write2d || op->src_dtype != x->p->dtype))
        return SL_OK;
    const uint64_t rows = rd_whole_rows(r, k, b);
    if (rows < 2)
        return SL_OK;
    *n = rows;
    if (gather)
        return rd_gather_rows(x, r, k, rows, data + (rs - a));
    x->in_flight = 1;
    return d->ops->write2d(d->ctx, op->dst_offset + k * op->dst_stride, op->dst_stride,
                           data + (rs - a), (size_t)op->src_stride,
                           (size_t)(op->row_elems * r->ssize), (size_t)rows, x->err);
}

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
        const uint64_t j0 = rs >= a ? 0 : ceil_div(a - rs, es);
        const uint64_t j1 = sl_min_u64(op->row_elems, ceil_div(b - rs, es));
        if (j0 < j1)
            SL_TRY(rd_put(x, r, op->dst_offset + k * op->dst_stride + j0 * r->dsize,
                          data + (rs + j0 * es - a), j1 - j0));
    }
    return SL_OK;
}

/* Operations of the chunk's file are sorted by start; max_end is non-decreasing, so both ends of
 * the candidates are binary searches. */
static sl_status rd_scatter_chunk(rd_ctx *x, const rd_chunk *c, const unsigned char *data)
{
    int64_t lo = x->file_first[c->file], hi = x->file_first[c->file + 1];
    int64_t l = lo, h = hi;
    while (l < h) {
        int64_t mid = l + (h - l) / 2;
        if (x->ops[mid].op->src_offset < c->b)
            l = mid + 1;
        else
            h = mid;
    }
    hi = l;
    for (h = hi; lo < h;) {
        int64_t mid = lo + (h - lo) / 2;
        if (x->ops[mid].max_end > c->a)
            h = mid;
        else
            lo = mid + 1;
    }
    for (int64_t i = lo; i < hi; i++) {
        if (x->ops[i].src_end > c->a && !x->ops[i].direct && (!x->local || x->local[x->ops[i].dev]))
            SL_TRY(rd_scatter_op(x, &x->ops[i], c->a, c->b, data));
    }
    return SL_OK;
}

/* Padding (ZERO operations): a backend's own host memory is fresh anonymous memory, zero already;
 * other memory (cudaMalloc, file devices, the caller's opts.dest) is not. Their ranges are disjoint
 * from every copy's. */
static sl_status rd_zero_pads(rd_ctx *x)
{
    const uint64_t es = sl_dtype_bits(x->p->dtype) / 8;
    for (int32_t d = 0; d < x->p->n_devices; d++) {
        const sl_plan_device *pd = &x->p->devices[d];
        const sl_device *dev = &x->devs[d].dev;
        if ((x->local && !x->local[d]) || !dev->ops || !dev->ops->zero ||
            (dev->ops->zeroed && dev->ops->zeroed(dev->ctx)))
            continue;
        for (int64_t k = 0; k < pd->n_ops; k++) {
            const sl_op *op = &pd->ops[k];
            if (op->kind == SL_OP_ZERO && op->rows && op->row_elems)
                SL_TRY(dev->ops->zero(dev->ctx, op->dst_offset, op->rows * op->row_elems * es, x->err));
        }
    }
    return SL_OK;
}

/* ---- pipeline ------------------------------------------------------------------------------- */

/* Returns once no device copy reads staging any more. Without marks it is called before a slot is
 * refilled: with the free list's LIFO order the refilled slot is the one just scattered, so the
 * wait overlaps the reads of the other slots still in flight. */
static sl_status rd_fence(rd_ctx *x)
{
    for (int32_t d = 0; d < x->p->n_devices; d++) {
        const sl_device *dev = &x->devs[d].dev;
        if (dev->ops && dev->ops->fence)
            SL_TRY(dev->ops->fence(dev->ctx, x->err));
    }
    x->in_flight = 0;
    x->marks_pending = 0;
    for (unsigned i = 0; x->slots && i < x->n_slots; i++)
        x->slots[i].marked = 0;
    for (unsigned k = 0; k < RD_RING; k++)
        x->ring_dev[k] = -1;
    return SL_OK;
}

/* Records (wait 0) or waits for (wait 1) mark `tag` on every device that has marks. */
static sl_status rd_marks(rd_ctx *x, unsigned tag, int wait)
{
    for (int32_t d = 0; d < x->p->n_devices; d++) {
        const sl_device *dev = &x->devs[d].dev;
        sl_status (*op)(void *, unsigned, sl_err *) =
            !dev->ops ? NULL : wait ? dev->ops->wait_mark : dev->ops->mark;
        if (op)
            SL_TRY(op(dev->ctx, tag, x->err));
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

static sl_status rd_submit(rd_ctx *x, rd_slot *s, int64_t chunk)
{
    if (s->marked)
        SL_TRY(rd_wait_mark(x, s));
    if (x->in_flight)
        SL_TRY(rd_fence(x));
    const rd_chunk *c = &x->chunks[chunk];
    const rd_file *f = &x->files[c->file];
    s->chunk = chunk;
    s->req.fd = f->fd;
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

/* Some filesystems accept O_DIRECT at open and refuse the reads: continue buffered. */
static sl_status rd_direct_fallback(rd_ctx *x, rd_file *f)
{
    f->fd_direct_old = f->fd;
    f->fd = -1;
    return rd_open_buffered(x, f);
}

/* Checks a completed read. Returns SL_OK with *resubmitted set when it was sent again. */
static sl_status rd_check(rd_ctx *x, rd_slot *s, int *resubmitted)
{
    const rd_chunk *c = &x->chunks[s->chunk];
    rd_file *f = &x->files[c->file];
    const int64_t res = s->req.result;
    *resubmitted = 0;
    if (res == -EINVAL && s->req.fd == f->fd && f->direct) {
        SL_TRY(rd_direct_fallback(x, f));
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
    const rd_chunk *c = &x->chunks[s->chunk];
    if (!c->dst)
        SL_TRY(rd_scatter_chunk(x, c, s->buf + (c->a - s->req.off)));
    if (x->use_marks && x->in_flight)
        SL_TRY(rd_mark(x, s));
    x->done_bytes += c->b - c->a;
    if (x->o->progress)
        x->o->progress(x->o->progress_user, x->done_bytes, x->total_bytes);
    return SL_OK;
}

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

static sl_status rd_pipeline(rd_ctx *x)
{
    rd_free_list fl = {.items = calloc(x->n_slots, sizeof(rd_slot *)), .cap = x->n_slots,
                       .fifo = x->use_marks};
    if (!fl.items)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < x->n_slots; i++)
        rd_give(&fl, &x->slots[i]);
    unsigned busy = 0, peak = 0;
    sl_status st = SL_OK;
    int64_t next = 0;
    while (st == SL_OK && (next < x->n_chunks || busy)) {
        while (st == SL_OK && next < x->n_chunks && fl.count) {
            st = rd_submit(x, rd_take(&fl), next++);
            busy++;
            peak = busy > peak ? busy : peak;
        }
        sl_io_req *done = NULL;
        if (st == SL_OK)
            st = x->io.ops->wait(x->io.ctx, &done, x->err);
        if (st != SL_OK)
            break;
        int again = 0;
        st = rd_complete(x, done->user, &again);
        if (!again) {
            busy--;
            rd_give(&fl, done->user);
        }
    }
    x->staging_peak = (uint64_t)peak * x->slot_size;
    free(fl.items);
    return st;
}

/* ---- setup ---------------------------------------------------------------------------------- */

/* Request size: multiple of 4096, and at least two slots fit in the staging budget when possible. */
static uint64_t rd_staging_budget(const rd_ctx *x)
{
    return x->o->staging_bytes ? x->o->staging_bytes : (uint64_t)64 << 20;
}

/* Request size req (a multiple of 4096), cut so that at least two slots fit the budget when
 * possible, and the number of slots it gives. */
static void rd_set_request(rd_ctx *x, uint64_t req, uint64_t staging)
{
    req = sl_min_u64(sl_max_u64(req / RD_ALIGN * RD_ALIGN, RD_ALIGN), RD_MAX_REQUEST);
    if (staging < 2 * (req + RD_SLOT_SLACK) && staging / 2 > RD_SLOT_SLACK + RD_ALIGN)
        req = (staging / 2 - RD_SLOT_SLACK) / RD_ALIGN * RD_ALIGN;
    else if (staging < 2 * (req + RD_SLOT_SLACK))
        req = RD_ALIGN;
    x->request = req;
    x->slot_size = req + RD_SLOT_SLACK;
    uint64_t n = staging / x->slot_size;
    x->n_slots = (unsigned)sl_max_u64(1, sl_min_u64(n, RD_MAX_SLOTS));
}

static void rd_size_requests(rd_ctx *x)
{
    rd_set_request(x, x->o->request_bytes ? x->o->request_bytes : RD_DEFAULT_REQUEST,
                   rd_staging_budget(x));
    /* Gaps under 1 MiB (or a sixteenth of a small request) are cheaper to read than to skip. */
    x->merge_gap = sl_min_u64((uint64_t)1 << 20, x->request / 16);
}

/* 1 when some local device that is not host memory receives converted elements; with
 * narrow_too, also narrow strided rows that SL_GATHER_ROWS asks to gather. */
static int rd_staged_work(const rd_ctx *x, int narrow_too)
{
    for (int64_t i = 0; i < x->n_ops; i++) {
        const rd_op *r = &x->ops[i];
        if (x->host[r->dev] || (x->local && !x->local[r->dev]))
            continue;
        if (r->op->src_dtype != x->p->dtype)
            return 1;
        const uint64_t row = r->op->row_elems * r->ssize;
        if (narrow_too && r->op->rows > 1 && row < x->gather_rows && r->op->src_stride != row)
            return 1;
    }
    return 0;
}

static int rd_converts(const rd_ctx *x)
{
    return rd_staged_work(x, 0);
}

static int rd_can_mark(const rd_ctx *x);

uint64_t sl_rd_ring_budget(uint64_t staging)
{
    const uint64_t ring = sl_min_u64(sl_max_u64(staging / 16, RD_RING_MIN), RD_RING_MAX);
    return sl_min_u64(ring, staging / 4);   /* a small budget stays mostly slots */
}

/* The ring, out of at most max_bytes, when the local devices copy asynchronously and some of
 * their elements are converted (or narrow rows gathered: SL_GATHER_ROWS, for benchmarks, see
 * docs/engine.md). Without it, conversions go through a small synchronous bounce buffer. */
static void rd_plan_ring(rd_ctx *x, uint64_t max_bytes)
{
    const uint64_t unit = (uint64_t)RD_RING * RD_ALIGN;
    const char *g = getenv("SL_GATHER_ROWS");
    x->gather_rows = g ? strtoull(g, NULL, 10) : 0;
    if (max_bytes < unit || !rd_staged_work(x, 1) || !rd_can_mark(x))
        return;
    x->ring = 1;
    x->bounce_bytes = max_bytes / unit * unit;
}

/* Conversions run on the loading thread and, when they are large (sl_convert_rows), on helper
 * threads too: up to 7, fewer on smaller hosts, started only when some local device receives
 * converted elements. Converting is the one CPU-bound step of a load: single-threaded, f32 ->
 * bf16 runs at ~2.7 G elements/s here (bench_convert), below the page cache and a PCIe 5 link. */
static void rd_start_pool(rd_ctx *x)
{
    int converts = 0;
    for (int64_t i = 0; i < x->n_ops && !converts; i++)
        converts = x->ops[i].op->src_dtype != x->p->dtype && (!x->local || x->local[x->ops[i].dev]);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (converts && cpus > 1)
        x->pool = sl_pool_new((unsigned)(cpus > 8 ? 7 : cpus - 1));
}

/* Devices that are not host memory (cuda) take every byte through staging, and from the page
 * cache each slot's read is one CPU copy: the number of slots in flight, not their size, sets the
 * pace. Unless a request size was asked for, such loads cut the budget into about as many slots
 * as --threads says, or as there are CPUs (at most 16), with requests between 4 and 16 MiB.
 * When elements are converted on the way and the devices copy asynchronously, a sixteenth of the
 * budget (64 KiB to 4 MiB, at most a quarter) becomes the conversion ring: large pieces, because
 * each is one copy call (on the timed stand-in, 1 MiB pieces made a bf16 -> f32 load 2.5x faster
 * than 64 KiB ones). merge_gap stays. */
static void rd_size_for_devices(rd_ctx *x)
{
    int staged = 0;
    for (int32_t d = 0; d < x->p->n_devices; d++)
        staged |= !x->host[d] && x->devs[d].bytes > 0 && (!x->local || x->local[d]);
    if (!staged)
        return;
    uint64_t budget = rd_staging_budget(x);
    rd_plan_ring(x, sl_rd_ring_budget(budget));
    budget = budget > x->bounce_bytes ? budget - x->bounce_bytes : 0;
    uint64_t req = x->o->request_bytes;
    if (!req) {
        const long n = x->o->threads > 0 ? (long)x->o->threads : sysconf(_SC_NPROCESSORS_ONLN);
        const uint64_t want = budget / (uint64_t)(n < 2 ? 2 : n > 16 ? 16 : n);
        req = sl_min_u64(sl_max_u64(want, RD_MIN_AUTO_REQUEST), RD_DEFAULT_REQUEST);
    }
    rd_set_request(x, req, budget);
}

/* A small checkpoint does not need the whole budget: no more slots than chunks, and slots only
 * as large as the largest chunk (plus alignment). */
static void rd_fit_slots(rd_ctx *x)
{
    uint64_t largest = 0;
    for (int64_t i = 0; i < x->n_chunks; i++) {
        if (!x->chunks[i].dst)
            largest = sl_max_u64(largest, x->chunks[i].b_ext - x->chunks[i].a);
    }
    x->slot_size = sl_min_u64(x->slot_size, sl_align_up(largest, RD_ALIGN) + 2 * RD_ALIGN);
    x->n_slots = (unsigned)sl_min_u64(x->n_slots, (uint64_t)x->n_chunks);
}

_Static_assert(RD_MAX_SLOTS + RD_RING <= SL_DEVICE_MAX_MARKS,
               "one device mark per staging slot and per bounce piece");

/* The staging block: the read slots, then extra_slots more of the same size for the caller
 * (sl_rd_extra), page-locked together. */
static size_t rd_staging_len(const rd_ctx *x)
{
    return (size_t)(x->slot_size * (x->n_slots + x->extra_slots) + (x->ring ? x->bounce_bytes : 0));
}

/* Per-slot waits need every device that copies asynchronously to offer marks. */
static int rd_can_mark(const rd_ctx *x)
{
    int async = 0;
    for (int32_t d = 0; d < x->p->n_devices; d++) {
        const sl_device_ops *ops = x->devs[d].dev.ops;
        if (!ops || !ops->fence)
            continue;
        if (!ops->mark || !ops->wait_mark)
            return 0;
        async = 1;
    }
    return async;
}

/* Devices that copy asynchronously (cuda) page-lock the staging block once for the whole load. */
static sl_status rd_pin(rd_ctx *x)
{
    const size_t len = rd_staging_len(x);
    for (; x->n_pinned < x->p->n_devices; x->n_pinned++) {
        const sl_device *d = &x->devs[x->n_pinned].dev;
        if (d->ops && d->ops->pin)
            SL_TRY(d->ops->pin(d->ctx, x->staging, len, x->err));
    }
    return SL_OK;
}

/* Once reads have stopped: each unpin drains its device's copies before releasing the pin. */
static void rd_unpin(rd_ctx *x)
{
    for (int32_t d = 0; d < x->n_pinned; d++) {
        const sl_device *dev = &x->devs[d].dev;
        if (dev->ops && dev->ops->unpin)
            dev->ops->unpin(dev->ctx, x->staging);
    }
    x->n_pinned = 0;
}

static sl_status rd_host_ptrs(rd_ctx *x)
{
    x->host = calloc((size_t)x->p->n_devices, sizeof *x->host);
    if (!x->host)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    for (int32_t d = 0; d < x->p->n_devices; d++)
        x->host[d] = x->devs[d].dev.ops->host_ptr(x->devs[d].dev.ctx);
    return SL_OK;
}

/* Staging is touched once per slot use, so its first-touch cost is paid on the hot path: huge
 * pages and one populate call make it a few faults instead of one per 4 KiB page. */
static unsigned char *rd_staging_alloc(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, len, MADV_POPULATE_WRITE);
#endif
    return p;
}

static sl_status rd_alloc_buffers(rd_ctx *x)
{
    for (unsigned k = 0; k < RD_RING; k++)
        x->ring_dev[k] = -1;
    if (!x->ring && rd_converts(x)) {   /* the ring, when there is one, is part of the block */
        x->bounce_bytes = RD_BOUNCE;
        if (!(x->bounce = malloc(RD_BOUNCE)))
            return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    }
    x->slots = calloc(x->n_slots, sizeof *x->slots);
    x->staging = rd_staging_alloc(rd_staging_len(x));
    if (!x->slots || !x->staging)
        return sl_err_set(x->err, SL_E_NOMEM, "cannot allocate %llu bytes of staging",
                          (unsigned long long)rd_staging_len(x));
    if (x->ring)
        x->bounce = x->staging + rd_staging_len(x) - x->bounce_bytes;
    for (unsigned i = 0; i < x->n_slots; i++) {
        x->slots[i].buf = x->staging + (size_t)i * x->slot_size;
        x->slots[i].index = i;
    }
    return rd_pin(x);
}

static sl_status rd_init_files(rd_ctx *x, const sl_load_file *files)
{
    x->files = calloc((size_t)x->n_files + 1, sizeof *x->files);
    if (!x->files)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < x->n_files; i++) {
        x->files[i] = (rd_file){.path = files[i].path, .size = files[i].size, .fd = -1,
                                .fd_direct_old = -1};
    }
    return SL_OK;
}

static void rd_free(rd_ctx *x)
{
    sl_io_close(&x->io); /* first: no read may land in staging after it is freed */
    for (int64_t i = 0; x->files && i < x->n_files; i++) {
        if (x->files[i].fd >= 0)
            close(x->files[i].fd);
        if (x->files[i].fd_direct_old >= 0)
            close(x->files[i].fd_direct_old);
    }
    free(x->files);
    free(x->ops);
    free(x->file_first);
    free(x->chunks);
    free(x->host);
    free(x->slots);
    rd_unpin(x);
    if (x->staging)
        munmap(x->staging, rd_staging_len(x));
    if (!x->ring)
        free(x->bounce);
    sl_pool_free(x->pool);
}

static sl_status rd_run(rd_ctx *x, const sl_load_file *files, sl_load_stats *stats)
{
    rd_size_requests(x);
    SL_TRY(rd_init_files(x, files));
    SL_TRY(rd_collect_ops(x));
    SL_TRY(rd_open_files(x));
    SL_TRY(rd_host_ptrs(x));
    rd_size_for_devices(x);
    SL_TRY(rd_zero_pads(x));
    rd_mark_direct(x);
    SL_TRY(rd_build_chunks(x));
    stats->io = rd_io_name(x);
    if (x->n_chunks == 0)
        return SL_OK;
    rd_fit_slots(x);
    x->use_marks = rd_can_mark(x);
    rd_start_pool(x);
    SL_TRY(rd_alloc_buffers(x));
    const unsigned threads = x->o->threads > 0 ? (unsigned)x->o->threads : 0;
    SL_TRY(sl_io_open(NULL, x->n_slots, threads, &x->io, x->err));
    stats->engine = x->io.ops->name;
    sl_status st = rd_pipeline(x);
    if (st == SL_OK && (x->in_flight || x->marks_pending))
        st = rd_fence(x); /* the load ends when the devices hold the bytes, inside the timing */
    stats->io = rd_io_name(x); /* after any EINVAL fallback */
    return st;
}

sl_status sl_load_read(const sl_load_file *files, int64_t n_files, const sl_plan *p,
                       const sl_model_dev *devs, const sl_load_opts *o, sl_load_stats *stats,
                       sl_err *err)
{
    rd_ctx x = {.p = p, .devs = devs, .o = o, .err = err, .n_files = n_files, .allow_direct = 1};
    sl_status st = rd_run(&x, files, stats);
    stats->bytes_read = x.bytes_read;
    stats->staging_peak = x.staging_peak + x.bounce_bytes;
    rd_free(&x);
    return st;
}

/* ---- the engine in pieces (read_internal.h) ------------------------------------------------- */

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
    rd_ctx *x = &r->x;
    *x = (rd_ctx){.p = s->p, .devs = s->devs, .o = s->o, .err = s->err, .local = s->local,
                  .n_files = s->n_files};
    r->pending[0] = r->pending[1] = -1;
    x->extra_slots = s->extra_slots;
    rd_size_requests(x);
    if (s->slot_bytes) {
        /* merge_gap stays as sl_load_read's, so the ranges (and bytes read) are the same. */
        SL_CHECK(s->slot_bytes >= RD_SLOT_SLACK + RD_ALIGN, s->err, SL_E_INVALID_ARG,
                 "staging of %llu bytes per slot is too small (at least %u)",
                 (unsigned long long)s->slot_bytes, RD_SLOT_SLACK + RD_ALIGN);
        x->request = sl_min_u64((s->slot_bytes - RD_SLOT_SLACK) / RD_ALIGN * RD_ALIGN, RD_MAX_REQUEST);
        x->slot_size = x->request + RD_SLOT_SLACK;
    }
    x->n_slots = 2;
    SL_TRY(rd_init_files(x, s->files));
    SL_TRY(rd_collect_ops(x));
    SL_TRY(rd_open_files(x));
    SL_TRY(rd_host_ptrs(x));
    rd_plan_ring(x, s->ring_bytes);
    SL_TRY(rd_zero_pads(x));      /* local devices only */
    SL_TRY(rd_build_chunks(x));   /* no direct reads: other ranks may need any chunk's bytes */
    if (x->n_chunks == 0)
        return SL_OK;
    rd_fit_slots(x);
    rd_start_pool(x);
    SL_TRY(rd_alloc_buffers(x));
    const unsigned threads = x->o->threads > 0 ? (unsigned)x->o->threads : 0;
    return sl_io_open(NULL, x->n_slots, threads, &x->io, x->err);
}

int64_t sl_rd_chunk_count(const sl_rd *r)
{
    return r->x.n_chunks;
}

sl_rd_chunk sl_rd_chunk_at(const sl_rd *r, int64_t i)
{
    const rd_chunk *c = &r->x.chunks[i];
    return (sl_rd_chunk){.file = c->file, .a = c->a, .b = c->b, .b_ext = c->b_ext};
}

uint64_t sl_rd_slot_bytes(const sl_rd *r)
{
    return r->x.n_chunks ? r->x.slot_size : 0;
}

unsigned char *sl_rd_extra(sl_rd *r)
{
    return r->x.staging && r->x.extra_slots ? r->x.staging + (size_t)r->x.n_slots * r->x.slot_size : NULL;
}

sl_status sl_rd_fence(sl_rd *r)
{
    return r->x.in_flight ? rd_fence(&r->x) : SL_OK;
}

sl_status sl_rd_start(sl_rd *r, int64_t i)
{
    rd_ctx *x = &r->x;
    const unsigned k = (unsigned)(i % x->n_slots);
    SL_CHECK(i >= 0 && i < x->n_chunks && r->pending[k] < 0, x->err, SL_E_INVALID_ARG,
             "read of chunk %lld started while its slot is busy", (long long)i);
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
        rd_slot *d = done->user;
        SL_TRY(rd_check(x, d, &again));
        r->complete[d->index] = !again;
    }
    r->pending[k] = -1;
    rd_slot *s = &x->slots[k];
    *data = s->buf + (x->chunks[i].a - s->req.off);
    return SL_OK;
}

sl_status sl_rd_scatter(sl_rd *r, const sl_rd_chunk *c, const unsigned char *data)
{
    const rd_chunk rc = {.file = c->file, .a = c->a, .b = c->b, .b_ext = c->b_ext};
    return rd_scatter_chunk(&r->x, &rc, data);
}

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

/* Same candidate search as rd_scatter_chunk. */
sl_status sl_rd_segments(const sl_rd *r, const sl_rd_chunk *c, int32_t d0, int32_t d1, sl_rd_segs *s)
{
    const rd_ctx *x = &r->x;
    s->n = 0;
    for (int64_t i = x->file_first[c->file]; i < x->file_first[c->file + 1]; i++) {
        const rd_op *o = &x->ops[i];
        if (o->op->src_offset >= c->b)
            break;
        if (o->src_end <= c->a || o->dev < d0 || o->dev >= d1)
            continue;
        if (rd_op_segments(o, c->a, c->b_ext, s) != SL_OK)
            return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    }
    /* Several devices (or operations) may need the same bytes: sort, then merge overlaps. */
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
    return SL_OK;
}

void sl_rd_close(sl_rd *r, sl_load_stats *stats)
{
    if (!r)
        return;
    if (stats) {
        stats->bytes_read = r->x.bytes_read;
        stats->staging_peak = r->x.staging_peak + r->x.bounce_bytes;
        stats->io = rd_io_name(&r->x);
        stats->engine = r->x.io.ops ? r->x.io.ops->name : "none";
    }
    rd_free(&r->x);
    free(r);
}
