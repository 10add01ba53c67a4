/* plan_bound.c - the size of a plan, bounded before it is built.
 *
 * A plan holds, for every device, one entry per parameter and one or more operations per
 * parameter (about 64 + 88 bytes), plus a per-file byte count. Its size follows from the config and
 * the mesh alone: a 221-byte config of 100,000 layers at tp 1024, or Llama-3-70B at layout spmd on
 * 65,536 devices, would need tens of GB, and the planner would grow into them before failing. So
 * the count comes first, in arithmetic over the templates and the stages (no walk over devices),
 * as an upper bound on what devices_build will allocate, and a plan above SL_PLAN_MAX_BYTES is
 * refused with the figures. */
#include "plan/plan_ctx.h"

#include "common/sl_bytes.h"

#include <stdio.h>

/* Far above a real plan: Llama-3-405B at spmd N=3 (a zero op per padded row) is about 1.1 GB. */
#define SL_PLAN_MAX_BYTES (2ull << 30)

/* Saturating: a count past 2^64 is just far above the limit. */
static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r = 0;
    return sl_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t r = 0;
    return sl_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Operations one parameter of template t may need: a copy and a zero fill per rule, and under
 * layout spmd a zero fill per row when dim 1 is tiled unevenly (the pad ends each row). */
static uint64_t tmpl_ops(const plan_ctx *c, const plan_tmpl *t)
{
    const int spmd = c->p->layout == SL_LAYOUT_SPMD;
    uint64_t ops = 0;
    for (int32_t k = 0; k < t->n_rules; k++) {
        const sl_rule *r = &c->m->rules[t->rules[k]];
        ops = sat_add(ops, 2);
        /* a block scale's tile is its weight's in blocks: padded even when its own dim divides */
        if (spmd && sl_plan_spmd_tile_dim(r) == 1 &&
            (r->shape[1] % (uint64_t)c->p->tp != 0 || r->scale_kind == SL_SCALE_BLOCK))
            ops = sat_add(ops, r->shape[0]);
    }
    return ops;
}

/* Parameters (and operations) of template t over all stages: per-layer templates once per layer,
 * the others once per stage that holds them. Times tp for the devices of a stage. */
static void tmpl_count(const plan_ctx *c, const plan_tmpl *t, uint64_t *params)
{
    if (t->place == SL_PLACE_LAYER && !(c->m->cfg.tied && t->tied_skip)) {
        *params = 0;
        for (int64_t l = 0; l < c->m->cfg.L; l++)
            *params += (uint64_t)sl_arch_rule_at(c->m, t->rules[0], l);
        return;
    }
    *params = 0;
    for (int32_t s = 0; s < c->p->pp; s++)
        *params += (uint64_t)sl_plan_tmpl_on_stage(c, t, s);
}

/* Bytes of a plan's parameters, operations and per-device file totals. */
static uint64_t plan_bytes(uint64_t params, uint64_t ops, uint64_t devices, uint64_t files)
{
    return sat_add(sat_add(sat_mul(params, sizeof(sl_plan_param_t)), sat_mul(ops, sizeof(sl_op))),
                   sat_mul(devices, sat_mul(files, sizeof(uint64_t))));
}

sl_status sl_plan_check_box_size(sl_plan *p, uint64_t boxes, uint64_t ops, uint64_t files)
{
    const uint64_t bytes = plan_bytes(boxes, ops, (uint64_t)p->n_devices, files);
    if (bytes <= SL_PLAN_MAX_BYTES)
        return SL_OK;
    return sl_err_set(&p->err, SL_E_NOMEM, "a plan of %llu boxes over %d devices would hold %llu "
                      "operations, about %llu MB, above the planner's limit of %llu MB: a box cut "
                      "along a dimension other than its last takes an operation per index of the "
                      "dimensions outside that cut that it does not hold whole",
                      (unsigned long long)boxes, (int)p->n_devices, (unsigned long long)ops,
                      (unsigned long long)(bytes / 1000000),
                      (unsigned long long)(SL_PLAN_MAX_BYTES / 1000000));
}

sl_status sl_plan_check_size(plan_ctx *c)
{
    const sl_plan *p = c->p;
    const uint64_t T = (uint64_t)p->tp;
    uint64_t params = 0, ops = 0, bytes = 0;
    for (int32_t i = 0; i < c->n_tmpl; i++) {
        uint64_t n = 0;
        tmpl_count(c, &c->tmpl[i], &n);
        /* {e} templates: E parameters of 2 ops per rule (spmd), or one holding E experts' ops (tp):
         * either way at most E times the ops of a plain template; counted as E parameters */
        if (c->tmpl[i].expert)
            n = sat_mul(n, (uint64_t)c->m->cfg.E);
        params = sat_add(params, sat_mul(n, T));
        ops = sat_add(ops, sat_mul(sat_mul(n, T), tmpl_ops(c, &c->tmpl[i])));
    }
    const uint64_t files = c->ck ? (uint64_t)sl_checkpoint_file_count(c->ck) : 0;
    bytes = plan_bytes(params, ops, (uint64_t)p->n_devices, files);
    if (bytes <= SL_PLAN_MAX_BYTES)
        return SL_OK;
    return sl_err_set(&c->p->err, SL_E_NOMEM, "%s: %s%sa plan for %d devices (tp %d, pp %d, layout %s) "
                      "would hold %llu device parameters and up to %llu operations, about %llu MB, above "
                      "the planner's limit of %llu MB: plan a smaller mesh", c->config_path,
                      c->rules_path ? c->rules_path : "", c->rules_path ? ": " : "", (int)p->n_devices,
                      (int)p->tp, (int)p->pp, p->layout == SL_LAYOUT_SPMD ? "spmd" : "tp",
                      (unsigned long long)params, (unsigned long long)ops,
                      (unsigned long long)(bytes / 1000000), (unsigned long long)(SL_PLAN_MAX_BYTES / 1000000));
}
