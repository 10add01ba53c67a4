/* arch_quant.c - FP8 checkpoints (SHARDING-MOE-FP8.md, "FP8 checkpoints"): the config's
 * quantization_config, which rules are quantized linear layers, and the scale tensors each of them
 * brings, added to the table as rules of their own so that the planner binds, shards and
 * synthesizes them like any tensor:
 *
 *   quant_method                                  scale beside <x>.weight            input scale
 *   fp8 with weight_block_size [bn, bk]           <x>.weight_scale_inv [cdiv(out, bn), cdiv(in, bk)]
 *   fp8 without it (per-tensor)                   <x>.weight_scale []                <x>.input_scale [] (static)
 *   fbgemm_fp8 (per-channel)                      <x>.weight_scale [out, 1]
 *   compressed-tensors, float 8-bit weights,      <x>.weight_scale [1] / [out, 1] /  <x>.input_scale [1] (static)
 *     strategy tensor / channel / block             [cdiv(out, bn), cdiv(in, bk)]
 *
 * Every scale is F32 in the plan (BF16/F16 widened exactly). */
#include "plan/arch_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUFFIX_BLOCK "_scale_inv"
#define SUFFIX_SCALE "_scale"

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- quantization_config ---------------------------------------------------------------------- */

static sl_status ignored_entry(sl_err *err, sl_arch *m, const char *key, const json_t *s, int64_t i)
{
    SL_CHECK(json_is_string(s), err, SL_E_CONFIG, "config quantization_config '%s' is not a list of "
             "module names", key);
    const char *v = json_string_value(s);
    /* compressed-tensors writes regular expressions as "re:<pattern>"; an exact-name lookup would
     * quietly quantize the layers they meant to keep */
    SL_CHECK(strncmp(v, "re:", 3) != 0, err, SL_E_UNSUPPORTED, "config quantization_config '%s' entry "
             "'%.128s' is a regular expression: only exact module names are supported yet", key, v);
    m->quant.ignored[i] = sl_arena_strndup(&m->arena, v, json_string_length(s));
    SL_CHECK(m->quant.ignored[i] != NULL, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

/* A list key that names nothing: absent, null or [] (vLLM's Fp8Config.from_config falls back to
 * modules_to_not_convert when ignored_layers is falsy, so an empty list does not stop it). */
static int ignored_none(const json_t *ig)
{
    return ig == NULL || json_is_null(ig) || (json_is_array(ig) && json_array_size(ig) == 0);
}

static sl_status quant_ignored(sl_err *err, sl_arch *m, const json_t *q)
{
    static const char *const keys[] = {"ignored_layers", "modules_to_not_convert", "ignore"};
    const json_t *ig = NULL;
    const char *key = NULL;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0] && ignored_none(ig); k++)
        ig = json_object_get(q, key = keys[k]);
    if (ignored_none(ig))
        return SL_OK;
    SL_CHECK(json_is_array(ig) && json_array_size(ig) <= 1000000, err, SL_E_CONFIG,
             "config quantization_config '%s' is not a list of module names", key);
    m->quant.n_ignored = (int64_t)json_array_size(ig);
    m->quant.ignored = sl_arena_alloc(&m->arena, (size_t)m->quant.n_ignored * sizeof(char *) + 1);
    SL_CHECK(m->quant.ignored != NULL, err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < m->quant.n_ignored; i++)
        SL_TRY(ignored_entry(err, m, key, json_array_get(ig, (size_t)i), i));
    /* sorted: each of the up to E * L module names is looked up by binary search */
    qsort(m->quant.ignored, (size_t)m->quant.n_ignored, sizeof(char *), str_cmp);
    return SL_OK;
}

static sl_status block_size(sl_err *err, sl_arch *m, const json_t *bs, const char *key)
{
    SL_CHECK(json_is_array(bs) && json_array_size(bs) == 2 &&
                 json_is_integer(json_array_get(bs, 0)) && json_is_integer(json_array_get(bs, 1)) &&
                 json_integer_value(json_array_get(bs, 0)) > 0 &&
                 json_integer_value(json_array_get(bs, 1)) > 0 &&
                 json_integer_value(json_array_get(bs, 0)) <= 65536 &&
                 json_integer_value(json_array_get(bs, 1)) <= 65536,
             err, SL_E_CONFIG, "config quantization_config '%s' is not [bn, bk] of two positive "
             "integers up to 65536", key);
    m->quant.scheme = SL_QUANT_BLOCK;
    m->quant.bn = (uint64_t)json_integer_value(json_array_get(bs, 0));
    m->quant.bk = (uint64_t)json_integer_value(json_array_get(bs, 1));
    return SL_OK;
}

