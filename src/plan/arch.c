/* arch.c - config.json (read by arch_config.c) + rule table -> the architecture description (see
 * arch.h).
 *
 * Every number comes from a user file, so sizes are checked to be positive and every product is
 * overflow-checked: a config with hidden_size 2^62 gives SL_E_CONFIG, never a wrapped size. */
#include "plan/arch.h"
#include "plan/arch_config.h"

#include "plan/rules_builtin.h"
#include "common/sl_bytes.h"
#include "common/sl_strbuf.h"
#include "common/sl_strmap.h"
#include "common/sl_text.h"

#include <assert.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shape expressions: "H", "nh*D", "2*I" ---------------------------------------------------- */

static int sym_value(const sl_arch_config *c, const char *s, size_t n, uint64_t *out)
{
    static const char *const names[] = {"H", "nh", "K", "D", "I", "V", "L"};
    const int64_t vals[] = {c->H, c->nh, c->K, c->D, c->I, c->V, c->L};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
            *out = (uint64_t)vals[i];
            return 0;
        }
    }
    const int si = sl_arch_sym_find(c, s, n);
    if (si >= 0) {   /* a table symbol; 0 is no dimension */
        *out = (uint64_t)c->sym_val[si];
        return *out > 0 ? 0 : -1;
    }
    if (n == 0 || n > 18 || strspn(s, "0123456789") < n)
        return -1;
    *out = strtoull(s, NULL, 10);
    return *out > 0 ? 0 : -1;
}

