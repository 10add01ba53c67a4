/* sl_cancel.c - one lock-free atomic flag, so that sl_cancel may be called from a signal handler
 * (C11 7.14.1.1: a handler may touch lock-free atomic objects). */
#include "common/sl_cancel.h"

#include "shardload.h"

#include <stdatomic.h>

static atomic_int sl_cancel_flag;

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "sl_cancel is called from signal handlers");

void sl_cancel(void)
{
    atomic_store_explicit(&sl_cancel_flag, 1, memory_order_relaxed);
}

void sl_cancel_clear(void)
{
    atomic_store_explicit(&sl_cancel_flag, 0, memory_order_relaxed);
}

int sl_cancel_requested(void)
{
    return atomic_load_explicit(&sl_cancel_flag, memory_order_relaxed);
}
