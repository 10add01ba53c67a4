/* sl_pool.h - a small fork-join pool: sl_pool_run hands one job to every helper thread and runs a
 * part of it on the calling thread, returning when all parts are done. For CPU work the loading
 * thread would otherwise do alone (dtype conversion), in pieces large enough that a wake-up
 * (a few microseconds) is small beside them. */
#ifndef SL_POOL_H
#define SL_POOL_H

/* part in [0, parts): which share of the job to do; part 0 runs on the calling thread. */
typedef void (*sl_pool_fn)(void *ctx, unsigned part, unsigned parts);

typedef struct sl_pool sl_pool;

/* A pool of `helpers` threads (the caller makes parts = helpers + 1). NULL when helpers is 0 or a
 * thread cannot be started; sl_pool_run(NULL, ...) then runs the whole job on the caller. */
sl_pool *sl_pool_new(unsigned helpers);
/* Runs fn(ctx, part, parts) for every part; one job at a time, from one thread. */
void sl_pool_run(sl_pool *p, sl_pool_fn fn, void *ctx);
/* Parts a job is cut into (1 without a pool). */
unsigned sl_pool_parts(const sl_pool *p);
/* Stops and joins the helpers. Accepts NULL. */
void sl_pool_free(sl_pool *p);

#endif /* SL_POOL_H */
