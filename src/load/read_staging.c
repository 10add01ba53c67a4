/* read_staging.c - how much host memory a load stages through, and in what pieces: the request
 * size, the number and size of the staging slots, the conversion ring for devices that copy
 * asynchronously, and the staging block itself (populated once, page-locked for such devices).
 * docs/engine.md "Fixed staging" and "Slots follow CPUs". */
#include "load/convert.h"
#include "load/read_ctx.h"
#include "load/read_step.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/sl_bytes.h"

_Static_assert(RD_MAX_SLOTS + RD_RING <= SL_DEVICE_MAX_MARKS,
               "one device mark per staging slot and per bounce piece");
_Static_assert(SL_RD_MIN_SLOT == RD_SLOT_SLACK + RD_ALIGN, "read_step.h's least slot");

/* ---- sizes ---------------------------------------------------------------------------------- */

static uint64_t rd_staging_budget(const rd_ctx *x)
{
    return x->o->staging_bytes ? x->o->staging_bytes : SL_STAGING_DEFAULT;
}

/* Request size req (a multiple of 4096), cut so that at least two slots fit the budget when
 * possible, and the number of slots it gives. */
static void rd_set_request(rd_ctx *x, uint64_t req, uint64_t staging)
{
    req = sl_min_u64(sl_max_u64(req / RD_ALIGN * RD_ALIGN, RD_ALIGN), RD_MAX_REQUEST);
    if (staging < 2 * (req + RD_SLOT_SLACK) && staging / 2 > RD_SLOT_SLACK + RD_ALIGN)
        req = (staging / 2 - RD_SLOT_SLACK) / RD_ALIGN * RD_ALIGN;
    else if (staging < 2 * (req + RD_SLOT_SLACK))
        req = RD_ALIGN;
    x->request = req;
    x->slot_size = req + RD_SLOT_SLACK;
    uint64_t n = staging / x->slot_size;
    x->n_slots = (unsigned)sl_max_u64(1, sl_min_u64(n, RD_MAX_SLOTS));
}

void rd_size_requests(rd_ctx *x)
{
    rd_set_request(x, x->o->request_bytes ? x->o->request_bytes : RD_DEFAULT_REQUEST,
                   rd_staging_budget(x));
    /* Gaps under 1 MiB (or a sixteenth of a small request) are cheaper to read than to skip,
     * unless the caller would rather skip them (opts.read_gap). */
    x->merge_gap = sl_min_u64((uint64_t)1 << 20, x->request / 16);
    if (x->o->read_gap)
        x->merge_gap = x->o->read_gap < 0 ? 0 : (uint64_t)x->o->read_gap;
}

/* merge_gap stays as rd_size_requests set it, so the ranges (and bytes read) are the same as a
 * load that sizes its slots from the budget. */
sl_status rd_size_slots(rd_ctx *x, uint64_t slot_bytes)
{
    SL_CHECK(slot_bytes >= RD_SLOT_SLACK + RD_ALIGN, x->err, SL_E_INVALID_ARG,
             "staging of %llu bytes per slot is too small (at least %u)",
             (unsigned long long)slot_bytes, RD_SLOT_SLACK + RD_ALIGN);
    x->request = sl_min_u64((slot_bytes - RD_SLOT_SLACK) / RD_ALIGN * RD_ALIGN, RD_MAX_REQUEST);
    x->slot_size = x->request + RD_SLOT_SLACK;
    return SL_OK;
}

uint64_t sl_rd_ring_budget(uint64_t staging)
{
    const uint64_t ring = sl_min_u64(sl_max_u64(staging / 16, RD_RING_MIN), RD_RING_MAX);
    return sl_min_u64(ring, staging / 4);   /* a small budget stays mostly slots */
}

/* The ring, out of at most max_bytes, when the local devices copy asynchronously and some of
 * their elements are converted (or narrow rows gathered: as the devices ask, and opts.gather_rows,
 * for benchmarks, see docs/engine.md). Without it, conversions go through a small synchronous bounce buffer. */
