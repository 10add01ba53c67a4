/* arch_config.c - config.json -> sl_arch_config (see arch_config.h): the sizes, checked one key at a
 * time, and the limits no real model comes near. Every message names the key; sl_arch_config_load
 * prefixes the file. */
#include "plan/arch_config.h"

#include "common/sl_file.h"
#include "common/sl_strbuf.h"
#include "common/sl_text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Far above any real model; keeps the tensor list and name formatting bounded. */
#define SL_MAX_LAYERS 100000
/* Head counts and head_dim: real models have at most a few hundred heads of at most 512. */
#define SL_MAX_HEADS 65536
#define SL_MAX_HEAD_DIM 65536
/* A config.json is a few KB and a rule table a few tens; both are read whole before parsing. */
#define SL_MAX_JSON_FILE (16u << 20)

/* ---- JSON files: a FIFO or a device is refused before it could block (sl_file.h) -------------- */

/* The number token at t[i, n): its end. */
static size_t number_end(const char *t, size_t i, size_t n)
{
    while (i < n && strchr("0123456789+-.eE", t[i]) != NULL)
        i++;
    return i;
}

/* Whether t[0, n) is a JSON number (RFC 8259 6): -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?;
 * *real: it has a fraction or an exponent. */
static int json_number(const char *t, size_t n, int *real)
{
    size_t i = t[0] == '-';
    const size_t lead = i;
    while (i < n && t[i] >= '0' && t[i] <= '9')
        i++;
    if (i == lead || (t[lead] == '0' && i - lead > 1))
        return 0;
    *real = i < n;
    if (i < n && t[i] == '.') {
        const size_t f = ++i;
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
        if (i == f)
            return 0;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        i += i + 1 < n && (t[i + 1] == '+' || t[i + 1] == '-') ? 2 : 1;
        const size_t e = i;
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
        if (i == e)
            return 0;
    }
    return i == n;
}

/* Whether the integer literal t[0, n) (digits, maybe a sign) is beyond long long. */
static int int_overflows(const char *t, size_t n)
{
    const size_t digits = n - (t[0] == '-');
    if (digits != 19)
        return digits > 19;
    char d[24];
    memcpy(d, t, n);
    d[n] = 0;
    errno = 0;
    (void)strtoll(d, NULL, 10);
    return errno == ERANGE;
}

/* text with every integer literal beyond long long written as the nearest one within it, and
 * every number beyond a double as the largest double: valid JSON (Python's json, and so
 * transformers, reads it) that jansson refuses ("too big integer") over a key nobody reads. A key
 * that is read then meets its own range check. Only tokens that are JSON numbers change: anything
 * else stays for jansson to refuse. Checked by the caller for being out of memory. */
static void numbers_clamped(const char *t, size_t n, sl_strbuf *o)
{
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        if (t[i] == '"') {   /* a string, escapes and all */
            while (j < n && t[j] != '"')
                j += t[j] == '\\' ? 2 : 1;
            j = j < n ? j + 1 : n;
        } else if (t[i] == '-' || (t[i] >= '0' && t[i] <= '9')) {
            j = number_end(t, i, n);
            int real = 0;
            if (!json_number(t + i, j - i, &real)) {
                sl_strbuf_append(o, t + i, j - i);
                i = j;
                continue;
            }
            const int neg = t[i] == '-';
            if (!real && int_overflows(t + i, j - i)) {
                sl_strbuf_puts(o, neg ? "-9223372036854775808" : "9223372036854775807");
                i = j;
                continue;
            }
            if (real && sl_text_number_inf(t + i, j - i)) {
                sl_strbuf_puts(o, neg ? "-1.7976931348623157e308" : "1.7976931348623157e308");
                i = j;
                continue;
            }
        }
        sl_strbuf_append(o, t + i, j - i);
        i = j;
    }
}

json_t *sl_arch_json_parse(sl_err *err, const char *name, const char *text, size_t len,
                           sl_status *st, char **verbatim)
{
    if (verbatim)
        *verbatim = NULL;
    json_error_t jerr;
    *st = SL_OK;
    if (len > SL_MAX_JSON_FILE) {   /* sl_file_read_all's limit and message for a file */
        *st = sl_err_set(err, SL_E_CONFIG, "%s: %zu bytes, over the %zu-byte limit", name, len,
                         (size_t)SL_MAX_JSON_FILE);
        return NULL;
    }
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL && json_error_code(&jerr) == json_error_numeric_overflow) {
        sl_strbuf clamped = {0};
        numbers_clamped(text, len, &clamped);
        if (!clamped.oom)
            root = json_loadb(sl_strbuf_str(&clamped), clamped.len, JSON_REJECT_DUPLICATES, &jerr);
        sl_strbuf_free(&clamped);
        if (root && verbatim && !(*verbatim = strndup(text, len))) {
            json_decref(root);
            *st = sl_err_set(err, SL_E_NOMEM, "out of memory");
            return NULL;
        }
    }
    if (root == NULL)
        *st = sl_err_set(err, SL_E_CONFIG, "%s: %s (line %d)", name, jerr.text, jerr.line);
    return root;
}

