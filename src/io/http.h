/* http.h - remote checkpoint sources over HTTP(S) and S3 (docs/remote.md): the settings, the
 * objects a checkpoint names, small blocking GETs for headers, indexes and configs, S3 listing,
 * and the multi-connection I/O engine that serves sl_io_reqs naming an object (io_http.c).
 *
 *   http_cfg.c    settings from sl_load_opts, URL parsing (s3://bucket/key -> the request URL,
 *                 path-style or virtual-host), names for messages (never with credentials)
 *   http_xfer.c   one ranged GET on a curl handle: set-up, response checks (206 and Content-Range,
 *                 ETag, Last-Modified, size), what a failure means (retry, changed, fatal), backoff
 *   http_fail.c   what an HTTP status that ends a GET means, S3's wrong-region answers among them
 *   http_get.c    the blocking GETs of the checkpoint open, S3 ListObjectsV2
 *   http_parse.c  what the servers send back (headers, S3 error codes, listing pages), parsed
 *                 without a connection: built with or without libcurl, fuzzed
 *   http_many.c   many of them at once (every file's length, then every header)
 *   io_http.c     the engine: curl multi, keep-alive connections, ranges resumed after a failure
 *   http_none.c   the same entry points without libcurl: SL_E_UNSUPPORTED
 *
 * The library reads no environment: credentials, region and endpoint come from sl_load_opts (the
 * CLI and the Python package read AWS_* and ~/.aws/credentials). libcurl alone reads its proxy
 * variables (http_proxy, https_proxy, ALL_PROXY, NO_PROXY), on purpose: a cluster behind a proxy
 * loads with the settings its other tools use (docs/remote.md). */
#ifndef SL_IO_HTTP_H
#define SL_IO_HTTP_H

#include "io/io.h"

#include <pthread.h>
#include <stdint.h>

#define SL_HTTP_DEFAULT_CONNECTIONS 16u
#define SL_HTTP_MAX_CONNECTIONS 256u
#define SL_HTTP_DEFAULT_RANGE ((uint64_t)8 << 20)
#define SL_HTTP_MIN_RANGE ((uint64_t)4 << 10)
#define SL_HTTP_DEFAULT_RETRIES 5
#define SL_HTTP_DEFAULT_BACKOFF_MS 200u
#define SL_HTTP_DEFAULT_TIMEOUT_MS 30000u

/* How transfers behave: from the options of the open, and those of the load where they set them. */
typedef struct sl_http_tune {
    unsigned connections;   /* most GETs in flight */
    uint64_t range_bytes;   /* most bytes per GET */
    int retries;            /* failed attempts in a row (without a byte of progress) retried */
    unsigned backoff_ms;    /* first wait; doubles per failure up to 64x, each with jitter */
    unsigned timeout_ms;    /* connect timeout, and a transfer with no byte for this long fails */
    const char *ca_bundle;  /* https: the PEM file of the CAs trusted instead of curl's default
                               bundle (CURLOPT_CAINFO); NULL: the default. Borrowed from the cfg */
} sl_http_tune;

/* The settings a remote checkpoint was opened with (owned strings). */
typedef struct sl_http_cfg {
    char *endpoint;         /* S3 endpoint "scheme://host[:port]" without a trailing '/'; NULL: AWS */
    char *region;           /* never NULL */
    char *access_key, *secret_key, *session_token;   /* NULL: unsigned requests */
    int addressing;         /* sl_load_opts.s3_addressing */
    char *ca_bundle;        /* sl_load_opts.ca_bundle; tune.ca_bundle points here */
    sl_http_tune tune;
    void *conn;             /* the blocking GETs' curl handle, kept for keep-alive (http_get.c) */
    pthread_mutex_t conn_lock;   /* one blocking GET on conn at a time: sl_checkpoint_read and
                                    _fetch may be called from several threads (Python's) */
    int note_region;        /* set while the checkpoint opens, when only the opener's thread
                               uses the cfg: an answer that the bucket is in another region
                               records the region S3 named in bucket_region (ckpt_remote.c) */
    char bucket_region[32];
    int region_unnamed;     /* with note_region: S3 answered that the bucket is in another region
                               without naming it (a HeadBucket may, sl_http_bucket_region) */
} sl_http_cfg;

/* One remote file. name is what messages show (s3://bucket/key, or the http URL without a user or
 * password); url is what is requested. size, etag and last_modified are what the first GET saw;
 * every later response must agree, else SL_E_CHANGED. */
typedef struct sl_http_obj {
    sl_http_cfg *cfg;
    char *name;
    char *url;
    int s3;                 /* signed with SigV4 when the cfg has keys */
    uint64_t size;
    int size_known;
    char *etag;             /* NULL: the server gave none */
    char *last_modified;
} sl_http_obj;

/* 1 for "http://", "https://" and "s3://" (any case of the scheme). */
int sl_http_is_url(const char *path);
/* Tuning from o (NULL: defaults), every 0 field a default. */
void sl_http_tune_from(sl_http_tune *t, const sl_load_opts *o);
/* Copies o's remote fields; SL_E_INVALID_ARG for a malformed endpoint or a CA bundle that cannot
 * be read. */
