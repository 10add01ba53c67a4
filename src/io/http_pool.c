/* http_pool.c - transfers on one multi handle (see http_pool.h). */
#include "io/http_pool.h"

#include "common/sl_cancel.h"

#include <stdlib.h>

/* The longest wait of a step, whatever the stall timeout: a stop asked for with sl_cancel (from
 * another thread, or by a signal that did not land on this one) is seen this soon, even while
 * every transfer waits on a server that sends nothing or on its backoff. Ten idle wake-ups a
 * second cost nothing next to a transfer. */
enum { POOL_TICK_MAX_MS = 100 };

sl_status xf_pool_init(xf_pool *p, const sl_http_tune *t, unsigned n_easy, sl_err *err)
{
    /* curl calls the stall check (on_progress) when a step lets it run, not on a timer of its
     * own: with every connection idle (all stalled), a step that slept a second noticed a 1 s
     * stall a second late */
    const long quarter = (long)(t->timeout_ms / 4);
    *p = (xf_pool){.n_easy = n_easy ? n_easy : 1,
                   .tick_ms = quarter < 10 ? 10 : quarter > POOL_TICK_MAX_MS ? POOL_TICK_MAX_MS : quarter};
    p->multi = curl_multi_init();
    p->idle = calloc(2 * (size_t)p->n_easy, sizeof *p->idle);   /* the idle stack, then all */
    int ok = p->multi && p->idle;
    for (unsigned k = 0; ok && k < p->n_easy; k++) {
        ok = (p->idle[p->n_easy + k] = p->idle[k] = xf_easy_new(t)) != NULL;
        p->n_idle += ok;
    }
    if (!ok) {
        xf_pool_free(p);
        return sl_err_set(err, SL_E_NOMEM, "out of memory (starting libcurl)");
    }
    curl_multi_setopt(p->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)p->n_easy);
    curl_multi_setopt(p->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    return SL_OK;
}

void xf_pool_push(xf_pool *p, sl_http_xfer *x)
{
    x->q_next = NULL;
    if (p->tail)
        p->tail->q_next = x;
    else
        p->head = x;
    p->tail = x;
}

int xf_pool_busy(const xf_pool *p)
{
    return p->running > 0 || p->head != NULL;
}

/* The first waiting transfer whose backoff has passed (out of the queue), or NULL. */
static sl_http_xfer *take_due(xf_pool *p, uint64_t now)
{
    sl_http_xfer *prev = NULL;
    for (sl_http_xfer *x = p->head; x; prev = x, x = x->q_next) {
        if (x->not_before_ms <= now) {
            if (prev)
                prev->q_next = x->q_next;
            else
                p->head = x->q_next;
            if (p->tail == x)
                p->tail = prev;
            return x;
        }
    }
    return NULL;
}

/* Milliseconds until a waiting transfer can start (0: now), at most `cap`; the cap while no handle
 * is free (one ending wakes the poll). */
static long due_in(const xf_pool *p, uint64_t now, long cap)
{
    if (p->n_idle == 0)
        return cap;
    for (const sl_http_xfer *x = p->head; x && cap > 0; x = x->q_next) {
        const long w = x->not_before_ms <= now ? 0 : (long)(x->not_before_ms - now);
        cap = w < cap ? w : cap;
    }
    return cap;
}

static sl_status start_due(xf_pool *p, sl_err *err)
{
    const uint64_t now = xf_now_ms();
    while (p->n_idle > 0) {
        sl_http_xfer *x = take_due(p, now);
        if (!x)
            return SL_OK;
        CURL *h = p->idle[--p->n_idle];
        SL_TRY(xf_prepare(x, h, err));   /* x->h = h */
        x->peers = &p->peers;
        curl_easy_setopt(h, CURLOPT_PRIVATE, x);
        const CURLMcode mc = curl_multi_add_handle(p->multi, h);
        SL_CHECK(mc == CURLM_OK, err, SL_E_IO, "%s: curl: %s", x->obj->name, curl_multi_strerror(mc));
        p->running++;
    }
    return SL_OK;
}

