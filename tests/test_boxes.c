/* test_boxes.c - plans from index boxes (sl_plan_build_boxes), loaded by the engine: every
 * parameter equals the box cut out of its tensor by plain index arithmetic (element by element,
 * nothing shared with the planner), for random boxes of 0- to 4-D tensors over several devices,
 * overlapping ones included; replicated bytes are read once; conversions on the way; refusals. */
#include "expect.h"
#include "load_testutil.h"

#include <stdint.h>

#define N_TENSORS 7
#define N_DEV 3

typedef struct tensor {
    const char *name;
    sl_dtype dt;
    uint32_t ndim;
    uint64_t shape[4];
} tensor;

static const tensor tensors[N_TENSORS] = {
    {"scalar", SL_DTYPE_F32, 0, {0}},
    {"vec", SL_DTYPE_F32, 1, {37}},
    {"mat", SL_DTYPE_F32, 2, {29, 43}},
    {"cube", SL_DTYPE_F32, 3, {5, 7, 11}},
    {"hyper", SL_DTYPE_F32, 4, {3, 4, 5, 6}},
    {"wide", SL_DTYPE_F32, 2, {3, 4096}},
    {"ones", SL_DTYPE_F32, 4, {4, 1, 3, 6}},   /* a size-1 dimension every box holds whole */
};

static uint64_t numel(const tensor *t)
{
    uint64_t n = 1;
    for (uint32_t k = 0; k < t->ndim; k++)
        n *= t->shape[k];
    return n;
}

/* Element e of tensor t: distinct everywhere, so a misplaced element shows. */
static float value(int t, uint64_t e)
{
    return (float)(t * 100000 + (int64_t)e) + 0.25f;
}

static void write_checkpoint(const char *path)
{
    sl_writer *w = NULL;
    int64_t idx[N_TENSORS];
    EXPECT(sl_writer_open(path, &w) == SL_OK, "writer: %s", sl_writer_errmsg(w));
    for (int t = 0; t < N_TENSORS; t++)
        EXPECT(sl_writer_add(w, tensors[t].name, tensors[t].dt, tensors[t].ndim, tensors[t].shape,
                             &idx[t]) == SL_OK, "add: %s", sl_writer_errmsg(w));
    EXPECT(sl_writer_begin(w) == SL_OK, "begin: %s", sl_writer_errmsg(w));
    for (int t = 0; t < N_TENSORS; t++) {
        const uint64_t n = numel(&tensors[t]);
        float *v = malloc(n * sizeof *v);
        for (uint64_t e = 0; e < n; e++)
            v[e] = value(t, e);
        EXPECT(sl_writer_write(w, idx[t], 0, v, n * sizeof *v) == SL_OK, "write");
        free(v);
    }
    EXPECT(sl_writer_finish(w) == SL_OK, "finish: %s", sl_writer_errmsg(w));
    sl_writer_free(w);
}

typedef struct box {
    int t, dev;
    uint64_t start[4], len[4];
} box;

/* The box's elements in C order, by index arithmetic alone. */
static float *expected(const box *b)
{
    const tensor *t = &tensors[b->t];
    uint64_t n = 1;
    for (uint32_t k = 0; k < t->ndim; k++)
        n *= b->len[k];
    float *out = malloc(n * sizeof *out + 1);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t rest = i, e = 0, mul = 1;
        for (uint32_t k = t->ndim; k-- > 0;) {
            const uint64_t ix = b->start[k] + rest % b->len[k];
            rest /= b->len[k];
            e += ix * mul;
            mul *= t->shape[k];
        }
        out[i] = value(b->t, e);
    }
    return out;
}

/* f rounded to bf16 (nearest even; no NaN here), as the f32 it widens back to. */
static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t urand(unsigned *seed, uint64_t n)
{
    *seed = *seed * 1103515245u + 12345u;
    return n ? (*seed >> 8) % n : 0;
}

