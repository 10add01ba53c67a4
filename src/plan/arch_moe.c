/* arch_moe.c - what a rule table adds for mixture-of-experts models (docs/rules.md): symbols read
 * from config keys, which layers are MoE layers, and the per-rule keys "layers" and "when" and the
 * expert index {e}.
 *
 * The layer rule is data, not code, because the families disagree: Mixtral makes every layer an
 * MoE layer, Qwen2/3-MoE use decoder_sparse_step and mlp_only_layers, DeepSeek first_k_dense_replace
 * and moe_layer_freq (SHARDING-MOE-FP8.md, "Models and the config keys"). Every value comes from a
 * user file and is checked before it is used. */
#include "plan/arch_config.h"

#include <stdio.h>
#include <string.h>

static const char *const builtin_syms[] = {"H", "nh", "K", "D", "I", "V", "L"};

static int listed(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, list[i]) == 0)
            return 1;
    }
    return 0;
}

static sl_status keys_check(sl_err *err, const json_t *obj, const char *what,
                            const char *const *keys, size_t n)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)(uintptr_t)obj, key, v) {
        SL_CHECK(listed(key, keys, n), err, SL_E_CONFIG, "%s: unknown key \"%s\"", what, key);
    }
    return SL_OK;
}

/* ---- "symbols": {"E": "num_local_experts", "Is": {"key": "...", "default": 0}} ---------------- */