/* quant_method "fp8" (Fp8Config.from_config): block scales with weight_block_size, else one scale
 * per tensor; activation_scheme static adds input scales (absent: dynamic). */
static sl_status parse_fp8(sl_err *err, sl_arch *m, const json_t *q)
{
    const json_t *bs = json_object_get(q, "weight_block_size");
    const char *fmt = json_string_value(json_object_get(q, "fmt"));
    SL_CHECK(fmt == NULL || strcmp(fmt, "e4m3") == 0, err, SL_E_UNSUPPORTED,
             "config quantization_config 'fmt' '%.16s': only e4m3 FP8 weights are copied bit for bit "
             "(vLLM would convert e5m2 values)", fmt ? fmt : "");
    const json_t *as = json_object_get(q, "activation_scheme");
    const char *act = json_is_string(as) ? json_string_value(as) : "dynamic";
    SL_CHECK((as == NULL || json_is_string(as)) && (!strcmp(act, "static") || !strcmp(act, "dynamic")),
             err, SL_E_CONFIG, "config quantization_config: Unsupported activation scheme %.32s",
             json_is_string(as) ? act : "(not a string)");
    m->quant.input_static = strcmp(act, "static") == 0;
    m->quant.scale_suffix = SUFFIX_SCALE;
    if (bs == NULL || json_is_null(bs)) {   /* AutoFP8: 0-d scales */
        m->quant.scheme = SL_QUANT_TENSOR;
        m->quant.scalar = 1;
        return SL_OK;
    }
    SL_CHECK(!m->quant.input_static, err, SL_E_UNSUPPORTED, "config quantization_config: The "
             "block-wise quantization only supports dynamic activation scheme for now, but got static "
             "activation scheme.");
    m->quant.scale_suffix = SUFFIX_BLOCK;
    m->quant.mismatch_ok = 1;   /* compressed-tensors' config has no weight_block_size: no */
    return block_size(err, m, bs, "weight_block_size");
}

/* One config_groups entry's "weights" of compressed-tensors: float 8-bit, strategy tensor,
 * channel or block. */
static sl_status ct_weights(sl_err *err, sl_arch *m, const json_t *w)
{
    SL_CHECK(json_is_object(w), err, SL_E_UNSUPPORTED, "config quantization_config "
             "(compressed-tensors): a config group without \"weights\" is not an FP8 scheme");
    const char *type = json_string_value(json_object_get(w, "type"));
    const json_t *bits = json_object_get(w, "num_bits");
    const char *strat = json_string_value(json_object_get(w, "strategy"));
    SL_CHECK(type && !strcmp(type, "float") && json_is_integer(bits) && json_integer_value(bits) == 8,
             err, SL_E_UNSUPPORTED, "config quantization_config (compressed-tensors): only float 8-bit "
             "weights (FP8) are supported, not %s %lld-bit", type ? type : "?",
             json_is_integer(bits) ? (long long)json_integer_value(bits) : 0ll);
    if (strat && !strcmp(strat, "tensor"))
        m->quant.scheme = SL_QUANT_TENSOR;
    else if (strat && !strcmp(strat, "channel"))
        m->quant.scheme = SL_QUANT_CHANNEL;
    else if (strat && !strcmp(strat, "block"))
        return block_size(err, m, json_object_get(w, "block_structure"), "block_structure");
    else
        return sl_err_set(err, SL_E_UNSUPPORTED, "config quantization_config (compressed-tensors): "
                          "weight strategy '%.32s' is not supported (tensor, channel or block)",
                          strat ? strat : "?");
    return SL_OK;
}

static sl_status ct_inputs(sl_err *err, sl_arch *m, const json_t *a)
{
    if (a == NULL || json_is_null(a))
        return SL_OK;
    const json_t *dyn = json_object_get(a, "dynamic");
    const char *strat = json_string_value(json_object_get(a, "strategy"));
    SL_CHECK(json_is_object(a) && json_is_boolean(dyn), err, SL_E_CONFIG, "config "
             "quantization_config (compressed-tensors): \"input_activations\" needs \"dynamic\" true or false");
    m->quant.input_static = json_is_false(dyn);
    SL_CHECK(!m->quant.input_static || (strat && !strcmp(strat, "tensor")), err, SL_E_UNSUPPORTED,
             "config quantization_config (compressed-tensors): static input activations with strategy "
             "'%.32s': only per-tensor static input scales are supported", strat ? strat : "?");
    SL_CHECK(!m->quant.input_static || m->quant.scheme != SL_QUANT_BLOCK, err, SL_E_UNSUPPORTED,
             "config quantization_config: The block-wise quantization only supports dynamic "
             "activation scheme for now, but got static activation scheme.");
    return SL_OK;
}

