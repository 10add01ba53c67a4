/* fake_pjrt.h - private to tests/fake_pjrt*.c, the pieces of the host-memory PJRT plugin
 * (libfake_pjrt.so; what it does and its knobs: fake_pjrt.c): the objects behind the PJRT handles,
 * the delayed copies, the process state under its one mutex, the entry checks, and each piece's
 * functions. Nothing here is exported (the library is built with hidden visibility; FP_EXPORT marks
 * GetPjrtApi and the fake_pjrt_* controls). */
#ifndef SL_FAKE_PJRT_H
#define SL_FAKE_PJRT_H

#include "device/dev_pjrt_abi.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define FP_MAX_DEVICES 64
#define PJ_MAX_DIMS_FAKE 16
#define FP_MAGIC 0x504a5254u
#define FP_DEAD 0xdeadu

/* ---- objects: a header each, kept until exit so that a stale handle is caught, not UB -------- */

typedef enum fp_kind { FP_ERROR, FP_EVENT, FP_CLIENT, FP_BUFFER, FP_TM, FP_KINDS } fp_kind;

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

typedef struct fp_state {
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
    int cpu_max;                 /* most devices a cpu client takes (cpu_device_count above it:
                                    INVALID_ARGUMENT, as a plugin with a cap would answer) */
    long clients_made;           /* clients created since the last reset */
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
} fp_state;

/* The process state (every field under g.mu) and the table GetPjrtApi returns: fake_pjrt.c. */
extern fp_state g;
extern PJRT_Api g_api;

/* ---- fake_pjrt.c: objects, the entry checks --------------------------------------------------- */

/* Counts a broken rule of the PJRT contract and prints it (fmt takes what); g.mu held. */
void fp_violation(const char *fmt, const char *what);
/* A zeroed object of size bytes with its header, counted live (g.mu held; aborts without memory). */
void *fp_new(size_t size, fp_kind kind);
/* 1 when p is a live object of that kind (not destroyed, not a stray pointer). */
int fp_live(const void *p, fp_kind kind);
/* Marks p destroyed; its memory stays until exit, so later use of the handle is caught. */
void fp_kill(void *p);
/* A new PJRT_Error of code whose message is fmt formatted with what (g.mu held). */
PJRT_Error *fp_error(int code, const char *fmt, const char *what);

/* Every fallible call starts here (g.mu held): the initialization rule, the args' size, and the
 * failure to inject. */
PJRT_Error *fp_enter(const char *name, size_t struct_size, size_t need);

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

/* ---- fake_pjrt_events.c: the worker, delayed copies, events ----------------------------------- */

/* The job's host source, in the buffer's element order, hashed (copied into dst when not NULL). */
uint64_t fp_gather(const fp_job *j, unsigned char *dst);
/* Queues j (g.mu held) and returns its event. */
PJRT_Event *fp_queue(fp_job *j);
/* An event that has already fired (g.mu held). */
PJRT_Event *fp_ready_event(void);
/* A zeroed job (aborts when out of memory). */
fp_job *fp_job_new(void);
PJRT_Error *fp_Event_Destroy(PJRT_Event_Destroy_Args *a);
PJRT_Error *fp_Event_IsReady(PJRT_Event_IsReady_Args *a);
PJRT_Error *fp_Event_Await(PJRT_Event_Await_Args *a);

/* ---- fake_pjrt_client.c: clients, devices, DMA mapping ---------------------------------------- */

PJRT_Error *fp_Client_Create(PJRT_Client_Create_Args *a);
PJRT_Error *fp_Client_Destroy(PJRT_Client_Destroy_Args *a);
PJRT_Error *fp_Client_PlatformName(PJRT_Client_PlatformName_Args *a);
PJRT_Error *fp_Client_AddressableDevices(PJRT_Client_AddressableDevices_Args *a);
PJRT_Error *fp_DeviceDescription_Id(PJRT_DeviceDescription_Id_Args *a);
PJRT_Error *fp_DeviceDescription_Kind(PJRT_DeviceDescription_Kind_Args *a);
PJRT_Error *fp_Device_GetDescription(PJRT_Device_GetDescription_Args *a);
PJRT_Error *fp_Device_DefaultMemory(PJRT_Device_DefaultMemory_Args *a);
PJRT_Error *fp_Device_MemoryStats(PJRT_Device_MemoryStats_Args *a);
PJRT_Error *fp_Client_DmaMap(PJRT_Client_DmaMap_Args *a);
PJRT_Error *fp_Client_DmaUnmap(PJRT_Client_DmaUnmap_Args *a);

/* ---- fake_pjrt_buffers.c: buffers, the async host-to-device transfer manager ------------------ */

PJRT_Error *fp_Client_BufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args *a);
PJRT_Error *fp_Buffer_Destroy(PJRT_Buffer_Destroy_Args *a);
PJRT_Error *fp_Buffer_ElementType(PJRT_Buffer_ElementType_Args *a);
PJRT_Error *fp_Buffer_Dimensions(PJRT_Buffer_Dimensions_Args *a);
PJRT_Error *fp_Buffer_OnDeviceSizeInBytes(PJRT_Buffer_OnDeviceSizeInBytes_Args *a);
PJRT_Error *fp_Buffer_GetMemoryLayout(PJRT_Buffer_GetMemoryLayout_Args *a);
PJRT_Error *fp_Buffer_ToHostBuffer(PJRT_Buffer_ToHostBuffer_Args *a);
PJRT_Error *fp_Buffer_CopyRawToHost(PJRT_Buffer_CopyRawToHost_Args *a);
PJRT_Error *fp_CreateBuffersForAsyncHostToDevice(
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args *a);
PJRT_Error *fp_TM_RetrieveBuffer(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args *a);
PJRT_Error *fp_TM_TransferData(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args *a);
PJRT_Error *fp_TM_Destroy(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args *a);

#endif /* SL_FAKE_PJRT_H */
