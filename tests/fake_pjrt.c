/* fake_pjrt.c - a host-memory PJRT plugin for the pjrt backend's tests (src/device/dev_pjrt*.c):
 * a shared library that exports GetPjrtApi with the table layout of ../shared/spec/pjrt-notes.md
 * (declared in src/device/dev_pjrt_abi.h) and implements the calls the backend makes.
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
 * takes cpu_device_count (default 4 devices), cuda preallocate and allocator (FAKE_PJRT_GPUS devices,
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
#include "device/dev_pjrt_abi.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FP_EXPORT __attribute__((visibility("default")))
#define FP_MAX_DEVICES 64
#define PJ_MAX_DIMS_FAKE 16
#define FP_MAGIC 0x504a5254u
#define FP_DEAD 0xdeadu

/* ---- objects: a header each, kept until exit so that a stale handle is caught, not UB -------- */

typedef enum fp_kind { FP_ERROR, FP_EVENT, FP_CLIENT, FP_BUFFER, FP_TM, FP_KINDS } fp_kind;
static const char *const fp_kind_names[FP_KINDS] = {"error", "event", "client", "buffer", "tm"};

typedef struct fp_obj {
    unsigned magic;
    fp_kind kind;
    struct fp_obj *all;   /* every object ever made, freed at exit */
} fp_obj;

struct PJRT_Error { fp_obj h; int code; char msg[192]; };
struct PJRT_Event { fp_obj h; int ready; };
struct PJRT_Memory { int device; };
struct PJRT_DeviceDescription { int id; };
struct PJRT_Device {
    int id;
    PJRT_DeviceDescription desc;
    PJRT_Memory mem;
};
#define FP_MAX_MAPS 16
struct PJRT_Client {
    fp_obj h;
    int n_devices;
    PJRT_Device dev[FP_MAX_DEVICES];
    PJRT_Device *list[FP_MAX_DEVICES];
    long live_buffers;
    struct { const unsigned char *p; size_t n; } maps[FP_MAX_MAPS]; /* DmaMap'd ranges */
};
struct PJRT_Buffer {
    fp_obj h;
    PJRT_Client *client;
    int device, type;
    int64_t dims[PJ_MAX_DIMS_FAKE];
    int64_t minor_to_major[PJ_MAX_DIMS_FAKE];
    size_t ndim, bytes;
    unsigned char *data;
    int jobs;             /* copies queued into or out of it */
    int incomplete;       /* a transfer manager's buffer never closed with is_last */
};
struct PJRT_AsyncHostToDeviceTransferManager {
    fp_obj h;
    PJRT_Buffer *buf;
    int retrieved, closed, jobs;
};

/* ---- process state (one mutex) ---------------------------------------------------------------- */

typedef struct fp_job {
    struct fp_job *next;
    uint64_t due_ns;
    PJRT_Event *ev;
    PJRT_Buffer *buf;            /* copied into (h2d) or out of (d2h) */
    PJRT_AsyncHostToDeviceTransferManager *tm;
    const unsigned char *src;    /* h2d: host source */
    int64_t strides[PJ_MAX_DIMS_FAKE];
    int strided;
    size_t off, n;               /* h2d into buf->data + off; d2h: n bytes from buf->data + off */
    unsigned char *dst;          /* d2h */
    int scramble;                /* d2h: raw bytes of a tiled layout, not in row-major order */
    uint64_t hash;               /* h2d: of the source at the call */
} fp_job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* a job queued, an event fired */
    int started, worker;
    pthread_t th;
    fp_job *head, *tail;
    fp_obj *all;
    int initialized, configured;
    int kind;                    /* 0 cpu, 1 cuda, 2 tpu */
    int stats, tiled;
    int raw;                     /* CopyRawToHost: 1 implemented, 0 UNIMPLEMENTED */
    int dma;                     /* DmaMap/DmaUnmap: 0 missing, 1 work, 2 fail, 3 UNIMPLEMENTED */
    int cuda_devices;            /* devices of a cuda client */
    long dma_maps, dma_unmaps, dma_live;
    long delay_us;
    long fail_at, fail_nth;
    char fail_name[64];
    long counts[FP_KINDS];       /* live objects */
    long calls, injected, violations, bfhb, bfhb_strided, transfers, tohost, creates, raw_reads;
    int client_opts;             /* option set of the last client made: 1 cpu, 2 cuda, 3 none */
    char first_violation[256];
    char injected_name[64];      /* the call that failed last on purpose */
    struct { const char *name; long n; } per[64]; /* calls of each entry point since the reset */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .delay_us = 200};