static int sym_name_ok(const char *s)
{
    const size_t n = strlen(s);
    if (n == 0 || n >= SL_ARCH_SYM_LEN || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
        return 0;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

int sl_arch_sym_find(const sl_arch_config *c, const char *s, size_t n)
{
    for (int32_t i = 0; i < c->n_syms; i++) {
        if (strlen(c->sym_name[i]) == n && memcmp(c->sym_name[i], s, n) == 0)
            return i;
    }
    return -1;
}

/* The config key a symbol reads: "key" is a name or a list of names, the first one the config has
 * (transformers' aliases: Qwen3-MoE's num_experts is written as num_local_experts by transformers
 * 5), else the first, for the message that it is missing. */
static sl_status sym_key_pick(sl_err *err, const char *name, const json_t *key, const json_t *cfg,
                              const json_t **out)
{
    if (json_is_string(key)) {
        *out = key;
        return SL_OK;
    }
    SL_CHECK(json_is_array(key) && json_array_size(key) > 0, err, SL_E_CONFIG, "rule table symbol "
             "'%s' needs a config key (a string or a list of strings, alone or as {\"key\": ...})",
             name);
    size_t k;
    const json_t *v;
    *out = NULL;
    json_array_foreach((json_t *)(uintptr_t)key, k, v) {
        SL_CHECK(json_is_string(v), err, SL_E_CONFIG, "rule table symbol '%s': \"key\"[%zu] is not "
                 "a string", name, k);
        const json_t *cv = json_object_get(cfg, json_string_value(v));
        if (*out == NULL && cv != NULL && !json_is_null(cv))
            *out = v;
    }
    if (*out == NULL)
        *out = json_array_get(key, 0);
    return SL_OK;
}

/* An "equals" symbol's value when the config lacks its key: "default" is the string assumed then,
 * or an object of such strings by architecture (what that architecture's transformers config class
 * assumes: DeepSeek-V3's topk_method is "noaux_tc", V2's "greedy"); NULL when none applies. */
static sl_status sym_equals_default(sl_err *err, const char *name, const json_t *dflt,
                                    const char *arch, const char **out)
{
    *out = NULL;
    if (dflt == NULL)
        return SL_OK;
    if (json_is_string(dflt)) {
        *out = json_string_value(dflt);
        return SL_OK;
    }
    SL_CHECK(json_is_object(dflt), err, SL_E_CONFIG, "rule table symbol '%s': \"default\" of an "
             "\"equals\" symbol must be a string or an object of strings by architecture", name);
    const char *a;
    const json_t *v;
    json_object_foreach((json_t *)(uintptr_t)dflt, a, v) {
        SL_CHECK(json_is_string(v), err, SL_E_CONFIG, "rule table symbol '%s': \"default\" for "
                 "'%s' is not a string", name, a);
        if (arch && strcmp(a, arch) == 0)
            *out = json_string_value(v);
    }
    return SL_OK;
}

static sl_status sym_add(sl_err *err, sl_arch *m, const char *name, const json_t *v, const json_t *cfg)
{
    sl_arch_config *c = &m->cfg;
    SL_CHECK(sym_name_ok(name), err, SL_E_CONFIG, "rule table symbol '%s' is not a name of 1 to %d "
             "letters, digits or _", name, SL_ARCH_SYM_LEN - 1);
    SL_CHECK(!listed(name, builtin_syms, sizeof builtin_syms / sizeof builtin_syms[0]), err,
             SL_E_CONFIG, "rule table symbol '%s' is built in", name);
    SL_CHECK(c->n_syms < SL_ARCH_MAX_SYMS, err, SL_E_CONFIG, "rule table has more than %d symbols",
             SL_ARCH_MAX_SYMS);
    const json_t *key = v, *dflt = NULL, *eq = NULL;
    if (json_is_object(v)) {
        static const char *const keys[] = {"key", "default", "equals"};
        char what[64];
        snprintf(what, sizeof what, "rule table symbol '%s'", name);
        SL_TRY(keys_check(err, v, what, keys, 3));
        key = json_object_get(v, "key");
        dflt = json_object_get(v, "default");
        eq = json_object_get(v, "equals");
        SL_CHECK(eq == NULL || json_is_string(eq), err, SL_E_CONFIG,
                 "rule table symbol '%s': \"equals\" must be a string", name);
        /* the range of a config value (sl_arch_config_sym): a default is used as one */
        SL_CHECK(eq != NULL || dflt == NULL ||
                     (json_is_integer(dflt) && json_integer_value(dflt) >= 0 &&
                      json_integer_value(dflt) <= (json_int_t)1 << 40),
                 err, SL_E_CONFIG, "rule table symbol '%s': \"default\" must be an integer in "
                 "[0, 2^40]", name);
    }
    SL_CHECK(key != NULL, err, SL_E_CONFIG, "rule table symbol '%s' needs a config key (a string, "
             "or {\"key\": ..., \"default\": N})", name);
    SL_TRY(sym_key_pick(err, name, key, cfg, &key));
    const int32_t i = c->n_syms;
    snprintf(c->sym_name[i], SL_ARCH_SYM_LEN, "%s", name);
    c->sym_key[i] = sl_arena_strndup(&m->arena, json_string_value(key), json_string_length(key));
    SL_CHECK(c->sym_key[i] != NULL, err, SL_E_NOMEM, "out of memory");
    if (eq) {   /* 1 when the config's string equals it (DeepSeek's topk_method "noaux_tc"), else 0 */
        const json_t *cv = json_object_get(cfg, c->sym_key[i]);
        const char *s = json_is_string(cv) ? json_string_value(cv) : NULL;
        const char *absent = NULL;
        SL_TRY(sym_equals_default(err, name, dflt, c->architecture, &absent));
        if (cv == NULL || json_is_null(cv))
            s = absent;
        c->sym_val[i] = s != NULL && strcmp(s, json_string_value(eq)) == 0;
    } else {
        SL_TRY(sl_arch_config_sym(err, cfg, c->sym_key[i],
                                  dflt ? (int64_t)json_integer_value(dflt) : -1, &c->sym_val[i]));
    }
    c->n_syms++;
    return SL_OK;
}

static sl_status syms_parse(sl_err *err, sl_arch *m, const json_t *syms, const json_t *cfg)
{
    if (syms == NULL)
        return SL_OK;
    SL_CHECK(json_is_object(syms), err, SL_E_CONFIG, "rule table \"symbols\" is not an object");
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)(uintptr_t)syms, name, v) {
        SL_CHECK(sl_arch_sym_find(&m->cfg, name, strlen(name)) < 0, err, SL_E_CONFIG,
                 "rule table symbol '%s' is declared twice", name);
        SL_TRY(sym_add(err, m, name, v, cfg));
    }
    return SL_OK;
}

