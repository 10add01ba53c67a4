/* read_setup.c - the one set-up of the read engine, for both ways it is driven: the whole load in
 * one process (read.c) and the stepwise API (read_step.c). What differs between them is a field
 * of rd_config; the steps and their order are the same:
 *
 *   sizes from the options -> files and operations -> files opened -> host addresses -> sizes for
 *   the devices (or the ring as given) -> padding zeroed -> chunks -> slots fitted to the chunks
 *   -> conversion helpers -> staging (pinned) -> the read engine. */
#include "load/read_ctx.h"
#include "load/read_step.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_bytes.h"

/* Each local op's destination in host memory, where it is one run of it (rd_op.host_dst): the
 * scatter writes it in place and direct reads land in it; other ops go through the device. */
static void rd_host_dsts(rd_ctx *x)
{
    for (int64_t i = 0; i < x->ops.n; i++) {
        rd_op *r = &x->ops.v[i];
        const sl_op *op = r->op;
        const uint64_t extent = (op->rows - 1) * op->dst_stride + op->row_elems * r->dsize;
        r->host_dst = rd_local(x, r->dev)
                          ? sl_device_host_at(&x->devs[r->dev].dev, op->dst_offset, extent)
                          : NULL;
    }
}

/* --verify's inputs to the chunk planner: whole files (SHA-256), or each file's block size, size
 * and header end (by blocks). arr holds 3 * n entries, the caller frees it. */
static sl_status rd_verify_chunk_opts(const rd_ctx *x, rd_chunk_opts *co, uint64_t **arr)
{
    const int64_t n = x->files.n;
    uint64_t *v = calloc(3 * (size_t)n + 1, sizeof *v);
    *arr = v;
    if (!v)
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    const int blocks = rd_verify_by_blocks(x->verify);
    for (int64_t f = 0; f < n; f++) {
        v[f] = blocks ? rd_verify_block_bytes(x->verify, f) : x->files.v[f].size;
        v[n + f] = x->files.v[f].size;
        v[2 * n + f] = blocks ? rd_verify_header_end(x->verify, f) : 0;
    }
    if (blocks) {
        co->block = v;
        co->size = v + n;
        co->head = v + 2 * n;
    } else {
        co->whole = v;
    }
    return SL_OK;
}

/* By blocks each chunk is whole blocks, hashed on its own, so one read request must hold the
 * largest block. Said here, with the budget that would do, rather than by the chunk planner: here
 * the slots are known. A budget shared by fixed slots (the stepwise path: 2 read, the rest
 * received from other ranks) needs a block in each, plus at most RD_RING_MAX of ring. */
static sl_status rd_check_blocks(const rd_ctx *x, const rd_config *c)
{
    uint64_t block = 0;
    for (int64_t f = 0; f < x->files.n; f++)
        block = sl_max_u64(block, rd_verify_block_bytes(x->verify, f));
    if (block <= x->request)
        return SL_OK;
    const uint64_t mib = (uint64_t)1 << 20, slot = block + RD_SLOT_SLACK;
    if (x->o->request_bytes && x->o->request_bytes < block && !c->slot_bytes)
        return sl_err_set(x->err, SL_E_INVALID_ARG, "--verify: the manifest's blocks (%llu bytes) "
                          "do not fit a read request of %llu bytes: give --request of at least "
                          "%llu bytes", (unsigned long long)block,
                          (unsigned long long)x->request, (unsigned long long)block);
    const unsigned shares = c->slot_bytes ? x->n_slots + x->extra_slots : 2;
    uint64_t need = sl_align_up(slot * shares + x->bounce_bytes, mib);
    /* fixed slots: what the budget keeps for the ring first (sl_rd_ring_budget, at most 4 MiB) */
    while (c->slot_bytes && need - sl_rd_ring_budget(need) < slot * shares)
        need += mib;
    SL_CHECK(!c->slot_bytes || slot * shares <= INT_MAX, x->err, SL_E_INVALID_ARG, "--verify: the "
             "manifest's blocks (%llu bytes) do not fit: %u slots of one block each exceed the "
             "2 GiB one exchange can address; use fewer ranks, or --dist independent",
             (unsigned long long)block, shares);
    return sl_err_set(x->err, SL_E_INVALID_ARG, "--verify: the manifest's blocks (%llu bytes) do "
                      "not fit a read request of %llu bytes (the staging budget is cut into %u "
                      "slots%s): give --staging of at least %llu MiB",
                      (unsigned long long)block, (unsigned long long)x->request, shares,
                      c->slot_bytes ? ", two read and the rest received from other ranks" : "",
                      (unsigned long long)(need / mib));
}