static sl_status ct_targets(sl_err *err, const json_t *g)
{
    const json_t *t = json_object_get(g, "targets");
    for (size_t i = 0; i < json_array_size(t); i++) {
        const char *s = json_string_value(json_array_get(t, i));
        SL_CHECK(s && !strcmp(s, "Linear"), err, SL_E_UNSUPPORTED, "config quantization_config "
                 "(compressed-tensors): target '%.128s' is not supported yet (only \"Linear\")",
                 s ? s : "?");
    }
    return SL_OK;
}

/* compressed-tensors: every config group must describe the one FP8 scheme the whole model has. */
static sl_status parse_ct(sl_err *err, sl_arch *m, const json_t *q)
{
    const char *fmt = json_string_value(json_object_get(q, "format"));
    SL_CHECK(fmt == NULL || !strcmp(fmt, "float-quantized"), err, SL_E_UNSUPPORTED, "config "
             "quantization_config (compressed-tensors): format '%.32s' is not supported (only "
             "float-quantized FP8)", fmt);
    const json_t *groups = json_object_get(q, "config_groups");
    SL_CHECK(json_is_object(groups) && json_object_size(groups) > 0, err, SL_E_CONFIG, "config "
             "quantization_config (compressed-tensors) has no \"config_groups\"");
    const char *name;
    const json_t *g;
    int first = 1;
    sl_quant_scheme scheme = SL_QUANT_TENSOR;
    int input = 0;
    uint64_t bn = 0, bk = 0;
    json_object_foreach((json_t *)(uintptr_t)groups, name, g) {
        SL_TRY(ct_targets(err, g));
        SL_TRY(ct_weights(err, m, json_object_get(g, "weights")));
        SL_TRY(ct_inputs(err, m, json_object_get(g, "input_activations")));
        SL_CHECK(first || (scheme == m->quant.scheme && input == m->quant.input_static &&
                           bn == m->quant.bn && bk == m->quant.bk),
                 err, SL_E_UNSUPPORTED, "config quantization_config (compressed-tensors): config "
                 "group '%.64s' differs from the others; one scheme for the whole model is supported", name);
        first = 0;
        scheme = m->quant.scheme;
        input = m->quant.input_static;
        bn = m->quant.bn;
        bk = m->quant.bk;
    }
    m->quant.scale_suffix = SUFFIX_SCALE;   /* blocks too: "weight_scale", not "_inv" */
    return SL_OK;
}

static sl_status parse_method(sl_err *err, sl_arch *m, const json_t *q, const char *method)
{
    if (!strcmp(method, "fp8"))
        return parse_fp8(err, m, q);
    if (!strcmp(method, "fbgemm_fp8")) {   /* per-channel weights, dynamic activations */
        m->quant.scheme = SL_QUANT_CHANNEL;
        m->quant.scale_suffix = SUFFIX_SCALE;
        return SL_OK;
    }
    if (!strcmp(method, "compressed-tensors"))
        return parse_ct(err, m, q);
    return sl_err_set(err, SL_E_UNSUPPORTED, "config quantization_config: quant_method '%.64s' is not "
                      "supported (FP8 only: fp8, fbgemm_fp8, compressed-tensors)", method);
}

sl_status sl_arch_quant_parse(sl_err *err, sl_arch *m, const json_t *cfg)
{
    const json_t *q = json_object_get(cfg, "quantization_config");
    if (q == NULL || json_is_null(q))
        return SL_OK;
    SL_CHECK(json_is_object(q), err, SL_E_CONFIG, "config 'quantization_config' is not an object");
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    SL_CHECK(method != NULL, err, SL_E_CONFIG, "config quantization_config has no 'quant_method'");
    SL_TRY(parse_method(err, m, q, method));
    m->quant.on = 1;
    return quant_ignored(err, m, q);
}

/* ---- the scale rules -------------------------------------------------------------------------- */

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

