/* fuzz_s3_list.c - one S3 ListObjectsV2 page (what sl_http_list asks the store for when a prefix
 * has no index) parsed by sl_http_list_page on arbitrary bytes, under a prefix and at the bucket's
 * top level. Every name kept is a .safetensors object directly under the prefix (no '/'), a
 * continuation token comes only from a truncated page, and nothing leaks. */
#include "io/http_parse.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_names(const sl_http_names *names)
{
    static const char suf[] = ".safetensors";
    if (names->n > names->cap)
        abort();
    for (size_t i = 0; i < names->n; i++) {
        const char *s = names->v[i];
        const size_t n = strlen(s);
        if (n <= sizeof suf - 1 || strcmp(s + n - (sizeof suf - 1), suf) != 0 || strchr(s, '/'))
            abort();
    }
}

static void list_one(const char *xml, const char *prefix)
{
    sl_http_names names = {0};
    sl_err err = {0};
    char *token = (char *)"unset";
    const sl_status st = sl_http_list_page(xml, prefix, &names, &token, &err);
    if (st != SL_OK && st != SL_E_NOMEM)
        abort();
    if (st == SL_OK) {
        check_names(&names);
        if (token && !strstr(xml, "<IsTruncated>true</IsTruncated>"))
            abort();
        free(token);
    }
    sl_http_names_free(&names);
    sl_err_clear(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *xml = malloc(size + 1);   /* the page as sl_http_get_all hands it: NUL-terminated */
    if (!xml)
        abort();
    memcpy(xml, data, size);
    xml[size] = '\0';
    list_one(xml, "models/llama-3-8b/");
    list_one(xml, "");
    free(xml);
    return 0;
}
