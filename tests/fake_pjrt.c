/* fake_pjrt.c - a host-memory PJRT plugin for the pjrt backend's tests (src/device/dev_pjrt*.c):
 * a shared library that exports GetPjrtApi with the table layout of ../shared/spec/pjrt-notes.md
 * (declared in src/device/dev_pjrt_abi.h) and implements the calls the backend makes.
 * This file holds the table and GetPjrtApi, the environment knobs, the objects' bookkeeping, the
 * checks every call starts with (fault injection too), the Error_* calls, the fake_pjrt_* controls
 * and the exit log; fake_pjrt_events.c the worker that runs the delayed copies and the Event_*
 * calls, fake_pjrt_client.c clients, devices and DMA mapping, fake_pjrt_buffers.c buffers and the
 * transfer manager. They share fake_pjrt.h.
 *
 * It is stricter than a real plugin where that exposes bugs:
 * - Every call checks its Args' struct_size against the layout it was built with (a smaller one
 *   is INVALID_ARGUMENT, as real plugins do) and every handle it is given (a destroyed or unknown
 *   buffer, event, client or transfer manager is a violation); calls before PJRT_Plugin_Initialize
 *   are violations.
 * - Host-to-device copies with kImmutableUntilTransferCompletes (BufferFromHostBuffer) and
 *   TransferData chunks run later, on a worker thread, FAKE_PJRT_DELAY_US (default 200) after the
 *   call, and read the host memory THEN; their event fires after the copy. The source is hashed at
 *   the call and again when copied: a host buffer changed (reused) before its event fired is a
 *   violation, and gives wrong bytes too. Read-backs (ToHostBuffer) are delayed the same way.
 * - Objects are counted: at exit the live buffers, events, errors, clients and transfer managers
 *   must be 0 (a client destroyed before its buffers is a violation).
 * Modes: FAKE_PJRT_KIND=cpu|cuda|tpu (the create options it accepts, as those plugins do: cpu
 * takes cpu_device_count (default 4 devices; FAKE_PJRT_CPU_MAX, default 64, the most it takes), cuda preallocate and allocator (FAKE_PJRT_GPUS devices,
 * default 2), tpu none
 * (4 devices); any other key is INVALID_ARGUMENT), FAKE_PJRT_STATS=1 (MemoryStats implemented,
 * bytes_limit 1 GiB; else UNIMPLEMENTED, as on XLA's CPU plugin), FAKE_PJRT_TILED=1 (buffers
 * report a tiled layout, as on TPU, and CopyRawToHost returns their raw bytes in another order),
 * FAKE_PJRT_RAW=0 (Buffer_CopyRawToHost is UNIMPLEMENTED; default 1: partial reads, delayed like
 * ToHostBuffer), FAKE_PJRT_DMA=0|1|2|3 (Client_DmaMap/DmaUnmap missing from the table, working
 * (default: one registration per host range, as cudaHostRegister; a range mapped twice, unmapped
 * when not mapped, or still mapped when its client goes, is a violation; live ones are counted),
 * failing with INTERNAL, or UNIMPLEMENTED as on XLA's CPU plugins), FAKE_PJRT_MINOR /
 * FAKE_PJRT_MAJOR / FAKE_PJRT_STRUCT_SIZE (what the table reports; default 0.104 with the table
 * through slot 111).
 * Fault injection: FAKE_PJRT_FAIL=N fails the N-th fallible call (every call but the Error_*
 * ones, the destroys and DmaUnmap) once with INTERNAL; FAKE_PJRT_FAIL=NAME:N the N-th call of PJRT_NAME.
 * The message has a second line, which the backend must keep on one.
 * At exit the counters are appended to $FAKE_PJRT_LOG as one line of key=value pairs. Tests in
 * one process use fake_pjrt_set() and fake_pjrt_get() instead of the environment. */
#define _POSIX_C_SOURCE 200809L
#include "fake_pjrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP_EXPORT __attribute__((visibility("default")))

