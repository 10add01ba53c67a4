/* test_convert.c - F32/F16/BF16 conversions against bit-exact references: every 16-bit pattern
 * widened and narrowed back, and f32 and f64 narrowing (ties, subnormals, overflow, NaN) against
 * slow integer references of round-to-nearest-even. */
#include "expect.h"
#include "load/convert.h"
#include "common/sl_pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference f16 decode with ldexp. */
static float ref_f16_to_f32(uint16_t h)
{
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpf((float)m, -24);
    else
        v = ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

/* Reference f32 -> f16: integer round-to-nearest-even on the exact value. */
static uint16_t ref_f32_to_f16(float f)
{
    const uint32_t u = bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const int e = (int)((u >> 23) & 255);
    uint32_t m = u & 0x7fffff;
    if (e == 255)
        return (uint16_t)(sign | (m ? 0x7e00 : 0x7c00));
    if (e == 0)
        return sign; /* f32 subnormals are far below f16's smallest subnormal */
    m |= 0x800000;
    /* value = m * 2^(e-150); f16 subnormal unit is 2^-24, so q = value / 2^-24 = m * 2^(e-126) */
    int shift = 126 - e; /* right shift to get units of 2^-24 */
    uint64_t q;
    if (e >= 113) {
        /* normal range: keep 11 significant bits */
        int ee = e - 127 + 15;
        if (ee >= 31)
            return (uint16_t)(sign | 0x7c00);
        uint32_t keep = m >> 13, rest = m & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (keep & 1)))
            keep++;
        uint32_t out = ((uint32_t)ee << 10) + (keep - 1024);
        if (keep == 2048)
            out = ((uint32_t)(ee + 1) << 10);
        if (out >= 0x7c00)
            return (uint16_t)(sign | 0x7c00);
        return (uint16_t)(sign | out);
    }
    if (shift > 40)
        return sign;
    q = (uint64_t)m >> shift;
    uint64_t rest = (uint64_t)m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rest > half || (rest == half && (q & 1)))
        q++;
    return (uint16_t)(sign | q); /* q == 1024 becomes the smallest normal, which is right */
}

static uint16_t ref_f32_to_bf16(float f)
{
    const uint32_t u = bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 0x40);
    uint32_t keep = u >> 16, rest = u & 0xffff;
    if (rest > 0x8000 || (rest == 0x8000 && (keep & 1)))
        keep++;
    return (uint16_t)keep;
}

static int is_nan16(uint16_t h, int bf)
{
    return bf ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

static void test_all_16bit(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float f16 = sl_f16_to_f32((uint16_t)h), rf = ref_f16_to_f32((uint16_t)h);
        if (is_nan16((uint16_t)h, 0)) {
            EXPECT(isnan(f16), "f16 %04x -> not NaN", h);
            EXPECT(is_nan16(sl_f32_to_f16(f16), 0), "f16 NaN %04x round trip", h);
        } else {
            EXPECT(bits(f16) == bits(rf), "f16 %04x -> %08x, want %08x", h, bits(f16), bits(rf));
            EXPECT(sl_f32_to_f16(f16) == h, "f16 %04x round trip", h);
        }
        const float b = sl_bf16_to_f32((uint16_t)h);
        EXPECT(bits(b) == h << 16, "bf16 %04x", h);
        if (is_nan16((uint16_t)h, 1))
            EXPECT(is_nan16(sl_f32_to_bf16(b), 1), "bf16 NaN %04x", h);
        else
            EXPECT(sl_f32_to_bf16(b) == h, "bf16 %04x round trip", h);
    }
}

