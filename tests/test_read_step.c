/* test_read_step.c - the stepwise read API (src/load/read_step.h, what --dist cooperative drives)
 * in one process with every device local: chunks read into its two slots one at a time, each
 * large chunk by several requests in flight (rd_config.split), then scattered; both engines and
 * both I/O modes, compared with the oracle (load_testutil.h), with the bytes and requests read.
 * A file cut short under the reads fails naming it; O_DIRECT refused under a split chunk's parts
 * (einval_inject.h) makes the file go on buffered, the result unchanged. */
#include "load_testutil.h"
#include "einval_inject.h"

#include "load/read_step.h"

#include "common/sl_bytes.h"

#define MIB ((uint64_t)1 << 20)

static uint64_t page_down(uint64_t o)
{
    return o / 4096 * 4096;
}

static uint64_t page_up(uint64_t o)
{
    return (o + 4095) / 4096 * 4096;
}

/* Every chunk as --dist cooperative reads it on one rank: read i, start i + 1, scatter i. */
static sl_status read_all(sl_rd *r)
{
    const int64_t n = sl_rd_chunk_count(r);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *data = NULL;
        SL_TRY(sl_rd_read(r, i, &data));
        if (i + 1 < n)
            SL_TRY(sl_rd_start(r, i + 1));
        const sl_rd_chunk c = sl_rd_chunk_at(r, i);
        SL_TRY(sl_rd_scatter(r, &c, data));
    }
    return sl_rd_fence(r);
}

/* The figures the chunks allow: staged bytes (buffered), their pages (direct), the most requests
 * (one per MiB of a chunk's pages, at least one) and how many chunks could be split. */
typedef struct step_expect {
    uint64_t bytes, pages, most_requests;
    int64_t chunks, splittable;
} step_expect;

static step_expect step_figures(const sl_rd *r)
{
    step_expect e = {.chunks = sl_rd_chunk_count(r)};
    for (int64_t i = 0; i < e.chunks; i++) {
        const sl_rd_chunk c = sl_rd_chunk_at(r, i);
        const uint64_t span = page_up(c.b_ext) - page_down(c.a);
        e.bytes += c.b_ext - c.a;
        e.pages += span;
        e.most_requests += span / MIB > 1 ? span / MIB : 1;
        e.splittable += span >= 2 * MIB;
    }
    return e;
}

/* Two bf16 devices, each one long unaligned run of a file of size bytes; they overlap by 2 MiB. */
static sl_plan *step_plan(uint64_t size)
{
    sl_plan *p = tp_new(2, SL_DTYPE_BF16, 1);
    const uint64_t a0 = 4096 + 6, e0 = a0 + 7 * MIB, a1 = e0 - 2 * MIB, e1 = size - 5000;
    int64_t i = tp_param(p, 0, "a", 1, (e0 - a0) / 2);
    tp_copy(p, 0, i, SL_DTYPE_BF16, 0, a0, 0, 0, 0, 1, (e0 - a0) / 2);
    i = tp_param(p, 1, "b", 1, (e1 - a1) / 2);
    tp_copy(p, 1, i, SL_DTYPE_BF16, 0, a1, 0, 0, 0, 1, (e1 - a1) / 2);
    return p;
}

/* One stepwise load; *skip when the engine or mode is unavailable here. */
static sl_status step_load(const sl_load_file *f, const sl_plan *p, sl_load_opts *o,
                           const char *engine, sl_model *m, sl_load_stats *s, step_expect *e,
                           uint64_t truncate_to, int *skip)
{
    *skip = (!strcmp(engine, "uring") && uring_missing) || (o->io == SL_IO_DIRECT && !direct_ok);
    if (*skip)
        return SL_OK;
    o->io_engine = engine;
    SL_TRY(sl_load_open_devices(m, p, 0, p->n_devices, o));
    sl_rd *r = NULL;
    const sl_rd_setup su = {.files = f, .n_files = 1, .p = p, .devs = m->devs, .o = o,
                            .err = &m->err};
    sl_status st = sl_rd_open(&su, &r);
    if (st == SL_E_UNSUPPORTED && !strcmp(engine, "uring") && strstr(sl_model_errmsg(m), "io_uring")) {
        uring_missing = *skip = 1;
        sl_rd_close(r, NULL);
        return SL_OK;
    }
    if (st == SL_OK) {
        *e = step_figures(r);
        if (truncate_to)
            EXPECT(truncate(f->path, (off_t)truncate_to) == 0, "truncate %s", f->path);
        st = read_all(r);
    }
    sl_rd_close(r, s);
    return st;
}

