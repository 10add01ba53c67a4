/* test_load_device.c - loads onto devices and into the caller's memory, on hand-built plans over
 * files written here: the cuda backend on the host-memory stand-in (device pointers, GPU mapping,
 * request and staging sizing, threaded conversions), opts.dest and opts.param_dest (cpu and cuda),
 * and opts.devices (a process loading some mesh devices only). Every load is compared with the
 * oracle of load_testutil.h. */
#include "load_testutil.h"

#include "load/convert.h"
#include "load/read_step.h"

#include <dlfcn.h>
#include <sys/mman.h>

/* ---- the TP layout on the cuda stand-in and in the caller's memory --------------------------- */

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

/* cuda devices take every byte through staging: without --request, the budget is cut into about
 * --threads slots (requests of 4 to 16 MiB); an explicit request is kept. Converting on the way
 * takes a sixteenth of the budget (4 MiB of 64) for the ring of conversion pieces, more with
 * enough helper threads (sl_rd_ring_for_helpers), and the slots
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
    /* The ring follows the helper threads the load starts (up to 7, CPUs - 1 on smaller hosts;
     * test_read_step checks sl_rd_ring_for_helpers' sizes), for f32 pieces. */
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const unsigned helpers = cpus > 8 ? 7 : cpus > 1 ? (unsigned)cpus - 1 : 0;
    const uint64_t ring = sl_rd_ring_for_helpers(64 * mib, 4, helpers);
    EXPECT(ring >= 4 * mib, "ring of %llu bytes", (unsigned long long)ring);
    const uint64_t rest = 64 * mib - ring, auto_req = rest / 8;
    const struct {
        int to_f32;
        int32_t threads;
        uint64_t request, want_request;
        unsigned want_slots;
        uint64_t want_ring;
    } cases[] = {{0, 8, 0, 8 * mib, 7, 0},           {0, 4, 0, 16 * mib, 3, 0},
                 {0, 16, 0, 4 * mib, 15, 0},         {0, 64, 0, 4 * mib, 15, 0},
                 {0, 8, 16 * mib, 16 * mib, 3, 0},
                 {1, 8, 0, auto_req, (unsigned)(rest / (auto_req + 8192)), ring},
                 {1, 8, 16 * mib, 16 * mib, (unsigned)(rest / (16 * mib + 8192)), ring}};
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
    o.dest = NULL;
    o.n_dest = 0;
    /* blocks that share memory: one block under two parameters of a device, then a block inside
     * another device's; refused by name before any byte is read */
    for (int c = 0; c < 2; c++) {
        const int32_t d2 = c ? 1 : 0;
        const int64_t i2 = c ? 0 : 1;
        void *own = blocks[d2][i2];
        blocks[d2][i2] = (unsigned char *)blocks[0][0] + (c ? 1 : 0);
        memset(blocks[0][0], 0xCD, (size_t)p->devices[0].params[0].nbytes);
        st = run_load(f, 1, p, &o, engines[0], &m, &skip);
        const char *msg = sl_model_errmsg(m);
        EXPECT(st == SL_E_INVALID_ARG && strstr(msg, "overlap") &&
                   strstr(msg, p->devices[0].params[0].name) && strstr(msg, p->devices[d2].params[i2].name) &&
                   ((const unsigned char *)blocks[0][0])[0] == 0xCD && sl_model_device_count(m) == 0,
               "param_dest overlap %d (%s): %s", c, dev, msg);
        sl_model_free(m);
        blocks[d2][i2] = own;
    }
    /* host memory the process may not write (a tensor over a read-only mapping): refused by
     * name, where the first copy into it killed the process */
    const size_t ro_len = (size_t)p->devices[1].params[0].nbytes;
    void *ro = cmalloc ? MAP_FAILED : mmap(NULL, ro_len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ro != MAP_FAILED) {
        void *own = blocks[1][0];
        blocks[1][0] = ro;
        st = run_load(f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(st == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), "may not write") &&
                   strstr(sl_model_errmsg(m), p->devices[1].params[0].name) && sl_model_device_count(m) == 0,
               "param_dest read-only (%s): %s", dev, sl_model_errmsg(m));
        sl_model_free(m);
        blocks[1][0] = own;
        munmap(ro, ro_len);
    }
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

/* Large exclusive runs go straight into the caller's blocks (opts.param_dest) as into the
 * library's own memory: two 3 MiB bf16 tensors, each a parameter in its own block, both engines
 * and both I/O modes; a third parameter, a strided slice, is staged either way. Before blocks had
 * host addresses every byte was staged, and the slots were sized for the runs. */
