/* http_xfer.c - one ranged GET and what its response means (http_xfer.h).
 *
 * Every response is checked before a byte of its body is kept: a 206 must start where the range
 * asked, end within it (its body then holds exactly the bytes it names) and name the object's total
 * size; ETag and Last-Modified must be the ones the first GET
 * saw. Another size, ETag or modification time, or a 412, is SL_E_CHANGED: the object was replaced
 * after its header was read, and its bytes would be another model's. Connection errors, stalls (no
 * byte for the timeout), truncated bodies, 5xx but 501 and 505, and 429 are retried after an
 * exponential backoff with jitter, from the first byte not yet received; 403, 404, other 4xx, 501
 * (not implemented) and 505 (HTTP version not supported) fail at once: every try would meet them
 * (http_fail.c words each). */
#include "io/http_xfer.h"
#include "io/http_fail.h"
#include "common/sl_cancel.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_once_t xf_once = PTHREAD_ONCE_INIT;

static void xf_global_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void xf_global_init(void)
{
    pthread_once(&xf_once, xf_global_init_once);
}

uint64_t xf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

CURL *xf_easy_new(const sl_http_tune *t)
{
    xf_global_init();
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)t->timeout_ms);
    /* the path as written: curl would otherwise remove "./" and "../" segments (RFC 3986 5.2.4), and
     * s3://b/a/./b/../c.safetensors fetched the key a/c.safetensors (S3 keys are names, not paths,
     * and SigV4 signs the path unnormalised); an http(s) URL's path is sent as the user gave it
     * (a presigned URL's signature covers its literal path; a server resolves dots if it wants) */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    if (t->ca_bundle)
        curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_bundle);
    return h;
}

void xf_init(sl_http_xfer *x, const sl_http_obj *obj, const sl_http_tune *t, uint64_t off, size_t len, void *buf)
{
    memset(x, 0, sizeof *x);
    x->obj = obj;
    x->tune = t;
    x->off = off;
    x->len = len;
    x->buf = buf;
}

void xf_release(sl_http_xfer *x)
{
    curl_slist_free_all(x->headers);
    x->headers = NULL;
}

/* ---- the response's headers ---- */

/* A header line is not progress (last_byte_ms stays): a server that sends one every few hundred
 * milliseconds, and never a body, held a range for ever, each line resetting the stall check. The
 * headers of an attempt, redirects' included, have the timeout from its start. */
static size_t on_header(char *line, size_t size, size_t nitems, void *user)
{
    sl_http_xfer *x = user;
    sl_http_resp_header(&x->resp, line, size * nitems);
    return size * nitems;
}

static int xf_stop(sl_http_xfer *x, sl_status st, const char *fmt, ...) SL_PRINTF(3, 4);
static int xf_stop(sl_http_xfer *x, sl_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->fail_msg, sizeof x->fail_msg, fmt, ap);
    va_end(ap);
    x->fail_st = st;
    return -1;
}

static int changed(sl_http_xfer *x, const char *what, const char *was, const char *now)
{
    return xf_stop(x, SL_E_CHANGED, "%s: object changed since its header was read (%s was %s, now %s): "
                   "not loaded", x->obj->name, what, was, now);
}

/* The first GET of an object records what the later ones are compared with. */
static int record_first(sl_http_xfer *x, uint64_t total)
{
    sl_http_obj *o = x->record;
    if (!o)
        return xf_stop(x, SL_E_INVALID_ARG, "%s: remote engine: object without a recorded size", x->obj->name);
    o->size = total;
    o->size_known = 1;
    if (x->resp.etag[0] && !(o->etag = strdup(x->resp.etag)))
        return xf_stop(x, SL_E_NOMEM, "out of memory");
    if (x->resp.last_modified[0] && !(o->last_modified = strdup(x->resp.last_modified)))
        return xf_stop(x, SL_E_NOMEM, "out of memory");
    return 0;
}

static int check_identity(sl_http_xfer *x, uint64_t total)
{
    const sl_http_obj *o = x->obj;
    char a[32], b[32];
    if (!o->size_known) {
        if (record_first(x, total) != 0)
            return -1;
        if (total < x->off + x->len)
            return xf_stop(x, SL_E_HEADER_TOO_SMALL, "%s: %" PRIu64 " bytes, shorter than %" PRIu64,
                           o->name, total, x->off + x->len);
        return 0;
    }
    if (total != o->size) {
        snprintf(a, sizeof a, "%" PRIu64 " bytes", o->size);
        snprintf(b, sizeof b, "%" PRIu64, total);
        return changed(x, "size", a, b);
    }
    if (o->etag && x->resp.etag[0] && strcmp(o->etag, x->resp.etag) != 0)
        return changed(x, "ETag", o->etag, x->resp.etag);
    if (o->last_modified && x->resp.last_modified[0] && strcmp(o->last_modified, x->resp.last_modified) != 0)
        return changed(x, "Last-Modified", o->last_modified, x->resp.last_modified);
    return 0;
}

