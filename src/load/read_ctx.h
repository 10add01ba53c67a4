/* read_ctx.h - the context shared by the pieces of the read engine ("read once, place
 * everywhere", docs/engine.md "Pipeline"), one concern per file:
 *
 *   read_chunks.c    the chunk planner: operations, spans, ranges, chunks (pure; read_chunks.h)
 *   read_files.c     opening the checkpoint files: O_DIRECT or buffered, the page-cache probe
 *   read_staging.c   sizes (requests, slots, the conversion ring) and the staging block
 *   read_setup.c     the one set-up (rd_setup, whose rd_config says which path it serves) and
 *                    rd_free
 *   read_scatter.c   scatter and copy strategies: a completed chunk into every device op
 *   read_pipeline.c  several reads in flight, device fences and marks around slot reuse
 *   read.c           sl_load_read: the whole load in one process
 *   read_step.c      the stepwise API of read_step.h (src/mpi/: ranks share a chunk list)
 *
 * Host memory: the slots (staging budget) plus the metadata arrays. */
#ifndef SL_READ_CTX_H
#define SL_READ_CTX_H

#include "io/io.h"
#include "load/engine.h"
#include "load/read_chunks.h"
#include "load/read_verify.h"

#include "common/sl_file.h"
#include "common/sl_pool.h"

#include <stdint.h>

#define RD_SLOT_SLACK (3u * RD_ALIGN)      /* alignment below a and above b_ext, plus the tail */
#define RD_MAX_SLOTS 64u
#define RD_PACK_MAX 32u                    /* chunks in one slot at most (rd_config.pack) */
#define RD_PACK_REQUESTS 256u              /* requests in flight at most when slots pack */
#define RD_SPLIT_MAX 8u                    /* requests one chunk's read is cut into at most */
#define RD_SPLIT_MIN ((uint64_t)1 << 20)   /* ... each of at least this many bytes */
#define RD_MAX_REQUEST ((uint64_t)256 << 20)
#define RD_DEFAULT_REQUEST ((uint64_t)16 << 20)
#define RD_MIN_AUTO_REQUEST ((uint64_t)4 << 20)
#define RD_BOUNCE ((size_t)256 << 10)      /* conversion buffer, synchronous copies (no marks) */
#define RD_RING 4u                          /* pieces of the conversion ring in flight (cuda) */
#define RD_RING_MIN ((uint64_t)64 << 10)    /* the ring: a sixteenth of the budget, within these */
#ifndef RD_RING_MAX       /* definable at build time, to measure another */
#define RD_RING_MAX ((uint64_t)4 << 20)
#endif

/* ---- files (read_files.c) -------------------------------------------------------------------- */

/* Files are opened on demand and at most max_open at once (a 1,353-shard checkpoint under
 * `ulimit -n 1024` once failed with every file open): a request holds its file open while it is in
 * flight, and the least recently used idle file is closed to open another. Each open (the first,
 * at set-up, and any later one) refuses what is not a regular file without blocking and compares
 * the file with the identity it had when the checkpoint was opened (SL_E_CHANGED otherwise). */
#define RD_MAX_OPEN 64u

typedef struct rd_file {
    const char *path;
    uint64_t size;
    sl_file_id id;       /* as the checkpoint was opened, or as first opened here */
    int fd;              /* -1 while closed */
    int fd_direct_old;   /* direct fd kept open after an EINVAL fallback, until the file closes */
    int direct;          /* the mode chosen at set-up (or buffered since a fallback) */
    int used;
    unsigned busy;       /* requests in flight on it */
    uint64_t last_use;   /* for choosing the file to close */
    const struct sl_http_obj *remote;   /* a remote file: never opened, read by io_http.c */
} rd_file;

typedef struct rd_files {
    rd_file *v;
    int64_t n;
    int64_t *open;       /* the n_open files now open */
    unsigned n_open, max_open;
    uint64_t clock;
} rd_files;

