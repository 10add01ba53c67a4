/* arch_tensors.c - the checkpoint tensors an architecture description implies: their names
 * ({i} and {e} filled in), where each sits in the list (sl_arch_tensor_index), which rules apply at
 * which layers, and the total parameter count, checked against a bound. */
#include "plan/arch.h"
#include "plan/arch_config.h"

#include "common/sl_bytes.h"
#include "common/sl_strmap.h"

#include <stdio.h>
#include <stdlib.h>
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
    /* each placeholder gives way to at most the longer number: the pattern's length plus that
     * much per placeholder (counting every character instead asked for about 5 times the name) */
    size_t n = 0;
    for (const char *p = strchr(pattern, '{'); p; p = strchr(p + 1, '{'))
        n += strncmp(p, "{i}", 3) == 0 || strncmp(p, "{e}", 3) == 0;
    const size_t longest = (size_t)(nlen[0] > nlen[1] ? nlen[0] : nlen[1]);
    char *out = sl_arena_alloc(a, strlen(pattern) + longest * n + 1);
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
        const int64_t k = m->kind_ord[(int64_t)rule * m->n_kinds + m->layer_kind[layer]];
        return k < 0 ? -1 : m->layer_start[layer] + k + (r->expert ? e : 0);
    }
    case SL_PLACE_LAST: return m->layer_start[m->cfg.L] + r->ord;
    }
    return -1;
}

int sl_arch_rule_at(const sl_arch *m, int32_t rule, int64_t layer)
{
    const sl_rule *r = &m->rules[rule];   /* what layers_index sets kind_ord from, so valid before it */
    if (r->place != SL_PLACE_LAYER)
        return 1;
    return (r->layers == SL_LAYERS_ALL || (int)r->layers == m->layer_moe[layer] + 1) &&
           (r->at_layer == NULL || r->at_layer[layer]);
}

int sl_arch_rule_used(const sl_arch *m, int32_t rule)
{
    if (m->rules[rule].place != SL_PLACE_LAYER)
        return 1;
    for (int32_t k = 0; k < m->n_kinds; k++) {   /* each kind has a layer */
        if (m->kind_ord[(int64_t)rule * m->n_kinds + k] >= 0)
            return 1;
    }
    return 0;
}

/* Rules whose presence at a layer is more than its dense/MoE kind: those with at_layer. */
static int32_t *masked_rules(const sl_arch *m, int32_t *n)
{
    int32_t *out = malloc((size_t)m->n_rules * sizeof(*out) + 1);
    *n = 0;
    for (int32_t ri = 0; out && ri < m->n_rules; ri++) {
        if (m->rules[ri].place == SL_PLACE_LAYER && m->rules[ri].at_layer)
            out[(*n)++] = ri;
    }
    return out;
}

/* Whether layers a and b have the same rules: the same kind (dense or MoE), and each rule with
 * at_layer there at both or neither. */
static int layers_alike(const sl_arch *m, const int32_t *masked, int32_t n, int64_t a, int64_t b)
{
    if (m->layer_moe[a] != m->layer_moe[b])
        return 0;
    for (int32_t i = 0; i < n; i++) {
        if (sl_arch_rule_at(m, masked[i], a) != sl_arch_rule_at(m, masked[i], b))
            return 0;
    }
    return 1;
}

enum { KINDS_MAX = 64 };   /* dense and MoE layers, each with a few quantization_config exceptions */

/* layer_kind[l] for each layer and the kinds' first layers (rep), *n_kinds of them. */
static sl_status layers_kinds(sl_err *err, sl_arch *m, int64_t *rep)
{
    int32_t n_masked = 0;
    int32_t *masked = masked_rules(m, &n_masked);
    m->layer_kind = sl_arena_alloc(&m->arena, (size_t)m->cfg.L + 1);
    sl_status st = masked && m->layer_kind ? SL_OK : sl_err_set(err, SL_E_NOMEM, "out of memory");
    m->n_kinds = 0;
    for (int64_t l = 0; st == SL_OK && l < m->cfg.L; l++) {
        int32_t k = 0;
        while (k < m->n_kinds && !layers_alike(m, masked, n_masked, rep[k], l))
            k++;
        if (k == m->n_kinds && k == KINDS_MAX) {
            st = sl_err_set(err, SL_E_UNSUPPORTED, "quantization_config's ignored modules make "
                            "more than %d kinds of layer (by which of their modules are FP8; "
                            "layer %lld is one more): not supported", KINDS_MAX, (long long)l);
            break;
        }
        if (k == m->n_kinds)
            rep[m->n_kinds++] = l;
        m->layer_kind[l] = (uint8_t)k;
    }
    free(masked);
    return st;
}

