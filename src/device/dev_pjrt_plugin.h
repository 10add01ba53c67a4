/* dev_pjrt_plugin.h - a PJRT plugin as the pjrt backend (dev_pjrt.c) sees it (dev_pjrt_plugin.c):
 * loading the .so and checking its table, PJRT errors turned into one-line messages, events, and
 * the one client that every mesh device of a load shares. */
#ifndef SL_DEV_PJRT_PLUGIN_H
#define SL_DEV_PJRT_PLUGIN_H

#include "device/dev_pjrt_abi.h"

#include "shardload.h"

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

/* The oldest PJRT minor version accepted. 0.56 put Buffer_CopyRawToHost at slot 69 and 0.57 moved
 * it to the end, so a 0.56 table has every slot from 69 on one place further; 0.57 is the first
 * layout after it that this table matches. */
#define PJ_MIN_MINOR 57
/* The transfer manager's slots (101-104) appeared in 0.60 and 0.62. */
#define PJ_TM_MINOR 62
/* Client_DmaMap and Client_DmaUnmap (slots 110, 111) appeared in 0.67. */
#define PJ_DMA_MINOR 67
#define PJ_MAX_DMA 8

/* dlopens the plugin at path (RTLD_NOW | RTLD_LOCAL, never closed: unloading tears down a plugin's
 * static registries) and returns its table, checked with pj_api_check and initialized with
 * PJRT_Plugin_Initialize (once per process and table; a failed one is tried again next time).
 * SL_E_UNSUPPORTED, naming the path and what is wrong: missing, not a PJRT plugin, too old. */
sl_status pj_plugin_load(const char *path, const PJRT_Api **api, sl_err *err);
/* A table handed in by the caller (sl_load_opts.pjrt_api): checked, and never initialized here
 * (its owner did). */
sl_status pj_api_check(const PJRT_Api *api, const char *what, sl_err *err);
/* 1 when the table has the async host-to-device transfer manager (0.62, slots 101-104). */
int pj_api_has_streaming(const PJRT_Api *api);
/* 1 when the table has Buffer_CopyRawToHost (slot 100 since 0.57) and the layout query that says
 * whether a buffer's raw bytes are its row-major bytes. */
int pj_api_has_raw_read(const PJRT_Api *api);

/* ---- errors --------------------------------------------------------------------------------- */

/* Takes e (destroys it): status SL_E_NOMEM for RESOURCE_EXHAUSTED, else SL_E_DEVICE, with the
 * message "<context>: <call> failed: <plugin's message> (<code>)" on one line. *code (may be NULL)
 * gets the PJRT error code. */
sl_status pj_fail(const PJRT_Api *api, PJRT_Error *e, int *code, sl_err *err, const char *context,
                  const char *call);
/* Destroys e when it is not NULL (errors that change nothing: a failed destroy). */
void pj_drop(const PJRT_Api *api, PJRT_Error *e);

/* ---- events --------------------------------------------------------------------------------- */

/* Waits for ev, then destroys it; a failed event is reported like pj_fail (call: "PJRT_X for
 * parameter 'p'"). NULL is SL_OK. */
sl_status pj_event_finish(const PJRT_Api *api, PJRT_Event *ev, sl_err *err, const char *context,
                          const char *call);
/* The same, with the PJRT error code of a failed event in *code (may be NULL). */
sl_status pj_event_finish_code(const PJRT_Api *api, PJRT_Event *ev, int *code, sl_err *err,
                               const char *context, const char *call);
/* 1 when ev has fired (or cannot tell: IsReady failed, so waiting is the safe choice). */
int pj_event_ready(const PJRT_Api *api, PJRT_Event *ev);
void pj_event_destroy(const PJRT_Api *api, PJRT_Event *ev);

/* Events in issue order, owned: pushed, then waited for and destroyed together. Each keeps the
 * call that made it and its parameter (borrowed, NULL for none) for the message if it failed. */
typedef struct pj_pending {
    PJRT_Event *ev;
    const char *call;
    const char *param;
} pj_pending;

typedef struct pj_events {
    pj_pending *v;
    size_t n, cap;
} pj_events;