/* A 206's Content-Range ends where the request did, or before it (a server may send fewer bytes
 * than asked: the rest is asked for again, as after a cut connection), never past it; and the body
 * holds exactly the bytes it names (on_body, xf_finish). Without this a response whose body and
 * Content-Range disagree was taken on the body's word. Checked after check_identity: a total that
 * changed says more than the end it gives. */
static int check_range_end(sl_http_xfer *x)
{
    const uint64_t from = x->off + x->got, last = x->off + x->len - 1;
    if (x->resp.cr_end > last)
        return xf_stop(x, SL_E_IO, "%s: asked for bytes %" PRIu64 "-%" PRIu64 ", the server's Content-Range "
                       "is bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, x->obj->name, from, last, x->resp.cr_start,
                       x->resp.cr_end, x->resp.cr_total);
    x->got_until = x->got + (size_t)(x->resp.cr_end - x->resp.cr_start + 1);   /* <= len: cr_end <= last */
    return 0;
}

/* Called at the first body byte of a 2xx response. A body with a Content-Encoding is not the
 * object's bytes (curl decodes none: no Accept-Encoding is sent), and a Content-Length other than
 * the Content-Range's span is not its range: a gzipped range that ended "short" was kept as the
 * start of the range, and the load exited 0 with other weights. */
static int check_response(sl_http_xfer *x, long code)
{
    const uint64_t want = x->off + x->got;
    x->got_until = x->len;
    if (x->resp.encoded)
        return xf_stop(x, SL_E_IO, "%s: HTTP %ld with Content-Encoding '%s', which nothing asked for: "
                       "the body is not the object's bytes (a proxy or server that compresses "
                       "responses; shardload reads objects as stored)", x->obj->name, code,
                       x->resp.encoding[0] ? x->resp.encoding : "?");
    if (x->whole)
        return code == 200 ? 0 : xf_stop(x, SL_E_IO, "%s: HTTP %ld to a GET", x->obj->name, code);
    if (code == 206) {
        if (!x->resp.has_cr || !x->resp.cr_total_known)
            return xf_stop(x, SL_E_IO, "%s: HTTP 206 without a Content-Range naming the size", x->obj->name);
        if (x->resp.cr_start != want)
            return xf_stop(x, SL_E_IO, "%s: asked for bytes from %" PRIu64 ", the server sent from %" PRIu64,
                           x->obj->name, want, x->resp.cr_start);
        if (check_identity(x, x->resp.cr_total) != 0 || check_range_end(x) != 0)
            return -1;
        if (x->resp.has_cl && x->resp.content_length != x->resp.cr_end - x->resp.cr_start + 1)
            return xf_stop(x, SL_E_IO, "%s: HTTP 206 of Content-Length %" PRIu64 " for Content-Range "
                           "bytes %" PRIu64 "-%" PRIu64 " (%" PRIu64 " bytes)", x->obj->name,
                           x->resp.content_length, x->resp.cr_start, x->resp.cr_end,
                           x->resp.cr_end - x->resp.cr_start + 1);
        return 0;
    }
    /* 200: the whole object, acceptable only when the range was all of it */
    if (code == 200 && want == 0 && x->resp.has_cl && x->resp.content_length == x->len)
        return check_identity(x, x->resp.content_length);
    return xf_stop(x, SL_E_IO, "%s: HTTP %ld to a Range request: the server does not serve byte ranges",
                   x->obj->name, code);
}

static size_t keep_error_body(sl_http_xfer *x, const char *p, size_t n)
{
    const size_t room = sizeof x->body - 1 - x->body_len;
    const size_t k = n < room ? n : room;
    memcpy(x->body + x->body_len, p, k);
    x->body_len += k;
    x->body[x->body_len] = '\0';
    return n;
}

