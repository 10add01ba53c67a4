/* io.h - the read engines of the loading executor: an ops table plus a void *ctx (STYLE.md rule
 * 11). The executor submits large positional reads into its staging buffers, at most `depth` in
 * flight, and reaps them in any order. Engines: "io_uring" (io_uring.c, only with liburing) and
 * "pread" (a small thread pool, always available). sl_io_open tries them in that order unless one
 * is forced (the argument: the CLI passes SL_IO_ENGINE=pread|uring|uring-inline). Remote files
 * are read by "http" (io_http.c, http.h), whose requests name an object instead of an fd.
 *
 * Short reads are the engine's business: a request completes when all `len` bytes arrived, when
 * the file ended (result < len) or on an error (result = -errno). EINTR/EAGAIN are retried. */
#ifndef SL_IO_H
#define SL_IO_H

#include "shardload.h"

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl_io_req {
    int fd;
    const struct sl_http_obj *obj;   /* the remote engine's object (io_http.c); NULL for files */
    uint64_t off;      /* file offset of byte 0 of buf */
    size_t len;
    void *buf;
    int64_t result;    /* out: bytes read (< len only at end of file) or -errno */
    size_t done;       /* engine-private: bytes already read */
    void *user;        /* caller's tag */
    int buffered;      /* fd is not O_DIRECT: the bytes may come from the page cache */
} sl_io_req;

/* What an engine retried, for the load's stats (the remote engine's; 0 for files). */
typedef struct sl_io_counts {
    uint64_t retries;    /* attempts asked for again after a failure, a stall or a trickle */
    uint64_t restarts;   /* laggards asked for again on a new connection (http_xfer.c) */
} sl_io_counts;

typedef struct sl_io_ops {
    const char *name;
    /* Queues r (owned by the caller until it comes back from wait). Never blocks on I/O. The
     * read may start only at the next flush (or wait), so that several are sent at once. */
    sl_status (*submit)(void *ctx, sl_io_req *r, sl_err *err);
    /* Starts what submit queued; NULL where submit starts each read itself. */
    sl_status (*flush)(void *ctx, sl_err *err);
    /* Blocks until one submitted request completes and returns it in *done. */
    sl_status (*wait)(void *ctx, sl_io_req **done, sl_err *err);
    /* Waits for requests still in flight, then frees everything. Accepts NULL. */
    void (*close)(void *ctx);
    /* Optional: what it retried so far; NULL: nothing (sl_io_get_counts gives zeros). */
    void (*counts)(const void *ctx, sl_io_counts *out);
} sl_io_ops;

typedef struct sl_io {
    const sl_io_ops *ops;
    void *ctx;
} sl_io;

/* Opens an engine allowing `depth` requests in flight; `threads` caps the pread pool (0: up to
 * depth, at most 16). force: NULL or "" for automatic, "pread", "uring" or "uring-inline" (the
 * library reads no environment: the CLI passes SL_IO_ENGINE here, through sl_load_opts.io_engine,
 * for tests and benchmarks). */
sl_status sl_io_open(const char *force, unsigned depth, unsigned threads, sl_io *out, sl_err *err);
void sl_io_close(sl_io *io);
/* What io retried so far (zeros for engines that do not say, and for a closed engine). */
void sl_io_get_counts(const sl_io *io, sl_io_counts *out);
/* Starts every read submitted so far (ops->flush where the engine has one). */
sl_status sl_io_flush(const sl_io *io, sl_err *err);

sl_status sl_io_pread_open(unsigned depth, unsigned threads, sl_io *out, sl_err *err);
/* SL_E_UNSUPPORTED when built without liburing or when the kernel refuses io_uring.
 * inline_cached: 0 sends buffered reads to the kernel's workers (IOSQE_ASYNC), so page-cache
 * copies run in parallel; 1 lets the kernel copy them inline at submit (kept for comparisons). */
sl_status sl_io_uring_open(unsigned depth, int inline_cached, sl_io *out, sl_err *err);

#endif /* SL_IO_H */
