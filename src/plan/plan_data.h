/* plan_data.h - the in-memory plan that the planner (src/plan) builds and the loading engine
 * (src/load) executes. A plan does no I/O: for every device it lists the parameters the device
 * holds and the operations that fill them.
 *
 * Device buffers: each device's parameters are packed back to back, in the order of `params`, with
 * no gaps, in the plan's dtype. A device buffer is therefore exactly `bytes` long.
 *
 * Operations: every byte of every parameter is written by exactly one operation.
 *  - SL_OP_COPY moves `rows` rows of `row_elems` elements each. Row k comes from file offset
 *    src_offset + k*src_stride (elements in src_dtype) and goes to device byte offset
 *    dst_offset + k*dst_stride (elements in the plan's dtype; converted when the dtypes differ).
 *    Coalesced: whenever rows are contiguous on both sides they are one row, so each contiguous
 *    source run is one operation.
 *  - SL_OP_ZERO writes `rows * row_elems` zero elements contiguously at dst_offset (padding).
 *  A plan built without a checkpoint still has its operations (so dummy loads know which regions
 *  hold data and which are padding): their `file` is -1 and src_offset is relative to the start
 *  of the checkpoint tensor.
 * Operations of a device are sorted by (file, src_offset); in a plan without a checkpoint they are
 * in parameter order (no file to order them by). */
#ifndef SL_PLAN_DATA_H
#define SL_PLAN_DATA_H

#include "shardload.h"

#include "common/sl_arena.h"
#include "common/sl_err.h"

#include <stdint.h>

#define SL_PLAN_MAX_DIMS 4

typedef enum sl_op_kind { SL_OP_COPY = 0, SL_OP_ZERO = 1 } sl_op_kind;

typedef struct sl_op {
    sl_op_kind kind;
    sl_dtype src_dtype;      /* COPY: checkpoint dtype of the tensor */
    int32_t file;            /* COPY: checkpoint file index, -1 without a checkpoint */
    int64_t tensor;          /* COPY: checkpoint tensor index (sl_checkpoint_tensor), -1 without */
    int64_t param;           /* index into the device's params */
    uint64_t src_offset;     /* COPY: absolute file offset of row 0 */
    uint64_t src_stride;     /* COPY: bytes between consecutive source rows */
    uint64_t dst_offset;     /* byte offset of row 0 in the device buffer */
    uint64_t dst_stride;     /* bytes between consecutive destination rows */
    uint64_t rows;
    uint64_t row_elems;      /* elements per row */
} sl_op;

typedef struct sl_plan_param {
    const char *name;        /* arena */
    sl_dtype dtype;          /* the plan's dtype, or F8_E4M3 / F32 for an FP8 weight / its scale */
    uint32_t ndim;
    uint64_t shape[SL_PLAN_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;         /* in the device buffer */
} sl_plan_param_t;           /* _t: the plain name is the public getter sl_plan_param() */

typedef struct sl_plan_device {
    int32_t index, tp_rank, pp_rank;
    sl_plan_param_t *params;
    int64_t n_params;
    sl_op *ops;
    int64_t n_ops;
    uint64_t bytes;          /* sum of params' nbytes == buffer size */
    uint64_t *file_bytes;    /* n_files entries: source bytes this device needs from each file */
} sl_plan_device;

struct sl_plan {
    sl_err err;
    sl_arena arena;
    sl_layout layout;
    int32_t tp, pp;
    int32_t ep;              /* expert parallelism (sl_plan_opts.ep): experts spread over tp ranks */
    sl_dtype dtype;          /* every parameter's dtype */
    int32_t n_devices;       /* tp * pp */
    int64_t *stage_start;    /* pp + 1 entries: stage s holds decoder layers [stage_start[s],
                                stage_start[s + 1]) (arena); NULL for a plan from boxes */
    int stages_custom;       /* sl_plan_opts.pp_partition gave a split other than vLLM's default:
                                reshard stamps it on the parts ("pp_partition") */
    sl_plan_device *devices;
    int64_t n_files;         /* checkpoint files (0 without a checkpoint) */
    uint64_t total_bytes;    /* sum of device bytes */
    uint64_t read_bytes;     /* union of all COPY source bytes; UINT64_MAX without a checkpoint */
    int has_checkpoint;
    uint64_t ck_digest;      /* sl_plan_ckpt_digest of the checkpoint it was made for */
    int tied;                /* the config ties embeddings (reshard stores the shared tensor once) */
    const char *tied_stored; /* tied: the name pre-sharded files keep the last stage's copy of
                                tied_param under (arena); NULL when not tied */
    const char *tied_param;
    int tied_every_stage;    /* tied_stored names every stage's copy, not only the last's */
    char *config_text;       /* the config the plan was built from, as JSON text (taken from the
                                sl_arch, freed by sl_plan_free; NULL for a plan from boxes):
                                reshard writes it as the output's config.json */
};

/* A digest of what p's operations take from ck: the name, dtype, shape, file and byte range of
 * the tensor each reads (not paths or contents: a copy elsewhere, or other weights in the same
 * layout, load with the same plan). O(operations): a JAX load plans and loads each group. */
uint64_t sl_plan_ckpt_digest(const sl_plan *p, const sl_checkpoint *ck);

/* The layers of each pipeline stage as VLLM_PP_LAYER_PARTITION writes them, "10,12,10", into a
 * malloc'd string (NULL: out of memory, or a plan from boxes). */
char *sl_plan_partition_text(const sl_plan *p);

/* The tensor name a pre-sharded file stores parameter `param` of device d under: its own, except
 * the last stage's copy of a tied embedding, or every stage's (sl_plan.tied_stored,
 * tied_every_stage). */
const char *sl_plan_stored_name(const sl_plan *p, const sl_plan_device *d, const char *param);

#endif /* SL_PLAN_DATA_H */
