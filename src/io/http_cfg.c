/* http_cfg.c - remote settings and names (http.h). No libcurl here: a build without it still parses
 * URLs, so that its message can say which feature is missing rather than "no such file". */
#include "io/http.h"
#include "common/sl_text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int sl_http_is_url(const char *path)
{
    return path && (!strncasecmp(path, "http://", 7) || !strncasecmp(path, "https://", 8) ||
                    !strncasecmp(path, "s3://", 5));
}

static int is_s3(const char *u)
{
    return !strncasecmp(u, "s3://", 5);
}

size_t sl_http_path_len(const char *u)
{
    const int http = !strncasecmp(u, "http://", 7) || !strncasecmp(u, "https://", 8);
    return http ? strcspn(u, "?#") : strlen(u);
}

static unsigned pick_u(int32_t v, unsigned dflt)
{
    return v > 0 ? (unsigned)v : dflt;
}

void sl_http_tune_from(sl_http_tune *t, const sl_load_opts *o)
{
    *t = (sl_http_tune){.connections = SL_HTTP_DEFAULT_CONNECTIONS, .range_bytes = SL_HTTP_DEFAULT_RANGE,
                        .retries = SL_HTTP_DEFAULT_RETRIES, .backoff_ms = SL_HTTP_DEFAULT_BACKOFF_MS,
                        .timeout_ms = SL_HTTP_DEFAULT_TIMEOUT_MS};
    if (!o)
        return;
    t->connections = pick_u(o->remote_connections, t->connections);
    if (t->connections > SL_HTTP_MAX_CONNECTIONS)
        t->connections = SL_HTTP_MAX_CONNECTIONS;
    if (o->remote_range_bytes)
        t->range_bytes = o->remote_range_bytes < SL_HTTP_MIN_RANGE ? SL_HTTP_MIN_RANGE : o->remote_range_bytes;
    t->retries = o->remote_retries < 0 ? 0 : o->remote_retries > 0 ? o->remote_retries : t->retries;
    t->backoff_ms = pick_u(o->remote_backoff_ms, t->backoff_ms);
    t->timeout_ms = pick_u(o->remote_timeout_ms, t->timeout_ms);
}

static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (!src || !*src)
        return 0;
    return (*dst = strdup(src)) ? 0 : -1;
}

/* "scheme://host[:port]" with an optional trailing '/'; kept without the '/'. */
static sl_status endpoint_check(char *ep, sl_err *err)
{
    SL_CHECK(!strncasecmp(ep, "http://", 7) || !strncasecmp(ep, "https://", 8), err, SL_E_INVALID_ARG,
             "S3 endpoint '%s': expected http://HOST[:PORT] or https://HOST[:PORT]", ep);
    size_t n = strlen(ep);
    while (n > 0 && ep[n - 1] == '/')
        ep[--n] = '\0';
    const char *host = strstr(ep, "://") + 3;
    SL_CHECK(*host && !strchr(host, '/') && !strchr(host, '@') && !strchr(host, '?'), err, SL_E_INVALID_ARG,
             "S3 endpoint '%s': expected a scheme and a host, no path, user or query", ep);
    return SL_OK;
}

/* A credential or the region goes into a request's headers (x-amz-security-token, SigV4's
 * Authorization) and the region into curl's "aws:amz:REGION:s3": a CR or LF would end the header
 * and start another, a ':' would change what curl signs. The message names the setting and the
 * byte's place, never the value (it may be a secret). */
static sl_status setting_check(const char *what, const char *v, int region, sl_err *err)
{
    for (size_t i = 0; v && v[i]; i++) {
        const unsigned char ch = (unsigned char)v[i];
        const int ok = region ? sl_text_ascii_alnum(ch) || ch == '-' || ch == '_' || ch == '.'
                              : ch >= 0x20 && ch != 0x7f;
        SL_CHECK(ok, err, SL_E_INVALID_ARG, "%s: byte %zu (0x%02x) is not allowed %s", what, i, ch,
                 region ? "(a region is letters, digits, '-', '_' and '.')" : "(a control character: the "
                 "setting goes into an HTTP header)");
    }
    return SL_OK;   /* empty ones were dropped (dup_opt): the defaults apply */
}

/* Longer than any region, and an AWS host name made of one would be cut (s3_url's buffer). */
#define REGION_MAX 63

static sl_status settings_check(const sl_http_cfg *c, sl_err *err)
{
    SL_TRY(setting_check("S3 region", c->region, 1, err));
    SL_CHECK(strlen(c->region) <= REGION_MAX, err, SL_E_INVALID_ARG,
             "S3 region: %zu bytes, more than the %d a region name (a DNS label) can have",
             strlen(c->region), REGION_MAX);
    SL_TRY(setting_check("S3 access key", c->access_key, 0, err));
    SL_TRY(setting_check("S3 secret key", c->secret_key, 0, err));
    return setting_check("S3 session token", c->session_token, 0, err);
}