/* A sum ('+') of products ('*'): "nh*dn+nh*dr", "rkv+dr". */
static sl_status shape_eval(sl_err *err, const sl_arch_config *c, const char *expr,
                            const char *tensor, uint64_t *out)
{
    uint64_t v = 1, sum = 0;
    const char *p = expr;
    for (;;) {
        const size_t n = strcspn(p, "*+");
        uint64_t f = 0;
        SL_CHECK(sym_value(c, p, n, &f) == 0, err, SL_E_CONFIG,
                 "rule '%s': shape term '%.*s' is not one of H, nh, K, D, I, V, L, a table "
                 "symbol with a positive value for this config or a positive integer", tensor, (int)n, p);
        SL_CHECK(!sl_mul_overflow(v, f, &v), err, SL_E_CONFIG,
                 "rule '%s': shape %s overflows with this config", tensor, expr);
        if (p[n] != '*') {
            SL_CHECK(!sl_add_overflow(sum, v, &sum), err, SL_E_CONFIG,
                     "rule '%s': shape %s overflows with this config", tensor, expr);
            v = 1;
        }
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    *out = sum;
    return SL_OK;
}

/* ---- rule tables ------------------------------------------------------------------------------ */

/* Longest tensor or param name a rule may give, {i} and {e} included: real names are under 128
 * bytes. Every name is copied once per layer and expert, into the tensor list and the plan's
 * templates, so a 100 KB name in a 150 KB table on Qwen3-30B-A3B's 6,144 experts once cost 1.9 GB. */
#define SL_RULE_NAME_MAX 512

static const char *rule_str(const json_t *r, const char *key)
{
    const json_t *v = json_object_get(r, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static sl_status rule_shard(sl_err *err, const json_t *r, const char *t, sl_rule *out)
{
    static const char *const kinds[] = {"replicated", "column", "row", "vocab", "qkv", "merged",
                                        "concat"};
    const char *s = rule_str(r, "shard");
    SL_CHECK(s != NULL, err, SL_E_CONFIG, "rule '%s' has no \"shard\" string", t);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(s, kinds[i]) == 0) {
            out->shard = (sl_shard_kind)i;
            return SL_OK;
        }
    }
    return sl_err_set(err, SL_E_CONFIG, "rule '%s': shard '%s' is not one of replicated, column, "
                      "row, vocab, qkv, merged, concat", t, s);
}

static sl_status rule_slot(sl_err *err, const json_t *r, const char *t, sl_rule *out)
{
    const json_t *v = json_object_get(r, "slot");
    out->slot = 0;
    if (out->shard == SL_SHARD_QKV) {
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        const char *hit = strlen(s) == 1 ? strchr("qkv", s[0]) : NULL;
        SL_CHECK(hit != NULL, err, SL_E_CONFIG, "rule '%s': qkv needs \"slot\": \"q\", \"k\" or \"v\"", t);
        out->slot = (int32_t)(hit - "qkv");
    } else if (out->shard == SL_SHARD_MERGED || out->shard == SL_SHARD_CONCAT) {
        SL_CHECK(json_is_integer(v) && json_integer_value(v) >= 0 &&
                     json_integer_value(v) < SL_GROUP_MAX_SLOTS,
                 err, SL_E_CONFIG, "rule '%s': %s needs an integer \"slot\" in [0, %d)", t,
                 out->shard == SL_SHARD_MERGED ? "merged" : "concat", SL_GROUP_MAX_SLOTS);
        out->slot = (int32_t)json_integer_value(v);
    } else {
        SL_CHECK(v == NULL, err, SL_E_CONFIG, "rule '%s': \"slot\" applies to qkv, merged and "
                 "concat only", t);
    }
    return SL_OK;
}

static sl_status rule_place(sl_err *err, const json_t *r, const char *t, sl_rule *out)
{
    const char *p = rule_str(r, "place");
    const char *tied = rule_str(r, "tied");
    const int layered = strstr(t, "{i}") != NULL;
    if (p == NULL)
        p = layered ? "layer" : "";
    if (strcmp(p, "layer") == 0)
        out->place = SL_PLACE_LAYER;
    else if (strcmp(p, "first") == 0)
        out->place = SL_PLACE_FIRST;
    else if (strcmp(p, "last") == 0)
        out->place = SL_PLACE_LAST;
    else
        return sl_err_set(err, SL_E_CONFIG, "rule '%s' needs \"place\": \"layer\", \"first\" or "
                          "\"last\"", t);
    SL_CHECK(layered == (out->place == SL_PLACE_LAYER), err, SL_E_CONFIG,
             "rule '%s': a per-layer rule needs {i} in its name, and only it may have one", t);
    SL_CHECK(tied == NULL || !strcmp(tied, "also_last") || !strcmp(tied, "skip"), err,
             SL_E_CONFIG, "rule '%s': \"tied\" must be \"also_last\" or \"skip\"", t);
    out->tied_also_last = tied && !strcmp(tied, "also_last");
    out->tied_skip = tied && !strcmp(tied, "skip");
    SL_CHECK(!out->tied_also_last || out->place == SL_PLACE_FIRST, err, SL_E_CONFIG,
             "rule '%s': \"tied\": \"also_last\" needs \"place\": \"first\"", t);
    const json_t *stages = json_object_get(r, "stages");
    SL_CHECK(stages == NULL || (json_is_string(stages) && !strcmp(json_string_value(stages), "all") &&
                                out->place != SL_PLACE_LAYER),
             err, SL_E_CONFIG, "rule '%s': \"stages\" may only be \"all\", on a \"first\" or \"last\" "
             "rule", t);
    out->all_stages = stages != NULL;
    return SL_OK;
}

static sl_status rule_shape(sl_err *err, sl_arena *a, const sl_arch_config *c, const json_t *r,
                            const char *t, sl_rule *out)
{
    const json_t *sh = json_object_get(r, "shape");
    SL_CHECK(json_is_array(sh) && json_array_size(sh) >= 1 &&
                 json_array_size(sh) <= SL_RULE_MAX_DIMS,
             err, SL_E_CONFIG, "rule '%s' needs a \"shape\" list of 1 or 2 expressions", t);
    out->ndim = (uint32_t)json_array_size(sh);
    for (uint32_t d = 0; d < out->ndim; d++) {
        const json_t *e = json_array_get(sh, d);
        SL_CHECK(json_is_string(e), err, SL_E_CONFIG, "rule '%s': shape entries are strings", t);
        out->dim_expr[d] = sl_arena_strndup(a, json_string_value(e), json_string_length(e));
        SL_CHECK(out->dim_expr[d] != NULL, err, SL_E_NOMEM, "out of memory");
        SL_TRY(shape_eval(err, c, out->dim_expr[d], t, &out->shape[d]));
    }
    /* The largest element is 4 bytes: then no byte count derived from this shape can wrap. */
    uint64_t bytes = 4, padded = 0;
    for (uint32_t d = 0; d < out->ndim; d++)   /* + 64: room for the vocab padding */
        SL_CHECK(!sl_add_overflow(out->shape[d], 64, &padded) && !sl_mul_overflow(bytes, padded, &bytes),
                 err, SL_E_CONFIG, "rule '%s': shape overflows with this config", t);
    return SL_OK;
}

static sl_status rule_keys(sl_err *err, const json_t *r, const char *t)
{
    static const char *const keys[] = {"tensor", "param", "shape", "shard", "slot", "place",
                                       "tied", "description", "layers", "when", "unless", "quant",
                                       "dtype", "stages", "otherwise"};
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)(uintptr_t)r, key, v) {
        size_t i = 0;
        while (i < sizeof(keys) / sizeof(keys[0]) && strcmp(key, keys[i]) != 0)
            i++;
        SL_CHECK(i < sizeof(keys) / sizeof(keys[0]), err, SL_E_CONFIG,
                 "rule '%s': unknown key \"%s\"", t, key);
    }
    return SL_OK;
}

