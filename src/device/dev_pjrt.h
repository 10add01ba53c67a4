/* dev_pjrt.h - the pjrt backend's state, shared by its two files: dev_pjrt.c (the ops table, the
 * parameter layout, opening and freeing) and dev_pjrt_xfer.c (how bytes reach a parameter's PJRT
 * buffer, and how they come back).
 *
 * Each mesh device keeps one PJRT_Buffer per parameter, of the parameter's dtype and shape, on
 * PJRT device (mesh index % addressable devices) of the client its mesh devices share. The engine
 * writes byte ranges of the packed device buffer (plan offsets); a PJRT buffer is immutable once
 * made, so each parameter goes one of three ways, chosen at its first write (docs/design.md,
 * "The pjrt backend"):
 *   direct     the write holds the whole parameter (dense, or as whole rows with a pitch): one
 *              BufferFromHostBuffer from the engine's memory, kImmutableUntilTransferCompletes;
 *              from pinned staging its done_with_host_buffer event joins the pending list that
 *              mark/wait_mark/fence wait on, from other memory it is waited for at once;
 *   assembled  the bytes are copied into a host block of the parameter's size, which becomes the
 *              buffer once complete and is freed when its done event fires; blocks in use stay
 *              within the device's assembly bound (cap), beyond it only when nothing else works;
 *   streamed   a parameter that does not fit in the bound goes through the async host-to-device
 *              transfer manager (one per parameter, when the plugin has one and its buffer's layout
 *              is dense row-major): each write is one TransferData at its offset, its event
 *              handled like a direct one's.
 * The engine's staging block is DMA-mapped in the client (PJRT_Client_DmaMap) at its pin where the
 * plugin implements it, once per client, and unmapped at its unpin or the device's free; plain
 * memory otherwise (pj_client_dma_map). Reads of part of a parameter come straight from its buffer
 * with PJRT_Buffer_CopyRawToHost where the plugin has it and the layout is dense row-major, else
 * through a whole-parameter copy (ToHostBuffer), as whole reads always do. */
#ifndef SL_DEV_PJRT_H
#define SL_DEV_PJRT_H

#include "device/dev_pjrt_plugin.h"
#include "device/device.h"

#include <pthread.h>
#include <stdint.h>

#define PJ_MAX_DIMS 16

typedef enum pj_state { PJ_EMPTY, PJ_ASSEMBLING, PJ_STREAMING, PJ_DONE } pj_state;

typedef struct pj_param {
    const char *name;            /* in pjrt_dev.names */
    uint64_t off, nbytes;        /* in the packed device buffer */
    uint64_t got;                /* bytes written (assembling, streaming) */
    int type;                    /* PJRT_Buffer_Type */
    uint32_t es;                 /* bytes per element */
    uint32_t ndim;
    const int64_t *dims;         /* in pjrt_dev.dims */
    pj_state state;
    int counted;                 /* in the device's routes already (a reopened one is not again) */
    unsigned char *host;         /* assembling: the block */
    PJRT_AsyncHostToDeviceTransferManager *tm; /* streaming */
    PJRT_Buffer *buf;            /* streaming (retrieved up front) and done */
    int raw;                     /* partial reads: 0 not asked yet, 1 its layout is dense row-major
                                    (CopyRawToHost gives its bytes), -1 not */
} pj_param;

/* An assembly block whose buffer is made: freed once the plugin is done reading it. */
typedef struct pj_block {
    unsigned char *host;
    uint64_t bytes;
    PJRT_Event *done;
    const char *name;            /* the parameter's */
} pj_block;

