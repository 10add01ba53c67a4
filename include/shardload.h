/* shardload.h - the one public header of libshardload.
 *
 * shardload loads safetensors checkpoints (Hugging Face layout) straight into the memory of a mesh of
 * devices, each device getting exactly its tensor-parallel / pipeline-parallel / SPMD shard.
 *
 * The flow is: open a checkpoint (sl_checkpoint_open) -> build a plan for a mesh (sl_plan_build)
 * -> execute it (sl_load). Each step hands back an opaque handle.
 *
 * Conventions
 * - Every fallible call returns sl_status (0 = SL_OK). Results go through out-parameters.
 * - Constructors hand back a handle even when they fail (unless out of memory), so that the detailed
 *   message can be read with the handle's *_errmsg() getter. The message is owned by the handle and
 *   stays valid until the next call on it. Destructors accept NULL; getters take a NULL handle as
 *   an empty one (0, NULL; a NULL plan's dtype -1), and a NULL out-pointer is SL_E_INVALID_ARG.
 * - The library never prints, aborts or exits. Strings returned by getters are borrowed from the handle.
 */
#ifndef SHARDLOAD_H
#define SHARDLOAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Built with -fvisibility=hidden, the library exports only what this header declares. */
#if defined(SL_BUILDING_LIBRARY) && defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define SL_VERSION_MAJOR 0
#define SL_VERSION_MINOR 1
#define SL_VERSION_PATCH 0
#define SL_VERSION_STRING "0.1.0"

/* ---- status ------------------------------------------------------------------------------------- */

/* Every status as X(name, value, meaning), the one list that the enum, sl_status_str and
 * sl_status_meaning are made from; docs/errors.md has a row for each (tests/test_status.c checks it).
 * Values are stable: never renumber, only append. */
#define SL_STATUS_LIST(X)                                                                          \
    X(SL_OK, 0, "success")                                                                         \
    /* safetensors format: one per reference error class (SAFETENSORS.md section 2) */           \
    X(SL_E_HEADER_TOO_SMALL, 1, "file shorter than 8 bytes")                                       \
    X(SL_E_HEADER_TOO_LARGE, 2, "N > 100,000,000")                                                 \
    X(SL_E_HEADER_LENGTH, 3, "8 + N beyond the end of the file")                                   \
    X(SL_E_HEADER_UTF8, 4, "header bytes are not valid UTF-8")                                     \
    X(SL_E_HEADER_JSON, 5, "syntax, type, missing field, unknown dtype, bad number, depth")        \
    X(SL_E_INVALID_OFFSET, 6, "hole, overlap, reversed range, first tensor not at 0")              \
    X(SL_E_OVERFLOW, 7, "shape product or bit count overflows u64")                                \
    X(SL_E_MISALIGNED, 8, "numel * bits not a multiple of 8")                                      \
    X(SL_E_TENSOR_INFO, 9, "data_offsets length disagrees with dtype and shape")                   \
    X(SL_E_INCOMPLETE, 10, "data buffer not exactly covered (short file, trailing bytes)")         \
    X(SL_E_POLICY, 11, "accepted by the reference, rejected by shardload on purpose")              \
    /* checkpoints */                                                                              \
    X(SL_E_INDEX, 20, "an index breaks I1-I7, or a directory mixes HF shards and rank files")      \
    X(SL_E_NOT_FOUND, 21, "a file or a tensor that should exist does not")                         \
    X(SL_E_DUPLICATE, 22, "one tensor name in two files")                                          \
    /* system */                                                                                   \
    X(SL_E_IO, 30, "open/read/write failed; errno is in the message")                              \
    X(SL_E_NOMEM, 31, "out of memory")                                                             \
    X(SL_E_INVALID_ARG, 32, "caller error: bad option, out-of-range index")                        \
    X(SL_E_UNSUPPORTED, 33, "feature not built in or not available here (CUDA, io_uring)")         \
    X(SL_E_CANCELLED, 34, "stopped by sl_cancel (a signal, in the CLI); unfinished files removed") \
    /* planning */                                                                                 \
    X(SL_E_CONFIG, 40, "config.json or rule table unreadable or inconsistent")                     \
    X(SL_E_SHAPE, 41, "checkpoint tensor shape differs from the config's")                         \
    X(SL_E_DIVISIBILITY, 42, "a dimension does not divide over the mesh")                          \
    X(SL_E_UNCLAIMED, 43, "checkpoint tensor that no rule claims")                                 \
    X(SL_E_MISSING, 44, "parameters not initialized from the checkpoint")                          \
    /* loading */                                                                                  \
    X(SL_E_CHANGED, 50, "a file changed since its open (size, inode, mtime, short read, FIFO)")    \
    X(SL_E_DEVICE, 51, "device backend failure")                                                   \
    X(SL_E_INTEGRITY, 52, "a file's bytes differ from their SHA-256 or XXH3 blocks (--verify)")

#define SL_STATUS_ENUM_(name, value, meaning) name = value,
typedef enum sl_status { SL_STATUS_LIST(SL_STATUS_ENUM_) } sl_status;
#undef SL_STATUS_ENUM_

/* Stable name of a status, e.g. "SL_E_HEADER_JSON"; "SL_E_UNKNOWN" for another value. */
const char *sl_status_str(sl_status st);
/* What a status means, in a few words (the list above); "" for an unknown value. */
const char *sl_status_meaning(sl_status st);

/* Frees memory the library handed to the caller to own (sl_checkpoint_fetch_bytes,
 * sl_dist_gather_text): the same as free(), for callers that cannot reach the C library's
 * (Python's ctypes, another runtime's allocator). NULL is allowed. */
void sl_free(void *p);

/* ---- dtypes ------------------------------------------------------------------------------------- */

