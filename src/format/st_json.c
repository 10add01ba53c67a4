/* st_json.c - strict JSON lexer for safetensors headers (see st_json.h), plus the entry to the UTF-8
 * check (sl_text.c) that runs over the whole header before any JSON is looked at (reference step 4). */
#include "format/st_json.h"

#include "common/sl_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- UTF-8 ---- */

/* The check lives in common (sl_text.c), where the S3 listing's keys (io) reach it too. */
size_t st_utf8_check(const unsigned char *s, size_t n)
{
    return sl_text_utf8_check(s, n);
}

const char *st_display(const char *s, size_t n, char *buf, size_t buflen)
{
    return sl_text_display(s, n, buf, buflen);
}

/* ---- lexer ---- */

sl_status st_lex_fail(st_lex *lx, const unsigned char *at, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const int named = lx->tensor && strncmp(what, "tensor '", 8) != 0;
    return sl_err_set(lx->err, SL_E_HEADER_JSON, "invalid JSON in header at byte %zu: %s%s%s%s",
                      (size_t)(at - lx->base), named ? "tensor '" : "", named ? lx->tensor : "",
                      named ? "': " : "", what);
}

void st_lex_ws(st_lex *lx)
{
    const unsigned char *p = lx->p;
    while (p < lx->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    lx->p = p;
}

bool st_lex_accept(st_lex *lx, char c)
{
    st_lex_ws(lx);
    if (lx->p < lx->end && *lx->p == (unsigned char)c) {
        lx->p++;
        return true;
    }
    return false;
}

sl_status st_lex_expect(st_lex *lx, char c, const char *what)
{
    if (st_lex_accept(lx, c))
        return SL_OK;
    if (lx->p >= lx->end)
        return st_lex_fail(lx, lx->p, "unexpected end of header, expected %s", what);
    return st_lex_fail(lx, lx->p, "expected %s", what);
}

bool st_lex_next(st_lex *lx, char close, sl_status *st)
{
    *st = SL_OK;
    if (st_lex_accept(lx, ','))
        return true;
    if (st_lex_accept(lx, close))
        return false;
    *st = close == '}' ? st_lex_expect(lx, ',', "',' or '}'") : st_lex_expect(lx, ',', "',' or ']'");
    return false;
}

sl_status st_lex_enter(st_lex *lx)
{
    if (lx->depth + 1 >= ST_MAX_DEPTH)
        return st_lex_fail(lx, lx->p, "nesting deeper than %d levels", ST_MAX_DEPTH - 1);
    lx->depth++;
    return SL_OK;
}

void st_lex_leave(st_lex *lx)
{
    lx->depth--;
}

static bool read_hex4(const unsigned char *p, const unsigned char *end, unsigned *out)
{
    if (end - p < 4)
        return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        const int h = sl_text_hex_digit(p[i]);
        if (h < 0)
            return false;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return true;
}

/* Decodes the \u escape at p (pointing after "\u"); combines a surrogate pair. */
static sl_status unescape_u(st_lex *lx, const unsigned char **pp, unsigned *cp)
{
    const unsigned char *p = *pp;
    unsigned hi, lo;
    if (!read_hex4(p, lx->end, &hi))
        return st_lex_fail(lx, p, "invalid \\u escape");
    p += 4;
    if (hi >= 0xDC00 && hi <= 0xDFFF)
        return st_lex_fail(lx, p - 6, "lone trailing surrogate in \\u escape");
    if (hi >= 0xD800 && hi <= 0xDBFF) {
        if (lx->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !read_hex4(p + 2, lx->end, &lo) ||
            lo < 0xDC00 || lo > 0xDFFF)
            return st_lex_fail(lx, p - 6, "lone leading surrogate in \\u escape");
        p += 6;
        hi = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    }
    *cp = hi;
    *pp = p;
    return SL_OK;
}

static int simple_escape(unsigned char c)
{
    switch (c) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return -1;
    }
}

/* Second pass for strings with escapes: raw is [s, e); the unescaped text is never longer. */
static sl_status unescape(st_lex *lx, const unsigned char *s, const unsigned char *e, st_str *out)
{
    char *o = sl_arena_alloc(lx->arena, (size_t)(e - s) + 1);
    if (!o)
        return sl_err_set(lx->err, SL_E_NOMEM, "out of memory parsing header");
    size_t n = 0;
    while (s < e) {
        if (*s != '\\') {
            o[n++] = (char)*s++;
            continue;
        }
        const int c = simple_escape(s[1]);
        if (c >= 0) {
            o[n++] = (char)c;
            s += 2;
            continue;
        }
        if (s[1] != 'u') {   /* the byte shown printable: a control byte or half a character */
            char eb[8];
            if (s[1] >= 0x80)
                snprintf(eb, sizeof eb, "\\x%02x", (unsigned)s[1]);
            else
                sl_text_display((const char *)s + 1, 1, eb, sizeof eb);
            return st_lex_fail(lx, s, "invalid escape '\\%s'", eb);
        }
        s += 2;
        unsigned cp = 0;
        SL_TRY(unescape_u(lx, &s, &cp));
        out->has_nul |= cp == 0;
        n += sl_text_utf8_put(o + n, cp);
    }
    o[n] = '\0';
    out->s = o;
    out->len = n;
    return SL_OK;
}

