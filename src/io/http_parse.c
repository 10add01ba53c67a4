/* http_parse.c - the responses of HTTP servers and S3, parsed without a connection (http_parse.h).
 * http_xfer.c hands every header line here and judges the response by what comes out (the
 * ListObjectsV2 pages http_get.c gets are http_list.c's). Nothing here trusts the server: a
 * number is digits only and checked for overflow (sscanf's %llu took "-1" as 2^64 - 1 and
 * "bytes 9-3/4" as a range), and a header value with a control byte is dropped rather than sent
 * back in an If-Match. */
#include "io/http_parse.h"

#include "common/sl_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- response headers ------------------------------------------------------------------------- */

void sl_http_resp_clear(sl_http_resp *r)
{
    memset(r, 0, sizeof *r);
}

/* Decimal digits, at least one, without overflow: the first byte after them, else NULL. */
static const char *parse_u64(const char *s, const char *end, uint64_t *out)
{
    uint64_t x = 0;
    const char *p = s;
    for (; p < end && *p >= '0' && *p <= '9'; p++)
        if (sl_mul_overflow(x, 10, &x) || sl_add_overflow(x, (uint64_t)(*p - '0'), &x))
            return NULL;
    if (p == s)
        return NULL;
    *out = x;
    return p;
}

/* s[0, n) is a whole decimal number. */
static int parse_u64_all(const char *s, size_t n, uint64_t *out)
{
    return parse_u64(s, s + n, out) == s + n;
}

static int ows(char c)
{
    return c == ' ' || c == '\t';
}

/* line is "name: value": the value without the whitespace and CRLF around it. */
static int header_is(const char *line, size_t n, const char *name, const char **v, size_t *vl)
{
    const size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return 0;
    const char *a = line + k + 1, *b = line + n;
    while (b > a && (ows(b[-1]) || b[-1] == '\r' || b[-1] == '\n'))
        b--;
    while (a < b && ows(*a))
        a++;
    *v = a;
    *vl = (size_t)(b - a);
    return 1;
}

/* The value into dst[0, n); "" when it has a control byte (or a NUL) or does not fit: a value too
 * long for its field is dropped, not cut, as a cut ETag sent back in If-Match would make every
 * later GET a 412 ("object changed"). */
static void copy_value(char *dst, size_t n, const char *v, size_t vl)
{
    dst[0] = '\0';
    if (vl >= n)
        return;
    for (size_t i = 0; i < vl; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return;
    memcpy(dst, v, vl);
    dst[vl] = '\0';
}

/* "bytes START-END/TOTAL" or "bytes START-END/ *" (RFC 9110 14.4; the unit in any case), with
 * START <= END, and END < TOTAL when TOTAL is given. Anything else: no Content-Range. */
static void parse_content_range(sl_http_resp *r, const char *v, size_t n)
{
    const char *p = v, *end = v + n;
    uint64_t a = 0, b = 0, t = 0;
    r->has_cr = r->cr_total_known = 0;
    if (n < 6 || strncasecmp(v, "bytes ", 6) != 0)
        return;
    p += 6;
    while (p < end && *p == ' ')
        p++;
    if (!(p = parse_u64(p, end, &a)) || p == end || *p++ != '-' || !(p = parse_u64(p, end, &b)) ||
        p == end || *p++ != '/')
        return;
    const int known = !(end - p == 1 && *p == '*');
    if (known && !parse_u64_all(p, (size_t)(end - p), &t))
        return;
    if (a > b || (known && b >= t))
        return;
    r->cr_start = a;
    r->cr_end = b;
    r->cr_total = known ? t : 0;
    r->has_cr = 1;
    r->cr_total_known = known;
}

/* delay-seconds, saturated at a day; an HTTP-date (or anything else) is 0, no hint. v[0, n) is
 * not NUL-terminated. */
static long parse_retry_after(const char *v, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] < '0' || v[i] > '9')
            return 0;
    if (n == 0)
        return 0;
    if (!parse_u64_all(v, n, &s) || s > (uint64_t)SL_HTTP_RETRY_AFTER_MAX)
        return SL_HTTP_RETRY_AFTER_MAX;
    return (long)s;
}

/* Whether a Content-Encoding value names a compression (gzip, deflate, br, zstd, compress): the
 * body is then not the object's bytes. Others keep the bytes as stored: "identity", and what
 * S3-compatible stores keep from an upload and send back with the raw object ("aws-chunked",
 * "none"). */
static int compressed(const char *v, size_t n)
{
    static const char *const codings[] = {"gzip", "x-gzip", "deflate", "br", "zstd", "compress",
                                          "x-compress"};
    for (size_t i = 0; i < n;) {   /* a list: "aws-chunked, gzip" */
        while (i < n && (v[i] == ',' || ows(v[i])))
            i++;
        size_t j = i;
        while (j < n && v[j] != ',' && !ows(v[j]))
            j++;
        for (size_t k = 0; k < sizeof codings / sizeof codings[0]; k++)
            if (j - i == strlen(codings[k]) && strncasecmp(v + i, codings[k], j - i) == 0)
                return 1;
        i = j;
    }
    return 0;
}

