/* test_load_faults.c - loads that fail, on hand-built plans over files written here: the file
 * truncated before and while loading, a missing file, a device without a runtime or unknown, a bad
 * plan, and a CUDA call failing mid-load on the host-memory stand-in (the failed model holds no
 * device memory); and a fault the load survives: O_DIRECT refused at open or on a read, after
 * which the file is read buffered (einval_inject.h). Both engines; the stand-in and the oracle:
 * load_testutil.h. */
#include "load_testutil.h"
#include "einval_inject.h"

#include "load/convert.h"

#include <dlfcn.h>
#include <sys/stat.h>

/* ---- test 4: faults ------------------------------------------------------------------------- */

typedef struct trunc_ctx {
    const char *path;
    int done;
} trunc_ctx;

static void truncate_on_progress(void *user, uint64_t done, uint64_t total)
{
    trunc_ctx *t = user;
    (void)done;
    (void)total;
    if (!t->done && truncate(t->path, 8192) == 0)
        t->done = 1;
}

static void test_changed(void)
{
    const uint64_t size = 1 << 20;
    unsigned char *data = malloc(size);
    fill_random(data, size, 11);
    char path[600];
    snprintf(path, sizeof path, "%s/trunc.bin", dir);
    sl_plan *p = tp_new(2, SL_DTYPE_BF16, 1);
    for (int32_t d = 0; d < 2; d++) {
        int64_t i = tp_param(p, d, "w", 1, size / 4);
        tp_copy(p, d, i, SL_DTYPE_BF16, 0, (uint64_t)d * size / 2, 0, 0, 0, 1, size / 4);
    }
    sl_load_file f = {path, size};
    for (int e = 0; e < 2; e++) {
        /* (a) truncated before the load: caught at open */
        tu_write_file(path, data, size);
        truncate(path, size / 2);
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = SL_IO_BUFFERED;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
        if (!skip) {
            EXPECT(st == SL_E_CHANGED && strstr(sl_model_errmsg(m), path) &&
                       strstr(sl_model_errmsg(m), "offset 524288"),
                   "truncated: %s %s", sl_status_str(st), sl_model_errmsg(m));
            EXPECT(sl_model_device_count(m) == 0 && sl_model_device_allocated(m, 0) == 0 &&
                       sl_model_param_host_ptr(m, 0, 0) == NULL,
                   "failed model has no devices");
        }
        sl_model_free(m);
        /* (b) truncated while loading: a short read */
        tu_write_file(path, data, size);
        trunc_ctx t = {path, 0};
        o.request_bytes = 4096;
        o.staging_bytes = 32 << 10;
        o.progress = truncate_on_progress;
        o.progress_user = &t;
        st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
        if (!skip) {
            EXPECT(st == SL_E_CHANGED && strstr(sl_model_errmsg(m), path) &&
                       strstr(sl_model_errmsg(m), "short read at offset"),
                   "short read: %s %s", sl_status_str(st), sl_model_errmsg(m));
            EXPECT(sl_model_device_count(m) == 0, "no devices after failure");
        }
        sl_model_free(m);
    }
    /* missing file, bad device, bad plan */
    unlink(path);
    sl_load_opts o;
    sl_load_opts_init(&o);
    sl_model *m = NULL;
    o.io_engine = "pread";
    EXPECT(sl_load_files(&f, 1, p, &o, &m) == SL_E_NOT_FOUND && strstr(sl_model_errmsg(m), path),
           "missing: %s", sl_model_errmsg(m));
    sl_model_free(m);
    o.device = "cuda";
    sl_cuda_set_runtime("/nonexistent/libcudart.so"); /* no runtime, whatever this host has */
    EXPECT(sl_load_files(&f, 1, p, &o, &m) == SL_E_UNSUPPORTED &&
               strstr(sl_model_errmsg(m), "CUDA runtime not found"),
           "cuda: %s", sl_model_errmsg(m));
    sl_model_free(m);
    o.device = "tpu";
    EXPECT(sl_load_files(&f, 1, p, &o, &m) == SL_E_INVALID_ARG, "tpu: %s", sl_model_errmsg(m));
    sl_model_free(m);
    o.device = "cpu";
    sl_load_file small = {path, size - 1};
    EXPECT(sl_load_files(&small, 1, p, &o, &m) == SL_E_INVALID_ARG, "outside: %s", sl_model_errmsg(m));
    sl_model_free(m);
    p->devices[1].ops[0].file = -1;
    EXPECT(sl_load_files(&f, 1, p, &o, &m) == SL_E_INVALID_ARG, "file -1: %s", sl_model_errmsg(m));
    sl_model_free(m);
    tp_free(p);
    free(data);
}

