/* st_header.c - validation of a safetensors header, in the order of the reference implementation
 * (SAFETENSORS.md section 2): the first failing step decides the status.
 *
 *   1-3  st_prefix_check: file >= 8 bytes, N <= 100,000,000 (before the file length), 8+N <= file
 *   4    the N header bytes are UTF-8 (padding included)
 *   5    JSON: root object of tensors plus optional __metadata__ (SL_E_HEADER_JSON)
 *   6    sorted by (begin, end): contiguity, numel, bits, alignment, size (per tensor, in order)
 *   7    last end == file length - 8 - N, compared without adding
 *   then shardload's deliberate rejections (SL_E_POLICY), which the reference accepts.
 *
 * Policy findings made while parsing are only noted, and reported after steps 6-7, so that a file the
 * reference rejects gets the reference's class. Duplicate names are resolved "last one wins" for
 * steps 6-7, as the reference's HashMap does, and then rejected. */
#include "format/st_json.h"

#include "common/sl_text.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

enum { F_DTYPE = 1, F_SHAPE = 2, F_OFFSETS = 4, F_ALL = 7 };

typedef struct hdr_parse {
    st_lex lx;
    st_header *h;
    uint64_t *shape;          /* scratch for one shape, reused */
    size_t shape_cap;
    bool seen_meta;
    sl_err policy;            /* first deferred policy finding */
} hdr_parse;

static const char *tname(const st_tensor *t, char *buf, size_t n)
{
    return st_display(t->name, t->name_len, buf, n);
}

static void policy_note(hdr_parse *hp, const char *fmt, ...) SL_PRINTF(2, 3);
static void policy_note(hdr_parse *hp, const char *fmt, ...)
{
    if (hp->policy.st != SL_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    sl_err_vset(&hp->policy, SL_E_POLICY, fmt, ap);
    va_end(ap);
}

static sl_status nomem(hdr_parse *hp)
{
    return sl_err_set(hp->lx.err, SL_E_NOMEM, "out of memory parsing header");
}

/* Growth of the result arrays is bounded by N: every entry takes several header bytes. */
static sl_status grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return SL_OK;
    const size_t nc = *cap ? *cap * 2 : 64;
    if (nc > SIZE_MAX / elem)
        return SL_E_NOMEM;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return SL_E_NOMEM;
    *arr = p;
    *cap = nc;
    return SL_OK;
}

/* ---- step 5: the JSON structure ---- */

static sl_status parse_dtype(hdr_parse *hp, st_tensor *t)
{
    char nb[160], db[64];
    const unsigned char *at = hp->lx.p;
    st_str s;
    SL_TRY(st_lex_string(&hp->lx, false, &s));
    if (s.has_nul || sl_dtype_from_name(s.s, s.len, &t->dtype) != 0)
        return st_lex_fail(&hp->lx, at, "tensor '%s': unknown dtype '%s'", tname(t, nb, sizeof nb),
                           st_display(s.s, s.len, db, sizeof db));
    return SL_OK;
}

static sl_status parse_shape(hdr_parse *hp, st_tensor *t)
{
    st_lex *lx = &hp->lx;
    size_t n = 0;
    sl_status st = SL_OK;
    SL_TRY(st_lex_expect(lx, '[', "'[' (shape)"));
    SL_TRY(st_lex_enter(lx));
    if (!st_lex_accept(lx, ']')) {
        do {
            if (grow((void **)&hp->shape, &hp->shape_cap, n, sizeof(uint64_t)) != SL_OK)
                return nomem(hp);
            SL_TRY(st_lex_u64(lx, &hp->shape[n]));
            n++;
        } while (st_lex_next(lx, ']', &st));
        SL_TRY(st);
    }
    st_lex_leave(lx);
    uint64_t *dims = sl_arena_alloc(lx->arena, n * sizeof(uint64_t));
    if (!dims)
        return nomem(hp);
    if (n)
        memcpy(dims, hp->shape, n * sizeof(uint64_t));
    t->shape = dims;
    t->ndim = (uint32_t)n;   /* n < N / 2 <= 5e7: fits */
    return SL_OK;
}

