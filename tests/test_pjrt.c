/* test_pjrt.c - the pjrt backend through the public C API, on the stand-in plugin
 * tests/fake_pjrt*.c (delayed copies that read host memory late, strict handle and size checks,
 * fault injection): checksums equal the cpu backend's for tp, spmd, f32 targets, small staging
 * (parameters assembled and streamed) and dummy weights; each parameter is a PJRT buffer of its
 * dtype and shape whose sizes add up to the plan's; a client the caller owns is used and left
 * alive; every call the load makes, failed once, fails the load with one line naming it and
 * leaves nothing allocated; old, 0.56 and short tables are refused, missing optional parts
 * (transfer manager, memory statistics, dense layouts) fall back; partial reads come straight
 * from the buffer (CopyRawToHost) where the plugin has it and the layout is dense, whole
 * parameters otherwise; the staging block is DMA-mapped once per client where DmaMap works, plain
 * where it is missing, UNIMPLEMENTED or fails, and always unmapped; the stand-in is shown to catch
 * a host buffer reused before its event. */
#include "shardload.h"

#include "device/dev_pjrt_abi.h"
#include "expect.h"
#include "scratch.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long long (*fk_get)(const char *key);
static void (*fk_set)(const char *key, long long v);
static const char *(*fk_injected)(void);
static long long (*fk_count)(const char *name);
static void (*fk_fail)(const char *name, long long nth);
static const PJRT_Api *fk_api;
static char g_dir[256];
static sl_checkpoint *g_ck;

/* ---- set-up --------------------------------------------------------------------------------- */

static void *fk_sym(void *lib, const char *name)
{
    void *sym = dlsym(lib, name);
    if (!sym) {
        fprintf(stderr, "test_pjrt: the stand-in lacks %s\n", name);
        exit(1);
    }
    return sym;
}

/* The same library the backend dlopens (one copy per process), and its controls. */
static void fk_open(void)
{
    void *lib = dlopen(SL_FAKE_PJRT, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "test_pjrt: %s\n", dlerror());
        exit(1);
    }
    void *get = fk_sym(lib, "fake_pjrt_get"), *set = fk_sym(lib, "fake_pjrt_set");
    void *inj = fk_sym(lib, "fake_pjrt_injected"), *api = fk_sym(lib, "GetPjrtApi");
    void *count = fk_sym(lib, "fake_pjrt_count"), *fail = fk_sym(lib, "fake_pjrt_fail");
    const PJRT_Api *(*get_api)(void) = NULL;
    memcpy(&fk_get, &get, sizeof get);
    memcpy(&fk_set, &set, sizeof set);
    memcpy(&fk_injected, &inj, sizeof inj);
    memcpy(&get_api, &api, sizeof api);
    memcpy(&fk_count, &count, sizeof count);
    memcpy(&fk_fail, &fail, sizeof fail);
    fk_api = get_api();
}

/* A 2-layer Llama whose vocabulary (1001) no TP degree divides, so the splits pad. */
static void make_checkpoint(void)
{
    char cfg[300], err[512];
    tu_tmpdir(g_dir, sizeof g_dir, "test_pjrt");
    snprintf(cfg, sizeof cfg, "%s/tiny.json", g_dir);
    FILE *f = fopen(cfg, "w");
    fputs("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":256,"
          "\"intermediate_size\":512,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
          "\"num_hidden_layers\":2,\"vocab_size\":1001,\"tie_word_embeddings\":false,"
          "\"torch_dtype\":\"bfloat16\",\"rms_norm_eps\":1e-05,\"head_dim\":32}", f);
    fclose(f);
    char out[300];
    snprintf(out, sizeof out, "%s/ck", g_dir);
    if (sl_synth(cfg, NULL, out, -1, 7, 600000, err, sizeof err) != SL_OK ||
        sl_checkpoint_open(out, &g_ck) != SL_OK) {
        fprintf(stderr, "test_pjrt: synth: %s\n", err);
        exit(1);
    }
}

/* ---- loads ---------------------------------------------------------------------------------- */

typedef struct run {
    const char *what;
    int32_t tp, pp;
    sl_layout layout;
    int32_t dtype;            /* -1: the config's (bf16) */
    uint64_t staging;         /* 0: default */
    int dummy;
    uint64_t assembly;        /* opts.pjrt_assembly; 0: default */
} run;

static sl_plan *plan_of(const run *r)
{
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.tp = r->tp;
    po.pp = r->pp ? r->pp : 1;
    po.layout = r->layout;
    po.dtype = r->dtype;
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/tiny.json", g_dir);
    po.config_path = cfg;
    sl_plan *p = NULL;
    if (sl_plan_build(r->dummy ? NULL : g_ck, &po, &p) != SL_OK) {
        fprintf(stderr, "test_pjrt: plan %s: %s\n", r->what, sl_plan_errmsg(p));
        exit(1);
    }
    return p;
}

static sl_load_opts opts_of(const run *r, const char *device)
{
    sl_load_opts lo;
    sl_load_opts_init(&lo);
    lo.device = device;
    lo.dummy = r->dummy;
    lo.staging_bytes = r->staging;
    lo.pjrt_plugin = SL_FAKE_PJRT;
    lo.pjrt_assembly = r->assembly;
    return lo;
}

/* XXH3 of every parameter of every device, in order; NULL on failure (reported). */
static uint64_t *checksums(const sl_plan *p, const sl_model *m, const char *what)
{
    size_t n = 0;
    for (int32_t d = 0; d < sl_plan_device_count(p); d++)
        n += (size_t)sl_plan_param_count(p, d);
    uint64_t *v = calloc(n + 1, sizeof *v), *at = v;
    for (int32_t d = 0; d < sl_plan_device_count(p); d++)
        for (int64_t i = 0; i < sl_plan_param_count(p, d); i++, at++)
            if (sl_model_param_xxh3(m, d, i, at) != SL_OK) {
                EXPECT(0, "%s: xxh3 of device %d param %lld: %s", what, d, (long long)i,
                       sl_model_errmsg(m));
                free(v);
                return NULL;
            }
    return v;
}

