/* plan_tied.c - the one rule for tied embeddings that the planner and the writers of pre-sharded
 * files share: which name the shared tensor is stored under. */
#include "plan/plan_ctx.h"

#include <string.h>

/* Tied embeddings share storage between the embedding (the rule placed first and also on the last
 * stage) and the head (the rule skipped when tied). vLLM's sharded_state format keeps, of tensors
 * that share storage, the one whose name sorts lowest: the name reshard writes and reads back.
 * They share it on the last stage, or on every stage where the head is on every stage ("stages":
 * "all": vLLM's MoE models tie lm_head to embed_tokens on each). */
sl_status sl_plan_tied_names(sl_plan *p, const sl_arch *m)
{
    const char *param = NULL, *head = NULL;
    int every = 0;
    for (int32_t i = 0; p->tied && i < m->n_rules; i++) {
        if (m->rules[i].tied_also_last)
            param = m->rules[i].param ? m->rules[i].param : m->rules[i].tensor;
        if (m->rules[i].tied_skip) {
            head = m->rules[i].tensor;
            every = m->rules[i].all_stages;
        }
    }
    if (!param || !head)
        return SL_OK;
    const char *keep = strcmp(head, param) < 0 ? head : param;
    p->tied_param = sl_arena_strndup(&p->arena, param, strlen(param));
    p->tied_stored = sl_arena_strndup(&p->arena, keep, strlen(keep));
    p->tied_every_stage = every;
    return p->tied_param && p->tied_stored ? SL_OK : sl_err_set(&p->err, SL_E_NOMEM, "out of memory");
}

const char *sl_plan_stored_name(const sl_plan *p, const sl_plan_device *d, const char *param)
{
    if (p->tied_stored && (p->tied_every_stage || d->pp_rank == p->pp - 1) && !strcmp(param, p->tied_param))
        return p->tied_stored;
    return param;
}
