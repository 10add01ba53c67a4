/* dev_pjrt_plugin.c - loading PJRT plugins, their errors and events, and the shared client
 * (dev_pjrt_plugin.h). Process state (the tables initialized, the live clients) sits behind one
 * mutex; plugins are never unloaded. */
#include "device/dev_pjrt_plugin.h"

#include "common/sl_grow.h"
#include "common/sl_text.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PJ_MAX_TABLES 16
#define PJ_MAX_CLIENTS 16

static struct {
    pthread_mutex_t lock;                     /* guards everything below */
    const PJRT_Api *initialized[PJ_MAX_TABLES]; /* tables whose Plugin_Initialize succeeded */
    pj_client *clients[PJ_MAX_CLIENTS];       /* live clients (refs > 0) */
} g_pj = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- errors --------------------------------------------------------------------------------- */

static const char *pj_code_name(int code)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    return code >= 0 && code < (int)(sizeof names / sizeof names[0]) ? names[code] : "unknown code";
}

void pj_drop(const PJRT_Api *api, PJRT_Error *e)
{
    if (e) {
        PJRT_Error_Destroy_Args a = PJ_ARGS(PJRT_Error_Destroy_Args, error);
        a.error = e;
        api->Error_Destroy(&a);
    }
}

static int pj_code(const PJRT_Api *api, PJRT_Error *e)
{
    PJRT_Error_GetCode_Args a = PJ_ARGS(PJRT_Error_GetCode_Args, code);
    a.error = e;
    PJRT_Error *e2 = api->Error_GetCode(&a);
    if (e2) {
        pj_drop(api, e2);
        return -1;
    }
    return a.code;
}

sl_status pj_fail(const PJRT_Api *api, PJRT_Error *e, int *code, sl_err *err, const char *context,
                  const char *call)
{
    PJRT_Error_Message_Args m = PJ_ARGS(PJRT_Error_Message_Args, message_size);
    char text[1024];
    m.error = e;
    api->Error_Message(&m);
    /* The plugin's text is not NUL-terminated and may hold newlines: shown printable, cut. */
    sl_text_display(m.message ? m.message : "", m.message ? m.message_size : 0, text, sizeof text);
    const int c = pj_code(api, e);
    pj_drop(api, e);
    if (code)
        *code = c;
    return sl_err_set(err, c == PJRT_Error_Code_RESOURCE_EXHAUSTED ? SL_E_NOMEM : SL_E_DEVICE,
                      "%s: %s failed: %s (%s)", context, call, text, pj_code_name(c));
}

/* ---- events --------------------------------------------------------------------------------- */

void pj_event_destroy(const PJRT_Api *api, PJRT_Event *ev)
{
    if (ev) {
        PJRT_Event_Destroy_Args a = PJ_ARGS(PJRT_Event_Destroy_Args, event);
        a.event = ev;
        pj_drop(api, api->Event_Destroy(&a));
    }
}

sl_status pj_event_finish_code(const PJRT_Api *api, PJRT_Event *ev, int *code, sl_err *err,
                               const char *context, const char *call)
{
    if (!ev)
        return SL_OK;
    PJRT_Event_Await_Args a = PJ_ARGS(PJRT_Event_Await_Args, event);
    a.event = ev;
    PJRT_Error *e = api->Event_Await(&a);
    pj_event_destroy(api, ev);
    return e ? pj_fail(api, e, code, err, context, call) : SL_OK;
}

sl_status pj_event_finish(const PJRT_Api *api, PJRT_Event *ev, sl_err *err, const char *context,
                          const char *call)
{
    return pj_event_finish_code(api, ev, NULL, err, context, call);
}

int pj_event_ready(const PJRT_Api *api, PJRT_Event *ev)
{
    PJRT_Event_IsReady_Args a = PJ_ARGS(PJRT_Event_IsReady_Args, is_ready);
    a.event = ev;
    PJRT_Error *e = api->Event_IsReady(&a);
    if (e) {
        pj_drop(api, e);
        return 1;
    }
    return a.is_ready;
}

sl_status pj_events_push(pj_events *l, pj_pending e, sl_err *err)
{
    pj_pending *v = sl_grow(l->v, &l->cap, l->n, sizeof *v, 16);
    if (!v)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    l->v = v;
    l->v[l->n++] = e;
    return SL_OK;
}

