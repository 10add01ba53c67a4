/* read_verify.c - expected digests, in-order hashing and the final comparison (read_verify.h). */
#include "load/read_verify.h"

#include "common/sl_file.h"
#include "common/sl_sha256.h"
#include "common/sl_text.h"
#include "io/http.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RD_MANIFEST_MAX ((size_t)64 << 20)

typedef struct rd_vfile {
    const char *path;
    uint64_t size;
    char want[SL_SHA256_HEX];
    const char *source;  /* where want comes from, for the message */
    sl_sha256 *h;
    uint64_t next;       /* bytes hashed so far: [0, next) */
} rd_vfile;

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
    char *manifest;      /* the manifest's path, for messages */
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

static const char *rd_base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

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

/* One manifest line: "<64 hex> <space or *><name>" (sha256sum's text and binary forms). Files
 * are matched by their last path component, as checkpoints are flat folders. */
static sl_status rd_manifest_line(rd_verify *v, const char *line, size_t len, int64_t lineno,
                                  sl_err *err)
{
    char nb[SL_TEXT_NAME];
    if (len == 0)
        return SL_OK;
    if (len < 2 * SL_SHA256_LEN + 2 || !sl_sha256_is_hex(line, 2 * SL_SHA256_LEN) ||
        line[2 * SL_SHA256_LEN] != ' ')
        return sl_err_set(err, SL_E_INVALID_ARG,
                          "%s: line %lld is not '<sha256>  <file>' (sha256sum's format)",
                          sl_text_name(v->manifest, nb, sizeof nb), (long long)lineno);
    const char *name = line + 2 * SL_SHA256_LEN + 1;
    size_t nlen = len - 2 * SL_SHA256_LEN - 1;
    if (nlen && (*name == ' ' || *name == '*'))
        name++, nlen--;
    for (size_t k = nlen; k > 0; k--)
        if (name[k - 1] == '/') {
            name += k, nlen -= k;
            break;
        }
    for (int64_t i = 0; i < v->n; i++) {
        rd_vfile *f = &v->v[i];
        const char *b = rd_base(f->path);
        if (strlen(b) != nlen || memcmp(b, name, nlen) != 0)
            continue;
        if (f->source && strncmp(f->want, line, 2 * SL_SHA256_LEN) != 0 &&
            !strcmp(f->source, "the manifest"))
            return sl_err_set(err, SL_E_INVALID_ARG, "%s: two different SHA-256 for %s",
                              sl_text_name(v->manifest, nb, sizeof nb), b);
        memcpy(f->want, line, 2 * SL_SHA256_LEN);
        f->want[2 * SL_SHA256_LEN] = '\0';
        f->source = "the manifest";
    }
    return SL_OK;
}

static sl_status rd_manifest_read(rd_verify *v, const char *path, sl_err *err)
{
    if (!(v->manifest = strdup(path)))
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    SL_TRY(sl_file_read_all(path, RD_MANIFEST_MAX, SL_E_INVALID_ARG, err, &text, &len));
    sl_status st = SL_OK;
    int64_t lineno = 0;
    for (size_t i = 0; i < len && st == SL_OK;) {
        const char *nl = memchr(text + i, '\n', len - i);
        const size_t end = nl ? (size_t)(nl - text) : len;
        size_t l = end - i;
        if (l && text[i + l - 1] == '\r')
            l--;
        st = rd_manifest_line(v, text + i, l, ++lineno, err);
        i = end + 1;
    }
    free(text);
    return st;
}

/* The store's own SHA-256 of remote files (S3's x-amz-checksum-sha256, one HEAD each, all at
 * once), after the manifest's: the digest of a file the manifest does not name, and a check of one
 * it does (they differ: the manifest or the object is not the one expected). */
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

sl_status rd_verify_new(const sl_load_file *files, int64_t n, const char *manifest, rd_verify **out,
                        sl_err *err)
{
    *out = NULL;
    if (!sl_sha256_available())
        return sl_err_set(err, SL_E_UNSUPPORTED,
                          "--verify: this build has no SHA-256 (rebuild with OpenSSL's libcrypto: "
                          "Debian libssl-dev)");
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
    sl_status st = manifest ? rd_manifest_read(v, manifest, err) : SL_OK;
    if (st == SL_OK)
        st = rd_store_digests(v, files, err);
    char nb[SL_TEXT_NAME];
    for (int64_t i = 0; i < n && st == SL_OK; i++) {
        rd_vfile *f = &v->v[i];
        if (!f->source && !rd_blob_digest(f))
            st = sl_err_set(err, SL_E_INVALID_ARG,
                            "%s: --verify knows no SHA-256 for it (not a Hugging Face cache blob%s)",
                            sl_text_name(f->path, nb, sizeof nb),
                            manifest ? ", not in the manifest" : "; give a manifest");
        else if (!(f->h = sl_sha256_new()))
            st = sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    if (st != SL_OK) {
        rd_verify_free(v);
        return st;
    }
    *out = v;
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
        if (!failed)   /* after a failure chunks only come back: the load fails anyway */
            rd_verify_chunk(v, j.f, j.a, j.b, j.data, &e);
        pthread_mutex_lock(&v->mu);
        if (e.st != SL_OK && v->herr.st == SL_OK)
            sl_err_copy(&v->herr, &e);
        sl_err_clear(&e);
        v->done[(v->dhead + v->dcount++) % v->cap] = j.tag;
        pthread_cond_signal(&v->done_cv);
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

/* Files are hashed in parallel, each front to back on one thread: as many threads as CPUs and
 * files allow (a file's hash cannot be split). */
static unsigned rd_verify_threads(const rd_verify *v)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = cpus > 0 ? (unsigned)cpus : 1;
    n = n < RD_VERIFY_THREADS ? n : RD_VERIFY_THREADS;
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
    rd_vworker *w = &v->w[(uint64_t)f % v->n_workers];
    pthread_mutex_lock(&v->mu);
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
    for (int64_t i = 0; i < v->n; i++) {
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
    for (int64_t i = 0; v->v && i < v->n; i++)
        sl_sha256_free(v->v[i].h);
    free(v->v);
    free(v->manifest);
    free(v);
}