void sl_http_resp_header(sl_http_resp *r, const char *line, size_t n)
{
    const char *v = NULL;
    size_t vl = 0;
    if (n >= 5 && !strncmp(line, "HTTP/", 5))   /* a new response (after a redirect or 100) */
        sl_http_resp_clear(r);
    else if (header_is(line, n, "content-range", &v, &vl))
        parse_content_range(r, v, vl);
    else if (header_is(line, n, "content-length", &v, &vl))
        r->has_cl = parse_u64_all(v, vl, &r->content_length);
    else if (header_is(line, n, "etag", &v, &vl))
        copy_value(r->etag, sizeof r->etag, v, vl);
    else if (header_is(line, n, "last-modified", &v, &vl))
        copy_value(r->last_modified, sizeof r->last_modified, v, vl);
    else if (header_is(line, n, "x-amz-checksum-sha256", &v, &vl))
        copy_value(r->sum_sha256, sizeof r->sum_sha256, v, vl);
    else if (header_is(line, n, "x-amz-checksum-type", &v, &vl))
        copy_value(r->sum_type, sizeof r->sum_type, v, vl);
    else if (header_is(line, n, "retry-after", &v, &vl))
        r->retry_after_s = parse_retry_after(v, vl);
    else if (header_is(line, n, "x-amz-bucket-region", &v, &vl)) {
        copy_value(r->bucket_region, sizeof r->bucket_region, v, vl);
        if (!sl_http_region_ok(r->bucket_region))
            r->bucket_region[0] = '\0';
    } else if (header_is(line, n, "content-encoding", &v, &vl)) {
        r->encoded = compressed(v, vl);
        copy_value(r->encoding, sizeof r->encoding, v, vl);
    }
}

/* ---- error bodies ----------------------------------------------------------------------------- */

/* The text of <tag>...</tag> in body into out[0, n): "" when absent, too long, or holding a byte
 * that is not a letter, a digit, '.', '_' or '-'. */
static void s3_element(const char *body, const char *tag, char *out, size_t n)
{
    char open[32], close[32];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = strstr(body, open);
    const char *b = a ? strstr(a + strlen(open), close) : NULL;
    out[0] = '\0';
    if (!a || !b)
        return;
    a += strlen(open);
    if ((size_t)(b - a) >= n)
        return;
    for (const char *p = a; p < b; p++)   /* AccessDenied, NoSuchKey, SlowDown ... */
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return;
    memcpy(out, a, (size_t)(b - a));
    out[b - a] = '\0';
}

void sl_http_s3_code(const char *body, char *code, size_t n)
{
    s3_element(body, "Code", code, n);
}

void sl_http_s3_region(const char *body, char *region, size_t n)
{
    s3_element(body, "Region", region, n);
    if (!sl_http_region_ok(region))
        region[0] = '\0';
}

int sl_http_region_ok(const char *s)
{
    const size_t n = strlen(s);
    if (n < 1 || n > 31)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* ---- the store's checksum --------------------------------------------------------------------- */

/* Standard base64 (RFC 4648, padded) of exactly n bytes into out; -1 for anything else. */
static int base64_decode_exact(const char *s, unsigned char *out, size_t n)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t len = strlen(s);
    if (len != (n + 2) / 3 * 4)
        return -1;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t got = 0, i = 0;
    for (; i < len && s[i] != '='; i++) {
        const char *p = strchr(alpha, s[i]);
        if (!p || !*p)
            return -1;
        acc = (acc << 6) | (uint32_t)(p - alpha);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (got == n)
                return -1;
            out[got++] = (unsigned char)(acc >> bits);
        }
    }
    for (size_t k = i; k < len; k++)   /* only padding after the first '=' */
        if (s[k] != '=')
            return -1;
    return got == n && (acc & ((1u << bits) - 1)) == 0 ? 0 : -1;
}

/* "...-N": the ETag S3 gives a multipart upload. */
static int multipart_etag(const char *etag)
{
    size_t n = strlen(etag);
    if (n && etag[n - 1] == '"')
        n--;
    size_t d = 0;
    while (d < n && etag[n - 1 - d] >= '0' && etag[n - 1 - d] <= '9')
        d++;
    return d > 0 && d < n && etag[n - 1 - d] == '-';
}

/* A multipart upload's SHA-256 is COMPOSITE, the hash of its parts' hashes, "...-N" (S3 has no
 * FULL_OBJECT type for SHA-256): not the file's, so never used as one. moto's HEAD leaves out both
 * the "-N" and x-amz-checksum-type, so the multipart ETag decides too. */
int sl_http_whole_sha256(const sl_http_resp *r, const char *etag, char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char d[32];
    hex[0] = '\0';
    if (!r->sum_sha256[0] || strchr(r->sum_sha256, '-') || multipart_etag(etag ? etag : ""))
        return 0;
    if (r->sum_type[0] && strcasecmp(r->sum_type, "FULL_OBJECT") != 0)
        return 0;
    if (base64_decode_exact(r->sum_sha256, d, sizeof d) != 0)
        return 0;
    for (size_t i = 0; i < sizeof d; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
    return 1;
}