sl_status pj_events_move(pj_events *dst, pj_events *src, sl_err *err)
{
    if (!dst->n && !dst->cap) { /* the common case: dst is empty, take src's array */
        *dst = *src;
        *src = (pj_events){0};
        return SL_OK;
    }
    for (size_t i = 0; i < src->n; i++) {
        const sl_status st = pj_events_push(dst, src->v[i], err);
        if (st != SL_OK) { /* the rest stay in src, the moved ones only in dst: each finished once */
            memmove(src->v, src->v + i, (src->n - i) * sizeof *src->v);
            src->n -= i;
            return st;
        }
    }
    src->n = 0;
    return SL_OK;
}

sl_status pj_events_finish(const PJRT_Api *api, pj_events *l, sl_err *err, const char *context)
{
    sl_status st = SL_OK;
    sl_err e2 = {0};
    for (size_t i = 0; i < l->n; i++) {
        char call[SL_TEXT_NAME + 96], name[SL_TEXT_NAME];
        const pj_pending *p = &l->v[i];
        snprintf(call, sizeof call, "%s%s%s%s", p->call, p->param ? " for parameter '" : "",
                 p->param ? sl_text_name(p->param, name, sizeof name) : "", p->param ? "'" : "");
        const sl_status s = pj_event_finish(api, p->ev, st == SL_OK ? err : &e2, context, call);
        st = st == SL_OK ? s : st;
    }
    sl_err_clear(&e2);
    l->n = 0;
    return st;
}

void pj_events_free(const PJRT_Api *api, pj_events *l)
{
    sl_err ignored = {0};
    if (api)
        (void)pj_events_finish(api, l, &ignored, "");
    sl_err_clear(&ignored);
    free(l->v);
    *l = (pj_events){0};
}

/* ---- loading -------------------------------------------------------------------------------- */

/* The slots every load needs, with their names for the message when one is missing. */
static const char *pj_missing_slot(const PJRT_Api *api)
{
#define PJ_NEED(f) if (!pj_has_slot(api, f)) return "PJRT_" #f
    PJ_NEED(Error_Destroy);
    PJ_NEED(Error_Message);
    PJ_NEED(Error_GetCode);
    PJ_NEED(Plugin_Initialize);
    PJ_NEED(Event_Destroy);
    PJ_NEED(Event_IsReady);
    PJ_NEED(Event_Await);
    PJ_NEED(Client_Create);
    PJ_NEED(Client_Destroy);
    PJ_NEED(Client_PlatformName);
    PJ_NEED(Client_AddressableDevices);
    PJ_NEED(Client_BufferFromHostBuffer);
    PJ_NEED(Buffer_Destroy);
    PJ_NEED(Buffer_ToHostBuffer);
#undef PJ_NEED
    return NULL;
}

sl_status pj_api_check(const PJRT_Api *api, const char *what, sl_err *err)
{
    const size_t need = offsetof(PJRT_Api, Buffer_ToHostBuffer) + sizeof api->Buffer_ToHostBuffer;
    SL_CHECK(api, err, SL_E_UNSUPPORTED, "device 'pjrt': %s: GetPjrtApi returned NULL", what);
    SL_CHECK(api->struct_size >= offsetof(PJRT_Api, Error_Destroy), err, SL_E_UNSUPPORTED,
             "device 'pjrt': %s: its PJRT_Api is %zu bytes, too short for a version", what,
             api->struct_size);
    const int major = api->pjrt_api_version.major_version;
    const int minor = api->pjrt_api_version.minor_version;
    SL_CHECK(major == 0 && minor >= PJ_MIN_MINOR, err, SL_E_UNSUPPORTED,
             "device 'pjrt': %s has PJRT API %d.%d%s; shardload needs 0.%d or later (major 0)",
             what, major, minor, major == 0 && minor == 56 ? " (whose table has slot 69 moved)" : "",
             PJ_MIN_MINOR);
    SL_CHECK(api->struct_size >= need, err, SL_E_UNSUPPORTED,
             "device 'pjrt': %s: its PJRT_Api is %zu bytes, shorter than the %zu that PJRT 0.%d "
             "has", what, api->struct_size, need, minor);
    const char *missing = pj_missing_slot(api);
    SL_CHECK(!missing, err, SL_E_UNSUPPORTED, "device 'pjrt': %s lacks %s", what,
             missing ? missing : "");
    return SL_OK;
}