static int grow(sl_http_xfer *x, size_t need)
{
    if (need < x->cap)   /* a byte spare for the NUL of sl_http_get_all */
        return 0;
    if (need > x->max)
        return xf_stop(x, SL_E_IO, "%s: larger than the %zu-byte limit", x->obj->name, x->max);
    size_t cap = x->cap ? x->cap : 4096;
    while (cap < need + 1)
        cap = cap > x->max / 2 ? x->max + 1 : 2 * cap;
    unsigned char *b = realloc(x->buf, cap);
    if (!b)
        return xf_stop(x, SL_E_NOMEM, "out of memory");
    x->buf = b;
    x->cap = cap;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *user)
{
    sl_http_xfer *x = user;
    const size_t n = size * nmemb;
    x->last_byte_ms = xf_now_ms();
    long code = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300)
        return keep_error_body(x, p, n);
    if (!x->checked) {
        x->checked = 1;
        if (check_response(x, code) != 0)
            return 0;   /* CURLE_WRITE_ERROR; fail_st says why */
    }
    if (x->whole ? grow(x, x->got + n) != 0 : n > x->got_until - x->got) {
        if (!x->fail_st && x->got_until < x->len)
            xf_stop(x, SL_E_IO, "%s: bytes %" PRIu64 "-%" PRIu64 ": the server sent more bytes than its "
                    "Content-Range (bytes %" PRIu64 "-%" PRIu64 ") holds", x->obj->name, x->off,
                    x->off + x->len - 1, x->resp.cr_start, x->resp.cr_end);
        else if (!x->fail_st)
            xf_stop(x, SL_E_IO, "%s: the server sent more bytes than the range %" PRIu64 "-%" PRIu64 " holds",
                    x->obj->name, x->off, x->off + x->len - 1);
        return 0;
    }
    memcpy(x->buf + x->got, p, n);
    x->got += n;
    return n;
}

/* A stall: no byte for the timeout. curl's own low-speed check (CURLOPT_LOW_SPEED_TIME) averages
 * over about 5 s and counts whole seconds, so a burst before a stall hid it for several seconds
 * more; curl calls this at least once a second while a transfer is idle. A stop asked for with
 * sl_cancel ends the transfer here too: a GET that waits on a server that sends nothing would
 * otherwise hold the stop for its timeout times its tries (minutes). */
/* A trickle: fewer bytes than XF_MIN_RATE over a whole timeout window. A server that sends a
 * byte every 200 ms never stalls, and held a 16 MiB range for weeks; 1 kB/s is far below any link
 * a checkpoint is loaded over, and a timeout's worth of it is what a live one sends first. */
#define XF_MIN_RATE 1000u   /* bytes per second */

static int trickling(sl_http_xfer *x, uint64_t now)
{
    if (now - x->window_ms < x->tune->timeout_ms)
        return 0;
    const uint64_t least = (uint64_t)x->tune->timeout_ms * XF_MIN_RATE / 1000u;
    if (x->got > x->window_got && x->got - x->window_got < least)
        return 1;   /* (no byte at all: a stall, which on_progress tells apart) */
    x->window_ms = now;
    x->window_got = x->got;
    return 0;
}

/* A laggard: a range far slower than the ranges its pool finished lately, long enough to tell.
 * Object stores serve the odd request from a slow node or over a congested path, and that one
 * range, trickling well above XF_MIN_RATE, held a whole load (the staging waits for it in order):
 * it is asked for again, from the first byte not received, on a new connection (AWS advises
 * retrying a store's slow requests). Judged against the pool's own finished ranges, so a link that
 * is slow for every range restarts none; at most XF_LAG_RESTARTS times a range, after which it is
 * left to the stall and trickle checks. XF_LAG_MIN_MS keeps a healthy range that a busy machine
 * delays for a moment from being taken for one. */
#define XF_LAG_RATIO 8.0    /* slower than the ranges' median speed by this */
#define XF_LAG_AGE 4.0      /* and older than this many times their median duration */
#define XF_LAG_MIN_MS 5000u /* and than this */
#define XF_LAG_RESTARTS 2

