/* fz_plan.h - what fuzz_config.c and fuzz_rules.c check of every plan they build (header-only:
 * each target is one translation unit). */
#ifndef SL_FUZZ_FZ_PLAN_H
#define SL_FUZZ_FZ_PLAN_H

#include "shardload.h"
#include "common/sl_strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double fz_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A device's parameters are packed with no gaps, under names that differ (a state dict's keys).
 * The names are checked with a hash map: a sort of a million names (65,536 experts in 5 layers at
 * layout spmd) took the replay past libFuzzer's 60 s under ASan, in strcmp's fuzzer hook. */
static void fz_check_plan(const sl_plan *p)
{
    uint64_t total = 0;
    for (int32_t d = 0; d < sl_plan_device_count(p); d++) {
        const int64_t n = sl_plan_param_count(p, d);
        sl_strmap seen = {0};
        uint64_t off = 0;
        if (sl_strmap_reserve(&seen, (size_t)n) != 0)
            abort();
        for (int64_t i = 0; i < n; i++) {
            sl_param_info pi;
            if (sl_plan_param(p, d, i, &pi) != SL_OK || pi.offset != off || pi.name == NULL)
                abort();
            off += pi.nbytes;
            if (sl_strmap_add(&seen, pi.name, i) != -1) {
                fprintf(stderr, "fuzz: device %d holds two parameters named '%s'\n", (int)d, pi.name);
                abort();
            }
        }
        sl_strmap_free(&seen);
        if (off != sl_plan_device_bytes(p, d))
            abort();
        total += off;
    }
    if (total != sl_plan_total_bytes(p))
        abort();
}

/* Plan options for a mesh (the config and rules are the caller's). */
static void fz_mesh_opts(sl_plan_opts *o, int32_t tp, int32_t pp, sl_layout layout, int32_t ep,
                         int32_t dtype)
{
    sl_plan_opts_init(o);
    o->tp = tp;
    o->pp = pp;
    o->layout = layout;
    o->ep = ep;
    o->dtype = dtype;
}

/* Every failure is one of the statuses the planner documents. */
static int fz_status_known(sl_status st)
{
    return st == SL_E_CONFIG || st == SL_E_UNSUPPORTED || st == SL_E_NOMEM || st == SL_E_DIVISIBILITY ||
           st == SL_E_INVALID_ARG || st == SL_E_SHAPE || st == SL_E_OVERFLOW;
}

#endif /* SL_FUZZ_FZ_PLAN_H */