void rd_plan_ring(rd_ctx *x, uint64_t max_bytes)
{
    const uint64_t unit = (uint64_t)RD_RING * RD_ALIGN;
    x->gather_rows = x->o->gather_rows;
    x->gather_parts = 0;
    for (int32_t d = 0; d < x->p->n_devices; d++)
        if (rd_local(x, d))
            x->gather_parts = sl_max_u64(x->gather_parts, sl_device_gather_below(&x->devs[d].dev));
    if (max_bytes < unit || !rd_staged_work(x, 1) || !rd_can_mark(x))
        return;
    x->ring = 1;
    x->bounce_bytes = max_bytes / unit * unit;
}

/* 1 when the host converts op r's elements for its device: the device does not convert them
 * itself (sl_device_converts: cuda's kernels, opts.cuda_convert), or its destination rows lie
 * apart, which rows gathered unconverted cannot serve (read_scatter.c's rd_gather_rows). Asking
 * the device sets its conversions up now rather than at the first chunk. */
static int rd_host_converts(const rd_ctx *x, const rd_op *r)
{
    const sl_op *op = r->op;
    if (op->src_dtype == r->ddt)
        return 0;
    if (op->rows > 1 && op->dst_stride != op->row_elems * r->dsize)
        return 1;
    return !sl_device_converts(&x->devs[r->dev].dev, op->dst_offset, r->ddt, op->src_dtype);
}

/* The widest element that the host converts for a local device that is not host memory (a ring
 * piece holds converted elements), in bytes; 0 when there is none. */
static uint64_t rd_staged_width(const rd_ctx *x)
{
    uint64_t w = 0;
    for (int64_t i = 0; i < x->ops.n; i++) {
        const rd_op *r = &x->ops.v[i];
        if (!r->host_dst && rd_local(x, r->dev) && rd_host_converts(x, r))
            w = sl_max_u64(w, r->dsize);
    }
    return w;
}

/* Helper threads from which the ring grows for them (sl_rd_ring_for_helpers). On 2 cores (one
 * helper, sharing the CPUs with the kernel's read workers) the grown ring's split pieces made a
 * bf16 -> f32 load of tinyllama-1.1b on the timed stand-in (FAKE_CUDA_GBPS=64) slower: 0.278 ->
 * 0.434 s, medians of 10 interleaved runs. */
#ifndef RD_RING_POOL_HELPERS   /* bench/gpu_check.sh builds a variant without the growth */
#define RD_RING_POOL_HELPERS 3u
#endif

/* sl_convert_rows splits a job from CONVERT_PAR_MIN elements, and whole rows gathered into a
 * piece fill more than half of it: pieces of 2 * CONVERT_PAR_MIN elements are always split. With
 * sl_rd_ring_budget's 4 MiB, a 1 MiB piece holds 256 Ki f32 elements, so a bf16 -> f32 load onto
 * GPUs converted every piece on one thread (5.5 GB/s on the H200, against 44 unconverted). */
uint64_t sl_rd_ring_for_helpers(uint64_t staging, uint64_t width, unsigned helpers)
{
    const uint64_t ring = sl_rd_ring_budget(staging);
    if (!width || helpers < RD_RING_POOL_HELPERS)
        return ring;
    const uint64_t want = (uint64_t)RD_RING * 2 * CONVERT_PAR_MIN * width;
    return sl_max_u64(ring, sl_min_u64(want, staging / 4));
}

/* Devices that are not host memory (cuda) take every byte through staging, and from the page
 * cache each slot's read is one CPU copy: the number of slots in flight, not their size, sets the
 * pace. Unless a request size was asked for, such loads cut the budget into about as many slots
 * as --threads says, or as there are CPUs (at most 16), with requests between 4 and 16 MiB.
 * When elements are converted on the way and the devices copy asynchronously, a sixteenth of the
 * budget (64 KiB to 4 MiB, at most a quarter) becomes the conversion ring: large pieces, because
 * each is one copy call (on the timed stand-in, 1 MiB pieces made a bf16 -> f32 load 2.5x faster
 * than 64 KiB ones); where the host converts with RD_RING_POOL_HELPERS helper threads or more, a
 * ring of pieces they share (sl_rd_ring_for_helpers, up to a quarter). merge_gap stays. */
