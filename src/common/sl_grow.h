/* sl_grow.h - room for one more element in an array that doubles (sl_grow.c), the loop several
 * backends and lists had each written out. */
#ifndef SL_GROW_H
#define SL_GROW_H

#include <stddef.h>

/* v holds *cap elements of elem bytes, n of them used. When n < *cap, returns v. Otherwise
 * reallocates it to twice *cap elements (first when *cap is 0), sets *cap and returns the new
 * array; NULL when out of memory or the size would overflow, leaving v and *cap as they were (the
 * caller still owns v). Doubling keeps appends amortized O(1). */
void *sl_grow(void *v, size_t *cap, size_t n, size_t elem, size_t first);

#endif /* SL_GROW_H */