sl_status sl_http_cfg_init(sl_http_cfg *c, const sl_load_opts *o, sl_err *err);
void sl_http_cfg_free(sl_http_cfg *c);

/* The length of u up to an http(s) URL's query or fragment ('?', '#'); all of it for anything
 * else (an s3:// key may hold '?'). */
size_t sl_http_path_len(const char *u);
/* base (a directory or file URL as the user wrote it) + "/" + rel, normalised to one '/', before
 * base's query if it has one (http(s)). NULL when out of memory. */
char *sl_http_join(const char *base, const char *rel);
/* base + "/" + name, where name is a file's name (from an index or a listing, or "config.json"),
 * not a URL: for http(s) it is percent-encoded first (a ' ', '#', '?' or '%' in it is part of the
 * name; sent raw, curl would reject it or the server would read another file), '/' kept; for s3://
 * it stays raw, as the key is encoded when the request URL is made (sl_http_obj_init). NULL when out
 * of memory. */
char *sl_http_join_name(const char *base, const char *name);
/* s percent-encoded into dst (room for 3 * strlen(s) + 1): every byte but the unreserved ones
 * (ASCII letters and digits, - _ . ~), and '/' when keep_slash (an S3 key in a path; a query
 * value encodes it), as SigV4's canonical forms have them. */
void sl_http_pct_encode(char *dst, const char *s, int keep_slash);
/* Fills o for the user-form URL `name` (checked: scheme, host, bucket). */
sl_status sl_http_obj_init(sl_http_obj *o, sl_http_cfg *c, const char *name, sl_err *err);
/* The same with what messages call it given (display: no credentials, nor a query; a file's name
 * as the index writes it, not encoded); NULL: made from url as sl_http_obj_init does. */
sl_status sl_http_obj_init_named(sl_http_obj *o, sl_http_cfg *c, const char *url, const char *display,
                                 sl_err *err);
void sl_http_obj_free(sl_http_obj *o);

/* Frees cfg->conn (http_get.c, or http_none.c without libcurl). */
void sl_http_conn_free(void *conn);

/* Blocking ranged GET of [off, off + len) into buf, with the retries of c->tune. The first GET of
 * an object (size_known 0) records its size, ETag and Last-Modified; later ones must match them.
 * A range past the end is SL_E_CHANGED once the size is known. */
sl_status sl_http_get_range(sl_http_obj *o, uint64_t off, size_t len, void *buf, sl_err *err);
/* One range of sl_http_get_many. */
typedef struct sl_http_range {
    sl_http_obj *obj;
    uint64_t off;
    size_t len;             /* 0: skipped */
    void *buf;
} sl_http_range;

/* The n ranges at once (http_many.c), each as sl_http_get_range would fetch it, up to the first
 * object's tune.connections in flight; the first failure is returned. */
sl_status sl_http_get_many(const sl_http_range *r, size_t n, sl_err *err);
/* The store's SHA-256 of each object, for --verify: a HEAD of every S3 object with
 * x-amz-checksum-mode: ENABLED (a ranged GET never carries the checksum), all at once. hex[i] is
 * x-amz-checksum-sha256 in lowercase hex, or "" where the store has none of the whole object: none
 * stored, another algorithm, a multipart upload's composite checksum (the hash of its parts'
 * hashes). objs[i] NULL or not S3: "", no request. An object whose size, ETag or Last-Modified
 * differ from the open's is SL_E_CHANGED, 403/404 as for a GET. */
sl_status sl_http_stored_sha256(const sl_http_obj *const *objs, size_t n, char (*hex)[65], sl_err *err);
/* Blocking GET of a whole object of at most max bytes into *buf (NUL-terminated, free() it).
 * SL_E_NOT_FOUND when the server answers 404 (the caller decides what a missing index means). */
sl_status sl_http_get_all(sl_http_cfg *c, const char *name, size_t max, char **buf, size_t *len,
                          sl_err *err);
/* The region S3 names for the bucket of the s3:// URL url, asked with a HeadBucket (a HEAD of the
 * bucket, signed as every request of c) whatever its status: S3 sends x-amz-bucket-region with a
 * 301, 400 or 403 too. region is "" when the answer names none (or url is no s3:// URL); the
 * request's own failure (no connection) is its error. */
sl_status sl_http_bucket_region(sl_http_cfg *c, const char *url, char *region, size_t n, sl_err *err);
/* The *.safetensors objects directly under the S3 prefix `dir` (s3://bucket/prefix/), sorted, as
 * names relative to it (free each and the array). SL_E_UNSUPPORTED for http(s) URLs. Messages
 * name `name` (dir without credentials). */
sl_status sl_http_list(sl_http_cfg *c, const char *dir, const char *name, char ***names, size_t *n,
                       sl_err *err);

/* The engine over curl multi: requests name req->obj (fd unused); at most `depth` requests in
 * flight, each cut into ranges of tune->range_bytes, tune->connections GETs at once. A failed
 * range fails wait() with a message naming the object (SL_E_CHANGED, SL_E_NOT_FOUND, SL_E_IO). */
sl_status sl_io_http_open(const sl_http_tune *tune, unsigned depth, sl_io *out, sl_err *err);

#endif /* SL_IO_HTTP_H */
