/* http_parse.h - what an HTTP server or S3 sends back, parsed with no connection (http_parse.c):
 * the response headers a ranged GET is judged by (Content-Range, Content-Length, ETag,
 * Last-Modified, Retry-After, the store's checksum) and S3's <Code> in an error body (a
 * ListObjectsV2 page: http_list.h). The bytes are the server's, so untrusted: numbers are digits
 * only with checked arithmetic, a Content-Range must be consistent (START <= END < TOTAL), and a
 * value with a control byte is dropped. Built with or without libcurl; fuzz/fuzz_http.c calls it
 * directly. */
#ifndef SL_IO_HTTP_PARSE_H
#define SL_IO_HTTP_PARSE_H

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

/* A Retry-After above a day is taken as a day (the wait is cut to the timeout anyway). */
#define SL_HTTP_RETRY_AFTER_MAX 86400L

/* The headers of one response that http_xfer.c looks at. */
typedef struct sl_http_resp {
    uint64_t cr_start, cr_end, cr_total;  /* Content-Range: bytes START-END/TOTAL */
    int has_cr;                /* START-END given, START <= END, and END < TOTAL when known */
    int cr_total_known;        /* TOTAL given (not '*') */
    uint64_t content_length;
    int has_cl;
    long retry_after_s;        /* delay-seconds in [0, SL_HTTP_RETRY_AFTER_MAX]; 0: none, or a date */
    char etag[256], last_modified[128];   /* "": none, or a value with a control byte or too long */
    char sum_sha256[128], sum_type[32];   /* x-amz-checksum-sha256, x-amz-checksum-type */
    int encoded;               /* a Content-Encoding that names a compression: the body is not the
                                  object's bytes (nothing asks for one: a misconfigured proxy) */
    char encoding[32];         /* its value, for the message ("" when unprintable or long) */
    char bucket_region[32];    /* x-amz-bucket-region: where S3 says the bucket lives ("" when
                                  absent, or not lowercase letters, digits and '-') */
} sl_http_resp;

/* Nothing received: every field 0 or "". */
void sl_http_resp_clear(sl_http_resp *r);
/* One header line as curl hands it: n bytes, not NUL-terminated, usually ending in CRLF. A status
 * line ("HTTP/...", a new response after a redirect or a 100) clears r. A malformed value, or one
 * too long for its field, leaves the field unset. */
void sl_http_resp_header(sl_http_resp *r, const char *line, size_t n);
/* The text of S3's <Code>...</Code> in an error body (NUL-terminated) into code[0, n): "" when
 * there is none, it does not fit, or it has a byte that is not a letter or a digit. */
void sl_http_s3_code(const char *body, char *code, size_t n);
/* The same for S3's <Region>...</Region> (an AuthorizationHeaderMalformed body names the bucket's
 * region there), with the rule of sl_http_resp.bucket_region: "" unless lowercase letters, digits
 * and '-'. */
void sl_http_s3_region(const char *body, char *region, size_t n);
/* 1 when s is a region S3 may name: 1 to 31 lowercase letters, digits and '-' (us-east-1,
 * us-gov-west-1, cn-north-1). What a server names goes into a host name and a signature, so
 * nothing else is taken from it. */
int sl_http_region_ok(const char *s);
/* 1 and the store's SHA-256 of the whole object in hex (lowercase, NUL-terminated), from a HEAD's
 * x-amz-checksum-sha256 (base64 of 32 bytes) and x-amz-checksum-type; 0 when it has none that
 * covers the whole object: absent, another type, a multipart upload's composite "...-N", or an
 * etag of a multipart upload ("...-N", quoted or not). */
int sl_http_whole_sha256(const sl_http_resp *r, const char *etag, char hex[65]);

#endif /* SL_IO_HTTP_PARSE_H */