/* ---- routed experts: vLLM skips a whole MoE block ----------------------------------------------
 * vLLM quantizes a FusedMoE layer as one (quant_utils.is_layer_skipped, its "experts" branch):
 * with "experts" in the block's prefix ("model.layers.3.mlp.experts"), the block stays unquantized
 * when an ignored entry that has "experts" in it contains the prefix as a substring, the block's
 * own name or any of its experts' modules ("model.layers.3.mlp.experts.0.gate_proj"); a prefix
 * without "experts" (a --rules table's) must be listed as it is. */

/* An {e} rule's block, vLLM's FusedMoE prefix: the tensor pattern before ".{e}"
 * ("model.layers.{i}.mlp.experts"), malloc'ed. */
static char *block_pattern(const char *tensor)
{
    const char *e = strstr(tensor, "{e}");
    size_t n = e ? (size_t)(e - tensor) : strlen(tensor);
    n -= n > 0 && tensor[n - 1] == '.';
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, tensor, n);
        s[n] = '\0';
    }
    return s;
}

/* Sets skip[l] for each layer l whose block name (pat at layer l) entry s contains: wherever the
 * pattern's text before its first {i} occurs in s, the digits after it are tried as l (1, 12,
 * 123: "model.layers.1.mlp.experts" is not in "model.layers.12.mlp.experts.0.up_proj", the
 * formatted name decides). -1 when out of memory. */
static int block_scan(const sl_arch *m, const char *pat, const char *s, uint8_t *skip)
{
    const char *brace = strstr(pat, "{i}");
    if (brace == NULL) {   /* one name for every layer */
        if (strstr(s, pat))
            memset(skip, 1, (size_t)m->cfg.L);
        return 0;
    }
    const size_t head = (size_t)(brace - pat);
    sl_arena names = {0};
    for (const char *at = s; *at; at++) {
        if (strncmp(at, pat, head) != 0)
            continue;
        const char *d = at + head;
        int64_t l = 0;
        for (int k = 0; d[k] >= '0' && d[k] <= '9' && !(k > 0 && d[0] == '0'); k++) {
            if ((l = l * 10 + (d[k] - '0')) >= m->cfg.L)
                break;
            const char *name = sl_arch_name_format(&names, pat, l, 0);
            if (name == NULL) {
                sl_arena_free(&names);
                return -1;
            }
            skip[l] |= strncmp(at, name, strlen(name)) == 0;
        }
        sl_arena_free(&names);
    }
    return 0;
}

