/* test_status.c - the status list is the one source: the enum, sl_status_str, sl_status_meaning
 * and docs/errors.md's table (value and name of every row, in order) all agree with it. */
#include "expect.h"
#include "shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DOC SL_TEST_CONFIGS "/../../docs/errors.md"

typedef struct row {
    int value;
    char name[64];
} row;

#define SL_ROW_(name, value, meaning) {value, #name},
static const row list[] = {SL_STATUS_LIST(SL_ROW_)};
#undef SL_ROW_
#define N_LIST ((int)(sizeof list / sizeof list[0]))

/* The "| value | name | meaning |" rows of the doc's table. */
static int doc_rows(row *out, int cap)
{
    FILE *f = fopen(DOC, "r");
    char line[1024];
    int n = 0;
    EXPECT(f != NULL, "cannot open %s", DOC);
    while (f && fgets(line, sizeof line, f) && n < cap) {
        int v = 0;
        char name[64];
        if (sscanf(line, "| %d | %63[A-Z0-9_] |", &v, name) == 2) {
            out[n].value = v;
            snprintf(out[n].name, sizeof out[n].name, "%s", name);
            n++;
        }
    }
    if (f)
        fclose(f);
    return n;
}

int main(void)
{
    row doc[128];
    const int n = doc_rows(doc, 128);
    EXPECT(n == N_LIST, "docs/errors.md has %d status rows, SL_STATUS_LIST %d", n, N_LIST);
    for (int i = 0; i < n && i < N_LIST; i++)
        EXPECT(doc[i].value == list[i].value && !strcmp(doc[i].name, list[i].name),
               "row %d: docs/errors.md has %d %s, the list %d %s", i, doc[i].value, doc[i].name,
               list[i].value, list[i].name);
    for (int i = 0; i < N_LIST; i++) {
        const sl_status st = (sl_status)list[i].value;
        EXPECT(!strcmp(sl_status_str(st), list[i].name), "sl_status_str(%d)", list[i].value);
        EXPECT(sl_status_meaning(st)[0] != '\0', "%s has no meaning", list[i].name);
        for (int j = 0; j < i; j++)
            EXPECT(list[j].value < list[i].value, "%s is not after %s", list[i].name, list[j].name);
    }
    EXPECT(!strcmp(sl_status_str((sl_status)99), "SL_E_UNKNOWN") &&
               !strcmp(sl_status_meaning((sl_status)99), ""), "unknown status");
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    else
        printf("test_status: all passed\n");
    return expect_failures ? 1 : 0;
}