static double median(const double *v, unsigned n)
{
    double s[XF_PEER_SAMPLES];
    memcpy(s, v, n * sizeof *s);
    for (unsigned i = 1; i < n; i++)   /* insertion sort: 32 values at most */
        for (unsigned j = i; j > 0 && s[j - 1] > s[j]; j--) {
            const double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

void xf_peers_add(xf_peers *p, const sl_http_xfer *x, uint64_t now_ms)
{
    const size_t bytes = x->got - x->got_at_start;
    const double secs = (double)(now_ms - x->attempt_ms) / 1e3;
    if (x->head || bytes < XF_PEER_MIN_BYTES)
        return;   /* a small GET's time is its round trip, not the link's speed */
    const double s = secs > 1e-3 ? secs : 1e-3;
    p->bps[p->next] = (double)bytes / s;
    p->secs[p->next] = s;
    p->next = (p->next + 1) % XF_PEER_SAMPLES;
    p->n += p->n < XF_PEER_SAMPLES;
    if (p->n >= 4) {
        p->typical_bps = median(p->bps, p->n);
        p->typical_s = median(p->secs, p->n);
    }
}

static int lagging(const sl_http_xfer *x, uint64_t now)
{
    const xf_peers *p = x->peers;
    if (!p || p->typical_bps <= 0 || x->whole || x->head || x->lag_restarts >= XF_LAG_RESTARTS)
        return 0;
    const double age = (double)(now - x->attempt_ms) / 1e3;
    if (age * 1e3 < XF_LAG_MIN_MS || age < XF_LAG_AGE * p->typical_s)
        return 0;
    const double bps = (double)(x->got - x->got_at_start) / age;
    return bps * XF_LAG_RATIO < p->typical_bps;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    sl_http_xfer *x = user;
    const uint64_t now = xf_now_ms();
    x->cancelled = sl_cancel_requested();
    x->stalled = !x->cancelled && now - x->last_byte_ms > x->tune->timeout_ms;
    x->slow = !x->cancelled && !x->stalled && trickling(x, now);
    x->lagging = !x->cancelled && !x->stalled && !x->slow && lagging(x, now);
    return x->stalled || x->slow || x->cancelled || x->lagging;   /* non-zero: CURLE_ABORTED_BY_CALLBACK */
}

/* ---- an attempt ---- */

static sl_status add_header(sl_http_xfer *x, const char *h, sl_err *err)
{
    struct curl_slist *l = curl_slist_append(x->headers, h);
    SL_CHECK(l, err, SL_E_NOMEM, "out of memory");
    x->headers = l;
    return SL_OK;
}

/* SigV4 by libcurl (CURLOPT_AWS_SIGV4, which adds x-amz-date and signs the x-amz-* headers it is
 * given). S3 wants x-amz-content-sha256, which curl 7.88 does not send: the hash of the empty
 * body of a GET (without it moto and AWS answer SignatureDoesNotMatch). A session token goes in
 * x-amz-security-token. */
static sl_status sign(sl_http_xfer *x, CURL *h, sl_err *err)
{
    const sl_http_cfg *c = x->obj->cfg;
    if (!x->obj->s3 || !c || !c->access_key)
        return SL_OK;
    snprintf(x->sigv4, sizeof x->sigv4, "aws:amz:%s:s3", c->region);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, x->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, c->access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret_key);
    SL_TRY(add_header(x, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                      err));
    if (c->session_token) {
        char *line = malloc(strlen(c->session_token) + 32);
        SL_CHECK(line, err, SL_E_NOMEM, "out of memory");
        sprintf(line, "x-amz-security-token: %s", c->session_token);
        const sl_status st = add_header(x, line, err);
        free(line);
        return st;
    }
    return SL_OK;
}

sl_status xf_prepare(sl_http_xfer *x, CURL *h, sl_err *err)
{
    xf_release(x);
    x->h = h;
    x->got_at_start = x->got;
    x->checked = 0;
    sl_http_resp_clear(&x->resp);
    x->s3_code[0] = '\0';
    x->errbuf[0] = '\0';
    x->body_len = 0;
    x->body[0] = '\0';
    x->fail_st = SL_OK;
    x->stalled = 0;
    x->slow = 0;
    x->cancelled = 0;
    x->lagging = 0;
    x->last_byte_ms = x->attempt_ms = xf_now_ms();
    x->tries++;
    curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, x->fresh ? 1L : 0L);
    x->fresh = 0;
    if (x->whole)
        x->got = 0;   /* no Range: the whole body again */
    x->window_ms = x->last_byte_ms;
    x->window_got = x->got;
    curl_easy_setopt(h, CURLOPT_URL, x->obj->url);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, x->obj->s3 ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 8L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);   /* unset by xf_finish */
    if (x->head)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);   /* a handle that ran a HEAD GETs again */
    if (!x->whole && !x->head) {
        snprintf(x->range, sizeof x->range, "%" PRIu64 "-%" PRIu64, x->off + x->got, x->off + x->len - 1);
        curl_easy_setopt(h, CURLOPT_RANGE, x->range);
    } else {
        curl_easy_setopt(h, CURLOPT_RANGE, NULL);
    }
    /* S3 returns an object's checksum only when asked, and only to a request of the whole object */
    if (x->head && !x->probe)
        SL_TRY(add_header(x, "x-amz-checksum-mode: ENABLED", err));
    /* an object replaced between attempts answers 412 rather than other bytes; If-Match compares
     * strongly (RFC 9110 13.1.1), so a weak ETag ("W/...") would never match: such a tag is only
     * compared with each response's (check_identity) */
    if (x->obj->etag && strncmp(x->obj->etag, "W/", 2) != 0 && !x->whole) {
        char line[300];
        snprintf(line, sizeof line, "If-Match: %s", x->obj->etag);
        SL_TRY(add_header(x, line, err));
    }
    SL_TRY(sign(x, h, err));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers);
    return SL_OK;
}

