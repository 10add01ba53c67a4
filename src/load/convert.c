/* convert.c - F32/F16/BF16 conversions, and F64 to each of them. The f16 routines are the
 * branch-light bit tricks of Maratyszcza's FP16 library: they use the FPU's own
 * round-to-nearest-even, so the loops below vectorize. They assume the default rounding mode and
 * no flush-to-zero, which is how a process starts and what the library never changes. */
#include "load/convert.h"

#include <string.h>

#include "common/sl_dtype.h"
#include "common/sl_pool.h"

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float f32_from(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet the NaN; truncation could make it inf */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
    return f32_from((uint32_t)h << 16);
}

/* c ? a : b without a branch: GCC leaves loops with branches scalar, and the f16 loops then ran at
 * 0.6 G elements/s (build/bench/bench_convert). */
static inline uint32_t pick(int c, uint32_t a, uint32_t b)
{
    const uint32_t m = 0u - (uint32_t)c;
    return (a & m) | (b & ~m);
}

/* Adding a power of two chosen from the input's exponent makes the FPU round the mantissa to
 * exactly the 10 (or fewer, for subnormal results) bits f16 keeps. */
static inline uint16_t f32_to_f16(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xff000000u;
    bias = pick(bias < 0x71000000u, 0x71000000u, bias);
    base = f32_from((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
    const uint32_t mantissa_bits = bits & 0x00000fffu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | pick(shl1_w > 0xff000000u, 0x7e00u, nonsign));
}

static inline float f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normalized = f32_from((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
    const float denormalized = f32_from((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t r = pick(two_w < (1u << 27), f32_bits(denormalized), f32_bits(normalized));
    return f32_from(sign | r);
}

/* The loops below call the static versions: under -fPIC an exported function may be interposed,
 * so calls to it are not inlined, and the loops stayed scalar (2.4 GB/s for bf16 -> f32 here,
 * against 17-20 GB/s inlined and vectorized). */
uint16_t sl_f32_to_bf16(float f)
{
    return f32_to_bf16(f);
}

float sl_bf16_to_f32(uint16_t h)
{
    return bf16_to_f32(h);
}

uint16_t sl_f32_to_f16(float f)
{
    return f32_to_f16(f);
}

float sl_f16_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}

int sl_convert_supported(sl_dtype dst, sl_dtype src)
{
    if (dst == src)
        return 1;
    const int d_ok = dst == SL_DTYPE_F32 || dst == SL_DTYPE_F16 || dst == SL_DTYPE_BF16;
    return d_ok && sl_dtype_converts(src);
}

/* F64 to F32, rounding to nearest even. The cast does that for every value F32 can hold; C leaves
 * it undefined beyond, so those go to infinity here, as the FPU would take them: from the halfway
 * point between FLT_MAX and 2^128 up (FLT_MAX's mantissa is odd, so the tie rounds away). */
static inline float f64_to_f32(double v)
{
    if (__builtin_fabs(v) >= 0x1.ffffffp+127 && v == v)
        return v < 0 ? -__builtin_inff() : __builtin_inff();
    return (float)v;
}

static inline float load_f64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, 8);
    return f64_to_f32(v);
}

static inline float load_f32(const unsigned char *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

static inline uint16_t load_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* F64 goes through F32 on its way to 16 bits, as PyTorch's copy_ takes it (c10's BFloat16 and
 * Half are made from a float): two roundings, which the oracle's NumPy casts repeat. */
static inline float load_elem(const unsigned char *p, sl_dtype dt)
{
    if (dt == SL_DTYPE_F32)
        return load_f32(p);
    if (dt == SL_DTYPE_F64)
        return load_f64(p);
    if (dt == SL_DTYPE_F16)
        return f16_to_f32(load_u16(p));
    return bf16_to_f32(load_u16(p));
}

static inline void store_elem(unsigned char *p, sl_dtype dt, float f)
{
    if (dt == SL_DTYPE_F32) {
        memcpy(p, &f, 4);
        return;
    }
    uint16_t v = dt == SL_DTYPE_F16 ? f32_to_f16(f) : f32_to_bf16(f);
    memcpy(p, &v, 2);
}

/* One loop per (src, dst) pair with constant dtypes after inlining, so each vectorizes. */
#define CONVERT_LOOP(SD, DD, ss, ds)                                    \
    for (size_t i = 0; i < n; i++)                                      \
        store_elem(d + i * (ds), DD, load_elem(s + i * (ss), SD));

void sl_convert(void *dst, sl_dtype dst_dt, const void *src, sl_dtype src_dt, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (dst_dt == src_dt) {
        memcpy(dst, src, n * (sl_dtype_bits(src_dt) / 8));
        return;
    }
    if (src_dt == SL_DTYPE_F32 && dst_dt == SL_DTYPE_BF16) {
        CONVERT_LOOP(SL_DTYPE_F32, SL_DTYPE_BF16, 4, 2)
    } else if (src_dt == SL_DTYPE_F32 && dst_dt == SL_DTYPE_F16) {
        CONVERT_LOOP(SL_DTYPE_F32, SL_DTYPE_F16, 4, 2)
    } else if (src_dt == SL_DTYPE_BF16 && dst_dt == SL_DTYPE_F32) {
        CONVERT_LOOP(SL_DTYPE_BF16, SL_DTYPE_F32, 2, 4)
    } else if (src_dt == SL_DTYPE_F16 && dst_dt == SL_DTYPE_F32) {
        CONVERT_LOOP(SL_DTYPE_F16, SL_DTYPE_F32, 2, 4)
    } else if (src_dt == SL_DTYPE_F16 && dst_dt == SL_DTYPE_BF16) {
        CONVERT_LOOP(SL_DTYPE_F16, SL_DTYPE_BF16, 2, 2)
    } else if (src_dt == SL_DTYPE_BF16 && dst_dt == SL_DTYPE_F16) {
        CONVERT_LOOP(SL_DTYPE_BF16, SL_DTYPE_F16, 2, 2)
    } else if (src_dt == SL_DTYPE_F64 && dst_dt == SL_DTYPE_F32) {
        CONVERT_LOOP(SL_DTYPE_F64, SL_DTYPE_F32, 8, 4)
    } else if (src_dt == SL_DTYPE_F64 && dst_dt == SL_DTYPE_BF16) {
        CONVERT_LOOP(SL_DTYPE_F64, SL_DTYPE_BF16, 8, 2)
    } else if (src_dt == SL_DTYPE_F64 && dst_dt == SL_DTYPE_F16) {
        CONVERT_LOOP(SL_DTYPE_F64, SL_DTYPE_F16, 8, 2)
    }
}

/* ---- several threads ------------------------------------------------------------------------ */

typedef struct convert_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t dst_pitch, src_pitch, row_elems, rows;
    sl_dtype dst_dt, src_dt;
} convert_job;