/* The chunk planner's inputs, taken from the opened files and the devices. */
static sl_status rd_plan_chunks(rd_ctx *x)
{
    rd_chunk_opts co = {.request = x->request, .merge_gap = x->merge_gap};
    unsigned char *file_direct = NULL;
    uint64_t *vo = NULL;
    if (x->verify)
        SL_TRY(rd_verify_chunk_opts(x, &co, &vo));   /* vo is NULL when it fails */
    file_direct = calloc((size_t)x->files.n + 1, 1);
    if (!file_direct) {
        free(vo);
        return sl_err_set(x->err, SL_E_NOMEM, "out of memory");
    }
    for (int64_t f = 0; f < x->files.n; f++)
        file_direct[f] = (unsigned char)x->files.v[f].direct;
    co.file_direct = file_direct;
    co.direct = x->allow_direct;
    sl_status st = rd_chunks_build(&x->ops, &co, &x->chunks, x->err);
    if (st == SL_OK && co.whole)   /* files hashed whole take turns (read_verify.h) */
        st = rd_chunks_interleave(&x->chunks, x->err);
    free(file_direct);
    free(vo);
    return st;
}

/* Sizes from the options, or as the caller fixed them. */
static sl_status rd_size(rd_ctx *x, const rd_config *c)
{
    /* Below it one slot (a request and its alignment) is already over the budget: --staging
     * 4096B once peaked at 12,288 bytes. */
    SL_CHECK(x->o->staging_bytes == 0 || x->o->staging_bytes >= SL_STAGING_MIN, x->err, SL_E_INVALID_ARG,
             "a staging budget of %llu bytes is too small: the least that holds is %llu bytes (16 KiB: "
             "one 4 KiB read and its O_DIRECT alignment)", (unsigned long long)x->o->staging_bytes,
             (unsigned long long)SL_STAGING_MIN);
    SL_CHECK(x->o->read_gap >= SL_READ_GAP_NONE && x->o->read_gap <= SL_READ_GAP_MAX, x->err,
             SL_E_INVALID_ARG, "a read gap of %lld bytes is not allowed: give 1 to %lld bytes, 0 "
             "(automatic) or SL_READ_GAP_NONE (read only the bytes the devices need)",
             (long long)x->o->read_gap, (long long)SL_READ_GAP_MAX);
    rd_size_requests(x);
    if (c->slot_bytes)
        SL_TRY(rd_size_slots(x, c->slot_bytes));
    if (c->n_slots)
        x->n_slots = c->n_slots;
    return SL_OK;
}

/* A request keeps its file open while it is in flight (read_files.c), so no more requests than
 * files allowed open: fewer slots, or, where the slots are fixed (the stepwise path: the ranks
 * share one chunk list), room for one more file than slots. */
static void rd_bound_open_files(rd_ctx *x, const rd_config *c)
{
    if (c->n_slots)
        rd_files_allow_open(&x->files, x->n_slots + 1);
    else if (x->n_slots > x->files.max_open)
        x->n_slots = x->files.max_open;
}

/* The whole load sizes staging from the budget: what it allocates (slots, and the ring or the
 * conversion buffer) must fit it, or the load is refused with what it would need. */