/* ---- "moe": which layers are MoE layers ------------------------------------------------------- */

typedef struct moe_keys {
    int64_t step, freq, first;
    const json_t *dense;          /* the config's list of dense layers, or NULL */
    const char *dense_key;
} moe_keys;

static sl_status moe_key(sl_err *err, const json_t *moe, const json_t *cfg, const char *what,
                         int64_t dflt, int64_t lo, int64_t *out)
{
    const json_t *k = json_object_get(moe, what);
    *out = dflt;
    if (k == NULL)
        return SL_OK;
    SL_CHECK(json_is_string(k), err, SL_E_CONFIG, "rule table \"moe\": \"%s\" must be a config key",
             what);
    SL_TRY(sl_arch_config_sym(err, cfg, json_string_value(k), dflt, out));
    SL_CHECK(*out >= lo, err, SL_E_CONFIG, "config '%s' is %lld; it must be at least %lld",
             json_string_value(k), (long long)*out, (long long)lo);
    return SL_OK;
}

static sl_status moe_dense_list(sl_err *err, const json_t *moe, const json_t *cfg, moe_keys *k)
{
    const json_t *key = json_object_get(moe, "dense_layers");
    k->dense = NULL;
    if (key == NULL)
        return SL_OK;
    SL_CHECK(json_is_string(key), err, SL_E_CONFIG,
             "rule table \"moe\": \"dense_layers\" must be a config key");
    k->dense_key = json_string_value(key);
    const json_t *v = json_object_get(cfg, k->dense_key);
    if (v == NULL || json_is_null(v))
        return SL_OK;
    SL_CHECK(json_is_array(v), err, SL_E_CONFIG, "config '%s' is not a list of layer numbers",
             k->dense_key);
    for (size_t i = 0; i < json_array_size(v); i++)
        SL_CHECK(json_is_integer(json_array_get(v, i)), err, SL_E_CONFIG,
                 "config '%s' is not a list of layer numbers", k->dense_key);
    k->dense = v;
    return SL_OK;
}

/* The dense layers' list as one mark per layer, in one pass over it: a lookup in the list for each
 * layer cost L x its length (100,000 layers and a 200,000-entry mlp_only_layers, a 400 KB config,
 * took 195 s before the tensor bound refused it). Numbers that are not layers mark nothing. NULL
 * without a list. */
static sl_status dense_marks(sl_err *err, sl_arch *m, const json_t *list, const uint8_t **out)
{
    const int64_t L = m->cfg.L;
    *out = NULL;
    if (list == NULL)
        return SL_OK;
    uint8_t *d = sl_arena_alloc(&m->arena, (size_t)L + 1);
    SL_CHECK(d != NULL, err, SL_E_NOMEM, "out of memory");
    memset(d, 0, (size_t)L + 1);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_int_t l = json_integer_value(json_array_get(list, i));
        if (l >= 0 && l < L)
            d[l] = 1;
    }
    *out = d;
    return SL_OK;
}