static sl_status rule_name_len(sl_err *err, const char *t, const char *what, const char *name)
{
    char tb[SL_TEXT_NAME];
    SL_CHECK(strlen(name) <= SL_RULE_NAME_MAX, err, SL_E_CONFIG, "rule '%s': %s name is %zu bytes, "
             "above %d", sl_text_name(t, tb, sizeof tb), what, strlen(name), SL_RULE_NAME_MAX);
    return SL_OK;
}

static sl_status rule_parse(sl_err *err, sl_arch *m, const json_t *r, sl_rule *out, int *absent)
{
    sl_arena *a = &m->arena;
    SL_CHECK(json_is_object(r), err, SL_E_CONFIG, "a rule is not a JSON object");
    const char *t = rule_str(r, "tensor");
    SL_CHECK(t != NULL && t[0], err, SL_E_CONFIG, "a rule has no \"tensor\" string");
    SL_TRY(rule_name_len(err, t, "tensor", t));
    SL_TRY(rule_keys(err, r, t));
    const json_t *q = json_object_get(r, "quant");
    SL_CHECK(q == NULL || json_is_false(q), err, SL_E_CONFIG, "rule '%s': \"quant\" can only be "
             "false (never quantized)", t);
    out->no_quant = q != NULL;
    out->dtype = -1;
    /* "dtype": a parameter that keeps its own dtype under any --dtype (DeepSeek's F32
     * e_score_correction_bias); never quantized */
    const json_t *dt = json_object_get(r, "dtype");
    if (dt) {
        sl_dtype v;
        SL_CHECK(json_is_string(dt) &&
                     sl_dtype_from_name(json_string_value(dt), strlen(json_string_value(dt)), &v) == 0 &&
                     (v == SL_DTYPE_F32 || v == SL_DTYPE_BF16 || v == SL_DTYPE_F16),
                 err, SL_E_CONFIG, "rule '%s': \"dtype\" must be \"F32\", \"BF16\" or \"F16\"", t);
        out->dtype = (int32_t)v;
        out->no_quant = 1;
    }
    out->scale_of = -1;
    const char *p = rule_str(r, "param");
    if (p)
        SL_TRY(rule_name_len(err, t, "param", p));
    out->tensor = sl_arena_strndup(a, t, strlen(t));
    out->param = p ? sl_arena_strndup(a, p, strlen(p)) : out->tensor;
    SL_CHECK(out->tensor && out->param, err, SL_E_NOMEM, "out of memory");
    SL_TRY(rule_shard(err, r, t, out));
    SL_TRY(rule_slot(err, r, t, out));
    SL_TRY(rule_place(err, r, t, out));
    SL_CHECK((strstr(out->param, "{i}") != NULL) == (out->place == SL_PLACE_LAYER), err,
             SL_E_CONFIG, "rule '%s': param '%s' must have {i} exactly when the tensor has", t,
             out->param);
    SL_TRY(sl_arch_rule_extras(err, m, r, t, out, absent));
    return *absent ? SL_OK : rule_shape(err, a, &m->cfg, r, t, out);
}

