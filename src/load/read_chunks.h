/* read_chunks.h - the chunk planner of the read engine: which bytes of which checkpoint file a load
 * reads, in which requests. Pure: a plan and sizes in, a chunk list out; no I/O, no devices
 * (tests/test_chunks.c checks it alone).
 *
 * 1. rd_ops_build gathers every COPY operation of every device and sorts them by (file, source
 *    offset); a prefix maximum of source end offsets (max_end) lets a chunk find the operations
 *    that meet it with two binary searches.
 * 2. rd_chunks_build turns them into source spans (one per operation, or one per row when the rows
 *    are far apart), sorts and merges them into ranges (gaps under merge_gap are read rather than
 *    skipped, so that requests stay large), and cuts the ranges into chunks of at most `request`
 *    bytes at 4096-aligned boundaries, so that O_DIRECT reads of neighbouring chunks never
 *    overlap.
 *
 * A chunk owns the source bytes [a, b); an element belongs to the chunk holding its first byte.
 * When a file's elements may straddle a 4096 boundary (tensor data not aligned to the element
 * size, which safetensors allows), each chunk reads up to the file's `tail` bytes past b (b_ext),
 * so that the elements it owns are whole.
 *
 * Direct reads: an operation that is one contiguous run, needs no conversion, goes to host memory,
 * is the only reader of its bytes, is at least RD_DIRECT_MIN bytes and whose file is not read
 * with O_DIRECT is read straight into the device buffer: its chunks (request-sized, a == its
 * start) carry the destination, and are sorted in with the staged ones, so each file is still
 * read front to back. */
#ifndef SL_READ_CHUNKS_H
#define SL_READ_CHUNKS_H

#include "common/sl_err.h"
#include "plan/plan_data.h"

#include <stdint.h>

#define RD_ALIGN 4096u
#define RD_DIRECT_MIN ((uint64_t)2 << 20)   /* above merge_gap, so merged gaps never cross one */
_Static_assert(SL_READ_GAP_MAX < RD_DIRECT_MIN, "opts.read_gap stays below RD_DIRECT_MIN");

typedef struct rd_op {
    const sl_op *op;
    int32_t dev;
    int direct;          /* read straight into the device buffer (rd_chunks_build) */
    /* The host address of the op's first destination byte when everything it writes is one run
     * of host memory (a cpu device, or inside one of the caller's blocks); NULL otherwise, and
     * until the caller sets it (rd_ops_build leaves it NULL). */
    unsigned char *host_dst;
    uint32_t ssize, dsize;
    sl_dtype ddt;        /* the parameter's dtype: what the op writes */
    int whole;           /* the op writes all of its parameter, packed from its first byte */
    uint64_t src_end;
    uint64_t max_end;    /* max src_end of the file's operations up to this one */
} rd_op;

/* The COPY operations of a plan, sorted by (file, source offset). */
typedef struct rd_ops {
    rd_op *v;
    int64_t n;
    int64_t n_files;
    int64_t *file_first;     /* n_files + 1: file f's operations are v[file_first[f], file_first[f + 1]) */
    unsigned char *used;     /* n_files: some operation reads the file */
    unsigned *tail;          /* n_files: bytes past b a chunk reads so that owned elements are whole */
    sl_dtype dtype;          /* the plan's */
} rd_ops;

typedef struct rd_chunk {
    int32_t file;
    uint64_t a, b, b_ext;
    unsigned char *dst;  /* direct chunk: bytes [a, b) go here; NULL: through a staging slot */
} rd_chunk;

typedef struct rd_chunks {
    rd_chunk *v;
    int64_t n, cap;
    uint64_t total_bytes;    /* sum of b - a */
} rd_chunks;

typedef struct rd_chunk_opts {
    uint64_t request;        /* most bytes of a chunk's [a, b); a multiple of RD_ALIGN */
    uint64_t merge_gap;      /* gaps under this between needed ranges are read */
    /* Direct reads (0: none) into the ops' host_dst; file_direct[f] (may be NULL): file f is read
     * with O_DIRECT, so no direct reads from it, and gaps under RD_ALIGN are read whatever
     * merge_gap says (its reads are whole pages: skipping such a gap would read a page twice). */
    int direct;
    const unsigned char *file_direct;
    /* Whole files (NULL: none): whole[f] > 0 is file f's size, and its chunks cover [0, size)
     * contiguously, nothing direct (--verify hashes each file front to back). */
    const uint64_t *whole;
    /* Verified blocks (NULL: none; --verify with a block manifest, read_verify.h): block[f] > 0 is
     * file f's block size (a power of two, at least RD_ALIGN, at most `request`) and size[f] its
     * size. Every range of the file is widened to whole blocks (the last one ends at the size),
     * the blocks of [0, head[f]) are read too when the file is used (its header, whose parse
     * placed every other byte; head may be NULL), chunks are cut at block boundaries and nothing
     * is direct: each chunk is whole blocks, to be hashed on its own. */
    const uint64_t *block, *size, *head;
} rd_chunk_opts;

/* Gathers p's COPY operations (plan bounds already checked: sl_load_check_plan). */
sl_status rd_ops_build(const sl_plan *p, int64_t n_files, rd_ops *out, sl_err *err);
void rd_ops_free(rd_ops *t);

/* Marks the direct operations of t (when o allows them) and cuts the chunks into *out, sorted by
 * (file, a). SL_E_INVALID_ARG when a block is larger than the request. */
sl_status rd_chunks_build(rd_ops *t, const rd_chunk_opts *o, rd_chunks *out, sl_err *err);
void rd_chunks_free(rd_chunks *c);
/* Reorders the chunks round-robin over their files (one chunk of each file in turn), each file's
 * chunks keeping their order: --verify hashes each file on one thread, so files read side by side
 * are hashed in parallel. */
sl_status rd_chunks_interleave(rd_chunks *c, sl_err *err);

/* Operations of file f that meet [a, b), as [*lo, *hi) into t->v (two binary searches). */
void rd_ops_between(const rd_ops *t, int32_t f, uint64_t a, uint64_t b, int64_t *lo, int64_t *hi);

#endif /* SL_READ_CHUNKS_H */
