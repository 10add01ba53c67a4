/* fmt_testutil.h - helpers for the format-layer tests: building safetensors bytes in memory and
 * on disk, and checks that count failures instead of stopping at the first one. */
#ifndef FMT_TESTUTIL_H
#define FMT_TESTUTIL_H

#include "expect.h"
#include "scratch.h"
#include "shardload.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fmt_buf {
    unsigned char *p;
    size_t len;
} fmt_buf;

/* H(json) followed by `zeros` zero bytes (SAFETENSORS.md notation H(json) + Kz). */
static inline fmt_buf fmt_make_n(const char *json, size_t jlen, size_t zeros)
{
    fmt_buf b = {malloc(8 + jlen + zeros + 1), 8 + jlen + zeros};
    for (int i = 0; i < 8; i++)
        b.p[i] = (unsigned char)((uint64_t)jlen >> (8 * i));
    memcpy(b.p + 8, json, jlen);
    memset(b.p + 8 + jlen, 0, zeros);
    return b;
}

static inline fmt_buf fmt_make(const char *json, size_t zeros)
{
    return fmt_make_n(json, strlen(json), zeros);
}

static inline int fmt_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    const int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static inline int fmt_write_st(const char *path, const char *json, size_t zeros)
{
    fmt_buf b = fmt_make(json, zeros);
    const int rc = fmt_write_file(path, b.p, b.len);
    free(b.p);
    return rc;
}

#endif /* FMT_TESTUTIL_H */
