/* mpi_load.c - multi-process loading over MPI (built with SL_WITH_MPI; mpi_stub.c otherwise).
 *
 * Rank r owns mesh devices [r*K, (r+1)*K) and allocates only those. Two strategies:
 * - independent: each rank runs the ordinary read-once engine on a view of the plan holding only
 *   its devices, so it reads the bytes they need (small gaps merged, as in one process).
 * - cooperative: every rank builds the same chunk list from the whole plan (read_step.h) and
 *   owns a contiguous run of chunks, balanced by bytes, so each byte is read by one rank. In round
 *   k every rank takes its k-th chunk (or nothing) from one of its two read slots, starts reading
 *   its next chunk into the other (so reads overlap the exchange and the scatters), and one
 *   MPI_Alltoallw sends each other rank exactly the bytes of that chunk its devices read (an
 *   indexed datatype over the slot, built from the same segment list on both sides, so nothing is
 *   packed or sent twice); they land at the same offsets of one of size-1 receive slots, which is
 *   then scattered like the chunk itself. Staging per rank is size + 1 slots, sized to fit
 *   --staging.
 *
 * Failures: every phase ends with an agreement (dist_agree: MPI_Allreduce of the lowest failing
 * rank, then a broadcast of its message), so all ranks leave at the same point and none waits in
 * a collective that others skipped. MPI's own errors keep the default MPI_ERRORS_ARE_FATAL: they
 * mean the transport broke, and aborting the job is the only way not to hang. */
#include "load/engine.h"
#include "load/read_step.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/sl_bytes.h"
#include "common/sl_file.h"

#define DIST_MSG 1024

static double dist_max_d(double a, double b)
{
    return a > b ? a : b;
}

static int dist_inited_here;

void sl_dist_opts_init(sl_dist_opts *o)
{
    if (o)
        *o = (sl_dist_opts){.devices_per_rank = 1, .strategy = SL_DIST_COOPERATIVE};
}

int sl_dist_available(void)
{
    return 1;
}

