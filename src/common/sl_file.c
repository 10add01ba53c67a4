/* sl_file.c - opening files without blocking on FIFOs and devices (see sl_file.h). */
#include "common/sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/random.h>
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

int sl_pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
    const unsigned char *p = buf;
    while (n > 0) {
        const ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
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

/* ---- files written whole, or not at all ---- */

/* Six random characters over "<path>.tmp.XXXXXX"'s X's, as mkstemp draws them. */
static void temp_name_fill(char *x)
{
    static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[6];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        static _Atomic unsigned long n;   /* entropy not ready: unique within this process */
        unsigned long v = (unsigned long)getpid() * 2654435761u + n++ + (unsigned long)time(NULL);
        for (int i = 0; i < 6; i++, v /= 62)
            r[i] = (unsigned char)(v % 62);
    }
    for (int i = 0; i < 6; i++)
        x[i] = set[r[i] % 62];
}

sl_status sl_file_temp_create(const char *path, int *fd, char **tmp, sl_err *err)
{
    *fd = -1;
    *tmp = NULL;
    char *t = NULL;
    SL_CHECK(asprintf(&t, "%s.tmp.XXXXXX", path) >= 0, err, SL_E_NOMEM, "out of memory");
    /* Not mkostemp: its files are 0600 whatever the umask, and an output (a checkpoint, its
     * manifest) gets the mode any new file gets, 0666 less the umask, as cp and sha256sum > f give. */
    int d = -1;
    for (int tries = 0; d < 0 && tries < 100; tries++) {
        temp_name_fill(t + strlen(t) - 6);
        d = open(t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (d < 0 && errno != EEXIST)
            break;
    }
    if (d < 0) {
        const int en = errno;
        free(t);
        return sl_err_set(err, SL_E_IO, "%s: cannot create: %s", path, strerror(en));
    }
    /* A new file: nobody else holds it. Where flock is not supported, stale files are still told
     * by their name, so its failure is no error. */
    (void)flock(d, LOCK_EX | LOCK_NB);
    *fd = d;
    *tmp = t;
    return SL_OK;
}

sl_status sl_file_temp_commit(int fd, const char *tmp, const char *path, sl_err *err)
{
    /* fdatasync, not fsync: the rename below is what must not overtake the data. EINVAL: a file
     * system that cannot sync (a pipe-backed FUSE one); nothing more can be done there. */
    if (fdatasync(fd) != 0 && errno != EINVAL) {
        const int en = errno;
        close(fd);
        return sl_err_set(err, SL_E_IO, "%s: sync: %s", tmp, strerror(en));
    }
    SL_CHECK(close(fd) == 0, err, SL_E_IO, "%s: close: %s", tmp, strerror(errno));
    SL_CHECK(rename(tmp, path) == 0, err, SL_E_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
    return SL_OK;
}

sl_status sl_file_write_atomic(const char *path, const void *data, size_t len, sl_err *err)
{
    char *tmp = NULL;
    int fd = -1;
    SL_TRY(sl_file_temp_create(path, &fd, &tmp, err));
    sl_status st = sl_pwrite_full(fd, data, len, 0) == 0
                       ? SL_OK : sl_err_set(err, SL_E_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (st == SL_OK)
        st = sl_file_temp_commit(fd, tmp, path, err);
    else
        close(fd);
    if (st != SL_OK)
        unlink(tmp);
    free(tmp);
    return st;
}