int pj_api_has_streaming(const PJRT_Api *api)
{
    return api->pjrt_api_version.minor_version >= PJ_TM_MINOR &&
           pj_has_slot(api, Client_CreateBuffersForAsyncHostToDevice) &&
           pj_has_slot(api, AsyncHostToDeviceTransferManager_TransferData) &&
           pj_has_slot(api, AsyncHostToDeviceTransferManager_RetrieveBuffer) &&
           pj_has_slot(api, AsyncHostToDeviceTransferManager_Destroy) &&
           pj_has_slot(api, Device_DefaultMemory) && pj_has_slot(api, Buffer_GetMemoryLayout);
}

int pj_api_has_raw_read(const PJRT_Api *api)
{
    return pj_has_slot(api, Buffer_CopyRawToHost) && pj_has_slot(api, Buffer_GetMemoryLayout);
}

/* Caller holds g_pj.lock. */
static int pj_is_initialized(const PJRT_Api *api)
{
    for (int i = 0; i < PJ_MAX_TABLES; i++)
        if (g_pj.initialized[i] == api)
            return 1;
    return 0;
}

/* Caller holds g_pj.lock. PJRT_Plugin_Initialize once per table ("must be called before any
 * other functions"); a failure is not remembered. */
static sl_status pj_initialize(const PJRT_Api *api, const char *path, sl_err *err)
{
    if (pj_is_initialized(api))
        return SL_OK;
    int slot = -1;
    for (int i = 0; i < PJ_MAX_TABLES && slot < 0; i++)
        slot = g_pj.initialized[i] ? -1 : i;
    SL_CHECK(slot >= 0, err, SL_E_UNSUPPORTED, "device 'pjrt': more than %d PJRT plugins loaded",
             PJ_MAX_TABLES);
    PJRT_Plugin_Initialize_Args a = PJ_ARGS(PJRT_Plugin_Initialize_Args, extension_start);
    PJRT_Error *e = api->Plugin_Initialize(&a);
    if (e) {
        char context[SL_TEXT_NAME + 32];
        snprintf(context, sizeof context, "device 'pjrt': plugin %s", path);
        return pj_fail(api, e, NULL, err, context, "PJRT_Plugin_Initialize");
    }
    g_pj.initialized[slot] = api;
    return SL_OK;
}

/* Caller holds g_pj.lock (dlerror is process state). */
static sl_status pj_dlopen(const char *path, const char *shown, const PJRT_Api **api, sl_err *err)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        char buf[512];
        return sl_err_set(err, SL_E_UNSUPPORTED, "device 'pjrt': cannot load plugin %s: %s", shown,
                          sl_text_name(why ? why : "dlopen failed", buf, sizeof buf));
    }
    void *sym = dlsym(lib, "GetPjrtApi");
    if (!sym) {
        dlclose(lib); /* not a plugin: nothing of it ran but its constructors */
        return sl_err_set(err, SL_E_UNSUPPORTED, "device 'pjrt': %s is not a PJRT plugin (it "
                          "exports no GetPjrtApi)", shown);
    }
    const PJRT_Api *(*get)(void) = NULL;
    memcpy(&get, &sym, sizeof sym); /* ISO C has no cast from an object to a function pointer */
    *api = get();
    return SL_OK;
}

sl_status pj_plugin_load(const char *path, const PJRT_Api **api, sl_err *err)
{
    char shown[SL_TEXT_NAME];
    SL_CHECK(path && *path, err, SL_E_INVALID_ARG,
             "device 'pjrt' needs a PJRT plugin (--pjrt-plugin PATH, sl_load_opts.pjrt_plugin)");
    sl_text_name(path, shown, sizeof shown);
    pthread_mutex_lock(&g_pj.lock);
    sl_status st = pj_dlopen(path, shown, api, err);
    if (st == SL_OK)
        st = pj_api_check(*api, shown, err);
    if (st == SL_OK)
        st = pj_initialize(*api, shown, err);
    pthread_mutex_unlock(&g_pj.lock);
    return st;
}

/* ---- the client ----------------------------------------------------------------------------- */

static PJRT_NamedValue pj_int_option(const char *name, int64_t v)
{
    PJRT_NamedValue nv = PJ_ARGS(PJRT_NamedValue, value_size);
    nv.name = name;
    nv.name_size = strlen(name);
    nv.type = PJRT_NamedValue_kInt64;
    nv.int64_value = v;
    nv.value_size = 1;
    return nv;
}

static PJRT_NamedValue pj_bool_option(const char *name, bool v)
{
    PJRT_NamedValue nv = pj_int_option(name, 0);
    nv.type = PJRT_NamedValue_kBool;
    nv.bool_value = v;
    return nv;
}

