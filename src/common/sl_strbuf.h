/* sl_strbuf.h - a growable string, for messages that list many names and for JSON output. */
#ifndef SL_STRBUF_H
#define SL_STRBUF_H

#include "common/sl_err.h"

#include <stddef.h>

typedef struct sl_strbuf {
    char *data;   /* NUL-terminated once anything was appended; NULL before */
    size_t len, cap;
    int oom;      /* sticky: an append failed */
} sl_strbuf;

void sl_strbuf_append(sl_strbuf *b, const char *s, size_t n);
void sl_strbuf_puts(sl_strbuf *b, const char *s);
void sl_strbuf_printf(sl_strbuf *b, const char *fmt, ...) SL_PRINTF(2, 3);
/* Appends s as a JSON string literal, quotes included. */
void sl_strbuf_json_str(sl_strbuf *b, const char *s);
const char *sl_strbuf_str(const sl_strbuf *b);   /* "" when empty */
void sl_strbuf_free(sl_strbuf *b);

#endif /* SL_STRBUF_H */
