/* test_load.c - the loading executor on hand-built plans over files written here, on cpu: strided
 * copies crossing tiny requests, conversions, padding, read-once accounting, random plans, large
 * runs read straight into device memory, both engines and both I/O modes, and dummy weights. Every
 * load is compared with an oracle that applies the plan's operations one by one on host memory
 * (load_testutil.h). The cuda backend on the stand-in and the caller's memory: test_load_device.c;
 * faults: test_load_faults.c. */
#include "load_testutil.h"

#include "load/convert.h"

#include <math.h>
#include <sys/stat.h>

/* ---- test 1: TP layout with conversions, padding, tiny requests ------------------------------ */

/* The TP layout (tp_layout_open) on cpu: both engines, each I/O mode, compared with the oracle,
 * with the bytes read and the staging peak. */
static void test_tp_layout(sl_dtype plan_dt)
{
    tp_layout t;
    tp_layout_open(&t, plan_dt);
    const uint64_t o1 = t.o1, size = t.size;
    sl_plan *p = t.p;
    sl_load_file f = t.f;
    unsigned char *fd[1] = {t.data};
    const sl_io_mode modes[3] = {SL_IO_BUFFERED, SL_IO_DIRECT, SL_IO_AUTO};
    for (int e = 0; e < 2; e++) {
        for (int mi = 0; mi < 3; mi++) {
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.io = modes[mi];
            o.request_bytes = 4096;
            o.staging_bytes = 64 << 10;
            sl_model *m = NULL;
            int skip = 0;
            sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
            if (skip) {
                sl_model_free(m);
                continue;
            }
            EXPECT(st == SL_OK, "tp load (%s, io %d): %s", engines[e], mi, sl_model_errmsg(m));
            if (st == SL_OK) {
                sl_load_stats s;
                sl_model_stats(m, &s);
                EXPECT(!compare_model(m, p, fd), "tp layout %s io %d dtype %s", engines[e], mi,
                       sl_dtype_name(plan_dt));
                EXPECT(sl_model_device_gpu(m, 0) == -1, "cpu device on a GPU");
                EXPECT(!strcmp(s.engine, e ? "io_uring" : "pread"), "engine %s", s.engine);
                if (mi == 0)
                    EXPECT(s.bytes_read == size - o1 && !strcmp(s.io, "buffered"),
                           "bytes_read %llu want %llu, io %s", (unsigned long long)s.bytes_read,
                           (unsigned long long)(size - o1), s.io);
                if (mi == 1)
                    EXPECT(!strcmp(s.io, "direct") && s.bytes_read >= size - o1 && s.bytes_read <= size,
                           "direct: io %s bytes_read %llu", s.io, (unsigned long long)s.bytes_read);
                EXPECT(s.staging_peak <= o.staging_bytes, "staging peak %llu",
                       (unsigned long long)s.staging_peak);
            }
            sl_model_free(m);
        }
    }
    tp_layout_close(&t);
}

/* ---- test 2: replicated bytes are read once ------------------------------------------------- */

static void test_read_once(void)
{
    const uint64_t size = 200 << 10;
    char path[600];
    unsigned char *data = tu_random_file("rep.bin", size, 9, path, sizeof path);
    sl_plan *p = tp_new(4, SL_DTYPE_BF16, 1);
    for (int32_t d = 0; d < 4; d++) {
        int64_t i = tp_param(p, d, "norm", 1, size / 2);
        tp_copy(p, d, i, SL_DTYPE_BF16, 0, 0, 0, 0, 0, 1, size / 2);
    }
    sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    for (int e = 0; e < 2; e++) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = SL_IO_BUFFERED;
        o.request_bytes = 16 << 10;
        o.staging_bytes = 48 << 10;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
        if (!skip) {
            sl_load_stats s = {0};
            sl_model_stats(m, &s);
            EXPECT(st == SL_OK && !compare_model(m, p, fd), "replicated %s", sl_model_errmsg(m));
            EXPECT(s.bytes_read == size, "read once: %llu != %llu", (unsigned long long)s.bytes_read,
                   (unsigned long long)size);
            EXPECT(s.staging_peak <= o.staging_bytes, "staging");
        }
        sl_model_free(m);
    }
    tp_free(p);
    free(data);
    unlink(path);
}

/* ---- test 3: random plans against the oracle ------------------------------------------------ */