static sl_status moe_parse(sl_err *err, sl_arch *m, const json_t *moe, const json_t *cfg)
{
    static const char *const keys[] = {"experts", "step", "freq", "first_dense", "dense_layers",
                                       "tp_at_most_experts"};
    const int64_t L = m->cfg.L;
    m->layer_moe = sl_arena_alloc(&m->arena, (size_t)L + 1);
    SL_CHECK(m->layer_moe != NULL, err, SL_E_NOMEM, "out of memory");
    memset(m->layer_moe, 0, (size_t)L + 1);
    if (moe == NULL)
        return SL_OK;
    SL_CHECK(json_is_object(moe), err, SL_E_CONFIG, "rule table \"moe\" is not an object");
    SL_TRY(keys_check(err, moe, "rule table \"moe\"", keys, sizeof keys / sizeof keys[0]));
    const json_t *e = json_object_get(moe, "experts");
    const int si = json_is_string(e) ? sl_arch_sym_find(&m->cfg, json_string_value(e),
                                                        json_string_length(e)) : -1;
    SL_CHECK(si >= 0, err, SL_E_CONFIG, "rule table \"moe\": \"experts\" must name a symbol of "
             "\"symbols\" (the config key of the routed expert count)");
    m->has_moe = 1;
    const json_t *cap = json_object_get(moe, "tp_at_most_experts");
    SL_CHECK(cap == NULL || json_is_boolean(cap), err, SL_E_CONFIG,
             "rule table \"moe\": \"tp_at_most_experts\" is not a boolean");
    m->tp_at_most_experts = json_is_true(cap);
    m->cfg.E = m->cfg.sym_val[si];
    SL_CHECK(m->cfg.E <= 65536, err, SL_E_CONFIG, "config '%s' is %lld, above 65536 experts",
             m->cfg.sym_key[si], (long long)m->cfg.E);
    moe_keys k = {0};
    SL_TRY(moe_key(err, moe, cfg, "step", 1, 1, &k.step));
    SL_TRY(moe_key(err, moe, cfg, "freq", 1, 1, &k.freq));
    SL_TRY(moe_key(err, moe, cfg, "first_dense", 0, 0, &k.first));
    SL_TRY(moe_dense_list(err, moe, cfg, &k));
    const uint8_t *dense = NULL;
    SL_TRY(dense_marks(err, m, k.dense, &dense));
    for (int64_t l = 0; l < L && m->cfg.E > 0; l++) {
        m->layer_moe[l] = (uint8_t)(!(dense && dense[l]) && (l + 1) % k.step == 0 && l >= k.first &&
                                    l % k.freq == 0);
        m->n_moe_layers += m->layer_moe[l];
    }
    return SL_OK;
}

sl_status sl_arch_table_extras(sl_err *err, sl_arch *m, const json_t *table, const json_t *cfg)
{
    /* true: every layer from L on; a config key: that many (vLLM's DeepSeek skips its
     * num_nextn_predict_layers MTP layers and refuses any other, a KeyError) */
    const json_t *skip = json_object_get(table, "skip_extra_layers");
    SL_CHECK(skip == NULL || json_is_boolean(skip) || json_is_string(skip), err, SL_E_CONFIG,
             "rule table \"skip_extra_layers\" is neither a boolean nor a config key");
    m->skip_extra_layers = json_is_true(skip) ? -1 : 0;
    if (json_is_string(skip))
        SL_TRY(sl_arch_config_sym(err, cfg, json_string_value(skip), 0, &m->skip_extra_layers));
    SL_TRY(syms_parse(err, m, json_object_get(table, "symbols"), cfg));
    return moe_parse(err, m, json_object_get(table, "moe"), cfg);
}

/* ---- rules: "layers", "when" and {e} ---------------------------------------------------------- */

static sl_status rule_layers(sl_err *err, const sl_arch *m, const json_t *r, const char *t,
                             sl_rule *out)
{
    static const char *const kinds[] = {"all", "dense", "moe"};
    const json_t *v = json_object_get(r, "layers");
    out->layers = out->expert ? SL_LAYERS_MOE : SL_LAYERS_ALL;
    if (v == NULL)
        return SL_OK;
    SL_CHECK(out->place == SL_PLACE_LAYER, err, SL_E_CONFIG,
             "rule '%s': \"layers\" applies to per-layer rules only", t);
    SL_CHECK(m->has_moe, err, SL_E_CONFIG, "rule '%s': \"layers\" needs the table's \"moe\" entry", t);
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(s, kinds[i]) == 0) {
            out->layers = (sl_layers)i;
            SL_CHECK(!out->expert || out->layers == SL_LAYERS_MOE, err, SL_E_CONFIG,
                     "rule '%s': an expert rule ({e}) applies to MoE layers only", t);
            return SL_OK;
        }
    }
    return sl_err_set(err, SL_E_CONFIG, "rule '%s': \"layers\" must be \"all\", \"dense\" or \"moe\"", t);
}

