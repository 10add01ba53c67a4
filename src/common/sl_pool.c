/* sl_pool.c - see sl_pool.h. Helpers sleep on a condition variable between jobs; a job is a
 * generation number, so a helper that wakes late still runs each job exactly once. */
#include "common/sl_pool.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct sl_helper {
    sl_pool *pool;
    unsigned part;
    pthread_t th;
} sl_helper;

struct sl_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    sl_pool_fn fn;
    void *ctx;
    unsigned long gen;   /* job number; helpers run each one once */
    unsigned pending;    /* helpers still on the current job */
    unsigned n;          /* helpers started */
    int stop;
    sl_helper *helpers;
};

static void *helper_main(void *arg)
{
    sl_helper *h = arg;
    sl_pool *p = h->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        const sl_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        const unsigned parts = p->n + 1;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, h->part, parts);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

sl_pool *sl_pool_new(unsigned helpers)
{
    if (helpers == 0)
        return NULL;
    sl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->helpers = calloc(helpers, sizeof *p->helpers);
    if (!p->helpers || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->helpers);
        free(p);
        return NULL;
    }
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (; p->n < helpers; p->n++) {
        p->helpers[p->n] = (sl_helper){.pool = p, .part = p->n + 1};
        if (pthread_create(&p->helpers[p->n].th, NULL, helper_main, &p->helpers[p->n]) != 0)
            break;
    }
    if (p->n == 0) {
        sl_pool_free(p);
        return NULL;
    }
    return p;
}

unsigned sl_pool_parts(const sl_pool *p)
{
    return p ? p->n + 1 : 1;
}

void sl_pool_run(sl_pool *p, sl_pool_fn fn, void *ctx)
{
    if (!p) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n + 1);
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void sl_pool_free(sl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n; i++)
        pthread_join(p->helpers[i].th, NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->helpers);
    free(p);
}