/* One random box of tensor t on device dev: whole, or a random sub-range per dimension. */
static box random_box(int t, int dev, unsigned *seed)
{
    box b = {.t = t, .dev = dev};
    for (uint32_t k = 0; k < tensors[t].ndim; k++) {
        const uint64_t s = tensors[t].shape[k];
        if (urand(seed, 3) == 0) {
            b.start[k] = 0;
            b.len[k] = s;
        } else {
            b.start[k] = urand(seed, s);
            b.len[k] = urand(seed, s - b.start[k] + 1);
        }
    }
    return b;
}

static sl_status build(const sl_checkpoint *ck, const box *bx, int n, int32_t dtype, sl_plan **p)
{
    sl_box sb[N_TENSORS * N_DEV];
    for (int i = 0; i < n; i++)
        sb[i] = (sl_box){.tensor = tensors[bx[i].t].name, .device = bx[i].dev,
                         .ndim = tensors[bx[i].t].ndim, .start = bx[i].start, .len = bx[i].len};
    return sl_plan_build_boxes(ck, sb, n, N_DEV, dtype, p);
}

/* Loads the boxes and compares every parameter with its expected elements (as f32). */
static void check_round(const sl_checkpoint *ck, const box *bx, int n, int32_t dtype, int round)
{
    sl_plan *p = NULL;
    sl_status st = build(ck, bx, n, dtype, &p);
    EXPECT(st == SL_OK, "round %d: plan: %s", round, sl_plan_errmsg(p));
    sl_load_opts o;
    sl_load_opts_init(&o);
    o.staging_bytes = 64 << 10;
    sl_model *m = NULL;
    if (st == SL_OK)
        st = sl_load(ck, p, &o, &m);
    EXPECT(st == SL_OK, "round %d: load: %s", round, sl_model_errmsg(m));
    int64_t seen[N_DEV] = {0};
    for (int i = 0; st == SL_OK && i < n; i++) {
        const int64_t k = seen[bx[i].dev]++;
        sl_param_info pi;
        EXPECT(sl_plan_param(p, bx[i].dev, k, &pi) == SL_OK && !strcmp(pi.name, tensors[bx[i].t].name),
               "round %d: device %d param %lld", round, bx[i].dev, (long long)k);
        float *want = expected(&bx[i]);
        const uint64_t elems = pi.nbytes / (sl_dtype_bits(pi.dtype) / 8);
        const void *got = sl_model_param_host_ptr(m, bx[i].dev, k);
        for (uint64_t e = 0; e < elems; e++) {
            float g;
            if (pi.dtype == SL_DTYPE_BF16) {
                uint32_t u = (uint32_t)((const uint16_t *)got)[e] << 16;
                memcpy(&g, &u, 4);
                want[e] = bf16_round(want[e]);
            } else {
                g = ((const float *)got)[e];
            }
            if (g != want[e]) {
                EXPECT(0, "round %d: %s on device %d: element %llu is %g, want %g", round,
                       tensors[bx[i].t].name, bx[i].dev, (unsigned long long)e, g, want[e]);
                break;
            }
        }
        free(want);
    }
    sl_load_stats s;
    if (st == SL_OK && sl_model_stats(m, &s) == SL_OK)
        EXPECT(s.bytes_read >= sl_plan_read_bytes(p) && s.staging_peak <= o.staging_bytes,
               "round %d: bytes_read %llu < union %llu, or staging %llu", round,
               (unsigned long long)s.bytes_read, (unsigned long long)sl_plan_read_bytes(p),
               (unsigned long long)s.staging_peak);
    sl_model_free(m);
    sl_plan_free(p);
}

static void test_random_boxes(const sl_checkpoint *ck)
{
    unsigned seed = 20261201;
    for (int round = 0; round < 60; round++) {
        box bx[N_TENSORS * N_DEV];
        int n = 0;
        for (int t = 0; t < N_TENSORS; t++)
            for (int d = 0; d < N_DEV; d++)
                if (urand(&seed, 4) != 0)
                    bx[n++] = random_box(t, d, &seed);
        check_round(ck, bx, n, round % 3 == 2 ? SL_DTYPE_BF16 : -1, round);
    }
}

