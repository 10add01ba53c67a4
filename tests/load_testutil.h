/* load_testutil.h - hand-built plans and scratch files for the loading-engine tests, so the engine
 * is tested without the checkpoint reader or the planner; and what the test_load*.c executables
 * share: the oracle every load is compared with, the load runner, data fillers, the stand-in's
 * symbols and the TP layout fixture. Header-only; tests only. */
#ifndef SL_LOAD_TESTUTIL_H
#define SL_LOAD_TESTUTIL_H

#include "expect.h"
#include "scratch.h"
#include "load/convert.h"
#include "load/engine.h"
#include "plan/plan_data.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TP_MAX 64

/* A plan of n_dev devices, each with room for TP_MAX params and ops. */
static sl_plan *tp_new(int32_t n_dev, sl_dtype dt, int64_t n_files)
{
    sl_plan *p = calloc(1, sizeof *p);
    p->tp = n_dev;
    p->pp = 1;
    p->dtype = dt;
    p->n_devices = n_dev;
    p->n_files = n_files;
    p->has_checkpoint = n_files > 0;
    p->devices = calloc((size_t)n_dev, sizeof *p->devices);
    for (int32_t d = 0; d < n_dev; d++) {
        p->devices[d].index = d;
        p->devices[d].tp_rank = d;
        p->devices[d].params = calloc(TP_MAX, sizeof *p->devices[d].params);
        p->devices[d].ops = calloc(TP_MAX, sizeof *p->devices[d].ops);
    }
    return p;
}

static void tp_free(sl_plan *p)
{
    for (int32_t d = 0; d < p->n_devices; d++) {
        free(p->devices[d].params);
        free(p->devices[d].ops);
    }
    free(p->devices);
    free(p);
}

/* Appends a 2-D parameter [rows, cols] packed after the previous ones; returns its index. */
static int64_t tp_param(sl_plan *p, int32_t d, const char *name, uint64_t rows, uint64_t cols)
{
    sl_plan_device *pd = &p->devices[d];
    int64_t i = pd->n_params++;
    pd->params[i].name = name;
    pd->params[i].dtype = p->dtype;
    pd->params[i].ndim = 2;
    pd->params[i].shape[0] = rows;
    pd->params[i].shape[1] = cols;
    pd->params[i].nbytes = rows * cols * (sl_dtype_bits(p->dtype) / 8);
    pd->params[i].offset = pd->bytes;
    pd->bytes += pd->params[i].nbytes;
    p->total_bytes += pd->params[i].nbytes;
    return i;
}

/* COPY into param i: rows of row_elems, destination offsets relative to the parameter, in elements. */
static void tp_copy(sl_plan *p, int32_t d, int64_t i, sl_dtype sdt, int32_t file, uint64_t src_off,
                    uint64_t src_stride, uint64_t dst_elem, uint64_t dst_stride_elems, uint64_t rows,
                    uint64_t row_elems)
{
    sl_plan_device *pd = &p->devices[d];
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    sl_op *op = &pd->ops[pd->n_ops++];
    *op = (sl_op){.kind = SL_OP_COPY, .src_dtype = sdt, .file = file, .tensor = -1, .param = i,
                  .src_offset = src_off, .src_stride = src_stride,
                  .dst_offset = pd->params[i].offset + dst_elem * es, .dst_stride = dst_stride_elems * es,
                  .rows = rows, .row_elems = row_elems};
}

static void tp_zero(sl_plan *p, int32_t d, int64_t i, uint64_t dst_elem, uint64_t n)
{
    sl_plan_device *pd = &p->devices[d];
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    sl_op *op = &pd->ops[pd->n_ops++];
    *op = (sl_op){.kind = SL_OP_ZERO, .file = -1, .tensor = -1, .param = i,
                  .dst_offset = pd->params[i].offset + dst_elem * es, .rows = 1, .row_elems = n};
}

/* Two bf16 devices over one file: n (at most 8) runs of `big` bytes that device 0 alone holds
 * (read straight into its memory), each followed by `small` bytes that both hold (staged),
 * packed from offset 0. */