static const char *const fp_kind_names[FP_KINDS] = {"error", "event", "client", "buffer", "tm"};

/* ---- process state (one mutex; its fields and the objects: fake_pjrt.h) ----------------------- */

fp_state g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .delay_us = 200};

PJRT_Api g_api;

void fp_violation(const char *fmt, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    if (!g.violations++)
        snprintf(g.first_violation, sizeof g.first_violation, "%s", msg);
    fprintf(stderr, "fake_pjrt: VIOLATION: %s\n", msg);
}

void *fp_new(size_t size, fp_kind kind)
{
    fp_obj *o = calloc(1, size);
    if (!o)
        abort();
    o->magic = FP_MAGIC;
    o->kind = kind;
    o->all = g.all;
    g.all = o;
    g.counts[kind]++;
    return o;
}

int fp_live(const void *p, fp_kind kind)
{
    const fp_obj *o = p;
    return o && o->magic == FP_MAGIC && o->kind == kind;
}

void fp_kill(void *p)
{
    fp_obj *o = p;
    o->magic = FP_DEAD;
    g.counts[o->kind]--;
}

PJRT_Error *fp_error(int code, const char *fmt, const char *what)
{
    PJRT_Error *e = fp_new(sizeof *e, FP_ERROR);
    e->code = code;
    snprintf(e->msg, sizeof e->msg, fmt, what);
    return e;
}

/* ---- configuration ---------------------------------------------------------------------------- */

static long fp_env(const char *name, long def)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : def;
}

static void fp_fill_table(void);

static void fp_configure(void)
{
    if (g.configured)
        return;
    g.configured = 1;
    const char *kind = getenv("FAKE_PJRT_KIND");
    g.kind = kind && !strcmp(kind, "cuda") ? 1 : kind && !strcmp(kind, "tpu") ? 2 : 0;
    g.stats = (int)fp_env("FAKE_PJRT_STATS", 0);
    g.tiled = (int)fp_env("FAKE_PJRT_TILED", 0);
    g.raw = (int)fp_env("FAKE_PJRT_RAW", 1);
    g.dma = (int)fp_env("FAKE_PJRT_DMA", 1);
    g.cuda_devices = (int)fp_env("FAKE_PJRT_GPUS", 2);
    g.cpu_max = (int)fp_env("FAKE_PJRT_CPU_MAX", FP_MAX_DEVICES);
    g.delay_us = fp_env("FAKE_PJRT_DELAY_US", 200);
    const char *fail = getenv("FAKE_PJRT_FAIL");
    if (fail && strchr(fail, ':')) {
        snprintf(g.fail_name, sizeof g.fail_name, "%.*s", (int)(strchr(fail, ':') - fail), fail);
        g.fail_nth = strtol(strchr(fail, ':') + 1, NULL, 10);
    } else if (fail) {
        g.fail_at = strtol(fail, NULL, 10);
    }
    fp_fill_table();
    g_api.pjrt_api_version.major_version = (int)fp_env("FAKE_PJRT_MAJOR", 0);
    g_api.pjrt_api_version.minor_version = (int)fp_env("FAKE_PJRT_MINOR", 104);
    g_api.struct_size = (size_t)fp_env("FAKE_PJRT_STRUCT_SIZE", (long)sizeof g_api);
}

/* Every fallible call starts here (g.mu held): the initialization rule, the args' size, and the
 * failure to inject. */