/* ---- what an attempt's end means ---- */

static int retryable_curl(CURLcode rc)
{
    /* (a reply curl cannot parse is often the bytes a broken response left on a kept-alive
     * connection: another connection may well succeed; xf_finish adds the "HTTP/0.9" one) */
    static const CURLcode again[] = {CURLE_COULDNT_CONNECT, CURLE_RECV_ERROR, CURLE_SEND_ERROR,
                                     CURLE_PARTIAL_FILE, CURLE_OPERATION_TIMEDOUT, CURLE_GOT_NOTHING,
                                     CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_SSL_CONNECT_ERROR,
                                     CURLE_COULDNT_RESOLVE_HOST, CURLE_HTTP3, CURLE_WEIRD_SERVER_REPLY};
    for (size_t i = 0; i < sizeof again / sizeof again[0]; i++)
        if (rc == again[i])
            return 1;
    return 0;
}

static void range_text(const sl_http_xfer *x, char *buf, size_t n)
{
    if (x->whole || x->head)
        snprintf(buf, n, x->head ? "HEAD" : "GET");
    else
        snprintf(buf, n, "bytes %" PRIu64 "-%" PRIu64, x->off, x->off + x->len - 1);
}

sl_status xf_cancelled(const sl_http_xfer *x, sl_err *err)
{
    char r[64];
    range_text(x, r, sizeof r);
    return sl_err_set(err, SL_E_CANCELLED, "%s: cancelled while reading %s%s", x->obj->name,
                      x->whole || x->head ? "its " : "", r);
}

static int xf_retry(sl_http_xfer *x, sl_err *err)
{
    char r[64];
    if (x->got > x->got_at_start)
        x->failures = 0;   /* progress: a server that resets every few MB still finishes */
    x->failures++;
    if (x->failures > x->tune->retries) {
        range_text(x, r, sizeof r);
        sl_err_set(err, SL_E_IO, "%s: %s: %s (gave up after %d tries)", x->obj->name, r, x->last_reason, x->tries);
        return XF_FAIL;
    }
    const unsigned shift = x->failures - 1 < 6 ? (unsigned)x->failures - 1 : 6u;
    uint64_t delay = (uint64_t)x->tune->backoff_ms << shift;
    delay = delay / 2 + (uint64_t)rand() % (delay / 2 + 1);   /* jitter: ranges do not retry in step */
    if (x->resp.retry_after_s > 0) {
        const uint64_t ra = (uint64_t)x->resp.retry_after_s * 1000u;
        delay = ra > delay ? (ra < x->tune->timeout_ms ? ra : x->tune->timeout_ms) : delay;
    }
    x->not_before_ms = xf_now_ms() + delay;
    return XF_RETRY;
}

/* A laggard again at once, on a new connection; not a failure: it was moving. */
static int xf_lag_restart(sl_http_xfer *x)
{
    const uint64_t now = xf_now_ms();
    const double secs = (double)(now - x->attempt_ms) / 1e3;
    snprintf(x->last_reason, sizeof x->last_reason, "%.2f MB/s over %.1f s, against %.1f MB/s for the "
             "ranges that finished", (double)(x->got - x->got_at_start) / secs / 1e6, secs,
             x->peers->typical_bps / 1e6);
    x->lag_restarts++;
    x->fresh = 1;
    x->not_before_ms = now;
    return XF_RETRY;
}

/* A HEAD's answer must describe the object the open saw: its size, ETag and Last-Modified. */
static int xf_head_done(sl_http_xfer *x, sl_err *err)
{
    if (check_identity(x, x->resp.has_cl ? x->resp.content_length : x->obj->size) != 0) {
        sl_err_set(err, x->fail_st, "%s", x->fail_msg);
        return XF_FAIL;
    }
    return XF_DONE;
}

