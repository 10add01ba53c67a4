/* test_load.c - the loading executor on hand-built plans over files written here: strided copies
 * crossing tiny requests, conversions, padding, read-once accounting, both engines and both I/O
 * modes, faults (file changed, missing, bad plan) and dummy weights. Every load is compared with an
 * oracle that applies the plan's operations one by one on host memory. */
#include "load_testutil.h"

#include "load/convert.h"

#include <dlfcn.h>
#include <math.h>
#include <sys/stat.h>

static const char *engines[2] = {"pread", "uring"};
static int uring_missing, direct_ok;
static char dir[512];

/* ---- oracle ----------------------------------------------------------------------------------- */

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

/* ---- test 1: TP layout with conversions, padding, tiny requests ------------------------------ */

static void fill_random(unsigned char *b, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(rand() >> 7);
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

/* The same plan through the cuda backend on the host-memory stand-in (2 fake GPUs, so device d
 * is on GPU d % 2 and --gpus reverses that): the bytes, the device pointers and GPU ordinals. */
static void test_tp_layout_cuda(const sl_load_file *f, const sl_plan *p, unsigned char *const *fd)
{
    const int32_t reversed[2] = {1, 0};
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "2", 1);
    for (int g = 0; g < 2; g++) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.device = "cuda";
        o.request_bytes = 4096;
        o.staging_bytes = 64 << 10;
        o.gpus = g ? reversed : NULL;
        o.n_gpus = g ? 2 : 0;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(st == SL_OK, "cuda load: %s", sl_model_errmsg(m));
        if (st == SL_OK) {
            EXPECT(!compare_model(m, p, fd), "cuda (stand-in) contents, gpus %d", g);
            for (int32_t d = 0; d < 2; d++) {
                EXPECT(sl_model_device_gpu(m, d) == (g ? reversed[d] : d), "device %d on GPU %d", d,
                       sl_model_device_gpu(m, d));
                EXPECT(sl_model_param_host_ptr(m, d, 0) == NULL, "cuda has no host pointer");
            }
            EXPECT(sl_model_device_gpu(m, 2) == -1 && sl_model_param_ptr(m, 2, 0) == NULL &&
                       sl_model_param_ptr(m, 0, 99) == NULL, "out of range");
        }
        sl_model_free(m);
    }
    unsetenv("FAKE_CUDA_GPUS");
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

/* cuda devices take every byte through staging: without --request, the budget is cut into about
 * --threads slots (requests of 4 to 16 MiB); an explicit request is kept. Converting on the way
 * takes a sixteenth of the budget (4 MiB of 64) for the ring of conversion pieces, and the slots
 * share the rest. Seen through the staging peak of an 80 MiB contiguous parameter: every slot is
 * busy at once, and each holds its chunk plus 8 KiB of alignment. */
static void test_request_sizing(void)
{
    const uint64_t size = (uint64_t)80 << 20, mib = 1 << 20;   /* more chunks than slots */
    unsigned char *data = calloc(1, size);                       /* contents do not matter here */
    char path[600];
    snprintf(path, sizeof path, "%s/big.bin", dir);
    tu_write_file(path, data, size);
    sl_plan *plans[2] = {tp_new(1, SL_DTYPE_BF16, 1), tp_new(1, SL_DTYPE_F32, 1)};
    for (int i = 0; i < 2; i++) {
        int64_t w = tp_param(plans[i], 0, "w", 5120, 8192);
        tp_copy(plans[i], 0, w, SL_DTYPE_BF16, 0, 0, 0, 0, 0, 1, 5120 * 8192);
    }
    sl_load_file f = {path, size};
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "1", 1);
    setenv("FAKE_CUDA_MEM", "1073741824", 1);
    const struct {
        int to_f32;
        int32_t threads;
        uint64_t request, want_request;
        unsigned want_slots;
        uint64_t want_ring;
    } cases[] = {{0, 8, 0, 8 * mib, 7, 0},           {0, 4, 0, 16 * mib, 3, 0},
                 {0, 16, 0, 4 * mib, 15, 0},         {0, 64, 0, 4 * mib, 15, 0},
                 {0, 8, 16 * mib, 16 * mib, 3, 0},   {1, 8, 0, 60 * mib / 8, 7, 4 * mib},
                 {1, 8, 16 * mib, 16 * mib, 3, 4 * mib}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.device = "cuda";
        o.threads = cases[k].threads;
        if (cases[k].request) /* else sl_load_opts_init's default, which must mean automatic */
            o.request_bytes = cases[k].request;
        o.io = SL_IO_BUFFERED;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, plans[cases[k].to_f32], &o, engines[0], &m, &skip);
        EXPECT(st == SL_OK, "sizing case %zu: %s", k, sl_model_errmsg(m));
        sl_load_stats s;
        if (st == SL_OK && sl_model_stats(m, &s) == SL_OK) {
            const uint64_t want = cases[k].want_slots * (cases[k].want_request + 8192) + cases[k].want_ring;
            EXPECT(s.staging_peak == want, "case %zu (threads %d, request %llu, to f32 %d): staging "
                   "peak %llu, want %u slots of %llu KiB and a %llu KiB ring (%llu)", k,
                   cases[k].threads, (unsigned long long)cases[k].request, cases[k].to_f32,
                   (unsigned long long)s.staging_peak, cases[k].want_slots,
                   (unsigned long long)(cases[k].want_request >> 10),
                   (unsigned long long)(cases[k].want_ring >> 10), (unsigned long long)want);
            EXPECT(s.staging_peak <= 64 * mib, "case %zu: staging peak over the 64 MiB budget", k);
        }
        sl_model_free(m);
    }
    unsetenv("FAKE_CUDA_GPUS");
    unsetenv("FAKE_CUDA_MEM");
    tp_free(plans[0]);
    tp_free(plans[1]);
    free(data);
    unlink(path);
}

