/* st_index.c - model.safetensors.index.json, rules I1-I3 of SAFETENSORS.md section 7.
 *
 *   {"metadata": {"total_size": 16060522496, ...}?, "weight_map": {"<tensor>": "<shard file>", ...}}
 *
 * jansson is used here (not the header parser): the file is small, has no u64 offsets, and
 * JSON_REJECT_DUPLICATES compares keys after unescaping, which is rule I3. Without JSON_ALLOW_NUL
 * jansson rejects "\u0000" in strings, which covers NUL in shard names. Rules I4-I7 need the shards
 * and live in src/ckpt/. */
#include "format/st_format.h"
#include "format/st_json.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

bool st_has_suffix(const char *s, size_t len)
{
    const size_t k = sizeof(ST_SUFFIX) - 1;
    return len > k && memcmp(s + len - k, ST_SUFFIX, k) == 0;
}

const char *st_index_bad_shard_name(const char *s, size_t len)
{
    if (len == 0)
        return "is empty";
    if (memchr(s, '\0', len))
        return "contains NUL";
    /* Parsed as a Windows path on every OS (huggingface_hub #4033): both separators count. */
    if (memchr(s, '/', len) || memchr(s, '\\', len))
        return "is not a bare file name (contains '/' or '\\')";
    if (memchr(s, ':', len))
        return "has a drive letter or ':'";
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return "is '.' or '..'";
    if (!st_has_suffix(s, len))
        return "does not end in .safetensors";
    return NULL;
}

/* Digits up to the first non-digit, as a number below limit; NULL when none or too large. */
static const char *rank_number(const char *s, uint64_t limit, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        const uint64_t digit = (uint64_t)(*p - '0');
        if (v > (limit - 1 - digit) / 10)
            return NULL;
        v = v * 10 + digit;
    }
    *out = v;
    return p > s ? p : NULL;
}

