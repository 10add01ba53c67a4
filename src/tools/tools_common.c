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
