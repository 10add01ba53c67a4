/* http_xfer.h - one ranged GET of an object, over as many attempts as its retries allow, shared by
 * the blocking GETs (http_get.c) and the engine (io_http.c). An attempt is prepared on a curl easy
 * handle (xf_prepare), run by curl_easy_perform or a multi handle, and judged by xf_finish. The
 * bytes already received and checked stay: the next attempt asks for the rest of the range only. */
#ifndef SL_IO_HTTP_XFER_H
#define SL_IO_HTTP_XFER_H

#include "io/http.h"
#include "io/http_parse.h"

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

enum { XF_DONE = 0, XF_RETRY = 1, XF_FAIL = 2 };

/* How fast a pool's data ranges finished lately (the last XF_PEER_SAMPLES attempts of at least
 * XF_PEER_MIN_BYTES): the yardstick of the laggard check (on_progress in http_xfer.c). */
#define XF_PEER_SAMPLES 32u
#define XF_PEER_MIN_BYTES ((size_t)256 << 10)
typedef struct xf_peers {
    double bps[XF_PEER_SAMPLES], secs[XF_PEER_SAMPLES];
    unsigned n, next;
    double typical_bps, typical_s;   /* their medians; 0 until there are enough of them */
} xf_peers;

typedef struct sl_http_xfer {
    const sl_http_obj *obj;
    sl_http_obj *record;       /* obj, where this GET may be its first: records its size, ETag and
                                  Last-Modified (the blocking GETs of the open); NULL: the engine */
    uint64_t off;              /* range [off, off + len) */
    size_t len;
    unsigned char *buf;        /* len bytes; whole: grown up to max */
    size_t got;                /* bytes received and checked */
    int whole;                 /* no Range: the whole object, at most max bytes */
    int head;                  /* a HEAD for the store's checksum (len 0): its headers only */
    int probe;                 /* with head: a HeadBucket, done at any status (its x-amz-bucket-region
                                  is all that is read) */
    size_t max, cap;
    const sl_http_tune *tune;
    /* retry state */
    int failures;              /* in a row without progress */
    int tries;
    uint64_t not_before_ms;    /* monotonic time of the next attempt */
    char last_reason[160];
    struct sl_http_xfer *q_next;   /* in an xf_pool's queue (http_pool.h) */
    /* the attempt */
    CURL *h;                   /* the handle it runs on; NULL when not running (http_pool.c) */
    size_t got_at_start;
    size_t got_until;          /* got may reach this in the attempt: the end of the bytes the
                                  206's Content-Range says it holds (len for a 200) */
    uint64_t last_byte_ms;     /* when the attempt started or its last body byte came (headers
                                  are not progress: on_header) */
    uint64_t window_ms;        /* the start of the current rate window (on_progress) */
    size_t window_got;         /* got at that start */
    int stalled;               /* ended by on_progress: no byte for the tune's timeout */
    int slow;                  /* ended by on_progress: under XF_MIN_RATE for the timeout */
    int cancelled;             /* ended by on_progress: sl_cancel was called */
    int lagging;               /* ended by on_progress: far slower than the pool's finished ranges */
    int lag_restarts;          /* attempts of this range so ended (at most XF_LAG_RESTARTS) */
    int fresh;                 /* the next attempt opens a new connection (after a laggard) */
    const xf_peers *peers;     /* the pool's finished ranges, or NULL (a blocking GET: no peers) */
    uint64_t attempt_ms;       /* when the attempt started */
    int checked;               /* the response's headers were checked (at the first body byte) */
    sl_http_resp resp;         /* the response's headers (http_parse.h) */
    char s3_code[64];
    char body[1024];           /* start of an error response (S3's <Code>) */
    size_t body_len;
    sl_status fail_st;         /* set by a callback that stopped the transfer */
    char fail_msg[512];
    struct curl_slist *headers;
    char range[64], sigv4[96];
    char errbuf[CURL_ERROR_SIZE];   /* curl's detail of a failure (a certificate problem) */
} sl_http_xfer;

/* Once per process (curl_global_init is not safe to race). */
void xf_global_init(void);
/* An easy handle with the options every attempt shares (keep-alive, timeouts, protocols). */
CURL *xf_easy_new(const sl_http_tune *t);
/* x for [off, off + len) of obj into buf. */
void xf_init(sl_http_xfer *x, const sl_http_obj *obj, const sl_http_tune *t, uint64_t off, size_t len, void *buf);
/* Sets h up for x's next attempt (the rest of the range). SL_E_NOMEM only. */
sl_status xf_prepare(sl_http_xfer *x, CURL *h, sl_err *err);
/* After an attempt ended with rc: XF_DONE, XF_RETRY (x->not_before_ms set) or XF_FAIL (err set,
 * one line naming the object, never a credential). */
int xf_finish(sl_http_xfer *x, CURLcode rc, sl_err *err);
void xf_release(sl_http_xfer *x);
/* SL_E_CANCELLED with the message of a stop asked for while x ran or waited (sl_cancel): its
 * object and range. */
sl_status xf_cancelled(const sl_http_xfer *x, sl_err *err);
/* After a HEAD that ended XF_DONE: 1 and the store's SHA-256 of the whole object in hex (lowercase,
 * NUL-terminated), or 0 when the response has none that covers the whole object. */
int xf_whole_sha256(const sl_http_xfer *x, char hex[65]);
uint64_t xf_now_ms(void);
/* After x's attempt completed (XF_DONE): its speed into p, where it moved enough bytes to say. */
void xf_peers_add(xf_peers *p, const sl_http_xfer *x, uint64_t now_ms);

#endif /* SL_IO_HTTP_XFER_H */