static void test_f32_narrowing(void)
{
    /* every f32 with a 16-bit stride through the space, plus neighbours of every f16/bf16 tie */
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) {
        const float f = from_bits((uint32_t)u);
        if (isnan(f))
            continue;
        EXPECT(sl_f32_to_f16(f) == ref_f32_to_f16(f), "f32 %08x -> f16 %04x want %04x", (uint32_t)u,
               sl_f32_to_f16(f), ref_f32_to_f16(f));
        EXPECT(sl_f32_to_bf16(f) == ref_f32_to_bf16(f), "f32 %08x -> bf16", (uint32_t)u);
    }
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const uint32_t base = bits(ref_f16_to_f32((uint16_t)h));
        for (int d = -2; d <= 2; d++) {
            /* midpoints between h and h+1 and their neighbours */
            const float next = ref_f16_to_f32((uint16_t)(h + 1));
            const float mid = (ref_f16_to_f32((uint16_t)h) + next) / 2;
            const float f = from_bits(bits(mid) + (uint32_t)d);
            EXPECT(sl_f32_to_f16(f) == ref_f32_to_f16(f), "tie %08x -> %04x want %04x", bits(f),
                   sl_f32_to_f16(f), ref_f32_to_f16(f));
            const float g = from_bits(base + (uint32_t)d);
            EXPECT(sl_f32_to_f16(g) == ref_f32_to_f16(g), "near %08x", bits(g));
        }
    }
    /* named cases */
    EXPECT(sl_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
    EXPECT(sl_f32_to_f16(65519.0f) == 0x7bff, "65519 stays max");
    EXPECT(sl_f32_to_f16(1e10f) == 0x7c00 && sl_f32_to_f16(-1e10f) == 0xfc00, "overflow");
    EXPECT(sl_f32_to_f16(0x1p-24f) == 0x0001, "smallest subnormal");
    EXPECT(sl_f32_to_f16(0x1p-25f) == 0x0000, "half of smallest: tie to even 0");
    EXPECT(sl_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 units: tie to even 2");
    EXPECT(sl_f32_to_f16(-0.0f) == 0x8000, "-0");
    EXPECT(is_nan16(sl_f32_to_f16(NAN), 0) && is_nan16(sl_f32_to_bf16(NAN), 1), "NaN");
    EXPECT(is_nan16(sl_f32_to_bf16(from_bits(0x7f800001)), 1), "sNaN stays NaN in bf16");
    EXPECT(sl_f32_to_bf16(from_bits(0x3f808000)) == 0x3f80, "bf16 tie to even down");
    EXPECT(sl_f32_to_bf16(from_bits(0x3f818000)) == 0x3f82, "bf16 tie to even up");
    EXPECT(sl_f32_to_bf16(from_bits(0x7f7fffff)) == 0x7f80, "bf16 overflow to inf");
}

static void test_buffers(void)
{
    enum { N = 1003 };
    unsigned char src[N * 4 + 1], dst[N * 4 + 1], ref[N * 4];
    srand(7);
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)rand();
    const sl_dtype dts[3] = {SL_DTYPE_F32, SL_DTYPE_F16, SL_DTYPE_BF16};
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++) {
            EXPECT(sl_convert_supported(dts[b], dts[a]), "supported");
            const size_t sa = sl_dtype_bits(dts[a]) / 8, sb = sl_dtype_bits(dts[b]) / 8;
            sl_convert(dst + 1, dts[b], src + 1, dts[a], N); /* unaligned on purpose */
            for (size_t i = 0; i < N; i++) {
                float f;
                uint16_t h;
                if (dts[a] == SL_DTYPE_F32)
                    memcpy(&f, src + 1 + 4 * i, 4);
                else {
                    memcpy(&h, src + 1 + sa * i, 2);
                    f = dts[a] == SL_DTYPE_F16 ? ref_f16_to_f32(h) : from_bits((uint32_t)h << 16);
                }
                if (dts[b] == SL_DTYPE_F32) {
                    memcpy(ref + 4 * i, &f, 4);
                } else {
                    h = dts[b] == SL_DTYPE_F16 ? ref_f32_to_f16(f) : ref_f32_to_bf16(f);
                    memcpy(ref + 2 * i, &h, 2);
                }
                if (isnan(f)) { /* NaN payloads are not kept, NaN-ness is, in the vector loops too */
                    uint16_t o16 = 0;
                    float o32 = 0;
                    if (dts[b] == SL_DTYPE_F32)
                        memcpy(&o32, dst + 1 + 4 * i, 4);
                    else
                        memcpy(&o16, dst + 1 + 2 * i, 2);
                    EXPECT(dts[b] == SL_DTYPE_F32 ? isnan(o32) : is_nan16(o16, dts[b] == SL_DTYPE_BF16),
                           "%s->%s element %zu: NaN lost", sl_dtype_name(dts[a]), sl_dtype_name(dts[b]), i);
                    continue;
                }
                EXPECT(!memcmp(dst + 1 + sb * i, ref + sb * i, sb), "%s->%s element %zu",
                       sl_dtype_name(dts[a]), sl_dtype_name(dts[b]), i);
            }
        }
    }
    EXPECT(!sl_convert_supported(SL_DTYPE_F32, SL_DTYPE_I32), "I32 unsupported");
    EXPECT(sl_convert_supported(SL_DTYPE_I32, SL_DTYPE_I32), "equal always supported");
}

static void count_parts(void *ctx, unsigned part, unsigned parts)
{
    atomic_ulong *sum = ctx;
    atomic_fetch_add(sum, (unsigned long)(part + 1) * parts);
}

/* Many short jobs back to back: every part of every job runs exactly once, and no wake-up is lost
 * (a lost one hangs here, and ctest's timeout fails the test). */
