/* reshard_outdir.h - what a reshard's output directory may hold before anything is written
 * (reshard_outdir.c). */
#ifndef SL_RESHARD_OUTDIR_H
#define SL_RESHARD_OUTDIR_H

#include "shardload.h"

#include "common/sl_err.h"

#include <stdint.h>

/* Refuses, with SL_E_INVALID_ARG and a message naming outdir, an output directory that
 *  - is, or contains, the checkpoint ck (its directory or any of its files, compared as real
 *    paths): the reshard would overwrite its own input;
 *  - holds a Hugging Face checkpoint (model.safetensors.index.json, or *.safetensors files that
 *    are not rank files): the result would mix two checkpoints, and the index would win;
 *  - holds rank files model-rank-{d}-part-{p}.safetensors this reshard does not write (d not
 *    below n_devices, or p not below n_parts[d]): left from a reshard for another mesh or part
 *    size, they would make the result unloadable.
 * An outdir that does not exist yet passes. Reads the directory only. */
sl_status sl_reshard_check_outdir(const char *outdir, const sl_checkpoint *ck, const int64_t *n_parts,
                                  int32_t n_devices, sl_err *err);

#endif /* SL_RESHARD_OUTDIR_H */