/* In the reference's enum order, which is also the writer's serialization order. */
typedef enum sl_dtype {
    SL_DTYPE_BOOL = 0,
    SL_DTYPE_F4,
    SL_DTYPE_F6_E2M3,
    SL_DTYPE_F6_E3M2,
    SL_DTYPE_U8,
    SL_DTYPE_I8,
    SL_DTYPE_F8_E5M2,
    SL_DTYPE_F8_E4M3,
    SL_DTYPE_F8_E8M0,
    SL_DTYPE_F8_E4M3FNUZ,
    SL_DTYPE_F8_E5M2FNUZ,
    SL_DTYPE_I16,
    SL_DTYPE_U16,
    SL_DTYPE_F16,
    SL_DTYPE_BF16,
    SL_DTYPE_I32,
    SL_DTYPE_U32,
    SL_DTYPE_F32,
    SL_DTYPE_C64,
    SL_DTYPE_F64,
    SL_DTYPE_I64,
    SL_DTYPE_U64,
    SL_DTYPE_COUNT
} sl_dtype;

/* The safetensors name ("BF16"), or NULL for an out-of-range value. */
const char *sl_dtype_name(sl_dtype dt);
/* Size of one element in bits (4, 6, 8, 16, 32 or 64); 0 for an out-of-range value. */
unsigned sl_dtype_bits(sl_dtype dt);
/* Exact, case-sensitive look-up of a safetensors name of len bytes. Returns -1 when unknown. */
int sl_dtype_from_name(const char *name, size_t len, sl_dtype *out);

/* ---- checkpoints (reader) ----------------------------------------------------------------------- */

typedef struct sl_checkpoint sl_checkpoint;

typedef struct sl_tensor_info {
    const char *name;        /* borrowed, NUL-terminated (names with U+0000 are rejected) */
    sl_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;   /* borrowed, ndim entries */
    int32_t file;            /* index into the checkpoint's files */
    uint64_t offset;         /* absolute byte offset of the data in that file */
    uint64_t nbytes;
} sl_tensor_info;

/* Opens a .safetensors file, or a directory: with model.safetensors.index.json only the files its
 * weight_map names, without one every *.safetensors in it (sorted by name). Every header is read
 * and fully validated. On failure *out still holds a handle (unless SL_E_NOMEM) whose errmsg reads
 * "<file>: <what is wrong>". */
sl_status sl_checkpoint_open(const char *path, sl_checkpoint **out);
/* The same, and for remote checkpoints (docs/remote.md): "http(s)://HOST/DIR/" or
 * "s3://BUCKET/PREFIX/" (with the index, else, for S3, every *.safetensors under the prefix), or
 * the URL of one .safetensors file. Each file's size and header come from small ranged GETs; the
 * loader then reads its bytes with ranged GETs into the same staging. o's s3_ and remote_ fields
 * apply (NULL: defaults, unsigned); a local path ignores o. sl_checkpoint_open takes URLs too,
 * with the defaults. File paths and sl_checkpoint_dir are then the URLs without credentials. */
struct sl_load_opts;
sl_status sl_checkpoint_open_opts(const char *path, const struct sl_load_opts *o, sl_checkpoint **out);
/* Copies the file `name` next to a remote checkpoint (config.json, a rule table) to the local
 * path dest, with the checkpoint's settings; SL_E_NOT_FOUND when the server has none,
 * SL_E_INVALID_ARG for a local checkpoint. A one-line message goes to err (errlen bytes). */
sl_status sl_checkpoint_fetch(const sl_checkpoint *ck, const char *name, const char *dest, char *err,
                              size_t errlen);
/* The same file held in memory: *buf (NUL-terminated past its *len bytes; free it with sl_free)
 * and *len, at most 16 MiB; on failure *buf is NULL. What the CLI and the Python package use for
 * a remote config.json, which then needs no temporary file. dest above is written to a temporary
 * name in its folder and renamed, so a failed fetch never leaves part of a file there. */
sl_status sl_checkpoint_fetch_bytes(const sl_checkpoint *ck, const char *name, char **buf, size_t *len,
                                    char *err, size_t errlen);
/* n bytes at offset of file `file` into buf (local preads or ranged GETs of 64 MiB at most, the
 * checkpoint's settings); SL_E_INVALID_ARG past the file's end, SL_E_CHANGED if it changed since
 * the open, SL_E_CANCELLED after sl_cancel (checked between chunks); message to err.
 * Safe from several threads: a remote checkpoint's calls take turns on its one connection. */
sl_status sl_checkpoint_read(const sl_checkpoint *ck, int64_t file, uint64_t offset, void *buf, size_t n,
                             char *err, size_t errlen);
void sl_checkpoint_close(sl_checkpoint *ck);
const char *sl_checkpoint_errmsg(const sl_checkpoint *ck);
/* What an open found odd but not wrong, e.g. an index whose metadata.total_size does not match
 * its shards (SAFETENSORS.md I7): one line each, naming the file. Borrowed; NULL out of range. */
int64_t sl_checkpoint_warning_count(const sl_checkpoint *ck);
const char *sl_checkpoint_warning(const sl_checkpoint *ck, int64_t i);

/* The directory holding the checkpoint (the path itself for a directory). Borrowed. */
const char *sl_checkpoint_dir(const sl_checkpoint *ck);
int64_t sl_checkpoint_file_count(const sl_checkpoint *ck);
const char *sl_checkpoint_file_path(const sl_checkpoint *ck, int64_t file);     /* borrowed */
uint64_t sl_checkpoint_file_size(const sl_checkpoint *ck, int64_t file);
/* Byte offset where a file's data buffer starts (8 + N). */
uint64_t sl_checkpoint_file_data_start(const sl_checkpoint *ck, int64_t file);
/* __metadata__ entries of one file. */
int64_t sl_checkpoint_metadata_count(const sl_checkpoint *ck, int64_t file);
sl_status sl_checkpoint_metadata(const sl_checkpoint *ck, int64_t file, int64_t i,
                                 const char **key, const char **value);