bool st_rank_file_name(const char *base, int32_t *rank, int64_t *part)
{
    static const char head[] = "model-rank-", mid[] = "-part-";
    uint64_t d = 0, k = 0;
    if (strncmp(base, head, sizeof head - 1) != 0)
        return false;
    const char *p = rank_number(base + sizeof head - 1, (uint64_t)INT32_MAX + 1, &d);
    if (!p || strncmp(p, mid, sizeof mid - 1) != 0)
        return false;
    p = rank_number(p + sizeof mid - 1, (uint64_t)INT64_MAX, &k);
    if (!p || strcmp(p, ST_SUFFIX) != 0)
        return false;
    if (rank)
        *rank = (int32_t)d;
    if (part)
        *part = (int64_t)k;
    return true;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const st_index_entry *)a)->tensor, ((const st_index_entry *)b)->tensor);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Within an object (lx after its '{'): true with lx at the value of member `key`, false where the
 * object has none; *st an error where the text does not lex (jansson read it, so only our
 * lexer's nesting bound can). */
static bool find_member(st_lex *lx, const char *key, sl_status *st)
{
    *st = SL_OK;
    if (st_lex_accept(lx, '}'))
        return false;
    do {
        st_str k;
        if ((*st = st_lex_string(lx, false, &k)) != SL_OK || (*st = st_lex_expect(lx, ':', "':'")) != SL_OK)
            return false;
        if (st_str_eq(&k, key, strlen(key))) {
            st_lex_ws(lx);
            return true;
        }
        if ((*st = st_lex_skip(lx)) != SL_OK)
            return false;
    } while (st_lex_next(lx, '}', st));
    return false;
}

/* total_size from its own text, where some integer of the index is beyond jansson's long long:
 * jansson then reads the file with doubles, which would round total_size and take "4.0" or
 * "4e0" for 4. Digits only (JSON has no leading zeros); beyond 2^64 - 1, only that it is huge
 * is known. */
static sl_status index_total_size_text(const char *buf, size_t len, st_index *ix, sl_err *e)
{
    sl_err le = {0};
    st_lex lx = {.base = (const unsigned char *)buf, .p = (const unsigned char *)buf,
                 .end = (const unsigned char *)buf + len, .arena = &ix->arena, .err = &le};
    sl_status st = SL_OK;
    const bool found = st_lex_accept(&lx, '{') && find_member(&lx, "metadata", &st) &&
                       st_lex_accept(&lx, '{') && find_member(&lx, "total_size", &st);
    if (st != SL_OK || !found) {   /* jansson found it: only a nesting beyond our bound */
        st = sl_err_set(e, SL_E_INDEX, "metadata.total_size could not be read: %s", sl_err_msg(&le));
        sl_err_clear(&le);
        return st;
    }
    uint64_t v = 0;
    size_t digits = 0;
    bool huge = false;
    for (const unsigned char *p = lx.p; p < lx.end && *p >= '0' && *p <= '9'; p++, digits++) {
        const unsigned d = (unsigned)(*p - '0');
        huge = huge || v > (UINT64_MAX - d) / 10;
        v = huge ? 0 : v * 10 + d;
    }
    const unsigned char *after = lx.p + digits;
    SL_CHECK(digits > 0 && (after == lx.end || !strchr(".eE", *after)), e, SL_E_INDEX,
             "metadata.total_size is not a non-negative integer");
    ix->total_size_huge = huge || v > (uint64_t)INT64_MAX;
    ix->total_size = ix->total_size_huge ? 0 : v;
    return SL_OK;
}

static sl_status index_metadata(const json_t *root, const char *buf, size_t len, bool ints_as_real,
                                st_index *ix, sl_err *e)
{
    const json_t *md = json_object_get(root, "metadata");
    if (!md)
        return SL_OK;
    SL_CHECK(json_is_object(md), e, SL_E_INDEX, "'metadata' is not an object");
    const json_t *ts = json_object_get(md, "total_size");
    if (!ts)
        return SL_OK;
    ix->has_total_size = true;
    if (ints_as_real)
        return index_total_size_text(buf, len, ix, e);
    SL_CHECK(json_is_integer(ts) && json_integer_value(ts) >= 0, e, SL_E_INDEX,
             "metadata.total_size is not a non-negative integer");
    ix->total_size = (uint64_t)json_integer_value(ts);
    return SL_OK;
}

static sl_status index_entry(st_index *ix, size_t i, const char *key, const json_t *val, sl_err *e)
{
    char nb[160];
    SL_CHECK(json_is_string(val), e, SL_E_INDEX, "weight_map['%s'] is not a string",
             st_display(key, strlen(key), nb, sizeof nb));
    const char *shard = json_string_value(val);
    const size_t len = json_string_length(val);
    const char *why = st_index_bad_shard_name(shard, len);
    char sb[160];
    SL_CHECK(!why, e, SL_E_INDEX, "weight_map['%s']: shard name '%s' %s",
             st_display(key, strlen(key), nb, sizeof nb), st_display(shard, len, sb, sizeof sb), why);
    ix->entries[i].tensor = sl_arena_strndup(&ix->arena, key, strlen(key));
    ix->entries[i].shard = sl_arena_strndup(&ix->arena, shard, len);
    SL_CHECK(ix->entries[i].tensor && ix->entries[i].shard, e, SL_E_NOMEM, "out of memory reading index");
    return SL_OK;
}

/* Unique shard names, sorted; entries' shard pointers are redirected to them. */
static sl_status index_shards(st_index *ix, sl_err *e)
{
    const char **v = sl_arena_alloc(&ix->arena, (ix->n_entries ? ix->n_entries : 1) * sizeof(*v));
    SL_CHECK(v, e, SL_E_NOMEM, "out of memory reading index");
    for (size_t i = 0; i < ix->n_entries; i++)
        v[i] = ix->entries[i].shard;
    qsort(v, ix->n_entries, sizeof(*v), cmp_str);
    size_t k = 0;
    for (size_t i = 0; i < ix->n_entries; i++) {
        if (k == 0 || strcmp(v[k - 1], v[i]) != 0)
            v[k++] = v[i];
    }
    ix->shards = v;
    ix->n_shards = k;
    for (size_t i = 0; i < ix->n_entries; i++) {
        const char **s = bsearch(&ix->entries[i].shard, v, k, sizeof(*v), cmp_str);
        ix->entries[i].shard = *s;
    }
    return SL_OK;
}

static sl_status index_weight_map(const json_t *root, st_index *ix, sl_err *e)
{
    const json_t *wm = json_object_get(root, "weight_map");
    SL_CHECK(wm, e, SL_E_INDEX, "no 'weight_map'");
    SL_CHECK(json_is_object(wm), e, SL_E_INDEX, "'weight_map' is not an object");
    const size_t n = json_object_size(wm);
    ix->entries = sl_arena_alloc(&ix->arena, (n ? n : 1) * sizeof(st_index_entry));
    SL_CHECK(ix->entries, e, SL_E_NOMEM, "out of memory reading index");
    const char *key;
    const json_t *val;
    size_t i = 0;
    json_object_foreach((json_t *)(uintptr_t)wm, key, val) {
        SL_TRY(index_entry(ix, i, key, val, e));
        i++;
    }
    ix->n_entries = i;
    qsort(ix->entries, ix->n_entries, sizeof(st_index_entry), cmp_entry);
    return index_shards(ix, e);
}

sl_status st_index_parse(const char *buf, size_t len, st_index *ix, sl_err *e)
{
    memset(ix, 0, sizeof(*ix));
    json_error_t je;
    sl_status st = SL_OK;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    /* An integer beyond long long is still valid JSON, and the index's numbers only warn (I1, I7:
     * total_size; other metadata is tolerated): read such a file again with doubles for them. */
    const bool ints_as_real = !root && json_error_code(&je) == json_error_numeric_overflow;
    if (ints_as_real)
        root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    if (!root) {
        st = sl_err_set(e, SL_E_INDEX, "invalid JSON at byte %d: %s", je.position, je.text);
        goto out;
    }
    if (!json_is_object(root)) {
        st = sl_err_set(e, SL_E_INDEX, "the root is not an object");
        goto out;
    }
    st = index_metadata(root, buf, len, ints_as_real, ix, e);
    if (st == SL_OK)
        st = index_weight_map(root, ix, e);
out:
    json_decref(root);
    if (st != SL_OK)
        st_index_free(ix);
    return st;
}

void st_index_free(st_index *ix)
{
    if (!ix)
        return;
    sl_arena_free(&ix->arena);
    memset(ix, 0, sizeof(*ix));
}

sl_status sl_validate_index_buffer(const void *buf, size_t len, char *err, size_t errlen)
{
    sl_err e = {0};
    st_index ix;
    const sl_status st = st_index_parse(buf, len, &ix, &e);
    if (st != SL_OK)
        sl_err_prefix(&e, ST_INDEX_NAME);
    sl_err_export(&e, err, errlen);
    st_index_free(&ix);
    sl_err_clear(&e);
    return st;
}
