/* tools_common.c - small file helpers shared by synth.c and reshard.c (see tools_common.h). */
#include "tools/tools_common.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
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
