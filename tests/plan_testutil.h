/* plan_testutil.h - what the planner's tests (test_plan*.c) look up in a plan and how they check
 * its refusals. */
#ifndef SL_TESTS_PLAN_TESTUTIL_H
#define SL_TESTS_PLAN_TESTUTIL_H

#include "expect.h"
#include "plan/plan_data.h"
#include "shardload.h"

#include <string.h>

/* Parameter `name` of device d, or NULL (also when p is NULL: a plan that failed to build). */
static inline const sl_plan_param_t *tu_param(const sl_plan *p, int d, const char *name)
{
    for (int64_t i = 0; p && i < p->devices[d].n_params; i++)
        if (!strcmp(p->devices[d].params[i].name, name))
            return &p->devices[d].params[i];
    return NULL;
}

/* The build failed with status want and a message containing text. */
static inline void tu_expect_plan_error(const char *what, sl_status st, const sl_plan *p, sl_status want,
                                        const char *text)
{
    EXPECT(st == want && p && strstr(sl_plan_errmsg(p), text), "%s: status %d, '%s' (want '%s')",
           what, (int)st, p ? sl_plan_errmsg(p) : "", text);
}

#endif /* SL_TESTS_PLAN_TESTUTIL_H */
