/* read_verify.c - what each file must be (the manifest's blocks, read by read_manifest.c, or a
 * SHA-256 from the manifest, the Hugging Face cache or the store), the hashing threads and the
 * final comparison (read_verify.h). */
#include "load/read_verify.h"
#include "load/read_manifest.h"

#include "common/sl_sha256.h"
#include "common/sl_text.h"
#include "io/http.h"

#include <xxhash.h>
/* Debian's x86 libxxhash chooses SSE2, AVX2 or AVX-512 at run time in XXH3_64bits_dispatch: the
 * same hash, about twice as fast here (21-23 GB/s of CPU time against 7-13 for XXH3_64bits). */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define RD_XXH3 XXH3_64bits_dispatch
#endif
#endif
#ifndef RD_XXH3
#define RD_XXH3 XXH3_64bits
#endif

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct rd_vjob {
    int64_t f;
    uint64_t a, b;
    const unsigned char *data;
    void *tag;
} rd_vjob;

#define RD_VERIFY_THREADS 4u

/* One hashing thread and its queue; a file's chunks all go to worker f % n_workers, in order. */
typedef struct rd_vworker {
    struct rd_verify *v;
    pthread_t thread;
    pthread_cond_t work;
    rd_vjob *q;          /* cap entries, a ring: head, count */
    unsigned head, count;
    int started;
} rd_vworker;

struct rd_verify {
    rd_vfile *v;
    int64_t n;
    int by_blocks;
    unsigned rr;         /* by blocks: the worker the next chunk goes to */
    /* the hashing threads: jobs queued per thread in order, tags of hashed ones back */
    rd_vworker w[RD_VERIFY_THREADS];
    unsigned n_workers;
    int stop, locks;
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    void **done;         /* cap entries, a ring: dhead, dcount */
    unsigned cap, dhead, dcount, out;   /* out: queued or being hashed */
    sl_err herr;         /* the threads' first failure */
};

/* A Hugging Face cache snapshot links each file to blobs/<sha256>. */
static int rd_blob_digest(rd_vfile *f)
{
    char real[PATH_MAX];
    if (!realpath(f->path, real))
        return 0;
    const char *b = rd_base(real);
    if (!sl_sha256_is_hex(b, strlen(b)))
        return 0;
    memcpy(f->want, b, SL_SHA256_HEX);
    f->source = "its Hugging Face cache blob name";
    return 1;
}

/* The SHA-256 file f must have: the manifest's (read before), else its Hugging Face cache blob
 * name. 0 when none is known. */
static int rd_want_sha256(rd_vfile *f)
{
    if (f->source)
        return 1;
    return rd_blob_digest(f);
}

/* Blocks for every file: verify by blocks; for some only: refused (a load would otherwise read
 * some files whole and some in part, for no reason a user would want). */
static sl_status rd_choose_blocks(rd_verify *v, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    int64_t with = 0;
    for (int64_t i = 0; i < v->n; i++)
        with += v->v[i].blocks != NULL;
    v->by_blocks = v->n > 0 && with == v->n;
    for (int64_t i = 0; with > 0 && !v->by_blocks && i < v->n; i++)
        if (!v->v[i].blocks)
            return sl_err_set(err, SL_E_INVALID_ARG,
                              "%s: the manifest has XXH3 blocks for other files of the checkpoint "
                              "but not for this one (write it again: --write-manifest)",
                              sl_text_name(v->v[i].path, nb, sizeof nb));
    return SL_OK;
}