/* opts.dest: the caller's memory for each device, on cpu (malloc'd, dirty) and on the cuda
 * stand-in (cudaMalloc'd by the test through the same library): the bytes land there, padding
 * zeroed, parameter pointers are dest + offset, and the model leaves the memory to the caller. */
typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

static void test_dest(const sl_load_file *f, const sl_plan *p, unsigned char *const *fd)
{
    typedef int (*setdev_fn)(int);
    void *lib = dlopen(SL_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    malloc_fn cmalloc = NULL;
    free_fn cfree = NULL;
    setdev_fn csetdev = NULL;
    fake_sym(lib, "cudaMalloc", &cmalloc, sizeof cmalloc);
    fake_sym(lib, "cudaFree", &cfree, sizeof cfree);
    fake_sym(lib, "cudaSetDevice", &csetdev, sizeof csetdev);
    EXPECT(cmalloc && cfree && csetdev, "stand-in not loadable: %s", dlerror());
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "2", 1);
    for (int cuda = 0; cuda < 2 && cmalloc && cfree && csetdev; cuda++) {
        void *dest[2] = {NULL, NULL};
        for (int32_t d = 0; d < 2; d++) {
            const size_t n = (size_t)p->devices[d].bytes;
            if (cuda) {
                EXPECT(csetdev(d) == 0 && cmalloc(&dest[d], n) == 0, "stand-in cudaMalloc");
            } else {
                dest[d] = malloc(n);
                memset(dest[d], 0xCD, n); /* padding must be zeroed by the load */
            }
        }
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.device = cuda ? "cuda" : "cpu";
        o.dest = dest;
        o.n_dest = 2;
        o.staging_bytes = 64 << 10;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(st == SL_OK, "dest load (%s): %s", o.device, sl_model_errmsg(m));
        for (int32_t d = 0; st == SL_OK && d < 2; d++) {
            EXPECT(sl_model_device_allocated(m, d) == p->devices[d].bytes, "dest: bytes held");
            for (int64_t i = 0; i < p->devices[d].n_params; i++)
                EXPECT(sl_model_param_ptr(m, d, i) == (unsigned char *)dest[d] + p->devices[d].params[i].offset,
                       "dest (%s): device %d param %lld not at dest + offset", o.device, d, (long long)i);
        }
        EXPECT(st != SL_OK || !compare_model(m, p, fd), "dest (%s): contents", o.device);
        sl_model_free(m);
        for (int32_t d = 0; d < 2; d++) { /* still the caller's, still holding the bytes */
            unsigned char *want = oracle(p, d, fd);
            EXPECT(st != SL_OK || !memcmp(dest[d], want, (size_t)p->devices[d].bytes),
                   "dest (%s): device %d bytes after sl_model_free", o.device, d);
            free(want);
            if (cuda)
                EXPECT(cfree(dest[d]) == 0, "dest: the model freed the caller's device memory");
            else
                free(dest[d]);
        }
    }
    unsetenv("FAKE_CUDA_GPUS");
    if (lib)
        dlclose(lib);
}

