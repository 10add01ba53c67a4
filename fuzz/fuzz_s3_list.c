/* fuzz_s3_list.c - one S3 ListObjectsV2 page (what sl_http_list asks the store for when a prefix
 * has no index) parsed by sl_http_list_page on arbitrary bytes, under a prefix and at the bucket's
 * top level. A page is read (SL_OK) or refused (SL_E_IO with a message, or SL_E_NOMEM), never
 * taken half-read: on SL_OK it is a ListBucketResult that says whether it is truncated, every name
 * kept is a .safetensors object directly under the prefix (no '/'), at most one per <Contents>,
 * and a continuation token comes only from a truncated page and is never empty (the listing would
 * ask for its first page again); on an error there is no token. Every name kept, written back as
 * S3 writes a key (XML-escaped with numeric references for control bytes, or percent-encoded under
 * <EncodingType>url</EncodingType>), reads back the same. Nothing leaks. */
#include "io/http_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* How many times s occurs in xml. */
static size_t count(const char *xml, const char *s)
{
    size_t n = 0;
    for (const char *p = xml; (p = strstr(p, s)) != NULL; p++)
        n++;
    return n;
}

static void check_names(const sl_http_names *names, const char *xml)
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
    if (names->n > count(xml, "<Contents"))
        abort();
}

/* key as S3 writes it in a <Key>: XML-escaped (url 0) or percent-encoded (url 1), into w. */
static char *put_key(char *w, const char *key, int url)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
        const int plain = url ? (*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
                                    strchr("-_.~/", *k)
                              : *k >= 0x20 && !strchr("&<>", *k);
        if (plain)
            *w++ = (char)*k;
        else if (url)
            w += sprintf(w, "%%%c%c", hex[*k >> 4], hex[*k & 15]);
        else
            w += sprintf(w, "&#%u;", *k);
    }
    return w;
}

/* prefix + name on a page of its own reads back as name. */
static void round_trip(const char *prefix, const char *name, int url)
{
    char *page = malloc(6 * (strlen(prefix) + strlen(name)) + 256), *w = page;
    sl_http_names names = {0};
    sl_err err = {0};
    char *token = NULL;
    if (!page)
        abort();
    w += sprintf(w, "<ListBucketResult>%s<IsTruncated>false</IsTruncated><Contents><Key>",
                 url ? "<EncodingType>url</EncodingType>" : "");
    w = put_key(put_key(w, prefix, url), name, url);
    strcpy(w, "</Key></Contents></ListBucketResult>");
    const sl_status st = sl_http_list_page(page, prefix, &names, &token, &err);
    if (st != SL_E_NOMEM && (st != SL_OK || token || names.n != 1 || strcmp(names.v[0], name) != 0))
        abort();
    sl_http_names_free(&names);
    sl_err_clear(&err);
    free(page);
}

static void list_one(const char *xml, const char *prefix)
{
    sl_http_names names = {0};
    sl_err err = {0};
    char *token = (char *)"unset";
    const sl_status st = sl_http_list_page(xml, prefix, &names, &token, &err);
    if (st != SL_OK && st != SL_E_NOMEM && st != SL_E_IO)
        abort();
    if (st != SL_OK && (token || !*sl_err_msg(&err)))
        abort();
    if (st == SL_OK) {
        check_names(&names, xml);
        for (size_t i = 0; i < names.n; i++) {
            round_trip(prefix, names.v[i], 0);
            round_trip(prefix, names.v[i], 1);
        }
        if (!strstr(xml, "ListBucketResult") || !strstr(xml, "IsTruncated"))
            abort();
        if (token && (!*token || !strstr(xml, "NextContinuationToken")))
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