/* Tensors of all files, ordered by (file, offset). */
int64_t sl_checkpoint_tensor_count(const sl_checkpoint *ck);
sl_status sl_checkpoint_tensor(const sl_checkpoint *ck, int64_t i, sl_tensor_info *out);
/* O(log n) look-up by name; -1 when absent. */
int64_t sl_checkpoint_find_tensor(const sl_checkpoint *ck, const char *name);
/* Sum of data-buffer bytes over all files. */
uint64_t sl_checkpoint_total_bytes(const sl_checkpoint *ck);
/* A directory whose files are all model-rank-{d}-part-{p}.safetensors (what sl_reshard writes) is
 * pre-sharded: each device d has its own files, and a name may occur once per device (find_tensor
 * then returns one of them). Returns d for such a file, -1 otherwise. */
int32_t sl_checkpoint_file_rank(const sl_checkpoint *ck, int64_t file);

/* Resolves "hf://org/name[@revision]" (revision: a branch or tag under refs/, or a 40-digit
 * commit; default "main") in a Hugging Face hub cache folder (huggingface_hub's layout:
 * models--org--name/refs/<revision> holds a commit, snapshots/<commit>/ the files) to the snapshot
 * folder, which sl_checkpoint_open then opens like any checkpoint folder. No network. hub_cache is
 * the cache folder itself: the library reads no environment, so callers pass what huggingface_hub
 * would use ($HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub; the CLI and the Python package do). Writes the folder to out (outlen
 * bytes; 4096 is enough for any real cache); on failure "" there and a one-line message to err:
 * SL_E_INVALID_ARG for a malformed reference (a "..", an empty part or a byte outside the hub's
 * names), SL_E_NOT_FOUND for a model, revision or snapshot the cache does not hold. */
sl_status sl_hf_resolve(const char *ref, const char *hub_cache, char *out, size_t outlen, char *err,
                        size_t errlen);

/* Validates a whole safetensors file held in memory, with the same rules as sl_checkpoint_open.
 * `name` is used in the message written to err (errlen bytes, may be 0). For fuzzing and tests. */
sl_status sl_validate_buffer(const void *buf, size_t len, const char *name, char *err, size_t errlen);

/* Validates a model.safetensors.index.json held in memory (rules I1-I3; I4-I7 need the shards). */
sl_status sl_validate_index_buffer(const void *buf, size_t len, char *err, size_t errlen);

/* ---- safetensors writer ------------------------------------------------------------------------- */

typedef struct sl_writer sl_writer;

/* Writing goes in three steps: declare every tensor with sl_writer_add, then sl_writer_begin writes
 * the header (padded with spaces so data starts at a multiple of 8; tensors ordered by dtype
 * descending then name, as the reference writer does), then the data of each tensor is written,
 * in any order and in pieces, with sl_writer_write. sl_writer_finish checks that every byte was
 * written and syncs. Memory use is independent of the data size. */
sl_status sl_writer_open(const char *path, sl_writer **out);
sl_status sl_writer_set_metadata(sl_writer *w, const char *key, const char *value);
/* Returns the tensor's writer index in *idx (may be NULL). */
sl_status sl_writer_add(sl_writer *w, const char *name, sl_dtype dt, uint32_t ndim,
                        const uint64_t *shape, int64_t *idx);
sl_status sl_writer_begin(sl_writer *w);
sl_status sl_writer_write(sl_writer *w, int64_t idx, uint64_t offset, const void *data, size_t n);
sl_status sl_writer_finish(sl_writer *w);
/* Frees the writer; a file not finished is removed. */
void sl_writer_free(sl_writer *w);
const char *sl_writer_errmsg(const sl_writer *w);

/* ---- placement plans ---------------------------------------------------------------------------- */

typedef struct sl_plan sl_plan;

/* SL_LAYOUT_BOXES: a plan made by sl_plan_build_boxes (no layout rule). */
typedef enum sl_layout { SL_LAYOUT_TP = 0, SL_LAYOUT_SPMD = 1, SL_LAYOUT_BOXES = 2 } sl_layout;

typedef struct sl_plan_opts {
    int32_t tp;               /* tensor-parallel size T (spmd: mesh size N); default 1 */
    int32_t pp;               /* pipeline-parallel size P; default 1; must be 1 for spmd */
    sl_layout layout;         /* default SL_LAYOUT_TP */
    int32_t dtype;            /* target sl_dtype (F32, F16, BF16), or -1 for the config's torch_dtype */
    const char *config_path;  /* config.json; NULL: <checkpoint dir>/config.json. With config_json
                                 only the name its messages use (see below) */
    const char *rules_path;   /* user rule table; NULL: built-in table for architectures[0] */
    int32_t ep;               /* 1: expert parallelism (vLLM enable_expert_parallel): the T ranks of
                                 a stage share the routed experts, each whole, in contiguous ranges
                                 (the first E % T ranks one more); 0 (default): every rank holds every
                                 expert, sliced like a dense MLP. Layout tp only */
    /* The config.json held in memory instead of a file (an engine's config, edited or not):
     * config_json_len bytes of JSON text, not necessarily NUL-terminated, borrowed only during
     * sl_plan_build. When set it is the config, read as a file's would be (the same parser, duplicate
     * keys rejected, the same 16 MiB limit and checks), and config_path, if also given, is only the
     * name its messages use; without one they say "config.json (in memory)". NULL (default): the
     * config comes from config_path or the checkpoint's directory (a length without a text is
     * SL_E_INVALID_ARG). */
    const char *config_json;
    size_t config_json_len;
    /* An explicit pipeline split, as vLLM's VLLM_PP_LAYER_PARTITION ("10,12,10") gives it:
     * pp_partition[s] decoder layers on stage s, stage s holding layers [sum of the entries
     * before s, that + pp_partition[s]). n_pp_partition entries, borrowed only during
     * sl_plan_build. As vLLM's get_pp_indices checks it: one entry per stage (n_pp_partition ==
     * pp), summing to num_hidden_layers (DeepSeek's num_nextn_predict_layers MTP layers past them
     * are no stage's), each >= 0 (a stage may hold no layer; vLLM takes a negative entry too and
     * builds an empty range, shardload refuses it). With a partition pp may exceed the layers,
     * where its zero entries say so. Layout tp only. NULL (default): vLLM's default split (L/P
     * each, the remainder one each to stages P-2, P-3, ...). The library reads no environment:
     * the CLI maps VLLM_PP_LAYER_PARTITION onto this (docs/rules.md, "Pipeline stages"). */
    const int32_t *pp_partition;
    int32_t n_pp_partition;
} sl_plan_opts;