/* Truncated while slots of several small chunks are being read (rows read without gaps): the
 * short read fails the load, with the other parts of its slot and other slots still in flight,
 * and the failed model holds nothing. */
static void test_changed_packed(void)
{
    const uint64_t rows = 128, stride = 8192, size = rows * stride;
    unsigned char *data = malloc(size);
    fill_random(data, size, 12);
    char path[600];
    snprintf(path, sizeof path, "%s/trunc_rows.bin", dir);
    sl_plan *p = tp_new(1, SL_DTYPE_BF16, 1);
    int64_t i = tp_param(p, 0, "w", rows, 32);
    tp_copy(p, 0, i, SL_DTYPE_BF16, 0, 0, stride, 0, 32, rows, 32);
    sl_load_file f = {path, size};
    for (int e = 0; e < 2; e++) {
        tu_write_file(path, data, size);
        trunc_ctx t = {path, 0};
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.io = SL_IO_BUFFERED;
        o.read_gap = SL_READ_GAP_NONE;
        o.request_bytes = 64 << 10;
        o.staging_bytes = 256 << 10;
        o.progress = truncate_on_progress;
        o.progress_user = &t;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
        if (!skip) {
            EXPECT(st == SL_E_CHANGED && strstr(sl_model_errmsg(m), "short read at offset"),
                   "packed short read (%s): %s %s", engines[e], sl_status_str(st), sl_model_errmsg(m));
            EXPECT(sl_model_device_count(m) == 0, "no devices after failure");
        }
        sl_model_free(m);
    }
    unlink(path);
    tp_free(p);
    free(data);
}

/* A CUDA call failing in the middle of a load (the stand-in's fault injection): the load returns
 * the error naming the call, and the failed model holds no device and no GPU memory even before
 * sl_model_free, so an engine can retry or fall back with all of its memory. */
static void test_cuda_fault(const sl_load_file *f, const sl_plan *p)
{
    typedef unsigned long (*fail_fn)(const char *, unsigned long);
    typedef int (*info_fn)(size_t *, size_t *);
    typedef int (*setdev_fn)(int);
    void *lib = dlopen(SL_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    fail_fn inject = NULL;
    info_fn info = NULL;
    setdev_fn setdev = NULL;
    fake_sym(lib, "fake_cuda_fail", &inject, sizeof inject);
    fake_sym(lib, "cudaMemGetInfo", &info, sizeof info);
    fake_sym(lib, "cudaSetDevice", &setdev, sizeof setdev);
    EXPECT(inject && info && setdev, "stand-in not loadable: %s", dlerror());
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "2", 1);
    static const char *const calls[] = {"cudaMemcpyAsync", "cudaEventSynchronize", "cudaMemcpy2DAsync"};
    /* w1's rows are f32 in the file: 2-D copies only when the plan keeps f32 */
    const size_t n_calls = p->dtype == SL_DTYPE_F32 ? 3 : 2;
    for (size_t k = 0; inject && info && setdev && k < n_calls; k++) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.device = "cuda";
        o.request_bytes = 4096;
        o.staging_bytes = 64 << 10;
        sl_model *m = NULL;
        int skip = 0;
        inject(calls[k], 2);
        sl_status st = run_load(f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(inject(NULL, 0) == 1, "fault in %s: not injected", calls[k]);
        EXPECT(st == SL_E_DEVICE && strstr(sl_model_errmsg(m), calls[k]) &&
                   strstr(sl_model_errmsg(m), "cuda device "),
               "fault in %s: %s %s", calls[k], sl_status_str(st), sl_model_errmsg(m));
        EXPECT(sl_model_device_count(m) == 0 && sl_model_param_ptr(m, 0, 0) == NULL,
               "fault in %s: the failed model still has devices", calls[k]);
        for (int gpu = 0; gpu < 2; gpu++) {
            size_t fr = 0, total = 1;
            EXPECT(setdev(gpu) == 0 && info(&fr, &total) == 0 && fr == total,
                   "fault in %s: GPU %d still has %zu bytes allocated", calls[k], gpu, total - fr);
        }
        sl_model_free(m);
    }
    unsetenv("FAKE_CUDA_GPUS");
    if (lib)
        dlclose(lib);
}