/* A transfer of the pool, to name in a message: the first waiting one, else a running one (a
 * handle not on the idle stack runs the transfer its CURLOPT_PRIVATE names). */
static const sl_http_xfer *any_xfer(const xf_pool *p)
{
    if (p->head)
        return p->head;
    for (unsigned k = 0; k < p->n_easy; k++) {
        CURL *h = p->idle[p->n_easy + k];
        int idle = 0;
        for (unsigned i = 0; i < p->n_idle && !idle; i++)
            idle = p->idle[i] == h;
        sl_http_xfer *x = NULL;
        if (!idle && curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x) == CURLE_OK && x)
            return x;
    }
    return NULL;
}

/* SL_E_CANCELLED naming one of the pool's transfers; the caller drops them all. */
static sl_status pool_cancelled(const xf_pool *p, sl_err *err)
{
    const sl_http_xfer *x = any_xfer(p);
    return x ? xf_cancelled(x, err) : sl_err_set(err, SL_E_CANCELLED, "cancelled while reading");
}

/* Judges the transfers that ended; *completed counts those handed to done. */
static sl_status reap(xf_pool *p, void (*done)(void *, sl_http_xfer *), void *user, unsigned *completed,
                      sl_err *err)
{
    int left = 0;
    for (CURLMsg *m; (m = curl_multi_info_read(p->multi, &left)) != NULL;) {
        if (m->msg != CURLMSG_DONE)
            continue;
        sl_http_xfer *x = NULL;
        CURL *h = m->easy_handle;
        const CURLcode rc = m->data.result;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(p->multi, h);
        p->idle[p->n_idle++] = h;
        p->running--;
        const int r = xf_finish(x, rc, err);
        x->h = NULL;   /* not running: xf_pool_drop leaves it alone */
        if (r == XF_FAIL)
            return err->st;
        if (r == XF_RETRY) {
            *(x->lagging ? &p->restarts : &p->retries) += 1;
            xf_pool_push(p, x);
        } else {
            xf_peers_add(&p->peers, x, xf_now_ms());
            done(user, x);
            (*completed)++;
        }
    }
    return SL_OK;
}

sl_status xf_pool_step(xf_pool *p, void (*done)(void *user, sl_http_xfer *x), void *user, sl_err *err)
{
    unsigned completed = 0;
    if (sl_cancel_requested())
        return pool_cancelled(p, err);
    SL_TRY(start_due(p, err));
    int still = 0;
    const CURLMcode mc = curl_multi_perform(p->multi, &still);
    SL_CHECK(mc == CURLM_OK, err, SL_E_IO, "curl: %s", curl_multi_strerror(mc));
    SL_TRY(reap(p, done, user, &completed, err));
    /* after reap: a retry it queued is due after its backoff, not after a whole tick */
    const long wait_ms = due_in(p, xf_now_ms(), p->tick_ms);
    if (completed > 0 || wait_ms == 0)
        return SL_OK;   /* something to hand over, or to start, now */
    if (xf_pool_busy(p))
        curl_multi_poll(p->multi, NULL, 0, (int)wait_ms, NULL);
    return SL_OK;
}

void xf_pool_drop(xf_pool *p, sl_http_xfer *x)
{
    if (!x->h || !p->multi)
        return;
    curl_multi_remove_handle(p->multi, x->h);
    curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, NULL);   /* in x, which may go first */
    p->idle[p->n_idle++] = x->h;
    p->running--;
    x->h = NULL;
}

void xf_pool_free(xf_pool *p)
{
    for (unsigned k = 0; p->idle && k < p->n_easy; k++)
        if (p->idle[p->n_easy + k])
            curl_easy_cleanup(p->idle[p->n_easy + k]);
    if (p->multi)
        curl_multi_cleanup(p->multi);
    free(p->idle);
    *p = (xf_pool){0};
}
