/* test_chunks.c - the chunk planner (src/load/read_chunks.h) alone: no files, no devices. Random
 * hand-built plans (several files and devices, strided and replicated operations, tensors not
 * aligned to their element size, ZERO and empty operations mixed in) are planned and the chunk
 * list is checked against an independent computation from a per-byte map of the needed bytes:
 *
 *  - the staged chunks are exactly the needed runs, joined across gaps of at most merge_gap and
 *    cut at a + request rounded down to 4096, in (file, offset) order; so every COPY operation's
 *    bytes lie in exactly one chunk's [a, b), and no chunk is longer than the request;
 *  - every element whose first byte a chunk owns ([a, b)) ends by its b_ext, b_ext stays in the
 *    range and at most 3 bytes past b;
 *  - direct reads (host devices) are exactly the operations that qualify by a brute-force check,
 *    cut into request-sized pieces carrying their destination, and sorted in with the others;
 *  - --verify by blocks: chunks are whole blocks and exactly the needed blocks (small gaps
 *    joined), headers of used files included;
 *  - the operation table is sorted, indexed per file and finds the operations that meet a chunk
 *    (rd_ops_between) as a scan of all of them does. */
#include "expect.h"
#include "load/read_chunks.h"

#include "common/sl_bytes.h"

#include <stdlib.h>
#include <string.h>

#define MAX_FILES 3
#define MAX_DEVS 4
#define MAX_OPS 24

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? rng % n : 0;
}

typedef struct tcase {
    sl_plan p;
    sl_plan_device dev[MAX_DEVS];
    sl_op ops[MAX_DEVS][MAX_OPS];
    uint64_t file_size[MAX_FILES];
    int64_t n_files;
} tcase;

static const sl_dtype dtypes[3] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};

static uint64_t esize(sl_dtype dt)
{
    return sl_dtype_bits(dt) / 8;
}

static uint64_t op_end(const sl_op *op)
{
    return op->src_offset + (op->rows - 1) * op->src_stride + op->row_elems * esize(op->src_dtype);
}

static int is_copy(const sl_op *op)
{
    return op->kind == SL_OP_COPY && op->rows && op->row_elems;
}

/* One random COPY operation; `big`: 2-5 MiB contiguous runs that may be read directly. */
static sl_op random_copy(tcase *t, int big, uint64_t *dst)
{
    sl_op op = {.kind = SL_OP_COPY, .file = (int32_t)rnd((uint64_t)t->n_files), .tensor = -1};
    op.src_dtype = rnd(3) ? t->p.dtype : dtypes[rnd(3)];
    const uint64_t es = esize(op.src_dtype), ds = esize(t->p.dtype);
    op.rows = big ? (rnd(2) ? 1 : 1 + rnd(4)) : 1 + rnd(8);
    /* big runs from just under RD_DIRECT_MIN to 5 MiB */
    op.row_elems = big ? ((2u << 20) - 65536 + rnd(3u << 20)) / es / op.rows : 1 + rnd(700);
    const uint64_t row = op.row_elems * es;
    const uint64_t gap = big || rnd(3) == 0 ? 0 : rnd(4) == 0 ? 5000 + rnd(20000) : rnd(3000);
    op.src_stride = row + gap;
    op.src_offset = rnd(40000) + (big ? rnd(6u << 20) : 0);
    if (rnd(4) == 0)
        op.src_offset = op.src_offset / es * es;   /* mostly unaligned, sometimes aligned */
    op.dst_offset = *dst;
    op.dst_stride = op.row_elems * ds + (rnd(4) == 0 ? ds * rnd(8) : 0);
    *dst += op.rows * op.dst_stride;
    t->file_size[op.file] = sl_max_u64(t->file_size[op.file], op_end(&op));
    return op;
}