/* The TP layout (tp_layout_open) with a CUDA call failing. */
static void test_tp_layout_faults(sl_dtype plan_dt)
{
    tp_layout t;
    tp_layout_open(&t, plan_dt);
    test_cuda_fault(&t.f, t.p);
    tp_layout_close(&t);
}

/* ---- O_DIRECT refused: the file goes on buffered ------------------------------------------- */

/* --io direct where the filesystem refuses it, at open or on reads already in flight (refused from
 * the first read, or after some succeeded): the load succeeds, equal to the oracle, reports io
 * "buffered" and read each byte once. Four 4 MiB runs of device 0 alone (read straight into its
 * memory), each followed by 256 KiB both devices hold (staged), all page-aligned. Read refusals
 * need the pread engine (io_uring's reads bypass pread). */
static void test_direct_refused(void)
{
    const uint64_t big = 4 << 20, small = 256 << 10, seg = big + small, size = 4 * seg;
    char path[600];
    unsigned char *data = tu_random_file("refused.bin", size, 23, path, sizeof path);
    sl_plan *p = tu_runs_plan(4, big, small);
    const sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    /* open refused; every read refused (the reads in flight through the old descriptor too: at
     * least two refusals); reads refused after three went through */
    const struct {
        ei_mode mode;
        int reads_ok, min_refusals;
    } cases[3] = {{EI_OPEN, 0, 1}, {EI_READ, 0, 2}, {EI_READ, 3, 1}};
    for (int e = 0; e < 2; e++) {
        for (int k = 0; k < 3; k++) {
            if (cases[k].mode == EI_READ && e == 1)
                continue;
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.io = SL_IO_DIRECT;
            o.request_bytes = 1 << 20;
            o.staging_bytes = 4 << 20;
            sl_model *m = NULL;
            int skip = 0;
            ei_set(cases[k].mode, cases[k].reads_ok);
            sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
            const int refused = ei_refusals();
            ei_set(EI_OFF, 0);
            if (skip) {
                sl_model_free(m);
                continue;
            }
            sl_load_stats s = {0};
            sl_model_stats(m, &s);
            EXPECT(st == SL_OK, "refused %d (%s): %s", k, engines[e], sl_model_errmsg(m));
            EXPECT(st != SL_OK || !compare_model(m, p, fd), "refused %d (%s): data differ", k,
                   engines[e]);
            EXPECT(refused >= cases[k].min_refusals, "refused %d (%s): %d refusals", k,
                   engines[e], refused);
            EXPECT(st != SL_OK || (!strcmp(s.io, "buffered") && s.bytes_read == size),
                   "refused %d (%s): io %s, bytes_read %llu of %llu", k, engines[e], s.io,
                   (unsigned long long)s.bytes_read, (unsigned long long)size);
            sl_model_free(m);
        }
    }
    tp_free(p);
    free(data);
    unlink(path);
}

int main(void)
{
    tu_load_begin("load_faults");
    /* first: a loaded CUDA runtime stays for the process, so the "none" case comes before
     * test_tp_layout_faults loads the stand-in; which also checks that a failed load is retried */
    test_changed();
    test_changed_packed();
    test_direct_refused();
    test_tp_layout_faults(SL_DTYPE_BF16);
    test_tp_layout_faults(SL_DTYPE_F32);
    return tu_load_end();
}