void rd_size_for_devices(rd_ctx *x)
{
    int staged = 0;
    for (int64_t i = 0; i < x->ops.n; i++)
        staged |= !x->ops.v[i].host_dst && rd_local(x, x->ops.v[i].dev);
    if (!staged)
        return;
    uint64_t budget = rd_staging_budget(x);
    rd_plan_ring(x, sl_rd_ring_for_helpers(budget, rd_staged_width(x), rd_pool_helpers(x)));
    if (!x->ring && rd_staged_work(x, 0))   /* the synchronous conversion buffer: a quarter */
        x->bounce_bytes = sl_max_u64(RD_ALIGN, sl_min_u64(RD_BOUNCE, budget / 4 / RD_ALIGN * RD_ALIGN));
    budget = budget > x->bounce_bytes ? budget - x->bounce_bytes : 0;
    uint64_t req = x->o->request_bytes;
    if (!req) {
        const long n = x->o->threads > 0 ? (long)x->o->threads : sysconf(_SC_NPROCESSORS_ONLN);
        const uint64_t want = budget / (uint64_t)(n < 2 ? 2 : n > 16 ? 16 : n);
        req = sl_min_u64(sl_max_u64(want, RD_MIN_AUTO_REQUEST), RD_DEFAULT_REQUEST);
    }
    rd_set_request(x, req, budget);
}

uint64_t rd_chunk_room(const rd_chunk *c)
{
    return sl_align_up(c->b_ext, RD_ALIGN) - c->a / RD_ALIGN * RD_ALIGN;
}

/* The most room RD_PACK_MAX consecutive chunks that could share a slot take (rd_joins): what a
 * slot needs so that packing is not cut short by its size. */
static uint64_t rd_pack_room(const rd_ctx *x)
{
    uint64_t best = 0, sum = 0;
    int64_t first = 0;   /* the window [first, i] of chunks that may share a slot */
    for (int64_t i = 0; i < x->chunks.n; i++) {
        const rd_chunk *c = &x->chunks.v[i];
        if (!rd_joins(&x->chunks.v[first], c)) {
            first = i;
            sum = 0;
        }
        if (c->dst)
            continue;
        sum += rd_chunk_room(c);
        if (i - first >= (int64_t)RD_PACK_MAX)
            sum -= rd_chunk_room(&x->chunks.v[first++]);
        best = sl_max_u64(best, sum);
    }
    return best;
}

/* A small checkpoint does not need the whole budget: no more slots than chunks, and slots only
 * as large as the largest chunk (plus alignment), or, when they pack, as the chunks that could
 * share one take, at most an equal share of all the staged chunks and what a request needs. */
void rd_fit_slots(rd_ctx *x, int packs)
{
    uint64_t largest = 0, total = 0;
    for (int64_t i = 0; i < x->chunks.n; i++) {
        const rd_chunk *c = &x->chunks.v[i];
        if (!c->dst) {
            largest = sl_max_u64(largest, c->b_ext - c->a);
            total += rd_chunk_room(c);
        }
    }
    x->n_slots = (unsigned)sl_min_u64(x->n_slots, (uint64_t)x->chunks.n);
    uint64_t fit = sl_align_up(largest, RD_ALIGN) + 2 * RD_ALIGN;
    if (packs) {
        const uint64_t share = sl_align_up(total / x->n_slots + 1, RD_ALIGN);
        const uint64_t most = sl_min_u64(share, x->request + 2 * RD_ALIGN);   /* a chunk's slot */
        fit = sl_max_u64(fit, sl_min_u64(rd_pack_room(x), most));
    }
    x->slot_size = sl_min_u64(x->slot_size, fit);
}

