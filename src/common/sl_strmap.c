/* sl_strmap.c - string -> index map (see sl_strmap.h). */
#include "common/sl_strmap.h"

#include "common/sl_text.h"

#include <stdlib.h>
#include <string.h>

/* The slot holding key, or the free slot where it would go. cap > 0 and never full. */
static size_t slot_of(const sl_strmap *m, const char *key)
{
    const size_t mask = m->cap - 1;
    size_t k = (size_t)sl_text_hash(key) & mask;
    while (m->key[k] && strcmp(m->key[k], key) != 0)
        k = (k + 1) & mask;
    return k;
}

int sl_strmap_reserve(sl_strmap *m, size_t n)
{
    if (n < m->cap / 2)
        return 0;
    size_t cap = m->cap ? m->cap : 16;
    while (cap / 2 <= n) {
        if (cap > SIZE_MAX / 2 / sizeof(int64_t))
            return -1;
        cap *= 2;
    }
    sl_strmap g = {.key = calloc(cap, sizeof *g.key), .val = malloc(cap * sizeof *g.val), .cap = cap};
    if (!g.key || !g.val) {
        free(g.key);
        free(g.val);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->key[i]) {
            const size_t k = slot_of(&g, m->key[i]);
            g.key[k] = m->key[i];
            g.val[k] = m->val[i];
        }
    }
    g.n = m->n;
    sl_strmap_free(m);
    *m = g;
    return 0;
}

int64_t sl_strmap_get(const sl_strmap *m, const char *key)
{
    if (m->cap == 0)
        return -1;
    const size_t k = slot_of(m, key);
    return m->key[k] ? m->val[k] : -1;
}

int64_t sl_strmap_add(sl_strmap *m, const char *key, int64_t val)
{
    if (sl_strmap_reserve(m, m->n + 1) != 0)
        return -2;
    const size_t k = slot_of(m, key);
    if (m->key[k])
        return m->val[k];
    m->key[k] = key;
    m->val[k] = val;
    m->n++;
    return -1;
}

void sl_strmap_free(sl_strmap *m)
{
    free(m->key);
    free(m->val);
    m->key = NULL;
    m->val = NULL;
    m->cap = m->n = 0;
}
