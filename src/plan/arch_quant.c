/* arch_quant.c - FP8 block-quantized checkpoints (SHARDING-MOE-FP8.md, "FP8 checkpoints"): the
 * config's quantization_config, which rules are quantized linear layers, and the scale tensor each
 * of them brings (<w>.weight_scale_inv [cdiv(out, bn), cdiv(in, bk)], F32), added to the table as
 * rules of their own so that the planner binds, shards and synthesizes them like any tensor.
 *
 * Supported: quant_method "fp8" with weight_block_size (DeepSeek-V3/R1, Qwen3 FP8). Per-tensor and
 * per-channel scales, fbgemm_fp8 and compressed-tensors are refused with a message that says so. */
#include "plan/arch_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCALE_SUFFIX "_scale_inv"

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static sl_status quant_ignored(sl_err *err, sl_arch *m, const json_t *q)
{
    const json_t *ig = json_object_get(q, "ignored_layers");
    if (ig == NULL || json_is_null(ig))
        ig = json_object_get(q, "modules_to_not_convert");
    if (ig == NULL || json_is_null(ig))
        return SL_OK;
    SL_CHECK(json_is_array(ig) && json_array_size(ig) <= 1000000, err, SL_E_CONFIG,
             "config quantization_config 'ignored_layers' is not a list of module names");
    m->quant.n_ignored = (int64_t)json_array_size(ig);
    m->quant.ignored = sl_arena_alloc(&m->arena, (size_t)m->quant.n_ignored * sizeof(char *) + 1);
    SL_CHECK(m->quant.ignored != NULL, err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < m->quant.n_ignored; i++) {
        const json_t *s = json_array_get(ig, (size_t)i);
        SL_CHECK(json_is_string(s), err, SL_E_CONFIG,
                 "config quantization_config 'ignored_layers' is not a list of module names");
        m->quant.ignored[i] = sl_arena_strndup(&m->arena, json_string_value(s), json_string_length(s));
        SL_CHECK(m->quant.ignored[i] != NULL, err, SL_E_NOMEM, "out of memory");
    }
    /* sorted: each of the up to E * L module names is looked up by binary search */
    qsort(m->quant.ignored, (size_t)m->quant.n_ignored, sizeof(char *), str_cmp);
    return SL_OK;
}

sl_status sl_arch_quant_parse(sl_err *err, sl_arch *m, const json_t *cfg)
{
    const json_t *q = json_object_get(cfg, "quantization_config");
    if (q == NULL || json_is_null(q))
        return SL_OK;
    SL_CHECK(json_is_object(q), err, SL_E_CONFIG, "config 'quantization_config' is not an object");
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    SL_CHECK(method != NULL, err, SL_E_CONFIG, "config quantization_config has no 'quant_method'");
    const json_t *bs = json_object_get(q, "weight_block_size");
    SL_CHECK(strcmp(method, "fp8") == 0 && bs != NULL && !json_is_null(bs), err, SL_E_UNSUPPORTED,
             "config quantization_config: quant_method '%.64s'%s is not supported yet (only 'fp8' "
             "with weight_block_size, 128x128 block scales)", method,
             strcmp(method, "fp8") == 0 ? " without weight_block_size (per-tensor scales)" : "");
    SL_CHECK(json_is_array(bs) && json_array_size(bs) == 2 &&
                 json_is_integer(json_array_get(bs, 0)) && json_is_integer(json_array_get(bs, 1)) &&
                 json_integer_value(json_array_get(bs, 0)) > 0 &&
                 json_integer_value(json_array_get(bs, 1)) > 0 &&
                 json_integer_value(json_array_get(bs, 0)) <= 65536 &&
                 json_integer_value(json_array_get(bs, 1)) <= 65536,
             err, SL_E_CONFIG, "config quantization_config 'weight_block_size' is not [bn, bk] of "
             "two positive integers up to 65536");
    const char *fmt = json_string_value(json_object_get(q, "fmt"));
    SL_CHECK(fmt == NULL || strcmp(fmt, "e4m3") == 0, err, SL_E_UNSUPPORTED,
             "config quantization_config 'fmt' '%.16s': only e4m3 FP8 weights are copied bit for bit "
             "(vLLM would convert e5m2 values)", fmt ? fmt : "");
    m->quant.on = 1;
    m->quant.bn = (uint64_t)json_integer_value(json_array_get(bs, 0));
    m->quant.bk = (uint64_t)json_integer_value(json_array_get(bs, 1));
    return quant_ignored(err, m, q);
}