static sl_status parse_offsets(hdr_parse *hp, st_tensor *t)
{
    st_lex *lx = &hp->lx;
    char nb[160];
    SL_TRY(st_lex_expect(lx, '[', "'[' (data_offsets)"));
    const unsigned char *at = lx->p;
    SL_TRY(st_lex_enter(lx));
    if (st_lex_accept(lx, ']'))
        return st_lex_fail(lx, at, "tensor '%s': data_offsets must have 2 entries", tname(t, nb, sizeof nb));
    SL_TRY(st_lex_u64(lx, &t->begin));
    if (!st_lex_accept(lx, ','))
        return st_lex_fail(lx, lx->p, "tensor '%s': data_offsets must have 2 entries", tname(t, nb, sizeof nb));
    SL_TRY(st_lex_u64(lx, &t->end));
    if (!st_lex_accept(lx, ']'))
        return st_lex_fail(lx, lx->p, "tensor '%s': data_offsets must have exactly 2 entries",
                           tname(t, nb, sizeof nb));
    st_lex_leave(lx);
    return SL_OK;
}

static sl_status parse_field(hdr_parse *hp, st_tensor *t, int f)
{
    switch (f) {
    case F_DTYPE: return parse_dtype(hp, t);
    case F_SHAPE: return parse_shape(hp, t);
    default: return parse_offsets(hp, t);
    }
}

static int field_of(const st_str *k)
{
    if (st_str_eq(k, "dtype", 5))
        return F_DTYPE;
    if (st_str_eq(k, "shape", 5))
        return F_SHAPE;
    if (st_str_eq(k, "data_offsets", 12))
        return F_OFFSETS;
    return 0;
}

static sl_status parse_tensor_object(hdr_parse *hp, st_tensor *t, const unsigned char *at)
{
    st_lex *lx = &hp->lx;
    char nb[160], kb[64];
    int seen = 0;
    sl_status st = SL_OK;
    SL_TRY(st_lex_enter(lx));
    if (!st_lex_accept(lx, '}')) {
        do {
            const unsigned char *kat = (st_lex_ws(lx), lx->p);
            st_str k;
            SL_TRY(st_lex_string(lx, false, &k));
            SL_TRY(st_lex_expect(lx, ':', "':'"));
            const int f = field_of(&k);
            if (f && (seen & f))
                return st_lex_fail(lx, kat, "tensor '%s': duplicate field '%s'", tname(t, nb, sizeof nb),
                                   st_display(k.s, k.len, kb, sizeof kb));
            if (f) {
                SL_TRY(parse_field(hp, t, f));
                seen |= f;
                continue;
            }
            policy_note(hp, "tensor '%s': unexpected key '%s' (only dtype, shape, data_offsets)",
                        tname(t, nb, sizeof nb), st_display(k.s, k.len, kb, sizeof kb));
            SL_TRY(st_lex_skip(lx));
        } while (st_lex_next(lx, '}', &st));
        SL_TRY(st);
    }
    st_lex_leave(lx);
    if (seen != F_ALL) {
        const char *miss = !(seen & F_DTYPE) ? "dtype" : !(seen & F_SHAPE) ? "shape" : "data_offsets";
        return st_lex_fail(lx, at, "tensor '%s': missing field '%s'", tname(t, nb, sizeof nb), miss);
    }
    return SL_OK;
}

/* serde also fills a struct from a sequence: ["F32", [2], [0, 8]]. The reference accepts it; we
 * parse it for the right error class, then reject it by policy. */
static sl_status parse_tensor_array(hdr_parse *hp, st_tensor *t, const unsigned char *at)
{
    st_lex *lx = &hp->lx;
    char nb[160];
    SL_TRY(st_lex_enter(lx));
    for (int f = F_DTYPE; f <= F_OFFSETS; f <<= 1) {
        if (f != F_DTYPE && !st_lex_accept(lx, ','))
            return st_lex_fail(lx, lx->p, "tensor '%s': array form needs 3 entries", tname(t, nb, sizeof nb));
        SL_TRY(parse_field(hp, t, f));
    }
    if (!st_lex_accept(lx, ']'))
        return st_lex_fail(lx, lx->p, "tensor '%s': array form needs exactly 3 entries", tname(t, nb, sizeof nb));
    st_lex_leave(lx);
    (void)at;
    policy_note(hp, "tensor '%s': entry is an array, not an object {dtype, shape, data_offsets}",
                tname(t, nb, sizeof nb));
    return SL_OK;
}