void sl_plan_opts_init(sl_plan_opts *o);

/* Builds the plan. ck may be NULL: the plan then comes from the config alone (config_path or
 * config_json; no copy operations, read_bytes unknown). With a checkpoint every strictness rule of
 * SHARDING.md is enforced. */
sl_status sl_plan_build(const sl_checkpoint *ck, const sl_plan_opts *o, sl_plan **out);
void sl_plan_free(sl_plan *p);
const char *sl_plan_errmsg(const sl_plan *p);

typedef struct sl_param_info {
    const char *name;         /* borrowed */
    sl_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;    /* borrowed */
    uint64_t nbytes;
    uint64_t offset;          /* byte offset inside the device's buffer: parameters are packed with no
                                 gaps, so the buffer is exactly sl_plan_device_bytes long */
} sl_param_info;

/* One parameter of a plan made from index boxes: the part of checkpoint tensor `tensor` with
 * indices [start[k], start[k] + len[k]) in each of its ndim dimensions, on mesh device `device`.
 * It becomes the device's next parameter, named after the tensor, shaped len, C order. */
typedef struct sl_box {
    const char *tensor;
    int32_t device;
    uint32_t ndim;            /* must equal the tensor's */
    const uint64_t *start;    /* ndim entries */
    const uint64_t *len;      /* ndim entries */
    int32_t dtype;            /* this box's target where the plan's dtype is SL_BOX_DTYPES */
} sl_box;

/* sl_plan_build_boxes's dtype for a target per box: each box's dtype field (F32, F16, BF16, or
 * -1 to keep its tensor's dtype). One load then holds FP8 weights, their F32 scales and bf16
 * norms side by side, or the dtypes of a caller's preallocated arrays, each byte read once. */
#define SL_BOX_DTYPES (-2)

/* Builds a plan of n_devices mesh devices from n_boxes boxes (any sharding: JAX's
 * addressable_devices_indices_map, GSPMD tiles), instead of a layout rule: no config, no padding.
 * Boxes must lie inside their tensors, and a tensor has at most one box per device; boxes of
 * several devices may overlap (replicated parts are read once and copied to each). dtype: the
 * target of every box (F32, F16, BF16, converted on the way), -1 to keep each tensor in its own
 * dtype, or SL_BOX_DTYPES for each box's own (sl_plan_dtype is then the first box's; sub-byte
 * dtypes such as F4 cannot be boxed). Errors
 * name the tensor. The plan loads with sl_load like any other (layout
 * SL_LAYOUT_BOXES, tp = n_devices, pp = 1); it cannot be resharded. */
sl_status sl_plan_build_boxes(const sl_checkpoint *ck, const sl_box *boxes, int64_t n_boxes,
                              int32_t n_devices, int32_t dtype, sl_plan **out);

sl_layout sl_plan_layout(const sl_plan *p);
int32_t sl_plan_tp(const sl_plan *p);
int32_t sl_plan_pp(const sl_plan *p);
/* 1 when the plan spreads whole experts over the TP ranks (sl_plan_opts.ep on an MoE model at
 * tp > 1); 0 on a dense model or at tp 1 whatever was asked, since ep changes none of its bytes. */
int32_t sl_plan_ep(const sl_plan *p);
sl_dtype sl_plan_dtype(const sl_plan *p);
int32_t sl_plan_device_count(const sl_plan *p);
int64_t sl_plan_param_count(const sl_plan *p, int32_t dev);
sl_status sl_plan_param(const sl_plan *p, int32_t dev, int64_t i, sl_param_info *out);
/* Sum of the parameter bytes of one device (what the device must hold). */
uint64_t sl_plan_device_bytes(const sl_plan *p, int32_t dev);
uint64_t sl_plan_total_bytes(const sl_plan *p);
/* Checkpoint bytes to read when each byte is read once; UINT64_MAX without a checkpoint. */
uint64_t sl_plan_read_bytes(const sl_plan *p);
/* The decoder layers pipeline stage `stage` holds: [*first, *first + *count) (vLLM's
 * get_pp_indices: sl_plan_opts.pp_partition, else its default split); layout spmd's one stage
 * holds every layer. SL_E_INVALID_ARG for a stage out of range and for a plan from boxes (no
 * layers); *first and *count are then 0. */
sl_status sl_plan_stage_layers(const sl_plan *p, int32_t stage, int64_t *first, int64_t *count);
/* Tensor- and pipeline-parallel rank of device dev (spmd: its mesh position, pp rank 0);
 * SL_E_INVALID_ARG out of range. */
sl_status sl_plan_device_ranks(const sl_plan *p, int32_t dev, int32_t *tp_rank, int32_t *pp_rank);
/* Bytes device dev needs from checkpoint file f. */
uint64_t sl_plan_device_file_bytes(const sl_plan *p, int32_t dev, int64_t file);

/* ---- loading ------------------------------------------------------------------------------------ */

typedef struct sl_model sl_model;

typedef enum sl_io_mode { SL_IO_AUTO = 0, SL_IO_DIRECT = 1, SL_IO_BUFFERED = 2 } sl_io_mode;

typedef void (*sl_progress_fn)(void *user, uint64_t done_bytes, uint64_t total_bytes);

