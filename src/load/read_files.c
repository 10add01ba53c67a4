/* read_files.c - the checkpoint files of a load: opened once, each with O_DIRECT or buffered
 * (docs/engine.md "I/O modes and engines"). `--io auto` samples page residency first; a
 * filesystem that refuses O_DIRECT at open (tmpfs: EINVAL) gets buffered reads, and one that
 * accepts the open but refuses a read is switched to buffered by rd_file_fallback. */
#include "load/read_ctx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_bytes.h"

#define RD_CACHE_SAMPLES 64u

sl_status rd_files_init(rd_files *fs, const sl_load_file *files, int64_t n, sl_err *err)
{
    fs->n = n;
    fs->v = calloc((size_t)n + 1, sizeof *fs->v);
    if (!fs->v)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        fs->v[i] = (rd_file){.path = files[i].path, .size = files[i].size, .fd = -1,
                             .fd_direct_old = -1};
    return SL_OK;
}

/* Samples page residency with mincore over a mapping that is never touched (so nothing is read).
 * Returns 1 when at least half of the sampled pages are cached. */
static int rd_mostly_cached(int fd, uint64_t size)
{
    if (size == 0 || size > SIZE_MAX)
        return 1;
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return 0;
    const uint64_t pages = (size + RD_ALIGN - 1) / RD_ALIGN;
    const uint64_t samples = sl_min_u64(pages, RD_CACHE_SAMPLES);
    uint64_t hit = 0;
    for (uint64_t i = 0; i < samples; i++) {
        unsigned char v = 0;
        uint64_t page = i * pages / samples;
        if (mincore((char *)m + page * RD_ALIGN, RD_ALIGN, &v) == 0 && (v & 1))
            hit++;
    }
    munmap(m, (size_t)size);
    return 2 * hit >= samples;
}

static sl_status rd_open_buffered(rd_file *f, sl_err *err)
{
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return sl_err_set(err, errno == ENOENT ? SL_E_NOT_FOUND : SL_E_IO, "%s: cannot open: %s",
                          f->path, strerror(errno));
    f->direct = 0;
    return SL_OK;
}

static sl_status rd_check_size(const rd_file *f, sl_err *err)
{
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return sl_err_set(err, SL_E_IO, "%s: stat: %s", f->path, strerror(errno));
    if ((uint64_t)sb.st_size != f->size)
        return sl_err_set(err, SL_E_CHANGED,
                          "%s: size is %llu bytes, planned %llu: short read at offset %llu (file "
                          "changed since planning?)",
                          f->path, (unsigned long long)sb.st_size, (unsigned long long)f->size,
                          (unsigned long long)sl_min_u64((uint64_t)sb.st_size, f->size));
    return SL_OK;
}

/* Tries O_DIRECT; filesystems without it (tmpfs) answer EINVAL and get buffered reads. */
static sl_status rd_open_file(rd_file *f, sl_io_mode io, sl_err *err)
{
    SL_TRY(rd_open_buffered(f, err));
    SL_TRY(rd_check_size(f, err));
    const int want_direct = io == SL_IO_DIRECT || (io == SL_IO_AUTO && !rd_mostly_cached(f->fd, f->size));
    if (!want_direct)
        return SL_OK;
    int dfd = open(f->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (dfd < 0 && errno != EINVAL)
        return sl_err_set(err, SL_E_IO, "%s: cannot open with O_DIRECT: %s", f->path, strerror(errno));
    if (dfd >= 0) {
        close(f->fd);
        f->fd = dfd;
        f->direct = 1;
    }
    return SL_OK;
}

sl_status rd_files_open(rd_files *fs, const unsigned char *used, sl_io_mode io, sl_err *err)
{
    for (int64_t i = 0; i < fs->n; i++)
        fs->v[i].used = used[i];
    for (int64_t i = 0; i < fs->n; i++) {
        if (fs->v[i].used)
            SL_TRY(rd_open_file(&fs->v[i], io, err));
    }
    return SL_OK;
}

sl_status rd_file_fallback(rd_file *f, sl_err *err)
{
    f->fd_direct_old = f->fd;
    f->fd = -1;
    return rd_open_buffered(f, err);
}

const char *rd_files_io_name(const rd_files *fs)
{
    int direct = 0, buffered = 0;
    for (int64_t i = 0; i < fs->n; i++) {
        if (fs->v[i].used) {
            direct += fs->v[i].direct;
            buffered += !fs->v[i].direct;
        }
    }
    if (!direct && !buffered)
        return "none";
    return direct && buffered ? "mixed" : direct ? "direct" : "buffered";
}

void rd_files_close(rd_files *fs)
{
    for (int64_t i = 0; fs->v && i < fs->n; i++) {
        if (fs->v[i].fd >= 0)
            close(fs->v[i].fd);
        if (fs->v[i].fd_direct_old >= 0)
            close(fs->v[i].fd_direct_old);
    }
    free(fs->v);
    *fs = (rd_files){0};
}
