/* sl_grow.c - the doubling array step of sl_grow.h. */
#include "common/sl_grow.h"

#include <stdint.h>
#include <stdlib.h>

void *sl_grow(void *v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return v;
    if (*cap > SIZE_MAX / 2)
        return NULL;
    const size_t nc = *cap ? 2 * *cap : (first ? first : 1);
    if (elem == 0 || nc > SIZE_MAX / elem)
        return NULL;
    void *p = realloc(v, nc * elem);
    if (p)
        *cap = nc;
    return p;
}