static void test_param_dest_direct(void)
{
    const uint64_t mib = 1 << 20, big = 3 * mib, rows = 64, row = 8192, size = 2 * big + rows * row;
    char path[600];
    unsigned char *data = tu_random_file("direct.bin", size, 21, path, sizeof path);
    sl_plan *p = tp_new(1, SL_DTYPE_BF16, 1);
    for (int k = 0; k < 2; k++) {
        const int64_t i = tp_param(p, 0, k ? "b" : "a", 1, big / 2);
        tp_copy(p, 0, i, SL_DTYPE_BF16, 0, (uint64_t)k * big, 0, 0, 0, 1, big / 2);
    }
    const int64_t c = tp_param(p, 0, "c", rows, row / 4);   /* the first half of each row */
    tp_copy(p, 0, c, SL_DTYPE_BF16, 0, 2 * big, row, 0, row / 4, rows, row / 4);
    const sl_load_file f = {path, size};
    unsigned char *fd[1] = {data};
    const sl_io_mode modes[2] = {SL_IO_BUFFERED, SL_IO_DIRECT};
    for (int e = 0; e < 2; e++) {
        for (int mi = 0; mi < 2; mi++) {
            void *blocks[3];
            for (int k = 0; k < 3; k++) {
                blocks[k] = malloc((size_t)p->devices[0].params[k].nbytes);
                memset(blocks[k], 0xCD, (size_t)p->devices[0].params[k].nbytes);
            }
            void *const *table[1] = {blocks};
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.io = modes[mi];
            o.param_dest = table;
            o.n_param_dest = 1;
            sl_model *m = NULL;
            int skip = 0;
            sl_status st = run_load(&f, 1, p, &o, engines[e], &m, &skip);
            if (!skip) {
                sl_load_stats s = {0};
                sl_model_stats(m, &s);
                EXPECT(st == SL_OK && !compare_model(m, p, fd), "direct param_dest %s io %d: %s",
                       engines[e], mi, sl_model_errmsg(m));
                /* buffered: the two runs read into their blocks, so the slots are sized for the
                 * slice's rows (a slot takes a chunk read straight in too, without its bytes);
                 * O_DIRECT files are never read straight in (alignment): runs are staged */
                EXPECT(mi ? s.staging_peak >= big : s.staging_peak < big, "%s io %d: staging peak "
                       "%llu", engines[e], mi, (unsigned long long)s.staging_peak);
            }
            sl_model_free(m);
            for (int k = 0; k < 3; k++)
                free(blocks[k]);
        }
    }
    tp_free(p);
    free(data);
    unlink(path);
}

/* The TP layout (tp_layout_open) through the cuda stand-in, into dest and param_dest, and for
 * some mesh devices only. */
static void test_tp_layout_devices(sl_dtype plan_dt)
{
    tp_layout t;
    tp_layout_open(&t, plan_dt);
    unsigned char *fd[1] = {t.data};
    test_tp_layout_cuda(&t.f, t.p, fd);
    test_dest(&t.f, t.p, fd);
    test_devices(&t.f, t.p, fd);
    test_param_dest(&t.f, t.p, fd);
    tp_layout_close(&t);
}

/* A file of n random floats of dt (the tests' values) named name in the test directory: its bytes
 * (the caller frees them) and, in *f, the file for the loads. */
static unsigned char *float_file(const char *name, sl_dtype dt, uint64_t n, unsigned seed, char *path,
                                 size_t path_len, sl_load_file *f)
{
    const uint64_t size = n * (sl_dtype_bits(dt) / 8);
    unsigned char *data = malloc(size);
    fill_floats(data, dt, n, seed);
    snprintf(path, path_len, "%s/%s", dir, name);
    tu_write_file(path, data, size);
    *f = (sl_load_file){path, size};
    return data;
}

/* Large conversions are shared with helper threads (sl_convert_rows on the engine's pool): a
 * tensor of 1.2 M elements, whole on device 0 (one run, split by elements) and column-split on
 * device 1 (1200 rows of 512, split by rows: on cuda, rows gathered into a ring piece), f32 into
 * bf16 and f16 and bf16 into f32 (with enough helpers the ring's pieces are sized so that they
 * share those too, sl_rd_ring_for_helpers), on cpu and on the cuda stand-in, equal to the one-thread oracle byte for
 * byte. */