PJRT_Error *fp_enter(const char *name, size_t struct_size, size_t need)
{
    char what[160];
    g.calls++;
    if (!g.initialized && strcmp(name, "Plugin_Initialize"))
        fp_violation("PJRT_%s called before PJRT_Plugin_Initialize", name);
    if (struct_size < need) {
        snprintf(what, sizeof what, "PJRT_%s_Args struct_size %zu < %zu", name, struct_size, need);
        fp_violation("%s", what);
        return fp_error(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", what);
    }
    long n = 0;
    for (size_t i = 0; i < sizeof g.per / sizeof g.per[0]; i++)
        if (!g.per[i].name || !strcmp(g.per[i].name, name)) {
            g.per[i].name = name;
            n = ++g.per[i].n;
            break;
        }
    const int named = g.fail_name[0] && !strcmp(g.fail_name, name) && n == g.fail_nth;
    if (g.calls == g.fail_at || named) {
        g.injected++;
        snprintf(g.injected_name, sizeof g.injected_name, "%s", name);
        snprintf(what, sizeof what, "PJRT_%s (call %ld)\nat fake_pjrt.c", name, g.calls);
        return fp_error(PJRT_Error_Code_INTERNAL, "fake_pjrt: injected failure of %s", what);
    }
    return NULL;
}

/* ---- errors and initialization ---------------------------------------------------------------- */

static void fp_Error_Destroy(PJRT_Error_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->error, FP_ERROR))
        fp_violation("%s", "Error_Destroy of a dead or unknown error");
    else
        fp_kill(a->error);
    pthread_mutex_unlock(&g.mu);
}

static void fp_Error_Message(PJRT_Error_Message_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->error, FP_ERROR)) {
        fp_violation("%s", "Error_Message of a dead or unknown error");
        a->message = "";
        a->message_size = 0;
    } else {
        a->message = a->error->msg;
        a->message_size = strlen(a->error->msg);
    }
    pthread_mutex_unlock(&g.mu);
}

