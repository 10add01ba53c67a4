/* checkpoint.h - the sl_checkpoint handle, shared by the pieces of src/ckpt/ that build and read it:
 *
 *   ckpt_open.c    sl_checkpoint_open and _close: which files (a file, a directory, an index), and
 *                  each file's header read and validated
 *   ckpt_merge.c   the files' tensors merged into one table, with the checks across files (names
 *                  in two files, the index against its shards, pre-sharded rank files, warnings)
 *   checkpoint.c   the getters of shardload.h, and ck_file_id for the loader
 *   ckpt_remote.c  the same open for http://, https:// and s3://, and sl_checkpoint_fetch
 *   ckpt_read.c    sl_checkpoint_read: a byte range of one file, local or remote
 */
#ifndef SL_CKPT_CHECKPOINT_H
#define SL_CKPT_CHECKPOINT_H

#include "shardload.h"

#include "format/st_format.h"
#include "common/sl_err.h"
#include "common/sl_file.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ck_file {
    char *path;
    uint64_t size;
    sl_file_id id;              /* device, inode, size and mtime when its header was read */
    st_header h;
    int32_t rank;               /* device of a pre-sharded file (model-rank-{d}-part-{p}), else -1 */
    struct sl_http_obj *remote; /* a remote file (ckpt_remote.c): path is its name, id not valid */
} ck_file;

typedef struct ck_name {
    const char *name;
    int32_t rank;               /* of the tensor's file: entries sort by (name, rank, idx) */
    int64_t idx;
} ck_name;

struct sl_checkpoint {
    sl_err err;
    char *dir;
    ck_file *files;
    size_t n_files, cap_files;
    sl_tensor_info *tensors;    /* ordered by (file, offset) */
    size_t n_tensors;
    ck_name *by_name;           /* sorted by name, for O(log n) look-up */
    uint64_t total_bytes;
    bool presharded;            /* every file is model-rank-{d}-part-{p}.safetensors */
    char **warnings;            /* what is odd but not wrong (I7); the loader never relies on it */
    size_t n_warnings;
    struct sl_http_cfg *remote_cfg;   /* remote checkpoints: their settings (ckpt_remote.c) */
    char *remote_base;          /* and the directory's URL as given (dir: without credentials) */
};

/* The identity file `file` had when the checkpoint was opened (sl_file.h); SL_E_INVALID_ARG out of
 * range. The loader compares it with the file it opens, so that a file replaced or rewritten
 * since the open is SL_E_CHANGED, not another model's bytes. */
sl_status ck_file_id(const sl_checkpoint *ck, int64_t file, sl_file_id *out);

/* ckpt_remote.c: the remote object of file `file` (NULL for a local file or out of range), and
 * what sl_checkpoint_close frees of a remote checkpoint. */
const struct sl_http_obj *ck_file_remote(const sl_checkpoint *ck, int64_t file);
void ck_remote_free(sl_checkpoint *ck);

#endif /* SL_CKPT_CHECKPOINT_H */