static sl_plan *tu_runs_plan(uint64_t n, uint64_t big, uint64_t small)
{
    static const char *names[8] = {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"};
    sl_plan *p = tp_new(2, SL_DTYPE_BF16, 1);
    for (uint64_t k = 0; k < n && k < 8; k++) {
        int64_t i = tp_param(p, 0, names[k], 1, big / 2);
        tp_copy(p, 0, i, SL_DTYPE_BF16, 0, k * (big + small), 0, 0, 0, 1, big / 2);
        for (int32_t d = 0; d < 2; d++) {
            i = tp_param(p, d, "s", 1, small / 2);
            tp_copy(p, d, i, SL_DTYPE_BF16, 0, k * (big + small) + big, 0, 0, 0, 1, small / 2);
        }
    }
    return p;
}

static void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* 1 when this filesystem accepts O_DIRECT opens. */
static int tu_direct_ok(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

/* ---- the test_load*.c executables: state, oracle, load runner -------------------------------- */

/* The engines each load test runs, whether io_uring turned out missing (run_load skips it from
 * then on), whether dir takes O_DIRECT (tu_load_begin) and the scratch directory. */
static const char *engines[2] = {"pread", "uring"};
static int uring_missing, direct_ok;
static char dir[512];

static unsigned char *oracle(const sl_plan *p, int32_t d, unsigned char *const *file_data)
{
    const sl_plan_device *pd = &p->devices[d];
    const uint64_t es = sl_dtype_bits(p->dtype) / 8;
    unsigned char *buf = calloc(1, pd->bytes + 1);
    memset(buf, 0xAB, pd->bytes); /* so missing writes show */
    for (int64_t k = 0; k < pd->n_ops; k++) {
        const sl_op *op = &pd->ops[k];
        for (uint64_t r = 0; r < op->rows; r++) {
            if (op->kind == SL_OP_ZERO) {
                memset(buf + op->dst_offset, 0, op->rows * op->row_elems * es);
                break;
            }
            sl_convert(buf + op->dst_offset + r * op->dst_stride, p->dtype,
                       file_data[op->file] + op->src_offset + r * op->src_stride, op->src_dtype,
                       op->row_elems);
        }
    }
    return buf;
}

static int compare_model(const sl_model *m, const sl_plan *p, unsigned char *const *file_data)
{
    int bad = 0;
    for (int32_t d = 0; d < p->n_devices; d++) {
        unsigned char *want = oracle(p, d, file_data);
        EXPECT(sl_model_device_allocated(m, d) == p->devices[d].bytes, "allocated");
        for (int64_t i = 0; i < p->devices[d].n_params; i++) {
            const uint64_t n = p->devices[d].params[i].nbytes;
            unsigned char *got = malloc(n + 1);
            EXPECT(sl_model_read_param(m, d, i, 0, got, n) == SL_OK, "read_param");
            const void *hp = sl_model_param_host_ptr(m, d, i);
            /* the device's own address: host memory for cpu and for the cuda stand-in */
            const void *dp = sl_model_param_ptr(m, d, i);
            EXPECT(!hp || hp == dp, "device %d param %lld: host and device pointers differ", d, (long long)i);
            EXPECT(!n || dp, "device %d param %lld: no device pointer", d, (long long)i);
            if (memcmp(got, want + p->devices[d].params[i].offset, n) || (n && memcmp(dp, got, n))) {
                for (uint64_t b = 0; b < n; b++) {
                    if (got[b] != want[p->devices[d].params[i].offset + b]) {
                        fprintf(stderr, "device %d param %s: first difference at byte %llu\n", d,
                                p->devices[d].params[i].name, (unsigned long long)b);
                        break;
                    }
                }
                bad = 1;
            }
            uint64_t h = 0;
            EXPECT(sl_model_param_xxh3(m, d, i, &h) == SL_OK && h == sl_xxh3(got, n), "xxh3");
            free(got);
        }
        free(want);
    }
    return bad;
}

/* Runs one load with the given engine and I/O mode; returns the status (skips are SL_OK + *skip). */
static sl_status run_load(const sl_load_file *files, int64_t n, const sl_plan *p, sl_load_opts *o,
                          const char *engine, sl_model **m, int *skip)
{
    *skip = 0;
    if ((!strcmp(engine, "uring") && uring_missing) || (o->io == SL_IO_DIRECT && !direct_ok)) {
        *skip = 1;
        *m = NULL;
        return SL_OK;
    }
    o->io_engine = engine;
    sl_status st = sl_load_files(files, n, p, o, m);
    if (st == SL_E_UNSUPPORTED && !strcmp(engine, "uring") && strstr(sl_model_errmsg(*m), "io_uring")) {
        uring_missing = 1;
        *skip = 1;
        fprintf(stderr, "io_uring unavailable: %s\n", sl_model_errmsg(*m));
    }
    return st;
}

/* ---- test data ------------------------------------------------------------------------------- */

static void fill_random(unsigned char *b, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(rand() >> 7);
}

/* size random bytes from seed, also written to dir/name, whose path goes to path (len bytes);
 * the caller frees them and unlinks the file. */
static unsigned char *tu_random_file(const char *name, uint64_t size, unsigned seed, char *path,
                                     size_t len)
{
    unsigned char *data = malloc(size);
    fill_random(data, size, seed);
    snprintf(path, len, "%s/%s", dir, name);
    tu_write_file(path, data, size);
    return data;
}

/* Values that convert without NaN: random f32 in [-4, 4) written in each dtype. */
static void fill_floats(unsigned char *b, sl_dtype dt, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        float f = (float)rand() / (float)RAND_MAX * 8.0f - 4.0f;
        sl_convert(b + i * (sl_dtype_bits(dt) / 8), dt, &f, SL_DTYPE_F32, 1);
    }
}

/* Entry point `name` of the stand-in (lib: dlopen'd by the test; the same library shardload loads
 * through sl_cuda_set_runtime) into the function pointer at fn; it stays NULL when missing. ISO C has no cast
 * from an object pointer to a function pointer: memcpy. */
static void fake_sym(void *lib, const char *name, void *fn, size_t fn_size)
{
    void *sym = lib ? dlsym(lib, name) : NULL;
    if (sym && fn_size == sizeof sym)
        memcpy(fn, &sym, sizeof sym);
}

/* ---- the TP layout: conversions, padding, tiny requests -------------------------------------- */

/* The file dir/tp.bin and a 2-device plan over it in plan_dt (every test_load*.c executable runs
 * its cases on it in bf16 and in f32). */
typedef struct tp_layout {
    sl_plan *p;
    sl_load_file f;       /* the file: path, size */
    unsigned char *data;  /* its bytes */
    uint64_t o1, size;    /* where W1 starts (the junk before it is never read); the file's size */
    char path[600];
} tp_layout;

static void tp_layout_open(tp_layout *t, sl_dtype plan_dt)
{
    /* file: 16 junk | W1 F32 [64,96] | 2 junk | W2 BF16 [40,200] (misaligned) | E F16 [21,64] */
    const uint64_t o1 = 16, o2 = o1 + 64 * 96 * 4 + 2, o3 = o2 + 40 * 200 * 2, size = o3 + 21 * 64 * 2;
    unsigned char *data = calloc(1, size);
    fill_random(data, 16, 1);
    fill_floats(data + o1, SL_DTYPE_F32, 64 * 96, 2);
    fill_floats(data + o2, SL_DTYPE_BF16, 40 * 200, 3);
    fill_floats(data + o3, SL_DTYPE_F16, 21 * 64, 4);
    snprintf(t->path, sizeof t->path, "%s/tp.bin", dir);
    tu_write_file(t->path, data, size);
    sl_plan *p = tp_new(2, plan_dt, 1);
    for (int32_t d = 0; d < 2; d++) {
        int64_t w1 = tp_param(p, d, "w1", 64, 48); /* column shard: strided rows */
        tp_copy(p, d, w1, SL_DTYPE_F32, 0, o1 + (uint64_t)d * 48 * 4, 96 * 4, 0, 48, 64, 48);
        int64_t w2 = tp_param(p, d, "w2", 20, 200); /* row shard: one contiguous run */
        tp_copy(p, d, w2, SL_DTYPE_BF16, 0, o2 + (uint64_t)d * 20 * 200 * 2, 0, 0, 0, 1, 20 * 200);
        int64_t e = tp_param(p, d, "emb", 12, 64); /* 21 rows padded to 24, 12 per device */
        const uint64_t real = d == 0 ? 12 : 9;
        tp_copy(p, d, e, SL_DTYPE_F16, 0, o3 + (uint64_t)d * 12 * 64 * 2, 0, 0, 0, 1, real * 64);
        if (real < 12)
            tp_zero(p, d, e, real * 64, (12 - real) * 64);
    }
    t->p = p;
    t->data = data;
    t->o1 = o1;
    t->size = size;
    t->f = (sl_load_file){t->path, size};
}

static void tp_layout_close(tp_layout *t)
{
    tp_free(t->p);
    free(t->data);
    unlink(t->path);
}

/* ---- main ------------------------------------------------------------------------------------ */

/* Makes the scratch directory dir (sl_<tag>_XXXXXX) and tries O_DIRECT there (direct_ok). */
static void tu_load_begin(const char *tag)
{
    tu_tmpdir(dir, sizeof dir, tag);
    char probe[600];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    tu_write_file(probe, "x", 1);
    direct_ok = tu_direct_ok(probe);
    unlink(probe);
    if (!direct_ok)
        fprintf(stderr, "O_DIRECT refused in %s: direct-mode cases skipped\n", dir);
}

/* Removes dir; the exit status (1 after a failed EXPECT). */
static int tu_load_end(void)
{
    rmdir(dir);
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    return expect_failures ? 1 : 0;
}

#endif /* SL_LOAD_TESTUTIL_H */