static size_t param_total(const sl_plan *p)
{
    size_t n = 0;
    for (int32_t d = 0; d < sl_plan_device_count(p); d++)
        n += (size_t)sl_plan_param_count(p, d);
    return n;
}

/* Nothing of the stand-in's is left: buffers, events, errors, managers, clients. */
static void expect_clean(const char *what)
{
    static const char *const keys[] = {"live_buffer", "live_event", "live_error", "live_tm",
                                       "live_client", "live_dma", "violations"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        EXPECT(fk_get(keys[k]) == 0, "%s: %s = %lld", what, keys[k], fk_get(keys[k]));
}

static sl_status load(const run *r, const sl_plan *p, const sl_load_opts *lo, sl_model **m)
{
    return sl_load(r->dummy ? NULL : g_ck, p, lo, m);
}

/* sl_model_device_routes: pjrt's account of its ways, adding up to device 0's parameters and
 * bytes (a dummy fill reopens parameters to zero their padding: not counted twice); NULL for
 * cpu. */
static void expect_routes(const run *r, const sl_plan *p, const sl_model *mc, const sl_model *mp)
{
    EXPECT(!sl_model_device_routes(mc, 0), "%s: the cpu backend says something", r->what);
    const char *s = sl_model_device_routes(mp, 0);
    unsigned long long n[9] = {0};
    EXPECT(s && sscanf(s, "direct %llu (%llu B), assembled %llu (%llu B), streamed %llu (%llu B); "
                          "%llu uploads, %llu transfers", &n[0], &n[1], &n[2], &n[3], &n[4], &n[5],
                          &n[6], &n[7]) == 8, "%s: '%s'", r->what, s ? s : "(null)");
    EXPECT(n[0] + n[2] + n[4] == (unsigned long long)sl_plan_param_count(p, 0) &&
               n[1] + n[3] + n[5] == sl_plan_device_bytes(p, 0) && n[6] >= n[0] + n[2],
           "%s: '%s' for %lld parameters, %llu bytes", r->what, s ? s : "(null)",
           (long long)sl_plan_param_count(p, 0), (unsigned long long)sl_plan_device_bytes(p, 0));
}

/* Loads r on the cpu and the pjrt backends: the same checksums, each device's plan bytes
 * allocated, and the routes' account. */
static void check_run(const run *r)
{
    sl_plan *p = plan_of(r);
    sl_load_opts cpu = opts_of(r, "cpu"), pj = opts_of(r, "pjrt");
    sl_model *mc = NULL, *mp = NULL;
    EXPECT(load(r, p, &cpu, &mc) == SL_OK, "%s: cpu: %s", r->what, sl_model_errmsg(mc));
    const sl_status st = load(r, p, &pj, &mp);
    EXPECT(st == SL_OK, "%s: pjrt: %s", r->what, sl_model_errmsg(mp));
    uint64_t *a = checksums(p, mc, r->what), *b = st == SL_OK ? checksums(p, mp, r->what) : NULL;
    EXPECT(a && b && !memcmp(a, b, param_total(p) * sizeof *a), "%s: checksums differ from cpu",
           r->what);
    for (int32_t d = 0; st == SL_OK && d < sl_plan_device_count(p); d++)
        EXPECT(sl_model_device_allocated(mp, d) == sl_plan_device_bytes(p, d),
               "%s: device %d allocated", r->what, d);
    if (mc && st == SL_OK)
        expect_routes(r, p, mc, mp);
    free(a);
    free(b);
    sl_model_free(mc);
    sl_model_free(mp);
    sl_plan_free(p);
    expect_clean(r->what);
}

static void test_checksums(void)
{
    const run runs[] = {
        {"tp2", 2, 1, SL_LAYOUT_TP, -1, 0, 0},
        {"tp4 staging 64K", 4, 1, SL_LAYOUT_TP, -1, 64 << 10, 0},
        {"tp2 pp2", 2, 2, SL_LAYOUT_TP, -1, 0, 0},
        {"spmd4 f32", 4, 1, SL_LAYOUT_SPMD, SL_DTYPE_F32, 0, 0},
        {"tp2 f32 staging 64K", 2, 1, SL_LAYOUT_TP, SL_DTYPE_F32, 64 << 10, 0},
        {"dummy tp2 pp2", 2, 2, SL_LAYOUT_TP, -1, 0, 1},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        check_run(&runs[i]);
    /* the three ways in: strided whole parameters, assembly blocks and streamed chunks */
    fk_set("reset", 0);
    check_run(&(run){"tp1 staging 64K", 1, 1, SL_LAYOUT_TP, -1, 64 << 10, 0});
    EXPECT(fk_get("transfers") > 0, "tp1 staging 64K: nothing streamed");
    fk_set("reset", 0);
    check_run(&(run){"tp2", 2, 1, SL_LAYOUT_TP, -1, 0, 0});
    EXPECT(fk_get("bfhb_strided") > 0, "tp2: no whole parameter from rows with a pitch");
    EXPECT(fk_get("transfers") == 0, "tp2: streamed with a budget that holds every parameter");
    /* Streamed parameters split by columns (o_proj, down_proj rows of 128 and 256 bytes) come in
     * rows gathered into ring pieces: 320 transfers here, 2722 with a TransferData per row. */
    fk_set("reset", 0);
    check_run(&(run){"tp4 staging 64K", 4, 1, SL_LAYOUT_TP, -1, 64 << 10, 0});
    EXPECT(fk_get("transfers") > 0 && fk_get("transfers") < 1000,
           "tp4 staging 64K: %lld transfers: narrow rows not gathered", fk_get("transfers"));
    /* pjrt_assembly: with the default budget every parameter fits an assembly block at tp2; at
     * the 64 KiB least, the 256 KiB embeddings and MLP weights are streamed instead */
    fk_set("reset", 0);
    check_run(&(run){"tp2 assembly 64K", 2, 1, SL_LAYOUT_TP, -1, 0, 0, 64 << 10});
    EXPECT(fk_get("transfers") > 0, "tp2 assembly 64K: nothing streamed");
}

/* ---- the buffers ---------------------------------------------------------------------------- */

static int64_t buffer_dims(const PJRT_Buffer *b, const int64_t **dims, int *type, size_t *bytes)
{
    PJRT_Buffer_Dimensions_Args da = PJ_ARGS(PJRT_Buffer_Dimensions_Args, num_dims);
    PJRT_Buffer_ElementType_Args ta = PJ_ARGS(PJRT_Buffer_ElementType_Args, type);
    PJRT_Buffer_OnDeviceSizeInBytes_Args sa =
        PJ_ARGS(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes);
    da.buffer = ta.buffer = sa.buffer = (PJRT_Buffer *)(uintptr_t)b;
    if (fk_api->Buffer_Dimensions(&da) || fk_api->Buffer_ElementType(&ta) ||
        fk_api->Buffer_OnDeviceSizeInBytes(&sa))
        return -1;
    *dims = da.dims;
    *type = ta.type;
    *bytes = sa.on_device_size_in_bytes;
    return (int64_t)da.num_dims;
}

static void check_buffers(const sl_plan *p, const sl_model *m, int want_type)
{
    for (int32_t d = 0; d < sl_plan_device_count(p); d++) {
        uint64_t sum = 0;
        for (int64_t i = 0; i < sl_plan_param_count(p, d); i++) {
            sl_param_info pi;
            sl_plan_param(p, d, i, &pi);
            const PJRT_Buffer *b = sl_model_param_pjrt_buffer(m, d, i);
            const int64_t *dims = NULL;
            int type = -1;
            size_t bytes = 0;
            const int64_t nd = b ? buffer_dims(b, &dims, &type, &bytes) : -1;
            EXPECT(nd == (int64_t)pi.ndim && type == want_type && bytes == pi.nbytes,
                   "device %d '%s': %lld dims, type %d, %zu bytes", d, pi.name, (long long)nd,
                   type, bytes);
            for (int64_t k = 0; nd == (int64_t)pi.ndim && k < nd; k++)
                EXPECT(dims[k] == (int64_t)pi.shape[k], "'%s' dim %lld", pi.name, (long long)k);
            sum += bytes;
        }
        EXPECT(sum == sl_plan_device_bytes(p, d), "device %d: buffers hold %llu bytes", d,
               (unsigned long long)sum);
    }
}

static void test_buffers(void)
{
    const run r = {"buffers", 2, 1, SL_LAYOUT_TP, SL_DTYPE_F32, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts lo = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_OK, "load: %s", sl_model_errmsg(m));
    check_buffers(p, m, PJRT_Buffer_Type_F32);
    EXPECT(sl_model_pjrt_api(m, 0) == fk_api, "the model's api is the plugin's");
    EXPECT(sl_model_pjrt_client(m, 0) && sl_model_pjrt_client(m, 0) == sl_model_pjrt_client(m, 1),
           "one client for both devices");
    EXPECT(!sl_model_param_pjrt_buffer(m, 2, 0) && !sl_model_param_pjrt_buffer(m, 0, 1000) &&
               !sl_model_pjrt_client(m, -1) && !sl_model_param_ptr(m, 0, 0),
           "out of range, or no address: NULL");
    sl_model_free(m);
    /* other backends have no PJRT objects */
    sl_load_opts cpu = opts_of(&r, "cpu");
    EXPECT(sl_load(g_ck, p, &cpu, &m) == SL_OK, "cpu: %s", sl_model_errmsg(m));
    EXPECT(!sl_model_param_pjrt_buffer(m, 0, 0) && !sl_model_pjrt_client(m, 0) &&
               !sl_model_pjrt_api(m, 0), "cpu: no PJRT objects");
    sl_model_free(m);
    sl_plan_free(p);
    expect_clean("buffers");
}

static size_t client_devices(PJRT_Client *c)
{
    PJRT_Client_AddressableDevices_Args a = PJ_ARGS(PJRT_Client_AddressableDevices_Args, num_addressable_devices);
    a.client = c;
    return c && !fk_api->Client_AddressableDevices(&a) ? a.num_addressable_devices : 0;
}

/* A CPU client has the device count of the mesh that made it: a larger mesh loaded while it
 * lives gets a client of its own (its devices wrapped onto the first one's 2), a mesh it fits
 * shares it. */
static void test_second_mesh(void)
{
    const run r2 = {"mesh of 2", 2, 1, SL_LAYOUT_TP, -1, 0, 0}, r4 = {"mesh of 4", 4, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p2 = plan_of(&r2), *p4 = plan_of(&r4);
    sl_load_opts lo2 = opts_of(&r2, "pjrt"), lo4 = opts_of(&r4, "pjrt");
    sl_model *m2 = NULL, *m4 = NULL, *again = NULL;
    EXPECT(sl_load(g_ck, p2, &lo2, &m2) == SL_OK, "mesh of 2: %s", sl_model_errmsg(m2));
    EXPECT(sl_load(g_ck, p4, &lo4, &m4) == SL_OK, "mesh of 4: %s", sl_model_errmsg(m4));
    EXPECT(sl_load(g_ck, p2, &lo2, &again) == SL_OK, "mesh of 2 again: %s", sl_model_errmsg(again));
    PJRT_Client *c2 = sl_model_pjrt_client(m2, 0), *c4 = sl_model_pjrt_client(m4, 0);
    EXPECT(c2 && c4 && c2 != c4 && client_devices(c2) == 2 && client_devices(c4) == 4,
           "clients of 2 and 4 devices: %zu and %zu", client_devices(c2), client_devices(c4));
    EXPECT(sl_model_pjrt_client(again, 0) == c2 || sl_model_pjrt_client(again, 0) == c4,
           "a mesh that fits shares a client");
    sl_model_free(again);
    sl_model_free(m4);
    sl_model_free(m2);
    sl_plan_free(p2);
    sl_plan_free(p4);
    expect_clean("second mesh");
}

/* A CPU plugin that refuses the mesh's device count (here: takes at most 4) makes clients of its
 * default count (4): mesh devices 0-3 share one, 4-7 another, each on PJRT device d % 4 of it, so
 * no two mesh devices share a PJRT device, with 2 clients for a mesh of 8 (there was one per mesh
 * device: 8 full runtimes). The bytes are the cpu backend's. */
static void test_refused_count(void)
{
    const run r = {"refused count", 8, 1, SL_LAYOUT_TP, -1, 0, 0};
    fk_set("cpu_max", 4);
    fk_set("reset", 0);
    check_run(&r);
    EXPECT(fk_get("clients_made") == 2, "a mesh of 8 on clients of 4: %lld clients made",
           fk_get("clients_made"));
    sl_plan *p = plan_of(&r);
    sl_load_opts lo = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_OK, "load: %s", sl_model_errmsg(m));
    for (int32_t d = 0; m && d < 8; d++) {
        PJRT_Client *c = sl_model_pjrt_client(m, d);
        EXPECT(c && client_devices(c) == 4, "device %d: a client of %zu devices", d, client_devices(c));
        EXPECT(c == sl_model_pjrt_client(m, d / 4 * 4), "device %d: its group's client", d);
        EXPECT(d < 4 || c != sl_model_pjrt_client(m, 0), "device %d: not the first group's client", d);
    }
    sl_model_free(m);
    /* past 16 clients of 4 (a mesh of 65): refused at the first client, in one line */
    const run big = {"mesh of 65", 65, 1, SL_LAYOUT_SPMD, -1, 0, 0};
    sl_plan *pb = plan_of(&big);
    sl_load_opts lb = opts_of(&big, "pjrt");
    EXPECT(sl_load(g_ck, pb, &lb, &m) == SL_E_DEVICE &&
               strstr(sl_model_errmsg(m), "a mesh of 65 devices on the CPU plugin, which makes 4"),
           "a mesh of 65: %s", sl_model_errmsg(m));
    sl_model_free(m);
    sl_plan_free(pb);
    sl_plan_free(p);
    fk_set("cpu_max", 64);
    expect_clean("refused count");
}

/* A client the caller made: the buffers go there, and it outlives the model. */
static void test_given_client(void)
{
    PJRT_Plugin_Initialize_Args ia = PJ_ARGS(PJRT_Plugin_Initialize_Args, extension_start);
    EXPECT(!fk_api->Plugin_Initialize(&ia), "initialize");
    PJRT_Client_Create_Args ca = PJ_ARGS(PJRT_Client_Create_Args, kv_try_get_user_arg);
    EXPECT(!fk_api->Client_Create(&ca) && ca.client, "client");
    const run r = {"given client", 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts lo = opts_of(&r, "pjrt");
    lo.pjrt_plugin = NULL;
    lo.pjrt_api = fk_api;
    lo.pjrt_client = ca.client;
    sl_model *m = NULL;
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_OK, "load: %s", sl_model_errmsg(m));
    EXPECT(sl_model_pjrt_client(m, 1) == ca.client, "the buffers are in the given client");
    check_buffers(p, m, PJRT_Buffer_Type_BF16);
    sl_model_free(m);
    EXPECT(fk_get("live_client") == 1 && fk_get("live_buffer") == 0,
           "after the model: %lld clients, %lld buffers", fk_get("live_client"),
           fk_get("live_buffer"));
    PJRT_Client_Destroy_Args da = PJ_ARGS(PJRT_Client_Destroy_Args, client);
    da.client = ca.client;
    EXPECT(!fk_api->Client_Destroy(&da), "destroy");
    lo.pjrt_api = NULL;
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_E_INVALID_ARG && strstr(sl_model_errmsg(m), "pjrt_api"),
           "a client without its api: %s", sl_model_errmsg(m));
    sl_model_free(m);
    sl_plan_free(p);
    expect_clean("given client");
}

/* ---- faults --------------------------------------------------------------------------------- */

/* Calls whose failure the backend survives on purpose: a readiness poll (it then waits), the
 * memory statistics (reported as unknown), the layout query (no streaming, no raw reads) and the
 * DMA map of the staging block (plain memory then). */
static int tolerated(const char *call)
{
    return !strcmp(call, "Event_IsReady") || !strcmp(call, "Device_MemoryStats") ||
           !strcmp(call, "Buffer_GetMemoryLayout") || !strcmp(call, "Client_DmaMap");
}

/* Every entry point the stand-in can fail (the Error_* ones and the destroys cannot). */
static const char *const fallible[] = {
    "Client_Create", "Client_PlatformName", "Client_AddressableDevices", "Device_MemoryStats",
    "Client_BufferFromHostBuffer", "Event_IsReady", "Event_Await", "Device_DefaultMemory",
    "Client_CreateBuffersForAsyncHostToDevice", "AsyncHostToDeviceTransferManager_RetrieveBuffer",
    "Buffer_GetMemoryLayout", "AsyncHostToDeviceTransferManager_TransferData",
    "Buffer_ToHostBuffer", "Client_DmaMap", "Buffer_CopyRawToHost"};

/* A load, the read-back of every parameter and a partial read of each device's first one: the
 * first failure's status and message. */
static sl_status fault_run(const run *r, const sl_plan *p, const sl_load_opts *lo, char *msg,
                           size_t len)
{
    sl_model *m = NULL;
    unsigned char part[64];
    sl_status st = load(r, p, lo, &m);
    for (int32_t d = 0; st == SL_OK && d < sl_plan_device_count(p); d++) {
        for (int64_t i = 0; st == SL_OK && i < sl_plan_param_count(p, d); i++) {
            uint64_t x;
            st = sl_model_param_xxh3(m, d, i, &x);
        }
        sl_param_info pi;
        if (st == SL_OK && sl_plan_param(p, d, 0, &pi) == SL_OK && pi.nbytes > sizeof part)
            st = sl_model_read_param(m, d, 0, 1, part, sizeof part);
    }
    snprintf(msg, len, "%s", st == SL_OK ? "" : sl_model_errmsg(m));
    sl_model_free(m);
    return st;
}

/* After one injected failure: a failed load (or read-back) with one line naming the call and
 * the device, and nothing of the stand-in's left; 1 when it failed. */
static int expect_fault(const run *r, const char *how, sl_status st, const char *msg)
{
    const char *call = fk_injected();
    char want[96], what[160];
    snprintf(want, sizeof want, "PJRT_%s", call);
    snprintf(what, sizeof what, "%s, %s", r->what, how);
    EXPECT(fk_get("injected") == 1, "%s: %lld failures injected", what, fk_get("injected"));
    if (st == SL_OK) {
        EXPECT(tolerated(call), "%s: %s failed and the load succeeded", what, call);
    } else {
        EXPECT(!strchr(msg, '\n') && strstr(msg, "failed: fake_pjrt: injected failure of") &&
                   strstr(msg, want) && (!strncmp(msg, "pjrt device ", 12) ||
                                         !strncmp(msg, "device 'pjrt': ", 15)),
               "%s (%s): status %d, '%s'", what, call, st, msg);
    }
    expect_clean(what);
    return st != SL_OK;
}

/* Each entry point the load calls, failed at its first, second, middle and last call. */
static int faults_by_call(const run *r, const sl_plan *p, const sl_load_opts *lo)
{
    long long n[sizeof fallible / sizeof fallible[0]];
    char msg[1024], how[128];
    fk_set("reset", 0);
    EXPECT(fault_run(r, p, lo, msg, sizeof msg) == SL_OK, "%s: %s", r->what, msg);
    for (size_t c = 0; c < sizeof fallible / sizeof fallible[0]; c++)
        n[c] = fk_count(fallible[c]);
    int failed = 0;
    for (size_t c = 0; c < sizeof fallible / sizeof fallible[0]; c++) {
        const long long at[4] = {1, 2, n[c] / 2 + 1, n[c]};
        for (int k = 0; k < 4; k++) {
            if (at[k] > n[c] || (k && at[k] <= at[k - 1]))
                continue;
            fk_set("reset", 0);
            fk_fail(fallible[c], at[k]);
            const sl_status st = fault_run(r, p, lo, msg, sizeof msg);
            snprintf(how, sizeof how, "%s call %lld of %lld", fallible[c], at[k], n[c]);
            failed += expect_fault(r, how, st, msg);
        }
    }
    return failed;
}

/* Every call in turn, until the load makes fewer calls than the one to fail. */
static int faults_every_call(const run *r, const sl_plan *p, const sl_load_opts *lo)
{
    char msg[1024], how[64];
    int failed = 0;
    for (long long k = 1; k < 100000 && expect_failures < 20; k++) {
        fk_set("reset", 0);
        fk_set("fail_at", k);
        const sl_status st = fault_run(r, p, lo, msg, sizeof msg);
        if (fk_get("injected") == 0) {
            EXPECT(st == SL_OK, "%s: nothing injected at call %lld, yet: %s", r->what, k, msg);
            break;
        }
        snprintf(how, sizeof how, "call %lld", k);
        failed += expect_fault(r, how, st, msg);
    }
    return failed;
}

static void check_faults(const run *r, int every)
{
    sl_plan *p = plan_of(r);
    sl_load_opts lo = opts_of(r, "pjrt");
    fk_set("delay_us", 20);
    const int failed = every ? faults_every_call(r, p, &lo) : faults_by_call(r, p, &lo);
    EXPECT(failed >= 8, "%s: only %d failures", r->what, failed);
    printf("test_pjrt: %s: %d failed loads, each one line, nothing left behind\n", r->what, failed);
    fk_set("delay_us", 200);
    fk_set("reset", 0);
    sl_plan_free(p);
}

static void test_faults(void)
{
    check_faults(&(run){"faults tp2", 2, 1, SL_LAYOUT_TP, -1, 0, 0}, 1);
    check_faults(&(run){"faults dummy tp2", 2, 1, SL_LAYOUT_TP, -1, 0, 1}, 0);
    check_faults(&(run){"faults tp2 64K", 2, 1, SL_LAYOUT_TP, -1, 64 << 10, 0}, 0);
    check_faults(&(run){"faults tp1 f32 64K", 1, 1, SL_LAYOUT_TP, SL_DTYPE_F32, 64 << 10, 0}, 0);
}

/* ---- versions and optional parts ------------------------------------------------------------ */

static void expect_refused(const char *key, long long v, const char *want)
{
    const run r = {key, 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts lo = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    fk_set(key, v);
    const sl_status st = sl_load(g_ck, p, &lo, &m);
    EXPECT(st == SL_E_UNSUPPORTED && strstr(sl_model_errmsg(m), want), "%s %lld: %d '%s'", key, v,
           st, sl_model_errmsg(m));
    fk_set("restore", 0);
    sl_model_free(m);
    sl_plan_free(p);
    expect_clean(key);
}

/* A load that falls back (no streaming): same bytes, no TransferData. */
static void expect_fallback(const char *key, long long v)
{
    fk_set(key, v);
    fk_set("reset", 0);
    check_run(&(run){key, 1, 1, SL_LAYOUT_TP, -1, 64 << 10, 0});
    EXPECT(fk_get("transfers") == 0, "%s %lld: %lld chunks streamed", key, v, fk_get("transfers"));
    fk_set("restore", 0);
    fk_set("tiled", 0);
}

static void test_versions(void)
{
    expect_refused("minor", 56, "PJRT API 0.56 (whose table has slot 69 moved)");
    expect_refused("minor", 40, "PJRT API 0.40; shardload needs 0.57 or later");
    expect_refused("major", 1, "PJRT API 1.104");
    expect_refused("struct_size", 600, "600 bytes, shorter than the 608");
    expect_refused("null_slot", 22, "lacks PJRT_Client_BufferFromHostBuffer");
    expect_fallback("minor", 61);                    /* before the transfer manager's slots */
    expect_fallback("struct_size", PJ_SLOT_OFFSET(101)); /* a table that ends before them */
    expect_fallback("null_slot", 104);
    expect_fallback("tiled", 1);                     /* TPU-like layouts: raw chunks are wrong */
    /* the plugin kinds' create options: CUDA's, and none (TPU) */
    for (long long kind = 1; kind <= 2; kind++) {
        fk_set("kind", kind);
        check_run(&(run){"kind", 2, 1, SL_LAYOUT_TP, -1, 0, 0});
        EXPECT(fk_get("client_opts") == kind + 1, "kind %lld: client made with option set %lld",
               kind, fk_get("client_opts"));
        fk_set("kind", 0);
    }
}

static void test_stats(void)
{
    const run r = {"stats", 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts lo = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    uint64_t before = 0, after = 0;
    fk_set("stats", 1);
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_OK, "stats: %s", sl_model_errmsg(m));
    for (int32_t d = 0; d < 2; d++) {
        EXPECT(sl_model_device_mem(m, d, &before, &after) == SL_OK, "stats: %s", sl_model_errmsg(m));
        EXPECT(before - after == sl_plan_device_bytes(p, d), "device %d: %llu - %llu", d,
               (unsigned long long)before, (unsigned long long)after);
    }
    sl_model_free(m);
    fk_set("stats", 0);
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_OK, "no stats: %s", sl_model_errmsg(m));
    EXPECT(sl_model_device_mem(m, 0, &before, &after) == SL_E_UNSUPPORTED, "no stats: n/a");
    sl_model_free(m);
    sl_plan_free(p);
    expect_clean("stats");
}

static void test_errors(void)
{
    const run r = {"errors", 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts lo = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    const struct { const char *plugin; sl_status st; const char *want; } cases[] = {
        {"/nonexistent/xla_cpu_pjrt.so", SL_E_UNSUPPORTED, "cannot load plugin /nonexistent/"},
        {SL_FAKE_CUDART, SL_E_UNSUPPORTED, "is not a PJRT plugin (it exports no GetPjrtApi)"},
        {NULL, SL_E_INVALID_ARG, "needs a PJRT plugin"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lo.pjrt_plugin = cases[i].plugin;
        const sl_status st = sl_load(g_ck, p, &lo, &m);
        EXPECT(st == cases[i].st && strstr(sl_model_errmsg(m), cases[i].want) &&
                   !strchr(sl_model_errmsg(m), '\n'), "%s: %d '%s'", cases[i].want, st,
               sl_model_errmsg(m));
        sl_model_free(m);
    }
    lo.pjrt_plugin = SL_FAKE_PJRT;
    void *dest[2] = {malloc(sl_plan_device_bytes(p, 0)), NULL};
    lo.dest = dest;
    lo.n_dest = 1;
    EXPECT(sl_load(g_ck, p, &lo, &m) == SL_E_UNSUPPORTED && strstr(sl_model_errmsg(m), "dest"),
           "dest: '%s'", sl_model_errmsg(m));
    sl_model_free(m);
    free(dest[0]);
    sl_plan_free(p);
    expect_clean("errors");
}

/* The stand-in itself: a host buffer changed before its done event is caught. */
static void test_stand_in_is_strict(void)
{
    PJRT_Client_Create_Args ca = PJ_ARGS(PJRT_Client_Create_Args, kv_try_get_user_arg);
    EXPECT(!fk_api->Client_Create(&ca), "client");
    PJRT_Client_AddressableDevices_Args ad =
        PJ_ARGS(PJRT_Client_AddressableDevices_Args, num_addressable_devices);
    ad.client = ca.client;
    EXPECT(!fk_api->Client_AddressableDevices(&ad), "devices");
    float host[64] = {0};
    const int64_t dims[1] = {64};
    PJRT_Client_BufferFromHostBuffer_Args ba = PJ_ARGS(PJRT_Client_BufferFromHostBuffer_Args, buffer);
    ba.client = ca.client;
    ba.data = host;
    ba.type = PJRT_Buffer_Type_F32;
    ba.dims = dims;
    ba.num_dims = 1;
    ba.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
    ba.device = ad.addressable_devices[0];
    fk_set("reset", 0);
    fk_set("delay_us", 200000); /* the reuse below lands before the copy even on a busy machine */
    fprintf(stderr, "test_pjrt: the stand-in's next two VIOLATION lines are expected (a reused "
            "host buffer, a short struct_size)\n");
    EXPECT(!fk_api->Client_BufferFromHostBuffer(&ba), "buffer");
    host[3] = 1.0f; /* reused before done_with_host_buffer */
    PJRT_Event_Await_Args ea = PJ_ARGS(PJRT_Event_Await_Args, event);
    ea.event = ba.done_with_host_buffer;
    EXPECT(!fk_api->Event_Await(&ea), "await");
    fk_set("delay_us", 200);
    EXPECT(fk_get("violations") == 1, "the stand-in missed a reused host buffer");
    PJRT_Event_Destroy_Args ed = PJ_ARGS(PJRT_Event_Destroy_Args, event);
    ed.event = ba.done_with_host_buffer;
    fk_api->Event_Destroy(&ed);
    PJRT_Buffer_Destroy_Args bd = PJ_ARGS(PJRT_Buffer_Destroy_Args, buffer);
    bd.buffer = ba.buffer;
    fk_api->Buffer_Destroy(&bd);
    PJRT_Client_Destroy_Args cd = PJ_ARGS(PJRT_Client_Destroy_Args, client);
    cd.client = ca.client;
    fk_api->Client_Destroy(&cd);
    /* and an args struct that is too small */
    ca.struct_size = 64;
    PJRT_Error *e = fk_api->Client_Create(&ca);
    EXPECT(e && fk_get("violations") == 2, "a short struct_size passed");
    PJRT_Error_Destroy_Args xd = PJ_ARGS(PJRT_Error_Destroy_Args, error);
    xd.error = e;
    if (e)
        fk_api->Error_Destroy(&xd);
    fk_set("reset", 0);
    expect_clean("stand-in");
}

/* ---- partial read-back: Buffer_CopyRawToHost, and its fallbacks ------------------------------ */

/* Reads a middle third of every parameter of every device of m and compares it with the cpu
 * model's bytes; the number of partial reads made. */
static long long read_thirds(const sl_plan *p, const sl_model *m, const sl_model *mc,
                             const char *what)
{
    long long n = 0;
    for (int32_t d = 0; d < sl_plan_device_count(p); d++)
        for (int64_t i = 0; i < sl_plan_param_count(p, d); i++) {
            sl_param_info pi;
            sl_plan_param(p, d, i, &pi);
            const uint64_t off = pi.nbytes / 3, len = pi.nbytes / 3 + 1;
            if (pi.nbytes < 3)
                continue;
            unsigned char *buf = malloc((size_t)len);
            const unsigned char *want = sl_model_param_host_ptr(mc, d, i);
            const sl_status st = sl_model_read_param(m, d, i, off, buf, len);
            EXPECT(st == SL_OK && want && !memcmp(buf, want + off, (size_t)len),
                   "%s: device %d '%s' bytes [%llu, +%llu): %s", what, d, pi.name,
                   (unsigned long long)off, (unsigned long long)len,
                   st == SL_OK ? "differ" : sl_model_errmsg(m));
            free(buf);
            n++;
        }
    return n;
}

/* Partial reads of a pjrt model after the stand-in is set with key = v: the same bytes as cpu,
 * with want_raw CopyRawToHost calls (-1: one per partial read) and the rest by whole parameters. */
static void check_partial(const char *key, long long v, long long want_raw)
{
    const run r = {key, 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts cpu = opts_of(&r, "cpu"), pj = opts_of(&r, "pjrt");
    sl_model *mc = NULL, *mp = NULL;
    if (key)
        fk_set(key, v);
    EXPECT(sl_load(g_ck, p, &cpu, &mc) == SL_OK && sl_load(g_ck, p, &pj, &mp) == SL_OK,
           "%s: load: %s", key ? key : "raw", sl_model_errmsg(mp));
    fk_set("reset", 0);
    const long long n = read_thirds(p, mp, mc, key ? key : "raw");
    const long long raw = fk_count("Buffer_CopyRawToHost"), whole = fk_count("Buffer_ToHostBuffer");
    EXPECT(raw == (want_raw < 0 ? n : want_raw) && (want_raw < 0 ? whole == 0 : whole >= n - raw),
           "%s %lld: %lld partial reads, %lld CopyRawToHost, %lld ToHostBuffer", key ? key : "raw",
           v, n, raw, whole);
    sl_model_free(mc);
    sl_model_free(mp);
    sl_plan_free(p);
    fk_set("restore", 0);
    fk_set("raw", 1);
    fk_set("tiled", 0);
    expect_clean(key ? key : "raw");
}

/* A failed CopyRawToHost (the call, or its event) fails the read with one line naming the device,
 * the parameter and the call. */
static void check_partial_fault(const char *call)
{
    const run r = {"raw fault", 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts pj = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    unsigned char buf[16];
    sl_param_info pi;
    EXPECT(sl_load(g_ck, p, &pj, &m) == SL_OK, "raw fault: %s", sl_model_errmsg(m));
    sl_plan_param(p, 1, 0, &pi);
    fk_set("reset", 0);
    fk_fail(call, 1);
    const sl_status st = sl_model_read_param(m, 1, 0, 3, buf, sizeof buf);
    char want[300];
    snprintf(want, sizeof want, "pjrt device 1: PJRT_Buffer_CopyRawToHost for parameter '%s' "
             "failed: fake_pjrt: injected failure of PJRT_%s", pi.name, call);
    EXPECT(st == SL_E_DEVICE && !strncmp(sl_model_errmsg(m), want, strlen(want)) &&
               !strchr(sl_model_errmsg(m), '\n'), "%s: %d '%s'", call, st, sl_model_errmsg(m));
    fk_set("reset", 0);
    EXPECT(sl_model_read_param(m, 1, 0, 3, buf, sizeof buf) == SL_OK,
           "the next read works again: %s", sl_model_errmsg(m));
    sl_model_free(m);
    sl_plan_free(p);
    expect_clean(call);
}

static void test_partial_reads(void)
{
    check_partial(NULL, 0, -1);           /* each partial read is one CopyRawToHost */
    check_partial("null_slot", 100, 0);   /* a plugin without the slot: whole parameters */
    check_partial("raw", 0, 2);           /* UNIMPLEMENTED: asked once per device, then whole */
    check_partial("tiled", 1, 0);         /* raw bytes of a tiled layout are not row-major */
    check_partial_fault("Buffer_CopyRawToHost");
    check_partial_fault("Event_Await");
}

/* ---- DMA-mapped staging ------------------------------------------------------------------------ */

/* A load with the stand-in's DmaMap in mode dma (0 missing, 1 works, 2 fails, 3 UNIMPLEMENTED):
 * checksums equal cpu's, every device says how its staging went (starting with want), the
 * staging block was mapped want_maps times (once per client, not per device) and every mapped
 * range was unmapped. */
static void check_dma(long long dma, long long minor, const char *want, long long want_maps)
{
    const run r = {"dma", 4, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts cpu = opts_of(&r, "cpu"), pj = opts_of(&r, "pjrt");
    sl_model *mc = NULL, *mp = NULL;
    fk_set("dma", dma);
    if (minor)
        fk_set("minor", minor);
    fk_set("reset", 0);
    EXPECT(sl_load(g_ck, p, &cpu, &mc) == SL_OK && sl_load(g_ck, p, &pj, &mp) == SL_OK,
           "dma %lld: %s", dma, sl_model_errmsg(mp));
    for (int32_t d = 0; d < 4; d++) {
        const char *how = sl_model_device_staging(mp, d);
        EXPECT(how && !strncmp(how, want, strlen(want)) && !strchr(how, '\n'),
               "dma %lld device %d: staging '%s', want '%s'", dma, d, how ? how : "(null)", want);
    }
    EXPECT(fk_get("dma_maps") == want_maps && fk_get("dma_unmaps") == want_maps &&
               fk_get("live_dma") == 0 && fk_count("Client_DmaMap") == (dma >= 1 && !minor),
           "dma %lld: %lld maps, %lld unmaps, %lld live, %lld calls", dma, fk_get("dma_maps"),
           fk_get("dma_unmaps"), fk_get("live_dma"), fk_count("Client_DmaMap"));
    uint64_t *a = checksums(p, mc, "dma cpu"), *b = checksums(p, mp, "dma pjrt");
    EXPECT(a && b && !memcmp(a, b, param_total(p) * sizeof *a), "dma %lld: checksums differ", dma);
    EXPECT(!sl_model_device_staging(mc, 0) && !sl_model_device_staging(mp, 4),
           "cpu, out of range: no staging figure");
    free(a);
    free(b);
    sl_model_free(mc);
    sl_model_free(mp);
    sl_plan_free(p);
    fk_set("restore", 0);
    fk_set("dma", 1);
    expect_clean("dma");
}

static void test_dma(void)
{
    check_dma(1, 0, "dma-mapped", 1);
    check_dma(0, 0, "plain (the plugin has no PJRT_Client_DmaMap)", 0);
    check_dma(1, 66, "plain (the plugin has no PJRT_Client_DmaMap)", 0); /* before 0.67 */
    check_dma(3, 0, "plain (PJRT_Client_DmaMap is UNIMPLEMENTED", 0);
    /* a failed map is a clean fallback: plain memory, the reason on every device, one call */
    check_dma(2, 0, "plain: PJRT_Client_DmaMap failed: fake_pjrt: cudaHostRegister failed", 0);
    /* a failed load after the map unmaps it (expect_clean: live_dma 0) */
    const run r = {"dma fault", 2, 1, SL_LAYOUT_TP, -1, 0, 0};
    sl_plan *p = plan_of(&r);
    sl_load_opts pj = opts_of(&r, "pjrt");
    sl_model *m = NULL;
    fk_set("reset", 0);
    fk_fail("Client_BufferFromHostBuffer", 5);
    EXPECT(sl_load(g_ck, p, &pj, &m) == SL_E_DEVICE && fk_get("dma_maps") == 1 &&
               fk_get("dma_unmaps") == 1, "dma fault: %lld maps, %lld unmaps: %s",
           fk_get("dma_maps"), fk_get("dma_unmaps"), sl_model_errmsg(m));
    sl_model_free(m);
    /* dummy weights have no staging block */
    const run rd = {"dma dummy", 2, 1, SL_LAYOUT_TP, -1, 0, 1};
    sl_plan *pd = plan_of(&rd);
    sl_load_opts od = opts_of(&rd, "pjrt");
    fk_set("reset", 0);
    EXPECT(sl_load(NULL, pd, &od, &m) == SL_OK && fk_get("dma_maps") == 0,
           "dummy: %s", sl_model_errmsg(m));
    sl_model_free(m);
    sl_plan_free(pd);
    sl_plan_free(p);
    fk_set("reset", 0);
    expect_clean("dma fault");
}

static void cleanup(void)
{
    sl_checkpoint_close(g_ck);
    tu_rm_rf(g_dir);
}

int main(void)
{
    fk_open();
    make_checkpoint();
    test_checksums();
    test_buffers();
    test_second_mesh();
    test_refused_count();
    test_given_client();
    test_versions();
    test_stats();
    test_errors();
    test_partial_reads();
    test_dma();
    test_faults();
    test_stand_in_is_strict();
    cleanup();
    if (expect_failures)
        return 1;
    printf("test_pjrt: ok\n");
    return 0;
}