static PJRT_Api g_api;

static void fp_violation(const char *fmt, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    if (!g.violations++)
        snprintf(g.first_violation, sizeof g.first_violation, "%s", msg);
    fprintf(stderr, "fake_pjrt: VIOLATION: %s\n", msg);
}

static void *fp_new(size_t size, fp_kind kind)
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

static int fp_live(const void *p, fp_kind kind)
{
    const fp_obj *o = p;
    return o && o->magic == FP_MAGIC && o->kind == kind;
}

static void fp_kill(void *p)
{
    fp_obj *o = p;
    o->magic = FP_DEAD;
    g.counts[o->kind]--;
}

static PJRT_Error *fp_error(int code, const char *fmt, const char *what)
{
    PJRT_Error *e = fp_new(sizeof *e, FP_ERROR);
    e->code = code;
    snprintf(e->msg, sizeof e->msg, fmt, what);
    return e;
}

static uint64_t fp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
static PJRT_Error *fp_enter(const char *name, size_t struct_size, size_t need)
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

#define FP_ENTER(name, T, last)                                                     \
    PJRT_Error *fp_e_ = fp_enter(name, a->struct_size, PJRT_STRUCT_SIZE(T, last)); \
    if (fp_e_) {                                                                    \
        pthread_mutex_unlock(&g.mu);                                                \
        return fp_e_;                                                               \
    }

#define FP_FAIL(code, fmt, what)                            \
    do {                                                    \
        PJRT_Error *fp_x_ = fp_error((code), (fmt), (what)); \
        pthread_mutex_unlock(&g.mu);                        \
        return fp_x_;                                       \
    } while (0)

/* ---- the worker: delayed copies ---------------------------------------------------------------- */

static uint64_t fp_hash(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The job's host source, in the buffer's element order, hashed (copied into dst when not NULL). */
static uint64_t fp_gather(const fp_job *j, unsigned char *dst)
{
    const PJRT_Buffer *b = j->buf;
    if (!j->strided) {
        if (dst)
            memcpy(dst, j->src, j->n);
        return fp_hash(1469598103934665603ull, j->src, j->n);
    }
    size_t count = 1;
    for (size_t k = 0; k < b->ndim; k++)
        count *= (size_t)b->dims[k];
    const size_t elem = count ? b->bytes / count : 0;
    uint64_t h = 1469598103934665603ull;
    int64_t idx[PJ_MAX_DIMS_FAKE] = {0};
    for (size_t e = 0; e < count; e++) {
        int64_t off = 0;
        for (size_t k = 0; k < b->ndim; k++)
            off += idx[k] * j->strides[k];
        h = fp_hash(h, j->src + off, elem);
        if (dst)
            memcpy(dst + e * elem, j->src + off, elem);
        for (size_t k = b->ndim; k-- > 0;) {
            if (++idx[k] < b->dims[k])
                break;
            idx[k] = 0;
        }
    }
    return h;
}

static void fp_run(fp_job *j)
{
    if (j->dst) {
        memcpy(j->dst, j->buf->data + j->off, j->n);
        for (size_t i = 0; j->scramble && i < j->n; i++)
            j->dst[i] ^= 0x5a;
        g.tohost++;
    } else {
        if (fp_gather(j, NULL) != j->hash)
            fp_violation("%s", "a host buffer changed before its done event fired");
        if (j->strided)
            (void)fp_gather(j, j->buf->data);
        else
            memcpy(j->buf->data + j->off, j->src, j->n);
    }
    j->ev->ready = 1;
    j->buf->jobs--;
    if (j->buf->h.magic == FP_DEAD && j->buf->jobs == 0) {
        free(j->buf->data);
        j->buf->data = NULL;
    }
    if (j->tm)
        j->tm->jobs--;
}

static void *fp_worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    for (;;) {
        while (!g.head)
            pthread_cond_wait(&g.cv, &g.mu);
        fp_job *j = g.head;
        const uint64_t now = fp_now_ns();
        if (now < j->due_ns) {
            const uint64_t wait = j->due_ns - now;
            pthread_mutex_unlock(&g.mu);
            nanosleep(&(struct timespec){.tv_sec = (time_t)(wait / 1000000000u),
                                         .tv_nsec = (long)(wait % 1000000000u)}, NULL);
            pthread_mutex_lock(&g.mu);
            continue;
        }
        g.head = j->next;
        if (!g.head)
            g.tail = NULL;
        fp_run(j);
        free(j);
        pthread_cond_broadcast(&g.cv);
    }
    return NULL;
}