/* Local device k of m holds exactly mesh device d's bytes of p. */
static void expect_device(const sl_model *m, int32_t k, const sl_plan *p, int32_t d,
                          unsigned char *const *fd, const char *what)
{
    unsigned char *want = oracle(p, d, fd);
    unsigned char *got = malloc((size_t)p->devices[d].bytes + 1);
    EXPECT(sl_model_device_index(m, k) == d, "%s: local %d is mesh %d, want %d", what, k,
           sl_model_device_index(m, k), d);
    for (int64_t i = 0; i < p->devices[d].n_params; i++) {
        const sl_plan_param_t *pp = &p->devices[d].params[i];
        EXPECT(sl_model_read_param(m, k, i, 0, got, pp->nbytes) == SL_OK &&
                   !memcmp(got, want + pp->offset, pp->nbytes),
               "%s: mesh device %d param %s", what, d, pp->name);
    }
    free(got);
    free(want);
}

/* opts.devices: a process loads some mesh devices only, in the order given, and the engine reads
 * only what they need; bad lists are refused before anything is allocated. */
static void test_devices(const sl_load_file *f, const sl_plan *p, unsigned char *const *fd)
{
    static const int32_t one[] = {1}, both[] = {1, 0}, dup[] = {0, 0}, out[] = {2};
    sl_load_opts o;
    sl_load_opts_init(&o);
    o.staging_bytes = 64 << 10;
    int skip = 0;
    sl_model *m = NULL;
    o.devices = one;
    o.n_devices = 1;
    sl_status st = run_load(f, 1, p, &o, engines[0], &m, &skip);
    EXPECT(st == SL_OK && sl_model_device_count(m) == 1, "devices {1}: %s", sl_model_errmsg(m));
    if (st == SL_OK) {
        expect_device(m, 0, p, 1, fd, "devices {1}");
        EXPECT(sl_model_device_allocated(m, 0) == p->devices[1].bytes, "devices {1}: bytes held");
    }
    sl_model_free(m);
    o.devices = both;
    o.n_devices = 2;
    st = run_load(f, 1, p, &o, engines[0], &m, &skip);
    EXPECT(st == SL_OK && sl_model_device_count(m) == 2, "devices {1,0}: %s", sl_model_errmsg(m));
    if (st == SL_OK) {
        expect_device(m, 0, p, 1, fd, "devices {1,0}");
        expect_device(m, 1, p, 0, fd, "devices {1,0}");
    }
    sl_model_free(m);
    const struct { const int32_t *list; int32_t n; const char *msg; } bad[] = {
        {dup, 2, "mesh device 0 chosen twice"},
        {out, 1, "mesh device 2 out of range [0, 2)"},
        {one, 0, "0 devices chosen of a 2-device mesh"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        o.devices = bad[b].list;
        o.n_devices = bad[b].n;
        st = run_load(f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(st == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), bad[b].msg) &&
                   sl_model_device_count(m) == 0,
               "devices refusal %zu: %s", b, sl_model_errmsg(m));
        sl_model_free(m);
    }
}

/* opts.param_dest: every parameter in its own block of the caller's (host memory, or the cuda
 * stand-in's device memory), written in place (padding zeroed), still the caller's after
 * sl_model_free; a missing block or dest given too is refused before any byte is read. */