sl_status rd_files_init(rd_files *fs, const sl_load_file *files, int64_t n, sl_err *err);
/* Opens each file that used[] marks once, in turn (io: the load's --io mode), to check it and
 * choose O_DIRECT or buffered reads; the first max_open stay open. */
sl_status rd_files_open(rd_files *fs, const unsigned char *used, sl_io_mode io, sl_err *err);
/* Lets n files be open at once when the budget is smaller (the stepwise path's fixed slots). */
void rd_files_allow_open(rd_files *fs, unsigned n);
/* File i is open (reopened if need be, closing an idle one) and counted busy; every acquire is
 * followed by one release, when its request is done. Needs fewer requests in flight than
 * max_open (rd_setup bounds the slots). */
sl_status rd_file_acquire(rd_files *fs, int64_t i, sl_err *err);
void rd_file_release(rd_files *fs, int64_t i);
/* Some filesystems accept O_DIRECT at open and refuse the reads: f continues buffered. */
sl_status rd_file_fallback(rd_file *f, sl_err *err);
/* Stats `io`: "direct", "buffered", "mixed" or "none" (no file used). */
const char *rd_files_io_name(const rd_files *fs);
void rd_files_close(rd_files *fs);

/* ---- the context ----------------------------------------------------------------------------- */

/* A slot holds one chunk, or several small consecutive chunks of one file (rd_config.pack), each
 * read by its own request into its own part of the slot: with rows skipped (opts.read_gap) a
 * load's chunks may be a few KiB each, and one chunk per slot left only a few requests in
 * flight. Where a slot holds one chunk at a time (the stepwise path) a large chunk is read by
 * several requests instead (rd_config.split). The slot is scattered once all its parts are read.
 *
 * A chunk's bytes lie in the slot as in the file from its page down: file byte o of chunk c at
 * buf + (o - c->a / RD_ALIGN * RD_ALIGN), whether a part reads it with O_DIRECT or not (or again
 * buffered after an O_DIRECT refusal). */
typedef struct rd_slot rd_slot;

typedef struct rd_part {
    sl_io_req req;       /* req.user: this part */
    rd_slot *slot;
    int64_t chunk;
    uint64_t lo, hi;     /* the chunk's file bytes this part reads: [a, b_ext) unless split */
    unsigned char *buf;  /* where the chunk's first page lies in the slot (4096-aligned) */
} rd_part;

struct rd_slot {
    rd_part *parts;      /* x->pack of them; [0, n_parts) hold chunks chunk, chunk + 1, ... in
                            order, each in one part or (split) in several consecutive ones */
    unsigned n_parts;
    unsigned pending;    /* parts still being read */
    unsigned char *buf;
    int64_t chunk;       /* its first chunk */
    unsigned index;
    int marked;          /* device copies from buf are pending under mark `index` */
    int held;            /* --verify: read, waiting for earlier chunks' hashing or its own */
};

/* Chunk c may share a slot whose first chunk is `first`: both staged, from one file (so that the
 * requests in flight hold no more files open than there are slots). */
static inline int rd_joins(const rd_chunk *first, const rd_chunk *c)
{
    return !first->dst && !c->dst && c->file == first->file;
}