/* Queues j (g.mu held) and returns its event. */
static PJRT_Event *fp_queue(fp_job *j)
{
    if (!g.started) {
        g.started = 1;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&g.th, &at, fp_worker, NULL) != 0)
            abort();
        pthread_attr_destroy(&at);
    }
    j->ev = fp_new(sizeof *j->ev, FP_EVENT);
    j->due_ns = fp_now_ns() + (uint64_t)g.delay_us * 1000u;
    j->buf->jobs++;
    if (j->tm)
        j->tm->jobs++;
    if (g.tail)
        g.tail->next = j;
    else
        g.head = j;
    g.tail = j;
    pthread_cond_broadcast(&g.cv);
    return j->ev;
}

static PJRT_Event *fp_ready_event(void)
{
    PJRT_Event *ev = fp_new(sizeof *ev, FP_EVENT);
    ev->ready = 1;
    return ev;
}

static fp_job *fp_job_new(void)
{
    fp_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    return j;
}

/* ---- errors and events ------------------------------------------------------------------------ */

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

static PJRT_Error *fp_Event_Destroy(PJRT_Event_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->event, FP_EVENT))
        fp_violation("%s", "Event_Destroy of a dead or unknown event");
    else
        fp_kill(a->event);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Event_IsReady(PJRT_Event_IsReady_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Event_IsReady", PJRT_Event_IsReady_Args, is_ready);
    if (!fp_live(a->event, FP_EVENT))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "IsReady of a dead event");
    a->is_ready = a->event->ready;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* An injected failure comes after the wait: a failed event is one that has completed (with an
 * error), so its host memory is free then, as with a real plugin. */
static PJRT_Error *fp_Event_Await(PJRT_Event_Await_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->event, FP_EVENT)) {
        fp_violation("%s", "Event_Await of a dead or unknown event");
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "Await of a dead event");
    }
    while (!a->event->ready)
        pthread_cond_wait(&g.cv, &g.mu);
    FP_ENTER("Event_Await", PJRT_Event_Await_Args, event);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* ---- clients and devices ---------------------------------------------------------------------- */

/* The option sets of each plugin kind (the real ones refuse any other key). */
static PJRT_Error *fp_options(const PJRT_Client_Create_Args *a, int *n_devices)
{
    static const char *const keys[3][2] = {{"cpu_device_count", NULL},
                                          {"preallocate", "allocator"}, {NULL, NULL}};
    static const int types[3][2] = {{PJRT_NamedValue_kInt64, -1},
                                    {PJRT_NamedValue_kBool, PJRT_NamedValue_kString}, {-1, -1}};
    *n_devices = g.kind == 1 ? g.cuda_devices : 4;
    for (size_t i = 0; i < a->num_options; i++) {
        const PJRT_NamedValue *nv = &a->create_options[i];
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)nv->name_size, nv->name);
        int ok = 0;
        for (int k = 0; k < 2; k++)
            ok |= keys[g.kind][k] && !strcmp(name, keys[g.kind][k]) && nv->type == types[g.kind][k];
        if (!ok)
            return fp_error(PJRT_Error_Code_INVALID_ARGUMENT,
                            "Unexpected option name passed to PJRT_Client_Create: %s", name);
        if (!strcmp(name, "cpu_device_count"))
            *n_devices = (int)nv->int64_value;
    }
    return NULL;
}