static sl_status parse_tensor(hdr_parse *hp, const st_str *name)
{
    st_header *h = hp->h;
    char nb[160];
    if (grow((void **)&h->tensors, &h->cap_tensors, h->n_tensors, sizeof(st_tensor)) != SL_OK)
        return nomem(hp);
    st_tensor *t = &h->tensors[h->n_tensors];
    memset(t, 0, sizeof(*t));
    t->name = name->s;
    t->name_len = name->len;
    if (name->has_nul)
        policy_note(hp, "tensor name '%s' contains U+0000", tname(t, nb, sizeof nb));
    st_lex_ws(&hp->lx);
    const unsigned char *at = hp->lx.p;
    sl_status st;
    hp->lx.tensor = tname(t, nb, sizeof nb);
    if (st_lex_accept(&hp->lx, '{'))
        st = parse_tensor_object(hp, t, at);
    else if (st_lex_accept(&hp->lx, '['))
        st = parse_tensor_array(hp, t, at);
    else
        st = st_lex_fail(&hp->lx, at, "expected an object");
    hp->lx.tensor = NULL;
    SL_TRY(st);
    h->n_tensors++;
    return SL_OK;
}

static sl_status parse_meta_entry(hdr_parse *hp)
{
    st_lex *lx = &hp->lx;
    st_header *h = hp->h;
    char kb[160];
    st_str k, v;
    SL_TRY(st_lex_string(lx, true, &k));
    SL_TRY(st_lex_expect(lx, ':', "':'"));
    st_lex_ws(lx);
    if (lx->p >= lx->end || *lx->p != '"')
        return st_lex_fail(lx, lx->p, "__metadata__ value for '%s' is not a string",
                           st_display(k.s, k.len, kb, sizeof kb));
    SL_TRY(st_lex_string(lx, true, &v));
    if (k.has_nul || v.has_nul)
        policy_note(hp, "__metadata__ entry '%s' contains U+0000", st_display(k.s, k.len, kb, sizeof kb));
    if (grow((void **)&h->meta, &h->cap_meta, h->n_meta, sizeof(st_meta)) != SL_OK)
        return nomem(hp);
    h->meta[h->n_meta].key = k.s;
    h->meta[h->n_meta].value = v.s;
    h->n_meta++;
    return SL_OK;
}

static sl_status parse_metadata(hdr_parse *hp, const unsigned char *kat)
{
    st_lex *lx = &hp->lx;
    sl_status st = SL_OK;
    if (hp->seen_meta)
        return st_lex_fail(lx, kat, "duplicate field '__metadata__'");
    hp->seen_meta = true;
    st_lex_ws(lx);
    if ((size_t)(lx->end - lx->p) >= 4 && memcmp(lx->p, "null", 4) == 0) {
        lx->p += 4;
        policy_note(hp, "__metadata__ is null (omit it or use an object)");
        return SL_OK;
    }
    SL_TRY(st_lex_expect(lx, '{', "an object of strings for __metadata__"));
    SL_TRY(st_lex_enter(lx));
    if (!st_lex_accept(lx, '}')) {
        do
            SL_TRY(parse_meta_entry(hp));
        while (st_lex_next(lx, '}', &st));
        SL_TRY(st);
    }
    st_lex_leave(lx);
    return SL_OK;
}

static sl_status parse_root(hdr_parse *hp)
{
    st_lex *lx = &hp->lx;
    sl_status st = SL_OK;
    SL_TRY(st_lex_expect(lx, '{', "'{' (the header must be a JSON object)"));
    SL_TRY(st_lex_enter(lx));
    if (!st_lex_accept(lx, '}')) {
        do {
            const unsigned char *kat = (st_lex_ws(lx), lx->p);
            st_str k;
            SL_TRY(st_lex_string(lx, false, &k));
            SL_TRY(st_lex_expect(lx, ':', "':'"));
            if (st_str_eq(&k, "__metadata__", 12)) {
                SL_TRY(parse_metadata(hp, kat));
                continue;
            }
            if (k.s >= (const char *)lx->base && k.s < (const char *)lx->end) {   /* still a slice */
                k.s = sl_arena_strndup(lx->arena, k.s, k.len);
                if (!k.s)
                    return nomem(hp);
            }
            SL_TRY(parse_tensor(hp, &k));
        } while (st_lex_next(lx, '}', &st));
        SL_TRY(st);
    }
    st_lex_leave(lx);
    st_lex_ws(lx);
    if (lx->p != lx->end)
        return st_lex_fail(lx, lx->p, "trailing characters after the header object");
    return SL_OK;
}

/* ---- steps 6-7 ---- */

sl_status st_tensor_nbytes(sl_dtype dt, uint32_t ndim, const uint64_t *shape, uint64_t *out)
{
    uint64_t numel = 1, bits;
    for (uint32_t i = 0; i < ndim; i++) {   /* left to right: [0, MAX] passes, [MAX, 2, 0] fails */
        if (sl_mul_overflow(numel, shape[i], &numel))
            return SL_E_OVERFLOW;
    }
    if (sl_mul_overflow(numel, sl_dtype_bits(dt), &bits))
        return SL_E_OVERFLOW;
    if (bits % 8 != 0)
        return SL_E_MISALIGNED;
    *out = bits / 8;
    return SL_OK;
}