sl_status sl_http_cfg_init(sl_http_cfg *c, const sl_load_opts *o, sl_err *err)
{
    static const pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;   /* nothing to destroy */
    *c = (sl_http_cfg){0};
    c->conn_lock = unlocked;
    sl_http_tune_from(&c->tune, o);
    int bad = dup_opt(&c->region, o ? o->s3_region : NULL);
    if (!bad && !c->region)
        bad = (c->region = strdup("us-east-1")) == NULL;
    if (o && !bad)
        bad = dup_opt(&c->endpoint, o->s3_endpoint) || dup_opt(&c->access_key, o->s3_access_key) ||
              dup_opt(&c->secret_key, o->s3_secret_key) || dup_opt(&c->session_token, o->s3_session_token) ||
              dup_opt(&c->ca_bundle, o->ca_bundle);
    if (bad)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    /* checked here: curl would only say "problem with the SSL CA cert" at the first https GET */
    SL_CHECK(!c->ca_bundle || access(c->ca_bundle, R_OK) == 0, err, SL_E_INVALID_ARG,
             "CA bundle '%s': cannot read it: %s", c->ca_bundle, strerror(errno));
    c->tune.ca_bundle = c->ca_bundle;
    c->addressing = o ? o->s3_addressing : 0;
    SL_CHECK(c->addressing >= 0 && c->addressing <= 2, err, SL_E_INVALID_ARG,
             "s3_addressing %d: expected 0 (auto), 1 (path-style) or 2 (virtual-host)", (int)c->addressing);
    SL_CHECK(!c->access_key == !c->secret_key, err, SL_E_INVALID_ARG,
             "S3 credentials: an access key needs its secret key and the other way round");
    SL_TRY(settings_check(c, err));
    return c->endpoint ? endpoint_check(c->endpoint, err) : SL_OK;
}

void sl_http_cfg_free(sl_http_cfg *c)
{
    if (!c)
        return;
    sl_http_conn_free(c->conn);
    free(c->endpoint);
    free(c->region);
    free(c->access_key);
    free(c->secret_key);
    free(c->session_token);
    free(c->ca_bundle);
    *c = (sl_http_cfg){0};
}

char *sl_http_join(const char *base, const char *rel)
{
    const size_t path = sl_http_path_len(base);
    const char *query = base + path;   /* a SAS token: the same for every object under it */
    size_t bl = path;
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    while (*rel == '/')
        rel++;
    const size_t n = bl + 1 + strlen(rel) + strlen(query) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%.*s/%s%s", (int)bl, base, rel, query);
    return p;
}

char *sl_http_join_name(const char *base, const char *name)
{
    if (is_s3(base))
        return sl_http_join(base, name);
    char *enc = malloc(3 * strlen(name) + 1);
    if (!enc)
        return NULL;
    sl_http_pct_encode(enc, name, 1);
    char *u = sl_http_join(base, enc);
    free(enc);
    return u;
}

void sl_http_pct_encode(char *dst, const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *k = (const unsigned char *)s; *k; k++) {
        if (sl_text_ascii_alnum(*k) || *k == '-' || *k == '_' || *k == '.' || *k == '~' ||
            (keep_slash && *k == '/')) {
            *dst++ = (char)*k;
        } else {
            *dst++ = '%';
            *dst++ = hex[*k >> 4];
            *dst++ = hex[*k & 15];
        }
    }
    *dst = '\0';
}

static int bucket_ok(const char *b, size_t n)
{
    if (n < 1 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!sl_text_ascii_alnum((unsigned char)b[i]) && b[i] != '-' && b[i] != '.' && b[i] != '_')
            return 0;
    return 1;
}

/* Whether bucket b (n bytes) can lead a host name (BUCKET.s3.REGION.amazonaws.com): 3 to 63 bytes
 * of labels of lowercase letters, digits and '-' that start and end with a letter or digit, as
 * botocore's check_dns_name has it. A legacy bucket (us-east-1 once took upper case and '_') is
 * not one: host names are case-insensitive (My_Bucket would reach my_bucket, or no host at all).
 * Dots only where dotted is 1: automatic addressing punts on them, as botocore does, since the
 * wildcard certificate *.s3.REGION.amazonaws.com covers one label. */
