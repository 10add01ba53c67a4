/* read_step.h - the read-once engine (read_ctx.h) taken apart, for loads that do not run its
 * whole pipeline in one process (src/mpi/: several ranks share one chunk list). Defined in
 * read_step.c (sl_rd_ring_budget, sl_rd_ring_for_helpers: read_staging.c).
 *
 * sl_rd_open builds the same chunk list as sl_load_read, from every device's COPY operations, so
 * every process that opens the same plan with the same options gets the same chunks. Reads go
 * into two staging slots (the next chunk while the current one is used), a large chunk's by
 * several requests at once (read_ctx.h's rd_config.split); scatters only reach the devices
 * marked local. */
#ifndef SL_LOAD_READ_STEP_H
#define SL_LOAD_READ_STEP_H

#include "load/engine.h"

typedef struct sl_rd sl_rd;

typedef struct sl_rd_chunk {
    int32_t file;
    uint64_t a, b;      /* the chunk owns the elements whose first byte lies in [a, b) */
    uint64_t b_ext;     /* bytes [a, b_ext) hold them whole */
} sl_rd_chunk;

typedef struct sl_rd_setup {
    const sl_load_file *files;
    int64_t n_files;
    const sl_plan *p;
    const sl_model_dev *devs;     /* p->n_devices entries; only local ones are called (the
                                     others are never looked at: they may be left zeroed) */
    const unsigned char *local;   /* p->n_devices flags; NULL: all */
    const sl_load_opts *o;
    uint64_t slot_bytes;          /* most bytes the staging slot may take; 0: from o */
    unsigned extra_slots;         /* slots for the caller after the read slots (sl_rd_extra) */
    const sl_load_manifest *manifest;   /* what o->verify checks against (the job's); NULL: none */
    uint64_t ring_bytes;          /* most bytes for the ring of conversion pieces (page-locked with
                                     the slots; used only when local devices copy asynchronously
                                     and elements are converted); 0: none */
    sl_err *err;
} sl_rd_setup;

/* The part of a staging budget that a load keeps for the ring of conversion pieces: a sixteenth,
 * 64 KiB to 4 MiB, at most a quarter. */
uint64_t sl_rd_ring_budget(uint64_t staging);
/* The ring's part when the host converts elements of up to width bytes (0: none) with helpers
 * helper threads (read_scatter.c's pool): with enough of them, pieces large enough that the
 * helpers share each full piece's conversion, up to a quarter of the budget; else
 * sl_rd_ring_budget's. */
uint64_t sl_rd_ring_for_helpers(uint64_t staging, uint64_t width, unsigned helpers);

/* The least slot_bytes: one 4 KiB read with its O_DIRECT alignment and tail. */
#define SL_RD_MIN_SLOT ((uint64_t)16 << 10)

/* Opens the files and sizes two staging slots for the largest chunk. *out is set even on
 * failure (unless out of memory); close it with sl_rd_close. */
sl_status sl_rd_open(const sl_rd_setup *s, sl_rd **out);
int64_t sl_rd_chunk_count(const sl_rd *r);
sl_rd_chunk sl_rd_chunk_at(const sl_rd *r, int64_t i);
/* Bytes of the staging slot (0 without chunks). */
uint64_t sl_rd_slot_bytes(const sl_rd *r);
/* The extra_slots slots after the read slots, page-locked with them for async device copies, or
 * NULL (none asked for, or no chunks). Copies out of them may still run after sl_rd_scatter
 * returns: call sl_rd_fence before writing into them again. */
unsigned char *sl_rd_extra(sl_rd *r);
/* Returns once no device copy reads staging (the read slots or the extra ones) any more. */
sl_status sl_rd_fence(sl_rd *r);
/* Starts reading chunk i into slot i % 2 (its slot must not be reading another chunk), so that
 * it proceeds while the caller works on chunk i - 1. */
sl_status sl_rd_start(sl_rd *r, int64_t i);
/* Reads chunk i (waiting for it when started, starting it otherwise); *data points at its byte a
 * and stays valid until chunk i + 2 is started. */
sl_status sl_rd_read(sl_rd *r, int64_t i, const unsigned char **data);
/* Scatters the elements of c that local devices need; data holds c's bytes [a, b_ext). */
sl_status sl_rd_scatter(sl_rd *r, const sl_rd_chunk *c, const unsigned char *data);
/* Byte ranges of a chunk, relative to its byte a: disjoint, sorted, none touching the next. */
typedef struct sl_rd_seg {
    uint64_t off, len;
} sl_rd_seg;

typedef struct sl_rd_segs {
    sl_rd_seg *seg;     /* grown as needed; the caller frees it */
    int64_t n, cap;
} sl_rd_segs;

/* The bytes of chunk c that the scatter of devices [d0, d1) reads, as ranges into *s (replacing
 * its contents). Whoever holds those bytes at the same offsets of a buffer standing for c's bytes
 * [a, b_ext) can scatter c into those devices: the other bytes are never looked at. Sender and
 * receiver compute the same list, so only these bytes need to travel. */
sl_status sl_rd_segments(const sl_rd *r, const sl_rd_chunk *c, int32_t d0, int32_t d1, sl_rd_segs *s);
/* --verify (opts.verify; by blocks only, read_verify.h): each chunk this process reads is hashed
 * on a hashing thread from sl_rd_read on, and its slot reused once hashed. sl_rd_verify_finish
 * waits for the last ones and checks them (SL_E_INTEGRITY naming the file and byte range of a
 * block that differs), recording this process's verified_bytes and verified_files in stats;
 * sl_rd_verified_bytes is then the bytes of one file it checked. */
int sl_rd_verifies(const sl_rd *r);
sl_status sl_rd_verify_finish(sl_rd *r, sl_load_stats *stats);
uint64_t sl_rd_verified_bytes(const sl_rd *r, int32_t file);
/* Records bytes_read, staging_peak, io and engine in stats (may be NULL) and frees r. */
void sl_rd_close(sl_rd *r, sl_load_stats *stats);

#endif /* SL_LOAD_READ_STEP_H */
