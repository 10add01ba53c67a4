/* http_list.h - one S3 ListObjectsV2 page, parsed with no connection (http_list.c). Built with or
 * without libcurl; fuzz/fuzz_s3_list.c calls it directly. */
#ifndef SL_IO_HTTP_LIST_H
#define SL_IO_HTTP_LIST_H

#include "common/sl_err.h"
#include "common/sl_strmap.h"

#include <stddef.h>

/* Names gathered from the pages of a listing (owned strings). set is the parser's: v's strings ->
 * their index, which finds a name listed twice; it is rebuilt from v when it lacks some and freed
 * by the page that ends the listing, so that a caller may then take v and n as they are. */
typedef struct sl_http_names {
    char **v;
    size_t n, cap;
    sl_strmap set;
} sl_http_names;

/* One ListObjectsV2 page (NUL-terminated XML): the <Key>s of its <Contents> directly under
 * prefix that end in .safetensors are appended to names, relative to prefix (XML references,
 * named and numeric, decoded to UTF-8; then percent-decoding when the page says
 * <EncodingType>url</EncodingType>); *token is the NextContinuationToken when <IsTruncated> is
 * true (free it), else NULL. A page with no keys is not an error. SL_E_IO (message without the
 * bucket's name, which the caller prefixes) for a page that is not a well-formed
 * ListBucketResult, a key or field that cannot be decoded exactly (a malformed or unknown
 * reference, one to U+0000, a surrogate or past U+10FFFF, a bad %XX or %00), a key that is not
 * UTF-8 once decoded, a name already in names (from this page or an earlier one of the listing:
 * S3 lists a key once), a <Contents> without exactly one <Key>, no <IsTruncated>, or a truncated
 * page without a NextContinuationToken; SL_E_NOMEM. On an error *token is NULL and names may hold
 * some of the page's names. */
sl_status sl_http_list_page(const char *xml, const char *prefix, sl_http_names *names, char **token,
                            sl_err *err);
/* Frees every name, the array and the set; names is empty after. */
void sl_http_names_free(sl_http_names *names);

#endif /* SL_IO_HTTP_LIST_H */
