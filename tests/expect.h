/* expect.h - the check macro of the C tests. EXPECT(cond, fmt, ...) prints where and what failed,
 * with the condition's text, and counts it; a test exits 1 when expect_failures is nonzero. */
#ifndef SL_EXPECT_H
#define SL_EXPECT_H

#include <stdio.h>

static int expect_failures;

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            expect_failures++;                                              \
            fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

#endif /* SL_EXPECT_H */