static PJRT_NamedValue pj_string_option(const char *name, const char *v)
{
    PJRT_NamedValue nv = pj_int_option(name, 0);
    nv.type = PJRT_NamedValue_kString;
    nv.string_value = v;
    nv.value_size = strlen(v);
    return nv;
}

/* Tries the option sets of each plugin kind in turn; a plugin refuses a key it does not know
 * with INVALID_ARGUMENT, which moves on to the next set (the last one has no options). A CPU
 * plugin that refuses the device count's value does so too: its message goes to `refused`, for
 * pj_client_new to give if the client it then makes is too small. */
static sl_status pj_client_create(const PJRT_Api *api, int32_t cpu_devices, PJRT_Client **out,
                                  sl_err *refused, sl_err *err)
{
    const PJRT_NamedValue cpu[] = {pj_int_option("cpu_device_count", cpu_devices)};
    const PJRT_NamedValue cuda[] = {pj_bool_option("preallocate", false),
                                    pj_string_option("allocator", "bfc")};
    const struct { const PJRT_NamedValue *v; size_t n; } kinds[] = {{cpu, 1}, {cuda, 2}, {NULL, 0}};
    const size_t n_kinds = sizeof kinds / sizeof kinds[0];
    for (size_t k = 0; k < n_kinds; k++) {
        PJRT_Client_Create_Args a = PJ_ARGS(PJRT_Client_Create_Args, kv_try_get_user_arg);
        a.create_options = kinds[k].v;
        a.num_options = kinds[k].n;
        PJRT_Error *e = api->Client_Create(&a);
        if (!e) {
            *out = a.client;
            return SL_OK;
        }
        if (k + 1 < n_kinds && pj_code(api, e) == PJRT_Error_Code_INVALID_ARGUMENT) {
            if (k == 0)
                (void)pj_fail(api, e, NULL, refused, "asked for them", "PJRT_Client_Create");
            else
                pj_drop(api, e);
            continue;
        }
        return pj_fail(api, e, NULL, err, "device 'pjrt'", "PJRT_Client_Create");
    }
    return SL_OK; /* not reached: the last kind returns */
}

static void pj_client_destroy(const PJRT_Api *api, PJRT_Client *client)
{
    PJRT_Client_Destroy_Args a = PJ_ARGS(PJRT_Client_Destroy_Args, client);
    a.client = client;
    pj_drop(api, api->Client_Destroy(&a));
}

static sl_status pj_client_describe(pj_client *c, sl_err *err)
{
    PJRT_Client_PlatformName_Args pn = PJ_ARGS(PJRT_Client_PlatformName_Args, platform_name_size);
    pn.client = c->client;
    PJRT_Error *e = c->api->Client_PlatformName(&pn);
    if (e)
        return pj_fail(c->api, e, NULL, err, "device 'pjrt'", "PJRT_Client_PlatformName");
    sl_text_display(pn.platform_name ? pn.platform_name : "", pn.platform_name ? pn.platform_name_size : 0,
                    c->platform, sizeof c->platform);
    PJRT_Client_AddressableDevices_Args ad =
        PJ_ARGS(PJRT_Client_AddressableDevices_Args, num_addressable_devices);
    ad.client = c->client;
    e = c->api->Client_AddressableDevices(&ad);
    if (e)
        return pj_fail(c->api, e, NULL, err, "device 'pjrt'", "PJRT_Client_AddressableDevices");
    SL_CHECK(ad.num_addressable_devices > 0 && ad.addressable_devices, err, SL_E_DEVICE,
             "device 'pjrt': the %s client has no addressable devices", c->platform);
    c->devices = ad.addressable_devices;
    c->n_devices = ad.num_addressable_devices;
    return SL_OK;
}

/* Whether an owned client serves a mesh of cpu_devices: a CPU client was made with the device
 * count of the first mesh that asked, so a larger mesh gets a client of its own (its devices
 * would wrap onto too few); GPUs and TPUs have what the hardware has, and one client. */
static int pj_client_fits(const pj_client *c, int32_t cpu_devices)
{
    return strcmp(c->platform, "cpu") != 0 || cpu_devices <= 0 || c->n_devices >= (size_t)cpu_devices;
}

/* Whether an owned client serves mesh device `index` of a mesh of cpu_devices: one that fits
 * the mesh serves every index; a CPU client of fewer devices (the plugin refused the count) serves
 * the n_devices consecutive mesh indices of its group, index / n_devices, each on its device
 * index % n_devices: the device a client per mesh device would have given it, and no two mesh
 * devices on one PJRT device (as one client of n_devices would wrap them), with a client per
 * n_devices mesh devices instead of one per mesh device. */
