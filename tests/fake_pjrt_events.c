/* fake_pjrt_events.c - the host-memory PJRT plugin's delayed copies (fake_pjrt.c says why): a
 * worker thread runs each queued host-to-device copy or read-back FAKE_PJRT_DELAY_US after its
 * call, reading the host memory then and checking that it did not change since, and fires its
 * event; and the Event_* entry points that wait on them. */
#define _POSIX_C_SOURCE 200809L
#include "fake_pjrt.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the worker: delayed copies ---------------------------------------------------------------- */

static uint64_t fp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t fp_hash(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The job's host source, in the buffer's element order, hashed (copied into dst when not NULL). */
uint64_t fp_gather(const fp_job *j, unsigned char *dst)
{
    const PJRT_Buffer *b = j->buf;
    if (!j->strided) {
        if (dst)
            memcpy(dst, j->src, j->n);
        return fp_hash(1469598103934665603ull, j->src, j->n);
    }
    size_t count = 1;
    for (size_t k = 0; k < b->ndim; k++)
        count *= (size_t)b->dims[k];
    const size_t elem = count ? b->bytes / count : 0;
    uint64_t h = 1469598103934665603ull;
    int64_t idx[PJ_MAX_DIMS_FAKE] = {0};
    for (size_t e = 0; e < count; e++) {
        int64_t off = 0;
        for (size_t k = 0; k < b->ndim; k++)
            off += idx[k] * j->strides[k];
        h = fp_hash(h, j->src + off, elem);
        if (dst)
            memcpy(dst + e * elem, j->src + off, elem);
        for (size_t k = b->ndim; k-- > 0;) {
            if (++idx[k] < b->dims[k])
                break;
            idx[k] = 0;
        }
    }
    return h;
}

static void fp_run(fp_job *j)
{
    if (j->dst) {
        memcpy(j->dst, j->buf->data + j->off, j->n);
        for (size_t i = 0; j->scramble && i < j->n; i++)
            j->dst[i] ^= 0x5a;
        g.tohost++;
    } else {
        if (fp_gather(j, NULL) != j->hash)
            fp_violation("%s", "a host buffer changed before its done event fired");
        if (j->strided)
            (void)fp_gather(j, j->buf->data);
        else
            memcpy(j->buf->data + j->off, j->src, j->n);
    }
    j->ev->ready = 1;
    j->buf->jobs--;
    if (j->buf->h.magic == FP_DEAD && j->buf->jobs == 0) {
        free(j->buf->data);
        j->buf->data = NULL;
    }
    if (j->tm)
        j->tm->jobs--;
}

static void *fp_worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    for (;;) {
        while (!g.head)
            pthread_cond_wait(&g.cv, &g.mu);
        fp_job *j = g.head;
        const uint64_t now = fp_now_ns();
        if (now < j->due_ns) {
            const uint64_t wait = j->due_ns - now;
            pthread_mutex_unlock(&g.mu);
            nanosleep(&(struct timespec){.tv_sec = (time_t)(wait / 1000000000u),
                                         .tv_nsec = (long)(wait % 1000000000u)}, NULL);
            pthread_mutex_lock(&g.mu);
            continue;
        }
        g.head = j->next;
        if (!g.head)
            g.tail = NULL;
        fp_run(j);
        free(j);
        pthread_cond_broadcast(&g.cv);
    }
    return NULL;
}

/* Queues j (g.mu held) and returns its event. */
PJRT_Event *fp_queue(fp_job *j)
{
    if (!g.started) {
        g.started = 1;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&g.th, &at, fp_worker, NULL) != 0)
            abort();
        pthread_attr_destroy(&at);
    }
    j->ev = fp_new(sizeof *j->ev, FP_EVENT);
    j->due_ns = fp_now_ns() + (uint64_t)g.delay_us * 1000u;
    j->buf->jobs++;
    if (j->tm)
        j->tm->jobs++;
    if (g.tail)
        g.tail->next = j;
    else
        g.head = j;
    g.tail = j;
    pthread_cond_broadcast(&g.cv);
    return j->ev;
}

PJRT_Event *fp_ready_event(void)
{
    PJRT_Event *ev = fp_new(sizeof *ev, FP_EVENT);
    ev->ready = 1;
    return ev;
}

fp_job *fp_job_new(void)
{
    fp_job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    return j;
}

/* ---- events ----------------------------------------------------------------------------------- */

PJRT_Error *fp_Event_Destroy(PJRT_Event_Destroy_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->event, FP_EVENT))
        fp_violation("%s", "Event_Destroy of a dead or unknown event");
    else
        fp_kill(a->event);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

PJRT_Error *fp_Event_IsReady(PJRT_Event_IsReady_Args *a)
{
    pthread_mutex_lock(&g.mu);
    FP_ENTER("Event_IsReady", PJRT_Event_IsReady_Args, is_ready);
    if (!fp_live(a->event, FP_EVENT))
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "IsReady of a dead event");
    a->is_ready = a->event->ready;
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* An injected failure comes after the wait: a failed event is one that has completed (with an
 * error), so its host memory is free then, as with a real plugin. */
PJRT_Error *fp_Event_Await(PJRT_Event_Await_Args *a)
{
    pthread_mutex_lock(&g.mu);
    if (!fp_live(a->event, FP_EVENT)) {
        fp_violation("%s", "Event_Await of a dead or unknown event");
        FP_FAIL(PJRT_Error_Code_INVALID_ARGUMENT, "fake_pjrt: %s", "Await of a dead event");
    }
    while (!a->event->ready)
        pthread_cond_wait(&g.cv, &g.mu);
    FP_ENTER("Event_Await", PJRT_Event_Await_Args, event);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}
