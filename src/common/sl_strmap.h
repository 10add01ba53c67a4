/* sl_strmap.h - a map from strings to indices: open addressing with linear probing, at most half
 * full, growing as it fills (sl_strmap.c). The keys are borrowed: each must stay valid and
 * unchanged while the map holds it. It finds a name listed twice (rule tables, checkpoint tensors,
 * parameters, S3 listings) in one probe where a scan of the names so far was quadratic. */
#ifndef SL_STRMAP_H
#define SL_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_strmap {
    const char **key;    /* NULL: a free slot */
    int64_t *val;
    size_t cap, n;       /* cap: 0, or a power of two */
} sl_strmap;

/* Room for n keys in all without growing. -1 when out of memory, the map unchanged. */
int sl_strmap_reserve(sl_strmap *m, size_t n);
/* key's value, or -1 when the map does not hold it. */
int64_t sl_strmap_get(const sl_strmap *m, const char *key);
/* Adds key -> val (val >= 0) unless the map holds key. Returns -1 when it was added, the value
 * already held when key was there (nothing changed), -2 when out of memory. */
int64_t sl_strmap_add(sl_strmap *m, const char *key, int64_t val);
void sl_strmap_free(sl_strmap *m);

#endif /* SL_STRMAP_H */