static int bucket_is_dns(const char *b, size_t n, int dotted)
{
    if (n < 3 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const int first = i == 0 || b[i - 1] == '.', last = i + 1 == n || b[i + 1] == '.';
        const char ch = b[i];
        if (ch == '.' ? !dotted || first || last
                      : !((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (ch == '-' && !first && !last)))
            return 0;
    }
    return 1;
}

/* scheme and host of an endpoint ("http", "127.0.0.1:9000") */
static void split_endpoint(const char *ep, char *scheme, size_t sl, const char **host)
{
    const char *sep = strstr(ep, "://");
    snprintf(scheme, sl, "%.*s", (int)(sep - ep), ep);
    *host = sep + 3;
}

/* The request URL of s3://bucket/key: path-style under an endpoint unless virtual-host is asked
 * for; on AWS virtual-host unless path-style is asked for or the bucket is no single DNS label
 * (bucket_is_dns). Virtual-host asked for a bucket that no host name can carry is an error. */
static sl_status s3_url(sl_http_obj *o, const sl_http_cfg *c, const char *rest, sl_err *err)
{
    const char *slash = strchr(rest, '/');
    const size_t bl = slash ? (size_t)(slash - rest) : strlen(rest);
    SL_CHECK(bucket_ok(rest, bl), err, SL_E_INVALID_ARG,
             "%s: expected s3://BUCKET/KEY with a bucket of letters, digits, '.', '-' or '_'", o->name);
    const char *key = slash ? slash + 1 : "";
    char scheme[16] = "https";
    const char *host = NULL;
    char aws_host[128];
    if (c->endpoint) {
        split_endpoint(c->endpoint, scheme, sizeof scheme, &host);
    } else {
        /* the China regions are a partition of their own, under another domain */
        snprintf(aws_host, sizeof aws_host, "s3.%s.amazonaws.com%s", c->region,
                 strncmp(c->region, "cn-", 3) == 0 ? ".cn" : "");
        host = aws_host;
    }
    SL_CHECK(c->addressing != 2 || bucket_is_dns(rest, bl, 1), err, SL_E_INVALID_ARG,
             "%s: bucket '%.*s' cannot be addressed virtual-host style (a host name: 3 to 63 lowercase "
             "letters, digits, '-' and '.'); use path-style (s3_addressing 1, --s3-path-style)", o->name,
             (int)bl, rest);
    const int virt = c->addressing == 2 || (c->addressing == 0 && !c->endpoint && bucket_is_dns(rest, bl, 0));
    const size_t n = strlen(scheme) + strlen(host) + bl + 3 * strlen(key) + 16;
    char *k = malloc(3 * strlen(key) + 1);
    o->url = malloc(n);
    if (!k || !o->url) {
        free(k);
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    sl_http_pct_encode(k, key, 1);   /* SigV4's canonical URI: curl signs the path it is given */
    if (virt)
        snprintf(o->url, n, "%s://%.*s.%s/%s", scheme, (int)bl, rest, host, k);
    else
        snprintf(o->url, n, "%s://%s/%.*s/%s", scheme, host, (int)bl, rest, k);
    free(k);
    o->s3 = 1;
    return SL_OK;
}

/* The name without "user:password@" and without an http(s) query (a SAS token's signature): both
 * are credentials, and curl still sends them (Basic authentication, the query). */
static char *display_name(const char *u)
{
    const char *host = strstr(u, "://") + 3;
    const char *end = host + strcspn(host, "/?#");
    const char *at = memchr(host, '@', (size_t)(end - host));
    const char *rest = at ? at + 1 : host;
    const size_t scheme = (size_t)(host - u), tail = sl_http_path_len(u) - (size_t)(rest - u);
    char *s = malloc(scheme + tail + 1);
    if (s)
        snprintf(s, scheme + tail + 1, "%.*s%.*s", (int)scheme, u, (int)tail, rest);
    return s;
}

sl_status sl_http_obj_init_named(sl_http_obj *o, sl_http_cfg *c, const char *url, const char *display,
                                 sl_err *err)
{
    *o = (sl_http_obj){.cfg = c};
    SL_CHECK(sl_http_is_url(url), err, SL_E_INVALID_ARG, "%s: not an http://, https:// or s3:// URL",
             display ? display : url);
    o->name = display ? strdup(display) : display_name(url);
    SL_CHECK(o->name, err, SL_E_NOMEM, "out of memory");
    if (is_s3(url))
        return s3_url(o, c, url + 5, err);
    const char *host = strstr(o->name, "://");   /* without a user: "http://u@/x" has no host */
    SL_CHECK(host && host[3] && host[3] != '/', err, SL_E_INVALID_ARG, "%s: no host in the URL", o->name);
    o->url = strdup(url);
    SL_CHECK(o->url, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

sl_status sl_http_obj_init(sl_http_obj *o, sl_http_cfg *c, const char *name, sl_err *err)
{
    return sl_http_obj_init_named(o, c, name, NULL, err);
}

void sl_http_obj_free(sl_http_obj *o)
{
    if (!o)
        return;
    free(o->name);
    free(o->url);
    free(o->etag);
    free(o->last_modified);
    *o = (sl_http_obj){0};
}