static int pj_client_serves(const pj_client *c, int32_t cpu_devices, int32_t index)
{
    if (pj_client_fits(c, cpu_devices))
        return 1;
    return c->group >= 0 && index >= 0 && (size_t)index / c->n_devices == (size_t)c->group;
}

/* Caller holds g_pj.lock. */
static pj_client *pj_client_find(const PJRT_Api *api, PJRT_Client *given, int32_t cpu_devices,
                                 int32_t index)
{
    for (int i = 0; i < PJ_MAX_CLIENTS; i++) {
        pj_client *c = g_pj.clients[i];
        if (c && c->api == api &&
            (given ? c->client == given : c->owned && pj_client_serves(c, cpu_devices, index)))
            return c;
    }
    return NULL;
}

/* Caller holds g_pj.lock. A new entry for `given` or a new client; registered on success. */
static sl_status pj_client_new(const PJRT_Api *api, PJRT_Client *given, int32_t cpu_devices,
                               int32_t index, pj_client **out, sl_err *err)
{
    int slot = -1;
    for (int i = 0; i < PJ_MAX_CLIENTS && slot < 0; i++)
        slot = g_pj.clients[i] ? -1 : i;
    SL_CHECK(slot >= 0, err, SL_E_UNSUPPORTED, "device 'pjrt': more than %d PJRT clients in use",
             PJ_MAX_CLIENTS);
    pj_client *c = calloc(1, sizeof *c);
    if (!c)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    c->api = api;
    c->client = given;
    c->owned = !given;
    c->group = -1;
    sl_err refused = {0};
    sl_status st = given ? SL_OK : pj_client_create(api, cpu_devices, &c->client, &refused, err);
    if (st == SL_OK)
        st = pj_client_describe(c, err);
    /* A CPU client of fewer devices than the mesh (the plugin refused the count, or knows no such
     * option) serves the mesh indices of its group (pj_client_serves): a mesh needs one per
     * n_devices of its devices, up to PJ_MAX_CLIENTS; past that the last ones would fail with
     * "more than 16 PJRT clients in use", after making and destroying 16. Said at the first. */
    const int short_cpu = st == SL_OK && c->owned && !pj_client_fits(c, cpu_devices);
    if (short_cpu && (size_t)cpu_devices > PJ_MAX_CLIENTS * c->n_devices)
        st = sl_err_set(err, SL_E_DEVICE, "device 'pjrt': a mesh of %d devices on the CPU plugin, which "
                        "makes %zu%s%s", (int)cpu_devices, c->n_devices, refused.msg ? "; " : "",
                        refused.msg ? refused.msg : "");
    if (short_cpu && st == SL_OK)
        c->group = index / (int32_t)c->n_devices;
    sl_err_clear(&refused);
    if (st != SL_OK) {
        if (c->owned && c->client)
            pj_client_destroy(api, c->client);
        free(c);
        return st;
    }
    c->refs = 1;
    g_pj.clients[slot] = c;
    *out = c;
    return SL_OK;
}

sl_status pj_client_acquire(const PJRT_Api *api, PJRT_Client *given, int32_t cpu_devices,
                            int32_t index, pj_client **out, sl_err *err)
{
    pthread_mutex_lock(&g_pj.lock);
    pj_client *c = pj_client_find(api, given, cpu_devices, index);
    sl_status st = SL_OK;
    if (c)
        c->refs++;
    else
        st = pj_client_new(api, given, cpu_devices, index, &c, err);
    pthread_mutex_unlock(&g_pj.lock);
    *out = st == SL_OK ? c : NULL;
    return st;
}

void pj_client_release(pj_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g_pj.lock);
    const int last = --c->refs == 0;
    for (int i = 0; last && i < PJ_MAX_CLIENTS; i++)
        if (g_pj.clients[i] == c)
            g_pj.clients[i] = NULL;
    pthread_mutex_unlock(&g_pj.lock);
    if (!last)
        return;
    if (c->owned)
        pj_client_destroy(c->api, c->client);
    free(c);
}

/* ---- DMA mapping ---------------------------------------------------------------------------- */

static int pj_api_has_dma(const PJRT_Api *api)
{
    return api->pjrt_api_version.minor_version >= PJ_DMA_MINOR && pj_has_slot(api, Client_DmaMap) &&
           pj_has_slot(api, Client_DmaUnmap);
}