/* ---- groups: rules that fill one tp parameter ------------------------------------------------- */

/* Whether slots a and b are at the same layers: a fused module is FP8 at a layer in all its
 * slots or in none (arch_quant.c's at_layer). */
static int same_layers(const sl_arch *m, const sl_rule *a, const sl_rule *b)
{
    if (!a->at_layer || !b->at_layer)
        return a->at_layer == b->at_layer;
    return memcmp(a->at_layer, b->at_layer, (size_t)m->cfg.L) == 0;
}

static sl_status group_check_pair(sl_err *err, const sl_arch *m, const sl_rule *a, const sl_rule *b)
{
    SL_CHECK(a->shard == b->shard && (a->shard == SL_SHARD_QKV || a->shard == SL_SHARD_MERGED ||
                                      a->shard == SL_SHARD_CONCAT),
             err, SL_E_CONFIG, "rules '%s' and '%s' share param '%s' but are not slots of one qkv, "
             "merged or concat parameter", a->tensor, b->tensor, a->param);
    SL_CHECK(a->place == b->place && a->ndim == b->ndim &&
                 (a->ndim == 1 || a->shape[1] == b->shape[1]),
             err, SL_E_CONFIG, "rules '%s' and '%s' fill param '%s' but differ in placement, rank "
             "or row length", a->tensor, b->tensor, a->param);
    SL_CHECK(a->slot != b->slot, err, SL_E_CONFIG, "rules '%s' and '%s' take the same slot of '%s'",
             a->tensor, b->tensor, a->param);
    SL_CHECK(a->dtype == b->dtype && same_layers(m, a, b), err, SL_E_UNSUPPORTED, "Detected some "
             "but not all shards of %s are quantized. All shards of fused layers to have the same "
             "precision.", a->param);
    SL_CHECK(a->expert == b->expert && a->layers == b->layers, err, SL_E_CONFIG,
             "rules '%s' and '%s' fill param '%s' but differ in {e} or \"layers\"", a->tensor,
             b->tensor, a->param);
    return SL_OK;
}

/* The group key of a model-dtype twin's param (arch_quant.c): no pattern holds a \x01. */
static const char *twin_key(sl_arena *a, const char *param)
{
    const size_t n = strlen(param);
    char *k = sl_arena_alloc(a, n + 2);
    if (k) {
        memcpy(k, param, n);
        k[n] = '\x01';
        k[n + 1] = '\0';
    }
    return k;
}

/* Rule ri into the group of its param (by_param: param -> group), a new one for a new param. */
static sl_status group_add(sl_err *err, sl_arch *m, int32_t ri, sl_strmap *by_param)
{
    sl_rule *r = &m->rules[ri];
    /* a model-dtype twin fills the same parameter at other layers, in a group of its own */
    const char *key = r->quant_twin ? twin_key(&m->arena, r->param) : r->param;
    SL_CHECK(key != NULL, err, SL_E_NOMEM, "out of memory");
    const int64_t g = sl_strmap_add(by_param, key, m->n_groups);
    SL_CHECK(g != -2, err, SL_E_NOMEM, "out of memory");
    if (g < 0) {
        m->groups[m->n_groups].n_rules = 1;
        m->groups[m->n_groups].rules[0] = ri;
        r->group = m->n_groups++;
        return SL_OK;
    }
    sl_rule_group *gr = &m->groups[g];
    SL_CHECK(!r->optional && !m->rules[gr->rules[0]].optional, err, SL_E_CONFIG, "rule '%s': an "
             "optional tensor (\"otherwise\") cannot be a slot of param '%s'", r->tensor, r->param);
    SL_CHECK(gr->n_rules < SL_GROUP_MAX_SLOTS, err, SL_E_CONFIG, "param '%s' has too many slots", r->param);
    for (int32_t k = 0; k < gr->n_rules; k++)
        SL_TRY(group_check_pair(err, m, &m->rules[gr->rules[k]], r));
    gr->rules[gr->n_rules++] = ri;
    r->group = (int32_t)g;
    return SL_OK;
}

