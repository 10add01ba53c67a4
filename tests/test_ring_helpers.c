/* test_ring_helpers.c - the cuda conversion ring on hosts of other sizes than this one: this
 * executable's sysconf() stands in front of libc's (the library is linked in statically: its
 * calls resolve here) and answers _SC_NPROCESSORS_ONLN as told. A bf16 -> f32 load onto the cuda
 * stand-in, whole (one run, through ring pieces) and column-split (rows gathered into pieces), on
 * 1, 2, 4 and 16 CPUs: the ring is the plain one (a sixteenth of the budget, 4 MiB) up to 2 CPUs
 * and grows on 4 and more (sl_rd_ring_for_helpers: pieces the helper threads share), seen in the
 * staging peak, but not where the GPU converts (opts.cuda_convert: the host converts nothing);
 * the bytes equal the one-thread oracle's each way. */
#include "load_testutil.h"

#include "load/read_step.h"

#include <dlfcn.h>

static long g_cpus;   /* what sysconf(_SC_NPROCESSORS_ONLN) answers; 0: the host's */

long sysconf(int name)
{
    if (name == _SC_NPROCESSORS_ONLN && g_cpus)
        return g_cpus;
    long (*real)(int) = NULL;
    void *sym = dlsym(RTLD_NEXT, "sysconf");
    memcpy(&real, &sym, sizeof real);   /* ISO C: no cast from an object pointer to a function */
    return real ? real(name) : -1;
}

/* The helper threads a converting load starts on a host of cpus CPUs (read_scatter.c). */
static unsigned helpers_for(long cpus)
{
    return cpus > 8 ? 7 : cpus > 1 ? (unsigned)cpus - 1 : 0;
}

static void test_ring_by_cpus(void)
{
    const uint64_t rows = 5120, cols = 8192, mib = 1 << 20;   /* 80 MiB: every slot busy */
    char path[600];
    unsigned char *data = malloc(rows * cols * 2);
    fill_floats(data, SL_DTYPE_BF16, rows * cols, 7);
    snprintf(path, sizeof path, "%s/bf16.bin", dir);
    tu_write_file(path, data, rows * cols * 2);
    const sl_load_file f = {path, rows * cols * 2};
    unsigned char *fd[1] = {data};
    sl_plan *p = tp_new(2, SL_DTYPE_F32, 1);
    int64_t w = tp_param(p, 0, "whole", rows, cols);
    tp_copy(p, 0, w, SL_DTYPE_BF16, 0, 0, 0, 0, 0, 1, rows * cols);
    int64_t c = tp_param(p, 1, "columns", rows, cols / 2);
    tp_copy(p, 1, c, SL_DTYPE_BF16, 0, cols / 2 * 2, cols * 2, 0, cols / 2, rows, cols / 2);
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "2", 1);
    /* the last run converts on the GPU (opts.cuda_convert): the host converts nothing, and the
     * ring, which then only gathers unconverted rows, does not grow */
    const long cpus[] = {1, 2, 4, 16, 16};
    const size_t n_runs = sizeof cpus / sizeof cpus[0];
    for (size_t k = 0; k < n_runs; k++) {
        g_cpus = cpus[k];
        const int on_gpu = k == n_runs - 1;
        const uint64_t ring = on_gpu ? sl_rd_ring_budget(64 * mib)
                                     : sl_rd_ring_for_helpers(64 * mib, 4, helpers_for(cpus[k]));
        EXPECT((cpus[k] < 4 || on_gpu) == (ring == 4 * mib), "%ld CPUs: a ring of %llu bytes",
               cpus[k], (unsigned long long)ring);
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.device = "cuda";
        o.cuda_convert = on_gpu;
        o.threads = 8;
        o.io = SL_IO_BUFFERED;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(st == SL_OK, "%ld CPUs: %s", cpus[k], sl_model_errmsg(m));
        const char *routes = st == SL_OK ? sl_model_device_routes(m, 0) : NULL;
        EXPECT(!on_gpu || (routes && strstr(routes, "converted on the GPU: ")),
               "%ld CPUs, on the GPU: device 0 %s", cpus[k], routes ? routes : "(null)");
        EXPECT(st != SL_OK || !compare_model(m, p, fd), "%ld CPUs: contents", cpus[k]);
        sl_load_stats s;
        if (st == SL_OK && sl_model_stats(m, &s) == SL_OK) {
            /* slots of (64 MiB - ring) / 8 each (o.threads), every one busy at once */
            const uint64_t req = (64 * mib - ring) / 8, slots = (64 * mib - ring) / (req + 8192);
            EXPECT(s.staging_peak == slots * (req + 8192) + ring, "%ld CPUs: staging peak %llu, "
                   "want %llu slots of %llu KiB and a %llu KiB ring", cpus[k],
                   (unsigned long long)s.staging_peak, (unsigned long long)slots,
                   (unsigned long long)(req >> 10), (unsigned long long)(ring >> 10));
        }
        sl_model_free(m);
    }
    g_cpus = 0;
    unsetenv("FAKE_CUDA_GPUS");
    tp_free(p);
    free(data);
    unlink(path);
}

int main(void)
{
    tu_load_begin("ring_helpers");
    test_ring_by_cpus();
    return tu_load_end();
}