/* Dimensions a box holds whole fold into its operations' rows (one pitch apart), however many
 * lead up to the run: a [N, 1, 2] tensor halved along its last dimension was one operation per
 * leading index (2^25 of them planned in 4.6 GB); the bytes as index arithmetic gives them. */
static void test_rows_fold(const sl_checkpoint *ck)
{
    static const struct {
        uint64_t start[4], len[4];
        int64_t ops;
    } cases[] = {
        {{0, 0, 0, 3}, {4, 1, 3, 3}, 1},   /* the last dimension halved: 12 rows of 3 */
        {{1, 0, 1, 0}, {2, 1, 2, 6}, 1},   /* 2 rows of 12 */
        {{0, 0, 1, 2}, {4, 1, 2, 3}, 4},   /* dimension 2 cut: an operation per leading index */
        {{0, 0, 0, 0}, {4, 1, 3, 6}, 1},   /* the whole tensor */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        box b = {.t = 6, .dev = 0};
        memcpy(b.start, cases[i].start, sizeof b.start);
        memcpy(b.len, cases[i].len, sizeof b.len);
        sl_plan *p = NULL;
        EXPECT(build(ck, &b, 1, -1, &p) == SL_OK && p->devices[0].n_ops == cases[i].ops,
               "fold %zu: %lld operations, want %lld: %s", i, p ? (long long)p->devices[0].n_ops : -1LL,
               (long long)cases[i].ops, sl_plan_errmsg(p));
        sl_plan_free(p);
        check_round(ck, &b, 1, -1, 2000 + (int)i);
    }
}

/* Replicated boxes: the same rows on every device are read once (read_bytes is their union). */
static void test_replicated(const sl_checkpoint *ck)
{
    box bx[N_DEV];
    for (int d = 0; d < N_DEV; d++)
        bx[d] = (box){.t = 2, .dev = d, .start = {4, 0}, .len = {10, 43}};
    sl_plan *p = NULL;
    EXPECT(build(ck, bx, N_DEV, -1, &p) == SL_OK, "replicated: %s", sl_plan_errmsg(p));
    EXPECT(sl_plan_read_bytes(p) == 10 * 43 * 4, "replicated: read_bytes %llu",
           (unsigned long long)sl_plan_read_bytes(p));
    EXPECT(sl_plan_layout(p) == SL_LAYOUT_BOXES && sl_plan_device_count(p) == N_DEV &&
               sl_plan_total_bytes(p) == 3 * 10 * 43 * 4, "replicated: plan figures");
    char err[256] = "";
    EXPECT(sl_reshard(ck, p, NULL, "/nonexistent/out", 0, err, sizeof err) == SL_E_INVALID_ARG &&
               strstr(err, "cannot be resharded"), "reshard of a box plan: %s", err);
    sl_plan_free(p);
    check_round(ck, bx, N_DEV, -1, 1000);
}

static void refused(const sl_checkpoint *ck, const sl_box *b, int n, int32_t dtype, sl_status want,
                    const char *msg)
{
    sl_plan *p = NULL;
    const sl_status st = sl_plan_build_boxes(ck, b, n, N_DEV, dtype, &p);
    EXPECT(st == want && strstr(sl_plan_errmsg(p), msg), "refusal '%s': got %s: %s", msg,
           sl_status_str(st), sl_plan_errmsg(p));
    sl_plan_free(p);
}

