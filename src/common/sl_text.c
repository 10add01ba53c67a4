/* sl_text.c - printable, bounded text for messages, and the UTF-8 check (see sl_text.h). */
#include "common/sl_text.h"

#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7F;
}

static size_t width(unsigned char c)
{
    return is_control(c) ? 4 : 1;
}

/* Writes s[0..n) escaped into out (cap bytes, the NUL included); when it does not all fit, as much
 * as fits before "...". */
static void text_escape(const char *s, size_t n, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t total = 0, o = 0;
    if (cap == 0)
        return;
    for (size_t i = 0; i < n; i++)
        total += width((unsigned char)s[i]);
    const int cut = total + 1 > cap;
    const size_t room = cut ? (cap > 4 ? cap - 4 : 0) : total;   /* bytes of text before "..." */
    for (size_t i = 0; i < n && o + width((unsigned char)s[i]) <= room; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (is_control(c)) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    for (int k = 0; cut && k < 3 && o + 1 < cap; k++)
        out[o++] = '.';
    out[o] = '\0';
}

const char *sl_text_display(const char *s, size_t n, char *buf, size_t buflen)
{
    if (buf)
        text_escape(s, n, buf, buflen);
    return buf;
}

const char *sl_text_name(const char *s, char *buf, size_t buflen)
{
    return sl_text_display(s ? s : "?", s ? strlen(s) : 1, buf, buflen);
}

int sl_text_needs_sanitize(const char *msg, size_t max)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++, n++) {
        if (is_control(*p) || n >= max)
            return 1;
    }
    return 0;
}

char *sl_text_sanitize(const char *msg, size_t max)
{
    const size_t n = strlen(msg);
    const size_t cap = (n * 4 + 4 < max ? n * 4 + 4 : max) + 1;
    char *out = malloc(cap);
    if (out)
        text_escape(msg, n, out, cap);
    return out;
}

/* The length of the valid UTF-8 sequence at s (left bytes there, s[0] >= 0x80), 0 when none. */
static size_t utf8_seq_len(const unsigned char *s, size_t left)
{
    const unsigned c = s[0];
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xE0 && s[1] < 0xA0)      /* overlong */
            return 0;
        if (c == 0xED && s[1] >= 0xA0)     /* UTF-16 surrogate */
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))   /* overlong, > U+10FFFF */
            return 0;
        return 4;
    }
    return 0;   /* continuation byte, C0/C1, F5..FF */
}

size_t sl_text_utf8_check(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time: headers and keys are almost all ASCII. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        const size_t k = utf8_seq_len(s + i, n - i);
        if (k == 0)
            return i;
        i += k;
    }
    return n;
}

size_t sl_text_utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

uint64_t sl_text_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int sl_text_ascii_alnum(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int sl_text_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int sl_text_is_hex(const char *s, size_t n, size_t digits)
{
    if (n != digits)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

const char *sl_text_shape(const uint64_t *shape, uint32_t ndim, char *buf, size_t buflen)
{
    if (!buflen)
        return buf;
    size_t o = (size_t)snprintf(buf, buflen, "[");
    for (uint32_t i = 0; i < ndim && o < buflen; i++) {
        if (i == 8) {
            o += (size_t)snprintf(buf + o, buflen - o, ", ... (%" PRIu32 " dims)", ndim);
            break;
        }
        o += (size_t)snprintf(buf + o, buflen - o, "%s%" PRIu64, i ? ", " : "", shape[i]);
    }
    if (o < buflen)
        snprintf(buf + o, buflen - o, "]");
    return buf;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void)
{
    c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

int sl_text_number_inf(const char *s, size_t n)
{
    char small[64];
    pthread_once(&c_locale_once, c_locale_make);
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf || !c_locale) {
        if (buf != small)
            free(buf);
        return 0;
    }
    memcpy(buf, s, n);
    buf[n] = 0;
    const locale_t was = uselocale(c_locale);
    const int inf = isinf(strtod(buf, NULL));
    uselocale(was);
    if (buf != small)
        free(buf);
    return inf;
}
