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

/* "a FIFO", "a directory", "a character device", ...: what a non-regular st_mode is, for messages. */
const char *sl_file_kind(unsigned mode);

/* Reads exactly n bytes at off, retrying on EINTR and short reads. Returns 0, or -1 with errno set
 * (errno 0 when the file ended early). */
int sl_pread_full(int fd, void *buf, size_t n, uint64_t off);

/* Reads a whole regular file of at most max bytes into *buf (NUL-terminated, free() it) and *len.
 * Failures are recorded in err with status st and read "<path>: <what>", e.g. "<path>: not a
 * regular file (a FIFO)" or "<path>: cannot open: No such file or directory". */
sl_status sl_file_read_all(const char *path, size_t max, sl_status st, sl_err *err, char **buf,
                           size_t *len);

#endif /* SL_FILE_H */
