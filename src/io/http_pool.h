/* http_pool.h - ranged GETs (http_xfer.h) run together on one curl multi handle and a fixed set of
 * easy handles (http_pool.c), for the open's many small GETs (http_many.c) and the read engine
 * (io_http.c). A transfer waits in the queue until its backoff has passed and a handle is free; one
 * that ends in a retryable way goes back with its received bytes kept (so does a laggard, far slower
 * than the ranges the pool finished lately: http_xfer.c); the first to fail for good ends the step
 * with its message. No thread: transfers advance only inside xf_pool_step. */
#ifndef SL_IO_HTTP_POOL_H
#define SL_IO_HTTP_POOL_H

#include "io/http_xfer.h"

typedef struct xf_pool {
    CURLM *multi;
    CURL **idle;                 /* n_idle handles that run nothing, then all n_easy of them */
    unsigned n_idle, n_easy, running;
    long tick_ms;                /* the longest wait in a step: stalls and a stop (sl_cancel) are
                                    judged after it */
    sl_http_xfer *head, *tail;   /* waiting to start (linked by q_next) */
    xf_peers peers;              /* how fast its ranges finished: the laggard check's yardstick */
    uint64_t retries, restarts;  /* attempts asked for again: after a failure, and laggards */
} xf_pool;

/* n_easy handles (at least 1) with t's options; SL_E_NOMEM, the pool then freed. */
sl_status xf_pool_init(xf_pool *p, const sl_http_tune *t, unsigned n_easy, sl_err *err);
/* x (xf_init'ed) to the queue's end. */
void xf_pool_push(xf_pool *p, sl_http_xfer *x);
/* Whether a transfer runs or waits. */
int xf_pool_busy(const xf_pool *p);
/* SL_E_CANCELLED at once once sl_cancel was called (naming a waiting or running transfer; the
 * caller drops them). Else starts the transfers that are due while handles are free, lets curl move
 * the running ones and judges those that ended: done(user, x) for each that completed, the queue
 * again for a retry, the error of the first that failed for good. Then, unless one completed or a
 * waiting one can start at once, waits for the sockets, the next backoff (a retry queued in this
 * step included) or a tick: 100 ms, or a quarter of the stall timeout where that is shorter. */
sl_status xf_pool_step(xf_pool *p, void (*done)(void *user, sl_http_xfer *x), void *user, sl_err *err);
/* x out of the multi handle if it runs (before the buffer it writes into goes). */
void xf_pool_drop(xf_pool *p, sl_http_xfer *x);
/* Every handle cleaned up; the caller drops the transfers still running first (xf_pool_drop),
 * since their handles go here. */
void xf_pool_free(xf_pool *p);

#endif /* SL_IO_HTTP_POOL_H */