/* Caller holds g_pj.lock. The entry of ptr in c, or a free one (refs 0), or NULL. */
static pj_dma *pj_dma_find(pj_client *c, const void *ptr)
{
    pj_dma *free_one = NULL;
    for (int i = 0; i < PJ_MAX_DMA; i++) {
        if (c->dma[i].refs && c->dma[i].ptr == ptr)
            return &c->dma[i];
        if (!c->dma[i].refs && !free_one)
            free_one = &c->dma[i];
    }
    return free_one;
}

/* Caller holds g_pj.lock. The first pin of [ptr, ptr + len) in c: 1 mapped, 0 plain (the reason
 * in how). */
static int pj_dma_first(pj_client *c, const void *ptr, size_t len, char *how, size_t how_len)
{
    if (!pj_api_has_dma(c->api)) {
        snprintf(how, how_len, "plain (the plugin has no PJRT_Client_DmaMap)");
        return 0;
    }
    PJRT_Client_DmaMap_Args a = PJ_ARGS(PJRT_Client_DmaMap_Args, size);
    a.client = c->client;
    a.data = (void *)(uintptr_t)ptr; /* the plugin registers it; it writes nothing there */
    a.size = len;
    PJRT_Error *e = c->api->Client_DmaMap(&a);
    if (!e) {
        snprintf(how, how_len, "dma-mapped");
        return 1;
    }
    sl_err why = {0};
    int code = -1;
    (void)pj_fail(c->api, e, &code, &why, "plain", "PJRT_Client_DmaMap");
    if (code == PJRT_Error_Code_UNIMPLEMENTED)
        snprintf(how, how_len, "plain (PJRT_Client_DmaMap is UNIMPLEMENTED in this plugin)");
    else /* "plain: PJRT_Client_DmaMap failed: <message> (<code>)" */
        snprintf(how, how_len, "%s", sl_err_msg(&why));
    sl_err_clear(&why);
    return 0;
}

int pj_client_dma_map(pj_client *c, const void *ptr, size_t len, char *how, size_t how_len)
{
    pthread_mutex_lock(&g_pj.lock);
    pj_dma *m = pj_dma_find(c, ptr);
    int mapped = 0;
    if (!m) {
        snprintf(how, how_len, "plain (more than %d host ranges pinned in one client)", PJ_MAX_DMA);
    } else if (m->refs) { /* another mesh device of c pinned it: the same outcome */
        m->refs++;
        mapped = m->mapped;
        snprintf(how, how_len, "%s", m->how);
    } else {
        *m = (pj_dma){.ptr = ptr, .len = len, .refs = 1};
        mapped = m->mapped = pj_dma_first(c, ptr, len, m->how, sizeof m->how);
        snprintf(how, how_len, "%s", m->how);
    }
    pthread_mutex_unlock(&g_pj.lock);
    return mapped;
}

void pj_client_dma_unmap(pj_client *c, const void *ptr)
{
    pthread_mutex_lock(&g_pj.lock);
    pj_dma *m = pj_dma_find(c, ptr);
    if (m && m->refs && --m->refs == 0 && m->mapped) {
        PJRT_Client_DmaUnmap_Args a = PJ_ARGS(PJRT_Client_DmaUnmap_Args, data);
        a.client = c->client;
        a.data = (void *)(uintptr_t)ptr;
        pj_drop(c->api, c->api->Client_DmaUnmap(&a)); /* nothing else to undo if it fails */
    }
    if (m && !m->refs)
        *m = (pj_dma){0};
    pthread_mutex_unlock(&g_pj.lock);
}

/* ---- memory statistics ---------------------------------------------------------------------- */

int pj_device_free_bytes(const PJRT_Api *api, PJRT_Device *dev, uint64_t *free_bytes)
{
    if (!pj_has_slot(api, Device_MemoryStats))
        return -1;
    PJRT_Device_MemoryStats_Args a = PJ_ARGS(PJRT_Device_MemoryStats_Args,
                                             peak_allocated_bytes_is_set);
    a.device = dev;
    PJRT_Error *e = api->Device_MemoryStats(&a);
    if (e) { /* UNIMPLEMENTED on the CPU plugin: not an error of the load */
        pj_drop(api, e);
        return -1;
    }
    if (!a.bytes_limit_is_set || a.bytes_limit < a.bytes_in_use || a.bytes_in_use < 0)
        return -1;
    *free_bytes = (uint64_t)(a.bytes_limit - a.bytes_in_use);
    return 0;
}