/* A file of one chunk that splits into parts (12 MiB and change), its plan and its bytes. */
typedef struct split_file {
    char path[600];
    unsigned char *data;
    sl_plan *p;
    sl_load_file f;
} split_file;

static void split_open(split_file *sf, const char *name, unsigned seed)
{
    const uint64_t size = 12 * MIB + 3 * 4096 + 1000;
    sf->data = tu_random_file(name, size, seed, sf->path, sizeof sf->path);
    sf->p = step_plan(size);
    sf->f = (sl_load_file){sf->path, size};
}

static void split_close(split_file *sf)
{
    tp_free(sf->p);
    free(sf->data);
    unlink(sf->path);
}

static void test_split(void)
{
    split_file sf;
    split_open(&sf, "big.bin", 7);
    sl_plan *p = sf.p;
    const char *path = sf.path;
    unsigned char *fd[1] = {sf.data};
    const sl_io_mode modes[2] = {SL_IO_BUFFERED, SL_IO_DIRECT};
    /* default requests (one 12 MiB chunk: 8 parts), 4 MiB ones (4 parts each) and 1.5 MiB ones
     * (under two RD_SPLIT_MIN: never split) */
    const uint64_t requests[3] = {0, 4 * MIB, 3 * MIB / 2};
    for (int e = 0; e < 2; e++) {
        for (int mi = 0; mi < 2; mi++) {
            for (int q = 0; q < 3; q++) {
                sl_load_opts o;
                sl_load_opts_init(&o);
                o.io = modes[mi];
                o.request_bytes = requests[q];
                sl_model *m = sl_model_new();
                sl_load_stats s = {0};
                step_expect x = {0};
                int skip = 0;
                sl_status st = step_load(&sf.f, p, &o, engines[e], m, &s, &x, 0, &skip);
                if (!skip) {
                    const char *what = engines[e];
                    EXPECT(st == SL_OK && !compare_model(m, p, fd), "%s io %d request %llu: %s",
                           what, mi, (unsigned long long)requests[q], sl_model_errmsg(m));
                    /* the parts of a chunk neither overlap nor leave a gap */
                    EXPECT(s.bytes_read == (mi ? x.pages : x.bytes), "%s io %d request %llu: read %llu",
                           what, mi, (unsigned long long)requests[q], (unsigned long long)s.bytes_read);
                    EXPECT(s.read_requests >= (uint64_t)x.chunks + (uint64_t)x.splittable &&
                               s.read_requests <= x.most_requests,
                           "%s io %d request %llu: %llu requests for %lld chunks (%lld splittable, "
                           "at most %llu)", what, mi, (unsigned long long)requests[q],
                           (unsigned long long)s.read_requests, (long long)x.chunks,
                           (long long)x.splittable, (unsigned long long)x.most_requests);
                    EXPECT(q == 2 ? s.read_requests == (uint64_t)x.chunks && x.splittable == 0
                                  : x.splittable > 0 && s.read_depth_peak >= 4,
                           "%s io %d request %llu: depth %u, %lld splittable", what, mi,
                           (unsigned long long)requests[q], s.read_depth_peak, (long long)x.splittable);
                }
                sl_model_free(m);
            }
        }
    }
    /* cut short under the reads: a part's short read fails naming the file */
    for (int e = 0; e < 2; e++) {
        tu_write_file(path, sf.data, sf.f.size);
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = SL_IO_BUFFERED;
        sl_model *m = sl_model_new();
        sl_load_stats s = {0};
        step_expect x = {0};
        int skip = 0;
        sl_status st = step_load(&sf.f, p, &o, engines[e], m, &s, &x, 6 * MIB, &skip);
        EXPECT(skip || (st == SL_E_CHANGED && strstr(sl_model_errmsg(m), path) &&
                        strstr(sl_model_errmsg(m), "short read")),
               "%s truncated: status %d, %s", engines[e], (int)st, sl_model_errmsg(m));
        sl_model_free(m);
    }
    split_close(&sf);
}

