/* sl_arena.h - an overflow-checked bump arena for the many small, same-lifetime objects of a
 * parsed header or a plan (names, shapes). Freed all at once. */
#ifndef SL_ARENA_H
#define SL_ARENA_H

#include <stddef.h>

typedef struct sl_arena_chunk sl_arena_chunk;

typedef struct sl_arena {
    sl_arena_chunk *head;
    size_t total;          /* bytes handed out, for reporting metadata size */
} sl_arena;

/* Zero-initialized arenas are ready to use. Returns NULL when out of memory or on size overflow.
 * Memory is aligned to 16 bytes. */
void *sl_arena_alloc(sl_arena *a, size_t n);
/* Copies n bytes and appends a NUL. */
char *sl_arena_strndup(sl_arena *a, const char *s, size_t n);
void sl_arena_free(sl_arena *a);

#endif /* SL_ARENA_H */