sl_status pj_events_push(pj_events *l, pj_pending e, sl_err *err);
/* Moves every event of src to the end of dst (src is left empty). */
sl_status pj_events_move(pj_events *dst, pj_events *src, sl_err *err);
/* Waits for and destroys every event, all of them even when one failed (the first failure is
 * reported); the list is left empty with its memory kept. */
sl_status pj_events_finish(const PJRT_Api *api, pj_events *l, sl_err *err, const char *context);
void pj_events_free(const PJRT_Api *api, pj_events *l);

/* ---- the client ----------------------------------------------------------------------------- */

/* A host range given to PJRT_Client_DmaMap, once per client however many of its mesh devices
 * pin it (refs); mapped 0: no map (none in the plugin, or it failed), plain memory. */
typedef struct pj_dma {
    const void *ptr;
    size_t len;
    int refs, mapped;
    char how[256];               /* what every device that pins it reports */
} pj_dma;

/* One client per plugin table, shared by the mesh devices that use it and destroyed with the last
 * of them (refs), unless the caller owns it (sl_load_opts.pjrt_client). */
typedef struct pj_client {
    const PJRT_Api *api;
    PJRT_Client *client;
    int owned;                          /* created here: destroyed when refs drops to 0 */
    int refs;
    PJRT_Device *const *devices;        /* addressable devices, owned by the client */
    size_t n_devices;
    int32_t group;                      /* a CPU client smaller than its mesh: the mesh indices
                                           [group * n_devices, + n_devices) it serves; else -1 */
    char platform[32];                  /* "cpu", "cuda", "tpu", ... */
    pj_dma dma[PJ_MAX_DMA];             /* under the process lock */
} pj_client;

/* The client of api for mesh device `index` of a mesh of cpu_devices: `given` when not NULL, else
 * the live client made for api (a CPU one only if it has cpu_devices devices: it was made with the
 * count of the mesh that asked first; or, where the plugin refused that count and made fewer, n,
 * the one serving index / n: each n mesh devices share one), else a new one made with the options
 * of the first plugin kind that accepts them: CPU (cpu_device_count = cpu_devices), CUDA
 * (preallocate false, allocator "bfc"), none (TPU and others); a plugin refuses the keys it does
 * not know with INVALID_ARGUMENT. Each acquire takes one reference. */
sl_status pj_client_acquire(const PJRT_Api *api, PJRT_Client *given, int32_t cpu_devices,
                            int32_t index, pj_client **out, sl_err *err);
void pj_client_release(pj_client *c);

/* Host memory handed to the client's runtime for DMA (on CUDA: cudaHostRegister), so that
 * BufferFromHostBuffer and TransferData from it need no staging copy in the plugin. Maps
 * [ptr, ptr + len) with PJRT_Client_DmaMap at its first pin in c and counts the others; returns 1
 * when it is mapped. 0: plain host memory, which works the same, only slower on GPUs, with the
 * reason in how[len]: the plugin has no DmaMap (slots missing, before 0.67, or UNIMPLEMENTED, as on
 * XLA's CPU plugin), or the call failed (its one-line message). A failed map is not an error of
 * the load: the transfers are correct either way, and a GPU process whose limits or other users
 * refuse the registration (cudaErrorHostMemoryAlreadyRegistered, RLIMIT_MEMLOCK) still loads. */
int pj_client_dma_map(pj_client *c, const void *ptr, size_t len, char *how, size_t how_len);
/* Drops one pin of the range at ptr; the last one of a mapped range calls PJRT_Client_DmaUnmap.
 * The caller has waited for every transfer from the range. */
void pj_client_dma_unmap(pj_client *c, const void *ptr);

/* ---- memory statistics ---------------------------------------------------------------------- */

/* Free device memory (bytes_limit - bytes_in_use) of dev; -1 when the plugin does not tell
 * (MemoryStats missing, UNIMPLEMENTED, or no bytes_limit). */
int pj_device_free_bytes(const PJRT_Api *api, PJRT_Device *dev, uint64_t *free_bytes);

#endif /* SL_DEV_PJRT_PLUGIN_H */
