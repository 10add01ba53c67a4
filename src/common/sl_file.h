/* sl_file.h - opening files that are read whole or in part (checkpoints, indexes, configs, rule
 * tables) without ever blocking on something that is not a file.
 *
 * A FIFO opened for reading blocks until a writer comes, forever if none does; a character device
 * may never end. So every file the library reads is opened with O_NONBLOCK (which makes open itself
 * return at once), checked with fstat to be a regular file, and only then switched back to blocking
 * reads. */
#ifndef SL_FILE_H
#define SL_FILE_H

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define SL_FILE_NOT_REGULAR (-2)

/* Opens path read-only. Returns the descriptor with *sb filled; -1 when open or fstat failed (errno
 * set); SL_FILE_NOT_REGULAR, with *sb filled and nothing left open, when path is not a regular file. */
int sl_file_open_regular(const char *path, struct stat *sb);
/* The same with more open flags (O_DIRECT); the descriptor is left blocking either way. */
int sl_file_open_regular_flags(const char *path, int flags, struct stat *sb);

/* What identifies a file's contents cheaply: a file replaced by another of the same size (a new
 * inode), or rewritten in place (a new mtime, in nanoseconds), differs in some field. The
 * checkpoint records it at open; the loader compares it whenever it opens the file again. (ctime
 * is left out: chmod or a new hard link change it, not the bytes.) */
typedef struct sl_file_id {
    uint64_t dev, ino, size;
    int64_t mtime_sec, mtime_nsec;
    int valid;                 /* 0: nothing recorded (files given by path and size only) */
} sl_file_id;

void sl_file_id_from_stat(const struct stat *sb, sl_file_id *id);
/* NULL when sb is the file id was taken from, else what differs: "size", "device and inode" (another
 * file now has that name) or "modification time". */
const char *sl_file_id_diff(const sl_file_id *id, const struct stat *sb);

/* How many files one part of the library keeps open at once: a quarter of the soft descriptor
 * limit, within [4, most], so that the loader's files, a reshard's part files, the I/O engine and
 * the caller's own descriptors fit together (a 1,353-shard checkpoint under `ulimit -n 1024` once
 * failed with every shard open). */
unsigned sl_file_open_budget(unsigned most);

/* "a FIFO", "a directory", "a character device", ...: what a non-regular st_mode is, for messages. */
const char *sl_file_kind(unsigned mode);

/* Reads exactly n bytes at off, retrying on EINTR and short reads. Returns 0, or -1 with errno set
 * (errno 0 when the file ended early). */
int sl_pread_full(int fd, void *buf, size_t n, uint64_t off);
/* Writes exactly n bytes at off, retrying on EINTR and short writes. Returns 0, or -1 with errno
 * set (EIO when a write made no progress). */
int sl_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);

/* Reads a whole regular file of at most max bytes into *buf (NUL-terminated, free() it) and *len.
 * Failures are recorded in err with status st and read "<path>: <what>", e.g. "<path>: not a
 * regular file (a FIFO)" or "<path>: cannot open: No such file or directory". */
sl_status sl_file_read_all(const char *path, size_t max, sl_status st, sl_err *err, char **buf,
                           size_t *len);

/* ---- files written whole, or not at all ---- */

/* A new file that will replace path: "<path>.tmp.XXXXXX" in path's directory (so the rename is
 * atomic, and two writers of one path never share one), mode 0666 less the umask (as any new
 * file), locked with flock while it stays open, so that a later run can
 * tell a dead run's file from a live one's (ck_writer_remove_stale). Gives the descriptor and *tmp
 * (free() it); on failure *fd is -1, *tmp NULL, and nothing is left on disk. */
sl_status sl_file_temp_create(const char *path, int *fd, char **tmp, sl_err *err);
/* Syncs the data of fd (the temporary file tmp), closes it and renames tmp to path. fd is closed
 * whatever happens; on failure tmp is left for the caller to remove. */
sl_status sl_file_temp_commit(int fd, const char *tmp, const char *path, sl_err *err);
/* Writes path with data as above: a crash or a failure never leaves part of it under path (a
 * failure removes the temporary file), and an earlier file of that name stays until the rename. */
sl_status sl_file_write_atomic(const char *path, const void *data, size_t len, sl_err *err);

#endif /* SL_FILE_H */
