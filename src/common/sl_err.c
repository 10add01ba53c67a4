/* sl_err.c - error records (see sl_err.h). */
#include "common/sl_err.h"

#include "common/sl_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char sl_oom_msg[] = "out of memory while formatting an error message";

static void err_store(sl_err *e, char *msg)
{
    if (e->msg != sl_oom_msg)
        free(e->msg);
    e->msg = msg ? msg : sl_oom_msg;
}

/* Every message is one printable line of bounded length, whatever a file put into the names and
 * paths it quotes: control bytes become \xNN and the message is cut at SL_TEXT_MSG_MAX bytes. */
static char *err_clean(char *msg)
{
    if (!msg || !sl_text_needs_sanitize(msg, SL_TEXT_MSG_MAX))
        return msg;
    char *clean = sl_text_sanitize(msg, SL_TEXT_MSG_MAX);
    free(msg);
    return clean;
}

sl_status sl_err_vset(sl_err *e, sl_status st, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg)
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
    e->st = st;
    err_store(e, err_clean(msg));
    return st;
}

sl_status sl_err_set(sl_err *e, sl_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_err_vset(e, st, fmt, ap);
    va_end(ap);
    return st;
}

sl_status sl_err_prefix(sl_err *e, const char *prefix)
{
    const char *old = sl_err_msg(e);
    const size_t n = strlen(prefix) + 2 + strlen(old) + 1;
    char *msg = malloc(n);
    if (msg)
        snprintf(msg, n, "%s: %s", prefix, old);
    err_store(e, err_clean(msg));
    return e->st;
}

sl_status sl_err_copy(sl_err *dst, const sl_err *src)
{
    return sl_err_set(dst, src->st, "%s", sl_err_msg(src));
}

void sl_err_clear(sl_err *e)
{
    err_store(e, NULL);
    if (e->msg == sl_oom_msg)
        e->msg = NULL;
    e->st = SL_OK;
}

const char *sl_err_msg(const sl_err *e)
{
    return e && e->msg ? e->msg : "";
}

void sl_err_export(const sl_err *e, char *buf, size_t len)
{
    if (buf && len > 0)
        snprintf(buf, len, "%s", sl_err_msg(e));
}
