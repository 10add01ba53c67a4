/* sl_file.c - opening files without blocking on FIFOs and devices (see sl_file.h). */
#include "common/sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int sl_file_open_regular(const char *path, struct stat *sb)
{
    return sl_file_open_regular_flags(path, 0, sb);
}

/* O_NONBLOCK is cleared again: on a regular file it would make io_uring reads answer EAGAIN. */
int sl_file_open_regular_flags(const char *path, int flags, struct stat *sb)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | flags);
    if (fd < 0)
        return -1;
    if (fstat(fd, sb) != 0)
        goto fail;
    if (!S_ISREG(sb->st_mode)) {
        close(fd);
        return SL_FILE_NOT_REGULAR;
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        goto fail;
    return fd;
fail:;
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
}

void sl_file_id_from_stat(const struct stat *sb, sl_file_id *id)
{
    *id = (sl_file_id){.dev = (uint64_t)sb->st_dev, .ino = (uint64_t)sb->st_ino,
                       .size = (uint64_t)sb->st_size, .mtime_sec = (int64_t)sb->st_mtim.tv_sec,
                       .mtime_nsec = (int64_t)sb->st_mtim.tv_nsec, .valid = 1};
}

const char *sl_file_id_diff(const sl_file_id *id, const struct stat *sb)
{
    sl_file_id now;
    sl_file_id_from_stat(sb, &now);
    if (now.size != id->size)
        return "size";
    if (now.dev != id->dev || now.ino != id->ino)
        return "device and inode";
    if (now.mtime_sec != id->mtime_sec || now.mtime_nsec != id->mtime_nsec)
        return "modification time";
    return NULL;
}

unsigned sl_file_open_budget(unsigned most)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return most;
    const rlim_t q = rl.rlim_cur / 4;
    return q < 4 ? 4u : q > most ? most : (unsigned)q;
}

const char *sl_file_kind(unsigned mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a plain file";
}

int sl_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    unsigned char *p = buf;
    while (n > 0) {
        const ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

sl_status sl_file_read_all(const char *path, size_t max, sl_status st, sl_err *err, char **buf,
                           size_t *len)
{
    struct stat sb;
    *buf = NULL;
    *len = 0;
    const int fd = sl_file_open_regular(path, &sb);
    if (fd == SL_FILE_NOT_REGULAR)
        return sl_err_set(err, st, "%s: not a regular file (%s)", path, sl_file_kind((unsigned)sb.st_mode));
    if (fd < 0)
        return sl_err_set(err, st, "%s: cannot open: %s", path, strerror(errno));
    sl_status ret = SL_OK;
    const uint64_t size = (uint64_t)sb.st_size;
    char *b = NULL;
    if (size > max) {
        ret = sl_err_set(err, st, "%s: %" PRIu64 " bytes, over the %zu-byte limit", path, size, max);
        goto out;
    }
    b = malloc((size_t)size + 1);
    if (!b) {
        ret = sl_err_set(err, SL_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (sl_pread_full(fd, b, (size_t)size, 0) != 0) {
        ret = sl_err_set(err, st, "%s: read: %s", path, errno ? strerror(errno) : "unexpected end of file");
        goto out;
    }
    b[size] = '\0';
    *buf = b;
    *len = (size_t)size;
    b = NULL;
out:
    free(b);
    close(fd);
    return ret;
}