static int rule_slot_cmp(const sl_arch *m, int32_t a, int32_t b)
{
    return m->rules[a].slot - m->rules[b].slot;
}

/* Slots in slot order, and complete: q, k, v all present; merged 0..n-1. The qkv math uses the
 * config's head counts, so the slot shapes must be the ones it implies. */
static sl_status group_finish(sl_err *err, sl_arch *m, sl_rule_group *g)
{
    for (int32_t i = 1; i < g->n_rules; i++) {
        for (int32_t k = i; k > 0 && rule_slot_cmp(m, g->rules[k - 1], g->rules[k]) > 0; k--) {
            const int32_t t = g->rules[k];
            g->rules[k] = g->rules[k - 1];
            g->rules[k - 1] = t;
        }
    }
    const sl_rule *r0 = &m->rules[g->rules[0]];
    const sl_arch_config *c = &m->cfg;
    for (int32_t i = 0; i < g->n_rules; i++) {
        const sl_rule *r = &m->rules[g->rules[i]];
        SL_CHECK(r->slot == i, err, SL_E_CONFIG, "param '%s' lacks slot %d", r0->param, (int)i);
        const uint64_t want = (uint64_t)(r->slot == 0 ? c->nh : c->K) * (uint64_t)c->D;
        SL_CHECK(r->shard != SL_SHARD_QKV || r->scale_kind != SL_SCALE_NONE || r->shape[0] == want, err, SL_E_CONFIG,
                 "rule '%s': a qkv slot's dim 0 must be %s*D", r->tensor, r->slot ? "K" : "nh");
    }
    SL_CHECK(r0->shard != SL_SHARD_QKV || g->n_rules == 3, err, SL_E_CONFIG,
             "param '%s' needs the q, k and v slots", r0->param);
    return SL_OK;
}

static sl_status rules_arch_check(sl_err *err, const json_t *root, const char *arch, int *match)
{
    const json_t *archs = json_object_get(root, "architectures");
    *match = archs == NULL;
    SL_CHECK(archs == NULL || json_is_array(archs), err, SL_E_CONFIG,
             "rule table 'architectures' is not a list");
    for (size_t i = 0; i < json_array_size(archs); i++) {
        const char *s = json_string_value(json_array_get(archs, i));
        if (s && strcmp(s, arch) == 0)
            *match = 1;
    }
    return SL_OK;
}

/* seen: tensor pattern -> rule, by_param: param -> group, so that a table of many rules is
 * checked in one pass (a scan of the rules so far took seconds at 4,095 long names). */
