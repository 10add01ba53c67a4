/* plan_tmpl.c - what the planner walks for each device: the pipeline stages' layer ranges, the
 * parameter templates (one per rule group, or per rule for layout spmd) with the names of their
 * parameters, which templates a stage holds, and which routed experts a tp rank holds. */
#include "plan/plan_ctx.h"

#include <assert.h>
#include <string.h>

/* ---- pipeline stages (vLLM get_pp_indices) ----------------------------------------------------- */

/* vLLM's default split: each stage gets L/P layers; the remainder adds one to stages P-2, P-3, ...
 * (the last stage also holds the norm and lm_head, so it is spared). */
static void stages_default(int64_t L, int64_t P, int64_t *count)
{
    for (int64_t s = 0; s < P; s++)
        count[s] = L / P;
    for (int64_t i = 2; i < L % P + 2; i++)
        count[P - i]++;
}

sl_status sl_plan_stages_split(plan_ctx *c, const int32_t *partition)
{
    const int64_t L = c->m->cfg.L, P = c->p->pp;
    int64_t *n = sl_arena_alloc(&c->p->arena, (size_t)(P + 1) * sizeof(int64_t) * 2);
    SL_CHECK(n != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
    int64_t *count = n + P + 1;
    stages_default(L, P, count);
    n[0] = 0;
    for (int64_t s = 0; s < P; s++) {
        const int64_t k = partition ? partition[s] : count[s];   /* checked: sum L, each >= 0 */
        c->p->stages_custom |= k != count[s];
        n[s + 1] = n[s] + k;
    }
    assert(n[P] == L);
    c->p->stage_start = n;
    return SL_OK;
}

/* ---- parameter templates and names ------------------------------------------------------------ */

static void tmpl_from_rule(plan_tmpl *t, const sl_rule *r, const char *param)
{
    t->param = param;
    t->place = r->place;
    t->tied_also_last = r->tied_also_last;
    t->tied_skip = r->tied_skip;
    t->all_stages = r->all_stages;
    t->expert = r->expert;
    t->dtype = r->dtype;
}

/* Layout spmd keeps one parameter per expert, under the checkpoint name. */
int64_t sl_plan_tmpl_per_layer(const plan_ctx *c, const plan_tmpl *t)
{
    return t->expert && c->p->layout == SL_LAYOUT_SPMD ? c->m->cfg.E : 1;
}

/* Names only where the template has a parameter (its first rule has tensors there; the rules of a
 * group agree on the layers): the planner and the missing-weights message ask for no other. Every
 * layer and expert once cost 4.3 GB and 29 s for a 1.2 KB table on DeepSeek-V3's 61 layers at
 * layout spmd, with 65,536 experts in its one MoE layer (61 x 65,536 names a template, for 65,536
 * parameters). */
static sl_status tmpl_names(plan_ctx *c, plan_tmpl *t)
{
    const int64_t n = t->place == SL_PLACE_LAYER ? c->m->cfg.L : 1, ne = sl_plan_tmpl_per_layer(c, t);
    t->names = sl_arena_alloc(&c->p->arena, (size_t)(n * ne) * sizeof(*t->names) + 1);
    SL_CHECK(t->names != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
    for (int64_t l = 0; l < n; l++) {
        if (t->place == SL_PLACE_LAYER && !sl_arch_rule_at(c->m, t->rules[0], l))
            continue;   /* left unset: no parameter */
        for (int64_t e = 0; e < ne; e++) {
            /* copied even without {i}: the plan outlives the architecture description */
            t->names[l * ne + e] = sl_arch_name_format(&c->p->arena, t->param, l, e);
            SL_CHECK(t->names[l * ne + e] != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
        }
    }
    return SL_OK;
}

const char *sl_plan_tmpl_name(const plan_ctx *c, const plan_tmpl *t, int64_t layer, int64_t e)
{
    assert(t->place != SL_PLACE_LAYER || sl_arch_rule_at(c->m, t->rules[0], layer));
    const int64_t ne = sl_plan_tmpl_per_layer(c, t);
    return t->names[(layer < 0 ? 0 : layer) * ne + (ne > 1 ? e : 0)];
}

void sl_plan_expert_range(const plan_ctx *c, int32_t rank, int64_t *first, int64_t *count)
{
    const int64_t E = c->m->cfg.E, T = c->p->tp;
    if (!c->p->ep) {
        *first = 0;
        *count = E;
        return;
    }
    /* vLLM since fe56180c7f90 (2025-07-24): the first E % T ranks take one more */
    const int64_t base = E / T, rem = E % T;
    *first = rank * base + (rank < rem ? rank : rem);
    *count = base + (rank < rem ? 1 : 0);
}

sl_status sl_plan_tmpl_build(plan_ctx *c)
{
    const sl_arch *m = c->m;
    const int spmd = c->p->layout == SL_LAYOUT_SPMD;
    c->n_tmpl = spmd ? m->n_rules : m->n_groups;
    c->tmpl = sl_arena_alloc(&c->p->arena, (size_t)c->n_tmpl * sizeof(*c->tmpl));
    SL_CHECK(c->tmpl != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < c->n_tmpl; i++) {
        plan_tmpl *t = &c->tmpl[i];
        memset(t, 0, sizeof(*t));
        if (spmd) {
            t->n_rules = 1;
            t->rules[0] = i;
            tmpl_from_rule(t, &m->rules[i], m->rules[i].tensor);
        } else {
            t->n_rules = m->groups[i].n_rules;
            memcpy(t->rules, m->groups[i].rules, sizeof(t->rules));
            tmpl_from_rule(t, &m->rules[t->rules[0]], m->rules[t->rules[0]].param);
        }
        SL_TRY(tmpl_names(c, t));
    }
    return SL_OK;
}

int sl_plan_tmpl_on_stage(const plan_ctx *c, const plan_tmpl *t, int32_t stage)
{
    const int tied = c->m->cfg.tied;
    const int32_t last = c->p->pp - 1;
    if (tied && t->tied_skip)
        return 0;
    if (t->all_stages)
        return 1;
    if (t->place == SL_PLACE_FIRST)
        return stage == 0 || (stage == last && tied && t->tied_also_last);
    return t->place == SL_PLACE_LAST && stage == last;
}
