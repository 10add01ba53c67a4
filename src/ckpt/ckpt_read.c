/* ckpt_read.c - sl_checkpoint_read: bytes of one file of an open checkpoint, local or remote, for
 * callers that need a few of them before any load (the planner compares the static input scales
 * of an expert's w1 and w3). A local file is opened by path and must still be the file the open
 * read (size and identity, as the loader checks); a remote one is read with a ranged GET of the
 * checkpoint's settings (CA bundle, S3 signing, retries; io/http_get.c), which must describe the
 * object the open saw (size, ETag, Last-Modified). It reads in chunks, so that a stop asked for with
 * sl_cancel (Ctrl-C in Python) is seen within one chunk of a tensor of gigabytes. */
#include "ckpt/checkpoint.h"
#include "common/sl_bytes.h"
#include "common/sl_cancel.h"
#include "io/http.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { READ_CHUNK = 64 << 20 };   /* bytes per read or ranged GET between checks for a stop */

static size_t read_chunk(size_t n, size_t done)
{
    return n - done < READ_CHUNK ? n - done : READ_CHUNK;
}

static sl_status read_cancelled(const ck_file *f, uint64_t offset, sl_err *e)
{
    return sl_err_set(e, SL_E_CANCELLED, "%s: cancelled before reading offset %" PRIu64, f->path, offset);
}

/* The local file still is the one whose header the open read. */
static sl_status read_check_same(const ck_file *f, const struct stat *sb, sl_err *e)
{
    SL_CHECK((uint64_t)sb->st_size == f->size, e, SL_E_CHANGED, "%s: size is %" PRIu64 " bytes, was %"
             PRIu64 " when the checkpoint was opened (file changed since?)", f->path, (uint64_t)sb->st_size,
             f->size);
    const char *what = f->id.valid ? sl_file_id_diff(&f->id, sb) : NULL;
    SL_CHECK(!what, e, SL_E_CHANGED, "%s: file changed since the checkpoint was opened (same size, "
             "another %s): replaced or rewritten, not read", f->path, what);
    return SL_OK;
}

static sl_status read_local(const ck_file *f, uint64_t offset, void *buf, size_t n, sl_err *e)
{
    struct stat sb;
    const int fd = sl_file_open_regular(f->path, &sb);
    SL_CHECK(fd != SL_FILE_NOT_REGULAR, e, SL_E_CHANGED, "%s: now %s, not a regular file (file changed "
             "since the checkpoint was opened?)", f->path, sl_file_kind((unsigned)sb.st_mode));
    SL_CHECK(fd >= 0, e, errno == ENOENT ? SL_E_NOT_FOUND : SL_E_IO, "%s: cannot open: %s", f->path,
             strerror(errno));
    sl_status st = read_check_same(f, &sb, e);
    for (size_t done = 0; st == SL_OK && done < n;) {
        const size_t k = read_chunk(n, done);
        const uint64_t at = offset + done;   /* no overflow: the caller checked offset + n */
        if (sl_cancel_requested())
            st = read_cancelled(f, at, e);
        else if (sl_pread_full(fd, (char *)buf + done, k, at) != 0)
            st = errno ? sl_err_set(e, SL_E_IO, "%s: read of %zu bytes at offset %" PRIu64 ": %s", f->path,
                                    k, at, strerror(errno))
                       : sl_err_set(e, SL_E_CHANGED, "%s: short read at offset %" PRIu64 " (file changed "
                                    "since the checkpoint was opened?)", f->path, at);
        done += k;
    }
    close(fd);
    return st;
}

static sl_status read_checked(const sl_checkpoint *ck, int64_t file, uint64_t offset, void *buf, size_t n,
                              sl_err *e)
{
    SL_CHECK(ck && (buf || n == 0), e, SL_E_INVALID_ARG, "sl_checkpoint_read: NULL argument");
    SL_CHECK(file >= 0 && (uint64_t)file < ck->n_files, e, SL_E_INVALID_ARG, "%s: file %" PRId64 " out of "
             "range (%zu files)", sl_checkpoint_dir(ck), file, ck->n_files);
    const ck_file *f = &ck->files[file];
    uint64_t end = 0;
    SL_CHECK(!sl_add_overflow(offset, (uint64_t)n, &end) && end <= f->size, e, SL_E_INVALID_ARG,
             "%s: %zu bytes at offset %" PRIu64 " run past the end of the file (%" PRIu64 " bytes)",
             f->path, n, offset, f->size);
    if (n == 0)
        return SL_OK;
    if (!f->remote)
        return read_local(f, offset, buf, n, e);
    /* the checkpoint's settings and its kept-alive connection, as sl_checkpoint_fetch */
    for (size_t done = 0; done < n;) {
        const size_t k = read_chunk(n, done);
        if (sl_cancel_requested())
            return read_cancelled(f, offset + done, e);
        const sl_status st = sl_http_get_range(f->remote, offset + done, k, (char *)buf + done, e);
        if (st != SL_OK)
            return st;
        done += k;
    }
    return SL_OK;
}

sl_status sl_checkpoint_read(const sl_checkpoint *ck, int64_t file, uint64_t offset, void *buf, size_t n,
                             char *err, size_t errlen)
{
    sl_err e = {0};
    const sl_status st = read_checked(ck, file, offset, buf, n, &e);
    sl_err_export(&e, err, errlen);
    sl_err_clear(&e);
    return st;
}
