/* read_verify.h - --verify (sl_load_opts.verify): the bytes a load reads are checked, while they
 * pass through staging, against what is known of each checkpoint file. Two ways:
 *
 * - Blocks, when the manifest (sl_load_opts.manifest_path) has a block record for every file
 *   (sl_write_manifest writes them): the XXH3-64 of each RD_BLOCK_BYTES block of file offset. The
 *   chunk planner widens every read to whole blocks and always reads the blocks of the header
 *   (whose parse placed every other byte), cuts chunks at block boundaries, and each chunk, once
 *   read, is hashed on a hashing thread in any order; the slot is reused once it is hashed. Only
 *   the blocks a load needs are read (a rank of a tensor-parallel load, a pre-sharded folder, a
 *   rank of a cooperative MPI load). XXH3 catches corruption (a flipped bit, a torn copy, a
 *   replaced file), not a forger: XXH3 collisions can be built at will.
 * - SHA-256 of the whole file, otherwise: against a `sha256sum` manifest or, in a Hugging Face
 *   cache, the name of the blob the file links to (an LFS blob is named by its SHA-256). A file
 *   can only be hashed whole and front to back, so such a load reads every byte of every file (the
 *   planner covers [0, size)) and hands its chunks, in chunk order (which is file order), to the
 *   hashing thread of their file (read_pipeline.c).
 *
 * Block manifest layout (comment lines for sha256sum, which skips lines starting with '#'):
 *
 *   <sha256>  NAME                                   sha256sum's line (the whole file)
 *   #xxh3-blocks SIZE HEADER_END BLOCK_BYTES NAME     the file's size, where its header ends,
 *                                                    the block size (a power of two, 4 KiB to
 *                                                    64 MiB)
 *   #b HEX16 HEX16 ...                               XXH3-64 of blocks 0, 1, ... (8 a line):
 *                                                    block k is [k * BLOCK, (k + 1) * BLOCK)
 *                                                    clipped to SIZE
 *
 * Files are matched by their last path component (checkpoints are flat folders). */
#ifndef SL_READ_VERIFY_H
#define SL_READ_VERIFY_H

#include "common/sl_err.h"
#include "load/engine.h"

#include <stddef.h>
#include <stdint.h>

/* 1 MiB: the least read request the engine chooses by itself is 4 MiB (so chunks hold whole
 * blocks with default budgets, cooperative MPI ranks' slots included), a partial read is widened
 * by under a block at each end (the rows of a tensor-parallel shard are MiBs), and the manifest
 * stays small (about 20 bytes a block: 40 KB for a 2.2 GB checkpoint). */
#define RD_BLOCK_BYTES ((uint64_t)1 << 20)
#define RD_BLOCK_MIN ((uint64_t)4096)
#define RD_BLOCK_MAX ((uint64_t)64 << 20)
#define RD_BLOCK_TAG "#xxh3-blocks"
#define RD_BLOCK_LINE "#b"
#define RD_BLOCK_PER_LINE 8
#define RD_BLOCK_COMMENT                                                                          \
    "shardload manifest: sha256sum lines (sha256sum -c reads them) and, per file, the XXH3-64 of " \
    "each block of file offset ('#xxh3-blocks SIZE HEADER_END BLOCK NAME', then '#b' lines), "     \
    "for load --manifest"

typedef struct rd_verify rd_verify;

/* The XXH3-64 of one block (what the manifest's '#b' lines hold). */
uint64_t rd_block_hash(const void *data, size_t n);

/* What each of the n files must be: its blocks when the manifest has blocks for every file, else
 * its SHA-256 (SL_E_INVALID_ARG, naming the file, when none is known; SL_E_UNSUPPORTED without
 * SHA-256 in the build). A manifest whose size for a file is not the file's is SL_E_INTEGRITY
 * (stale). manifest: the manifest read (NULL or its path NULL: none). */
sl_status rd_verify_new(const sl_load_file *files, int64_t n, const sl_load_manifest *manifest,
                        rd_verify **out, sl_err *err);
/* 1: by blocks (block manifest); 0: whole files by SHA-256. */
int rd_verify_by_blocks(const rd_verify *v);
/* By blocks: file f's block size, and the end of its header (always read). */
uint64_t rd_verify_block_bytes(const rd_verify *v, int64_t f);
uint64_t rd_verify_header_end(const rd_verify *v, int64_t f);
/* Starts the hashing threads (by blocks: as many as CPUs allow, at most 4; whole files: one per
 * file at a time, as many as CPUs and files allow, at most 4), with room for `depth` chunks. */
sl_status rd_verify_start(rd_verify *v, unsigned depth, sl_err *err);
/* Queues bytes [a, b) of file f: whole blocks by blocks (any order), else the bytes following
 * those queued before for f. data stays valid until tag comes back from rd_verify_done. At most
 * `depth` chunks out at once. */
void rd_verify_push(rd_verify *v, int64_t f, uint64_t a, uint64_t b, const unsigned char *data,
                    void *tag);
/* The tag of a hashed chunk, or NULL when none is done yet (block: wait for one, when any is
 * queued). */
void *rd_verify_done(rd_verify *v, int block);
/* Stops the threads (every chunk must have come back) and checks the result: by blocks, every
 * block hashed was equal to the manifest's (SL_E_INTEGRITY naming the file and the byte range of
 * the first that was not); whole files, every file hashed whole and equal to its digest.
 * *bytes: bytes hashed and found equal; *files: files of which some bytes were. */
sl_status rd_verify_finish(rd_verify *v, uint64_t *bytes, int64_t *files, sl_err *err);
/* After rd_verify_finish: bytes of file f hashed and found equal. */
uint64_t rd_verify_file_bytes(const rd_verify *v, int64_t f);
void rd_verify_free(rd_verify *v);

#endif /* SL_READ_VERIFY_H */
