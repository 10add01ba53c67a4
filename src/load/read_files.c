/* read_files.c - the checkpoint files of a load, each read with O_DIRECT or buffered (docs/engine.md
 * "I/O modes and engines"), and open on demand, at most max_open at once (read_ctx.h).
 *
 * At set-up each used file is opened once, in turn: `--io auto` samples its page residency, a
 * filesystem that refuses O_DIRECT at open (tmpfs: EINVAL) gets buffered reads, and the first
 * max_open files stay open. A request opens its file again when it was closed, closing the least
 * recently used file that no request is reading. Every open is by path, so each one refuses a
 * FIFO or a device without blocking and checks that the path still names the file the checkpoint
 * opened (device, inode, size, mtime): a same-size replacement would otherwise load another
 * model's bytes. A filesystem that accepts O_DIRECT at open and refuses a read is switched to
 * buffered by rd_file_fallback. */
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
/* The open-file list holds max_open entries, which the stepwise path may raise to its slots + 1. */
#define RD_OPEN_CAP (RD_MAX_OPEN + RD_MAX_SLOTS + 1u)

sl_status rd_files_init(rd_files *fs, const sl_load_file *files, int64_t n, sl_err *err)
{
    *fs = (rd_files){.n = n, .max_open = sl_file_open_budget(RD_MAX_OPEN)};
    fs->v = calloc((size_t)n + 1, sizeof *fs->v);
    fs->open = calloc(RD_OPEN_CAP, sizeof *fs->open);
    if (!fs->v || !fs->open)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        fs->v[i] = (rd_file){.path = files[i].path, .size = files[i].size, .id = files[i].id,
                             .fd = -1, .fd_direct_old = -1, .remote = files[i].remote};
    return SL_OK;
}

