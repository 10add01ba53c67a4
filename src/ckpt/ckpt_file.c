/* ckpt_file.c - path joining. */
#include "ckpt/ckpt_file.h"

#include <stdlib.h>
#include <string.h>

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
