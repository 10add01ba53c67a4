/* test_strmap.c - sl_strmap (common/sl_strmap.h), the map the planner, the rule table and the S3
 * listing find names given twice with: every key added is found with its value across the
 * regrowths, an added key's second add returns the first value and changes nothing, absent keys
 * (also ones that share a probe chain) are -1, reserve then adds without reallocating, and the
 * map stays at most half full. */
#include "common/sl_strmap.h"
#include "expect.h"

#include <stdio.h>
#include <stdlib.h>

#define N 20000

int main(void)
{
    static char keys[N][32];
    sl_strmap m = {0};
    EXPECT(sl_strmap_get(&m, "x") == -1, "an empty map holds nothing");
    int ok = 1;
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "model.layers.%d.mlp.weight", i);
        ok &= sl_strmap_add(&m, keys[i], i) == -1;
        ok &= 2 * m.n < m.cap;
    }
    EXPECT(ok && m.n == N, "%d new keys added, at most half full (n %zu, cap %zu)", N, m.n, m.cap);
    ok = 1;
    for (int i = 0; i < N; i++) {
        char again[32];   /* another pointer, the same text */
        snprintf(again, sizeof again, "model.layers.%d.mlp.weight", i);
        ok &= sl_strmap_get(&m, again) == i && sl_strmap_add(&m, again, 7) == i;
    }
    EXPECT(ok && m.n == N, "each found with its value; a second add returns it and adds nothing");
    EXPECT(sl_strmap_get(&m, "model.layers.20000.mlp.weight") == -1 && sl_strmap_get(&m, "") == -1 &&
               sl_strmap_get(&m, "model.layers.1.mlp.weigh") == -1, "absent keys");
    sl_strmap_free(&m);
    EXPECT(m.cap == 0 && m.n == 0 && sl_strmap_get(&m, keys[0]) == -1, "freed: empty again");

    EXPECT(sl_strmap_reserve(&m, 1000) == 0 && m.cap > 2000, "reserve 1000: cap %zu", m.cap);
    const char **before = m.key;
    for (int i = 0; i < 1000; i++)
        sl_strmap_add(&m, keys[i], i);
    EXPECT(m.key == before && m.n == 1000, "1000 adds after reserve(1000): no reallocation");
    sl_strmap_free(&m);
    if (expect_failures)
        return 1;
    puts("test_strmap: all passed");
    return 0;
}