static void test_refusals(const sl_checkpoint *ck)
{
    const uint64_t s0[2] = {0, 0}, l_ok[2] = {29, 43}, l_big[2] = {30, 43}, s_in[2] = {28, 0},
                   l_two[2] = {2, 43};
    sl_box b = {.tensor = "mat", .device = 0, .ndim = 2, .start = s0, .len = l_ok};
    sl_box two[2] = {b, b};
    refused(ck, two, 2, -1, SL_E_DUPLICATE, "tensor 'mat' has two boxes on device 0");
    b.len = l_big;
    refused(ck, &b, 1, -1, SL_E_SHAPE, "tensor 'mat': box [0, +30) of dimension 0");
    b.start = s_in;
    b.len = l_two;
    refused(ck, &b, 1, -1, SL_E_SHAPE, "box [28, +2) of dimension 0");
    b.start = s0;
    b.len = l_ok;
    b.ndim = 1;
    refused(ck, &b, 1, -1, SL_E_SHAPE, "tensor 'mat' has 2 dimensions, its box on device 0 1");
    b.ndim = 2;
    b.device = N_DEV;
    refused(ck, &b, 1, -1, SL_E_INVALID_ARG, "box on device 3 of a 3-device mesh");
    b.device = 0;
    b.tensor = "nope";
    refused(ck, &b, 1, -1, SL_E_NOT_FOUND, "no tensor 'nope'");
    b.tensor = "mat";
    refused(ck, &b, 1, SL_DTYPE_I8, SL_E_INVALID_ARG, "convert to F32, F16 or BF16, not I8");
    refused(ck, &b, 1, -3, SL_E_INVALID_ARG, "convert to F32, F16 or BF16, not a negative number");
    b.dtype = SL_DTYPE_I8;
    refused(ck, &b, 1, SL_BOX_DTYPES, SL_E_INVALID_ARG,
            "tensor 'mat': its box on device 0 converts to I8 (F32, F16 or BF16");
    b.dtype = -2;
    refused(ck, &b, 1, SL_BOX_DTYPES, SL_E_INVALID_ARG, "converts to a negative number");
    b.dtype = SL_DTYPE_I8;
    sl_plan *q = NULL; /* the field counts only under SL_BOX_DTYPES */
    EXPECT(sl_plan_build_boxes(ck, &b, 1, N_DEV, SL_DTYPE_BF16, &q) == SL_OK &&
               sl_plan_dtype(q) == SL_DTYPE_BF16, "box dtype ignored: %s", sl_plan_errmsg(q));
    sl_plan_free(q);
    b.dtype = 0;
    sl_plan *p = NULL;
    EXPECT(sl_plan_build_boxes(ck, &b, 1, 0, -1, &p) == SL_E_INVALID_ARG &&
               strstr(sl_plan_errmsg(p), "a mesh of 0 devices"), "zero devices: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
}

/* A plan whose boxes would need more operations than the planner's bound (as layout plans have,
 * plan_bound.c) is refused with the figures before anything is allocated for it: a [2^25, 3, 2]
 * tensor (a sparse file) cut in dimensions 1 and 2 is an operation per leading index, 2^25 of
 * them, about 3 GB of plan. */
static void test_box_plan_bound(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/huge.safetensors", dir);
    const uint64_t n = 1ull << 25;
    char js[160];
    const int len = snprintf(js, sizeof js, "{\"t\":{\"dtype\":\"U8\",\"shape\":[%llu,3,2],"
                             "\"data_offsets\":[0,%llu]}}", (unsigned long long)n,
                             (unsigned long long)(6 * n));
    FILE *f = fopen(path, "wb");
    const uint64_t hl = (uint64_t)len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hl >> (8 * i));
    EXPECT(f && fwrite(le, 1, 8, f) == 8 && fwrite(js, 1, hl, f) == hl && fclose(f) == 0 &&
               truncate(path, (off_t)(8 + hl + 6 * n)) == 0, "writing %s", path);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(path, &ck) == SL_OK, "open huge: %s", sl_checkpoint_errmsg(ck));
    const uint64_t start[3] = {0, 1, 1}, len3[3] = {n, 2, 1};
    const sl_box b = {.tensor = "t", .device = 0, .ndim = 3, .start = start, .len = len3};
    sl_plan *p = NULL;
    const sl_status st = sl_plan_build_boxes(ck, &b, 1, 1, -1, &p);
    EXPECT(st == SL_E_NOMEM && strstr(sl_plan_errmsg(p), "would hold 33554432 operations") &&
               strstr(sl_plan_errmsg(p), "above the planner's limit"), "box plan bound: %s: %s",
           sl_status_str(st), sl_plan_errmsg(p));
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    unlink(path);
}