/* Per-layer rules: where each rule's tensors sit among each kind of layer's tensors (an expert
 * rule takes E places), and where each layer's tensors start. */
static sl_status layers_index(sl_err *err, sl_arch *m)
{
    int64_t rep[KINDS_MAX], per_kind[KINDS_MAX] = {0};
    SL_TRY(layers_kinds(err, m, rep));
    m->kind_ord = sl_arena_alloc(&m->arena, ((size_t)m->n_rules * (size_t)m->n_kinds + 1) * sizeof(int64_t));
    SL_CHECK(m->kind_ord != NULL, err, SL_E_NOMEM, "out of memory");
    for (int32_t k = 0; k < m->n_kinds; k++) {
        for (int32_t ri = 0; ri < m->n_rules; ri++) {
            const sl_rule *r = &m->rules[ri];
            const int in = r->place == SL_PLACE_LAYER && sl_arch_rule_at(m, ri, rep[k]);
            m->kind_ord[(int64_t)ri * m->n_kinds + k] = in ? per_kind[k] : -1;
            per_kind[k] += in ? (r->expert ? m->cfg.E : 1) : 0;
        }
    }
    m->layer_start = sl_arena_alloc(&m->arena, (size_t)(m->cfg.L + 1) * sizeof(int64_t));
    SL_CHECK(m->layer_start != NULL, err, SL_E_NOMEM, "out of memory");
    m->layer_start[0] = m->n_first;
    /* per_kind[k] <= 4 * 4096 rules * 65536 experts and L <= 100,000: the sums stay far below
     * 2^63, and the bound is checked as they grow */
    for (int64_t l = 0; l < m->cfg.L; l++) {
        const int32_t k = m->layer_kind[l];
        m->layer_start[l + 1] = m->layer_start[l] + per_kind[k];
        SL_CHECK(m->layer_start[l + 1] + m->n_last <= SL_MAX_TENSORS, err, SL_E_CONFIG,
                 "the config implies more than %d tensors (num_hidden_layers %lld, %lld experts, "
                 "%lld tensors in layer %lld): no real model has this many", SL_MAX_TENSORS,
                 (long long)m->cfg.L, (long long)m->cfg.E, (long long)per_kind[k], (long long)l);
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

/* ---- every name once: the checkpoint tensors, and the parameters of layout tp ------------------ */

/* Patterns that differ can still give one name: a first-stage "model.layers.0.x" and a per-layer
 * "model.layers.{i}.x", "a{i}1" at layer 1 and "a{i}" at layer 11, or a table rule named as the
 * scale quantization_config adds beside an FP8 weight ("<x>.weight_scale"). One checkpoint tensor
 * would then stand for two model tensors (a checkpoint binds one, the other is reported missing;
 * synth writes the name twice) and a device would hold two parameters of one name. */
static sl_status tensor_dup(sl_err *err, const sl_arch *m, int32_t a, int32_t b, const char *name)
{
    const sl_rule *ra = &m->rules[a], *rb = &m->rules[b];
    if (rb->scale_of >= 0 && ra->scale_of < 0) {
        const sl_rule *t = ra;
        ra = rb;
        rb = t;
    }
    if (ra->scale_of >= 0)   /* scale rules follow the table's, so rb is the table's */
        return sl_err_set(err, SL_E_CONFIG, "rule '%s' names checkpoint tensor '%s', which is the FP8 "
                          "scale quantization_config adds for rule '%s'", rb->tensor, name,
                          m->rules[ra->scale_of].tensor);
    return sl_err_set(err, SL_E_CONFIG, "rules '%s' and '%s' both name checkpoint tensor '%s'",
                      ra->tensor, rb->tensor, name);
}

static sl_status tensors_unique(sl_err *err, const sl_arch *m)
{
    sl_strmap set = {0};
    /* n_tensors <= SL_MAX_TENSORS (layers_index's bound) */
    sl_status st = sl_strmap_reserve(&set, (size_t)m->n_tensors) == 0 ? SL_OK
                   : sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; st == SL_OK && i < m->n_tensors; i++) {
        const int64_t prev = sl_strmap_add(&set, m->tensors[i].name, m->tensors[i].rule);
        if (prev >= 0)
            st = tensor_dup(err, m, (int32_t)prev, m->tensors[i].rule, m->tensors[i].name);
    }
    sl_strmap_free(&set);
    return st;
}

/* A group's parameter at layer l (at every layer that has it), into set; *prev the group that
 * already gave the name, or -1. */
static sl_status param_add(sl_err *err, sl_arch *m, sl_arena *tmp, sl_strmap *set, int32_t g,
                           int64_t l, int32_t *prev)
{
    const sl_rule *r = &m->rules[m->groups[g].rules[0]];
    const char *name = r->place == SL_PLACE_LAYER ? name_format(tmp, r->param, l, 0) : r->param;
    SL_CHECK(name != NULL, err, SL_E_NOMEM, "out of memory");
    *prev = (int32_t)sl_strmap_add(set, name, g);   /* reserved: never -2 */
    SL_CHECK(*prev < 0, err, SL_E_CONFIG, "rules '%s' and '%s' both fill parameter '%s' (their "
             "\"param\" patterns differ but give one name)",
             m->rules[m->groups[*prev].rules[0]].tensor, r->tensor, name);
    return SL_OK;
}

/* Layout tp's parameters: one per group and layer that has it (experts are stacked in one). */
static sl_status params_unique(sl_err *err, sl_arch *m)
{
    sl_strmap set = {0};
    sl_arena tmp = {0};
    int32_t prev = -1;
    /* a group's parameter at a layer has a tensor there: no more parameters than tensors */
    sl_status st = sl_strmap_reserve(&set, (size_t)m->n_tensors) == 0 ? SL_OK
                   : sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int32_t g = 0; st == SL_OK && g < m->n_groups; g++) {
        const int32_t ri = m->groups[g].rules[0];
        const int64_t nl = m->rules[ri].place == SL_PLACE_LAYER ? m->cfg.L : 1;
        for (int64_t l = 0; st == SL_OK && l < nl; l++) {
            if (sl_arch_rule_at(m, ri, l))
                st = param_add(err, m, &tmp, &set, g, l, &prev);
        }
    }
    sl_arena_free(&tmp);
    sl_strmap_free(&set);
    return st;
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
    SL_TRY(tensors_unique(err, m));
    return params_unique(err, m);
}

