/* ckpt_merge.h - the checks across a checkpoint's files (ckpt_merge.c), run by ckpt_open.c once
 * every header is read. */
#ifndef SL_CKPT_MERGE_H
#define SL_CKPT_MERGE_H

#include "ckpt/checkpoint.h"

/* The tensor table (ordered by file and offset) and the by-name index, from the files' headers. */
sl_status ck_build_tensors(sl_checkpoint *ck);
/* SAFETENSORS.md I6: a name in two files (once per device in a pre-sharded directory). */
sl_status ck_check_duplicates(sl_checkpoint *ck);
/* I4 and I5: the index's weight_map against its shards (files opened in ix->shards order). */
sl_status ck_check_index(sl_checkpoint *ck, const st_index *ix);
/* Marks the files' ranks when every file is a model-rank-{d}-part-{p}.safetensors. */
void ck_detect_presharded(sl_checkpoint *ck);
/* A warning on ck (sl_checkpoint_warning), one printable line. */
void ck_warn(sl_checkpoint *ck, const char *fmt, ...) SL_PRINTF(2, 3);
/* I7: a total_size that disagrees with the shards is a warning (index_path names it). */
void ck_check_total_size(sl_checkpoint *ck, const st_index *ix, const char *index_path);

#endif /* SL_CKPT_MERGE_H */