/* A plan loads only with a checkpoint of the layout it was made for: a copy of that file elsewhere
 * loads; one whose tensor has another shape (the same bytes, so every read stays inside the file)
 * is refused, where it loaded other bytes with SL_OK. */
static void test_other_checkpoint(const sl_checkpoint *ck, const char *dir, const char *path)
{
    char copy[600], other[600];
    snprintf(copy, sizeof copy, "%s/copy.safetensors", dir);
    snprintf(other, sizeof other, "%s/other.safetensors", dir);
    FILE *in = fopen(path, "rb");
    size_t n = 0;
    unsigned char *buf = malloc(1 << 20);
    n = in && buf ? fread(buf, 1, 1 << 20, in) : 0;
    if (in)
        fclose(in);
    EXPECT(n > 8 && n < (1 << 20), "reading %s", path);
    tu_write_file(copy, buf, n);
    /* the same file with "mat" [29, 43] declared [43, 29]: same byte range, another shape */
    char *hit = n > 8 ? memmem(buf, n, "[29,43]", 7) : NULL;
    EXPECT(hit != NULL, "no mat shape in the header");
    if (hit)
        memcpy(hit, "[43,29]", 7);
    tu_write_file(other, buf, n);
    free(buf);
    const uint64_t start[2] = {3, 5}, len[2] = {7, 11};
    const sl_box b = {.tensor = "mat", .device = 0, .ndim = 2, .start = start, .len = len};
    sl_plan *p = NULL;
    EXPECT(sl_plan_build_boxes(ck, &b, 1, 1, -1, &p) == SL_OK, "plan: %s", sl_plan_errmsg(p));
    const char *paths[2] = {copy, other};
    for (int i = 0; i < 2; i++) {
        sl_checkpoint *c2 = NULL;
        sl_model *m = NULL;
        EXPECT(sl_checkpoint_open(paths[i], &c2) == SL_OK, "open %s: %s", paths[i], sl_checkpoint_errmsg(c2));
        const sl_status st = sl_load(c2, p, NULL, &m);
        if (i == 0)
            EXPECT(st == SL_OK, "a copy of the checkpoint: %s", sl_model_errmsg(m));
        else
            EXPECT(st == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), "the plan was made for another "
                                                    "checkpoint"), "another layout: %s: %s",
                   sl_status_str(st), sl_model_errmsg(m));
        sl_model_free(m);
        sl_checkpoint_close(c2);
        unlink(paths[i]);
    }
    sl_plan_free(p);
}

/* SL_BOX_DTYPES: a target per box, in one plan: m32 to BF16 on device 0 and kept F32 on device 1
 * (the same rows: read once), mi kept I32 beside them (under one target it is refused), each
 * element the independent rounding of its source. */