static void random_param(sl_plan *p, int32_t d, uint64_t fsize, unsigned *seed)
{
    const sl_dtype dts[3] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};
    const sl_dtype sdt = dts[rand_r(seed) % 3];
    const uint64_t es = sl_dtype_bits(sdt) / 8;
    const uint64_t rows = 1 + (uint64_t)rand_r(seed) % 40, cols = 1 + (uint64_t)rand_r(seed) % 300;
    const uint64_t pad = (uint64_t)rand_r(seed) % 3;
    const uint64_t stride = cols * es + (rand_r(seed) % 2 ? 0 : (uint64_t)rand_r(seed) % 9000);
    const uint64_t span = (rows - 1) * stride + cols * es;
    if (span >= fsize)
        return;
    const uint64_t off = (uint64_t)rand_r(seed) % (fsize - span);
    int64_t i = tp_param(p, d, "r", rows + pad, cols);
    tp_copy(p, d, i, sdt, 0, off, stride, 0, cols, rows, cols);
    if (pad)
        tp_zero(p, d, i, rows * cols, pad * cols);
}

static void test_random_plans(void)
{
    const uint64_t size = 300 << 10;
    unsigned char *data = malloc(size);
    fill_floats(data, SL_DTYPE_F16, size / 2, 5); /* any bytes would do; floats avoid NaN noise */
    char path[600];
    snprintf(path, sizeof path, "%s/rand.bin", dir);
    tu_write_file(path, data, size);
    sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    const sl_dtype dts[3] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};
    for (unsigned it = 0; it < 24; it++) {
        unsigned seed = 100 + it;
        sl_plan *p = tp_new(1 + (int32_t)(it % 3), dts[it % 3], 1);
        for (int32_t d = 0; d < p->n_devices; d++)
            for (int k = 0; k < 6; k++)
                random_param(p, d, size, &seed);
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = it % 4 == 1 ? SL_IO_DIRECT : it % 4 == 2 ? SL_IO_AUTO : SL_IO_BUFFERED;
        o.request_bytes = 4096u << (it % 4);
        o.staging_bytes = (uint64_t)(24 + (it * 37) % 200) << 10;
        o.threads = (int32_t)(it % 3);
        o.read_gap = it % 5 == 3 ? SL_READ_GAP_NONE : it % 5 == 4 ? 257 : 0;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[it % 2], &m, &skip);
        if (!skip) {
            EXPECT(st == SL_OK, "random %u: %s", it, sl_model_errmsg(m));
            EXPECT(st != SL_OK || !compare_model(m, p, fd), "random plan %u differs", it);
        }
        sl_model_free(m);
        tp_free(p);
    }
    free(data);
    unlink(path);
}

/* ---- test 3a: small chunks share slots ------------------------------------------------------ */

/* Rows of 64 bytes 8 KiB apart, read without gaps (opts.read_gap): one request per row. A slot
 * holds many of them (rd_slot), so more requests are in flight than there are slots, within the
 * same staging; the bytes are the oracle's either way. A gap out of range is refused. */
static void test_packed_rows(void)
{
    const uint64_t rows = 256, stride = 16384, row = 64, size = rows * stride;
    char path[600];
    unsigned char *data = tu_random_file("rows.bin", size, 13, path, sizeof path);
    sl_plan *p = tp_new(2, SL_DTYPE_BF16, 1);
    for (int32_t d = 0; d < 2; d++) {
        int64_t i = tp_param(p, d, "w", rows, row / 2);
        tp_copy(p, d, i, SL_DTYPE_BF16, 0, (uint64_t)d * 8192, stride, 0, row / 2, rows, row / 2);
    }
    sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    const sl_io_mode modes[2] = {SL_IO_BUFFERED, SL_IO_DIRECT};
    for (int e = 0; e < 2; e++) {
        for (int mi = 0; mi < 2; mi++) {
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.io = modes[mi];
            o.read_gap = SL_READ_GAP_NONE;
            o.request_bytes = 64 << 10;
            o.staging_bytes = 256 << 10;   /* three slots of 64 KiB and their alignment */
            sl_model *m = NULL;
            int skip = 0;
            sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
            if (skip) {
                sl_model_free(m);
                continue;
            }
            sl_load_stats s = {0};
            sl_model_stats(m, &s);
            EXPECT(st == SL_OK && !compare_model(m, p, fd), "packed rows %s io %d: %s", engines[e],
                   mi, sl_model_errmsg(m));
            /* both devices' rows: 2 * 256 ranges, none a page from the next */
            EXPECT(s.read_requests == 2 * rows, "%s io %d: %llu requests", engines[e], mi,
                   (unsigned long long)s.read_requests);
            EXPECT(s.read_depth_peak > 3, "%s io %d: at most %u requests in flight", engines[e], mi,
                   s.read_depth_peak);
            EXPECT(s.staging_peak <= o.staging_bytes, "staging peak %llu",
                   (unsigned long long)s.staging_peak);
            EXPECT(mi || s.bytes_read == 2 * rows * row, "bytes_read %llu",
                   (unsigned long long)s.bytes_read);
            sl_model_free(m);
        }
    }
    const int64_t bad[2] = {SL_READ_GAP_NONE - 1, SL_READ_GAP_MAX + 1};
    for (int k = 0; k < 2; k++) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.read_gap = bad[k];
        sl_model *m = NULL;
        sl_status st = sl_load_files(&f, 1, p, &o, &m);
        EXPECT(st == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), "read gap"),
               "read_gap %lld: status %d, %s", (long long)bad[k], (int)st, sl_model_errmsg(m));
        sl_model_free(m);
    }
    tp_free(p);
    free(data);
    unlink(path);
}

