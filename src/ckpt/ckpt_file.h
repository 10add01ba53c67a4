/* ckpt_file.h - small file helpers (ckpt_file.c) shared by the checkpoint reader and the writer. */
#ifndef SL_CKPT_FILE_H
#define SL_CKPT_FILE_H

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

/* dir + "/" + name, without doubling a trailing slash. NULL when out of memory. */
char *ck_path_join(const char *dir, const char *name);

#endif /* SL_CKPT_FILE_H */
