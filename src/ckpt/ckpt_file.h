/* ckpt_file.h - small file helpers (ckpt_file.c) shared by the checkpoint reader and the writer. */
#ifndef SL_CKPT_FILE_H
#define SL_CKPT_FILE_H

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

/* Writes exactly n bytes at off (reading: sl_pread_full in common/sl_file.h). */
int ck_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
/* dir + "/" + name, without doubling a trailing slash. NULL when out of memory. */
char *ck_path_join(const char *dir, const char *name);

#endif /* SL_CKPT_FILE_H */