static PJRT_Error *fp_Client_Create(PJRT_Client_Create_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_Create", PJRT_Client_Create_Args, kv_try_get_user_arg);
    int n = 0;
    PJRT_Error *e = fp_options(a, &n);
    if (e) {
        pthread_mutex_unlock(&g.mu);
        return e;
    }
    if (n < 1 || n > FP_MAX_DEVICES)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "bad device count");
    PJRT_Client *c = fp_new(sizeof *c, FP_CLIENT);
    c->n_devices = n;
    for (int d = 0; d < n; d++) {
        c->dev[d] = (PJRT_Device){.id = d, .desc = {.id = d}, .mem = {.device = d}};
        c->list[d] = &c->dev[d];
    }
    g.client_opts = g.kind + 1;
    a->client = c;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Client_Destroy(PJRT_Client_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->client, FP_CLIENT)) {
        fp_violation("%s", "Client_Destroy of a dead or unknown client");
    } else {
        if (a->client->live_buffers)
            fp_violation("%s", "a client destroyed before its buffers");
        for (int i = 0; i < FP_MAX_MAPS; i++)
            if (a->client->maps[i].p)
                fp_violation("%s", "a client destroyed with host memory still DMA-mapped");
        fp_kill(a->client);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Client_PlatformName(PJRT_Client_PlatformName_Args *a)
{
    static const char *const names[] = {"cpu", "cuda", "tpu"};
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_PlatformName", PJRT_Client_PlatformName_Args, platform_name_size);
    if (!fp_live(a->client, FP_CLIENT))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead client");
    a->platform_name = names[g.kind];
    a->platform_name_size = strlen(names[g.kind]);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Client_AddressableDevices(PJRT_Client_AddressableDevices_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_AddressableDevices", PJRT_Client_AddressableDevices_Args,
             num_addressable_devices);
    if (!fp_live(a->client, FP_CLIENT))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead client");
    a->addressable_devices = a->client->list;
    a->num_addressable_devices = (size_t)a->client->n_devices;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_DeviceDescription_Id(PJRT_DeviceDescription_Id_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("DeviceDescription_Id", PJRT_DeviceDescription_Id_Args, id);
    a->id = a->device_description->id;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("DeviceDescription_Kind", PJRT_DeviceDescription_Kind_Args, device_kind_size);
    a->device_kind = "fake";
    a->device_kind_size = 4;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Device_GetDescription(PJRT_Device_GetDescription_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Device_GetDescription", PJRT_Device_GetDescription_Args, device_description);
    a->device_description = &a->device->desc;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Device_DefaultMemory(PJRT_Device_DefaultMemory_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Device_DefaultMemory", PJRT_Device_DefaultMemory_Args, memory);
    a->memory = &a->device->mem;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Bytes of the live buffers on device id (g.mu held). */
static int64_t fp_bytes_on(int id)
{
    int64_t sum = 0;
    for (fp_obj *o = g.all; o; o = o->all)
        if (fp_live(o, FP_BUFFER) && ((PJRT_Buffer *)o)->device == id)
            sum += (int64_t)((PJRT_Buffer *)o)->bytes;
    return sum;
}

static PJRT_Error *fp_Device_MemoryStats(PJRT_Device_MemoryStats_Args *a)
{
    pthread_mutex_lock(&g.mu);
    /* plugins before 0.113 take the shorter struct */
    FP_ENTER("Device_MemoryStats", PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set);
    if (!g.stats)
        FP_FAIL(PJRT_Error_Code_UNIMPLEMENTED, "fake_pjrt: %s", "MemoryStats not implemented");
    a->bytes_in_use = fp_bytes_on(a->device->id);
    a->bytes_limit = (int64_t)1 << 30;
    a->bytes_limit_is_set = true;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* ---- buffers ---------------------------------------------------------------------------------- */

static const int fp_type_bytes[] = {[PJRT_Buffer_Type_PRED] = 1, [PJRT_Buffer_Type_S8] = 1,
    [PJRT_Buffer_Type_S16] = 2, [PJRT_Buffer_Type_S32] = 4, [PJRT_Buffer_Type_S64] = 8,
    [PJRT_Buffer_Type_U8] = 1, [PJRT_Buffer_Type_U16] = 2, [PJRT_Buffer_Type_U32] = 4,
    [PJRT_Buffer_Type_U64] = 8, [PJRT_Buffer_Type_F16] = 2, [PJRT_Buffer_Type_F32] = 4,
    [PJRT_Buffer_Type_F64] = 8, [PJRT_Buffer_Type_BF16] = 2, [PJRT_Buffer_Type_C64] = 8,
    [PJRT_Buffer_Type_F8E5M2] = 1, [PJRT_Buffer_Type_F8E4M3FN] = 1,
    [PJRT_Buffer_Type_F8E5M2FNUZ] = 1, [PJRT_Buffer_Type_F8E4M3FNUZ] = 1,
    [PJRT_Buffer_Type_F8E8M0FNU] = 1};

/* A new buffer of type/dims on device `device` of c, or NULL (g.mu held). */
static PJRT_Buffer *fp_buffer_new(PJRT_Client *c, int device, int type, const int64_t *dims,
                                  size_t ndim)
{
    const int ntypes = (int)(sizeof fp_type_bytes / sizeof fp_type_bytes[0]);
    if (type < 0 || type >= ntypes || !fp_type_bytes[type] || ndim > PJ_MAX_DIMS_FAKE)
        return NULL;
    size_t count = 1;
    for (size_t k = 0; k < ndim; k++) {
        if (dims[k] < 0)
            return NULL;
        count *= (size_t)dims[k];
    }
    PJRT_Buffer *b = fp_new(sizeof *b, FP_BUFFER);
    b->client = c;
    b->device = device;
    b->type = type;
    b->ndim = ndim;
    for (size_t k = 0; k < ndim; k++) {
        b->dims[k] = dims[k];
        b->minor_to_major[k] = (int64_t)(ndim - 1 - k);
    }
    b->bytes = count * (size_t)fp_type_bytes[type];
    b->data = calloc(1, b->bytes + 1);
    c->live_buffers++;
    return b;
}

static int fp_device_of(const PJRT_Client *c, const PJRT_Device *dev)
{
    for (int d = 0; d < c->n_devices; d++)
        if (dev == &c->dev[d])
            return d;
    return -1;
}

static PJRT_Error *fp_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_BufferFromHostBuffer", PJRT_Client_BufferFromHostBuffer_Args, buffer);
    if (!fp_live(a->client, FP_CLIENT))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead client");
    const int dev = fp_device_of(a->client, a->device);
    if (dev < 0 || a->memory || a->device_layout || !a->data)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s",
                "BufferFromHostBuffer: bad device, memory, layout or data");
    if (a->byte_strides && a->num_byte_strides != a->num_dims)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "byte_strides count");
    PJRT_Buffer *b = fp_buffer_new(a->client, dev, a->type, a->dims, a->num_dims);
    if (!b)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "bad type or dims");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->src = a->data;
    j->n = b->bytes;
    j->strided = a->byte_strides != NULL;
    for (size_t k = 0; j->strided && k < a->num_dims; k++)
        j->strides[k] = a->byte_strides[k];
    g.bfhb++;
    g.bfhb_strided += j->strided;
    if (a->host_buffer_semantics == PJRT_HostBufferSemantics_kImmutableOnlyDuringCall) {
        (void)fp_gather(j, b->data); /* copied now: the host buffer is free on return */
        free(j);
        a->done_with_host_buffer = fp_ready_event();
    } else {
        j->hash = fp_gather(j, NULL);
        a->done_with_host_buffer = fp_queue(j);
    }
    a->buffer = b;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Buffer_Destroy(PJRT_Buffer_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    PJRT_Buffer *b = a->buffer;
    if (!fp_live(b, FP_BUFFER)) {
        fp_violation("%s", "Buffer_Destroy of a dead or unknown buffer");
    } else {
        b->client->live_buffers--;
        fp_kill(b);
        if (!b->jobs) {
            free(b->data);
            b->data = NULL;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

#define FP_BUFFER_ARG(name, T, last, field)                                     \
    pthread_mutex_lock(&g.mu);                                                  \
    FP_ENTER(name, T, last);                                                    \
    if (!fp_live(a->field, FP_BUFFER)) {                                        \
        fp_violation("%s", name " of a dead or unknown buffer");                \
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead buffer"); \
    }

static PJRT_Error *fp_Buffer_ElementType(PJRT_Buffer_ElementType_Args *a)
{
    FP_BUFFER_ARG("Buffer_ElementType", PJRT_Buffer_ElementType_Args, type, buffer);
    a->type = a->buffer->type;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args *a)
{
    FP_BUFFER_ARG("Buffer_Dimensions", PJRT_Buffer_Dimensions_Args, num_dims, buffer);
    a->dims = a->buffer->dims;
    a->num_dims = a->buffer->ndim;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args *a)
{
    FP_BUFFER_ARG("Buffer_OnDeviceSizeInBytes", PJRT_Buffer_OnDeviceSizeInBytes_Args,
                  on_device_size_in_bytes, buffer);
    a->on_device_size_in_bytes = a->buffer->bytes;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args *a)
{
    static const int64_t tile[2] = {8, 128};
    static const size_t tile_sizes[1] = {2};
    FP_BUFFER_ARG("Buffer_GetMemoryLayout", PJRT_Buffer_GetMemoryLayout_Args, layout, buffer);
    memset(&a->layout, 0, sizeof a->layout);
    a->layout.struct_size = PJRT_STRUCT_SIZE(PJRT_Buffer_MemoryLayout, type);
    a->layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
    a->layout.tiled.struct_size = PJRT_STRUCT_SIZE(PJRT_Buffer_MemoryLayout_Tiled, num_tiles);
    a->layout.tiled.minor_to_major = a->buffer->minor_to_major;
    a->layout.tiled.minor_to_major_size = a->buffer->ndim;
    if (g.tiled) { /* as a TPU reports (8, 128) tiles */
        a->layout.tiled.tile_dims = tile;
        a->layout.tiled.tile_dim_sizes = tile_sizes;
        a->layout.tiled.num_tiles = 1;
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* NULL (the device layout) or dense row-major without tiles. */
static int fp_row_major(const PJRT_Buffer_MemoryLayout *l, size_t ndim)
{
    if (!l)
        return 1;
    if (l->type != PJRT_Buffer_MemoryLayout_Type_Tiled || l->tiled.num_tiles ||
        l->tiled.minor_to_major_size != ndim)
        return 0;
    for (size_t k = 0; k < ndim; k++)
        if (l->tiled.minor_to_major[k] != (int64_t)(ndim - 1 - k))
            return 0;
    return 1;
}

static PJRT_Error *fp_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args *a)
{
    FP_BUFFER_ARG("Buffer_ToHostBuffer", PJRT_Buffer_ToHostBuffer_Args, event, src);
    PJRT_Buffer *b = a->src;
    if (!a->dst) {
        a->dst_size = b->bytes;
        pthread_mutex_unlock(&g.mu);
        return NULL;
    }
    if (b->incomplete)
        FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "buffer never completed");
    if (!fp_row_major(a->host_layout, b->ndim) || a->dst_size < b->bytes)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "ToHostBuffer: layout or size");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->dst = a->dst;
    j->n = b->bytes;
    a->event = fp_queue(j);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Raw on-device bytes [offset, offset + transfer_size), delayed like ToHostBuffer. With a tiled
 * layout (FAKE_PJRT_TILED) they come back in another order than row-major, as a TPU's tiles do, so
 * a backend that reads them as logical bytes gets wrong ones. */
static PJRT_Error *fp_Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args *a)
{
    FP_BUFFER_ARG("Buffer_CopyRawToHost", PJRT_Buffer_CopyRawToHost_Args, event, buffer);
    PJRT_Buffer *b = a->buffer;
    if (!g.raw)
        FP_FAIL(PJRT_Error_Code_UNIMPLEMENTED, "fake_pjrt: %s", "CopyRawToHost not implemented");
    if (b->incomplete)
        FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "buffer never completed");
    if (!a->dst || a->offset < 0 || a->transfer_size < 0 ||
        (uint64_t)a->offset + (uint64_t)a->transfer_size > b->bytes)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "CopyRawToHost out of range");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->dst = a->dst;
    j->off = (size_t)a->offset;
    j->n = (size_t)a->transfer_size;
    j->scramble = g.tiled;
    a->event = fp_queue(j);
    g.raw_reads++;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* ---- the async host-to-device transfer manager ------------------------------------------------ */

static PJRT_Error *fp_CreateBuffersForAsyncHostToDevice(
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_CreateBuffersForAsyncHostToDevice",
             PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, transfer_manager);
    if (!fp_live(a->client, FP_CLIENT) || !a->memory || a->num_shape_specs != 1 ||
        a->shape_specs[0].struct_size < PJRT_STRUCT_SIZE(PJRT_ShapeSpec, element_type))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s",
                "CreateBuffersForAsyncHostToDevice: client, memory or one shape spec");
    const PJRT_ShapeSpec *s = &a->shape_specs[0];
    PJRT_Buffer *b = fp_buffer_new(a->client, a->memory->device, s->element_type, s->dims,
                                   s->num_dims);
    if (!b)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "bad shape spec");
    b->incomplete = 1;
    PJRT_AsyncHostToDeviceTransferManager *tm = fp_new(sizeof *tm, FP_TM);
    tm->buf = b;
    a->transfer_manager = tm;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

#define FP_TM_ARG(name, T, last)                                               \
    pthread_mutex_lock(&g.mu);                                                 \
    FP_ENTER(name, T, last);                                                   \
    if (!fp_live(a->transfer_manager, FP_TM)) {                                \
        fp_violation("%s", name " of a dead or unknown transfer manager");     \
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "dead manager"); \
    }

static PJRT_Error *fp_TM_RetrieveBuffer(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args *a)
{
    FP_TM_ARG("AsyncHostToDeviceTransferManager_RetrieveBuffer",
              PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_out);
    PJRT_AsyncHostToDeviceTransferManager *tm = a->transfer_manager;
    if (a->buffer_index != 0 || tm->retrieved)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "buffer retrieved twice");
    tm->retrieved = 1;
    a->buffer_out = tm->buf;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

static PJRT_Error *fp_TM_TransferData(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args *a)
{
    FP_TM_ARG("AsyncHostToDeviceTransferManager_TransferData",
              PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, done_with_h2d_transfer);
    PJRT_AsyncHostToDeviceTransferManager *tm = a->transfer_manager;
    PJRT_Buffer *b = tm->buf;
    if (tm->closed) {
        fp_violation("%s", "TransferData after the last transfer");
        FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "transfer after the last");
    }
    if (a->buffer_index != 0 || a->offset < 0 || a->transfer_size < 0 || !a->data ||
        (uint64_t)a->offset + (uint64_t)a->transfer_size > b->bytes)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "TransferData out of range");
    fp_job *j = fp_job_new();
    j->buf = b;
    j->tm = tm;
    j->src = a->data;
    j->off = (size_t)a->offset;
    j->n = (size_t)a->transfer_size;
    j->hash = fp_gather(j, NULL);
    a->done_with_h2d_transfer = fp_queue(j);
    g.transfers++;
    if (a->is_last_transfer) {
        tm->closed = 1;
        b->incomplete = 0;
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Blocks until the manager's transfers in flight are done, as the real one does. */
static PJRT_Error *fp_TM_Destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    PJRT_AsyncHostToDeviceTransferManager *tm = a->transfer_manager;
    if (!fp_live(tm, FP_TM)) {
        fp_violation("%s", "transfer manager destroyed twice or unknown");
    } else {
        while (tm->jobs)
            pthread_cond_wait(&g.cv, &g.mu);
        if (!tm->retrieved && fp_live(tm->buf, FP_BUFFER)) { /* its buffer goes with it */
            tm->buf->client->live_buffers--;
            fp_kill(tm->buf);
            free(tm->buf->data);
            tm->buf->data = NULL;
        }
        fp_kill(tm);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* ---- DMA mapping -------------------------------------------------------------------------------- */

/* As cudaHostRegister: one registration per host range; mapping memory that is already mapped,
 * and unmapping what is not, are errors (and violations: the backend maps its staging once);
 * unmapping a range that a queued copy still reads is a violation. */
static PJRT_Error *fp_Client_DmaMap(PJRT_Client_DmaMap_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_DmaMap", PJRT_Client_DmaMap_Args, size);
    PJRT_Client *c = a->client;
    if (!fp_live(c, FP_CLIENT) || !a->data || !a->size)
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "DmaMap: client, data or size");
    if (g.dma == 2)
        FP_FAIL(PJRT_Error_Code_INTERNAL, "fake_pjrt: %s", "cudaHostRegister failed (FAKE_PJRT_DMA=2)");
    if (g.dma == 3)
        FP_FAIL(PJRT_Error_Code_UNIMPLEMENTED, "fake_pjrt: %s", "DmaMap not implemented");
    const unsigned char *p = a->data;
    const uintptr_t lo = (uintptr_t)p, hi = lo + a->size;
    int slot = -1;
    for (int i = 0; i < FP_MAX_MAPS; i++) {
        const uintptr_t mlo = (uintptr_t)c->maps[i].p, mhi = mlo + c->maps[i].n;
        if (c->maps[i].p && lo < mhi && mlo < hi) {
            fp_violation("%s", "DmaMap of host memory that is already mapped");
            FP_FAIL(PJRT_Error_Code_FAILED_PRECONDITION, "fake_pjrt: %s", "already mapped");
        }
        slot = slot < 0 && !c->maps[i].p ? i : slot;
    }
    if (slot < 0)
        FP_FAIL(PJRT_Error_Code_RESOURCE_EXHAUSTED, "fake_pjrt: %s", "too many mapped ranges");
    c->maps[slot].p = p;
    c->maps[slot].n = a->size;
    g.dma_maps++;
    g.dma_live++;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Never fails on purpose (like the destroys): an unmap that fails leaves nothing to do. */
static PJRT_Error *fp_Client_DmaUnmap(PJRT_Client_DmaUnmap_Args *a)
{
    pthread_mutex_lock(&g.mu);
    PJRT_Client *c = a->client;
    int found = 0;
    for (int i = 0; fp_live(c, FP_CLIENT) && i < FP_MAX_MAPS && !found; i++)
        if (c->maps[i].p && c->maps[i].p == a->data) {
            /* a copy still queued from the range would read memory the runtime let go of */
            const uintptr_t mlo = (uintptr_t)c->maps[i].p, mhi = mlo + c->maps[i].n;
            for (const fp_job *j = g.head; j; j = j->next)
                if (!j->dst && (uintptr_t)j->src >= mlo && (uintptr_t)j->src < mhi)
                    fp_violation("%s", "DmaUnmap while a copy from the range is in flight");
            c->maps[i].p = NULL;
            found = 1;
        }
    if (!found) {
        fp_violation("%s", "DmaUnmap of host memory that is not mapped (or a dead client)");
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "not mapped");
    }
    g.dma_unmaps++;
    g.dma_live--;
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
 * "transfers", "tohost", "client_opts", "raw_reads", "dma_maps", "dma_unmaps", "live_dma"; -1 for
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
        {"live_dma", g.dma_live}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (!strcmp(key, c[i].k))
            v = c[i].v;
    pthread_mutex_unlock(&g.mu);
    return v;
}

/* Settings: "fail_at" (the N-th fallible call from now fails; 0: none), "kind" (0 cpu, 1 cuda,
 * 2 tpu), "stats", "tiled", "raw", "dma", "delay_us", "minor", "major", "struct_size", "null_slot" (slot k of
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
        g.raw_reads = g.dma_maps = g.dma_unmaps = 0;
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
                "dma_maps=%ld dma_unmaps=%ld live_dma=%ld client_opts=%d queued=%d "
                "first_violation=%s\n", g.bfhb, g.bfhb_strided, g.transfers, g.tohost,
                g.raw_reads, g.dma_maps, g.dma_unmaps, g.dma_live, g.client_opts, g.head != NULL,
                g.violations ? g.first_violation : "none");
        fclose(f);
    }
    pthread_mutex_unlock(&g.mu);
}
