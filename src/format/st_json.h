/* st_json.h - the strict JSON lexer under the safetensors header parser.
 *
 * Why our own and not jansson: header numbers must be exact u64 (jansson has only long long, and
 * others go through double), duplicate keys must be compared after unescaping with policy- vs
 * syntax-error classes kept apart, errors need byte offsets, and a 100 MB header must parse without
 * a DOM. The lexer works on bytes already checked to be valid UTF-8, never allocates except into the
 * caller's arena, and bounds nesting at ST_MAX_DEPTH. */
#ifndef ST_JSON_H
#define ST_JSON_H

#include "format/st_format.h"

#include <string.h>

typedef struct st_lex {
    const unsigned char *base, *p, *end;
    sl_arena *arena;
    sl_err *err;
    unsigned depth;          /* containers currently open */
    const char *tensor;      /* the entry being parsed (its display name), or NULL: named in
                              * every error inside it, the lexer's own ones included */
} st_lex;

/* A decoded string: either a slice of the input (no escapes, not NUL-terminated unless persisted)
 * or an unescaped, NUL-terminated copy in the arena. */
typedef struct st_str {
    const char *s;
    size_t len;
    bool has_nul;            /* contains U+0000 (from \u0000) */
} st_str;

/* Records SL_E_HEADER_JSON with the byte offset of at (inside the header). */
sl_status st_lex_fail(st_lex *lx, const unsigned char *at, const char *fmt, ...) SL_PRINTF(3, 4);
void st_lex_ws(st_lex *lx);
/* Skips whitespace, then consumes c or fails with "expected <what>". */
sl_status st_lex_expect(st_lex *lx, char c, const char *what);
/* Skips whitespace; true (and consumes it) when the next byte is c. */
bool st_lex_accept(st_lex *lx, char c);
/* Parses a string literal. With persist the result is always a NUL-terminated arena copy. */
sl_status st_lex_string(st_lex *lx, bool persist, st_str *out);
/* Parses a non-negative integer exactly: no '-', '.', exponent, leading zero, or value > 2^64-1. */
sl_status st_lex_u64(st_lex *lx, uint64_t *out);
/* Skips any JSON value, nesting bounded by ST_MAX_DEPTH. */
sl_status st_lex_skip(st_lex *lx);
/* Depth bookkeeping for containers the caller opens itself. */
sl_status st_lex_enter(st_lex *lx);
void st_lex_leave(st_lex *lx);
/* Within an object/array: after a member, consumes ',' (returns true) or the closing c (returns
 * false, *st = SL_OK); anything else sets *st to an error. */
bool st_lex_next(st_lex *lx, char close, sl_status *st);

static inline bool st_str_eq(const st_str *s, const char *lit, size_t n)
{
    return s->len == n && memcmp(s->s, lit, n) == 0;
}

#endif /* ST_JSON_H */