json_t *sl_arch_json_read(sl_err *err, const char *path, sl_status *st, char **verbatim)
{
    char *buf = NULL;
    size_t len = 0;
    if (verbatim)
        *verbatim = NULL;
    *st = sl_file_read_all(path, SL_MAX_JSON_FILE, SL_E_CONFIG, err, &buf, &len);
    if (*st != SL_OK)
        return NULL;
    json_t *root = sl_arch_json_parse(err, path, buf, len, st, verbatim);
    free(buf);
    return root;
}

/* ---- config.json ------------------------------------------------------------------------------ */

static sl_status cfg_int(sl_err *err, const json_t *root, const char *key, int64_t *out)
{
    const json_t *v = json_object_get(root, key);
    SL_CHECK(v != NULL, err, SL_E_CONFIG, "config has no '%s'", key);
    SL_CHECK(json_is_integer(v), err, SL_E_CONFIG, "config '%s' is not an integer", key);
    const json_int_t x = json_integer_value(v);
    SL_CHECK(x > 0, err, SL_E_CONFIG, "config '%s' is %lld; it must be positive", key, (long long)x);
    *out = (int64_t)x;
    return SL_OK;
}

static sl_status cfg_int_opt(sl_err *err, const json_t *root, const char *key, int64_t dflt,
                             int64_t *out)
{
    const json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        *out = dflt;
        return SL_OK;
    }
    return cfg_int(err, root, key, out);
}

/* The config's dtype, under the key transformers writes: "torch_dtype" until 4.55, "dtype" since
 * (torch_dtype then kept as a deprecated alias). Both given and different is an error. */
static const json_t *cfg_dtype_value(sl_err *err, const json_t *root, const char **key)
{
    const json_t *old = json_object_get(root, "torch_dtype"), *cur = json_object_get(root, "dtype");
    old = json_is_null(old) ? NULL : old;
    cur = json_is_null(cur) ? NULL : cur;
    if (old && cur && !json_equal(old, cur)) {
        sl_err_set(err, SL_E_CONFIG, "config 'torch_dtype' and 'dtype' differ");
        *key = NULL;
        return NULL;
    }
    *key = cur ? "dtype" : "torch_dtype";
    return cur ? cur : old;
}

static sl_status cfg_dtype(sl_err *err, const json_t *root, int32_t *out)
{
    static const struct {
        const char *name;
        sl_dtype dt;
    } names[] = {{"bfloat16", SL_DTYPE_BF16}, {"float16", SL_DTYPE_F16}, {"half", SL_DTYPE_F16},
                 {"float32", SL_DTYPE_F32},   {"float", SL_DTYPE_F32}};
    const char *key = NULL;
    const json_t *v = cfg_dtype_value(err, root, &key);
    *out = -1;
    if (!key)
        return SL_E_CONFIG;
    if (v == NULL)
        return SL_OK;
    SL_CHECK(json_is_string(v), err, SL_E_CONFIG, "config '%s' is not a string", key);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(json_string_value(v), names[i].name) == 0) {
            *out = (int32_t)names[i].dt;
            return SL_OK;
        }
    }
    char vb[SL_TEXT_NAME];
    return sl_err_set(err, SL_E_CONFIG, "config %s '%s' is not supported (bfloat16, float16, "
                      "float32)", key, sl_text_name(json_string_value(v), vb, sizeof vb));
}