/* O_DIRECT refused by reads of a split chunk's parts in flight, from the first read or after three
 * went through: every refused part is read again buffered, and the result equals the oracle. The
 * pread engine: io_uring's reads bypass einval_inject.h. */
static void test_split_refused(void)
{
    split_file sf;
    split_open(&sf, "refused.bin", 8);
    sl_plan *p = sf.p;
    unsigned char *fd[1] = {sf.data};
    for (int reads_ok = 0; reads_ok <= 3; reads_ok += 3) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = SL_IO_DIRECT;
        sl_model *m = sl_model_new();
        sl_load_stats s = {0};
        step_expect x = {0};
        int skip = 0;
        ei_set(EI_READ, reads_ok);
        sl_status st = step_load(&sf.f, p, &o, engines[0], m, &s, &x, 0, &skip);
        const int refused = ei_refusals();
        ei_set(EI_OFF, 0);
        if (!skip) {
            EXPECT(st == SL_OK && !compare_model(m, p, fd), "refused after %d reads: %s", reads_ok,
                   sl_model_errmsg(m));
            /* reads_ok 0: every part in flight when the first completes is refused */
            EXPECT(refused >= (reads_ok ? 1 : 2) && x.splittable > 0,
                   "refused after %d reads: %d refusals, %lld splittable", reads_ok, refused,
                   (long long)x.splittable);
            EXPECT(!strcmp(s.io, "buffered") && s.bytes_read >= x.bytes && s.bytes_read <= x.pages,
                   "refused after %d reads: io %s, read %llu (%llu to %llu)", reads_ok, s.io,
                   (unsigned long long)s.bytes_read, (unsigned long long)x.bytes,
                   (unsigned long long)x.pages);
        }
        sl_model_free(m);
    }
    split_close(&sf);
}

/* The ring of conversion pieces: sl_rd_ring_budget's share (a sixteenth of the budget, up to 4
 * MiB: 1 MiB pieces, 256 Ki f32 elements, which sl_convert_rows keeps on one thread) unless enough
 * helper threads convert; then pieces of 2 * CONVERT_PAR_MIN elements of the widest converted
 * dtype, whole rows of which fill more than CONVERT_PAR_MIN, up to a quarter of the budget. */
static void test_ring_for_helpers(void)
{
    const uint64_t budget = 64 * MIB, f32_piece = 2 * CONVERT_PAR_MIN * 4;
    EXPECT(sl_rd_ring_budget(budget) / 4 / 4 < CONVERT_PAR_MIN, "the plain ring's f32 pieces are "
           "split already; this test no longer says anything");
    EXPECT(sl_rd_ring_for_helpers(budget, 4, 7) == 4 * f32_piece, "7 helpers, f32: %llu",
           (unsigned long long)sl_rd_ring_for_helpers(budget, 4, 7));
    EXPECT(sl_rd_ring_for_helpers(budget, 2, 7) == 4 * f32_piece / 2, "7 helpers, 16-bit: %llu",
           (unsigned long long)sl_rd_ring_for_helpers(budget, 2, 7));
    EXPECT(sl_rd_ring_for_helpers(16 * MIB, 4, 7) == 4 * MIB, "a quarter of 16 MiB: %llu",
           (unsigned long long)sl_rd_ring_for_helpers(16 * MIB, 4, 7));
    for (uint64_t b = MIB; b <= 1024 * MIB; b *= 4) {
        EXPECT(sl_rd_ring_for_helpers(b, 4, 1) == sl_rd_ring_budget(b), "1 helper (2 CPUs), "
               "budget %llu: the plain ring", (unsigned long long)b);
        EXPECT(sl_rd_ring_for_helpers(b, 0, 7) == sl_rd_ring_budget(b), "nothing converted, "
               "budget %llu: the plain ring", (unsigned long long)b);
        EXPECT(sl_rd_ring_for_helpers(b, 4, 7) >= sl_rd_ring_budget(b) &&
                   sl_rd_ring_for_helpers(b, 4, 7) <= sl_max_u64(b / 4, sl_rd_ring_budget(b)),
               "budget %llu: ring %llu", (unsigned long long)b,
               (unsigned long long)sl_rd_ring_for_helpers(b, 4, 7));
    }
}

int main(void)
{
    tu_load_begin("read_step");
    test_ring_for_helpers();
    test_split();
    test_split_refused();
    return tu_load_end();
}