static void test_box_targets(const sl_checkpoint *ck, const unsigned char *r32, const unsigned char *ri)
{
    const uint64_t s32[2] = {1, 0}, l32[2] = {2, 6}, si[1] = {2}, li[1] = {3};
    sl_box b[3] = {{"m32", 0, 2, s32, l32, SL_DTYPE_BF16}, {"m32", 1, 2, s32, l32, -1},
                   {"mi", 2, 1, si, li, -1}};
    sl_plan *p = NULL;
    sl_model *m = NULL;
    sl_load_opts o;
    sl_load_opts_init(&o);
    sl_status st = sl_plan_build_boxes(ck, b, 3, N_DEV, SL_BOX_DTYPES, &p);
    EXPECT(st == SL_OK, "targets: plan: %s", sl_plan_errmsg(p));
    if (st == SL_OK)
        st = sl_load(ck, p, &o, &m);
    EXPECT(st == SL_OK, "targets: load: %s", sl_model_errmsg(m));
    if (st == SL_OK) {
        sl_param_info pi[3];
        for (int d = 0; d < 3; d++)
            EXPECT(sl_plan_param(p, d, 0, &pi[d]) == SL_OK, "targets: param of device %d", d);
        EXPECT(sl_plan_dtype(p) == SL_DTYPE_BF16 && pi[0].dtype == SL_DTYPE_BF16 &&
                   pi[0].nbytes == 24 && pi[1].dtype == SL_DTYPE_F32 && pi[1].nbytes == 48 &&
                   pi[2].dtype == SL_DTYPE_I32 && pi[2].nbytes == 12,
               "targets: dtypes %d %d %d, plan %d", pi[0].dtype, pi[1].dtype, pi[2].dtype,
               sl_plan_dtype(p));
        EXPECT(sl_plan_read_bytes(p) == 48 + 12, "targets: read_bytes %llu",
               (unsigned long long)sl_plan_read_bytes(p));
        const uint16_t *h = sl_model_param_host_ptr(m, 0, 0);
        for (int e = 0; e < 12; e++) {
            float f, g;
            memcpy(&f, r32 + 24 + 4 * e, 4);
            const uint32_t u = (uint32_t)h[e] << 16;
            memcpy(&g, &u, 4);
            EXPECT(g == bf16_round(f), "targets: element %d is %g, want %g", e, g, bf16_round(f));
        }
        EXPECT(memcmp(sl_model_param_host_ptr(m, 1, 0), r32 + 24, 48) == 0 &&
                   memcmp(sl_model_param_host_ptr(m, 2, 0), ri + 8, 12) == 0,
               "targets: kept bytes");
    }
    sl_model_free(m);
    sl_plan_free(p);
    b[2].dtype = SL_DTYPE_F16;
    refused(ck, b, 3, SL_BOX_DTYPES, SL_E_UNSUPPORTED, "tensor 'mi': no conversion from I32 to F16");
}

/* No target dtype: each box keeps its tensor's own dtype, whatever the others' (a checkpoint may
 * mix them: transformers keeps DeepSeek-V3's router F32 in a bf16 model), bytes exact. With a
 * target, only floats convert; sub-byte elements cannot be boxed either way. */