typedef struct rd_ctx {
    /* what is loaded, from rd_config */
    const sl_plan *p;
    const sl_model_dev *devs;
    const sl_load_opts *o;
    sl_err *err;
    const unsigned char *local;   /* per device: scatter into it; NULL: every device */
    int allow_direct;             /* direct reads into host devices (rd_config.direct_reads) */
    rd_files files;
    rd_ops ops;
    rd_chunks chunks;
    /* sizes and staging (read_staging.c) */
    uint64_t request, merge_gap, slot_size;
    unsigned n_slots;
    unsigned pack;                /* parts per slot: 1, up to RD_PACK_MAX (rd_config.pack), or
                                     split */
    unsigned split;               /* parts one chunk is read in at most (rd_config.split), or 1 */
    unsigned extra_slots;         /* rd_config.extra_slots, after the read slots */
    unsigned char *staging;
    rd_slot *slots;
    rd_part *parts;               /* n_slots * pack, slot i's from i * pack */
    int32_t n_pinned;             /* local devices of [0, n_pinned) went through sl_device_pin */
    /* scatter (read_scatter.c) */
    unsigned char *bounce;        /* converted pieces for non-host devices */
    uint64_t bounce_bytes;        /* its size */
    sl_pool *pool;                /* helper threads for conversions (rd_start_pool), or NULL */
    uint64_t gather_rows;         /* SL_GATHER_ROWS: same-dtype rows narrower than this many bytes
                                     are gathered through the ring (rd_gathers); 0: never */
    uint64_t gather_parts;        /* the devices' own wish (sl_device_gather_below): likewise, but
                                     not when a write holds all of an op's rows, which the device
                                     takes as one strided copy */
    int ring;                     /* bounce lies in the page-locked staging block: RD_RING pieces,
                                     each copied asynchronously and reused after its mark; its
                                     bytes come out of the staging budget */
    unsigned ring_next;
    int32_t ring_dev[RD_RING];    /* device whose copy still reads piece k, or -1 */
    /* pipeline (read_pipeline.c) */
    sl_io io;
    uint64_t bytes_read, done_bytes, staging_peak;
    uint64_t requests;            /* read requests sent */
    unsigned reading, reading_peak;   /* in flight now; at most */
    int planned;                  /* the chunks are built (stats.io is known) */
    int in_flight;                /* device copies (async: cuda) issued since the last rd_fence */
    int use_marks;                /* some local device is async: per-slot waits (rd_config) */
    int marks_pending;            /* a mark was recorded since the last rd_fence */
    /* --verify (read_verify.h): blocks in any order, or whole files in chunk order; NULL: off */
    rd_verify *verify;
    int64_t verify_next;          /* the next chunk to hash; later ones wait in their slots */
} rd_ctx;

/* Device d receives bytes in this process. Only these devices are ever called: the others (other
 * ranks' devices in the stepwise path) may be left empty. */
static inline int rd_local(const rd_ctx *x, int32_t d)
{
    return !x->local || x->local[d];
}

/* ---- set-up (read_setup.c) ------------------------------------------------------------------- */

/* Everything that differs between the whole load in one process (sl_load_read) and the stepwise
 * API (sl_rd_open, for ranks that share one chunk list), so that both set up the same way. */
typedef struct rd_config {
    const sl_load_file *files;
    int64_t n_files;
    const sl_plan *p;
    const sl_model_dev *devs;     /* p->n_devices entries; only local ones are used */
    const unsigned char *local;   /* p->n_devices flags; NULL: all */
    const sl_load_opts *o;
    const sl_load_manifest *manifest;   /* what verify checks against; NULL: none */
    sl_err *err;
    /* whole load: large exclusive operations go straight into host devices (read_chunks.h);
     * stepwise: never, since other ranks may need any chunk's bytes */
    int direct_reads;
    /* whole load: with devices that are not host memory, slots follow CPUs and the ring is cut
     * from the staging budget (rd_size_for_devices); stepwise: ring_bytes and slot_bytes */
    int size_for_devices;
    uint64_t ring_bytes;          /* !size_for_devices: most bytes for the ring; 0: none */
    uint64_t slot_bytes;          /* most bytes of a slot; 0: from opts */
    unsigned n_slots;             /* read slots; 0: as many as the budget holds */
    unsigned extra_slots;         /* slots for the caller after the read slots (sl_rd_extra) */
    int slot_marks;               /* the pipeline waits per slot when the devices have marks */
    int verify;                   /* opts.verify (the stepwise path: by blocks only) */
    /* whole load: a slot may hold several small chunks of one file (rd_slot), each its own
     * request, so that small chunks keep many requests in flight; not with --verify (hashed per
     * slot) nor remote files (a connection per request) */
    int pack;
    /* stepwise: a slot holds one chunk at a time, so a large chunk is read by up to RD_SPLIT_MAX
     * requests of at least RD_SPLIT_MIN bytes side by side, not one; not remote files (as pack) */
    int split;
} rd_config;

