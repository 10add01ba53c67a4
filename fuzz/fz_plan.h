/* fz_plan.h - what fuzz_config.c and fuzz_rules.c check of every plan they build (header-only:
 * each target is one translation unit). */
#ifndef SL_FUZZ_FZ_PLAN_H
#define SL_FUZZ_FZ_PLAN_H

#include "shardload.h"

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

static int fz_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A device's parameters are packed with no gaps, under names that differ (a state dict's keys). */
static void fz_check_plan(const sl_plan *p)
{
    uint64_t total = 0;
    for (int32_t d = 0; d < sl_plan_device_count(p); d++) {
        const int64_t n = sl_plan_param_count(p, d);
        const char **names = malloc((size_t)n * sizeof(*names) + 1);
        uint64_t off = 0;
        if (names == NULL)
            abort();
        for (int64_t i = 0; i < n; i++) {
            sl_param_info pi;
            if (sl_plan_param(p, d, i, &pi) != SL_OK || pi.offset != off || pi.name == NULL)
                abort();
            off += pi.nbytes;
            names[i] = pi.name;
        }
        qsort(names, (size_t)n, sizeof(*names), fz_name_cmp);
        for (int64_t i = 1; i < n; i++) {
            if (strcmp(names[i - 1], names[i]) == 0) {
                fprintf(stderr, "fuzz: device %d holds two parameters named '%s'\n", (int)d, names[i]);
                abort();
            }
        }
        free(names);
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
