/* ckpt_file.h - small file helpers (ckpt_file.c) shared by the checkpoint reader and the writer. */
#ifndef SL_CKPT_FILE_H
#define SL_CKPT_FILE_H

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

/* Reads exactly n bytes at off, retrying on EINTR and short reads. Returns 0, or -1 with errno set
 * (errno 0 when the file ended early). */
int ck_pread_full(int fd, void *buf, size_t n, uint64_t off);
int ck_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
/* dir + "/" + name, without doubling a trailing slash. NULL when out of memory. */
char *ck_path_join(const char *dir, const char *name);

#endif /* SL_CKPT_FILE_H */