static int tls_failure(CURLcode rc)
{
    return rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_CERTPROBLEM ||
           rc == CURLE_SSL_ISSUER_ERROR || rc == CURLE_SSL_PINNEDPUBKEYNOTMATCH || rc == CURLE_SSL_INVALIDCERTSTATUS;
}

/* Not retried: every try meets the same certificate. curl's error buffer says what is wrong with it. */
static int xf_tls_fail(sl_http_xfer *x, CURLcode rc, sl_err *err)
{
    const char *why = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
    if (rc == CURLE_PEER_FAILED_VERIFICATION)
        sl_err_set(err, SL_E_IO, "%s: TLS certificate not trusted (%s): give the CA that signed it as the CA "
                   "bundle (sl_load_opts.ca_bundle, --ca-bundle FILE)", x->obj->name, why);
    else
        sl_err_set(err, SL_E_IO, "%s: TLS: %s", x->obj->name, why);
    return XF_FAIL;
}

int xf_finish(sl_http_xfer *x, CURLcode rc, sl_err *err)
{
    long code = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, NULL);   /* x may go before the handle does */
    if (x->fail_st != SL_OK) {
        sl_err_set(err, x->fail_st, "%s", x->fail_msg);
        return XF_FAIL;
    }
    if (x->probe && rc == CURLE_OK)
        return XF_DONE;   /* S3 names the bucket's region to a HeadBucket refused too (301, 400, 403) */
    if (x->head && rc == CURLE_OK && code >= 200 && code < 300)
        return xf_head_done(x, err);
    if (tls_failure(rc))
        return xf_tls_fail(x, rc, err);
    if (!x->whole && x->checked && x->got == x->len)
        return XF_DONE;   /* every byte came, checked, whatever ended the connection after them */
    if (rc == CURLE_OK && (code == 429 || (code >= 500 && code <= 599 && code != 501 && code != 505))) {
        snprintf(x->last_reason, sizeof x->last_reason, "HTTP %ld", code);
        return xf_retry(x, err);
    }
    if (rc == CURLE_OK && (code < 200 || code >= 300))
        return xf_http_fail(x, code, err);
    if (rc == CURLE_ABORTED_BY_CALLBACK && x->cancelled) {
        xf_cancelled(x, err);
        return XF_FAIL;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK && x->stalled) {
        snprintf(x->last_reason, sizeof x->last_reason, "no byte for %u ms", x->tune->timeout_ms);
        return xf_retry(x, err);
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK && x->lagging)
        return xf_lag_restart(x);
    if (rc == CURLE_ABORTED_BY_CALLBACK && x->slow) {
        snprintf(x->last_reason, sizeof x->last_reason, "under %u bytes/s for %u ms", XF_MIN_RATE,
                 x->tune->timeout_ms);
        x->got_at_start = x->got;   /* a trickle is no progress: its tries count (xf_retry) */
        return xf_retry(x, err);
    }
    /* curl's error buffer says more than its code's text ("Received HTTP/0.9 when not allowed"
     * for "Unsupported protocol") */
    const char *why = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
    /* CURLE_UNSUPPORTED_PROTOCOL is also a redirect to a scheme curl may not follow (permanent):
     * only its "HTTP/0.9" reply, a stray byte read as a status line, is tried again */
    const int junk = rc == CURLE_UNSUPPORTED_PROTOCOL && strstr(x->errbuf, "HTTP/0.9") != NULL;
    if (rc != CURLE_OK && (retryable_curl(rc) || junk)) {
        snprintf(x->last_reason, sizeof x->last_reason, "%.150s", why);
        return xf_retry(x, err);
    }
    if (rc != CURLE_OK) {
        sl_err_set(err, SL_E_IO, "%s: %s", x->obj->name, why);
        return XF_FAIL;
    }
    if (x->whole || x->got == x->len)
        return XF_DONE;
    snprintf(x->last_reason, sizeof x->last_reason, "response ended %zu bytes short", x->len - x->got);
    return xf_retry(x, err);
}

/* ---- the store's checksum ---- */

int xf_whole_sha256(const sl_http_xfer *x, char hex[65])
{
    const char *etag = x->resp.etag[0] ? x->resp.etag : x->obj->etag;
    return sl_http_whole_sha256(&x->resp, etag, hex);
}
