/* convert.h - element conversion between F32, F16 and BF16 while scattering checkpoint bytes into
 * device buffers. Rounding is IEEE round-to-nearest-even, as PyTorch's copy_ does; overflow goes to
 * infinity, subnormals are kept, NaN stays NaN (quieted, payload not kept). Pointers may be
 * unaligned. */
#ifndef SL_CONVERT_H
#define SL_CONVERT_H

#include "shardload.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when sl_convert handles src -> dst (equal dtypes always; otherwise F32/F16/BF16 pairs, and
 * F64 to any of the three, through F32 as PyTorch does). */
int sl_convert_supported(sl_dtype dst, sl_dtype src);
/* Converts n elements. The pair must be supported (equal dtypes are a memcpy). */
void sl_convert(void *dst, sl_dtype dst_dt, const void *src, sl_dtype src_dt, size_t n);

/* Below this many elements a job stays on the calling thread (a wake-up of the helpers is a few
 * microseconds). Measured on 2 cores, where helpers share the CPUs with the kernel's read workers:
 * at 256 Ki, 1 MiB f32 pieces of the cuda ring were split and a bf16 -> f32 load on the timed
 * stand-in went from 0.57 to 0.66 s; at 512 Ki they stayed whole (0.56 s). With enough helpers
 * the ring's pieces are sized from it (sl_rd_ring_for_helpers) so that full ones are split. */
#ifndef CONVERT_PAR_MIN   /* definable at build time, to measure another */
#define CONVERT_PAR_MIN ((size_t)512 << 10)
#endif
typedef struct sl_pool sl_pool;
/* rows rows of row_elems elements each, row r from src + r * src_pitch to dst + r * dst_pitch
 * (pitches in bytes; rows == 1: one run). With a pool (sl_pool.h), large jobs are shared among its
 * threads, by rows or, for one run, by elements; NULL: the calling thread alone. */
void sl_convert_rows(sl_pool *pool, void *dst, size_t dst_pitch, sl_dtype dst_dt, const void *src,
                     size_t src_pitch, sl_dtype src_dt, size_t row_elems, size_t rows);

/* Scalar conversions, exposed for tests and for the dummy filler. */
uint16_t sl_f32_to_bf16(float f);
uint16_t sl_f32_to_f16(float f);
float sl_bf16_to_f32(uint16_t h);
float sl_f16_to_f32(uint16_t h);

#endif /* SL_CONVERT_H */
