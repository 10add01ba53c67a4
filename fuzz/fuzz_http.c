/* fuzz_http.c - what an HTTP server or S3 answers a ranged GET or a HEAD, parsed as http_xfer.c
 * does (http_parse.h), on arbitrary bytes: a response head (lines up to an empty one, each handed
 * over as curl does, not NUL-terminated) and then an error body (its first 1023 bytes, as
 * keep_error_body keeps). After every line the parsed response must be consistent: a Content-Range
 * START <= END (< TOTAL when known), values bounded, NUL-terminated and free of control bytes;
 * S3's <Code> is a bounded word; a store checksum is 64 lowercase hex digits. */
#include "io/http_parse.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s, size_t cap)
{
    const size_t n = strnlen(s, cap);
    if (n == cap)
        abort();   /* not NUL-terminated inside its field */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            abort();   /* a control byte would go back to the server in If-Match, or to a terminal */
}

static void check_resp(const sl_http_resp *r)
{
    if (r->has_cr && (r->cr_start > r->cr_end || (r->cr_total_known && r->cr_end >= r->cr_total)))
        abort();
    if (r->cr_total_known && !r->has_cr)
        abort();
    if (r->retry_after_s < 0 || r->retry_after_s > SL_HTTP_RETRY_AFTER_MAX)
        abort();
    check_text(r->etag, sizeof r->etag);
    check_text(r->last_modified, sizeof r->last_modified);
    check_text(r->sum_sha256, sizeof r->sum_sha256);
    check_text(r->sum_type, sizeof r->sum_type);
}

/* The head's lines, each in a buffer of its exact length (reads past it are ASan reports);
 * returns where the body starts. */
static size_t feed_head(sl_http_resp *r, const uint8_t *data, size_t size)
{
    size_t i = 0;
    while (i < size) {
        const uint8_t *nl = memchr(data + i, '\n', size - i);
        const size_t n = (nl ? (size_t)(nl - data) + 1 : size) - i;
        char *line = malloc(n);
        if (!line)
            abort();
        memcpy(line, data + i, n);
        sl_http_resp_header(r, line, n);
        free(line);
        check_resp(r);
        const int blank = (n == 1 && data[i] == '\n') || (n == 2 && data[i] == '\r' && data[i + 1] == '\n');
        i += n;
        if (blank)
            break;
    }
    return i;
}

static void check_body(const sl_http_resp *r, const uint8_t *body, size_t n)
{
    char text[1024], code[64], hex[65];
    const size_t k = n < sizeof text - 1 ? n : sizeof text - 1;
    memcpy(text, body, k);
    text[k] = '\0';
    sl_http_s3_code(text, code, sizeof code);
    check_text(code, sizeof code);
    if (strspn(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(code))
        abort();
    /* a region goes into a host name and a signature: nothing but what a region holds */
    char region[32];
    sl_http_s3_region(text, region, sizeof region);
    if ((region[0] && !sl_http_region_ok(region)) || (r->bucket_region[0] && !sl_http_region_ok(r->bucket_region)) ||
        strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(region))
        abort();
    for (int pass = 0; pass < 2; pass++) {
        if (!sl_http_whole_sha256(r, pass ? NULL : r->etag, hex)) {
            if (hex[0])
                abort();
        } else if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64) {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_http_resp r;
    sl_http_resp_clear(&r);
    const size_t body = feed_head(&r, data, size);
    check_body(&r, data + body, size - body);
    return 0;
}