static int dist_active(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

/* FUNNELED: only the loading thread calls MPI; the I/O pool and pre-faulting never do. */
sl_status sl_dist_init(void)
{
    int init = 0, provided = 0;
    MPI_Initialized(&init);
    if (init)
        return SL_OK;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return SL_E_UNSUPPORTED;
    dist_inited_here = 1;
    return SL_OK;
}

void sl_dist_finalize(void)
{
    if (dist_inited_here && dist_active())
        MPI_Finalize();
    dist_inited_here = 0;
}

int32_t sl_dist_rank(void)
{
    int r = 0;
    if (dist_active())
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int32_t sl_dist_size(void)
{
    int n = 1;
    if (dist_active())
        MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

sl_status sl_dist_agree(sl_status st, const char *msg, char *out, size_t outlen)
{
    char buf[DIST_MSG] = "";
    int rank = 0, size = 1, first = 0, code = (int)st;
    if (!dist_active()) {
        if (st != SL_OK && out && outlen)
            snprintf(out, outlen, "%s", msg ? msg : "");
        return st;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = st != SL_OK ? rank : size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size)
        return SL_OK;
    if (rank == first)
        snprintf(buf, sizeof buf, "%s", msg ? msg : "");
    MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
    MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, first, MPI_COMM_WORLD);
    if (out && outlen)
        snprintf(out, outlen, "%s", buf);
    return (sl_status)code;
}

/* Collective: SL_OK when ok holds on every rank, else SL_E_NOMEM everywhere. */
static sl_status dist_all_ok(int ok)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all ? SL_OK : SL_E_NOMEM;
}

/* Rank 0's buffers are agreed on before each gather that writes into them: receiving into memory
 * it does not have would crash rank 0, and returning early would leave the others in the gather.
 * So every rank makes the same calls whatever fails, and returns the same status. */
sl_status sl_dist_gather_text(const char *text, char **out)
{
    int rank = 0, size = 1, len = 0;
    int *lens = NULL, *displs = NULL;
    long long total = 0;
    if (!out)
        return SL_E_INVALID_ARG;
    *out = NULL;
    if (!dist_active()) {
        *out = strdup(text ? text : "");
        return *out ? SL_OK : SL_E_NOMEM;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    len = text ? (int)strnlen(text, INT_MAX - 1) : 0;
    if (rank == 0) {
        lens = calloc((size_t)size, sizeof *lens);
        displs = calloc((size_t)size, sizeof *displs);
    }
    sl_status st = dist_all_ok(rank != 0 || (lens && displs));
    if (st == SL_OK) {
        MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
        for (int r = 0; rank == 0 && r < size; r++) {
            displs[r] = (int)total; /* used only when the sum fits an int */
            total += lens[r];
        }
        st = dist_all_ok(rank != 0 || (total < INT_MAX && (*out = malloc((size_t)total + 1))));
    }
    if (st == SL_OK) {
        MPI_Gatherv(text, len, MPI_CHAR, *out, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (*out)
            (*out)[total] = '\0';
    } else {
        free(*out);
        *out = NULL;
    }
    free(lens);
    free(displs);
    return st;
}

/* ---- sl_load_dist --------------------------------------------------------------------------- */

typedef struct dist_ctx {
    int rank, size;
    int32_t k;                      /* devices per rank */
    sl_model *m;
    sl_load_job *job;               /* the files, the resolved options, the plan, this rank's view */
    int32_t n_mesh;                 /* the plan's mesh devices */
    sl_model_dev *all;              /* n_mesh: this rank's devices, empty entries elsewhere */
    unsigned char *local;           /* n_mesh flags */
    sl_rd *rd;
    int64_t *first;                 /* size + 1: rank r reads chunks [first[r], first[r+1]) */
    unsigned char *recv;            /* size - 1 slots of received pieces (in the engine's staging) */
    uint64_t slot;
    int *cnt;                       /* 4 * size: send counts, send displs, recv counts, recv displs */
    MPI_Datatype *types;            /* 2 * size: send types, receive types of the current round */
    sl_rd_segs segs;                /* scratch: the segments of one chunk for one rank */
    int *blen;                      /* scratch for MPI_Type_create_hindexed, seg_cap entries */
    MPI_Aint *bdis;
    int64_t seg_cap;
    sl_rank_stats me;
} dist_ctx;

/* Agrees on a failure; the failing rank's message, "rank R: ...", ends up on every rank. */
static sl_status dist_agree_err(dist_ctx *c, sl_status st)
{
    char msg[DIST_MSG] = "", out[DIST_MSG] = "";
    if (st != SL_OK)
        snprintf(msg, sizeof msg, "rank %d: %s", c->rank, sl_err_msg(&c->m->err));
    sl_status all = sl_dist_agree(st, msg, out, sizeof out);
    if (all != SL_OK)
        sl_err_set(&c->m->err, all, "%s", out);
    return all;
}

/* The same checks as a single-process load (the job's), then the mesh against the ranks; the
 * job's view becomes this rank's devices. */
static sl_status dist_check(dist_ctx *c, const sl_plan *p)
{
    sl_err *err = &c->m->err;
    SL_TRY(sl_load_job_plan(c->job, p, err));
    c->n_mesh = sl_plan_device_count(p);
    SL_CHECK(c->k >= 1 && (int64_t)c->k * c->size == c->n_mesh, err, SL_E_INVALID_ARG,
             "%d ranks x %d devices per rank != the mesh's %d devices", c->size, (int)c->k,
             (int)c->n_mesh);
    return sl_load_job_range(c->job, c->me.first_device, c->k, err);
}

#define DIST_FNV_BASIS 0xcbf29ce484222325ull

/* FNV-1a over one value: what the ranks must agree on, hashed. */
static uint64_t dist_mix(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        h = (h ^ (v & 0xFF)) * 0x100000001b3ull;
    return h;
}

/* Whether this job takes the cooperative path (else each rank runs the ordinary engine). One
 * rank reads every byte once either way: the single-process pipeline does it faster. */
static int dist_coop_path(const dist_ctx *c, const sl_dist_opts *d)
{
    return d->strategy != SL_DIST_INDEPENDENT && !c->job->opts.dummy && c->size > 1;
}

#define DIST_SAMPLE 4096u

/* What a file's bytes say of it, cheaply: 4 KiB at its start, middle and end of a local file (two
 * checkpoints of the same shapes, such as two fine-tunes at one path on two hosts, differ there;
 * sizes alone let a cooperative load mix them), the ETag of a remote one. A file that cannot be
 * read gives a mark of its own: its load fails later, naming it. */
static uint64_t dist_file_sample(uint64_t h, const sl_load_file *f)
{
    if (f->remote) {
        const char *etag = sl_load_file_etag(f);
        return dist_mix(h, etag ? XXH3_64bits(etag, strlen(etag)) : 1);
    }
    struct stat sb;
    const int fd = sl_file_open_regular(f->path, &sb);
    if (fd < 0)
        return dist_mix(h, 2);
    unsigned char buf[DIST_SAMPLE];
    const uint64_t at[] = {0, f->size / 2, f->size > DIST_SAMPLE ? f->size - DIST_SAMPLE : 0};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        const size_t n = (size_t)sl_min_u64(DIST_SAMPLE, f->size - at[i]);
        h = dist_mix(h, sl_pread_full(fd, buf, n, at[i]) == 0 ? XXH3_64bits(buf, n) : 3);
    }
    close(fd);
    return h;
}

/* What every rank must have the same of before anything is opened: the mesh and what each device
 * holds, and the files' sizes and a sample of their bytes (dist_file_sample; not the budgets:
 * independent ranks may differ there, and the cooperative rounds are compared themselves,
 * dist_same_rounds). */
static uint64_t dist_digest(const dist_ctx *c, const sl_plan *p, const sl_dist_opts *d)
{
    const sl_load_opts *o = &c->job->opts;
    uint64_t h = DIST_FNV_BASIS;
    const uint64_t v[] = {(uint64_t)dist_coop_path(c, d), (uint64_t)o->dummy, o->dummy ? o->seed : 0,
                          (uint64_t)c->k, (uint64_t)c->n_mesh, (uint64_t)sl_plan_dtype(p),
                          (uint64_t)sl_plan_layout(p), (uint64_t)sl_plan_tp(p), (uint64_t)sl_plan_pp(p),
                          (uint64_t)c->job->n_files};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = dist_mix(h, v[i]);
    for (int32_t dv = 0; dv < c->n_mesh; dv++)
        h = dist_mix(dist_mix(h, sl_plan_device_bytes(p, dv)), (uint64_t)sl_plan_param_count(p, dv));
    for (int32_t s = 0; s < sl_plan_pp(p); s++) {   /* a rank given another --pp-partition */
        int64_t first = 0, count = 0;
        sl_plan_stage_layers(p, s, &first, &count);
        h = dist_mix(dist_mix(h, (uint64_t)first), (uint64_t)count);
    }
    for (int64_t f = 0; f < c->job->n_files; f++)
        h = dist_file_sample(dist_mix(h, c->job->files[f].size), &c->job->files[f]);
    return h;
}

/* The least digest of the ranks that have one (mine: this rank's is h), in one collective that
 * every rank enters; a rank that failed already gives UINT64_MAX and takes no part. */
static uint64_t dist_least(uint64_t h, int mine)
{
    uint64_t v = mine ? h : UINT64_MAX, least = 0;
    MPI_Allreduce(&v, &least, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    return least;
}

/* Whether the digests of the ranks that have one (h; st SL_OK) agree: a rank whose digest is not
 * the least fails (its own error, if it failed already, is the one agreed on after). */
static sl_status dist_compare(dist_ctx *c, uint64_t h, sl_status st, const char *what)
{
    const uint64_t least = dist_least(h, st == SL_OK);
    if (st != SL_OK || h == least)
        return st;
    return sl_err_set(&c->m->err, SL_E_INVALID_ARG, "its %s differ from another rank's: give "
                      "every rank the same command line and checkpoint", what);
}

/* The ranks agree that they were given the same mesh and files, and take the same path: a rank
 * with another --tp loaded an incoherent mesh and "succeeded", one with another --dist waited
 * in other collectives than the rest (the job hung). Every rank enters it, on every path. */
static sl_status dist_same(dist_ctx *c, const sl_plan *p, const sl_dist_opts *d, sl_status st)
{
    return dist_compare(c, st == SL_OK ? dist_digest(c, p, d) : 0, st,
                        "options, plan or files (--dist, --dtype, the mesh and its pipeline split, "
                        "the checkpoint)");
}

/* Cooperative: the ranks cut the same chunks into the same slots (--staging, --request,
 * --read-gap, --verify's blocks decide them), so that they run the same rounds: one rank with
 * another --staging waited in another collective than the rest. */
static sl_status dist_same_rounds(dist_ctx *c)
{
    uint64_t h = dist_mix(dist_mix(DIST_FNV_BASIS, c->slot), (uint64_t)sl_rd_verifies(c->rd));
    const int64_t n = sl_rd_chunk_count(c->rd);
    h = dist_mix(h, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) {
        const sl_rd_chunk ch = sl_rd_chunk_at(c->rd, i);
        h = dist_mix(dist_mix(dist_mix(dist_mix(h, (uint64_t)ch.file), ch.a), ch.b), ch.b_ext);
    }
    return dist_compare(c, h, SL_OK, "reads (--staging, --request, --read-gap, --verify or "
                        "--manifest)");
}

/* Independent: the ordinary engine on the job of this rank's devices. */
static sl_status dist_independent(dist_ctx *c)
{
    return dist_agree_err(c, sl_load_job_fill(c->job, c->m->devs, &c->m->stats, &c->m->err));
}

/* ---- cooperative ---------------------------------------------------------------------------- */

/* The least budget that gives each of a rank's size + 1 slots SL_RD_MIN_SLOT bytes beside the
 * ring (the ring takes at most a quarter, so this ends within a third above the first guess). */
static uint64_t coop_least_staging(int size)
{
    const uint64_t slots = (uint64_t)size + 1;
    uint64_t s = SL_RD_MIN_SLOT * slots;
    while ((s - sl_rd_ring_budget(s)) / slots < SL_RD_MIN_SLOT)
        s += 1024;
    return s;
}

static sl_status dist_coop_setup(dist_ctx *c)
{
    const int32_t n = c->n_mesh;
    const sl_load_opts *o = &c->job->opts;
    sl_err *err = &c->m->err;
    c->all = calloc((size_t)n, sizeof *c->all);
    c->local = calloc((size_t)n, 1);
    c->first = calloc((size_t)c->size + 1, sizeof *c->first);
    c->cnt = calloc(4 * (size_t)c->size, sizeof *c->cnt);
    c->types = calloc(2 * (size_t)c->size, sizeof *c->types);
    if (!c->all || !c->local || !c->first || !c->cnt || !c->types)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int i = 0; i < 2 * c->size; i++)
        c->types[i] = MPI_BYTE;
    /* Other ranks' entries stay empty: the engine calls only the devices flagged local. */
    for (int32_t i = 0; i < c->k; i++) {
        c->all[c->me.first_device + i] = c->m->devs[i];
        c->local[c->me.first_device + i] = 1;
    }
    /* size + 1 slots per rank (two read, size-1 received) and the conversion ring within the
     * budget; Alltoallw counts and displacements are ints. */
    const uint64_t staging = o->staging_bytes ? o->staging_bytes : SL_STAGING_DEFAULT;
    const uint64_t ring = sl_rd_ring_budget(staging);
    const uint64_t budget = sl_min_u64(staging - ring, INT_MAX) / ((uint64_t)c->size + 1);
    if (budget < SL_RD_MIN_SLOT) {
        const uint64_t least = coop_least_staging(c->size);
        return sl_err_set(err, SL_E_INVALID_ARG, "--dist cooperative over %d ranks: a staging "
                          "budget of %llu bytes is too small for %d slots of at least %llu KiB "
                          "each beside the conversion ring: it needs at least %llu (--staging "
                          "%lluK)", c->size, (unsigned long long)staging, c->size + 1,
                          (unsigned long long)(SL_RD_MIN_SLOT >> 10), (unsigned long long)least,
                          (unsigned long long)(least >> 10));
    }
    /* The receive slots live in the engine's staging block, so that devices that copy
     * asynchronously (cuda) copy received pieces from page-locked memory too. */
    const sl_rd_setup s = {.files = c->job->files, .n_files = c->job->n_files, .p = c->job->plan,
                           .devs = c->all, .local = c->local, .o = o,
                           .manifest = &c->job->manifest, .slot_bytes = budget,
                           .extra_slots = (unsigned)(c->size - 1), .ring_bytes = ring, .err = err};
    SL_TRY(sl_rd_open(&s, &c->rd));
    c->slot = sl_rd_slot_bytes(c->rd);
    c->recv = sl_rd_extra(c->rd);
    return SL_OK;
}

/* Contiguous runs of chunks, balanced by bytes; the same on every rank. Chunk i goes to rank
 * (bytes of chunks before i) / per, so first[r] is the first chunk that rank r or a later one
 * reads. */
static void dist_coop_assign(dist_ctx *c)
{
    const int64_t n = sl_rd_chunk_count(c->rd);
    uint64_t total = 0, done = 0;
    for (int64_t i = 0; i < n; i++) {
        const sl_rd_chunk ch = sl_rd_chunk_at(c->rd, i);
        total += ch.b - ch.a;
    }
    const uint64_t per = total / (uint64_t)c->size + 1;
    int64_t i = 0;
    for (int r = 0; r < c->size; r++) {
        for (; i < n && done / per < (uint64_t)r; i++) {
            const sl_rd_chunk ch = sl_rd_chunk_at(c->rd, i);
            done += ch.b - ch.a;
        }
        c->first[r] = i;
    }
    c->first[c->size] = n;
}

/* Chunk rank r reads in round k, or -1. */
static int64_t dist_coop_chunk(const dist_ctx *c, int r, int64_t k)
{
    return c->first[r] + k < c->first[r + 1] ? c->first[r] + k : -1;
}

/* The datatype covering the segments of chunk ch that devices [d0, d1) read, with displacements
 * from the buffer that stands for ch's byte a; *count is 0 (and *t MPI_BYTE) when there are none. */
static sl_status dist_coop_type(dist_ctx *c, const sl_rd_chunk *ch, int32_t d0, int32_t d1,
                                MPI_Datatype *t, int *count, uint64_t *bytes)
{
    *t = MPI_BYTE;
    *count = 0;
    SL_TRY(sl_rd_segments(c->rd, ch, d0, d1, &c->segs));
    const int64_t n = c->segs.n;
    if (n == 0)
        return SL_OK;
    if (n > c->seg_cap) {
        int *bl = realloc(c->blen, (size_t)n * sizeof *bl);
        if (bl)
            c->blen = bl;
        MPI_Aint *bd = realloc(c->bdis, (size_t)n * sizeof *bd);
        if (bd)
            c->bdis = bd;
        if (!bl || !bd)
            return sl_err_set(&c->m->err, SL_E_NOMEM, "out of memory");
        c->seg_cap = n;
    }
    for (int64_t i = 0; i < n; i++) {   /* a chunk fits the slot, whose size fits an int */
        c->blen[i] = (int)c->segs.seg[i].len;
        c->bdis[i] = (MPI_Aint)c->segs.seg[i].off;
        *bytes += c->segs.seg[i].len;
    }
    MPI_Type_create_hindexed((int)n, c->blen, c->bdis, MPI_BYTE, t);
    MPI_Type_commit(t);
    *count = 1;
    return SL_OK;
}

static void dist_coop_free_types(dist_ctx *c)
{
    for (int i = 0; i < 2 * c->size; i++) {
        if (c->types[i] != MPI_BYTE)
            MPI_Type_free(&c->types[i]);
        c->types[i] = MPI_BYTE;
    }
}

/* Send and receive types of round k: to each other rank the segments of this rank's chunk its
 * devices read; from each, the segments of its chunk this rank's devices read, into slot q. */
static sl_status dist_coop_types(dist_ctx *c, int64_t k)
{
    int *sc = c->cnt, *sd = sc + c->size, *rc = sd + c->size, *rdp = rc + c->size;
    MPI_Datatype *st = c->types, *rt = st + c->size;
    const int64_t mine = dist_coop_chunk(c, c->rank, k);
    const sl_rd_chunk ch = mine >= 0 ? sl_rd_chunk_at(c->rd, mine) : (sl_rd_chunk){0};
    uint64_t sent = 0, received = 0;
    for (int q = 0, slot = 0; q < c->size; q++) {
        sc[q] = sd[q] = rc[q] = rdp[q] = 0;
        if (q == c->rank)
            continue;
        if (mine >= 0)
            SL_TRY(dist_coop_type(c, &ch, q * c->k, (q + 1) * c->k, &st[q], &sc[q], &sent));
        const int64_t theirs = dist_coop_chunk(c, q, k);
        if (theirs >= 0) {
            const sl_rd_chunk tc = sl_rd_chunk_at(c->rd, theirs);
            SL_TRY(dist_coop_type(c, &tc, c->me.first_device, c->me.first_device + c->k, &rt[q],
                                  &rc[q], &received));
            rdp[q] = (int)((uint64_t)slot * c->slot);
        }
        slot++;
    }
    c->me.bytes_sent += sent;
    c->me.bytes_received += received;
    return SL_OK;
}

/* Scatters what was received in round k: slot q stands for rank q's chunk, holding the bytes
 * this rank's devices read at their offsets. */
static sl_status dist_coop_place(dist_ctx *c, int64_t k)
{
    const int *rc = c->cnt + 2 * c->size, *rdp = rc + c->size;
    for (int q = 0; q < c->size; q++) {
        const int64_t theirs = dist_coop_chunk(c, q, k);
        if (q == c->rank || theirs < 0 || rc[q] == 0)
            continue;
        const sl_rd_chunk tc = sl_rd_chunk_at(c->rd, theirs);
        SL_TRY(sl_rd_scatter(c->rd, &tc, c->recv + rdp[q]));
    }
    return SL_OK;
}

static unsigned char dist_none; /* buffer argument for empty sends and receives */

/* One round: read (or not) and describe the exchange, agree, exchange, place. Returns the agreed
 * status (on failure every rank stops here); *pending carries a local placement failure into the
 * next agreement. */
static sl_status dist_coop_round(dist_ctx *c, int64_t k, sl_status *pending)
{
    const unsigned char *data = &dist_none;
    const int64_t mine = dist_coop_chunk(c, c->rank, k);
    const int64_t next = dist_coop_chunk(c, c->rank, k + 1);
    sl_status st = *pending;
    if (st == SL_OK && mine >= 0)
        st = sl_rd_read(c->rd, mine, &data);
    if (st == SL_OK && next >= 0)
        st = sl_rd_start(c->rd, next);   /* read on while this round exchanges and scatters */
    if (st == SL_OK)
        st = dist_coop_types(c, k);
    st = dist_agree_err(c, st);
    if (st != SL_OK) {
        dist_coop_free_types(c);
        return st;
    }
    int *sc = c->cnt, *sd = sc + c->size, *rc = sd + c->size, *rdp = rc + c->size;
    /* The receive slots may still be read by last round's device copies: wait before they are
     * refilled (seldom a wait: starting this round's read-ahead fenced them already). A failure
     * still takes part in the exchange, which the other ranks have entered, and is reported at
     * the next agreement. */
    const sl_status fenced = sl_rd_fence(c->rd);
    MPI_Alltoallw(data, sc, sd, c->types, c->recv ? c->recv : &dist_none, rc, rdp,
                  c->types + c->size, MPI_COMM_WORLD);
    dist_coop_free_types(c);
    if (fenced != SL_OK) {
        *pending = fenced;
        return SL_OK;
    }
    if (mine >= 0) {
        const sl_rd_chunk ch = sl_rd_chunk_at(c->rd, mine);
        st = sl_rd_scatter(c->rd, &ch, data);
    }
    *pending = st == SL_OK ? dist_coop_place(c, k) : st;
    return SL_OK;
}

/* --verify: each rank checked the blocks of the chunks it read; the job's figures are the sums
 * over ranks (each chunk is read by one rank), a file counted once. After an agreed success. */
static sl_status dist_coop_verified(dist_ctx *c)
{
    if (!sl_rd_verifies(c->rd))
        return SL_OK;
    const int64_t n = c->job->n_files;
    uint64_t *b = calloc((size_t)n + 1, sizeof *b);
    if (dist_all_ok(b != NULL) != SL_OK) {   /* every rank makes the same calls */
        free(b);
        return sl_err_set(&c->m->err, SL_E_NOMEM, "out of memory");
    }
    for (int64_t f = 0; f < n; f++)
        b[f] = sl_rd_verified_bytes(c->rd, (int32_t)f);
    MPI_Allreduce(MPI_IN_PLACE, b, (int)n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    c->m->stats.verified_bytes = 0;
    c->m->stats.verified_files = 0;
    for (int64_t f = 0; f < n; f++) {
        c->m->stats.verified_bytes += b[f];
        c->m->stats.verified_files += b[f] > 0;
    }
    free(b);
    return SL_OK;
}

static sl_status dist_cooperative(dist_ctx *c)
{
    SL_TRY(dist_agree_err(c, dist_coop_setup(c)));
    SL_TRY(dist_agree_err(c, dist_same_rounds(c)));
    dist_coop_assign(c);
    int64_t rounds = 0;
    for (int r = 0; r < c->size; r++)
        rounds = c->first[r + 1] - c->first[r] > rounds ? c->first[r + 1] - c->first[r] : rounds;
    sl_status pending = SL_OK;
    for (int64_t k = 0; k < rounds; k++)
        SL_TRY(dist_coop_round(c, k, &pending));
    if (pending == SL_OK)   /* the last chunks' hashes, and every block checked */
        pending = sl_rd_verify_finish(c->rd, &c->m->stats);
    SL_TRY(dist_agree_err(c, pending));
    return dist_coop_verified(c);
}

/* ---- frame ---------------------------------------------------------------------------------- */

static sl_status dist_run(dist_ctx *c, const sl_plan *p, const sl_dist_opts *d)
{
    c->me.first_device = c->rank * c->k;
    c->me.devices = c->k;
    c->m->ranks = calloc((size_t)c->size, sizeof *c->m->ranks);
    sl_status st = c->m->ranks ? dist_check(c, p) : sl_err_set(&c->m->err, SL_E_NOMEM, "out of memory");
    st = dist_same(c, p, d, st);
    if (st == SL_OK)
        st = c->job->open(c->job->open_user, c->m, p, c->me.first_device, c->k, &c->job->opts);
    SL_TRY(dist_agree_err(c, st));
    sl_prefault pf;
    sl_prefault_start(&pf, c->m);
    if (!dist_coop_path(c, d))
        st = dist_independent(c);
    else
        st = dist_cooperative(c);
    sl_prefault_stop(&pf);
    return st;
}

/* Every rank gets every rank's figures; the job's time is the slowest rank's. Only after an
 * agreed success, so every rank has m->ranks. */
static void dist_gather_stats(dist_ctx *c)
{
    sl_model *m = c->m;
    c->me.rank = c->rank;
    c->me.seconds = m->stats.seconds;
    c->me.bytes_read = m->stats.bytes_read;
    c->me.staging_peak = m->stats.staging_peak;
    c->me.read_requests = m->stats.read_requests;
    c->me.read_depth_peak = m->stats.read_depth_peak;
    c->me.setup_seconds = m->stats.setup_seconds;
    c->me.remote_retries = m->stats.remote_retries;
    c->me.remote_restarts = m->stats.remote_restarts;
    /* MPI_BYTE: every rank runs the same binary, so the struct layout is the same. */
    MPI_Allgather(&c->me, (int)sizeof c->me, MPI_BYTE, m->ranks, (int)sizeof c->me, MPI_BYTE,
                  MPI_COMM_WORLD);
    m->n_ranks = c->size;
    for (int r = 0; r < c->size; r++)
        m->stats.seconds = dist_max_d(m->stats.seconds, m->ranks[r].seconds);
}

static void dist_free(dist_ctx *c)
{
    free(c->all);
    free(c->local);
    free(c->first);
    free(c->cnt);
    free(c->types);
    free(c->segs.seg);
    free(c->blen);
    free(c->bdis);
}

static sl_status dist_open_backend(void *user, sl_model *m, const sl_plan *p, int32_t first,
                                   int32_t count, const sl_load_opts *o)
{
    (void)user;
    return sl_load_open_devices(m, p, first, count, o);
}

sl_status sl_load_dist(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                       const sl_dist_opts *d, sl_model **out)
{
    return sl_load_dist_devices(ck, p, o, d, dist_open_backend, NULL, out);
}

sl_status sl_load_dist_devices(const sl_checkpoint *ck, const sl_plan *p, const sl_load_opts *o,
                               const sl_dist_opts *d, sl_open_devices_fn open, void *user,
                               sl_model **out)
{
    sl_dist_opts d_def;
    sl_load_job job;
    if (!out)
        return SL_E_INVALID_ARG;
    sl_model *m = sl_model_new();
    *out = m;
    if (!m && dist_active()) { /* the other ranks wait in dist_same, then the first agreement */
        (void)dist_least(0, 0);
        return sl_dist_agree(SL_E_NOMEM, "out of memory", NULL, 0);
    }
    if (!m)
        return SL_E_NOMEM;
    sl_load_job_init(&job, o);
    o = &job.opts;
    if (!d)
        sl_dist_opts_init(&d_def), d = &d_def;
    if (!p || !open || !dist_active())
        return sl_err_set(&m->err, !dist_active() ? SL_E_UNSUPPORTED : SL_E_INVALID_ARG,
                          !dist_active() ? "MPI is not initialized (sl_dist_init)"
                                          : "no plan or no device opener");
    /* Every rank sees the same options, so all refuse together and none waits on the others. */
    if (o->devices)
        return sl_err_set(&m->err, SL_E_INVALID_ARG,
                          "devices: under MPI each rank holds its devices_per_rank devices; "
                          "choose them with sl_dist_opts, not sl_load_opts.devices");
    job.open = open;
    job.open_user = user;
    dist_ctx c = {.m = m, .job = &job, .k = d->devices_per_rank};
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.size);
    const double t0 = MPI_Wtime();
    sl_status st = sl_load_job_files(&job, o->dummy ? NULL : ck, &m->err);
    st = st == SL_OK ? dist_run(&c, p, d) : dist_agree_err(&c, dist_same(&c, p, d, st));
    m->stats.seconds = MPI_Wtime() - t0;
    if (ck)
        m->stats.checkpoint_bytes = sl_checkpoint_total_bytes(ck);
    if (c.rd) {
        sl_rd_close(c.rd, &m->stats);
        m->stats.staging_peak += c.slot * (uint64_t)(c.size - 1);
    }
    if (st == SL_OK)
        dist_gather_stats(&c);
    else
        sl_load_drop_devices(m);
    dist_free(&c);
    sl_load_job_free(&job);
    return st;
}