/* The host staging budget when none is given (sl_load_opts.staging_bytes 0 or from init). */
#define SL_STAGING_DEFAULT ((uint64_t)64 << 20)
/* The smallest budget that holds (one 4 KiB request with its O_DIRECT alignment); a smaller
 * staging_bytes is SL_E_INVALID_ARG. */
#define SL_STAGING_MIN ((uint64_t)16 << 10)

typedef struct sl_load_opts {
    const char *device;        /* "cpu" (default), "cuda" or "pjrt" */
    sl_io_mode io;
    int32_t threads;           /* I/O threads / queue depth, and for non-host devices the number
                                  of staging slots when request_bytes is 0; 0: automatic */
    uint64_t staging_bytes;    /* host staging budget; default SL_STAGING_DEFAULT (64 MiB), at
                                  least SL_STAGING_MIN (16 KiB) */
    uint64_t request_bytes;    /* size of one read request; 0 (default): 16 MiB, and for non-host
                                  devices (cuda) what cuts the budget into about `threads` (or as
                                  many as CPUs, at most 16) slots, 4 to 16 MiB each */
    int32_t dummy;             /* 1: fill per SHARDING.md's dummy rule, read no file */
    uint64_t seed;             /* dummy seed; default 1234 */
    int32_t numa;              /* cpu backend: bind device d to NUMA node d % nodes; 0: off */
    const int32_t *gpus;       /* cuda backend: GPU of mesh device d is gpus[d] (n_gpus entries, at
                                  least one per device); NULL: d % number of GPUs */
    int32_t n_gpus;
    /* Optional: dest[d] is memory the caller owns for mesh device d, at least
     * sl_plan_device_bytes(p, d) bytes: host memory for cpu, a CUDA device address (on the GPU that
     * device maps to) for cuda. The load writes the device's bytes there, padding zeros included,
     * and the model neither allocates nor frees it: an engine allocates its weights its own way and
     * views parameter i at dest[d] + sl_plan_param(p, d, i).offset. n_dest entries; a NULL entry
     * (or d >= n_dest) is allocated by the backend as usual. Under MPI, indexed by global device. */
    void *const *dest;
    int32_t n_dest;
    /* Optional: the mesh devices this process loads (n_devices distinct indices, each in
     * [0, sl_plan_device_count)); NULL: all of them. Only these devices are allocated and only the
     * checkpoint bytes they need are read: an engine rank loads devices = {rank}. The model's local
     * device k is mesh device devices[k] (sl_model_device_index). Not for sl_load_dist. */
    const int32_t *devices;
    int32_t n_devices;
    /* Optional, per-parameter destinations: param_dest[d][i] is memory the caller owns for
     * parameter i of mesh device d, at least sl_plan_param(p, d, i).nbytes bytes (host memory for
     * cpu, a CUDA device address on the device's GPU for cuda), so that an engine with its own
     * allocator gets each weight in its own tensor and no second copy exists. A NULL
     * param_dest[d] (or d >= n_param_dest) is allocated as usual; within a table every parameter
     * with bytes needs a pointer, and dest[d] must not also be given.
     * No two blocks (nor a block and a dest) of the devices loaded may overlap, and host memory
     * must be writable (not a read-only mapping). Checked before any byte is read. Under MPI,
     * indexed by global device. */
    void *const *const *param_dest;
    int32_t n_param_dest;
    sl_progress_fn progress;   /* may be NULL; called from the loading thread */
    void *progress_user;
    /* Engine choices (the library reads no environment; the CLI fills these from SL_IO_ENGINE and
     * SL_GATHER_ROWS): */
    const char *io_engine;     /* "io_uring", "pread" or "uring-inline"; NULL or "": io_uring
                                  where it works, else pread */
    uint64_t gather_rows;      /* cuda: same-dtype rows narrower than this many bytes are gathered
                                  on the host into ring pieces (a benchmark knob, docs/engine.md);
                                  0: off */
    uint64_t pjrt_assembly;    /* pjrt: bytes of assembly blocks per device, below which a
                                  parameter is assembled on the host rather than streamed (a
                                  benchmark knob, SL_PJRT_ASSEMBLY; docs/engine.md); 0: staging /
                                  mesh size; at least 64 KiB */
    int32_t pjrt_dma_map;      /* pjrt: 0: the staging block is DMA-mapped where the plugin can;
                                  -1: never (a benchmark knob, SL_PJRT_DMA_MAP=0: what the
                                  plugin's own staging of plain memory costs) */
    int32_t cuda_convert;      /* cuda: 1: bf16/f16 -> f32 conversions run on the GPU, the host
                                  sending the 16-bit bytes (half the link's bytes); 0: the host
                                  converts. A benchmark knob until checked on a GPU
                                  (SL_CUDA_CONVERT=gpu; docs/engine.md) */
    /* pjrt backend (device "pjrt"): the PJRT plugin to dlopen (xla_cpu_pjrt.so, JAX's
     * xla_cuda_plugin.so, libtpu.so), or, when pjrt_api is set, none: the parameters go into
     * pjrt_client (a PJRT_Client * of that const PJRT_Api *, owned by the caller, who initialized
     * the plugin; NULL: shardload makes one, shared by the mesh devices, destroyed with the last
     * model that uses it). docs/design.md "The pjrt backend". */
    const char *pjrt_plugin;
    const void *pjrt_api;
    void *pjrt_client;
    /* Remote checkpoints (http://, https://, s3://; docs/remote.md), given to
     * sl_checkpoint_open_opts. The library reads no environment: the CLI and the Python package
     * fill the s3_ fields from AWS_* and ~/.aws/credentials. NULL keys: unsigned requests. Only
     * libcurl reads its proxy variables (http_proxy, https_proxy, ALL_PROXY, NO_PROXY), as curl
     * and the AWS tools do (docs/remote.md). */
    const char *s3_endpoint;      /* S3-compatible endpoint, "http://127.0.0.1:9000"; NULL: AWS */
    const char *s3_region;        /* SigV4 region; NULL or "": us-east-1. A bucket S3 says is in
                                     another region is opened once more in the one it names, with
                                     a checkpoint warning (docs/remote.md) */
    const char *s3_access_key;
    const char *s3_secret_key;
    const char *s3_session_token; /* temporary credentials; NULL: none */
    int32_t s3_addressing;        /* 0: path-style with an endpoint, virtual-host on AWS for a
                                     bucket that is one DNS label (else path-style); 1: path-
                                     style; 2: virtual-host (bucket.host) */
    /* Transfers; 0: the default. The open uses its own options, the load its own where it sets
     * them (else the open's). */
    int32_t remote_connections;   /* most ranged GETs in flight; default 16 */
    uint64_t remote_range_bytes;  /* most bytes per GET; default 8 MiB (at least 4 KiB) */
    int32_t remote_retries;       /* failures in a row (without progress) retried per range:
                                     connection errors, timeouts, 5xx, 429; default 5, -1: none */
    int32_t remote_backoff_ms;    /* first wait between tries, doubled each time, with jitter;
                                     default 200 */
    int32_t remote_timeout_ms;    /* connect timeout; a GET with no byte for this long is retried;
                                     default 30000 */
    /* 1: verify the bytes while they stream through staging. When manifest_path has XXH3 blocks
     * for every file (sl_write_manifest's), the blocks the load reads (reads are widened to whole
     * 1 MiB blocks, headers' blocks included; sl_load_dist too, each rank its own reads); else
     * every checkpoint file's SHA-256 (every byte of every file is read, headers and unloaded
     * tensors too) against manifest_path (a sha256sum file; files matched by name) or, in a
     * Hugging Face cache, the blob each file links to (not under --dist cooperative). No digest
     * known for a file: SL_E_INVALID_ARG before reading; a manifest whose size for a file is not
     * its size: SL_E_INTEGRITY before reading; a mismatch: SL_E_INTEGRITY naming the file (and the
     * byte range, by blocks), and nothing stays allocated. docs/engine.md, Pipeline, step 7. */
    int32_t verify;
    const char *manifest_path;
    /* https (docs/remote.md), given to sl_checkpoint_open_opts with the s3_ fields: the PEM file of
     * the certificate authorities to trust instead of the system's (libcurl's CURLOPT_CAINFO; the
     * CLI's --ca-bundle); NULL: the system's. A certificate that is not trusted fails at once,
     * naming the URL (not retried). */
    const char *ca_bundle;
    /* Gaps between the byte ranges of a file that the devices need, read rather than skipped so
     * that requests stay large: 0 (default): gaps under 1 MiB (a sixteenth of a smaller request);
     * 1 to SL_READ_GAP_MAX: gaps under that many bytes; SL_READ_GAP_NONE: none, so that a process
     * reads only the bytes its devices need (each row of a weight split along its rows, such as
     * o_proj at tp > 1, becomes its own request; a file read with O_DIRECT is still read in whole
     * 4 KiB pages, each once). Under sl_load_dist every rank must give the same value. */
    int64_t read_gap;
} sl_load_opts;

