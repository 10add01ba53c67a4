/* io_pread.c - the portable read engine: a pool of threads, each taking one request at a time from
 * a queue and pread()ing it to the end. Completed requests go to a second queue that wait() pops.
 * Both queues hold at most `depth` entries because the executor never has more in flight. */
#include "io/io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PREAD_MAX_THREADS 16

typedef struct pread_q {
    sl_io_req **items;
    unsigned head, count, cap;
} pread_q;

typedef struct pread_ctx {
    pthread_mutex_t mu;
    pthread_cond_t todo_cv, done_cv;
    pread_q todo, done;
    unsigned in_flight;
    int stopping;
    pthread_t threads[PREAD_MAX_THREADS];
    unsigned n_threads;
} pread_ctx;

static void q_push(pread_q *q, sl_io_req *r)
{
    q->items[(q->head + q->count) % q->cap] = r;
    q->count++;
}

static sl_io_req *q_pop(pread_q *q)
{
    sl_io_req *r = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    return r;
}

/* Reads until len bytes, end of file or a real error. */
static void pread_full(sl_io_req *r)
{
    while (r->done < r->len) {
        ssize_t n = pread(r->fd, (char *)r->buf + r->done, r->len - r->done,
                          (off_t)(r->off + r->done));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            r->result = -errno;
            return;
        }
        if (n == 0)
            break;
        r->done += (size_t)n;
    }
    r->result = (int64_t)r->done;
}

static void *pread_worker(void *arg)
{
    pread_ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->todo.count && !c->stopping)
            pthread_cond_wait(&c->todo_cv, &c->mu);
        if (!c->todo.count)
            break;
        sl_io_req *r = q_pop(&c->todo);
        pthread_mutex_unlock(&c->mu);
        pread_full(r);
        pthread_mutex_lock(&c->mu);
        q_push(&c->done, r);
        pthread_cond_signal(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static sl_status pread_submit(void *ctx, sl_io_req *r, sl_err *err)
{
    pread_ctx *c = ctx;
    r->done = 0;
    r->result = 0;
    pthread_mutex_lock(&c->mu);
    if (c->in_flight >= c->todo.cap) {
        pthread_mutex_unlock(&c->mu);
        return sl_err_set(err, SL_E_INVALID_ARG, "pread engine: more than %u requests in flight",
                          c->todo.cap);
    }
    c->in_flight++;
    q_push(&c->todo, r);
    pthread_cond_signal(&c->todo_cv);
    pthread_mutex_unlock(&c->mu);
    return SL_OK;
}

static sl_status pread_wait(void *ctx, sl_io_req **out, sl_err *err)
{
    pread_ctx *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (!c->in_flight) {
        pthread_mutex_unlock(&c->mu);
        return sl_err_set(err, SL_E_INVALID_ARG, "pread engine: wait with nothing in flight");
    }
    while (!c->done.count)
        pthread_cond_wait(&c->done_cv, &c->mu);
    *out = q_pop(&c->done);
    c->in_flight--;
    pthread_mutex_unlock(&c->mu);
    return SL_OK;
}

/* Workers finish the requests they hold, so the caller's buffers are no longer written to when
 * close() returns. */
static void pread_close(void *ctx)
{
    pread_ctx *c = ctx;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_cond_broadcast(&c->todo_cv);
    pthread_mutex_unlock(&c->mu);
    for (unsigned i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->todo_cv);
    pthread_cond_destroy(&c->done_cv);
    free(c->todo.items);
    free(c->done.items);
    free(c);
}

static const sl_io_ops pread_ops = {
    .name = "pread",
    .submit = pread_submit,
    .wait = pread_wait,
    .close = pread_close,
};

static sl_status pread_start_threads(pread_ctx *c, unsigned n, sl_err *err)
{
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&c->threads[i], NULL, pread_worker, c);
        if (rc != 0)
            return sl_err_set(err, SL_E_NOMEM, "pread engine: cannot start thread: %s", strerror(rc));
        c->n_threads++;
    }
    return SL_OK;
}

sl_status sl_io_pread_open(unsigned depth, unsigned threads, sl_io *out, sl_err *err)
{
    if (depth == 0)
        depth = 1;
    pread_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->todo_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    c->todo.cap = c->done.cap = depth;
    c->todo.items = calloc(depth, sizeof *c->todo.items);
    c->done.items = calloc(depth, sizeof *c->done.items);
    sl_status st = SL_OK;
    if (!c->todo.items || !c->done.items)
        st = sl_err_set(err, SL_E_NOMEM, "out of memory");
    if (st == SL_OK) {
        unsigned n = threads && threads < depth ? threads : depth;
        st = pread_start_threads(c, n < PREAD_MAX_THREADS ? n : PREAD_MAX_THREADS, err);
    }
    if (st != SL_OK) {
        pread_close(c);
        return st;
    }
    out->ops = &pread_ops;
    out->ctx = c;
    return SL_OK;
}
