/* read_manifest.h - reading --verify's manifest (read_manifest.c): what each checkpoint file must
 * be, from a sha256sum file with or without the block lines whose layout read_verify.h gives. */
#ifndef SL_READ_MANIFEST_H
#define SL_READ_MANIFEST_H

#include "common/sl_err.h"
#include "common/sl_sha256.h"
#include "shardload.h"

#include <stdint.h>

/* The JSON files of a folder that sl_write_manifest lists after its data files. */
#define RD_SIDE_FILES {"config.json", "model.safetensors.index.json"}

/* One checkpoint file as --verify sees it: what it must be (the manifest's, rd_manifest_parse, or
 * another digest source, read_verify.c) and the state of its hashing (read_verify.c). */
typedef struct rd_vfile {
    const char *path;
    uint64_t size;
    char want[SL_SHA256_HEX];
    const char *source;  /* where want comes from, for the message */
    sl_sha256 *h;
    uint64_t next;       /* bytes hashed so far: [0, next) */
    /* by blocks: the manifest's record of the file */
    uint64_t block, header_end;
    uint64_t *blocks;    /* n_blocks XXH3-64, block 0 first */
    uint64_t n_blocks;
    uint64_t checked;    /* bytes hashed and found equal (under rd_verify.mu while threads run) */
} rd_vfile;

/* The manifest's text, read once per load (sl_load_job_plan) for both of its uses below: *text
 * is NUL-terminated, the caller frees it. Unreadable, not a regular file or over RD_MANIFEST_MAX:
 * SL_E_INVALID_ARG naming path. */
sl_status rd_manifest_load(const char *path, char **text, size_t *len, sl_err *err);
/* Reads the manifest's text [text, text + len) (no NUL needed; path names it in messages) into
 * v[0..n), whose path and size are set: want and source from sha256sum lines, block, header_end,
 * blocks and n_blocks from block records (files matched by their last path component, records of
 * other files skipped). A malformed line is SL_E_INVALID_ARG naming its number; a record whose
 * size is not the file's SL_E_INTEGRITY (the manifest is stale). The caller frees each
 * v[i].blocks, also on failure. */
sl_status rd_manifest_parse(rd_vfile *v, int64_t n, const char *path, const char *text, size_t len,
                            sl_err *err);
/* The folder's JSON files the manifest (its text, as rd_manifest_parse's) names (config.json,
 * model.safetensors.index.json: RD_SIDE_FILES), against their SHA-256 there: the config decides
 * the layout a load gives a folder's parts, which their own blocks do not cover. One that
 * differs, or is gone, is SL_E_INTEGRITY naming it; a manifest naming none (written before they
 * were listed) checks none. */
sl_status rd_manifest_check_side(const sl_checkpoint *ck, const char *path, const char *text,
                                 size_t len, sl_err *err);
/* The last path component of path. */
const char *rd_base(const char *path);

#endif /* SL_READ_MANIFEST_H */