#define SL_READ_GAP_NONE ((int64_t)-1)
#define SL_READ_GAP_MAX ((int64_t)1 << 20)

void sl_load_opts_init(sl_load_opts *o);

/* The CUDA runtime library the cuda backend loads, once per process, at its first use (the CLI
 * passes SL_CUDART here); NULL or "": libcudart.so.13, .12, .11, .so from the loader's path, then
 * from /usr/local/cuda's library folders (docs/engine.md). Once a runtime is loaded it stays:
 * SL_E_INVALID_ARG for another path then. */
sl_status sl_cuda_set_runtime(const char *path);

/* Number of CUDA GPUs the runtime sees (the one sl_cuda_set_runtime names, or libcudart found as
 * for device "cuda"); 0 without a runtime or a GPU. */
int32_t sl_cuda_gpu_count(void);

/* Executes plan p (built from ck, which may be NULL when o->dummy) on the devices. ck may be another
 * handle of that checkpoint, or of a copy (other weights of the same tensors in the same places);
 * a checkpoint whose tensors' names, dtypes, shapes or places differ is SL_E_INVALID_ARG. On
 * failure every device allocation is freed and *out's errmsg names the file and offset involved.
 * cuda: the calling thread's current CUDA device is left set to a GPU the load used (restoring the
 * previous one would create a context on GPU 0 in processes that never chose a device); callers
 * that rely on it set it again afterwards, e.g. torch.cuda.set_device. */
sl_status sl_load(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o, sl_model **out);
void sl_model_free(sl_model *m);
const char *sl_model_errmsg(const sl_model *m);

typedef struct sl_load_stats {
    double seconds;             /* the whole load, device setup included */
    double setup_seconds;       /* part of it spent opening devices and allocating their memory
                                   (for cuda: runtime and context start-up, cudaMalloc) */
    uint64_t bytes_read;        /* checkpoint bytes read from files */
    uint64_t checkpoint_bytes;  /* data bytes of the checkpoint's files */
    const char *io;             /* "direct", "buffered", "mixed", "none" (dummy) */
    const char *engine;         /* "io_uring", "io_uring-inline", "pread", or "http" (remote) */
    uint64_t staging_peak;      /* host staging bytes in use at the worst moment */
    int64_t verified_files;     /* opts.verify: files whose bytes were checked (SHA-256: whole;
                                   blocks: the blocks read), and the bytes hashed and equal */
    uint64_t verified_bytes;
    /* read requests sent to the files (one per chunk; a retry counts again), and the most in
       flight at once: many small requests (opts.read_gap) need depth to be fast */
    uint64_t read_requests;
    uint32_t read_depth_peak;
    /* remote loads (docs/remote.md): ranged GETs asked for again after a failure, a stall or a
       trickle, and laggards (far slower than the other ranges) asked for again on a new
       connection; 0 for files */
    uint64_t remote_retries;
    uint64_t remote_restarts;
} sl_load_stats;