/* skip[l] for the layers of {e} rule ri whose block the config ignores. */
static sl_status block_skips(sl_err *err, const sl_arch *m, int32_t ri, uint8_t *skip)
{
    char *pat = block_pattern(m->rules[ri].tensor);
    SL_CHECK(pat != NULL, err, SL_E_NOMEM, "out of memory");
    int bad = 0;
    if (strstr(pat, "experts")) {
        for (int64_t i = 0; !bad && i < m->quant.n_ignored; i++)
            bad = strstr(m->quant.ignored[i], "experts") && block_scan(m, pat, m->quant.ignored[i], skip) < 0;
    } else {
        sl_arena names = {0};
        for (int64_t l = 0; !bad && l < m->cfg.L; l++) {
            const char *name = sl_arch_name_format(&names, pat, l, 0);
            bad = name == NULL;
            skip[l] = !bad && ignored_name(m, name);
        }
        sl_arena_free(&names);
    }
    free(pat);
    SL_CHECK(!bad, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

/* Whether quantization_config lists rule r's module at layer l (its tensor's name there without
 * ".weight"; quantizable() saw the suffix) into *ign. */
static sl_status module_ignored(sl_err *err, const sl_arch *m, const sl_rule *r, int64_t l, int *ign)
{
    sl_arena tmp = {0};
    char *name = (char *)(uintptr_t)sl_arch_name_format(&tmp, r->tensor, l, 0);
    if (!name) {
        sl_arena_free(&tmp);
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    name[strlen(name) - 7] = '\0';
    *ign = ignored_name(m, name);
    sl_arena_free(&tmp);
    return SL_OK;
}

/* ign[l] = 1 where quantization_config lists rule ri's module (the tensor name without
 * ".weight"; for an {e} rule its layer's MoE block) at a layer l that has the rule, else 0; one
 * entry, l = 0, for a rule that is not per-layer. */
static sl_status ignored_layers(sl_err *err, const sl_arch *m, int32_t ri, uint8_t *ign)
{
    const sl_rule *r = &m->rules[ri];
    const int64_t nl = r->place == SL_PLACE_LAYER ? m->cfg.L : 1;
    if (r->expert) {   /* block_skips marks the listed layers only */
        for (int64_t l = 0; l < nl; l++)
            ign[l] = 0;
        return block_skips(err, m, ri, ign);
    }
    for (int64_t l = 0; l < nl; l++) {
        int listed = 0;
        if (sl_arch_rule_at(m, ri, l))
            SL_TRY(module_ignored(err, m, r, l, &listed));
        ign[l] = (uint8_t)listed;
    }
    return SL_OK;
}

/* How many of rule ri's modules (at each layer that has it; for an {e} rule its MoE blocks, one a
 * layer) the config lists, out of how many, and which (ign, as ignored_layers). *named counts
 * the tensors of the rules so far, so past SL_MAX_TENSORS the config is refused before they are
 * named (65,536 experts at 1,000 layers took 120 s here, at 100,000 layers it would take hours,
 * before the tensor bound of sl_arch_tensors_build refused it). */
static sl_status ignored_count(sl_err *err, sl_arch *m, int32_t ri, int64_t *named, uint8_t *ign,
                               int64_t *hit, int64_t *all)
{
    const sl_rule *r = &m->rules[ri];
    *hit = *all = 0;
    if (m->quant.n_ignored == 0)
        return SL_OK;
    const int64_t nl = r->place == SL_PLACE_LAYER ? m->cfg.L : 1, ne = r->expert ? m->cfg.E : 1;
    int64_t layers = 0;
    for (int64_t l = 0; l < nl; l++)
        layers += sl_arch_rule_at(m, ri, l);
    /* layers <= 100,000 and ne <= 65,536: no overflow */
    *named += layers * ne;
    SL_CHECK(*named <= SL_MAX_TENSORS, err, SL_E_CONFIG, "the config implies more than %d tensors "
             "(num_hidden_layers %lld, %lld experts): no real model has this many", SL_MAX_TENSORS,
             (long long)m->cfg.L, (long long)m->cfg.E);
    SL_TRY(ignored_layers(err, m, ri, ign));
    for (int64_t l = 0; l < nl; l++) {
        if (sl_arch_rule_at(m, ri, l)) {
            *hit += ign[l];
            (*all)++;
        }
    }
    return SL_OK;
}

/* w with its last `cut` characters replaced by add, in the arena: "<x>.weight" ->
 * "<x>.weight_scale" (cut 0) or "<x>.input_scale" (cut 6); vLLM's fused "experts.w13_weight" ->
 * "experts.w13_weight_scale", "experts.w13_input_scale". */
static const char *name_with(sl_arena *a, const char *w, size_t cut, const char *add)
{
    const size_t n = strlen(w) - cut, k = strlen(add);
    char *s = sl_arena_alloc(a, n + k + 1);
    if (s) {
        memcpy(s, w, n);
        memcpy(s + n, add, k + 1);
    }
    return s;
}

static sl_status scale_rule(sl_err *err, sl_arch *m, int32_t wi, sl_scale_kind kind, sl_rule *s)
{
    const sl_rule *w = &m->rules[wi];
    const int input = kind == SL_SCALE_INPUT;
    const size_t np = strlen(w->param);
    SL_CHECK(!input || (np >= 6 && !strcmp(w->param + np - 6, "weight")), err, SL_E_CONFIG,
             "rule '%s': param '%s' does not end in \"weight\", so its input_scale has no name",
             w->tensor, w->param);
    *s = *w;
    s->tensor = name_with(&m->arena, w->tensor, input ? 6 : 0, input ? "input_scale" : m->quant.scale_suffix);
    s->param = name_with(&m->arena, w->param, input ? 6 : 0, input ? "input_scale" : m->quant.scale_suffix);
    SL_CHECK(s->tensor && s->param, err, SL_E_NOMEM, "out of memory");
    s->dtype = SL_DTYPE_F32;
    s->scale_of = wi;
    s->scale_kind = kind;
    if (kind == SL_SCALE_BLOCK) {
        s->shape[0] = (w->shape[0] + m->quant.bn - 1) / m->quant.bn;
        s->shape[1] = (w->shape[1] + m->quant.bk - 1) / m->quant.bk;
        s->dim_expr[0] = s->dim_expr[1] = "cdiv";
    } else if (kind == SL_SCALE_CHANNEL) {
        /* [out, 1]: a row layer's output is not split, so its scale is whole on every rank */
        s->shape[1] = 1;
        s->dim_expr[1] = "1";
        if (w->shard == SL_SHARD_ROW)
            s->shard = SL_SHARD_REPLICATED;
    } else {   /* one element, whatever the slot's size */
        s->ndim = 1;
        s->shape[0] = 1;
        s->dim_expr[0] = "1";
    }
    return SL_OK;
}

static sl_scale_kind weight_scale_kind(const sl_arch *m)
{
    switch (m->quant.scheme) {
    case SL_QUANT_BLOCK: return SL_SCALE_BLOCK;
    case SL_QUANT_TENSOR: return SL_SCALE_TENSOR;
    case SL_QUANT_CHANNEL: return SL_SCALE_CHANNEL;
    }
    return SL_SCALE_NONE;
}

static sl_status add_scale(sl_err *err, sl_arch *m, int32_t wi, sl_scale_kind kind, int32_t cap)
{
    SL_CHECK(m->n_rules < cap, err, SL_E_CONFIG, "rule table has too many rules");
    SL_TRY(scale_rule(err, m, wi, kind, &m->rules[m->n_rules]));
    m->n_rules++;
    return SL_OK;
}

/* Rule ri, which quantization_config lists in some of its layers only: vLLM's Fp8Config asks
 * is_layer_skipped of each layer's module, so those layers keep the model dtype and the others
 * are FP8. ri becomes the FP8 form at the other layers; a twin in the model dtype, its own
 * parameter group (arch.c), takes the listed ones (listed: ignored_layers'). */
static sl_status quant_split(sl_err *err, sl_arch *m, int32_t ri, const uint8_t *listed, int32_t cap)
{
    const size_t L = (size_t)m->cfg.L;
    uint8_t *ign = sl_arena_alloc(&m->arena, 2 * L), *fp8 = ign ? ign + L : NULL;
    SL_CHECK(ign != NULL, err, SL_E_NOMEM, "out of memory");
    memcpy(ign, listed, L);
    for (size_t l = 0; l < L; l++)
        fp8[l] = !ign[l];
    SL_CHECK(m->n_rules < cap, err, SL_E_CONFIG, "rule table has too many rules");
    sl_rule *twin = &m->rules[m->n_rules++];
    *twin = m->rules[ri];
    twin->at_layer = ign;
    twin->quant_twin = 1;
    m->rules[ri].at_layer = fp8;
    return SL_OK;
}

/* Rule i made FP8 (with its scales), kept in the model dtype where the config lists it at every
 * layer, or split where it lists it at some (ign: scratch of L bytes). */
static sl_status quant_rule(sl_err *err, sl_arch *m, int32_t i, int64_t *named, uint8_t *ign,
                            int32_t cap)
{
    int64_t hit = 0, all = 0;
    SL_TRY(ignored_count(err, m, i, named, ign, &hit, &all));
    if (hit == all && hit > 0)
        return SL_OK;   /* kept in the model dtype */
    if (hit > 0)
        SL_TRY(quant_split(err, m, i, ign, cap));
    sl_rule *r = &m->rules[i];
    /* CompressedTensorsW8A8Fp8MoEMethod's check: no per-channel weights with static inputs */
    SL_CHECK(!r->expert || m->quant.scheme != SL_QUANT_CHANNEL || !m->quant.input_static, err,
             SL_E_UNSUPPORTED, "parameter '%s': For FP8 Fused MoE layer, we require either per "
             "tensor or channelwise, dynamic per token quantization.", r->param);
    r->dtype = SL_DTYPE_F8_E4M3;
    SL_TRY(add_scale(err, m, i, weight_scale_kind(m), cap));
    if (m->quant.input_static)
        SL_TRY(add_scale(err, m, i, SL_SCALE_INPUT, cap));
    return SL_OK;
}

sl_status sl_arch_quant_rules(sl_err *err, sl_arch *m, int32_t cap)
{
    if (!m->quant.on)
        return SL_OK;
    const int32_t n = m->n_rules;
    int64_t named = 0;
    uint8_t *ign = malloc((size_t)m->cfg.L + 1);
    SL_CHECK(ign != NULL, err, SL_E_NOMEM, "out of memory");
    sl_status st = SL_OK;
    for (int32_t i = 0; i < n && st == SL_OK; i++) {
        if (quantizable(&m->rules[i]))
            st = quant_rule(err, m, i, &named, ign, cap);
    }
    free(ign);
    return st;
}

int sl_arch_scale_scalar(const sl_rule *r)
{
    return r->scale_kind == SL_SCALE_TENSOR || r->scale_kind == SL_SCALE_INPUT;
}

int sl_arch_input_scale_dup(const sl_rule *r)
{
    return r->scale_kind == SL_SCALE_INPUT && r->expert && r->slot > 0;
}