static sl_status check_size(const st_tensor *t, sl_err *e)
{
    char nb[160], sb[SL_TEXT_SHAPE];
    uint64_t nbytes = 0;
    const sl_status st = st_tensor_nbytes(t->dtype, t->ndim, t->shape, &nbytes);
    if (st == SL_OK && t->end - t->begin == nbytes)
        return SL_OK;   /* the common case: no message to format */
    sl_text_shape(t->shape, t->ndim, sb, sizeof sb);
    if (st == SL_E_OVERFLOW)
        return sl_err_set(e, st, "tensor '%s': shape %s with dtype %s overflows 64-bit size arithmetic",
                          tname(t, nb, sizeof nb), sb, sl_dtype_name(t->dtype));
    if (st == SL_E_MISALIGNED)
        return sl_err_set(e, st, "tensor '%s': shape %s of dtype %s is not a whole number of bytes",
                          tname(t, nb, sizeof nb), sb, sl_dtype_name(t->dtype));
    SL_CHECK(t->end - t->begin == nbytes, e, SL_E_TENSOR_INFO,
             "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] but dtype %s and shape %s need %" PRIu64
             " bytes", tname(t, nb, sizeof nb), t->begin, t->end, sl_dtype_name(t->dtype), sb, nbytes);
    return SL_OK;
}

static int cmp_offsets(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x < y ? -1 : x > y;   /* ties: header order, so results are reproducible */
}