sl_status sl_model_stats(const sl_model *m, sl_load_stats *out);
int32_t sl_model_device_count(const sl_model *m);
/* Bytes of device memory the model holds for device dev: what the backend allocated, or the
 * caller's memory used (opts.dest). */
uint64_t sl_model_device_allocated(const sl_model *m, int32_t dev);
/* Copies nbytes of parameter i of device dev, from byte off, into host memory dst (works for every
 * backend; for cuda it is a device-to-host copy). */
sl_status sl_model_read_param(const sl_model *m, int32_t dev, int64_t i, uint64_t off, void *dst,
                              uint64_t nbytes);
/* Host pointer of a parameter for the cpu backend; NULL for others. */
const void *sl_model_param_host_ptr(const sl_model *m, int32_t dev, int64_t i);
/* Address of parameter i of device dev in that device's memory, to hand the weights to an engine
 * (torch.from_blob, DLPack, cuBLAS): the host address for cpu, the CUDA device address for cuda,
 * valid on GPU sl_model_device_gpu(m, dev). Owned by the model, valid until sl_model_free. NULL
 * out of range or when the device holds no bytes. */
void *sl_model_param_ptr(const sl_model *m, int32_t dev, int64_t i);
/* pjrt backend: the PJRT_Buffer * of parameter i of device dev (its dtype and shape, on the PJRT
 * device the mesh device maps to), to pass to PJRT_LoadedExecutable_Execute; borrowed, owned by
 * the model, valid until sl_model_free. NULL for other backends and out of range. */
void *sl_model_param_pjrt_buffer(const sl_model *m, int32_t dev, int64_t i);
/* pjrt backend: the PJRT_Client * that holds device dev's buffers, and the plugin's
 * const PJRT_Api *; NULL for other backends. Borrowed: valid until sl_model_free. */
void *sl_model_pjrt_client(const sl_model *m, int32_t dev);
const void *sl_model_pjrt_api(const sl_model *m, int32_t dev);
/* How device dev's staging host memory reached the device during the load. pjrt: "dma-mapped"
 * (PJRT_Client_DmaMap once per client, unmapped at the load's end) or "plain (why)" (the plugin
 * has no DmaMap, or the map failed; the bytes are the same, staged by the plugin). cuda:
 * "page-locked" (cudaHostRegister: asynchronous copies) or "plain (why)" (the registration was
 * refused, locked-memory limits say; synchronous copies, slower). NULL for cpu and for loads
 * without staging (dummy weights). Owned by the model. */
const char *sl_model_device_staging(const sl_model *m, int32_t dev);
/* How the bytes reached device dev's memory, for tuning: pjrt, "direct N (B B), assembled N (B B),
 * streamed N (B B); U uploads, T transfers" (the parameters and bytes by the way docs/engine.md
 * describes that each first went, empty parameters among the direct ones, so that the three add
 * up to the device's parameters and bytes; and the BufferFromHostBuffer and TransferData calls
 * that carried them); cuda with opts.cuda_convert: "converted on the GPU: N elements, K
 * kernels" or "converted on the host: why". NULL for
 * the other backends and before the device's last byte. Owned by the model. */
const char *sl_model_device_routes(const sl_model *m, int32_t dev);
/* GPU ordinal of device dev for cuda; -1 for host backends and out of range. */
int32_t sl_model_device_gpu(const sl_model *m, int32_t dev);
/* XXH3-64 of one parameter's bytes. */
sl_status sl_model_param_xxh3(const sl_model *m, int32_t dev, int64_t i, uint64_t *out);
/* Free device memory (bytes, from cudaMemGetInfo on the device's GPU) right before and right after
 * device dev's allocation, for backends that report it (cuda); SL_E_UNSUPPORTED for cpu. Several
 * mesh devices on one GPU see each other's allocations in these figures. */
sl_status sl_model_device_mem(const sl_model *m, int32_t dev, uint64_t *free_before,
                              uint64_t *free_after);

/* Mesh index of local device dev: dev for sl_load (opts.devices[dev] when the load was given
 * devices), its global index for sl_load_dist; -1 if out of range. */
int32_t sl_model_device_index(const sl_model *m, int32_t dev);

/* ---- multi-process loading (MPI) ---------------------------------------------------------------- */

/* Built with MPI (SL_WITH_MPI), these run over MPI_COMM_WORLD; without it sl_dist_init and
 * sl_load_dist return SL_E_UNSUPPORTED and the rest behave as one process. Every call marked
 * "collective" must be made by every rank, in the same order. */

typedef enum sl_dist_strategy {
    SL_DIST_COOPERATIVE = 0,  /* each checkpoint byte read by one rank, pieces exchanged */
    SL_DIST_INDEPENDENT = 1   /* each rank reads the bytes its own devices need */
} sl_dist_strategy;

typedef struct sl_dist_opts {
    int32_t devices_per_rank;   /* K: rank r owns mesh devices [r*K, (r+1)*K); default 1 */
    sl_dist_strategy strategy;  /* default SL_DIST_COOPERATIVE */
} sl_dist_opts;

void sl_dist_opts_init(sl_dist_opts *o);
/* 1 when the library was built with MPI. */
int sl_dist_available(void);
/* Initializes MPI unless already done; SL_E_UNSUPPORTED without MPI. */
sl_status sl_dist_init(void);
/* Finalizes MPI if sl_dist_init initialized it. */
void sl_dist_finalize(void);
/* This process's rank and the number of ranks (0 and 1 before sl_dist_init or without MPI). */
int32_t sl_dist_rank(void);
int32_t sl_dist_size(void);
/* Collective: agrees on a failure. Returns SL_OK when st is SL_OK on every rank, else the status
 * of the lowest failing rank, with that rank's msg copied into out (outlen bytes) on every rank. */
sl_status sl_dist_agree(sl_status st, const char *msg, char *out, size_t outlen);
/* Collective: on rank 0, *out is the concatenation of every rank's text in rank order (free it
 * with sl_free or free()); NULL on other ranks. The status is the same on every rank (SL_E_NOMEM when rank 0
 * could not hold the result; *out is then NULL). */
