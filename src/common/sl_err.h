/* sl_err.h - the error record every handle carries, and the macros that raise errors.
 *
 * A handle embeds one sl_err. A failing function records a status and a formatted message in it
 * and returns the status; the public *_errmsg() getters return the message. The message is heap
 * memory owned by the record, replaced on the next failure and freed with the handle. */
#ifndef SL_ERR_H
#define SL_ERR_H

#include "shardload.h"

#include <stdarg.h>
#include <stddef.h>

#if defined(__GNUC__)
#define SL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SL_PRINTF(f, a)
#endif

typedef struct sl_err {
    sl_status st;
    char *msg;
} sl_err;

/* Records st and the message; returns st so that callers can `return sl_err_set(...)`.
 * When memory for the message runs out, a fixed text is kept instead. */
sl_status sl_err_set(sl_err *e, sl_status st, const char *fmt, ...) SL_PRINTF(3, 4);
sl_status sl_err_vset(sl_err *e, sl_status st, const char *fmt, va_list ap) SL_PRINTF(3, 0);
/* Prepends "<prefix>: " to the current message (e.g. the file name), keeping the status. */
sl_status sl_err_prefix(sl_err *e, const char *prefix);
/* Copies src's status and message into dst; returns the status. */
sl_status sl_err_copy(sl_err *dst, const sl_err *src);
void sl_err_clear(sl_err *e);
/* Never NULL: "" when no error was recorded. */
const char *sl_err_msg(const sl_err *e);
/* Writes the message to a caller buffer (truncating), for the APIs that take char *err. */
void sl_err_export(const sl_err *e, char *buf, size_t len);

/* Raise st with a message unless cond holds. For parsers: a list of checks reads as the rules. */
#define SL_CHECK(cond, err, st, ...)                      \
    do {                                                  \
        if (!(cond))                                      \
            return sl_err_set((err), (st), __VA_ARGS__);  \
    } while (0)

/* Propagate a failing status (the message is already recorded). */
#define SL_TRY(expr)                    \
    do {                                \
        sl_status sl_try_st_ = (expr);  \
        if (sl_try_st_ != SL_OK)        \
            return sl_try_st_;          \
    } while (0)

#endif /* SL_ERR_H */