static sl_status rd_want_all_sha256(rd_verify *v, const char *manifest, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    if (!sl_sha256_available())
        return sl_err_set(err, SL_E_UNSUPPORTED,
                          "--verify: this build has no SHA-256 (rebuild with OpenSSL's libcrypto: "
                          "Debian libssl-dev), and %s",
                          manifest ? "the manifest has no XXH3 blocks" : "no manifest was given");
    for (int64_t i = 0; i < v->n; i++) {
        rd_vfile *f = &v->v[i];
        if (!rd_want_sha256(f))
            return sl_err_set(err, SL_E_INVALID_ARG,
                              "%s: --verify knows no SHA-256 for it (not a Hugging Face cache "
                              "blob%s)", sl_text_name(f->path, nb, sizeof nb),
                              manifest ? ", not in the manifest" : "; give a manifest");
        if (!(f->h = sl_sha256_new()))
            return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    return SL_OK;
}

/* The store's own SHA-256 of remote files (S3's x-amz-checksum-sha256, one HEAD each, all at
 * once), after the manifest's: the digest of a file the manifest does not name, and a check of one
 * it does (they differ: the manifest or the object is not the one expected). Asked by blocks too:
 * there it is that whole-object check, which the blocks a load reads cannot make. */
static sl_status rd_store_digests(rd_verify *v, const sl_load_file *files, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    const sl_http_obj **objs = calloc((size_t)v->n + 1, sizeof *objs);
    char(*hex)[SL_SHA256_HEX] = calloc((size_t)v->n + 1, sizeof *hex);
    sl_status st = objs && hex ? SL_OK : sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; st == SL_OK && i < v->n; i++)
        objs[i] = files[i].remote;
    if (st == SL_OK)
        st = sl_http_stored_sha256(objs, (size_t)v->n, hex, err);
    for (int64_t i = 0; st == SL_OK && i < v->n; i++) {
        rd_vfile *f = &v->v[i];
        if (hex[i][0] && f->source && strcmp(f->want, hex[i]) != 0)
            st = sl_err_set(err, SL_E_INTEGRITY,
                            "%s: SHA-256 %.16s... in %s, %.16s... in the store (x-amz-checksum-sha256): "
                            "the manifest or the object is not the one expected",
                            sl_text_name(f->path, nb, sizeof nb), f->want, f->source, hex[i]);
        else if (hex[i][0] && !f->source) {
            memcpy(f->want, hex[i], SL_SHA256_HEX);
            f->source = "the store's x-amz-checksum-sha256";
        }
    }
    free(objs);
    free(hex);
    return st;
}