static void random_plan(tcase *t, int big)
{
    memset(t, 0, sizeof *t);
    t->n_files = 1 + (int64_t)rnd(MAX_FILES);
    t->p.dtype = dtypes[rnd(3)];
    t->p.n_devices = 1 + (int32_t)rnd(MAX_DEVS);
    t->p.devices = t->dev;
    for (int32_t d = 0; d < t->p.n_devices; d++) {
        sl_plan_device *pd = &t->dev[d];
        pd->index = d;
        pd->ops = t->ops[d];
        const int64_t n = 1 + (int64_t)rnd(big ? 4 : MAX_OPS);
        uint64_t dst = 0;
        for (int64_t k = 0; k < n; k++) {
            sl_op *op = &pd->ops[pd->n_ops++];
            const uint64_t kind = rnd(10);
            if (kind == 0) {   /* padding: not read */
                *op = (sl_op){.kind = SL_OP_ZERO, .dst_offset = dst, .rows = 1, .row_elems = 5};
            } else if (kind == 1 && d > 0 && t->dev[0].n_ops) {   /* replicated: same source bytes */
                *op = t->ops[0][rnd((uint64_t)t->dev[0].n_ops)];
                op->dst_offset = dst;
            } else if (kind == 2) {   /* empty: not read */
                *op = random_copy(t, 0, &dst);
                op->rows = 0;
            } else {
                *op = random_copy(t, big && rnd(4) != 0, &dst);
            }
            dst += 64;
        }
        pd->bytes = dst + (8u << 20);
    }
}

/* ---- the independent computation ------------------------------------------------------------- */

typedef struct want_chunk {
    int32_t file;
    uint64_t a, b;
    int direct;
    int32_t dev;
    uint64_t dst_off;   /* direct: device offset of byte a */
} want_chunk;

static int all_ops_overlap(const tcase *t, int32_t d0, int64_t k0)
{
    const sl_op *x = &t->ops[d0][k0];
    for (int32_t d = 0; d < t->p.n_devices; d++)
        for (int64_t k = 0; k < t->dev[d].n_ops; k++) {
            const sl_op *y = &t->ops[d][k];
            if ((d == d0 && k == k0) || !is_copy(y) || y->file != x->file)
                continue;
            if (y->src_offset < op_end(x) && x->src_offset < op_end(y))
                return 1;
        }
    return 0;
}

/* host_devs[d]: device d is host memory; file_direct[f]: file f is read with O_DIRECT. */
static int qualifies_direct(const tcase *t, int32_t d, int64_t k, const unsigned char *host_devs,
                            const unsigned char *file_direct)
{
    const sl_op *op = &t->ops[d][k];
    const uint64_t row = op->row_elems * esize(op->src_dtype);
    return host_devs && host_devs[d] && is_copy(op) && !file_direct[op->file] &&
           op->src_dtype == t->p.dtype &&
           (op->rows == 1 || (op->src_stride == row && op->dst_stride == row)) &&
           op_end(op) - op->src_offset >= RD_DIRECT_MIN && !all_ops_overlap(t, d, k);
}