sl_status sl_dist_gather_text(const char *text, char **out);

/* Collective: loads plan p over all ranks; the returned model holds only this rank's devices
 * (sl_model_device_index gives their mesh index). The ranks' device count times
 * devices_per_rank must equal the plan's. A failure on any rank fails every rank, each with the
 * failing rank's message ("rank R: ..."). Host staging per rank stays within o->staging_bytes. */
sl_status sl_load_dist(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                       const sl_dist_opts *d, sl_model **out);

typedef struct sl_rank_stats {
    int32_t rank;
    int32_t first_device, devices;  /* mesh devices [first_device, first_device + devices) */
    uint64_t bytes_read;            /* checkpoint bytes this rank read */
    uint64_t bytes_sent;            /* bytes sent to other ranks (cooperative) */
    uint64_t bytes_received;
    uint64_t staging_peak;
    double seconds;
    uint64_t read_requests;         /* read requests this rank sent (sl_load_stats') */
    uint32_t read_depth_peak;       /* most of them in flight at once */
    double setup_seconds;           /* of seconds, opening its devices (sl_load_stats') */
    uint64_t remote_retries;        /* its ranged GETs asked for again (sl_load_stats') */
    uint64_t remote_restarts;
} sl_rank_stats;

/* Ranks of the load that made m (1 for sl_load); every rank's figures are on every rank. */
int32_t sl_model_rank_count(const sl_model *m);
sl_status sl_model_rank_stats(const sl_model *m, int32_t rank, sl_rank_stats *out);

/* ---- resharding and synthesis ------------------------------------------------------------------- */

/* Writes SHARDING.md's pre-sharded output for plan p into outdir (created if needed), with the same
 * staging bound as sl_load. max_part_bytes: 0 means 5 GB. */
sl_status sl_reshard(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                     const char *outdir, uint64_t max_part_bytes, char *err, size_t errlen);

/* Collective: sl_reshard over the ranks of an MPI job (see sl_load_dist). Rank r writes the part
 * files of mesh devices [r*K, (r+1)*K) (K = d->devices_per_rank), rank 0 config.json, so the
 * ranks' files together are byte for byte what sl_reshard writes. Host staging per rank stays
 * within o->staging_bytes. A failure on any rank fails every rank with the failing rank's message
 * ("rank R: ..."), and no rank leaves a part file it did not finish. SL_E_UNSUPPORTED without MPI
 * or before sl_dist_init. */
sl_status sl_reshard_dist(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                          const sl_dist_opts *d, const char *outdir, uint64_t max_part_bytes,
                          char *err, size_t errlen);

/* Writes a synthetic Hugging Face checkpoint (index, shards, config.json) of config_path's shapes,
 * random values from seed, in dtype (-1: the config's), shards of at most max_shard_bytes (0: 5 GB). */
sl_status sl_synth(const char *config_path, const char *rules_path, const char *outdir, int32_t dtype,
                   uint64_t seed, uint64_t max_shard_bytes, char *err, size_t errlen);
/* The same with the config, rule table and dtype of po: config_path, or the config.json text
 * config_json / config_json_len held in memory (named in messages by config_path if set), rules_path,
 * dtype (-1: the config's); po's mesh and layout fields are ignored. Either way the config.json
 * written is the config as parsed, with torch_dtype saying what the files hold; it and the index
 * are written whole (temporary name, sync, rename) after every shard. */
sl_status sl_synth_opts(const sl_plan_opts *po, const char *outdir, uint64_t seed, uint64_t max_shard_bytes,
                        char *err, size_t errlen);

/* Writes dir/name (NULL: "SHA256SUMS"), a sha256sum file of the checkpoint files a load of dir
 * reads (dir is opened as by sl_checkpoint_open, with its errors), so that a folder synth or
 * reshard wrote can be loaded with opts.verify and manifest_path later (`sha256sum -c` reads it
 * too). Comment lines after each file's line hold the XXH3-64 of each 1 MiB block, with which a
 * load checks only what it reads (docs/engine.md); config.json and the index, where dir has them,
 * get a sha256sum line each, which a load with the manifest checks whole. Each file is read once;
 * the manifest appears under its name only when whole. */
sl_status sl_write_manifest(const char *dir, const char *name, char *err, size_t errlen);

/* ---- cancelling --------------------------------------------------------------------------------- */

/* Asks every sl_load, sl_reshard, sl_reshard_dist, sl_synth and sl_checkpoint_read running in this
 * process to stop: each fails with SL_E_CANCELLED at its next check (between read requests, before
 * each write, between a read's 64 MiB chunks; a remote checkpoint's GETs, its open's included, also
 * while they wait on the server or on a retry's backoff: within about 100 ms for the load's ranges
 * and a second for the blocking GETs of an open or sl_checkpoint_read)
 * and, as after any failure, removes the files it had not finished. sl_cancel only stores to a
 * lock-free atomic, so a signal handler may call it (the CLI does, on SIGINT and SIGTERM); the
 * library installs no handler itself. The request holds until sl_cancel_clear. */
void sl_cancel(void);
void sl_cancel_clear(void);

/* ---- utilities ---------------------------------------------------------------------------------- */

/* XXH3-64 of a buffer (the checksum used by --checksums). */
uint64_t sl_xxh3(const void *data, size_t n);

/* sizeof the public struct of that name ("sl_load_opts", "sl_plan_opts", "sl_tensor_info",
 * "sl_param_info", "sl_load_stats", "sl_rank_stats", "sl_dist_opts", "sl_box") as this library was built;
 * 0 for another name. Bindings that declare the structs themselves (Python's ctypes) check their
 * layout against it before the first call. */
size_t sl_struct_size(const char *name);

#if defined(SL_BUILDING_LIBRARY) && defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SHARDLOAD_H */