/* Staged chunks between chunks read straight into device memory cannot share a slot (they are
 * not consecutive), so the slots stay the size of one of them, as before slots held several:
 * eight 4 MiB runs of device 0 alone (direct), each followed by 256 KiB that both devices hold
 * (staged). Sizing the slots for a share of all the staged bytes once tripled the staging. */
static void test_packed_fit(void)
{
    const uint64_t kib = 1024, big = 4096 * kib, small = 256 * kib, seg = big + small;
    const uint64_t size = 8 * seg;
    char path[600];
    unsigned char *data = tu_random_file("fit.bin", size, 17, path, sizeof path);
    sl_plan *p = tu_runs_plan(8, big, small);
    sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    for (int e = 0; e < 2; e++) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = SL_IO_BUFFERED;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
        if (!skip) {
            sl_load_stats s = {0};
            sl_model_stats(m, &s);
            EXPECT(st == SL_OK && !compare_model(m, p, fd), "packed fit %s: %s", engines[e],
                   sl_model_errmsg(m));
            EXPECT(s.bytes_read == size, "packed fit: bytes_read %llu", (unsigned long long)s.bytes_read);
            EXPECT(s.staging_peak <= 3 * (small + 12 * kib), "packed fit %s: staging peak %llu",
                   engines[e], (unsigned long long)s.staging_peak);
        }
        sl_model_free(m);
    }
    tp_free(p);
    free(data);
    unlink(path);
}

/* ---- test 3b: large exclusive runs read straight into device memory ------------------------ */

/* Runs of 2 MiB and more that one operation alone reads go straight into host device buffers; next
 * to them: replicated and overlapping runs, a conversion, a misaligned neighbour ending where a
 * direct run starts, and a run of whole rows. All must still equal the oracle. */
static void test_direct_runs(void)
{
    const uint64_t mib = 1 << 20, size = 16 * mib + 3;
    unsigned char *data = malloc(size);
    fill_floats(data, SL_DTYPE_BF16, size / 2, 21);
    char path[600];
    snprintf(path, sizeof path, "%s/direct.bin", dir);
    tu_write_file(path, data, size);
    sl_plan *p = tp_new(3, SL_DTYPE_BF16, 1);
    const uint64_t a0 = 4097, a_el = 3 * mib / 2;               /* dev 0: 3 MiB alone, odd offset */
    int64_t i = tp_param(p, 0, "a", 1, a_el);
    tp_copy(p, 0, i, SL_DTYPE_BF16, 0, a0, 0, 0, 0, 1, a_el);
    i = tp_param(p, 0, "lead", 8, 256);                         /* ends exactly where "a" starts */
    tp_copy(p, 0, i, SL_DTYPE_BF16, 0, a0 - 8 * 512 + 1 - 1, 512, 0, 256, 8, 256);
    const uint64_t b0 = a0 + 3 * mib + 64, b_el = 5 * mib / 4;  /* dev 1 and 2: the same 2.5 MiB */
    i = tp_param(p, 1, "b", 1, b_el);
    tp_copy(p, 1, i, SL_DTYPE_BF16, 0, b0, 0, 0, 0, 1, b_el);
    i = tp_param(p, 2, "b", 1, b_el);
    tp_copy(p, 2, i, SL_DTYPE_BF16, 0, b0, 0, 0, 0, 1, b_el);
    const uint64_t c0 = b0 + 2 * b_el + 4096;                   /* dev 1 and 2 overlap by 1 MiB */
    i = tp_param(p, 1, "c", 1, 3 * mib / 2);
    tp_copy(p, 1, i, SL_DTYPE_BF16, 0, c0, 0, 0, 0, 1, 3 * mib / 2);
    i = tp_param(p, 2, "c", 1, 3 * mib / 2);
    tp_copy(p, 2, i, SL_DTYPE_BF16, 0, c0 + 2 * mib, 0, 0, 0, 1, 3 * mib / 2);
    const uint64_t d0 = c0 + 5 * mib + 2;                       /* dev 0: whole rows, 2 MiB */
    i = tp_param(p, 0, "rows", 512, 2048);
    tp_copy(p, 0, i, SL_DTYPE_BF16, 0, d0, 4096, 0, 2048, 512, 2048);
    const uint64_t e0 = d0 + 2 * mib + 6;                       /* dev 2: f32 -> bf16, 2 MiB */
    i = tp_param(p, 2, "conv", 1, mib / 2);
    tp_copy(p, 2, i, SL_DTYPE_F32, 0, e0, 0, 0, 0, 1, mib / 2);
    if (e0 + 2 * mib > size) {
        EXPECT(0, "test_direct_runs: file too small");
        return;
    }
    fill_floats(data + e0, SL_DTYPE_F32, mib / 2, 22);
    tu_write_file(path, data, size);
    sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    const sl_io_mode modes[2] = {SL_IO_BUFFERED, SL_IO_AUTO};
    for (int e = 0; e < 2; e++) {
        for (int mi = 0; mi < 2; mi++) {
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.io = modes[mi];
            o.request_bytes = mi ? 1 << 20 : 256 << 10;
            o.staging_bytes = 2 << 20;
            sl_model *m = NULL;
            int skip = 0;
            sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
            if (!skip) {
                sl_load_stats s = {0};
                sl_model_stats(m, &s);
                EXPECT(st == SL_OK, "direct runs (%s, io %d): %s", engines[e], mi, sl_model_errmsg(m));
                EXPECT(st != SL_OK || !compare_model(m, p, fd), "direct runs differ (%s, io %d)", engines[e], mi);
                EXPECT(st != SL_OK || (s.bytes_read <= size && s.staging_peak <= o.staging_bytes),
                       "direct runs: bytes_read %llu staging %llu", (unsigned long long)s.bytes_read,
                       (unsigned long long)s.staging_peak);
            }
            sl_model_free(m);
        }
    }
    tp_free(p);
    free(data);
    unlink(path);
}