/* The parameters of a checkpoint of this config (tied-skip rules left out when tied), at most
 * SL_MAX_PARAMS. */
sl_status sl_arch_check_size(sl_err *err, const sl_arch *m)
{
    uint64_t total = 0, most = 0;
    int32_t most_rule = 0;
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
        if (m->cfg.tied && r->tied_skip)
            continue;
        SL_CHECK(!sl_add_overflow(total, n, &total), err, SL_E_CONFIG, "the parameter count overflows");
        if (n > most) {
            most = n;
            most_rule = i;
        }
    }
    /* the rule that holds the most tells which size (or which shape of a --rules table) is off */
    SL_CHECK(total <= SL_MAX_PARAMS, err, SL_E_CONFIG, "the config implies %llu parameters, above the "
             "limit of %llu (hidden_size %lld, intermediate_size %lld, vocab_size %lld, "
             "num_hidden_layers %lld, head_dim %lld; rule '%s' holds %llu): no real model is this large",
             (unsigned long long)total, (unsigned long long)SL_MAX_PARAMS, (long long)m->cfg.H,
             (long long)m->cfg.I, (long long)m->cfg.V, (long long)m->cfg.L, (long long)m->cfg.D,
             m->rules[most_rule].tensor, (unsigned long long)most);
    return SL_OK;
}

void sl_arch_each_checkpoint_tensor(const sl_arch *m, sl_arch_tensor_fn fn, void *user)
{
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const sl_rule *r = &m->rules[m->tensors[i].rule];
        if (!(m->cfg.tied && r->tied_skip) && !r->optional)
            fn(user, &m->tensors[i]);
    }
}
