/* read_verify.h - --verify (sl_load_opts.verify): the SHA-256 of every checkpoint file, computed
 * while its bytes stream through staging, checked against what is known of the file: a
 * `sha256sum` manifest (sl_load_opts.manifest_path) or, in a Hugging Face cache, the name of the
 * blob the file links to (an LFS blob is named by its SHA-256).
 *
 * A file can only be hashed whole and front to back, so a verified load reads every byte of every
 * file (the chunk planner covers [0, size): headers, and tensors no rule loads, are read too) and
 * hands its chunks, in chunk order (which is file order), to the hashing thread of their file
 * (files are spread over a few threads; read_pipeline.c):
 * a slot is reused once its bytes are scattered and hashed, so hashing overlaps the reads of the
 * other slots and the scatter on the loading thread. */
#ifndef SL_READ_VERIFY_H
#define SL_READ_VERIFY_H

#include "common/sl_err.h"
#include "load/engine.h"

#include <stdint.h>

typedef struct rd_verify rd_verify;

/* The expected digest of each of the n files (SL_E_INVALID_ARG, naming the file, when none is
 * known; SL_E_UNSUPPORTED without SHA-256 in the build). manifest: a sha256sum file, or NULL. */
sl_status rd_verify_new(const sl_load_file *files, int64_t n, const char *manifest, rd_verify **out,
                        sl_err *err);
/* Starts the hashing threads (one per file at a time, as many as CPUs and files allow, at most 4),
 * with room for `depth` chunks at once. */
sl_status rd_verify_start(rd_verify *v, unsigned depth, sl_err *err);
/* Queues bytes [a, b) of file f, which must follow the bytes queued before for f; data stays
 * valid until tag comes back from rd_verify_done. At most `depth` chunks out at once. */
void rd_verify_push(rd_verify *v, int64_t f, uint64_t a, uint64_t b, const unsigned char *data,
                    void *tag);
/* The tag of a hashed chunk, or NULL when none is done yet (block: wait for one, when any is
 * queued). */
void *rd_verify_done(rd_verify *v, int block);
/* Every file hashed whole and equal to its digest: SL_E_INTEGRITY naming the first that is not. */
sl_status rd_verify_finish(rd_verify *v, uint64_t *bytes, int64_t *files, sl_err *err);
void rd_verify_free(rd_verify *v);

#endif /* SL_READ_VERIFY_H */
