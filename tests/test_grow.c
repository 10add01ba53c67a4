/* test_grow.c - sl_grow (common/sl_grow.h), the doubling step the pjrt backend's lists use: no
 * reallocation while there is room, the first size, doubling that keeps every element, and a
 * refusal that leaves the array and its capacity as they were when the size would overflow. */
#include "common/sl_grow.h"
#include "expect.h"

#include <stdint.h>
#include <stdlib.h>

int main(void)
{
    size_t cap = 0, n = 0;
    int *v = NULL;
    v = sl_grow(v, &cap, n, sizeof *v, 4);
    EXPECT(v && cap == 4, "first size: cap %zu", cap);
    int *same = v;
    for (; n < 4; n++) {
        int *w = sl_grow(v, &cap, n, sizeof *v, 4);
        EXPECT(w == same && cap == 4, "room left at n %zu: no reallocation (cap %zu)", n, cap);
        v = w;
        v[n] = (int)n * 7;
    }
    for (; n < 1000; n++) {   /* 4 -> 8 -> ... -> 1024 */
        int *w = sl_grow(v, &cap, n, sizeof *v, 4);
        EXPECT(w != NULL, "grow at n %zu", n);
        if (!w)
            break;
        v = w;
        v[n] = (int)n * 7;
    }
    EXPECT(cap == 1024, "doubling from 4 to hold 1000: cap %zu", cap);
    int kept = 1;
    for (size_t i = 0; i < n; i++)
        kept &= v[i] == (int)i * 7;
    EXPECT(kept, "every element kept across the reallocations");

    size_t big = SIZE_MAX / 2 / sizeof *v + 1;   /* doubling it overflows the byte count */
    size_t big_cap = big;
    EXPECT(sl_grow(v, &big_cap, big, sizeof *v, 4) == NULL && big_cap == big,
           "overflowing growth refused, capacity unchanged (%zu)", big_cap);
    size_t huge_cap = SIZE_MAX / 2 + 1;
    EXPECT(sl_grow(v, &huge_cap, huge_cap, 1, 4) == NULL && huge_cap == SIZE_MAX / 2 + 1,
           "a capacity that cannot double refused");
    size_t zero_cap = 0;
    void *one = sl_grow(NULL, &zero_cap, 0, 16, 0);
    EXPECT(one && zero_cap == 1, "first 0 means one element (cap %zu)", zero_cap);
    free(one);
    free(v);
    return expect_failures ? 1 : 0;
}