/* Sets up x for c: sizes, files, operations, chunks, the padding zeroed, staging and the read
 * engine. Without chunks it stops early (nothing to read: no staging, no engine). Whatever it
 * did is undone by rd_free, also on failure. */
sl_status rd_setup(rd_ctx *x, const rd_config *c);
void rd_free(rd_ctx *x);

/* ---- sizes and staging (read_staging.c) ------------------------------------------------------ */

void rd_size_requests(rd_ctx *x);
/* A fixed slot size (rd_config.slot_bytes); SL_E_INVALID_ARG when too small. */
sl_status rd_size_slots(rd_ctx *x, uint64_t slot_bytes);
void rd_size_for_devices(rd_ctx *x);
void rd_plan_ring(rd_ctx *x, uint64_t max_bytes);
/* packs: slots will hold several chunks (rd_config.pack), so they are sized for the chunks that
 * could share one (read_staging.c says how), not only for the largest chunk. */
void rd_fit_slots(rd_ctx *x, int packs);
/* Parts per slot, once the slots are counted (splits: rd_config.split applies). */
void rd_size_packs(rd_ctx *x, int packs, int splits);
/* The room chunk c takes in a slot: whole pages around it, as an O_DIRECT read of it needs (a
 * buffered read needs no more). */
uint64_t rd_chunk_room(const rd_chunk *c);
/* Per-slot waits: some local device copies asynchronously (and so has marks: device.h). */
int rd_can_mark(const rd_ctx *x);
/* The bounce buffer or ring, the slots and the staging block (page-locked for async devices). */
sl_status rd_alloc_buffers(rd_ctx *x);
void rd_free_buffers(rd_ctx *x);

/* ---- scatter (read_scatter.c) ---------------------------------------------------------------- */

/* Scatters the elements of c into every local operation that needs them; data holds c's bytes
 * [a, b_ext). */
sl_status rd_scatter_chunk(rd_ctx *x, const rd_chunk *c, const unsigned char *data);
/* Writes the plan's ZERO operations into local devices whose memory is not known zero. */
/* 1 when some local device that is not host memory receives converted elements; with
 * narrow_too, also narrow strided rows that SL_GATHER_ROWS asks to gather. */
int rd_staged_work(const rd_ctx *x, int narrow_too);
/* Helper threads a load's conversions get (0: none, the loading thread converts alone); the
 * ring is sized for them (read_staging.c) before rd_start_pool starts them. */
unsigned rd_pool_helpers(const rd_ctx *x);
void rd_start_pool(rd_ctx *x);

/* ---- pipeline (read_pipeline.c) -------------------------------------------------------------- */

/* Returns once no device copy reads staging any more. */
sl_status rd_fence(rd_ctx *x);
/* The read engine: the remote one when the files are remote (read_remote.c), else sl_io_open's. */
sl_status rd_io_open(rd_ctx *x);
/* A used remote file's object, or NULL when the files are local (a checkpoint is all one). */
const struct sl_http_obj *rd_remote_obj(const rd_ctx *x);
/* The remote engine's retries and restarts into the load's stats (before the engine closes). */
void rd_remote_counts(const rd_ctx *x, sl_load_stats *stats);
/* Starts reading chunk `chunk` into slot s, alone (its first part). */
sl_status rd_submit(rd_ctx *x, rd_slot *s, int64_t chunk);
/* Checks a completed read. Returns SL_OK with *resubmitted set when it was sent again. */
sl_status rd_check(rd_ctx *x, rd_part *pt, int *resubmitted);
/* Where the bytes [a, b_ext) of pt's chunk are once it is read. */
const unsigned char *rd_part_data(const rd_ctx *x, const rd_part *pt);
/* Requests in flight at most: the read engine's depth. */
unsigned rd_io_depth(const rd_ctx *x);
/* Every chunk, up to n_slots in flight, each scattered when it arrives. */
sl_status rd_pipeline(rd_ctx *x);

#endif /* SL_READ_CTX_H */