sl_status rd_verify_new(const sl_load_file *files, int64_t n, const sl_load_manifest *man,
                        rd_verify **out, sl_err *err)
{
    const char *manifest = man ? man->path : NULL;
    *out = NULL;
    rd_verify *v = calloc(1, sizeof *v);
    if (v)
        v->v = calloc((size_t)n + 1, sizeof *v->v);
    if (!v || !v->v) {
        rd_verify_free(v);
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    v->n = n;
    for (int64_t i = 0; i < n; i++) {
        v->v[i].path = files[i].path;
        v->v[i].size = files[i].size;
    }
    sl_status st = manifest ? rd_manifest_parse(v->v, n, manifest, man->text, man->len, err) : SL_OK;
    if (st == SL_OK)
        st = rd_store_digests(v, files, err);
    if (st == SL_OK)
        st = rd_choose_blocks(v, err);
    if (st == SL_OK && !v->by_blocks)
        st = rd_want_all_sha256(v, manifest, err);
    if (st != SL_OK) {
        rd_verify_free(v);
        return st;
    }
    *out = v;
    return SL_OK;
}

uint64_t rd_block_hash(const void *data, size_t n)
{
    return RD_XXH3(data, n);
}

int rd_verify_by_blocks(const rd_verify *v)
{
    return v->by_blocks;
}

uint64_t rd_verify_block_bytes(const rd_verify *v, int64_t f)
{
    return v->v[f].block;
}

uint64_t rd_verify_header_end(const rd_verify *v, int64_t f)
{
    return v->v[f].header_end;
}

uint64_t rd_verify_file_bytes(const rd_verify *v, int64_t f)
{
    return v->v[f].checked;
}

/* By blocks: [a, b) is whole blocks of f (the planner cuts chunks at block boundaries). */
static sl_status rd_verify_blocks(rd_verify *v, int64_t f, uint64_t a, uint64_t b,
                                  const unsigned char *data, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    const rd_vfile *vf = &v->v[f];
    const uint64_t bs = vf->block;
    if (b <= a || b > vf->size || a % bs || (b % bs && b != vf->size))
        return sl_err_set(err, SL_E_IO, "%s: --verify: bytes [%llu, %llu) are not whole blocks",
                          vf->path, (unsigned long long)a, (unsigned long long)b);
    for (uint64_t off = a; off < b; off += bs) {
        const uint64_t len = b - off < bs ? b - off : bs, k = off / bs;
        const uint64_t got = rd_block_hash(data + (off - a), (size_t)len);
        if (got != vf->blocks[k])
            return sl_err_set(err, SL_E_INTEGRITY,
                              "%s: bytes [%llu, %llu) (block %llu) have XXH3 %016llx, the "
                              "manifest %016llx: the file is corrupt or not the one expected",
                              sl_text_name(vf->path, nb, sizeof nb), (unsigned long long)off,
                              (unsigned long long)(off + len), (unsigned long long)k,
                              (unsigned long long)got, (unsigned long long)vf->blocks[k]);
    }
    return SL_OK;
}

static sl_status rd_verify_chunk(rd_verify *v, int64_t f, uint64_t a, uint64_t b,
                                 const unsigned char *data, sl_err *err)
{
    rd_vfile *vf = &v->v[f];
    if (a != vf->next || b < a)
        return sl_err_set(err, SL_E_IO, "%s: --verify: bytes [%llu, %llu) out of order (at %llu)",
                          vf->path, (unsigned long long)a, (unsigned long long)b,
                          (unsigned long long)vf->next);
    if (sl_sha256_update(vf->h, data, (size_t)(b - a)) != 0)
        return sl_err_set(err, SL_E_IO, "%s: --verify: SHA-256 failed", vf->path);
    vf->next = b;
    return SL_OK;
}

/* ---- the hashing thread --------------------------------------------------------------------- */

static void *rd_verify_main(void *arg)
{
    rd_vworker *w = arg;
    rd_verify *v = w->v;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        while (!w->count && !v->stop)
            pthread_cond_wait(&w->work, &v->mu);
        if (!w->count)
            break;
        const rd_vjob j = w->q[w->head];
        w->head = (w->head + 1) % v->cap;
        w->count--;
        const int failed = v->herr.st != SL_OK;
        pthread_mutex_unlock(&v->mu);
        sl_err e = {0};
        if (!failed && v->by_blocks)   /* after a failure chunks only come back: the load fails */
            rd_verify_blocks(v, j.f, j.a, j.b, j.data, &e);
        else if (!failed)
            rd_verify_chunk(v, j.f, j.a, j.b, j.data, &e);
        pthread_mutex_lock(&v->mu);
        if (e.st != SL_OK && v->herr.st == SL_OK)
            sl_err_copy(&v->herr, &e);
        if (!failed && e.st == SL_OK)
            v->v[j.f].checked += j.b - j.a;
        sl_err_clear(&e);
        v->done[(v->dhead + v->dcount++) % v->cap] = j.tag;
        pthread_cond_signal(&v->done_cv);
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

/* Whole files are hashed in parallel, each front to back on one thread: as many threads as CPUs
 * and files allow (a file's SHA-256 cannot be split). Blocks: any chunk on any thread. */
static unsigned rd_verify_threads(const rd_verify *v)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = cpus > 0 ? (unsigned)cpus : 1;
    n = n < RD_VERIFY_THREADS ? n : RD_VERIFY_THREADS;
    if (v->by_blocks)
        return n;
    return (int64_t)n < v->n ? n : (unsigned)(v->n > 0 ? v->n : 1);
}

sl_status rd_verify_start(rd_verify *v, unsigned depth, sl_err *err)
{
    v->cap = depth ? depth : 1;
    v->done = calloc(v->cap, sizeof *v->done);
    if (!v->done)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    if (pthread_mutex_init(&v->mu, NULL) != 0)
        return sl_err_set(err, SL_E_NOMEM, "--verify: cannot create a mutex");
    if (pthread_cond_init(&v->done_cv, NULL) != 0) {
        pthread_mutex_destroy(&v->mu);
        return sl_err_set(err, SL_E_NOMEM, "--verify: cannot create a condition variable");
    }
    v->locks = 1;
    const unsigned want = rd_verify_threads(v);
    for (unsigned i = 0; i < want; i++) {
        rd_vworker *w = &v->w[i];
        w->v = v;
        if (!(w->q = calloc(v->cap, sizeof *w->q)))
            return sl_err_set(err, SL_E_NOMEM, "out of memory");
        if (pthread_cond_init(&w->work, NULL) != 0)
            return sl_err_set(err, SL_E_NOMEM, "--verify: cannot create a condition variable");
        if (pthread_create(&w->thread, NULL, rd_verify_main, w) != 0) {
            pthread_cond_destroy(&w->work);
            return sl_err_set(err, SL_E_NOMEM, "--verify: cannot start a hashing thread");
        }
        w->started = 1;
        v->n_workers++;
    }
    return SL_OK;
}

void rd_verify_push(rd_verify *v, int64_t f, uint64_t a, uint64_t b, const unsigned char *data,
                    void *tag)
{
    pthread_mutex_lock(&v->mu);
    /* a file's SHA-256 on one thread, in order; blocks wherever */
    rd_vworker *w = &v->w[v->by_blocks ? v->rr++ % v->n_workers : (unsigned)((uint64_t)f % v->n_workers)];
    w->q[(w->head + w->count++) % v->cap] = (rd_vjob){.f = f, .a = a, .b = b, .data = data, .tag = tag};
    v->out++;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&v->mu);
}