void rd_files_allow_open(rd_files *fs, unsigned n)
{
    fs->max_open = n > fs->max_open ? (n < RD_OPEN_CAP ? n : RD_OPEN_CAP) : fs->max_open;
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

/* The path still names the file that was planned: its size, and its identity when the checkpoint
 * recorded one (files given by path and size only keep the identity of their first open here). */
static sl_status rd_check_same(rd_file *f, const struct stat *sb, sl_err *err)
{
    if ((uint64_t)sb->st_size != f->size)
        return sl_err_set(err, SL_E_CHANGED,
                          "%s: size is %llu bytes, planned %llu: short read at offset %llu (file "
                          "changed since planning?)",
                          f->path, (unsigned long long)sb->st_size, (unsigned long long)f->size,
                          (unsigned long long)sl_min_u64((uint64_t)sb->st_size, f->size));
    if (!f->id.valid) {
        sl_file_id_from_stat(sb, &f->id);
        return SL_OK;
    }
    const char *what = sl_file_id_diff(&f->id, sb);
    SL_CHECK(!what, err, SL_E_CHANGED, "%s: file changed since the checkpoint was opened (same size, "
             "another %s): replaced or rewritten, not loaded", f->path, what);
    return SL_OK;
}

/* Opens f by path for reading, O_DIRECT when direct, and checks it is the planned file. *fd is -1
 * with SL_OK when O_DIRECT was refused (EINVAL). */
static sl_status rd_open_checked(rd_file *f, int direct, int *fd, sl_err *err)
{
    struct stat sb;
    *fd = sl_file_open_regular_flags(f->path, direct ? O_DIRECT : 0, &sb);
    if (*fd == SL_FILE_NOT_REGULAR) {
        *fd = -1;
        return sl_err_set(err, SL_E_CHANGED, "%s: now %s, not a regular file (file changed since "
                          "planning?)", f->path, sl_file_kind((unsigned)sb.st_mode));
    }
    if (*fd < 0 && direct && errno == EINVAL)
        return SL_OK;
    if (*fd < 0)
        return sl_err_set(err, errno == ENOENT ? SL_E_NOT_FOUND : SL_E_IO, "%s: cannot open%s: %s",
                          f->path, direct ? " with O_DIRECT" : "", strerror(errno));
    const sl_status st = rd_check_same(f, &sb, err);
    if (st != SL_OK) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

/* Opens f in its mode; O_DIRECT refused now means buffered from here on (always allowed: chunks
 * of a buffered file need no alignment). */
static sl_status rd_open_mode(rd_file *f, int *fd, sl_err *err)
{
    if (f->direct) {
        SL_TRY(rd_open_checked(f, 1, fd, err));
        if (*fd >= 0)
            return SL_OK;
        f->direct = 0;
    }
    return rd_open_checked(f, 0, fd, err);
}

static void rd_keep_open(rd_files *fs, int64_t i, int fd)
{
    fs->v[i].fd = fd;
    fs->v[i].last_use = ++fs->clock;
    fs->open[fs->n_open++] = i;
}

/* Closes open file k of the list (no request may be reading it). */
static void rd_close_at(rd_files *fs, unsigned k)
{
    rd_file *f = &fs->v[fs->open[k]];
    close(f->fd);
    if (f->fd_direct_old >= 0)
        close(f->fd_direct_old);
    f->fd = f->fd_direct_old = -1;
    fs->open[k] = fs->open[--fs->n_open];
}

/* Closes the least recently used open file that no request is reading. Returns 0 when every open
 * file is busy. */
static int rd_close_idle(rd_files *fs)
{
    unsigned best = fs->n_open;
    for (unsigned k = 0; k < fs->n_open; k++) {
        const rd_file *f = &fs->v[fs->open[k]];
        if (!f->busy && (best == fs->n_open || f->last_use < fs->v[fs->open[best]].last_use))
            best = k;
    }
    if (best == fs->n_open)
        return 0;
    rd_close_at(fs, best);
    return 1;
}

/* First open, at set-up: checks the file, chooses its mode, and keeps it open while there is
 * room. */
static sl_status rd_open_first(rd_files *fs, int64_t i, sl_io_mode io, sl_err *err)
{
    rd_file *f = &fs->v[i];
    int fd = -1;
    if (f->remote)
        return SL_OK;   /* buffered (no alignment); checked by every response instead */
    SL_TRY(rd_open_checked(f, 0, &fd, err));
    f->direct = io == SL_IO_DIRECT || (io == SL_IO_AUTO && !rd_mostly_cached(fd, f->size));
    if (f->direct) {
        int dfd = -1;
        const sl_status st = rd_open_checked(f, 1, &dfd, err);
        if (st != SL_OK) {
            close(fd);
            return st;
        }
        f->direct = dfd >= 0;
        if (dfd >= 0) {
            close(fd);
            fd = dfd;
        }
    }
    if (fs->n_open < fs->max_open)
        rd_keep_open(fs, i, fd);
    else
        close(fd);
    return SL_OK;
}

sl_status rd_files_open(rd_files *fs, const unsigned char *used, sl_io_mode io, sl_err *err)
{
    for (int64_t i = 0; i < fs->n; i++)
        fs->v[i].used = used[i];
    for (int64_t i = 0; i < fs->n; i++) {
        if (fs->v[i].used)
            SL_TRY(rd_open_first(fs, i, io, err));
    }
    return SL_OK;
}

sl_status rd_file_acquire(rd_files *fs, int64_t i, sl_err *err)
{
    rd_file *f = &fs->v[i];
    if (f->fd < 0 && !f->remote) {
        if (fs->n_open >= fs->max_open && !rd_close_idle(fs))
            return sl_err_set(err, SL_E_IO, "%s: more than %u files in use at once", f->path,
                              fs->max_open);   /* not reached: fewer requests than max_open */
        int fd = -1;
        SL_TRY(rd_open_mode(f, &fd, err));
        rd_keep_open(fs, i, fd);
    }
    f->last_use = ++fs->clock;
    f->busy++;
    return SL_OK;
}

void rd_file_release(rd_files *fs, int64_t i)
{
    if (fs->v[i].busy > 0)
        fs->v[i].busy--;
}

sl_status rd_file_fallback(rd_file *f, sl_err *err)
{
    int fd = -1;
    SL_TRY(rd_open_checked(f, 0, &fd, err));
    f->fd_direct_old = f->fd;   /* requests issued before still read through it */
    f->fd = fd;
    f->direct = 0;
    return SL_OK;
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
    while (fs->open && fs->n_open > 0)
        rd_close_at(fs, fs->n_open - 1);
    free(fs->v);
    free(fs->open);
    *fs = (rd_files){0};
}