static void param_dest_case(const sl_load_file *f, const sl_plan *p, unsigned char *const *fd,
                            malloc_fn cmalloc, free_fn cfree)
{
    const char *dev = cmalloc ? "cuda" : "cpu";
    void *blocks[2][TP_MAX] = {{0}};
    void *const *table[2] = {blocks[0], blocks[1]};
    for (int32_t d = 0; d < 2; d++)
        for (int64_t i = 0; i < p->devices[d].n_params; i++) {
            const size_t n = (size_t)p->devices[d].params[i].nbytes + 1;
            if (cmalloc)
                EXPECT(cmalloc(&blocks[d][i], n) == 0, "stand-in cudaMalloc");
            else
                blocks[d][i] = malloc(n);
            memset(blocks[d][i], 0xCD, n - 1); /* the stand-in's memory is host memory */
        }
    sl_load_opts o;
    sl_load_opts_init(&o);
    o.device = dev;
    o.staging_bytes = 64 << 10;
    o.param_dest = table;
    o.n_param_dest = 2;
    int skip = 0;
    sl_model *m = NULL;
    sl_status st = run_load(f, 1, p, &o, engines[0], &m, &skip);
    EXPECT(st == SL_OK, "param_dest load (%s): %s", dev, sl_model_errmsg(m));
    for (int32_t d = 0; st == SL_OK && d < 2; d++) {
        expect_device(m, d, p, d, fd, dev);
        for (int64_t i = 0; i < p->devices[d].n_params; i++)
            EXPECT(sl_model_param_ptr(m, d, i) == blocks[d][i], "param_dest (%s): device %d param "
                   "%lld not in its block", dev, d, (long long)i);
    }
    sl_model_free(m);
    for (int32_t d = 0; st == SL_OK && d < 2; d++) {
        unsigned char *want = oracle(p, d, fd);
        for (int64_t i = 0; i < p->devices[d].n_params; i++)
            EXPECT(!memcmp(blocks[d][i], want + p->devices[d].params[i].offset,
                           (size_t)p->devices[d].params[i].nbytes),
                   "param_dest (%s): device %d param %lld after sl_model_free", dev, d, (long long)i);
        free(want);
    }
    void *keep = blocks[1][0];
    blocks[1][0] = NULL;
    st = run_load(f, 1, p, &o, engines[0], &m, &skip);
    EXPECT(st == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), p->devices[1].params[0].name) &&
               sl_model_device_count(m) == 0, "param_dest hole (%s): %s", dev, sl_model_errmsg(m));
    sl_model_free(m);
    blocks[1][0] = keep;
    void *whole[2] = {keep, NULL};
    o.dest = whole;
    o.n_dest = 1;
    st = run_load(f, 1, p, &o, engines[0], &m, &skip);
    EXPECT(st == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), "both"), "param_dest + dest (%s): %s",
           dev, sl_model_errmsg(m));
    sl_model_free(m);
    for (int32_t d = 0; d < 2; d++)
        for (int64_t i = 0; i < p->devices[d].n_params; i++) {
            if (cfree)
                EXPECT(cfree(blocks[d][i]) == 0, "param_dest: the model freed a caller's block");
            else
                free(blocks[d][i]);
        }
}

static void test_param_dest(const sl_load_file *f, const sl_plan *p, unsigned char *const *fd)
{
    param_dest_case(f, p, fd, NULL, NULL);
    void *lib = dlopen(SL_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    malloc_fn cmalloc = NULL;
    free_fn cfree = NULL;
    fake_sym(lib, "cudaMalloc", &cmalloc, sizeof cmalloc);
    fake_sym(lib, "cudaFree", &cfree, sizeof cfree);
    EXPECT(cmalloc && cfree, "stand-in not loadable: %s", dlerror());
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "1", 1);
    if (cmalloc && cfree)
        param_dest_case(f, p, fd, cmalloc, cfree);
    unsetenv("FAKE_CUDA_GPUS");
    if (lib)
        dlclose(lib);
}

static void test_tp_layout(sl_dtype plan_dt)
{
    /* file: 16 junk | W1 F32 [64,96] | 2 junk | W2 BF16 [40,200] (misaligned) | E F16 [21,64] */
    const uint64_t o1 = 16, o2 = o1 + 64 * 96 * 4 + 2, o3 = o2 + 40 * 200 * 2, size = o3 + 21 * 64 * 2;
    unsigned char *data = calloc(1, size);
    fill_random(data, 16, 1);
    fill_floats(data + o1, SL_DTYPE_F32, 64 * 96, 2);
    fill_floats(data + o2, SL_DTYPE_BF16, 40 * 200, 3);
    fill_floats(data + o3, SL_DTYPE_F16, 21 * 64, 4);
    char path[600];
    snprintf(path, sizeof path, "%s/tp.bin", dir);
    tu_write_file(path, data, size);
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
    sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
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
    test_tp_layout_cuda(&f, p, fd);
    test_cuda_fault(&f, p);
    test_dest(&f, p, fd);
    test_devices(&f, p, fd);
    test_param_dest(&f, p, fd);
    tp_free(p);
    free(data);
    unlink(path);
}

/* Large conversions are shared with helper threads (sl_convert_rows on the engine's pool): an f32
 * tensor of 1.2 M elements, whole on device 0 (one run, split by elements) and column-split on
 * device 1 (1200 rows of 512: on cuda, 1024 rows fill a 1 MiB ring piece, split by rows), into
 * bf16 and f16, on cpu and on the cuda stand-in, equal to the one-thread oracle byte for byte. */
