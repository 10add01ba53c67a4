/* st_format.h - the safetensors format layer: pure parsing of bytes already in memory, no file I/O.
 *
 * On-disk layout of a .safetensors file (SAFETENSORS.md section 1):
 *
 *   bytes 0..8       N, unsigned 64-bit little-endian header length (N <= 100,000,000)
 *   bytes 8..8+N     UTF-8 JSON object, optionally padded with JSON whitespace:
 *                      { "__metadata__": {str: str}?,
 *                        "<tensor name>": {"dtype": str, "shape": [u64...], "data_offsets": [begin, end]}, ... }
 *   bytes 8+N..EOF   data buffer; data_offsets are relative to byte 8+N, end exclusive. The tensors tile it
 *                    exactly: sorted by (begin, end) each begins where the previous ended, and the last end
 *                    is the end of the file.
 *
 * Validation is split so that a file reader can stop after 8 bytes: st_prefix_check (reference steps 1-3),
 * then st_header_parse over the N header bytes (steps 4-7 plus shardload's policy checks).
 * Messages are "what is wrong" only; callers prefix them with the file name. */
#ifndef ST_FORMAT_H
#define ST_FORMAT_H

#include "common/sl_arena.h"
#include "common/sl_bytes.h"
#include "common/sl_err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER 100000000ull   /* reference MAX_HEADER_SIZE: decimal, N == this is allowed */
#define ST_MAX_DEPTH 128             /* serde_json's recursion limit: at most 127 nested containers */
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SUFFIX ".safetensors"

typedef struct st_tensor {
    const char *name;        /* NUL-terminated, in the header's arena */
    size_t name_len;
    sl_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;   /* in the arena */
    uint64_t begin, end;     /* relative to the data buffer */
} st_tensor;

typedef struct st_meta {
    const char *key, *value;
} st_meta;

/* A validated header. Tensors are ordered by (begin, end), i.e. by position in the file. */
typedef struct st_header {
    sl_arena arena;
    st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    st_meta *meta;           /* sorted by key */
    size_t n_meta, cap_meta;
    uint64_t header_len;     /* N */
    uint64_t data_start;     /* 8 + N */
    uint64_t data_len;       /* bytes of the data buffer (= last end) */
} st_header;

/* Steps 1-3 on the first min(len, 8) bytes of a file of file_len bytes: header too small, too large
 * (checked before the file length), 8+N beyond the file. On success *n is N and 8+N <= file_len. */
sl_status st_prefix_check(const unsigned char *first8, uint64_t file_len, uint64_t *n, sl_err *e);

/* Steps 4-7 on the N header bytes of a file of file_len bytes (8 + n <= file_len must hold).
 * On failure h is left empty (st_header_free is still safe). */
sl_status st_header_parse(const unsigned char *hdr, size_t n, uint64_t file_len, st_header *h, sl_err *e);
void st_header_free(st_header *h);

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). Returns the offset of the first bad byte,
 * or n when all is valid: sl_text_utf8_check (common/sl_text.h), under the format's name. */
size_t st_utf8_check(const unsigned char *s, size_t n);

/* A bounded, printable copy of a name for messages: control bytes escaped as \xNN, cut at ~120 bytes. */
const char *st_display(const char *s, size_t n, char *buf, size_t buflen);

/* Byte size of a tensor with checked arithmetic in the reference's order (numel left to right, then
 * numel*bits, then bits % 8). Returns SL_OK, SL_E_OVERFLOW or SL_E_MISALIGNED. */
sl_status st_tensor_nbytes(sl_dtype dt, uint32_t ndim, const uint64_t *shape, uint64_t *out);

/* ---- model.safetensors.index.json (rules I1-I3) ---- */

typedef struct st_index_entry {
    const char *tensor;
    const char *shard;       /* points into shards[] */
} st_index_entry;

typedef struct st_index {
    sl_arena arena;
    st_index_entry *entries; /* sorted by tensor name */
    size_t n_entries;
    const char **shards;     /* unique shard names, sorted (transformers: sorted(set(values))) */
    size_t n_shards;
    bool has_total_size;
    bool total_size_huge;    /* total_size is an integer beyond INT64_MAX: only that is known */
    uint64_t total_size;
} st_index;

#define ST_MAX_INDEX ST_MAX_HEADER   /* bound on the index file's size before it is read */

sl_status st_index_parse(const char *buf, size_t len, st_index *ix, sl_err *e);
void st_index_free(st_index *ix);
/* Whether the len bytes at s end in ST_SUFFIX after at least one other byte. */
bool st_has_suffix(const char *s, size_t len);
/* I2: a bare, relative file name ending in .safetensors. Returns NULL when fine, else the reason. */
const char *st_index_bad_shard_name(const char *s, size_t len);

/* vLLM's sharded_state file names, what a reshard writes: model-rank-{d}-part-{p}.safetensors, with
 * d and p plain decimal numbers (digits only, d < 2^31, p < 2^63). True for such a base name, with
 * *rank and *part set (either may be NULL). */
bool st_rank_file_name(const char *base, int32_t *rank, int64_t *part);

#endif /* ST_FORMAT_H */
