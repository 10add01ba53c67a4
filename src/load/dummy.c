/* dummy.c - dummy weights (SHARDING.md "Dummy weights"), following vLLM's CPU recipe
 * (vllm-notes 1.8): every parameter of every device gets its own MT19937 seeded with the seed,
 * one 32-bit draw per element in row-major order over the device's parameter (padding rows
 * included), value = (u & (2^digits - 1)) * 2^-digits * T(to - from) + T(from) computed in float
 * and rounded to T, with from = T(-1e-3), to = T(1e-3). ZERO operations (vocab padding) are
 * applied afterwards, so padding is zero while every other element equals what PyTorch's
 * uniform_(-1e-3, 1e-3) gives a tensor of the device's shape. No file is read.
 *
 * Parameters are independent, so worker threads take them one at a time; each generates into its
 * own bounded buffer and writes through the device ops (so non-host backends work too). */
#include "load/convert.h"
#include "load/engine.h"
#include "plan/plan_data.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_bytes.h"

#define DUMMY_CHUNK ((size_t)1 << 20)

/* x * range + from must round twice, as in PyTorch's scalar CPU kernel. GCC in ISO C mode does
 * not contract across statements; clang needs to be told. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

void sl_mt19937_seed(sl_mt19937 *g, uint32_t seed)
{
    g->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i;
    g->idx = 624;
}

static void mt_twist(sl_mt19937 *g)
{
    for (int i = 0; i < 624; i++) {
        uint32_t y = (g->mt[i] & 0x80000000u) | (g->mt[(i + 1) % 624] & 0x7fffffffu);
        uint32_t v = g->mt[(i + 397) % 624] ^ (y >> 1);
        g->mt[i] = (y & 1u) ? v ^ 0x9908b0dfu : v;
    }
    g->idx = 0;
}

uint32_t sl_mt19937_next(sl_mt19937 *g)
{
    if (g->idx >= 624)
        mt_twist(g);
    uint32_t y = g->mt[g->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* Each step rounds as PyTorch's uniform_real does for T = float, Half, BFloat16 (see above);
 * kept in separate statements so that no FMA contraction changes fp32 results. */
void sl_dummy_values(sl_mt19937 *g, sl_dtype dt, void *dst, size_t n)
{
    unsigned char *d = dst;
    if (dt == SL_DTYPE_F32) {
        const float from = -1e-3f, to = 1e-3f;
        const float range = to - from;
        for (size_t i = 0; i < n; i++) {
            float x = (float)(sl_mt19937_next(g) & 0xffffffu) * 0x1.0p-24f;
            float v = x * range;
            v = v + from;
            memcpy(d + 4 * i, &v, 4);
        }
        return;
    }
    const int f16 = dt == SL_DTYPE_F16;
    const uint32_t mask = f16 ? 0x7ffu : 0xffu;
    const float scale = f16 ? 0x1.0p-11f : 0x1.0p-8f;
    uint16_t (*round_t)(float) = f16 ? sl_f32_to_f16 : sl_f32_to_bf16;
    float (*widen_t)(uint16_t) = f16 ? sl_f16_to_f32 : sl_bf16_to_f32;
    const float from = widen_t(round_t(-1e-3f)), to = widen_t(round_t(1e-3f));
    const float range = widen_t(round_t(to - from));
    for (size_t i = 0; i < n; i++) {
        float x = (float)(sl_mt19937_next(g) & mask) * scale;
        float v = x * range;
        v = v + from;
        uint16_t h = round_t(v);
        memcpy(d + 2 * i, &h, 2);
    }
}

typedef struct dummy_job {
    const sl_plan *p;
    const sl_model_dev *devs;
    uint32_t seed;
    atomic_llong next;        /* next (device, param) item, flattened */
    int64_t n_items;
    atomic_int failed;
    sl_err err;               /* first failure; guarded by mu */
    pthread_mutex_t mu;
} dummy_job;

static void dummy_fail(dummy_job *j, const sl_err *e)
{
    pthread_mutex_lock(&j->mu);
    if (!atomic_exchange(&j->failed, 1))
        sl_err_copy(&j->err, e);
    pthread_mutex_unlock(&j->mu);
}

static sl_status dummy_param(dummy_job *j, int32_t dev, int64_t i, void *buf, sl_err *err)
{
    const uint64_t base = j->p->devices[dev].params[i].offset;
    const uint64_t nbytes = j->p->devices[dev].params[i].nbytes;
    const sl_device *d = &j->devs[dev].dev;
    const size_t es = sl_dtype_bits(j->p->dtype) / 8;
    sl_mt19937 g;
    sl_mt19937_seed(&g, j->seed);
    for (uint64_t off = 0; off < nbytes; off += DUMMY_CHUNK) {
        size_t n = (size_t)sl_min_u64(DUMMY_CHUNK, nbytes - off);
        sl_dummy_values(&g, j->p->dtype, buf, n / es);
        SL_TRY(sl_device_write(d, base + off, buf, n, err));
    }
    return SL_OK;
}

/* Maps a flat item number to (device, param) by walking the devices; few devices, cheap. */
static void dummy_item(const sl_plan *p, int64_t item, int32_t *dev, int64_t *i)
{
    int32_t d = 0;
    while (item >= p->devices[d].n_params) {
        item -= p->devices[d].n_params;
        d++;
    }
    *dev = d;
    *i = item;
}

static void *dummy_worker(void *arg)
{
    dummy_job *j = arg;
    void *buf = malloc(DUMMY_CHUNK);
    sl_err err = {0};
    if (!buf) {
        sl_err_set(&err, SL_E_NOMEM, "out of memory");
        dummy_fail(j, &err);
    }
    while (buf && !atomic_load(&j->failed)) {
        int64_t item = (int64_t)atomic_fetch_add(&j->next, 1);
        if (item >= j->n_items)
            break;
        int32_t dev;
        int64_t i;
        dummy_item(j->p, item, &dev, &i);
        if (dummy_param(j, dev, i, buf, &err) != SL_OK)
            dummy_fail(j, &err);
    }
    sl_err_clear(&err);
    free(buf);
    return NULL;
}

sl_status sl_load_dummy(const sl_plan *p, const sl_model_dev *devs, const sl_load_opts *o,
                        sl_load_stats *stats, sl_err *err)
{
    if (p->dtype != SL_DTYPE_F32 && p->dtype != SL_DTYPE_F16 && p->dtype != SL_DTYPE_BF16)
        return sl_err_set(err, SL_E_UNSUPPORTED, "dummy weights need F32, F16 or BF16, not %s",
                          sl_dtype_name(p->dtype));
    dummy_job j = {.p = p, .devs = devs, .seed = (uint32_t)o->seed};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.mu, NULL);
    for (int32_t d = 0; d < p->n_devices; d++)
        j.n_items += p->devices[d].n_params;
    pthread_t th[8];
    int n_threads = o->threads > 0 ? (o->threads < 8 ? o->threads : 8) : 2, started = 0;
    for (; started < n_threads; started++) {
        if (pthread_create(&th[started], NULL, dummy_worker, &j) != 0)
            break;
    }
    if (started == 0)
        dummy_worker(&j);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
    sl_status st = SL_OK;
    if (atomic_load(&j.failed))
        st = sl_err_copy(err, &j.err);
    sl_err_clear(&j.err);
    if (st == SL_OK)
        st = sl_load_zero_pads(p, devs, NULL, 1, err);
    stats->staging_peak = (uint64_t)(started ? started : 1) * DUMMY_CHUNK;
    return st;
}