static sl_status rules_parse_maps(sl_err *err, sl_arch *m, const json_t *root, sl_strmap *seen,
                                  sl_strmap *by_param)
{
    const json_t *rules = json_object_get(root, "rules");
    SL_CHECK(json_is_array(rules) && json_array_size(rules) > 0, err, SL_E_CONFIG,
             "rule table has no \"rules\" list");
    SL_CHECK(json_array_size(rules) < 4096, err, SL_E_CONFIG, "rule table has too many rules");
    m->n_rules = (int32_t)json_array_size(rules);
    /* room for a weight scale, an input scale and a model-dtype twin per rule (arch_quant.c) */
    const int32_t cap = 4 * m->n_rules;
    m->rules = sl_arena_alloc(&m->arena, (size_t)cap * sizeof(*m->rules));
    m->groups = sl_arena_alloc(&m->arena, (size_t)cap * sizeof(*m->groups));
    SL_CHECK(m->rules && m->groups, err, SL_E_NOMEM, "out of memory");
    memset(m->rules, 0, (size_t)cap * sizeof(*m->rules));
    const int32_t n_json = m->n_rules;
    m->n_rules = 0;
    for (int32_t j = 0; j < n_json; j++) {
        const int32_t i = m->n_rules;
        sl_rule *r = &m->rules[i];
        int absent = 0;
        SL_TRY(rule_parse(err, m, json_array_get(rules, (size_t)j), r, &absent));
        if (absent) {   /* "when" names a symbol that is 0 for this config: no such tensor */
            memset(r, 0, sizeof(*r));
            continue;
        }
        m->n_rules++;
        const int64_t dup = sl_strmap_add(seen, r->tensor, i);
        SL_CHECK(dup != -2, err, SL_E_NOMEM, "out of memory");
        SL_CHECK(dup < 0, err, SL_E_CONFIG, "rule table lists '%s' twice", r->tensor);
    }
    SL_TRY(sl_arch_quant_rules(err, m, cap));
    for (int32_t i = 0; i < m->n_rules; i++) {
        sl_rule *r = &m->rules[i];
        int32_t *n = r->place == SL_PLACE_LAYER ? &m->n_layer
                     : r->place == SL_PLACE_FIRST ? &m->n_first : &m->n_last;
        r->ord = (*n)++;
        SL_TRY(group_add(err, m, i, by_param));
    }
    for (int32_t g = 0; g < m->n_groups; g++)
        SL_TRY(group_finish(err, m, &m->groups[g]));
    return SL_OK;
}

static sl_status rules_parse(sl_err *err, sl_arch *m, const json_t *root)
{
    sl_strmap seen = {0}, by_param = {0};
    const sl_status st = rules_parse_maps(err, m, root, &seen, &by_param);
    sl_strmap_free(&seen);
    sl_strmap_free(&by_param);
    return st;
}

static sl_status table_keys(sl_err *err, const json_t *root)
{
    static const char *const keys[] = {"description", "architectures", "rules", "symbols", "moe",
                                       "skip_extra_layers"};
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)(uintptr_t)root, key, v) {
        size_t i = 0;
        while (i < sizeof(keys) / sizeof(keys[0]) && strcmp(key, keys[i]) != 0)
            i++;
        SL_CHECK(i < sizeof(keys) / sizeof(keys[0]), err, SL_E_CONFIG,
                 "rule table: unknown key \"%s\"", key);
    }
    return SL_OK;
}

static sl_status rules_from_json(sl_err *err, sl_arch *m, json_t *root, const char *what,
                                 const json_t *cfg)
{
    char ab[SL_TEXT_NAME];
    int match = 0;
    sl_status st = SL_OK;
    if (!json_is_object(root))
        st = sl_err_set(err, SL_E_CONFIG, "rule table is not a JSON object");
    if (st == SL_OK)
        st = table_keys(err, root);
    if (st == SL_OK)
        st = rules_arch_check(err, root, m->cfg.architecture, &match);
    if (st == SL_OK && !match)
        st = sl_err_set(err, SL_E_CONFIG, "rule table does not list architecture '%s'",
                        sl_text_name(m->cfg.architecture, ab, sizeof ab));
    if (st == SL_OK)
        st = sl_arch_table_extras(err, m, root, cfg);
    if (st == SL_OK)
        st = rules_parse(err, m, root);
    if (st != SL_OK)
        sl_err_prefix(err, what);
    return st;
}

static sl_status rules_load_file(sl_err *err, sl_arch *m, const char *path, const json_t *cfg)
{
    sl_status st = SL_OK;
    json_t *root = sl_arch_json_read(err, path, &st, NULL);
    if (root == NULL)
        return st;
    st = rules_from_json(err, m, root, path, cfg);
    json_decref(root);
    return st;
}

static json_t *builtin_parse(const sl_builtin_rules *b)
{
    sl_strbuf text = {0};
    for (size_t i = 0; b->lines[i] != NULL; i++)
        sl_strbuf_puts(&text, b->lines[i]);
    json_t *root = text.oom ? NULL : json_loads(sl_strbuf_str(&text), 0, NULL);
    sl_strbuf_free(&text);
    return root;
}

