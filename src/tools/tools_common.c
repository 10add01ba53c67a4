/* tools_common.c - small file helpers shared by synth.c and reshard.c (see tools_common.h). */
#include "tools/tools_common.h"

#include "common/sl_bytes.h"
#include "common/sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

sl_status sl_tools_remove_stale(const char *path, const char *keep_if_same, sl_err *err)
{
    struct stat a, b;
    if (lstat(path, &b) != 0)
        return SL_OK;
    if (keep_if_same && stat(keep_if_same, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return SL_OK;
    SL_CHECK(unlink(path) == 0 || errno == ENOENT, err, SL_E_IO, "%s: cannot remove: %s", path,
             strerror(errno));
    return SL_OK;
}

json_t *sl_tools_json_load(const char *path, int missing_ok, sl_err *err, sl_status *st)
{
    struct stat sb;
    char *buf = NULL;
    size_t len = 0;
    json_error_t je;
    *st = SL_OK;
    if (missing_ok && lstat(path, &sb) != 0 && errno == ENOENT)
        return NULL;
    *st = sl_file_read_all(path, 16u << 20, SL_E_CONFIG, err, &buf, &len);
    if (*st != SL_OK)
        return NULL;
    json_t *root = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!root)
        *st = sl_err_set(err, SL_E_CONFIG, "%s: %s (line %d)", path, je.text, je.line);
    return root;
}

uint64_t sl_tools_file_size(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
}

sl_status sl_tools_check_space(const char *dir, uint64_t need, uint64_t reclaimed, sl_err *err)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0)
        return SL_OK;
    uint64_t avail = 0;
    if (sl_mul_overflow((uint64_t)vfs.f_bavail, (uint64_t)vfs.f_frsize, &avail) ||
        sl_add_overflow(avail, reclaimed, &avail))
        return SL_OK;
    SL_CHECK(need <= avail, err, SL_E_IO, "%s: the output needs %" PRIu64 " bytes but its file system has %"
             PRIu64 " bytes free: nothing was written", dir, need, avail);
    return SL_OK;
}

static sl_status write_all(int fd, const char *p, size_t len, const char *tmp, sl_err *err)
{
    while (len) {
        const ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        SL_CHECK(k > 0, err, SL_E_IO, "%s: write failed: %s", tmp, k < 0 ? strerror(errno) : "no progress");
        p += k;
        len -= (size_t)k;
    }
    SL_CHECK(fdatasync(fd) == 0, err, SL_E_IO, "%s: sync failed: %s", tmp, strerror(errno));
    return SL_OK;
}

sl_status sl_tools_write_file(const char *path, const void *data, size_t len, sl_err *err)
{
    char *tmp = NULL;
    SL_CHECK(asprintf(&tmp, "%s.tmp.XXXXXX", path) >= 0, err, SL_E_NOMEM, "out of memory");
    const int fd = mkostemp(tmp, O_CLOEXEC);
    sl_status st = fd < 0 ? sl_err_set(err, SL_E_IO, "%s: cannot create: %s", tmp, strerror(errno))
                   : flock(fd, LOCK_EX) != 0   /* held until close: not a dead run's (writer.c) */
                       ? sl_err_set(err, SL_E_IO, "%s: lock: %s", tmp, strerror(errno))
                   : fchmod(fd, 0644) != 0   /* mkostemp creates 0600; checkpoints are shared */
                       ? sl_err_set(err, SL_E_IO, "%s: chmod: %s", tmp, strerror(errno))
                       : write_all(fd, data, len, tmp, err);
    if (fd >= 0 && close(fd) != 0 && st == SL_OK)
        st = sl_err_set(err, SL_E_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (st == SL_OK && rename(tmp, path) != 0)
        st = sl_err_set(err, SL_E_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
    if (st != SL_OK && fd >= 0)
        unlink(tmp);
    free(tmp);
    return st;
}
