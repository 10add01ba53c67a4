/* sl_arena.c - bump arena (see sl_arena.h). */
#include "common/sl_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SL_ARENA_CHUNK (64u * 1024u)

struct sl_arena_chunk {
    sl_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

static sl_arena_chunk *arena_chunk_new(size_t need)
{
    const size_t cap = need > SL_ARENA_CHUNK ? need : SL_ARENA_CHUNK;
    if (cap > SIZE_MAX - sizeof(sl_arena_chunk))
        return NULL;
    sl_arena_chunk *c = malloc(sizeof(*c) + cap);
    if (c) {
        c->next = NULL;
        c->used = 0;
        c->cap = cap;
    }
    return c;
}

void *sl_arena_alloc(sl_arena *a, size_t n)
{
    if (n > SIZE_MAX - 15)
        return NULL;
    const size_t sz = (n + 15) & ~(size_t)15;
    sl_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < sz) {
        c = arena_chunk_new(sz);
        if (!c)
            return NULL;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += sz;
    a->total += sz;
    return p;
}

char *sl_arena_strndup(sl_arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *p = sl_arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void sl_arena_free(sl_arena *a)
{
    sl_arena_chunk *c = a->head;
    while (c) {
        sl_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}