static sl_status rules_load_builtin(sl_err *err, sl_arch *m, const json_t *cfg)
{
    for (const sl_builtin_rules *b = sl_builtin_rule_tables; b->name != NULL; b++) {
        json_t *root = builtin_parse(b);
        SL_CHECK(root != NULL, err, SL_E_NOMEM, "built-in rule table %s unreadable", b->name);
        int match = 0;
        rules_arch_check(err, root, m->cfg.architecture, &match);
        sl_status st = SL_OK;
        if (match) {
            char what[64];
            snprintf(what, sizeof(what), "built-in rules/%s.json", b->name);
            st = rules_from_json(err, m, root, what, cfg);
        }
        json_decref(root);
        if (match)
            return st;
    }
    char ab[SL_TEXT_NAME];
    return sl_err_set(err, SL_E_CONFIG, "architecture '%s' has no built-in rule table (built in: "
                      "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                      "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
                      "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM); give one with --rules FILE",
                      sl_text_name(m->cfg.architecture, ab, sizeof ab));
}

/* The parsed config, dumped once: a plan keeps it so that reshard's output directory carries the
 * config its parts were planned with (given as a file, as text, or the checkpoint's own); the text
 * as given (verbatim, taken) where jansson's dump would change its numbers. */
static sl_status config_keep_text(sl_err *err, sl_arch *m, const json_t *cfg, char *verbatim)
{
    m->config_text = verbatim ? verbatim : json_dumps(cfg, JSON_INDENT(2));
    SL_CHECK(m->config_text != NULL, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

/* The tensors and parameters a config implies are the table's doing as much as the config's: with
 * a --rules table the message names both ("cfg.json: rules.json: the config implies ..."). */
static void arch_prefix_both(sl_err *err, const char *config_path, const char *rules_path)
{
    if (rules_path)
        sl_err_prefix(err, rules_path);
    sl_err_prefix(err, config_path);
}

sl_status sl_arch_load_source(const sl_arch_source *src, const char *rules_path, sl_err *err,
                              sl_arch **out)
{
    assert(src->path != NULL);
    *out = NULL;
    sl_arch *m = calloc(1, sizeof(*m));
    SL_CHECK(m != NULL, err, SL_E_NOMEM, "out of memory");
    /* cfg_load and a --rules table name their sources. What fails after them is about the config
     * too (no built-in table for its architecture, sizes a table cannot take, the total), and the
     * message names it, and a --rules table beside it. */
    json_t *cfg = NULL;
    char *verbatim = NULL;
    sl_status st = sl_arch_config_load(err, &m->arena, src, &m->cfg, &cfg, &verbatim);
    if (st == SL_OK)
        st = config_keep_text(err, m, cfg, verbatim);
    if (st == SL_OK && (st = sl_arch_quant_parse(err, m, cfg)) != SL_OK)
        sl_err_prefix(err, src->path);
    if (st == SL_OK && rules_path)
        st = rules_load_file(err, m, rules_path, cfg);
    else if (st == SL_OK && (st = rules_load_builtin(err, m, cfg)) != SL_OK)
        sl_err_prefix(err, src->path);
    json_decref(cfg);
    if (st == SL_OK && ((st = sl_arch_tensors_build(err, m)) != SL_OK ||
                        (st = sl_arch_check_size(err, m)) != SL_OK))
        arch_prefix_both(err, src->path, rules_path);
    if (st != SL_OK) {
        sl_arch_free(m);
        return st;
    }
    *out = m;
    return SL_OK;
}

sl_status sl_arch_load(const char *config_path, const char *rules_path, sl_err *err,
                             sl_arch **out)
{
    const sl_arch_source src = {.path = config_path};
    return sl_arch_load_source(&src, rules_path, err, out);
}

void sl_arch_free(sl_arch *m)
{
    if (m == NULL)
        return;
    sl_arena_free(&m->arena);
    free(m->config_text);
    free(m);
}