static void test_pool(void)
{
    sl_pool *pool = sl_pool_new(3);
    atomic_ulong sum = 0;
    unsigned long want = 0;
    for (int i = 0; pool && i < 20000; i++) {
        sl_pool_run(pool, count_parts, &sum);
        want += 4 * (1 + 2 + 3 + 4);
    }
    EXPECT(pool && atomic_load(&sum) == want, "pool: parts run %lu, want %lu", atomic_load(&sum), want);
    sl_pool_free(pool);
}

/* sl_convert_rows with a pool of helper threads gives the same bytes as one thread: one long run
 * (split by elements, sizes around the threshold and not a multiple of 64) and strided rows (split
 * by rows), and never writes between or past the destination rows. */
static void test_parallel(void)
{
    sl_pool *pool = sl_pool_new(3);
    EXPECT(pool && sl_pool_parts(pool) == 4, "pool of 3 helpers");
    EXPECT(sl_pool_parts(NULL) == 1, "no pool: one part");
    const size_t n = ((size_t)1 << 20) + 77;
    float *src = malloc(n * 4);
    uint16_t *one = malloc(n * 2 + 64), *many = malloc(n * 2 + 64);
    for (size_t i = 0; src && i < n; i++)
        src[i] = (float)((long)(i % 4099) - 2049) * 1.37e-3f;
    const size_t sizes[] = {1000, ((size_t)512 << 10) - 1, (size_t)512 << 10, ((size_t)512 << 10) + 65, n};
    for (size_t k = 0; src && one && many && k < sizeof sizes / sizeof sizes[0]; k++) {
        memset(one, 0xEE, n * 2 + 64);
        memset(many, 0xEE, n * 2 + 64);
        sl_convert_rows(NULL, one, 0, SL_DTYPE_BF16, src, 0, SL_DTYPE_F32, sizes[k], 1);
        sl_convert_rows(pool, many, 0, SL_DTYPE_BF16, src, 0, SL_DTYPE_F32, sizes[k], 1);
        EXPECT(!memcmp(one, many, n * 2 + 64), "run of %zu: threads differ from one thread", sizes[k]);
        EXPECT(one[sizes[k]] == 0xEEEE, "run of %zu: wrote past the end", sizes[k]);
    }
    /* 690 rows of 800 f32 elements out of every 1500, packed into rows of 1024 bf16 elements */
    const size_t rows = 690, elems = 800, spitch = 1500 * 4, dpitch = 1024 * 2;
    for (int pass = 0; src && one && many && pass < 2; pass++) {
        uint16_t *out = pass ? many : one;
        memset(out, 0xEE, n * 2 + 64);
        sl_convert_rows(pass ? pool : NULL, out, dpitch, SL_DTYPE_BF16, src, spitch, SL_DTYPE_F32, elems, rows);
    }
    EXPECT(!memcmp(one, many, rows * dpitch), "strided rows: threads differ from one thread");
    EXPECT(one[800] == 0xEEEE && many[1023] == 0xEEEE && one[1] == sl_f32_to_bf16(src[1]) &&
               many[1024 + 5] == sl_f32_to_bf16(src[1500 + 5]),
           "strided rows: wrong placement");
    sl_convert_rows(pool, many, 0, SL_DTYPE_BF16, src, 0, SL_DTYPE_F32, 0, 5); /* nothing to do */
    free(src);
    free(one);
    free(many);
    sl_pool_free(pool);
    sl_pool_free(NULL);
}

/* ---- F64 sources ---------------------------------------------------------------------------- */

