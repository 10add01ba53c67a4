/* sl_strbuf.c - growable string (see sl_strbuf.h). */
#include "common/sl_strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int strbuf_reserve(sl_strbuf *b, size_t extra)
{
    if (b->oom || extra > SIZE_MAX / 2 - b->len)
        return b->oom = 1, -1;
    const size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return b->oom = 1, -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

void sl_strbuf_append(sl_strbuf *b, const char *s, size_t n)
{
    if (strbuf_reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sl_strbuf_puts(sl_strbuf *b, const char *s)
{
    sl_strbuf_append(b, s, strlen(s));
}

void sl_strbuf_printf(sl_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || strbuf_reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sl_strbuf_json_str(sl_strbuf *b, const char *s)
{
    sl_strbuf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            const char esc[2] = {'\\', (char)*p};
            sl_strbuf_append(b, esc, 2);
        } else if (*p < 0x20) {
            sl_strbuf_printf(b, "\\u%04x", *p);
        } else {
            sl_strbuf_append(b, (const char *)p, 1);
        }
    }
    sl_strbuf_append(b, "\"", 1);
}

const char *sl_strbuf_str(const sl_strbuf *b)
{
    return b->data ? b->data : "";
}

void sl_strbuf_free(sl_strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