static int want_cmp(const void *x, const void *y)
{
    const want_chunk *a = x, *b = y;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* Marks needed bytes of staged operations per file, then walks the map. */
static int64_t want_chunks(const tcase *t, uint64_t request, uint64_t gap,
                           const unsigned char *host_devs, const unsigned char *file_direct,
                           want_chunk *out)
{
    int64_t n = 0;
    for (int32_t f = 0; f < t->n_files; f++) {
        unsigned char *need = calloc(t->file_size[f] + 1, 1);
        for (int32_t d = 0; d < t->p.n_devices; d++)
            for (int64_t k = 0; k < t->dev[d].n_ops; k++) {
                const sl_op *op = &t->ops[d][k];
                if (!is_copy(op) || op->file != f)
                    continue;
                if (qualifies_direct(t, d, k, host_devs, file_direct)) {
                    for (uint64_t a = op->src_offset; a < op_end(op); a += request)
                        out[n++] = (want_chunk){f, a, sl_min_u64(op_end(op), a + request), 1, d,
                                                op->dst_offset + (a - op->src_offset)};
                    continue;
                }
                for (uint64_t r = 0; r < op->rows; r++)
                    memset(need + op->src_offset + r * op->src_stride, 1,
                           op->row_elems * esize(op->src_dtype));
            }
        /* O_DIRECT files read whole pages: gaps under one are read whatever `gap` says */
        const uint64_t fgap = file_direct && file_direct[f] ? sl_max_u64(gap, 4096) : gap;
        for (uint64_t i = 0; i < t->file_size[f];) {
            if (!need[i]) {
                i++;
                continue;
            }
            uint64_t e = i; /* the range: needed runs joined across gaps of at most `gap` */
            for (uint64_t j = i; j < t->file_size[f]; j++)
                if (need[j]) {
                    if (j > e + fgap)
                        break;
                    e = j + 1;
                }
            for (uint64_t a = i; a < e;) {
                const uint64_t b = sl_min_u64(e, a / 4096 * 4096 + request);
                out[n++] = (want_chunk){f, a, b, 0, -1, 0};
                a = b;
            }
            i = e;
        }
        free(need);
    }
    qsort(out, (size_t)n, sizeof *out, want_cmp);
    return n;
}

/* ---- checks ---------------------------------------------------------------------------------- */

static void check_ops_table(const tcase *t, const rd_ops *o)
{
    int64_t copies = 0;
    for (int32_t d = 0; d < t->p.n_devices; d++)
        for (int64_t k = 0; k < t->dev[d].n_ops; k++)
            copies += is_copy(&t->ops[d][k]);
    EXPECT(o->n == copies, "%lld operations, %lld copies", (long long)o->n, (long long)copies);
    for (int64_t i = 0; i < o->n; i++) {
        const rd_op *r = &o->v[i];
        EXPECT(o->file_first[r->op->file] <= i && i < o->file_first[r->op->file + 1], "file index");
        EXPECT(r->src_end == op_end(r->op), "src_end");
        EXPECT(o->used[r->op->file], "file %d used", r->op->file);
        if (i > 0 && o->v[i - 1].op->file == r->op->file) {
            EXPECT(o->v[i - 1].op->src_offset <= r->op->src_offset, "sorted");
            EXPECT(r->max_end == sl_max_u64(o->v[i - 1].max_end, r->src_end), "max_end");
        } else {
            EXPECT(r->max_end == r->src_end, "max_end first");
        }
    }
}

/* rd_ops_between finds what a scan of every operation finds. */
static void check_between(const rd_ops *o, const rd_chunk *c)
{
    int64_t lo = 0, hi = 0, found = 0, scan = 0;
    rd_ops_between(o, c->file, c->a, c->b, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        found += o->v[i].src_end > c->a;
    for (int64_t i = 0; i < o->n; i++)
        scan += o->v[i].op->file == c->file && o->v[i].op->src_offset < c->b && o->v[i].src_end > c->a;
    EXPECT(found == scan, "chunk [%llu, %llu): %lld candidates, scan %lld", (unsigned long long)c->a,
           (unsigned long long)c->b, (long long)found, (long long)scan);
}

/* Every element of every staged operation is owned by one chunk ([a, b)) and whole in it. */
static void check_elements(const rd_ops *o, const rd_chunks *cs)
{
    for (int64_t i = 0; i < o->n; i++) {
        const rd_op *r = &o->v[i];
        if (r->direct)
            continue;
        int64_t c = 0;
        for (uint64_t row = 0; row < r->op->rows; row++)
            for (uint64_t e = 0; e < r->op->row_elems; e++) {
                const uint64_t s = r->op->src_offset + row * r->op->src_stride + e * r->ssize;
                while (c < cs->n && (cs->v[c].file < r->op->file ||
                                     (cs->v[c].file == r->op->file && cs->v[c].b <= s)))
                    c++;
                const rd_chunk *ch = &cs->v[c];
                if (c == cs->n || ch->file != r->op->file || ch->a > s || ch->dst) {
                    EXPECT(0, "element at %llu of file %d owned by no staged chunk",
                           (unsigned long long)s, r->op->file);
                    return;
                }
                EXPECT(s + r->ssize <= ch->b_ext, "element [%llu, +%u) split by chunk [%llu, %llu) b_ext %llu",
                       (unsigned long long)s, r->ssize, (unsigned long long)ch->a,
                       (unsigned long long)ch->b, (unsigned long long)ch->b_ext);
                /* The row's next elements that end by ch->b lie in [s, ch->b): owned by ch and whole,
                 * as the scan would find one by one; go on from the first that does not (10x
                 * faster, which matters under ASan) */
                const uint64_t row0 = r->op->src_offset + row * r->op->src_stride;
                const uint64_t in = sl_min_u64((ch->b - row0) / r->ssize, r->op->row_elems);
                if (in > e + 1)
                    e = in - 1;
            }
    }
}

/* What the engine's set-up does (rd_host_dsts): each op's destination in its device's host
 * buffer, where the device has one (host[d] NULL: not host memory). Returns ok, so that it fits
 * in the EXPECT with rd_ops_build. */
static int set_hosts(rd_ops *o, unsigned char *const *host)
{
    for (int64_t i = 0; host && i < o->n; i++) {
        rd_op *r = &o->v[i];
        r->host_dst = host[r->dev] ? host[r->dev] + r->op->dst_offset : NULL;
    }
    return 1;
}

static void check_case_gap(tcase *t, uint64_t request, uint64_t gap, const unsigned char *host_devs,
                           unsigned char *const *host, const unsigned char *file_direct)
{
    sl_err err = {0};
    rd_ops o;
    rd_chunks cs;
    EXPECT(rd_ops_build(&t->p, t->n_files, &o, &err) == SL_OK, "ops: %s", sl_err_msg(&err));
    check_ops_table(t, &o);
    set_hosts(&o, host);
    const rd_chunk_opts co = {.request = request, .merge_gap = gap, .direct = host != NULL,
                              .file_direct = file_direct};
    EXPECT(rd_chunks_build(&o, &co, &cs, &err) == SL_OK, "chunks: %s", sl_err_msg(&err));
    want_chunk *want = calloc(200000, sizeof *want);
    const int64_t n = want_chunks(t, request, gap, host_devs, file_direct, want);
    EXPECT(cs.n == n, "%lld chunks, want %lld", (long long)cs.n, (long long)n);
    uint64_t total = 0;
    for (int64_t i = 0; i < cs.n && i < n; i++) {
        const rd_chunk *c = &cs.v[i];
        const want_chunk *w = &want[i];
        EXPECT(c->file == w->file && c->a == w->a && c->b == w->b && !!c->dst == w->direct,
               "chunk %lld: file %d [%llu, %llu)%s, want file %d [%llu, %llu)%s", (long long)i,
               c->file, (unsigned long long)c->a, (unsigned long long)c->b, c->dst ? " direct" : "",
               w->file, (unsigned long long)w->a, (unsigned long long)w->b, w->direct ? " direct" : "");
        EXPECT(c->b - c->a <= request && c->a < c->b, "chunk %lld: %llu bytes, request %llu",
               (long long)i, (unsigned long long)(c->b - c->a), (unsigned long long)request);
        if (w->direct)
            EXPECT(c->dst == host[w->dev] + w->dst_off && c->b_ext == c->b, "chunk %lld: destination", (long long)i);
        else
            EXPECT(c->b_ext >= c->b && c->b_ext <= c->b + 3, "chunk %lld: b_ext", (long long)i);
        if (i + 1 < cs.n && cs.v[i + 1].file == c->file) /* files in order, chunks disjoint */
            EXPECT(cs.v[i + 1].a >= c->b, "chunk %lld overlaps the next", (long long)i);
        if (i + 1 < cs.n)
            EXPECT(cs.v[i + 1].file >= c->file, "files out of order at chunk %lld", (long long)i);
        check_between(&o, c);
        total += c->b - c->a;
    }
    EXPECT(cs.total_bytes == total, "total_bytes");
    check_elements(&o, &cs);
    free(want);
    rd_chunks_free(&cs);
    rd_ops_free(&o);
    sl_err_clear(&err);
}

/* The engine's default gap (rd_size_requests). */
static void check_case(tcase *t, uint64_t request, const unsigned char *host_devs,
                       unsigned char *const *host, const unsigned char *file_direct)
{
    check_case_gap(t, request, sl_min_u64((uint64_t)1 << 20, request / 16), host_devs, host,
                   file_direct);
}

/* ---- cases ----------------------------------------------------------------------------------- */

/* A host buffer for every device of t (where the test needs no device left out). */
static void hosts_alloc(const tcase *t, unsigned char **host)
{
    for (int32_t d = 0; d < t->p.n_devices; d++)
        host[d] = malloc(t->dev[d].bytes);
}

static void case_free(tcase *t, unsigned char **host)
{
    for (int32_t d = 0; d < t->p.n_devices; d++)
        free(host[d]);
    free(t);
}

static const uint64_t requests[] = {4096, 8192, 3 * 4096, 65536, (uint64_t)1 << 20};

static void test_random_staged(void)
{
    for (int i = 0; i < 400; i++) {
        tcase *t = calloc(1, sizeof *t);
        random_plan(t, 0);
        check_case(t, requests[rnd(sizeof requests / sizeof requests[0])], NULL, NULL, NULL);
        free(t);
    }
}

/* Large runs into host devices: some read directly (not from O_DIRECT files, not when shared). */
static void test_random_direct(void)
{
    for (int i = 0; i < 40; i++) {
        tcase *t = calloc(1, sizeof *t);
        random_plan(t, 1);
        unsigned char host_devs[MAX_DEVS] = {0}, file_direct[MAX_FILES] = {0};
        unsigned char *host[MAX_DEVS] = {0};
        for (int32_t d = 0; d < t->p.n_devices; d++) {
            host_devs[d] = rnd(4) != 0;
            host[d] = host_devs[d] ? malloc(t->dev[d].bytes) : NULL;
        }
        file_direct[rnd(MAX_FILES)] = rnd(3) == 0;
        check_case(t, requests[2 + rnd(3)], host_devs, host, file_direct);
        case_free(t, host);
    }
}

/* A hand-made plan: one file, one device with n_ops operations (the caller fills them in and
 * sets the file's size). */
static tcase *one_file_case(sl_dtype dtype, int64_t n_ops)
{
    tcase *t = calloc(1, sizeof *t);
    t->n_files = 1;
    t->p.dtype = dtype;
    t->p.n_devices = 1;
    t->p.devices = t->dev;
    t->dev[0].ops = t->ops[0];
    t->dev[0].n_ops = n_ops;
    return t;
}

/* opts.read_gap: small gaps or none (0: only touching runs join, each row of a strided
 * operation its own span), with some files read with O_DIRECT (no host devices: file_direct
 * alone), whose gaps under a page are read anyway. */
static void test_random_small_gaps(void)
{
    static const uint64_t gaps[] = {0, 1, 7, 64, 4095, 4096, 5000};
    for (int i = 0; i < 300; i++) {
        tcase *t = calloc(1, sizeof *t);
        random_plan(t, 0);
        unsigned char file_direct[MAX_FILES] = {0};
        for (int f = 0; f < MAX_FILES; f++)
            file_direct[f] = rnd(2) == 0;
        check_case_gap(t, requests[rnd(sizeof requests / sizeof requests[0])],
                       gaps[rnd(sizeof gaps / sizeof gaps[0])], NULL, NULL, rnd(2) ? file_direct : NULL);
        free(t);
    }
}

/* Gap 0: a strided operation is read row by row (exactly its bytes), a contiguous one in one
 * range; an O_DIRECT file joins rows less than a page apart. */
static void test_no_gap(void)
{
    tcase *t = one_file_case(SL_DTYPE_BF16, 2);
    /* 100 rows of 256 bytes every 1024 (a column quarter of a row-split weight), then 64 KiB */
    t->ops[0][0] = (sl_op){.kind = SL_OP_COPY, .src_dtype = SL_DTYPE_BF16, .file = 0, .tensor = -1,
                           .src_offset = 0, .src_stride = 1024, .rows = 100, .row_elems = 128};
    t->ops[0][1] = (sl_op){.kind = SL_OP_COPY, .src_dtype = SL_DTYPE_BF16, .file = 0, .tensor = -1,
                           .src_offset = 1 << 20, .src_stride = 256, .rows = 256, .row_elems = 128};
    t->file_size[0] = op_end(&t->ops[0][1]);
    sl_err err = {0};
    rd_ops o;
    rd_chunks cs;
    for (int direct = 0; direct < 2; direct++) {
        const unsigned char fd[1] = {(unsigned char)direct};
        const rd_chunk_opts co = {.request = 1 << 20, .merge_gap = 0, .file_direct = fd};
        EXPECT(rd_ops_build(&t->p, 1, &o, &err) == SL_OK && rd_chunks_build(&o, &co, &cs, &err) == SL_OK,
               "plan");
        const int64_t want_n = direct ? 2 : 101;
        const uint64_t want_bytes = direct ? 99 * 1024 + 256 + 65536 : 100 * 256 + 65536;
        EXPECT(cs.n == want_n && cs.total_bytes == want_bytes, "O_DIRECT %d: %lld chunks, %llu bytes; "
               "want %lld, %llu", direct, (long long)cs.n, (unsigned long long)cs.total_bytes,
               (long long)want_n, (unsigned long long)want_bytes);
        rd_chunks_free(&cs);
        rd_ops_free(&o);
    }
    free(t);
}

/* A hand-made case: bf16 tensors at odd offsets, one element straddling every 4096 boundary. */
static void test_unaligned(void)
{
    tcase *t = one_file_case(SL_DTYPE_F32, 1);
    t->ops[0][0] = (sl_op){.kind = SL_OP_COPY, .src_dtype = SL_DTYPE_F32, .file = 0, .tensor = -1,
                           .src_offset = 4094, .src_stride = 4096, .rows = 5, .row_elems = 1000};
    t->file_size[0] = op_end(&t->ops[0][0]);
    check_case(t, 4096, NULL, NULL, NULL);
    sl_err err = {0};
    rd_ops o;
    rd_chunks cs;
    EXPECT(rd_ops_build(&t->p, 1, &o, &err) == SL_OK, "ops");
    EXPECT(o.tail[0] == 3, "tail %u for f32 at offset 4094", o.tail[0]);
    const rd_chunk_opts co = {.request = 4096, .merge_gap = 256};
    EXPECT(rd_chunks_build(&o, &co, &cs, &err) == SL_OK, "chunks");
    EXPECT(cs.n > 1 && cs.v[0].a == 4094 && cs.v[0].b == 4096 && cs.v[0].b_ext == 4099,
           "first chunk [%llu, %llu) b_ext %llu", (unsigned long long)cs.v[0].a,
           (unsigned long long)cs.v[0].b, (unsigned long long)cs.v[0].b_ext);
    rd_chunks_free(&cs);
    rd_ops_free(&o);
    free(t);
}

/* Two runs a gap apart: one range (one chunk) when the gap is at most merge_gap, else two. */
static void test_gap(void)
{
    const uint64_t gap = 4096 / 16;
    for (uint64_t g = gap - 1; g <= gap + 1; g++) {
        tcase *t = one_file_case(SL_DTYPE_BF16, 2);
        t->ops[0][0] = (sl_op){.kind = SL_OP_COPY, .src_dtype = SL_DTYPE_BF16, .file = 0,
                               .tensor = -1, .src_offset = 10, .rows = 1, .row_elems = 50};
        t->ops[0][1] = t->ops[0][0];
        t->ops[0][1].src_offset = 110 + g;
        t->file_size[0] = op_end(&t->ops[0][1]);
        check_case(t, 4096, NULL, NULL, NULL);
        sl_err err = {0};
        rd_ops o;
        rd_chunks cs;
        const rd_chunk_opts co = {.request = 4096, .merge_gap = gap};
        EXPECT(rd_ops_build(&t->p, 1, &o, &err) == SL_OK && rd_chunks_build(&o, &co, &cs, &err) == SL_OK,
               "plan");
        EXPECT(cs.n == (g <= gap ? 1 : 2), "gap %llu: %lld chunks", (unsigned long long)g, (long long)cs.n);
        EXPECT(cs.total_bytes == (g <= gap ? 200 + g : 200), "gap %llu: %llu bytes", (unsigned long long)g,
               (unsigned long long)cs.total_bytes);
        rd_chunks_free(&cs);
        rd_ops_free(&o);
        free(t);
    }
}

/* --verify: every file read whole, [0, size) in contiguous request-sized chunks from its first
 * byte (headers and bytes no operation reads included), none direct even into host devices, and
 * each operation's elements still owned by one chunk. */
static void test_random_whole(void)
{
    for (int i = 0; i < 200; i++) {
        tcase *t = calloc(1, sizeof *t);
        random_plan(t, rnd(2));
        unsigned char *host[MAX_DEVS] = {0};
        hosts_alloc(t, host);
        uint64_t whole[MAX_FILES + 1] = {0};
        for (int64_t f = 0; f < t->n_files; f++)
            whole[f] = t->file_size[f] + 1 + rnd(10000);   /* bytes past the last tensor too */
        const uint64_t request = requests[rnd(sizeof requests / sizeof requests[0])];
        sl_err err = {0};
        rd_ops o;
        rd_chunks cs;
        const rd_chunk_opts co = {.request = request, .merge_gap = request / 16, .direct = 1,
                                  .whole = whole};
        EXPECT(rd_ops_build(&t->p, t->n_files, &o, &err) == SL_OK && set_hosts(&o, host) &&
                   rd_chunks_build(&o, &co, &cs, &err) == SL_OK, "plan: %s", sl_err_msg(&err));
        int64_t k = 0;
        for (int64_t f = 0; f < t->n_files; f++) {
            uint64_t at = 0;
            for (; k < cs.n && cs.v[k].file == f; k++) {
                const rd_chunk *c = &cs.v[k];
                EXPECT(c->a == at && c->b > c->a && c->b - c->a <= request && !c->dst,
                       "file %lld chunk %lld: [%llu, %llu)%s after %llu", (long long)f, (long long)k,
                       (unsigned long long)c->a, (unsigned long long)c->b, c->dst ? " direct" : "",
                       (unsigned long long)at);
                at = c->b;
            }
            EXPECT(at == whole[f], "file %lld: covered to %llu of %llu", (long long)f,
                   (unsigned long long)at, (unsigned long long)whole[f]);
        }
        EXPECT(k == cs.n, "chunks of no file");
        check_elements(&o, &cs);
        /* interleaved: every chunk once, each file's in order, files taking turns */
        rd_chunks il = cs;
        il.v = malloc((size_t)cs.n * sizeof *il.v);
        memcpy(il.v, cs.v, (size_t)cs.n * sizeof *il.v);
        EXPECT(rd_chunks_interleave(&il, &err) == SL_OK && il.n == cs.n, "interleave");
        uint64_t next[MAX_FILES + 1] = {0};
        for (int64_t j = 0; j < il.n; j++) {
            const rd_chunk *c = &il.v[j];
            EXPECT(c->a == next[c->file], "interleaved chunk %lld of file %d at %llu, want %llu",
                   (long long)j, c->file, (unsigned long long)c->a, (unsigned long long)next[c->file]);
            if (j > 0 && c->file == il.v[j - 1].file)   /* only once the other files are done */
                for (int64_t g = 0; g < t->n_files; g++)
                    EXPECT(g == c->file || next[g] == whole[g], "file %d twice in a row while file "
                           "%lld waits", c->file, (long long)g);
            next[c->file] = c->b;
        }
        for (int64_t f = 0; f < t->n_files; f++)
            EXPECT(next[f] == whole[f], "interleaved file %lld covered to %llu", (long long)f,
                   (unsigned long long)next[f]);
        rd_chunks_free(&il);
        rd_chunks_free(&cs);
        rd_ops_free(&o);
        sl_err_clear(&err);
        case_free(t, host);
    }
}

/* ---- verified blocks ------------------------------------------------------------------------- */

/* The bytes a load verified by blocks must read, per byte of one file: the blocks holding a byte of
 * some operation or of [0, head) (files some operation reads), gaps of at most merge_gap between
 * such blocks joined. */
static unsigned char *want_blocks(const tcase *t, int32_t f, uint64_t size, uint64_t bs,
                                  uint64_t head, uint64_t gap)
{
    const uint64_t nb = size / bs + (size % bs != 0);
    unsigned char *need = calloc(nb + 1, 1), *map = calloc(size + 1, 1);
    int used = 0;
    for (int32_t d = 0; d < t->p.n_devices; d++)
        for (int64_t k = 0; k < t->dev[d].n_ops; k++) {
            const sl_op *op = &t->ops[d][k];
            if (!is_copy(op) || op->file != f)
                continue;
            used = 1;
            for (uint64_t r = 0; r < op->rows; r++) {
                const uint64_t a = op->src_offset + r * op->src_stride;
                for (uint64_t b = a / bs; b * bs < a + op->row_elems * esize(op->src_dtype); b++)
                    need[b] = 1;
            }
        }
    for (uint64_t b = 0; used && b * bs < head; b++)
        need[b] = 1;
    int64_t last = -1;   /* the last needed block so far */
    for (uint64_t b = 0; b < nb; b++) {
        if (!need[b])
            continue;
        const uint64_t from = last >= 0 && b * bs - ((uint64_t)last + 1) * bs <= gap
                                  ? ((uint64_t)last + 1) * bs : b * bs;
        memset(map + from, 1, (size_t)(sl_min_u64(size, (b + 1) * bs) - from));
        last = (int64_t)b;
    }
    free(need);
    return map;
}

/* --verify with a block manifest: chunks are whole blocks (a and b on block boundaries, or b at
 * the file's end), at most a request long, none direct; together they are exactly the needed
 * blocks (operations' bytes and used files' headers) with small gaps joined, so a block no
 * operation meets, far from the others, is not read; a block larger than the request is refused. */
static void test_random_blocks(void)
{
    static const uint64_t blocks[] = {4096, 8192, 65536, (uint64_t)1 << 20};
    for (int i = 0; i < 200; i++) {
        tcase *t = calloc(1, sizeof *t);
        random_plan(t, rnd(2));
        unsigned char *host[MAX_DEVS] = {0};
        hosts_alloc(t, host);
        uint64_t bs[MAX_FILES + 1] = {0}, size[MAX_FILES + 1] = {0}, head[MAX_FILES + 1] = {0};
        const uint64_t block = blocks[rnd(4)];
        const uint64_t request = block * (1 + rnd(4)) + (rnd(2) ? 4096 : 0);
        for (int64_t f = 0; f < t->n_files; f++) {
            bs[f] = block;
            size[f] = t->file_size[f] + 1 + rnd(3 * block);
            head[f] = 1 + rnd(sl_max_u64(1, size[f] / 3));
        }
        sl_err err = {0};
        rd_ops o;
        rd_chunks cs;
        const rd_chunk_opts co = {.request = request, .merge_gap = request / 16, .direct = 1,
                                  .block = bs, .size = size, .head = head};
        EXPECT(rd_ops_build(&t->p, t->n_files, &o, &err) == SL_OK && set_hosts(&o, host) &&
                   rd_chunks_build(&o, &co, &cs, &err) == SL_OK, "plan: %s", sl_err_msg(&err));
        for (int64_t k = 0; k < cs.n; k++) {
            const rd_chunk *c = &cs.v[k];
            EXPECT(!c->dst && c->a % block == 0 && (c->b % block == 0 || c->b == size[c->file]) &&
                       c->b > c->a && c->b - c->a <= request && c->b <= size[c->file],
                   "chunk %lld of file %d: [%llu, %llu)%s, block %llu, request %llu", (long long)k,
                   c->file, (unsigned long long)c->a, (unsigned long long)c->b,
                   c->dst ? " direct" : "", (unsigned long long)block, (unsigned long long)request);
            EXPECT(k == 0 || cs.v[k - 1].file < c->file ||
                       (cs.v[k - 1].file == c->file && cs.v[k - 1].b <= c->a), "chunk %lld out of order",
                   (long long)k);
        }
        for (int32_t f = 0; f < t->n_files; f++) {
            unsigned char *want = want_blocks(t, f, size[f], block, head[f], request / 16);
            unsigned char *got = calloc(size[f] + 1, 1);
            for (int64_t k = 0; k < cs.n; k++)
                if (cs.v[k].file == f)
                    memset(got + cs.v[k].a, 1, (size_t)(cs.v[k].b - cs.v[k].a));
            uint64_t at = 0;
            while (at < size[f] && got[at] == want[at])
                at++;
            EXPECT(at == size[f], "file %d (block %llu): byte %llu read %d, wanted %d", (int)f,
                   (unsigned long long)block, (unsigned long long)at, at < size[f] ? got[at] : -1,
                   at < size[f] ? want[at] : -1);
            free(want);
            free(got);
        }
        check_elements(&o, &cs);
        rd_chunks_free(&cs);
        /* a block over the request cannot be one chunk */
        const rd_chunk_opts small = {.request = block / 2 < 4096 ? 4096 : block / 2,
                                     .merge_gap = 256, .block = bs, .size = size, .head = head};
        if (block > 4096)
            EXPECT(rd_chunks_build(&o, &small, &cs, &err) == SL_E_INVALID_ARG,
                   "block %llu over a request of %llu accepted", (unsigned long long)block,
                   (unsigned long long)small.request);
        rd_chunks_free(&cs);
        rd_ops_free(&o);
        sl_err_clear(&err);
        case_free(t, host);
    }
}

int main(void)
{
    test_random_whole();
    test_random_blocks();
    test_unaligned();
    test_gap();
    test_no_gap();
    test_random_small_gaps();
    test_random_staged();
    test_random_direct();
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    return expect_failures ? 1 : 0;
}