/* A quantized linear layer: a 2-D ".weight" that is not an embedding (vocab) and that the table
 * does not mark "quant": false (routers, shared_expert_gate). */
static int quantizable(const sl_rule *r)
{
    const size_t n = strlen(r->tensor);
    return r->ndim == 2 && r->shard != SL_SHARD_VOCAB && !r->no_quant && n > 7 &&
           strcmp(r->tensor + n - 7, ".weight") == 0;
}

static int ignored_name(const sl_arch *m, const char *module)
{
    return bsearch(&module, m->quant.ignored, (size_t)m->quant.n_ignored, sizeof(char *), str_cmp) != NULL;
}

/* How many of the rule's modules (the tensor name without ".weight", per layer and expert) the
 * config lists, out of how many. */
static sl_status ignored_count(sl_err *err, sl_arch *m, const sl_rule *r, int64_t *hit, int64_t *all)
{
    *hit = *all = 0;
    if (m->quant.n_ignored == 0)
        return SL_OK;
    const int64_t nl = r->place == SL_PLACE_LAYER ? m->cfg.L : 1, ne = r->expert ? m->cfg.E : 1;
    sl_arena tmp = {0};
    for (int64_t l = 0; l < nl; l++) {
        for (int64_t e = 0; e < ne; e++) {
            char *name = (char *)(uintptr_t)sl_arch_name_format(&tmp, r->tensor, l, e);
            SL_CHECK(name != NULL, err, SL_E_NOMEM, "out of memory");
            name[strlen(name) - 7] = '\0';   /* the module: without ".weight" */
            *hit += ignored_name(m, name);
            (*all)++;
        }
        sl_arena_free(&tmp);
    }
    return SL_OK;
}

static const char *scale_name(sl_arena *a, const char *w)
{
    /* "<x>.weight" -> "<x>.weight_scale_inv"; vLLM's fused "experts.w13_weight" -> "..._scale_inv" */
    const size_t n = strlen(w);
    char *s = sl_arena_alloc(a, n + sizeof SCALE_SUFFIX);
    if (s) {
        memcpy(s, w, n);
        memcpy(s + n, SCALE_SUFFIX, sizeof SCALE_SUFFIX);
    }
    return s;
}

static sl_status scale_rule(sl_err *err, sl_arch *m, int32_t wi, sl_rule *s)
{
    const sl_rule *w = &m->rules[wi];
    *s = *w;
    s->tensor = scale_name(&m->arena, w->tensor);
    s->param = scale_name(&m->arena, w->param);
    SL_CHECK(s->tensor && s->param, err, SL_E_NOMEM, "out of memory");
    s->shape[0] = (w->shape[0] + m->quant.bn - 1) / m->quant.bn;
    s->shape[1] = (w->shape[1] + m->quant.bk - 1) / m->quant.bk;
    s->dim_expr[0] = s->dim_expr[1] = "cdiv";
    s->dtype = SL_DTYPE_F32;
    s->scale_of = wi;
    return SL_OK;
}

sl_status sl_arch_quant_rules(sl_err *err, sl_arch *m, int32_t cap)
{
    if (!m->quant.on)
        return SL_OK;
    const int32_t n = m->n_rules;
    for (int32_t i = 0; i < n; i++) {
        sl_rule *r = &m->rules[i];
        if (!quantizable(r))
            continue;
        int64_t hit = 0, all = 0;
        SL_TRY(ignored_count(err, m, r, &hit, &all));
        SL_CHECK(hit == 0 || hit == all, err, SL_E_UNSUPPORTED, "rule '%s': quantization_config "
                 "ignores %lld of its %lld modules; a rule quantized in some layers only is not "
                 "supported yet", r->tensor, (long long)hit, (long long)all);
        if (hit > 0)
            continue;   /* kept in the model dtype */
        r->dtype = SL_DTYPE_F8_E4M3;
        SL_CHECK(m->n_rules < cap, err, SL_E_CONFIG, "rule table has too many rules");
        SL_TRY(scale_rule(err, m, i, &m->rules[m->n_rules]));
        m->n_rules++;
    }
    return SL_OK;
}