/* ---- test 5: dummy weights ------------------------------------------------------------------ */

static void test_mt19937(void)
{
    sl_mt19937 g;
    sl_mt19937_seed(&g, 1234);
    EXPECT(sl_mt19937_next(&g) == 822569775u, "mt first");
    EXPECT(sl_mt19937_next(&g) == 2137449171u, "mt second");
    sl_mt19937_seed(&g, 5489);
    for (int i = 0; i < 9999; i++)
        sl_mt19937_next(&g);
    EXPECT(sl_mt19937_next(&g) == 4123659995u, "mt 10000th (C++ standard check)");
    /* torch.empty(4, dtype=T).uniform_(-1e-3, 1e-3, generator=torch.Generator().manual_seed(1234))
     * with torch 2.13.0+cpu (tests/python/test_dummy_torch.py compares whole models) */
    uint16_t v[4];
    sl_mt19937_seed(&g, 1234);
    sl_dummy_values(&g, SL_DTYPE_BF16, v, 4);
    EXPECT(v[0] == 0xBA77 && v[1] == 0xB94E && v[2] == 0xB9FC && v[3] == 0xB98C,
           "bf16 dummy %04x %04x %04x %04x", v[0], v[1], v[2], v[3]);
    sl_mt19937_seed(&g, 1234);
    sl_dummy_values(&g, SL_DTYPE_F16, v, 4);
    EXPECT(v[0] == 0x93B8 && v[1] == 0x8A6E && v[2] == 0x8FDF && v[3] == 0x8C5F,
           "f16 dummy %04x %04x %04x %04x", v[0], v[1], v[2], v[3]);
    uint32_t w[4];
    sl_mt19937_seed(&g, 1234);
    sl_dummy_values(&g, SL_DTYPE_F32, w, 4);
    EXPECT(w[0] == 0xBA76F357u && w[1] == 0xB94DBBCFu && w[2] == 0xB9FBD257u && w[3] == 0xB98BD632u,
           "f32 dummy %08x %08x %08x %08x", w[0], w[1], w[2], w[3]);
}

