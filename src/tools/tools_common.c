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

sl_status sl_tools_remove_stale_names(const char *dir, const char *keep_dir, const char *const *names,
                                      size_t n, sl_err *err)
{
    char path[4096], keep[4096];
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (keep_dir)
            snprintf(keep, sizeof keep, "%s/%s", keep_dir, names[i]);
        SL_TRY(sl_tools_remove_stale(path, keep_dir ? keep : NULL, err));
    }
    return SL_OK;
}

const char *sl_tools_torch_dtype(sl_dtype dt)
{
    return dt == SL_DTYPE_BF16 ? "bfloat16" : dt == SL_DTYPE_F16 ? "float16" : dt == SL_DTYPE_F32 ? "float32" : NULL;
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

/* ---- output directories --------------------------------------------------------------------- */

/* path without its trailing slashes ("/" stays), in buf; 0 when it does not fit. */
static int tools_dir_copy(const char *path, char *buf, size_t n)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0 || len >= n)
        return 0;
    memcpy(buf, path, len);
    buf[len] = 0;
    return 1;
}

/* 0, or the errno of the directory that could not be made. *deepest: the length of the last
 * (deepest) directory made, where a failed call's clean-up starts. Recursion depth: path
 * components. */
static int tools_mkdir_p(char *path, int *made, size_t *deepest)
{
    if (mkdir(path, 0755) == 0) {
        (*made)++;
        *deepest = strlen(path);
        return 0;
    }
    if (errno == EEXIST) {
        struct stat sb;
        return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
    }
    if (errno != ENOENT)
        return errno;
    char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return ENOENT;
    *slash = 0;
    const int e = tools_mkdir_p(path, made, deepest);
    *slash = '/';
    if (e)
        return e;
    if (mkdir(path, 0755) == 0) {
        (*made)++;
        *deepest = strlen(path);
        return 0;
    }
    return errno == EEXIST ? 0 : errno;   /* another rank of the same job made it just now */
}

sl_status sl_tools_make_dir(const char *dir, int *made, sl_err *err)
{
    char buf[4096];
    *made = 0;
    SL_CHECK(tools_dir_copy(dir, buf, sizeof buf), err, SL_E_INVALID_ARG,
             "%.200s...: output directory name empty or too long", dir);
    size_t deepest = 0;
    const int e = tools_mkdir_p(buf, made, &deepest);
    if (e) {   /* the parents it made go again, from the deepest up */
        buf[deepest] = 0;
        sl_tools_unmake_dir(buf, *made);
        *made = 0;
        return sl_err_set(err, SL_E_IO, "%s: cannot create directory: %s", dir, strerror(e));
    }
    return SL_OK;
}

void sl_tools_unmake_dir(const char *dir, int made)
{
    char buf[4096];
    if (made <= 0 || !tools_dir_copy(dir, buf, sizeof buf))
        return;
    for (int k = 0; k < made; k++) {
        if (rmdir(buf) != 0)
            return;
        char *slash = strrchr(buf, '/');
        if (!slash || slash == buf)
            return;
        *slash = 0;
    }
}