void *rd_verify_done(rd_verify *v, int block)
{
    void *tag = NULL;
    pthread_mutex_lock(&v->mu);
    while (block && !v->dcount && v->out)
        pthread_cond_wait(&v->done_cv, &v->mu);
    if (v->dcount) {
        tag = v->done[v->dhead];
        v->dhead = (v->dhead + 1) % v->cap;
        v->dcount--;
        v->out--;
    }
    pthread_mutex_unlock(&v->mu);
    return tag;
}

static void rd_verify_stop(rd_verify *v)
{
    if (!v->locks)
        return;
    pthread_mutex_lock(&v->mu);
    v->stop = 1;
    for (unsigned i = 0; i < v->n_workers; i++)
        pthread_cond_signal(&v->w[i].work);
    pthread_mutex_unlock(&v->mu);
    for (unsigned i = 0; i < RD_VERIFY_THREADS; i++) {
        rd_vworker *w = &v->w[i];
        if (w->started) {
            pthread_join(w->thread, NULL);
            pthread_cond_destroy(&w->work);
            w->started = 0;
        }
        free(w->q);
        w->q = NULL;
    }
    v->n_workers = 0;
    pthread_cond_destroy(&v->done_cv);
    pthread_mutex_destroy(&v->mu);
    v->locks = 0;
}

/* ---- the result ----------------------------------------------------------------------------- */

sl_status rd_verify_finish(rd_verify *v, uint64_t *bytes, int64_t *files, sl_err *err)
{
    char nb[SL_TEXT_NAME], got[SL_SHA256_HEX];
    *bytes = 0;
    *files = 0;
    rd_verify_stop(v);   /* every chunk came back: the thread is idle */
    if (v->herr.st != SL_OK)
        return sl_err_copy(err, &v->herr);
    for (int64_t i = 0; v->by_blocks && i < v->n; i++) {
        *bytes += v->v[i].checked;
        *files += v->v[i].checked > 0;
    }
    for (int64_t i = 0; !v->by_blocks && i < v->n; i++) {
        rd_vfile *f = &v->v[i];
        if (f->next != f->size)
            return sl_err_set(err, SL_E_IO, "%s: --verify: %llu of %llu bytes hashed",
                              sl_text_name(f->path, nb, sizeof nb), (unsigned long long)f->next,
                              (unsigned long long)f->size);
        if (sl_sha256_final_hex(f->h, got) != 0)
            return sl_err_set(err, SL_E_IO, "%s: --verify: SHA-256 failed", f->path);
        if (strcmp(got, f->want) != 0)
            return sl_err_set(err, SL_E_INTEGRITY,
                              "%s: SHA-256 %.16s... differs from %.16s... (%s): the file is corrupt "
                              "or not the one expected",
                              sl_text_name(f->path, nb, sizeof nb), got, f->want, f->source);
        *bytes += f->size;
        (*files)++;
    }
    return SL_OK;
}

void rd_verify_free(rd_verify *v)
{
    if (!v)
        return;
    rd_verify_stop(v);
    free(v->done);
    sl_err_clear(&v->herr);
    for (int64_t i = 0; v->v && i < v->n; i++) {
        sl_sha256_free(v->v[i].h);
        free(v->v[i].blocks);
    }
    free(v->v);
    free(v);
}