static void test_mixed_dtypes(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/mixed.safetensors", dir);
    static const struct {
        const char *name;
        sl_dtype dt;
        uint32_t ndim;
        uint64_t shape[2], bytes;
    } mt[] = {{"m32", SL_DTYPE_F32, 2, {4, 6}, 96}, {"m16", SL_DTYPE_BF16, 2, {6, 4}, 48},
              {"mi", SL_DTYPE_I32, 1, {5}, 20}, {"m4", SL_DTYPE_F4, 1, {8}, 4}};
    unsigned char raw[4][96];
    sl_writer *w = NULL;
    int64_t idx[4];
    EXPECT(sl_writer_open(path, &w) == SL_OK, "mixed: writer: %s", sl_writer_errmsg(w));
    for (int t = 0; t < 4; t++)
        EXPECT(sl_writer_add(w, mt[t].name, mt[t].dt, mt[t].ndim, mt[t].shape, &idx[t]) == SL_OK,
               "mixed: add %s: %s", mt[t].name, sl_writer_errmsg(w));
    EXPECT(sl_writer_begin(w) == SL_OK, "mixed: begin: %s", sl_writer_errmsg(w));
    for (int t = 0; t < 4; t++) {
        for (uint64_t k = 0; k < mt[t].bytes; k++)
            raw[t][k] = (unsigned char)(t * 64 + k * 7 + 1);
        EXPECT(sl_writer_write(w, idx[t], 0, raw[t], mt[t].bytes) == SL_OK, "mixed: write");
    }
    EXPECT(sl_writer_finish(w) == SL_OK, "mixed: finish: %s", sl_writer_errmsg(w));
    sl_writer_free(w);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(path, &ck) == SL_OK, "mixed: open: %s", sl_checkpoint_errmsg(ck));
    const uint64_t s32[2] = {1, 0}, l32[2] = {2, 6}, s16[2] = {0, 1}, l16[2] = {6, 2}, si[1] = {2},
                   li[1] = {3}, s4[1] = {0}, l4[1] = {4};
    const sl_box b[4] = {{"m32", 0, 2, s32, l32}, {"m16", 1, 2, s16, l16}, {"mi", 2, 1, si, li},
                         {"m4", 0, 1, s4, l4}};
    sl_plan *p = NULL;
    sl_model *m = NULL;
    sl_load_opts o;
    sl_load_opts_init(&o);
    sl_status st = sl_plan_build_boxes(ck, b, 3, N_DEV, -1, &p);
    EXPECT(st == SL_OK, "mixed: plan: %s", sl_plan_errmsg(p));
    if (st == SL_OK)
        st = sl_load(ck, p, &o, &m);
    EXPECT(st == SL_OK, "mixed: load: %s", sl_model_errmsg(m));
    if (st == SL_OK) {
        EXPECT(sl_plan_dtype(p) == SL_DTYPE_F32, "mixed: the plan's dtype is the first box's");
        unsigned char want[3][48];
        memcpy(want[0], raw[0] + 1 * 24, 48);                      /* rows 1-2 of m32 */
        for (int r = 0; r < 6; r++)                                /* columns 1-2 of m16 */
            memcpy(want[1] + r * 4, raw[1] + r * 8 + 2, 4);
        memcpy(want[2], raw[2] + 8, 12);                           /* elements 2-4 of mi */
        const sl_dtype dts[3] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_I32};
        const uint64_t nb[3] = {48, 24, 12};
        for (int d = 0; d < 3; d++) {
            sl_param_info pi;
            EXPECT(sl_plan_param(p, d, 0, &pi) == SL_OK && pi.dtype == dts[d] && pi.nbytes == nb[d],
                   "mixed: device %d keeps %s", d, sl_dtype_name(dts[d]));
            EXPECT(memcmp(sl_model_param_host_ptr(m, d, 0), want[d], nb[d]) == 0,
                   "mixed: device %d's bytes", d);
        }
    }
    sl_model_free(m);
    sl_plan_free(p);
    refused(ck, b, 3, SL_DTYPE_BF16, SL_E_UNSUPPORTED, "tensor 'mi': no conversion from I32 to BF16");
    test_box_targets(ck, raw[0], raw[2]);
    refused(ck, &b[3], 1, -1, SL_E_UNSUPPORTED,
            "tensor 'm4': F4 elements are smaller than a byte, and a box cuts whole bytes");
    refused(ck, &b[3], 1, SL_DTYPE_F32, SL_E_UNSUPPORTED, "tensor 'm4': F4 elements are smaller");
    sl_checkpoint_close(ck);
    unlink(path);
}

int main(void)
{
    char dir[512], path[600];
    tu_tmpdir(dir, sizeof dir, "boxes");
    snprintf(path, sizeof path, "%s/boxes.safetensors", dir);
    write_checkpoint(path);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(path, &ck) == SL_OK, "open: %s", sl_checkpoint_errmsg(ck));
    if (!expect_failures) {
        test_random_boxes(ck);
        test_replicated(ck);
        test_rows_fold(ck);
        test_refusals(ck);
        test_mixed_dtypes(dir);
        test_box_plan_bound(dir);
        test_other_checkpoint(ck, dir, path);
    }
    sl_checkpoint_close(ck);
    unlink(path);
    rmdir(dir);
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    else
        printf("test_boxes: all passed\n");
    return expect_failures ? 1 : 0;
}