sl_status st_lex_string(st_lex *lx, bool persist, st_str *out)
{
    SL_TRY(st_lex_expect(lx, '"', "a string"));
    const unsigned char *s = lx->p, *p = lx->p;
    bool esc = false;
    for (;;) {
        if (p >= lx->end)
            return st_lex_fail(lx, s - 1, "unterminated string");
        const unsigned char c = *p;
        if (c == '"')
            break;
        if (c < 0x20)
            return st_lex_fail(lx, p, "control character 0x%02x in string", c);
        if (c == '\\') {
            esc = true;
            if (p + 1 >= lx->end)
                return st_lex_fail(lx, s - 1, "unterminated string");
            p++;   /* the escaped byte can never end the string */
        }
        p++;
    }
    lx->p = p + 1;
    out->has_nul = false;
    if (esc)
        return unescape(lx, s, p, out);
    out->len = (size_t)(p - s);
    out->s = (const char *)s;
    if (persist) {
        out->s = sl_arena_strndup(lx->arena, (const char *)s, out->len);
        if (!out->s)
            return sl_err_set(lx->err, SL_E_NOMEM, "out of memory parsing header");
    }
    return SL_OK;
}

sl_status st_lex_u64(st_lex *lx, uint64_t *out)
{
    st_lex_ws(lx);
    const unsigned char *s = lx->p, *p = lx->p;
    if (p < lx->end && *p == '-')
        return st_lex_fail(lx, s, "negative number where an unsigned integer is required");
    if (p >= lx->end || *p < '0' || *p > '9')
        return st_lex_fail(lx, s, "expected an unsigned integer");
    uint64_t v = 0;
    for (; p < lx->end && *p >= '0' && *p <= '9'; p++) {
        if (sl_mul_overflow(v, 10, &v) || sl_add_overflow(v, (uint64_t)(*p - '0'), &v))
            return st_lex_fail(lx, s, "integer larger than 2^64-1");
    }
    if (*s == '0' && p - s > 1)
        return st_lex_fail(lx, s, "number with a leading zero");
    if (p < lx->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return st_lex_fail(lx, s, "number is not an integer");
    lx->p = p;
    *out = v;
    return SL_OK;
}

/* Any JSON number (for skipped values): its grammar, and its range as a double, as the reference's
 * parser (serde_json) refuses one past it wherever it stands (1e400, an integer of 310 digits). */
static sl_status skip_number(st_lex *lx)
{
    const unsigned char *s = lx->p, *p = lx->p, *e = lx->end;
    if (p < e && *p == '-')
        p++;
    if (p >= e || *p < '0' || *p > '9')
        return st_lex_fail(lx, s, "invalid number");
    if (*p == '0' && p + 1 < e && p[1] >= '0' && p[1] <= '9')
        return st_lex_fail(lx, s, "number with a leading zero");
    while (p < e && *p >= '0' && *p <= '9')
        p++;
    if (p < e && *p == '.') {
        if (++p >= e || *p < '0' || *p > '9')
            return st_lex_fail(lx, s, "invalid number");
        while (p < e && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        if (++p < e && (*p == '+' || *p == '-'))
            p++;
        if (p >= e || *p < '0' || *p > '9')
            return st_lex_fail(lx, s, "invalid number");
        while (p < e && *p >= '0' && *p <= '9')
            p++;
    }
    if (sl_text_number_inf((const char *)s, (size_t)(p - s)))
        return st_lex_fail(lx, s, "number out of range");
    lx->p = p;
    return SL_OK;
}

static sl_status skip_literal(st_lex *lx, const char *lit)
{
    const size_t n = strlen(lit);
    if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, lit, n) != 0)
        return st_lex_fail(lx, lx->p, "expected a value");
    lx->p += n;
    return SL_OK;
}

static sl_status skip_container(st_lex *lx, char close)
{
    SL_TRY(st_lex_enter(lx));
    sl_status st = SL_OK;
    if (st_lex_accept(lx, close)) {
        st_lex_leave(lx);
        return SL_OK;
    }
    do {
        st_str key;
        if (close == '}') {
            SL_TRY(st_lex_string(lx, false, &key));
            SL_TRY(st_lex_expect(lx, ':', "':'"));
        }
        SL_TRY(st_lex_skip(lx));   /* recursion bounded by ST_MAX_DEPTH via st_lex_enter */
    } while (st_lex_next(lx, close, &st));
    st_lex_leave(lx);
    return st;
}

sl_status st_lex_skip(st_lex *lx)
{
    st_lex_ws(lx);
    if (lx->p >= lx->end)
        return st_lex_fail(lx, lx->p, "unexpected end of header, expected a value");
    st_str s;
    switch (*lx->p) {
    case '{': lx->p++; return skip_container(lx, '}');
    case '[': lx->p++; return skip_container(lx, ']');
    case '"': return st_lex_string(lx, false, &s);
    case 't': return skip_literal(lx, "true");
    case 'f': return skip_literal(lx, "false");
    case 'n': return skip_literal(lx, "null");
    default: return skip_number(lx);
    }
}