static void check_dummy_values(const sl_model *m, const sl_plan *p, int32_t d)
{
    const sl_plan_device *pd = &p->devices[d];
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    unsigned char *buf = malloc(pd->bytes + 1);
    for (int64_t i = 0; i < pd->n_params; i++)
        sl_model_read_param(m, d, i, 0, buf + pd->params[i].offset, pd->params[i].nbytes);
    char *is_pad = calloc(1, pd->bytes / es + 1);
    for (int64_t k = 0; k < pd->n_ops; k++)
        if (pd->ops[k].kind == SL_OP_ZERO)
            memset(is_pad + pd->ops[k].dst_offset / es, 1, pd->ops[k].row_elems * pd->ops[k].rows);
    uint64_t zeros = 0, n = 0;
    float lo = -1e-3f, hi = 1e-3f;
    unsigned char tmp[4];
    sl_convert(tmp, p->dtype, &lo, SL_DTYPE_F32, 1);
    sl_convert(&lo, SL_DTYPE_F32, tmp, p->dtype, 1);
    sl_convert(tmp, p->dtype, &hi, SL_DTYPE_F32, 1);
    sl_convert(&hi, SL_DTYPE_F32, tmp, p->dtype, 1);
    for (uint64_t e = 0; e < pd->bytes / es; e++) {
        float f = 0;
        sl_convert(&f, SL_DTYPE_F32, buf + e * es, p->dtype, 1);
        if (is_pad[e]) {
            EXPECT(f == 0 && !signbit(f), "padding element %llu is %g", (unsigned long long)e, f);
            continue;
        }
        zeros += f == 0;
        n++;
        /* [T(-1e-3), T(1e-3)): a value that rounds to T(1e-3) becomes T(-1e-3), as in torch */
        EXPECT(f >= lo && f < hi, "dummy value %g out of range", f);
    }
    EXPECT(zeros * 100 < n, "too many zeros (%llu of %llu)", (unsigned long long)zeros,
           (unsigned long long)n); /* bf16 has 256 values, one of them 0 */
    free(is_pad);
    free(buf);
}

static void test_dummy(void)
{
    const sl_dtype dts[3] = {SL_DTYPE_BF16, SL_DTYPE_F16, SL_DTYPE_F32};
    for (int t = 0; t < 3; t++) {
        sl_plan *p = tp_new(2, dts[t], 0);
        for (int32_t d = 0; d < 2; d++) {
            int64_t a = tp_param(p, d, "a", 64, 33);
            tp_copy(p, d, a, dts[t], -1, 0, 0, 0, 0, 1, 64 * 33);
            int64_t e = tp_param(p, d, "emb", 700, 128); /* 1.5 dummy chunks at f32 is not needed */
            const uint64_t real = d == 0 ? 700 : 650;
            tp_copy(p, d, e, dts[t], -1, 0, 0, 0, 0, 1, real * 128);
            if (real < 700)
                tp_zero(p, d, e, real * 128, (700 - real) * 128);
        }
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.dummy = 1;
        sl_model *m1 = NULL, *m2 = NULL;
        EXPECT(sl_load_files(NULL, 0, p, &o, &m1) == SL_OK, "dummy: %s", sl_model_errmsg(m1));
        o.threads = 1;
        EXPECT(sl_load_files(NULL, 0, p, &o, &m2) == SL_OK, "dummy 2: %s", sl_model_errmsg(m2));
        for (int32_t d = 0; d < 2 && sl_model_device_count(m1) == 2; d++) {
            for (int64_t i = 0; i < 2; i++) {
                uint64_t h1 = 0, h2 = 1;
                sl_model_param_xxh3(m1, d, i, &h1);
                sl_model_param_xxh3(m2, d, i, &h2);
                EXPECT(h1 == h2, "dummy not deterministic (device %d param %lld)", d, (long long)i);
            }
            check_dummy_values(m1, p, d);
        }
        /* same shape on both devices: same values (vLLM reseeds per tensor) */
        uint64_t a0 = 0, a1 = 1;
        sl_model_param_xxh3(m1, 0, 0, &a0);
        sl_model_param_xxh3(m1, 1, 0, &a1);
        EXPECT(a0 == a1, "replicated dummy differs");
        sl_load_stats s;
        sl_model_stats(m1, &s);
        EXPECT(s.bytes_read == 0 && !strcmp(s.io, "none"), "dummy reads nothing");
        sl_model_free(m1);
        sl_model_free(m2);
        o.seed = 99;
        EXPECT(sl_load_files(NULL, 0, p, &o, &m1) == SL_OK, "seed 99");
        sl_model_param_xxh3(m1, 0, 0, &a1);
        EXPECT(a0 != a1, "seed changes values");
        sl_model_free(m1);
        tp_free(p);
    }
}

int main(void)
{
    tu_load_begin("load");
    test_mt19937();
    test_tp_layout(SL_DTYPE_BF16);
    test_tp_layout(SL_DTYPE_F32);
    test_read_once();
    test_random_plans();
    test_packed_rows();
    test_packed_fit();
    test_direct_runs();
    test_dummy();
    return tu_load_end();
}