static PJRT_Error *fp_Error_GetCode(PJRT_Error_GetCode_Args *a)
{
    pthread_mutex_lock(&g.mu);
    a->code = fp_live(a->error, FP_ERROR) ? a->error->code : PJRT_Error_Code_INTERNAL;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Plugin_Initialize(PJRT_Plugin_Initialize_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Plugin_Initialize", PJRT_Plugin_Initialize_Args, extension_start);
    g.initialized = 1;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* ---- the table -------------------------------------------------------------------------------- */

static void fp_fill_table(void)
{
    memset(&g_api, 0, sizeof g_api);
    g_api.struct_size = sizeof g_api;
    g_api.pjrt_api_version.struct_size = PJRT_STRUCT_SIZE(PJRT_Api_Version, minor_version);
    g_api.pjrt_api_version.major_version = 0;
    g_api.pjrt_api_version.minor_version = 104;
    g_api.Error_Destroy = fp_Error_Destroy;
    g_api.Error_Message = fp_Error_Message;
    g_api.Error_GetCode = fp_Error_GetCode;
    g_api.Plugin_Initialize = fp_Plugin_Initialize;
    g_api.Event_Destroy = fp_Event_Destroy;
    g_api.Event_IsReady = fp_Event_IsReady;
    g_api.Event_Await = fp_Event_Await;
    g_api.Client_Create = fp_Client_Create;
    g_api.Client_Destroy = fp_Client_Destroy;
    g_api.Client_PlatformName = fp_Client_PlatformName;
    g_api.Client_AddressableDevices = fp_Client_AddressableDevices;
    g_api.Client_BufferFromHostBuffer = fp_Client_BufferFromHostBuffer;
    g_api.DeviceDescription_Id = fp_DeviceDescription_Id;
    g_api.DeviceDescription_Kind = fp_DeviceDescription_Kind;
    g_api.Device_GetDescription = fp_Device_GetDescription;
    g_api.Device_DefaultMemory = fp_Device_DefaultMemory;
    g_api.Device_MemoryStats = fp_Device_MemoryStats;
    g_api.Buffer_Destroy = fp_Buffer_Destroy;
    g_api.Buffer_ElementType = fp_Buffer_ElementType;
    g_api.Buffer_Dimensions = fp_Buffer_Dimensions;
    g_api.Buffer_GetMemoryLayout = fp_Buffer_GetMemoryLayout;
    g_api.Buffer_OnDeviceSizeInBytes = fp_Buffer_OnDeviceSizeInBytes;
    g_api.Buffer_ToHostBuffer = fp_Buffer_ToHostBuffer;
    g_api.Buffer_CopyRawToHost = fp_Buffer_CopyRawToHost;
    g_api.AsyncHostToDeviceTransferManager_Destroy = fp_TM_Destroy;
    g_api.AsyncHostToDeviceTransferManager_TransferData = fp_TM_TransferData;
    g_api.Client_CreateBuffersForAsyncHostToDevice = fp_CreateBuffersForAsyncHostToDevice;
    g_api.AsyncHostToDeviceTransferManager_RetrieveBuffer = fp_TM_RetrieveBuffer;
    g_api.Client_DmaMap = g.dma ? fp_Client_DmaMap : NULL;
    g_api.Client_DmaUnmap = g.dma ? fp_Client_DmaUnmap : NULL;
}

FP_EXPORT const PJRT_Api *GetPjrtApi(void);
FP_EXPORT const PJRT_Api *GetPjrtApi(void)
{
    pthread_mutex_lock(&g.mu);
    fp_configure();
    pthread_mutex_unlock(&g.mu);
    return &g_api;
}

/* ---- controls for tests in one process -------------------------------------------------------- */

/* Counters: "calls", "injected", "violations", "live_<kind>", "bfhb", "bfhb_strided",
 * "transfers", "tohost", "client_opts", "raw_reads", "dma_maps", "dma_unmaps", "live_dma",
 * "clients_made"; -1 for
 * another key. */
FP_EXPORT long long fake_pjrt_get(const char *key);
FP_EXPORT long long fake_pjrt_get(const char *key)
{
    long long v = -1;
    pthread_mutex_lock(&g.mu);
    const struct { const char *k; long v; } c[] = {
        {"calls", g.calls}, {"injected", g.injected}, {"violations", g.violations},
        {"live_error", g.counts[FP_ERROR]}, {"live_event", g.counts[FP_EVENT]},
        {"live_client", g.counts[FP_CLIENT]}, {"live_buffer", g.counts[FP_BUFFER]},
        {"live_tm", g.counts[FP_TM]}, {"bfhb", g.bfhb}, {"bfhb_strided", g.bfhb_strided},
        {"transfers", g.transfers}, {"tohost", g.tohost}, {"client_opts", g.client_opts},
        {"raw_reads", g.raw_reads}, {"dma_maps", g.dma_maps}, {"dma_unmaps", g.dma_unmaps},
        {"live_dma", g.dma_live}, {"clients_made", g.clients_made}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (!strcmp(key, c[i].k))
            v = c[i].v;
    pthread_mutex_unlock(&g.mu);
    return v;
}

/* Settings: "fail_at" (the N-th fallible call from now fails; 0: none), "kind" (0 cpu, 1 cuda,
 * 2 tpu), "cpu_max" (most devices a cpu client takes), "stats", "tiled", "raw", "dma", "delay_us", "minor", "major", "struct_size", "null_slot" (slot k of
 * the table becomes NULL), "restore" (the table as built), "reset" (counters to 0). */
FP_EXPORT void fake_pjrt_set(const char *key, long long v);
FP_EXPORT void fake_pjrt_set(const char *key, long long v)
{
    pthread_mutex_lock(&g.mu);
    fp_configure();
    if (!strcmp(key, "fail_at")) {
        g.fail_at = v ? g.calls + (long)v : 0;
    } else if (!strcmp(key, "kind")) {
        g.kind = (int)v;
    } else if (!strcmp(key, "stats")) {
        g.stats = (int)v;
    } else if (!strcmp(key, "tiled")) {
        g.tiled = (int)v;
    } else if (!strcmp(key, "raw")) {
        g.raw = (int)v;
    } else if (!strcmp(key, "dma")) {
        g.dma = (int)v;
        g_api.Client_DmaMap = g.dma ? fp_Client_DmaMap : NULL;
        g_api.Client_DmaUnmap = g.dma ? fp_Client_DmaUnmap : NULL;
    } else if (!strcmp(key, "cpu_max")) {
        g.cpu_max = (int)v;
    } else if (!strcmp(key, "delay_us")) {
        g.delay_us = (long)v;
    } else if (!strcmp(key, "minor")) {
        g_api.pjrt_api_version.minor_version = (int)v;
    } else if (!strcmp(key, "major")) {
        g_api.pjrt_api_version.major_version = (int)v;
    } else if (!strcmp(key, "struct_size")) {
        g_api.struct_size = (size_t)v;
    } else if (!strcmp(key, "null_slot") && v >= 0 && PJ_SLOT_OFFSET(v) + 8 <= sizeof g_api) {
        memset((char *)&g_api + PJ_SLOT_OFFSET(v), 0, 8);
    } else if (!strcmp(key, "restore")) {
        fp_fill_table();
    } else if (!strcmp(key, "reset")) {
        g.calls = g.injected = g.violations = g.bfhb = g.bfhb_strided = g.transfers = g.tohost = 0;
        g.raw_reads = g.dma_maps = g.dma_unmaps = g.clients_made = 0;
        g.fail_at = 0;
        g.fail_name[0] = '\0';
        g.injected_name[0] = '\0';
        for (size_t i = 0; i < sizeof g.per / sizeof g.per[0]; i++)
            g.per[i].n = 0;
    }
    pthread_mutex_unlock(&g.mu);
}

/* Calls of PJRT_<name> since the last reset. */
FP_EXPORT long long fake_pjrt_count(const char *name);
FP_EXPORT long long fake_pjrt_count(const char *name)
{
    long long n = 0;
    pthread_mutex_lock(&g.mu);
    for (size_t i = 0; i < sizeof g.per / sizeof g.per[0] && g.per[i].name; i++)
        if (!strcmp(g.per[i].name, name))
            n = g.per[i].n;
    pthread_mutex_unlock(&g.mu);
    return n;
}

/* The nth call of PJRT_<name> from the last reset on fails (FAKE_PJRT_FAIL=NAME:N). */
FP_EXPORT void fake_pjrt_fail(const char *name, long long nth);
FP_EXPORT void fake_pjrt_fail(const char *name, long long nth)
{
    pthread_mutex_lock(&g.mu);
    snprintf(g.fail_name, sizeof g.fail_name, "%s", name);
    g.fail_nth = (long)nth;
    pthread_mutex_unlock(&g.mu);
}

/* The call that was made to fail last ("" for none). */
FP_EXPORT const char *fake_pjrt_injected(void);
FP_EXPORT const char *fake_pjrt_injected(void)
{
    return g.injected_name;
}

__attribute__((destructor)) static void fp_exit(void)
{
    const char *path = getenv("FAKE_PJRT_LOG");
    pthread_mutex_lock(&g.mu);
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "calls=%ld injected=%ld violations=%ld", g.calls, g.injected, g.violations);
        for (int k = 0; k < FP_KINDS; k++)
            fprintf(f, " live_%s=%ld", fp_kind_names[k], g.counts[k]);
        fprintf(f, " bfhb=%ld bfhb_strided=%ld transfers=%ld tohost=%ld raw_reads=%ld "
                "dma_maps=%ld dma_unmaps=%ld live_dma=%ld client_opts=%d clients_made=%ld queued=%d "
                "first_violation=%s\n", g.bfhb, g.bfhb_strided, g.transfers, g.tohost,
                g.raw_reads, g.dma_maps, g.dma_unmaps, g.dma_live, g.client_opts, g.clients_made,
                g.head != NULL,
                g.violations ? g.first_violation : "none");
        fclose(f);
    }
    pthread_mutex_unlock(&g.mu);
}