static void test_convert_threads(void)
{
    const uint64_t rows = 1200, cols = 1024;
    const struct {
        sl_dtype src, dst;
    } pairs[] = {{SL_DTYPE_F32, SL_DTYPE_BF16}, {SL_DTYPE_F32, SL_DTYPE_F16}, {SL_DTYPE_BF16, SL_DTYPE_F32}};
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "2", 1);
    for (size_t t = 0; t < sizeof pairs / sizeof pairs[0]; t++) {
        const sl_dtype sdt = pairs[t].src;
        const uint64_t es = sl_dtype_bits(sdt) / 8;
        char path[600];
        sl_load_file f;
        unsigned char *data = float_file("big.bin", sdt, rows * cols, 11, path, sizeof path, &f);
        unsigned char *fd[1] = {data};
        sl_plan *p = tp_new(2, pairs[t].dst, 1);
        int64_t w = tp_param(p, 0, "whole", rows, cols);
        tp_copy(p, 0, w, sdt, 0, 0, 0, 0, 0, 1, rows * cols);
        int64_t c = tp_param(p, 1, "columns", rows, cols / 2);
        tp_copy(p, 1, c, sdt, 0, cols / 2 * es, cols * es, 0, cols / 2, rows, cols / 2);
        for (int cuda = 0; cuda < 2; cuda++) {
            sl_load_opts o;
            sl_load_opts_init(&o);
            o.device = cuda ? "cuda" : "cpu";
            sl_model *m = NULL;
            int skip = 0;
            sl_status st = run_load(&f, 1, p, &o, engines[0], &m, &skip);
            EXPECT(st == SL_OK, "%s -> %s on %s: %s", sl_dtype_name(sdt), sl_dtype_name(pairs[t].dst),
                   o.device, sl_model_errmsg(m));
            EXPECT(st != SL_OK || !compare_model(m, p, fd), "%s -> %s on %s: contents",
                   sl_dtype_name(sdt), sl_dtype_name(pairs[t].dst), o.device);
            sl_model_free(m);
        }
        tp_free(p);
        free(data);
        unlink(path);
    }
    unsetenv("FAKE_CUDA_GPUS");
}

/* Conversions on the GPU (opts.cuda_convert): a bf16 tensor into f32 on the stand-in, whole and
 * column-split (rows gathered unconverted into ring pieces), through the kernels; and into a
 * caller's block at an address that is not 4-byte aligned, which the kernels' word stores cannot
 * take: the host converts that one. The same bytes as the one-thread oracle each way. */
static void test_convert_on_gpu(void)
{
    const uint64_t rows = 300, cols = 512;
    char path[600];
    sl_load_file f;
    unsigned char *data = float_file("bf16.bin", SL_DTYPE_BF16, rows * cols, 5, path, sizeof path, &f);
    unsigned char *fd[1] = {data};
    sl_cuda_set_runtime(SL_FAKE_CUDART);
    setenv("FAKE_CUDA_GPUS", "1", 1);
    void *lib = dlopen(SL_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    malloc_fn cmalloc = NULL;
    free_fn cfree = NULL;
    fake_sym(lib, "cudaMalloc", &cmalloc, sizeof cmalloc);
    fake_sym(lib, "cudaFree", &cfree, sizeof cfree);
    sl_plan *p = tp_new(2, SL_DTYPE_F32, 1);
    int64_t w = tp_param(p, 0, "whole", rows, cols);
    tp_copy(p, 0, w, SL_DTYPE_BF16, 0, 0, 0, 0, 0, 1, rows * cols);
    int64_t c = tp_param(p, 1, "columns", rows, cols / 2);
    tp_copy(p, 1, c, SL_DTYPE_BF16, 0, cols / 2 * 2, cols * 2, 0, cols / 2, rows, cols / 2);
    for (int odd = 0; odd < 2 && cmalloc && cfree; odd++) {
        void *mem[2] = {NULL, NULL}, *blocks[2][1], *const *table[2] = {blocks[0], blocks[1]};
        for (int d = 0; d < 2; d++) {
            EXPECT(cmalloc(&mem[d], (size_t)p->devices[d].params[0].nbytes + 4) == 0, "stand-in cudaMalloc");
            blocks[d][0] = (unsigned char *)mem[d] + (odd ? 2 : 0);
        }
        sl_load_opts o;
        sl_load_opts_init(&o);
        o.device = "cuda";
        o.cuda_convert = 1;
        o.param_dest = table;
        o.n_param_dest = 2;
        sl_model *m = NULL;
        int skip = 0;
        sl_status st = run_load(&f, 1, p, &o, engines[0], &m, &skip);
        EXPECT(st == SL_OK, "bf16 -> f32 on the GPU (odd %d): %s", odd, sl_model_errmsg(m));
        EXPECT(st != SL_OK || !compare_model(m, p, fd), "bf16 -> f32 on the GPU (odd %d): contents", odd);
        for (int32_t d = 0; st == SL_OK && d < 2; d++) {
            const char *r = sl_model_device_routes(m, d);
            const char *want = odd ? "nothing converted on the GPU" : "converted on the GPU: ";
            EXPECT(r && !strncmp(r, want, strlen(want)), "device %d (odd %d): %s", d, odd, r ? r : "(null)");
        }
        sl_model_free(m);
        for (int d = 0; d < 2; d++)
            EXPECT(cfree(mem[d]) == 0, "stand-in cudaFree");
    }
    tp_free(p);
    unsetenv("FAKE_CUDA_GPUS");
    if (lib)
        dlclose(lib);
    free(data);
    unlink(path);
}

int main(void)
{
    tu_load_begin("load_device");
    test_tp_layout_devices(SL_DTYPE_BF16);
    test_tp_layout_devices(SL_DTYPE_F32);
    test_convert_threads();
    test_convert_on_gpu();
    test_request_sizing();
    test_param_dest_direct();
    return tu_load_end();
}