static double f64_from(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* F64 -> F32 round-to-nearest-even on the bit pattern, in integers (NaN: any NaN). */
static uint32_t ref_f64_to_f32_bits(uint64_t u)
{
    const uint32_t sign = (uint32_t)(u >> 32) & 0x80000000u;
    const int e = (int)((u >> 52) & 0x7ff);
    const uint64_t mant = u & ((1ull << 52) - 1);
    if (e == 0x7ff)
        return sign | (mant ? 0x7fc00000u : 0x7f800000u);
    if (e == 0)
        return sign; /* an F64 subnormal is far below F32's least subnormal */
    const int E = e - 1023 + 127;
    if (E >= 1) { /* normal: keep 23 of 52 mantissa bits; a carry may reach the exponent */
        const uint64_t rem = mant & ((1ull << 29) - 1), half = 1ull << 28;
        uint64_t r = ((uint64_t)(E > 255 ? 255 : E) << 23) | (mant >> 29);
        if (E > 254)
            return sign | 0x7f800000u;
        r += rem > half || (rem == half && (r & 1));
        return sign | (uint32_t)(r >= 0x7f800000u ? 0x7f800000u : r);
    }
    const uint64_t sig = (1ull << 52) | mant;   /* subnormal F32: sig * 2^-(926 - e) of 2^-149 */
    const int shift = 926 - e;
    if (shift >= 64)
        return sign;
    uint64_t m = sig >> shift;
    const uint64_t rem = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    m += rem > half || (rem == half && (m & 1));
    return sign | (uint32_t)m;
}

/* F64 into F32, BF16 and F16 against the integer reference (through F32 for 16 bits, as PyTorch
 * converts: one value where rounding straight from F64 would differ is checked by name), with
 * random doubles around F32's range and the edges: FLT_MAX and the halfway point above it,
 * infinities, NaN, F32 subnormal ties and F64 subnormals. */
static void test_f64_sources(void)
{
    enum { N = 20000, EDGES = 14 };
    static uint64_t src[N];
    const uint64_t edges[EDGES] = {
        0x47efffffe0000000ull, /* FLT_MAX */
        0x47efffffefffffffull, /* just below the halfway point: FLT_MAX */
        0x47effffff0000000ull, /* halfway: tie away from odd FLT_MAX, inf */
        0xc7f0000000000000ull, /* -2^128: -inf */
        0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000001ull, 0x7ff0000000000001ull,
        0x36a0000000000000ull, /* 2^-149: the least F32 subnormal */
        0x3690000000000000ull, /* 2^-150: tie to even, 0 */
        0x3690000000000001ull, /* just above: 2^-149 */
        0x0000000000000001ull, /* F64 subnormal: 0 */
        0x8000000000000000ull, /* -0 */
        0x3ff0100000040000ull, /* 1 + 2^-8 + 2^-30 */
    };
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint64_t exp = 1023 - 160 + x % 300;   /* 2^-160 .. 2^140 */
        src[i] = i < EDGES ? edges[i] : (x & 0x800fffffffffffffull) | (exp << 52);
        if (i >= EDGES && i % 7 == 0)   /* ties and near-ties of F32's rounding */
            src[i] = (src[i] & ~((1ull << 29) - 1)) | (1ull << 28) | (x >> 60 & 1);
    }
    static float f32[N];
    static uint16_t b16[N], h16[N];
    EXPECT(sl_convert_supported(SL_DTYPE_F32, SL_DTYPE_F64) &&
           sl_convert_supported(SL_DTYPE_BF16, SL_DTYPE_F64) &&
           sl_convert_supported(SL_DTYPE_F16, SL_DTYPE_F64), "F64 sources supported");
    EXPECT(!sl_convert_supported(SL_DTYPE_F64, SL_DTYPE_F32), "F64 is no target");
    sl_convert(f32, SL_DTYPE_F32, src, SL_DTYPE_F64, N);
    sl_convert(b16, SL_DTYPE_BF16, src, SL_DTYPE_F64, N);
    sl_convert(h16, SL_DTYPE_F16, src, SL_DTYPE_F64, N);
    for (int i = 0; i < N; i++) {
        const float want = from_bits(ref_f64_to_f32_bits(src[i]));
        if (isnan(want)) {
            EXPECT(isnan(f32[i]) && is_nan16(b16[i], 1) && is_nan16(h16[i], 0),
                   "F64 %016llx: NaN lost", (unsigned long long)src[i]);
            continue;
        }
        EXPECT(bits(f32[i]) == bits(want), "F64 %016llx (%a) -> F32 %08x, want %08x",
               (unsigned long long)src[i], f64_from(src[i]), bits(f32[i]), bits(want));
        EXPECT(b16[i] == ref_f32_to_bf16(want), "F64 %016llx -> BF16 %04x, want %04x",
               (unsigned long long)src[i], b16[i], ref_f32_to_bf16(want));
        EXPECT(h16[i] == ref_f32_to_f16(want), "F64 %016llx -> F16 %04x, want %04x",
               (unsigned long long)src[i], h16[i], ref_f32_to_f16(want));
    }
    EXPECT(bits(f32[1]) == 0x7f7fffffu && bits(f32[2]) == 0x7f800000u, "FLT_MAX's halfway point");
    EXPECT(bits(f32[10]) == 1u && bits(f32[9]) == 0u, "the least subnormal's tie");
    EXPECT(b16[EDGES - 1] == 0x3f80, "1 + 2^-8 + 2^-30 -> BF16 through F32 (PyTorch: 0x3f80), not "
           "straight (0x3f81): %04x", b16[EDGES - 1]);
}

int main(void)
{
    test_all_16bit();
    test_f32_narrowing();
    test_buffers();
    test_f64_sources();
    test_pool();
    test_parallel();
    if (expect_failures)
        fprintf(stderr, "%d expect_failures\n", expect_failures);
    return expect_failures ? 1 : 0;
}