static int cmp_names(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    const int c = memcmp(x->name, y->name, x->name_len < y->name_len ? x->name_len : y->name_len);
    if (c)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Sorts by name and keeps, per name, the last entry (the reference's HashMap insert). Returns the
 * number kept in v; *dup is set to the first duplicated entry, if any. */
static size_t dedup_last_wins(st_tensor **v, size_t n, const st_tensor **dup)
{
    qsort(v, n, sizeof(*v), cmp_names);
    size_t k = 0;
    *dup = NULL;
    for (size_t i = 0; i < n; i++) {
        const bool same_as_next = i + 1 < n && v[i]->name_len == v[i + 1]->name_len &&
                                  memcmp(v[i]->name, v[i + 1]->name, v[i]->name_len) == 0;
        if (same_as_next) {
            if (!*dup)
                *dup = v[i];
            continue;
        }
        v[k++] = v[i];
    }
    return k;
}

static sl_status check_layout(st_tensor **v, size_t n, uint64_t data_len, sl_err *e)
{
    char nb[160];
    uint64_t start = 0;
    qsort(v, n, sizeof(*v), cmp_offsets);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = v[i];
        SL_CHECK(t->end >= t->begin, e, SL_E_INVALID_OFFSET,
                 "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin",
                 tname(t, nb, sizeof nb), t->begin, t->end);
        SL_CHECK(t->begin == start, e, SL_E_INVALID_OFFSET,
                 "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] begin at %" PRIu64 ", expected %" PRIu64
                 " (tensors must tile the data buffer with no hole or overlap)",
                 tname(t, nb, sizeof nb), t->begin, t->end, t->begin, start);
        SL_TRY(check_size(t, e));
        start = t->end;
    }
    SL_CHECK(start == data_len, e, SL_E_INCOMPLETE,
             "data buffer is %" PRIu64 " bytes but the tensors cover %" PRIu64 " bytes%s", data_len, start,
             data_len > start ? " (trailing bytes)" : " (file too short)");
    return SL_OK;
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

static sl_status check_policy(hdr_parse *hp, const st_tensor *dup)
{
    st_header *h = hp->h;
    char nb[160];
    if (hp->policy.st != SL_OK)
        return sl_err_copy(hp->lx.err, &hp->policy);
    SL_CHECK(!dup, hp->lx.err, SL_E_POLICY, "duplicate tensor name '%s'", tname(dup, nb, sizeof nb));
    if (h->n_meta > 1)   /* meta is NULL when empty, and qsort must not see NULL */
        qsort(h->meta, h->n_meta, sizeof(st_meta), cmp_meta);
    for (size_t i = 1; i < h->n_meta; i++)
        SL_CHECK(strcmp(h->meta[i - 1].key, h->meta[i].key) != 0, hp->lx.err, SL_E_POLICY,
                 "duplicate __metadata__ key '%s'", st_display(h->meta[i].key, strlen(h->meta[i].key), nb, sizeof nb));
    return SL_OK;
}

/* Steps 6-7 and policy; on success h->tensors is rewritten in file order. */
static sl_status validate(hdr_parse *hp, uint64_t data_len)
{
    st_header *h = hp->h;
    sl_status st = SL_OK;
    const st_tensor *dup = NULL;
    st_tensor **v = malloc((h->n_tensors ? h->n_tensors : 1) * sizeof(*v));
    st_tensor *ordered = malloc((h->n_tensors ? h->n_tensors : 1) * sizeof(*ordered));
    if (!v || !ordered) {
        st = nomem(hp);
        goto out;
    }
    for (size_t i = 0; i < h->n_tensors; i++)
        v[i] = &h->tensors[i];
    const size_t kept = dedup_last_wins(v, h->n_tensors, &dup);
    st = check_layout(v, kept, data_len, hp->lx.err);
    if (st == SL_OK)
        st = check_policy(hp, dup);
    if (st != SL_OK)
        goto out;
    for (size_t i = 0; i < kept; i++)
        ordered[i] = *v[i];
    free(h->tensors);
    h->tensors = ordered;
    h->n_tensors = h->cap_tensors = kept;
    ordered = NULL;
out:
    free(v);
    free(ordered);
    return st;
}

/* ---- entry points ---- */

sl_status st_prefix_check(const unsigned char *first8, uint64_t file_len, uint64_t *n, sl_err *e)
{
    SL_CHECK(file_len >= 8, e, SL_E_HEADER_TOO_SMALL,
             "file is %" PRIu64 " bytes, too small for the 8-byte header length", file_len);
    const uint64_t hl = sl_load_le64(first8);
    SL_CHECK(hl <= ST_MAX_HEADER && hl <= SIZE_MAX, e, SL_E_HEADER_TOO_LARGE,
             "header length %" PRIu64 " exceeds the limit of 100,000,000 bytes", hl);
    SL_CHECK(hl <= file_len - 8, e, SL_E_HEADER_LENGTH,
             "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)", hl, file_len);
    *n = hl;
    return SL_OK;
}

sl_status st_header_parse(const unsigned char *hdr, size_t n, uint64_t file_len, st_header *h, sl_err *e)
{
    hdr_parse hp = {.lx = {.base = hdr, .p = hdr, .end = hdr + n, .arena = &h->arena, .err = e}, .h = h};
    memset(h, 0, sizeof(*h));
    h->header_len = n;
    h->data_start = 8 + (uint64_t)n;   /* n <= ST_MAX_HEADER: no overflow */
    h->data_len = file_len - h->data_start;
    sl_status st = SL_OK;
    const size_t bad = st_utf8_check(hdr, n);
    if (bad != n) {
        st = sl_err_set(e, SL_E_HEADER_UTF8, "invalid UTF-8 in header at byte %zu", bad);
        goto out;
    }
    st = parse_root(&hp);
    if (st == SL_OK)
        st = validate(&hp, h->data_len);
out:
    free(hp.shape);
    sl_err_clear(&hp.policy);
    if (st != SL_OK)
        st_header_free(h);
    return st;
}

void st_header_free(st_header *h)
{
    if (!h)
        return;
    sl_arena_free(&h->arena);
    free(h->tensors);
    free(h->meta);
    h->tensors = NULL;
    h->meta = NULL;
    h->n_tensors = h->cap_tensors = h->n_meta = h->cap_meta = 0;
}

sl_status sl_validate_buffer(const void *buf, size_t len, const char *name, char *err, size_t errlen)
{
    sl_err e = {0};
    st_header h = {0};
    uint64_t n = 0;
    const unsigned char *b = buf;
    unsigned char first8[8] = {0};
    if (!b && len > 0) {
        if (err && errlen)
            snprintf(err, errlen, "sl_validate_buffer: NULL buffer");
        return SL_E_INVALID_ARG;
    }
    if (len > 0)
        memcpy(first8, b, len < 8 ? len : 8);
    sl_status st = st_prefix_check(first8, len, &n, &e);
    if (st == SL_OK)
        st = st_header_parse(b + 8, (size_t)n, len, &h, &e);
    if (st != SL_OK)
        sl_err_prefix(&e, name ? name : "<buffer>");
    sl_err_export(&e, err, errlen);
    if (st == SL_OK && err && errlen)
        err[0] = '\0';
    st_header_free(&h);
    sl_err_clear(&e);
    return st;
}
