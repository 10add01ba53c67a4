/* sl_bytes.h - explicit little-endian loads and checked arithmetic, for every number that comes
 * from a file. Header-only so the format layer stays free of link dependencies. */
#ifndef SL_BYTES_H
#define SL_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t sl_load_le64(const void *p)
{
    unsigned char b[8];
    memcpy(b, p, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static inline void sl_store_le64(void *p, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    memcpy(p, b, 8);
}

/* Return true on overflow, like the builtins they wrap. */
static inline bool sl_add_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

static inline bool sl_mul_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

static inline uint64_t sl_align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* a / b rounded up, without the overflow of (a + b - 1) / b; b > 0. */
static inline uint64_t sl_cdiv_u64(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static inline uint64_t sl_min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static inline uint64_t sl_max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

#endif /* SL_BYTES_H */
