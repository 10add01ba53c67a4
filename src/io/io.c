/* io.c - chooses the read engine: io_uring when it is built in and the kernel allows it (seccomp
 * filters and older kernels answer ENOSYS/EPERM), else the pread thread pool. */
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

#ifndef SL_WITH_URING
sl_status sl_io_uring_open(unsigned depth, int inline_cached, sl_io *out, sl_err *err)
{
    (void)depth;
    (void)inline_cached;
    (void)out;
    return sl_err_set(err, SL_E_UNSUPPORTED, "io_uring engine not built in (needs liburing)");
}
#endif

sl_status sl_io_open(const char *force, unsigned depth, unsigned threads, sl_io *out, sl_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    if (force && !strcmp(force, "pread"))
        return sl_io_pread_open(depth, threads, out, err);
    if (force && (!strcmp(force, "uring") || !strcmp(force, "io_uring")))
        return sl_io_uring_open(depth, 0, out, err);
    if (force && !strcmp(force, "uring-inline"))
        return sl_io_uring_open(depth, 1, out, err);
    if (force && *force)
        return sl_err_set(err, SL_E_INVALID_ARG,
                          "unknown I/O engine '%s' (expected pread, uring or uring-inline)", force);
    sl_err tmp = {0};
    sl_status st = sl_io_uring_open(depth, 0, out, &tmp);
    sl_err_clear(&tmp);
    if (st == SL_OK)
        return SL_OK;
    return sl_io_pread_open(depth, threads, out, err);
}

void sl_io_get_counts(const sl_io *io, sl_io_counts *out)
{
    *out = (sl_io_counts){0};
    if (io && io->ops && io->ops->counts)
        io->ops->counts(io->ctx, out);
}

sl_status sl_io_flush(const sl_io *io, sl_err *err)
{
    return io->ops->flush ? io->ops->flush(io->ctx, err) : SL_OK;
}

void sl_io_close(sl_io *io)
{
    if (io && io->ops)
        io->ops->close(io->ctx);
    if (io) {
        io->ops = NULL;
        io->ctx = NULL;
    }
}