static sl_status rd_check_budget(const rd_ctx *x, const rd_config *c)
{
    if (c->slot_bytes || c->n_slots || !x->o->staging_bytes)
        return SL_OK;
    const uint64_t need = x->slot_size * x->n_slots + x->bounce_bytes;
    SL_CHECK(need <= x->o->staging_bytes, x->err, SL_E_INVALID_ARG,
             "a staging budget of %llu bytes is too small for this load: it needs at least %llu "
             "(a %llu-byte read slot and a %llu-byte conversion buffer)",
             (unsigned long long)x->o->staging_bytes, (unsigned long long)need,
             (unsigned long long)x->slot_size, (unsigned long long)x->bounce_bytes);
    return SL_OK;
}

/* Slots hold several chunks when the caller lets them (rd_config.pack) and no file is remote. */
static int rd_packs(const rd_ctx *x, const rd_config *c)
{
    return c->pack && !x->verify && !rd_remote_obj(x);
}

sl_status rd_setup(rd_ctx *x, const rd_config *c)
{
    /* size_for_devices chooses slots and ring itself */
    assert(!c->size_for_devices || (!c->slot_bytes && !c->n_slots && !c->ring_bytes));
    *x = (rd_ctx){.p = c->p, .devs = c->devs, .o = c->o, .err = c->err, .local = c->local,
                  .allow_direct = c->direct_reads, .extra_slots = c->extra_slots};
    for (unsigned k = 0; k < RD_RING; k++)
        x->ring_dev[k] = -1;
    SL_TRY(rd_size(x, c));
    SL_TRY(rd_files_init(&x->files, c->files, c->n_files, x->err));
    SL_TRY(rd_ops_build(x->p, c->n_files, &x->ops, x->err));
    /* the job read the manifest (sl_load_job_plan): without it verify would check none, and an
     * assert would vanish from release builds, where that would pass unseen */
    SL_CHECK(!c->verify || !c->o->manifest_path || (c->manifest && c->manifest->path), x->err,
             SL_E_INVALID_ARG, "%s: verify with a manifest, but the job's manifest was not read",
             c->o->manifest_path);
    if (c->verify) {
        SL_TRY(rd_verify_new(c->files, c->n_files, c->manifest, &x->verify, x->err));
        if (!rd_verify_by_blocks(x->verify))   /* every file, whole, is read: unused ones too */
            memset(x->ops.used, 1, (size_t)c->n_files);
    }
    SL_TRY(rd_files_open(&x->files, x->ops.used, x->o->io, x->err));
    rd_host_dsts(x);
    if (c->size_for_devices)
        rd_size_for_devices(x);
    else
        rd_plan_ring(x, c->ring_bytes);
    SL_TRY(sl_load_zero_pads(x->p, x->devs, x->local, 0, x->err));      /* local devices only */
    if (x->verify && rd_verify_by_blocks(x->verify))
        SL_TRY(rd_check_blocks(x, c));
    SL_TRY(rd_plan_chunks(x));
    x->planned = 1;
    if (x->chunks.n == 0)
        return SL_OK;
    const int packs = rd_packs(x, c);
    rd_fit_slots(x, packs);
    rd_bound_open_files(x, c);
    rd_size_packs(x, packs, !packs && c->split && !rd_remote_obj(x));
    SL_TRY(rd_check_budget(x, c));
    x->use_marks = c->slot_marks && rd_can_mark(x);
    rd_start_pool(x);
    SL_TRY(rd_alloc_buffers(x));
    return rd_io_open(x);
}

void rd_free(rd_ctx *x)
{
    sl_io_close(&x->io); /* first: no read may land in staging after it is freed */
    rd_files_close(&x->files);
    rd_ops_free(&x->ops);
    rd_chunks_free(&x->chunks);
    rd_verify_free(x->verify);
    x->verify = NULL;
    rd_free_buffers(x);
    sl_pool_free(x->pool);
    x->pool = NULL;
}
