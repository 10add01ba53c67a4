/* fake_pjrt_client.c - the host-memory PJRT plugin's clients and devices (fake_pjrt.c describes
 * the plugin): Client_Create with each plugin kind's option set, the device list and descriptions,
 * MemoryStats (FAKE_PJRT_STATS), and Client_DmaMap/DmaUnmap kept as cudaHostRegister keeps its
 * registrations (FAKE_PJRT_DMA). */
#define _POSIX_C_SOURCE 200809L
#include "fake_pjrt.h"

#include <stdio.h>
#include <string.h>

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

PJRT_Error *fp_Client_Create(PJRT_Client_Create_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Client_Create", PJRT_Client_Create_Args, kv_try_get_user_arg);
    int n = 0;
    PJRT_Error *e = fp_options(a, &n);
    if (e) {
        pthread_mutex_unlock(&g.mu);
        return e;
    }
    if (n < 1 || n > FP_MAX_DEVICES || (g.kind == 0 && n > g.cpu_max))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "bad device count");
    PJRT_Client *c = fp_new(sizeof *c, FP_CLIENT);
    c->n_devices = n;
    for (int d = 0; d < n; d++) {
        c->dev[d] = (PJRT_Device){.id = d, .desc = {.id = d}, .mem = {.device = d}};
        c->list[d] = &c->dev[d];
    }
    g.client_opts = g.kind + 1;
    g.clients_made++;
    a->client = c;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Client_Destroy(PJRT_Client_Destroy_Args *a)
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

PJRT_Error *fp_Client_PlatformName(PJRT_Client_PlatformName_Args *a)
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

PJRT_Error *fp_Client_AddressableDevices(PJRT_Client_AddressableDevices_Args *a)
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

PJRT_Error *fp_DeviceDescription_Id(PJRT_DeviceDescription_Id_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("DeviceDescription_Id", PJRT_DeviceDescription_Id_Args, id);
    a->id = a->device_description->id;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("DeviceDescription_Kind", PJRT_DeviceDescription_Kind_Args, device_kind_size);
    a->device_kind = "fake";
    a->device_kind_size = 4;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Device_GetDescription(PJRT_Device_GetDescription_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Device_GetDescription", PJRT_Device_GetDescription_Args, device_description);
    a->device_description = &a->device->desc;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Device_DefaultMemory(PJRT_Device_DefaultMemory_Args *a)
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

PJRT_Error *fp_Device_MemoryStats(PJRT_Device_MemoryStats_Args *a)
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

/* ---- DMA mapping -------------------------------------------------------------------------------- */

/* As cudaHostRegister: one registration per host range; mapping memory that is already mapped,
 * and unmapping what is not, are errors (and violations: the backend maps its staging once);
 * unmapping a range that a queued copy still reads is a violation. */
PJRT_Error *fp_Client_DmaMap(PJRT_Client_DmaMap_Args *a)
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
PJRT_Error *fp_Client_DmaUnmap(PJRT_Client_DmaUnmap_Args *a)
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