typedef struct pjrt_dev {
    int32_t index;               /* mesh device */
    char ctx[48];                /* "pjrt device 3", the start of every message */
    const PJRT_Api *api;
    PJRT_Client *given;          /* opts.pjrt_client, or NULL */
    pj_client *client;           /* from layout() on */
    PJRT_Device *device;
    PJRT_Memory *memory;         /* the device's default memory, once streaming needs it */
    pthread_mutex_t lock;        /* every op but the getters: writes may come from threads */
    pj_param *params;
    int64_t n_params, n_left;    /* n_left: parameters with bytes not done yet */
    int64_t *dims;
    char *names;
    uint64_t bytes;              /* the plan's bytes: sum of nbytes */
    int laid_out, allocated;
    uint64_t staging;            /* opts.staging_bytes */
    uint64_t assembly_opt;       /* opts.pjrt_assembly, or 0 */
    int no_dma_map;              /* opts.pjrt_dma_map < 0: the staging block stays plain */
    uint64_t cap;                /* the assembly bound */
    uint64_t assembly, assembly_peak; /* bytes in assembly blocks (retiring ones included) */
    pj_block *retiring;
    size_t n_retiring, cap_retiring;
    PJRT_AsyncHostToDeviceTransferManager **tms; /* finished, destroyed when the device is done */
    size_t n_tms, cap_tms;
    int streaming;               /* the transfer manager is usable */
    int raw;                     /* Buffer_CopyRawToHost is usable (present, not UNIMPLEMENTED) */
    pj_events pending;           /* copies from pinned memory since the last mark */
    pj_events marks[SL_DEVICE_MAX_MARKS];
    /* A mark covers every copy issued before it (device.h), those filed under other tags too:
     * the order of the marks whose events are not waited for yet, oldest and newest per tag */
    uint64_t mark_seq, mark_first[SL_DEVICE_MAX_MARKS], mark_last[SL_DEVICE_MAX_MARKS];
    const unsigned char *pin_ptr;
    size_t pin_len;
    int dma;                     /* pin_ptr's range is DmaMap'd in the client (pj_client_dma_map) */
    char staging_mem[256];       /* "dma-mapped" or "plain (why)" once pinned; "" before */
    int stats;                   /* MemoryStats gave a free figure before the first buffer */
    uint64_t free_before, free_after;
    /* how the bytes went (pjrt_handle SL_DEVICE_HANDLE_ROUTES): parameters (empty ones among the
     * direct) and bytes by the way each first went, and the calls that carried them */
    uint64_t n_direct, n_assembled, n_streamed, b_direct, b_assembled, b_streamed;
    uint64_t n_uploads, n_transfers;
    char routes[192];
    int64_t cached;              /* parameter whose copy is in cache, or -1 */
    unsigned char *cache;
} pjrt_dev;

/* ---- dev_pjrt_xfer.c (callers hold d->lock) -------------------------------------------------- */

/* n bytes of src to device offset off; async: src lies in pinned staging. */
sl_status pj_write_locked(pjrt_dev *d, uint64_t off, const unsigned char *src, uint64_t n,
                          int async, sl_err *err);
/* rows of width bytes, src_pitch apart, to dst_off + r * dst_pitch: one strided buffer when they
 * are a whole parameter, else row by row. */
sl_status pj_write2d_locked(pjrt_dev *d, uint64_t dst_off, uint64_t dst_pitch,
                            const unsigned char *src, size_t src_pitch, size_t width, size_t rows,
                            int async, sl_err *err);
sl_status pj_read_locked(pjrt_dev *d, uint64_t off, unsigned char *dst, uint64_t n, sl_err *err);
/* A buffer for every parameter of 0 bytes (no write ever reaches them). */
sl_status pj_make_empty_buffers(pjrt_dev *d, sl_err *err);
/* Frees the assembly blocks the plugin is done with; wait: all of them, waiting. */
sl_status pj_reap(pjrt_dev *d, int wait, sl_err *err);
/* Once every parameter is done: the blocks and transfer managers go, and the stats are taken. */
sl_status pj_complete(pjrt_dev *d, sl_err *err);
void pj_destroy_buffer(const PJRT_Api *api, PJRT_Buffer *b);
void pj_destroy_tm(const PJRT_Api *api, PJRT_AsyncHostToDeviceTransferManager *tm);

#endif /* SL_DEV_PJRT_H */
