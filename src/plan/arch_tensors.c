/* arch_tensors.c - the checkpoint tensors an architecture description implies: their names
 * ({i} and {e} filled in), where each sits in the list (sl_arch_tensor_index), which rules apply at
 * which layers, and the total parameter count, checked against a bound. */
#include "plan/arch.h"
#include "plan/arch_config.h"

#include "common/sl_bytes.h"

#include <stdio.h>
#include <string.h>

/* 2^42 parameters (4.4 trillion, 8.8 TB in bf16): far above any dense model; a config above it is
 * a mistake or an attack, and would otherwise be planned, loaded as dummy or synthesized. */
#define SL_MAX_PARAMS (1ull << 42)

/* pattern with every "{i}" replaced by the layer number and every "{e}" by the expert. */
static const char *name_format(sl_arena *a, const char *pattern, int64_t layer, int64_t e)
{
    char num[2][24];
    const int nlen[2] = {snprintf(num[0], sizeof(num[0]), "%lld", (long long)layer),
                         snprintf(num[1], sizeof(num[1]), "%lld", (long long)e)};
    size_t n = 0;
    for (const char *p = pattern; *p; n++)
        p += strncmp(p, "{i}", 3) == 0 || strncmp(p, "{e}", 3) == 0 ? 3 : 1;
    char *out = sl_arena_alloc(a, strlen(pattern) + (size_t)(nlen[0] + nlen[1]) * n + 1);
    if (out == NULL)
        return NULL;
    char *o = out;
    for (const char *p = pattern; *p;) {
        const int k = strncmp(p, "{i}", 3) == 0 ? 0 : strncmp(p, "{e}", 3) == 0 ? 1 : -1;
        if (k >= 0) {
            memcpy(o, num[k], (size_t)nlen[k]);
            o += nlen[k];
            p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

const char *sl_arch_name_format(sl_arena *a, const char *pattern, int64_t layer, int64_t e)
{
    return name_format(a, pattern, layer, e);
}

int64_t sl_arch_tensor_index(const sl_arch *m, int32_t rule, int64_t layer, int64_t e)
{
    const sl_rule *r = &m->rules[rule];
    switch (r->place) {
    case SL_PLACE_FIRST: return r->ord;
    case SL_PLACE_LAYER: {
        const int64_t k = r->kind_ord[m->layer_moe[layer]];
        return k < 0 ? -1 : m->layer_start[layer] + k + (r->expert ? e : 0);
    }
    case SL_PLACE_LAST: return m->layer_start[m->cfg.L] + r->ord;
    }
    return -1;
}

int sl_arch_rule_at(const sl_arch *m, int32_t rule, int64_t layer)
{
    const sl_rule *r = &m->rules[rule];
    return r->place != SL_PLACE_LAYER || r->kind_ord[m->layer_moe[layer]] >= 0;
}

int sl_arch_rule_used(const sl_arch *m, int32_t rule)
{
    const sl_rule *r = &m->rules[rule];
    if (r->place != SL_PLACE_LAYER)
        return 1;
    const int64_t dense = m->cfg.L - m->n_moe_layers;
    return (r->kind_ord[0] >= 0 && dense > 0) || (r->kind_ord[1] >= 0 && m->n_moe_layers > 0);
}

/* Per-layer rules: where each rule's tensors sit among a dense and an MoE layer's tensors (an
 * expert rule takes E places), and where each layer's tensors start. */
static sl_status layers_index(sl_err *err, sl_arch *m)
{
    int64_t per_kind[2] = {0, 0};
    for (int kind = 0; kind < 2; kind++) {
        for (int32_t ri = 0; ri < m->n_rules; ri++) {
            sl_rule *r = &m->rules[ri];
            const int in = r->place == SL_PLACE_LAYER &&
                           (r->layers == SL_LAYERS_ALL || (int)r->layers == kind + 1);
            r->kind_ord[kind] = in ? per_kind[kind] : -1;
            per_kind[kind] += in ? (r->expert ? m->cfg.E : 1) : 0;
        }
    }
    m->layer_start = sl_arena_alloc(&m->arena, (size_t)(m->cfg.L + 1) * sizeof(int64_t));
    SL_CHECK(m->layer_start != NULL, err, SL_E_NOMEM, "out of memory");
    m->layer_start[0] = m->n_first;
    /* per_kind[k] <= 3 * 4096 rules * 65536 experts and L <= 100,000: the sums stay far below
     * 2^63, and the bound is checked as they grow */
    for (int64_t l = 0; l < m->cfg.L; l++) {
        m->layer_start[l + 1] = m->layer_start[l] + per_kind[m->layer_moe[l]];
        SL_CHECK(m->layer_start[l + 1] + m->n_last <= SL_MAX_TENSORS, err, SL_E_CONFIG,
                 "the config implies more than %d tensors (num_hidden_layers %lld, %lld experts, "
                 "%lld tensors in a dense layer and %lld in an MoE layer): no real model has this "
                 "many", SL_MAX_TENSORS, (long long)m->cfg.L, (long long)m->cfg.E,
                 (long long)per_kind[0], (long long)per_kind[1]);
    }
    return SL_OK;
}

static sl_status tensor_set(sl_err *err, sl_arch *m, int32_t ri, int64_t l, int64_t e)
{
    const sl_rule *r = &m->rules[ri];
    sl_arch_tensor *t = &m->tensors[sl_arch_tensor_index(m, ri, l, e)];
    t->rule = ri;
    t->layer = r->place == SL_PLACE_LAYER ? (int32_t)l : -1;
    t->expert = r->expert ? (int32_t)e : -1;
    t->dtype = r->dtype;
    /* AutoFP8 writes its per-tensor scales 0-d; the planner takes [] and [1] alike */
    t->ndim = m->quant.scalar && sl_arch_scale_scalar(r) ? 0 : r->ndim;
    t->shape = r->shape;
    t->name = r->place == SL_PLACE_LAYER ? name_format(&m->arena, r->tensor, l, e) : r->tensor;
    SL_CHECK(t->name != NULL, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

sl_status sl_arch_tensors_build(sl_err *err, sl_arch *m)
{
    SL_TRY(layers_index(err, m));
    m->n_tensors = m->layer_start[m->cfg.L] + m->n_last;
    m->tensors = sl_arena_alloc(&m->arena, (size_t)m->n_tensors * sizeof(*m->tensors));
    SL_CHECK(m->tensors != NULL, err, SL_E_NOMEM, "out of memory");
    for (int32_t ri = 0; ri < m->n_rules; ri++) {
        const sl_rule *r = &m->rules[ri];
        const int64_t nl = r->place == SL_PLACE_LAYER ? m->cfg.L : 1;
        const int64_t ne = r->expert ? m->cfg.E : 1;
        for (int64_t l = 0; l < nl; l++) {
            for (int64_t e = 0; e < ne && sl_arch_rule_at(m, ri, l); e++)
                SL_TRY(tensor_set(err, m, ri, l, e));
        }
    }
    return SL_OK;
}

/* The parameters of a checkpoint of this config (tied-skip rules left out when tied), at most
 * SL_MAX_PARAMS. */
sl_status sl_arch_check_size(sl_err *err, const sl_arch *m)
{
    uint64_t total = 0;
    for (int32_t i = 0; i < m->n_rules; i++) {
        const sl_rule *r = &m->rules[i];
        uint64_t n = 1;
        if (r->place == SL_PLACE_LAYER) {
            n = 0;
            for (int64_t l = 0; l < m->cfg.L; l++)
                n += (uint64_t)sl_arch_rule_at(m, i, l);
        }
        if (r->expert)
            SL_CHECK(!sl_mul_overflow(n, (uint64_t)m->cfg.E, &n), err, SL_E_CONFIG,
                     "the tensors of rule '%s' overflow 64 bits", r->tensor);
        for (uint32_t d = 0; d < r->ndim; d++)
            SL_CHECK(!sl_mul_overflow(n, r->shape[d], &n), err, SL_E_CONFIG,
                     "the tensors of rule '%s' overflow 64 bits", r->tensor);
        if (!(m->cfg.tied && r->tied_skip))
            SL_CHECK(!sl_add_overflow(total, n, &total), err, SL_E_CONFIG, "the parameter count overflows");
    }
    SL_CHECK(total <= SL_MAX_PARAMS, err, SL_E_CONFIG, "the config implies %llu parameters, above the "
             "limit of %llu (hidden_size %lld, intermediate_size %lld, vocab_size %lld, "
             "num_hidden_layers %lld, head_dim %lld): no real model is this large",
             (unsigned long long)total, (unsigned long long)SL_MAX_PARAMS, (long long)m->cfg.H,
             (long long)m->cfg.I, (long long)m->cfg.V, (long long)m->cfg.L, (long long)m->cfg.D);
    return SL_OK;
}

void sl_arch_each_checkpoint_tensor(const sl_arch *m, sl_arch_tensor_fn fn, void *user)
{
    for (int64_t i = 0; i < m->n_tensors; i++) {
        if (!(m->cfg.tied && m->rules[m->tensors[i].rule].tied_skip))
            fn(user, &m->tensors[i]);
    }
}
