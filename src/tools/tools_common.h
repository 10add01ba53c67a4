/* tools_common.h - small file helpers shared by synth.c and reshard.c. */
#ifndef SL_TOOLS_COMMON_H
#define SL_TOOLS_COMMON_H

#include "common/sl_err.h"
#include "shardload.h"

#include <stddef.h>
#include <stdint.h>

/* Removes path (absent is fine) unless it is the very file keep_if_same names (same device and
 * inode; keep_if_same may be NULL). Both tools write their config.json last, so an older one must
 * go before anything else is written, but never the source config itself. */
sl_status sl_tools_remove_stale(const char *path, const char *keep_if_same, sl_err *err);
/* sl_tools_remove_stale of each of dir/names[0..n), each kept when it is keep_dir/<same name>
 * (keep_dir may be NULL). */
sl_status sl_tools_remove_stale_names(const char *dir, const char *keep_dir, const char *const *names,
                                      size_t n, sl_err *err);

/* The manifest sl_write_manifest writes by default (sha256sum's conventional name). */
#define SL_TOOLS_MANIFEST "SHA256SUMS"

/* transformers' name of a dtype a tool writes ("bfloat16", "float16", "float32"), for a
 * config's torch_dtype; NULL for any other. */
const char *sl_tools_torch_dtype(sl_dtype dt);

/* Refuses (SL_E_IO, naming dir and both figures) to write `need` bytes into dir when its file
 * system has less free space (statvfs: blocks available to this user), counting `reclaimed` bytes
 * of files the writing replaces as free. A file system that cannot say passes. */
sl_status sl_tools_check_space(const char *dir, uint64_t need, uint64_t reclaimed, sl_err *err);
/* Size of path if it is a regular file, else 0: what replacing it frees. */
uint64_t sl_tools_file_size(const char *path);

/* Creates dir and its missing parents (as `mkdir -p`, 0755); *made: how many of them this call
 * created (0: dir was there), so that a failed run takes them away again (sl_tools_unmake_dir).
 * A dir that exists but is not a directory, or that cannot be created: SL_E_IO naming it. */
sl_status sl_tools_make_dir(const char *dir, int *made, sl_err *err);
/* Removes the `made` directories that sl_tools_make_dir created for dir, deepest first, each only
 * if empty (a directory someone else put a file into stays). */
void sl_tools_unmake_dir(const char *dir, int made);

#endif /* SL_TOOLS_COMMON_H */