static sl_status rule_expert(sl_err *err, const sl_arch *m, const char *t, sl_rule *out)
{
    out->expert = strstr(t, "{e}") != NULL;
    if (!out->expert) {
        SL_CHECK(strstr(out->param, "{e}") == NULL, err, SL_E_CONFIG,
                 "rule '%s': param '%s' has {e} but the tensor has not", t, out->param);
        return SL_OK;
    }
    SL_CHECK(m->has_moe, err, SL_E_CONFIG, "rule '%s': {e} needs the table's \"moe\" entry", t);
    SL_CHECK(out->place == SL_PLACE_LAYER, err, SL_E_CONFIG, "rule '%s': {e} needs {i} too", t);
    SL_CHECK(out->param != out->tensor && strstr(out->param, "{e}") == NULL, err, SL_E_CONFIG,
             "rule '%s': an expert rule needs a \"param\" without {e} (the experts are stacked in it)", t);
    SL_CHECK(out->shard == SL_SHARD_MERGED || out->shard == SL_SHARD_ROW ||
                 out->shard == SL_SHARD_COLUMN || out->shard == SL_SHARD_REPLICATED,
             err, SL_E_CONFIG, "rule '%s': an expert rule's shard must be merged, column, row or "
             "replicated", t);
    return SL_OK;
}

/* "otherwise": "optional" keeps a rule that "when" / "unless" leaves out, as a tensor the
 * checkpoint may lack: vLLM's Qwen2-MoE makes shared_expert_gate whatever the shared expert, and
 * loads it where the checkpoint has it (qwen2_moe.py). One tensor of its own: no {e}, no slot. */
static sl_status rule_otherwise(sl_err *err, const json_t *r, const char *t, sl_rule *out, int *absent)
{
    const json_t *o = json_object_get(r, "otherwise");
    if (o == NULL)
        return SL_OK;
    SL_CHECK(json_is_string(o) && !strcmp(json_string_value(o), "optional") &&
                 (json_object_get(r, "when") || json_object_get(r, "unless")),
             err, SL_E_CONFIG, "rule '%s': \"otherwise\" can only be \"optional\", beside \"when\" "
             "or \"unless\"", t);
    SL_CHECK(!out->expert, err, SL_E_CONFIG, "rule '%s': an {e} rule cannot be optional", t);
    out->optional = *absent;
    *absent = 0;
    return SL_OK;
}

sl_status sl_arch_rule_extras(sl_err *err, const sl_arch *m, const json_t *r, const char *t,
                              sl_rule *out, int *absent)
{
    *absent = 0;
    SL_TRY(rule_expert(err, m, t, out));
    SL_TRY(rule_layers(err, m, r, t, out));
    for (int k = 0; k < 2; k++) {   /* "when": present iff non-zero; "unless": iff zero */
        const char *key = k == 0 ? "when" : "unless";
        const json_t *w = json_object_get(r, key);
        if (w == NULL)
            continue;
        const int si = json_is_string(w) ? sl_arch_sym_find(&m->cfg, json_string_value(w),
                                                            json_string_length(w)) : -1;
        SL_CHECK(si >= 0, err, SL_E_CONFIG, "rule '%s': \"%s\" must name a symbol of \"symbols\"", t,
                 key);
        *absent |= (m->cfg.sym_val[si] == 0) == (k == 0);
    }
    return rule_otherwise(err, r, t, out, absent);
}
