/* dummy.c - dummy weights (SHARDING.md "Dummy weights"), equal to vLLM's on the CPU (vllm-notes
 * 1.8; docs/engine.md says what is checked against which torch): every parameter of every device
 * gets its own MT19937 seeded with the seed, as torch.Generator().manual_seed(seed) does, and is
 * filled as PyTorch's CPU uniform_(-1e-3, 1e-3) fills a contiguous tensor of the device's shape
 * (aten/src/ATen/native/cpu/DistributionTemplates.h uniform_kernel): serially, one 32-bit draw
 * per element in row-major order (padding rows included), v = fma(x, to - from, from) in float
 * with x = (u & (2^24 - 1)) * 2^-24 and from, to the floats nearest -1e-3 and 1e-3, rounded once
 * to T, and T(from) where that gives T(to). ZERO operations (vocab padding) are applied
 * afterwards, so padding is zero. No file is read.
 *
 * Parameters are independent, so worker threads take them one at a time; each generates into its
 * own bounded buffer and writes through the device ops (so non-host backends work too). */
#include "load/convert.h"
#include "load/engine.h"
#include "plan/plan_data.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_bytes.h"

#define DUMMY_CHUNK ((size_t)1 << 20)
#define DUMMY_BLOCK 1024     /* floats generated before they are rounded to T */
#define DUMMY_FROM (-1e-3)   /* the bounds of vLLM's initialize_dummy_weights, as doubles */
#define DUMMY_TO 1e-3

void sl_mt19937_seed(sl_mt19937 *g, uint32_t seed)
{
    g->mt[0] = seed;
    for (int i = 1; i < 624; i++)
        g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i;
    g->idx = 624;
}

static uint32_t mt_mix(uint32_t hi, uint32_t lo, uint32_t far)
{
    const uint32_t y = (hi & 0x80000000u) | (lo & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
}

/* The standard three-part twist (no index modulo, so the first two loops vectorize). */
static void mt_twist(sl_mt19937 *g)
{
    uint32_t *mt = g->mt;
    int i = 0;
    for (; i < 624 - 397; i++)
        mt[i] = mt_mix(mt[i], mt[i + 1], mt[i + 397]);
    for (; i < 623; i++)
        mt[i] = mt_mix(mt[i], mt[i + 1], mt[i + 397 - 624]);
    mt[623] = mt_mix(mt[623], mt[0], mt[396]);
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

/* The float that uniform_real<float> gives for each draw: every T takes this path, as the
 * accumulate type of Half and BFloat16 is float, so 24 bits of each draw count for all three.
 * fmaf because torch's AVX2 and AVX512 kernels contract x * (to - from) + from into one FMA
 * (its x86 DEFAULT kernel, without FMA, rounds twice and gives other values). */
static void dummy_floats(sl_mt19937 *g, float *v, size_t n)
{
    const float from = (float)DUMMY_FROM, to = (float)DUMMY_TO;
    for (size_t i = 0; i < n; i++) {
        const float x = (float)(sl_mt19937_next(g) & 0xffffffu) * 0x1.0p-24f;
        v[i] = fmaf(x, to - from, from);
    }
}

/* The bits of T(f) for T = F32, F16, BF16 (round to nearest even). */
static uint32_t dummy_bits(sl_dtype dt, float f)
{
    uint32_t u = 0;
    if (dt == SL_DTYPE_F32)
        memcpy(&u, &f, 4);
    else
        u = dt == SL_DTYPE_F16 ? sl_f32_to_f16(f) : sl_f32_to_bf16(f);
    return u;
}

/* Rounds the floats to T once, then replaces a value that rounded up to T(to) by T(from), as
 * uniform_kernel does to keep [from, to) half-open. */
static void dummy_store(sl_dtype dt, const float *v, unsigned char *d, size_t n)
{
    const uint32_t from_t = dummy_bits(dt, (float)DUMMY_FROM), to_t = dummy_bits(dt, (float)DUMMY_TO);
    sl_convert(d, dt, v, SL_DTYPE_F32, n);
    if (dt == SL_DTYPE_F32) {
        for (size_t i = 0; i < n; i++)
            if (v[i] == (float)DUMMY_TO)
                memcpy(d + 4 * i, &from_t, 4);
        return;
    }
    const uint16_t from16 = (uint16_t)from_t, to16 = (uint16_t)to_t;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, d + 2 * i, 2);
        if (h == to16)
            memcpy(d + 2 * i, &from16, 2);
    }
}

void sl_dummy_values(sl_mt19937 *g, sl_dtype dt, void *dst, size_t n)
{
    float v[DUMMY_BLOCK];
    unsigned char *d = dst;
    const size_t es = sl_dtype_bits(dt) / 8;
    for (size_t done = 0; done < n; done += DUMMY_BLOCK) {
        const size_t m = n - done < DUMMY_BLOCK ? n - done : DUMMY_BLOCK;
        dummy_floats(g, v, m);
        dummy_store(dt, v, d + done * es, m);
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