static sl_status cfg_arch(sl_err *err, sl_arena *a, const json_t *root, const char **out)
{
    const json_t *v = json_object_get(root, "architectures");
    SL_CHECK(json_is_array(v) && json_array_size(v) > 0, err, SL_E_CONFIG,
             "config has no 'architectures' list");
    const json_t *s = json_array_get(v, 0);
    SL_CHECK(json_is_string(s), err, SL_E_CONFIG, "config architectures[0] is not a string");
    *out = sl_arena_strndup(a, json_string_value(s), json_string_length(s));
    SL_CHECK(*out != NULL, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

static sl_status cfg_tied(sl_err *err, const json_t *root, int *out)
{
    const json_t *v = json_object_get(root, "tie_word_embeddings");
    *out = 0;
    if (v == NULL || json_is_null(v))
        return SL_OK;
    SL_CHECK(json_is_boolean(v), err, SL_E_CONFIG, "config 'tie_word_embeddings' is not a boolean");
    *out = json_is_true(v);
    return SL_OK;
}

/* Grouped-query attention as every engine runs it: each kv head serves a whole group of query
 * heads, so there are no more kv heads than query heads and they divide them. */
static sl_status cfg_check_heads(sl_err *err, const sl_arch_config *c, int explicit_head_dim)
{
    SL_CHECK(c->nh <= SL_MAX_HEADS, err, SL_E_CONFIG, "config 'num_attention_heads' is %lld, above %d",
             (long long)c->nh, SL_MAX_HEADS);
    SL_CHECK(c->K <= c->nh, err, SL_E_CONFIG, "config 'num_key_value_heads' %lld is larger than "
             "'num_attention_heads' %lld", (long long)c->K, (long long)c->nh);
    SL_CHECK(c->nh % c->K == 0, err, SL_E_CONFIG, "config 'num_attention_heads' %lld is not a multiple "
             "of 'num_key_value_heads' %lld (each kv head serves a whole group of query heads)",
             (long long)c->nh, (long long)c->K);
    /* a head_dim derived from a huge hidden_size overflows the shapes, and is reported so */
    SL_CHECK(!explicit_head_dim || c->D <= SL_MAX_HEAD_DIM, err, SL_E_CONFIG,
             "config 'head_dim' is %lld, above %d", (long long)c->D, SL_MAX_HEAD_DIM);
    return SL_OK;
}

/* The head_dim a config without the key has: what transformers' config class for its model_type
 * sets, which vLLM's models then read (getattr(config, "head_dim", None) or H / nh). Qwen3Config
 * (model_type "qwen3") has a field head_dim = 128 (transformers 4.51 on; 5.x's dataclass field too),
 * so a Qwen3 config.json without the key is head_dim 128 in vLLM whatever hidden_size and the
 * heads are; Qwen3MoeConfig and the others have no such field: H / nh. A head_dim of null is no
 * default (transformers 4.x keeps None, and vLLM's `or` falls back to H / nh; 5.x refuses it).
 * Returns 0 when the class gives none. */
static int64_t cfg_class_head_dim(const json_t *root)
{
    const json_t *mt = json_object_get(root, "model_type");
    return json_is_string(mt) && strcmp(json_string_value(mt), "qwen3") == 0 ? 128 : 0;
}

static sl_status cfg_parse(sl_err *err, sl_arena *a, const json_t *root, sl_arch_config *c)
{
    SL_CHECK(json_is_object(root), err, SL_E_CONFIG, "config is not a JSON object");
    SL_TRY(cfg_arch(err, a, root, &c->architecture));
    SL_TRY(cfg_int(err, root, "hidden_size", &c->H));
    SL_TRY(cfg_int(err, root, "num_attention_heads", &c->nh));
    SL_TRY(cfg_int_opt(err, root, "num_key_value_heads", c->nh, &c->K));
    SL_TRY(cfg_int(err, root, "intermediate_size", &c->I));
    SL_TRY(cfg_int(err, root, "vocab_size", &c->V));
    SL_TRY(cfg_int(err, root, "num_hidden_layers", &c->L));
    SL_CHECK(c->L <= SL_MAX_LAYERS, err, SL_E_CONFIG, "config num_hidden_layers %lld is above %d",
             (long long)c->L, SL_MAX_LAYERS);
    const json_t *hd = json_object_get(root, "head_dim");
    const int64_t class_hd = hd ? 0 : cfg_class_head_dim(root);
    const int has_head_dim = (hd && !json_is_null(hd)) || class_hd > 0;
    SL_CHECK(has_head_dim || c->H % c->nh == 0, err, SL_E_CONFIG,
             "hidden_size %lld is not divisible by num_attention_heads %lld and the config has no "
             "head_dim", (long long)c->H, (long long)c->nh);
    SL_TRY(cfg_int_opt(err, root, "head_dim", class_hd > 0 ? class_hd : c->H / c->nh, &c->D));
    SL_TRY(cfg_check_heads(err, c, has_head_dim));
    SL_TRY(cfg_tied(err, root, &c->tied));
    return cfg_dtype(err, root, &c->dtype);
}

sl_status sl_arch_config_load(sl_err *err, sl_arena *a, const sl_arch_source *src,
                              sl_arch_config *c, json_t **root_out, char **verbatim)
{
    sl_status st = SL_OK;
    *root_out = NULL;
    json_t *root = src->text ? sl_arch_json_parse(err, src->path, src->text, src->len, &st, verbatim)
                             : sl_arch_json_read(err, src->path, &st, verbatim);
    if (root == NULL)
        return st;
    st = cfg_parse(err, a, root, c);
    if (st != SL_OK) {
        json_decref(root);
        free(*verbatim);
        *verbatim = NULL;
        sl_err_prefix(err, src->path);
        return st;
    }
    *root_out = root;
    return SL_OK;
}

/* A table symbol's value: a non-negative integer; null or absent is dflt, or an error when the
 * table gives no default (dflt < 0). */
sl_status sl_arch_config_sym(sl_err *err, const json_t *root, const char *key, int64_t dflt,
                             int64_t *out)
{
    const json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        SL_CHECK(dflt >= 0, err, SL_E_CONFIG, "config has no '%s'", key);
        *out = dflt;
        return SL_OK;
    }
    SL_CHECK(json_is_integer(v) && json_integer_value(v) >= 0 &&
                 json_integer_value(v) <= (json_int_t)1 << 40,
             err, SL_E_CONFIG, "config '%s' is not an integer in [0, 2^40]", key);
    *out = (int64_t)json_integer_value(v);
    return SL_OK;
}
