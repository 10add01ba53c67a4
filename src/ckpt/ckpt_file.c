/* ckpt_file.c - positional I/O that never returns a short count, and path joining. */
#include "ckpt/ckpt_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ck_pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
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

char *ck_path_join(const char *dir, const char *name)
{
    const size_t dl = strlen(dir), nl = strlen(name);
    const int slash = dl > 0 && dir[dl - 1] != '/';
    char *p = malloc(dl + (size_t)slash + nl + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    if (slash)
        p[dl] = '/';
    memcpy(p + dl + (size_t)slash, name, nl + 1);
    return p;
}