static void test_convert_threads(void)
{
    const uint64_t rows = 1200, cols = 1024, size = rows * cols * 4;
    unsigned char *data = malloc(size);
    fill_floats(data, SL_DTYPE_F32, rows * cols, 11);
    char path[600];
    snprintf(path, sizeof path, "%s/big.bin", dir);
    tu_write_file(path, data, size);
    unsigned char *fd[1] = {data};
    sl_load_file f = {path, size};
    const sl_dtype dts[2] = {SL_DTYPE_BF16, SL_DTYPE_F16};
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "2", 1);
    for (int t = 0; t < 2; t++) {
        sl_plan *p = tp_new(2, dts[t], 1);
        int64_t w = tp_param(p, 0, "whole", rows, cols);
        tp_copy(p, 0, w, SL_DTYPE_F32, 0, 0, 0, 0, 0, 1, rows * cols);
        int64_t c = tp_param(p, 1, "columns", rows, cols / 2);
        tp_copy(p, 1, c, SL_DTYPE_F32, 0, cols / 2 * 4, cols * 4, 0, cols / 2, rows, cols / 2);
        for (int cuda = 0; cuda < 2; cuda++) {
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.device = cuda ? "cuda" : "cpu";
            sl_model *m = NULL;
            int skip = 0;
            sl_status st = run_load(&f, 1, p, &o, engines[0], &m, &skip);
            EXPECT(st == SL_OK, "f32 -> %s on %s: %s", sl_dtype_name(dts[t]), o.device, sl_model_errmsg(m));
            EXPECT(st != SL_OK || !compare_model(m, p, fd), "f32 -> %s on %s: contents",
                   sl_dtype_name(dts[t]), o.device);
            sl_model_free(m);
        }
        tp_free(p);
    }
    unsetenv("FAKE_CUDA_GPUS");
    free(data);
    unlink(path);
}

/* ---- test 2: replicated bytes are read once ------------------------------------------------- */

static void test_read_once(void)
{
    const uint64_t size = 200 << 10;
    unsigned char *data = malloc(size);
    fill_random(data, size, 9);
    char path[600];
    snprintf(path, sizeof path, "%s/rep.bin", dir);
    tu_write_file(path, data, size);
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
    uint16_t v[4];
    sl_mt19937_seed(&g, 1234);
    sl_dummy_values(&g, SL_DTYPE_BF16, v, 4);
    EXPECT(v[0] == 0xBA26 && v[1] == 0x3A2A && v[2] == 0xBA38 && v[3] == 0xBA1A,
           "bf16 dummy %04x %04x %04x %04x", v[0], v[1], v[2], v[3]);
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
    float lo = -1e-3f;
    unsigned char tmp[4];
    sl_convert(tmp, p->dtype, &lo, SL_DTYPE_F32, 1);
    sl_convert(&lo, SL_DTYPE_F32, tmp, p->dtype, 1);
    for (uint64_t e = 0; e < pd->bytes / es; e++) {
        float f = 0;
        sl_convert(&f, SL_DTYPE_F32, buf + e * es, p->dtype, 1);
        if (is_pad[e]) {
            EXPECT(f == 0 && !signbit(f), "padding element %llu is %g", (unsigned long long)e, f);
            continue;
        }
        zeros += f == 0;
        n++;
        /* [T(-1e-3), T(1e-3)): the bounds are rounded to T first (bf16: -0x1.06p-10) */
        EXPECT(f >= lo && f < 1.0005e-3f, "dummy value %g out of range", f);
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
    tu_tmpdir(dir, sizeof dir, "load");
    char probe[600];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    tu_write_file(probe, "x", 1);
    direct_ok = tu_direct_ok(probe);
    unlink(probe);
    if (!direct_ok)
        fprintf(stderr, "O_DIRECT refused in %s: direct-mode cases skipped\n", dir);
    test_mt19937();
    /* first: a loaded CUDA runtime stays for the process, so the "none" case comes before
     * test_tp_layout loads the stand-in; which also checks that a failed load is retried */
    test_changed();
    test_tp_layout(SL_DTYPE_BF16);
    test_tp_layout(SL_DTYPE_F32);
    test_convert_threads();
    test_request_sizing();
    test_read_once();
    test_random_plans();
    test_direct_runs();
    test_dummy();
    rmdir(dir);
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    return expect_failures ? 1 : 0;
}