void rd_size_packs(rd_ctx *x, int packs, int splits)
{
    x->pack = 1;
    x->split = splits ? RD_SPLIT_MAX : 1;
    if (packs)
        x->pack = (unsigned)sl_max_u64(1, sl_min_u64(RD_PACK_MAX, RD_PACK_REQUESTS / x->n_slots));
    else
        x->pack = x->split;
}

unsigned rd_io_depth(const rd_ctx *x)
{
    return x->n_slots * x->pack;
}

int rd_can_mark(const rd_ctx *x)
{
    for (int32_t d = 0; d < x->p->n_devices; d++)
        if (rd_local(x, d) && sl_device_is_async(&x->devs[d].dev))
            return 1;
    return 0;
}

/* ---- the staging block ---------------------------------------------------------------------- */

/* The read slots, then extra_slots more of the same size for the caller (sl_rd_extra), then the
 * ring, page-locked together. */
static size_t rd_staging_len(const rd_ctx *x)
{
    return (size_t)(x->slot_size * (x->n_slots + x->extra_slots) + (x->ring ? x->bounce_bytes : 0));
}

/* Devices that copy asynchronously (cuda) page-lock the staging block once for the whole load. */
static sl_status rd_pin(rd_ctx *x)
{
    const size_t len = rd_staging_len(x);
    for (; x->n_pinned < x->p->n_devices; x->n_pinned++)
        if (rd_local(x, x->n_pinned))
            SL_TRY(sl_device_pin(&x->devs[x->n_pinned].dev, x->staging, len, x->err));
    return SL_OK;
}

/* Once reads have stopped: each unpin drains its device's copies before releasing the pin. */
static void rd_unpin(rd_ctx *x)
{
    for (int32_t d = 0; d < x->n_pinned; d++)
        if (rd_local(x, d))
            sl_device_unpin(&x->devs[d].dev, x->staging);
    x->n_pinned = 0;
}

/* Staging is touched once per slot use, so its first-touch cost is paid on the hot path: huge
 * pages and one populate call make it a few faults instead of one per 4 KiB page. */
static unsigned char *rd_staging_alloc(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, len, MADV_POPULATE_WRITE);
#endif
    return p;
}

sl_status rd_alloc_buffers(rd_ctx *x)
{
    if (!x->ring && rd_staged_work(x, 0)) {   /* the ring, when there is one, is part of the block */
        if (!x->bounce_bytes)   /* not sized from the budget (rd_size_for_devices) */
            x->bounce_bytes = RD_BOUNCE;
        if (!(x->bounce = malloc((size_t)x->bounce_bytes)))
            return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    }
    x->slots = calloc(x->n_slots, sizeof *x->slots);
    x->parts = calloc((size_t)x->n_slots * x->pack, sizeof *x->parts);
    x->staging = rd_staging_alloc(rd_staging_len(x));
    if (!x->slots || !x->parts || !x->staging)
        return sl_err_set(x->err, SL_E_NOMEM, "cannot allocate %llu bytes of staging",
                          (unsigned long long)rd_staging_len(x));
    if (x->ring)
        x->bounce = x->staging + rd_staging_len(x) - x->bounce_bytes;
    for (unsigned i = 0; i < x->n_slots; i++) {
        rd_slot *sl = &x->slots[i];
        sl->buf = x->staging + (size_t)i * x->slot_size;
        sl->index = i;
        sl->parts = x->parts + (size_t)i * x->pack;
        for (unsigned k = 0; k < x->pack; k++)
            sl->parts[k].slot = sl;
    }
    return rd_pin(x);
}

void rd_free_buffers(rd_ctx *x)
{
    free(x->slots);
    free(x->parts);
    rd_unpin(x);
    if (x->staging)
        munmap(x->staging, rd_staging_len(x));
    if (!x->ring)
        free(x->bounce);
    x->slots = NULL;
    x->parts = NULL;
    x->staging = NULL;
    x->bounce = NULL;
}
