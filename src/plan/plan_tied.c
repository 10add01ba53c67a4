/* plan_tied.c - the one rule for tied embeddings that the planner and the writers of pre-sharded
 * files share: which name the shared tensor is stored under. */
#include "plan/plan_ctx.h"

#include <string.h>

/* Tied embeddings share storage between the embedding (the rule placed first and also on the last
 * stage) and the head (the rule skipped when tied). vLLM's sharded_state format keeps, of tensors
 * that share storage, the one whose name sorts lowest: the name reshard writes and reads back. */
sl_status sl_plan_tied_names(sl_plan *p, const sl_arch *m)
{
    const char *param = NULL, *head = NULL;
    for (int32_t i = 0; p->tied && i < m->n_rules; i++) {
        if (m->rules[i].tied_also_last)
            param = m->rules[i].param ? m->rules[i].param : m->rules[i].tensor;
        if (m->rules[i].tied_skip)
            head = m->rules[i].tensor;
    }
    if (!param || !head)
        return SL_OK;
    const char *keep = strcmp(head, param) < 0 ? head : param;
    p->tied_param = sl_arena_strndup(&p->arena, param, strlen(param));
    p->tied_stored = sl_arena_strndup(&p->arena, keep, strlen(keep));
    return p->tied_param && p->tied_stored ? SL_OK : sl_err_set(&p->err, SL_E_NOMEM, "out of memory");
}

const char *sl_plan_stored_name(const sl_plan *p, const sl_plan_device *d, const char *param)
{
    if (p->tied_stored && d->pp_rank == p->pp - 1 && !strcmp(param, p->tied_param))
        return p->tied_stored;
    return param;
}