/* Part `part` of the job: a share of the rows, or of the one row's elements (64-element steps, so
 * that every part but the last is whole vectors). */
static void convert_part(void *ctx, unsigned part, unsigned parts)
{
    const convert_job *j = ctx;
    if (j->rows > 1) {
        const size_t r0 = j->rows * part / parts, r1 = j->rows * (part + 1) / parts;
        for (size_t r = r0; r < r1; r++)
            sl_convert(j->dst + r * j->dst_pitch, j->dst_dt, j->src + r * j->src_pitch, j->src_dt,
                       j->row_elems);
        return;
    }
    const size_t steps = (j->row_elems + 63) / 64;
    const size_t e0 = steps * part / parts * 64, e1 = steps * (part + 1) / parts * 64;
    const size_t end = e1 < j->row_elems ? e1 : j->row_elems;
    if (e0 < end)
        sl_convert(j->dst + e0 * (sl_dtype_bits(j->dst_dt) / 8), j->dst_dt,
                   j->src + e0 * (sl_dtype_bits(j->src_dt) / 8), j->src_dt, end - e0);
}

void sl_convert_rows(sl_pool *pool, void *dst, size_t dst_pitch, sl_dtype dst_dt, const void *src,
                     size_t src_pitch, sl_dtype src_dt, size_t row_elems, size_t rows)
{
    convert_job j = {.dst = dst, .src = src, .dst_pitch = dst_pitch, .src_pitch = src_pitch,
                     .row_elems = row_elems, .rows = rows, .dst_dt = dst_dt, .src_dt = src_dt};
    if (!rows || !row_elems)
        return;
    if (!pool || rows * row_elems < CONVERT_PAR_MIN)
        convert_part(&j, 0, 1);
    else
        sl_pool_run(pool, convert_part, &j);
}
