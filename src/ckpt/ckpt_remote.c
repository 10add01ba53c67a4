/* ckpt_remote.c - sl_checkpoint_open_opts for http://, https:// and s3:// (docs/remote.md). A remote
 * file looks to the planner like a local one: its size comes from the first ranged GET's
 * Content-Range, its header from two small GETs (the 8-byte length, then the header), validated
 * by the same rules as a file's; an index is fetched whole. Without an index an S3 prefix is
 * listed; an HTTP directory cannot be, and says so. Each file keeps its object (size, ETag,
 * Last-Modified as first seen), which the loader's engine requests and checks against. */
#include "ckpt/ckpt_merge.h"
#include "io/http.h"
#include "common/sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CK_MAX_FETCH ((size_t)16 << 20)   /* config.json and friends are a few KB */

const struct sl_http_obj *ck_file_remote(const sl_checkpoint *ck, int64_t file)
{
    return ck && file >= 0 && (uint64_t)file < ck->n_files ? ck->files[file].remote : NULL;
}

void ck_remote_free(sl_checkpoint *ck)
{
    for (size_t f = 0; f < ck->n_files; f++) {
        sl_http_obj_free(ck->files[f].remote);
        free(ck->files[f].remote);
        ck->files[f].remote = NULL;
    }
    sl_http_cfg_free(ck->remote_cfg);
    free(ck->remote_cfg);
    free(ck->remote_base);
    ck->remote_cfg = NULL;
    ck->remote_base = NULL;
}

/* Whether the URL names a .safetensors file: its path does, whatever its query says. */
static int names_file(const char *url)
{
    return st_has_suffix(url, sl_http_path_len(url));
}

/* The file at url, called `name` in messages (NULL: url without credentials or query). */
static sl_status ck_add_remote(sl_checkpoint *ck, const char *url, const char *name)
{
    if (ck->n_files == ck->cap_files) {
        const size_t cap = ck->cap_files ? 2 * ck->cap_files : 8;
        ck_file *nf = realloc(ck->files, cap * sizeof(*nf));
        SL_CHECK(nf, &ck->err, SL_E_NOMEM, "out of memory");
        ck->files = nf;
        ck->cap_files = cap;
    }
    ck_file *f = &ck->files[ck->n_files];
    memset(f, 0, sizeof *f);
    f->rank = -1;
    f->remote = calloc(1, sizeof *f->remote);
    SL_CHECK(f->remote, &ck->err, SL_E_NOMEM, "out of memory");
    ck->n_files++;   /* counted now: close frees what is in it */
    SL_TRY(sl_http_obj_init_named(f->remote, ck->remote_cfg, url, name, &ck->err));
    f->path = strdup(f->remote->name);
    SL_CHECK(f->path, &ck->err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

/* Every file's 8-byte length, then every header, many GETs at once (http_many.c): the size of a
 * file is known after its first GET. Messages read "<url>: <what is wrong>". */
static sl_status ck_remote_headers(sl_checkpoint *ck, sl_http_range *r, unsigned char *first8,
                                   unsigned char **hdr)
{
    const size_t n = ck->n_files;
    for (size_t f = 0; f < n; f++)
        r[f] = (sl_http_range){.obj = ck->files[f].remote, .off = 0, .len = 8, .buf = first8 + 8 * f};
    SL_TRY(sl_http_get_many(r, n, &ck->err));
    for (size_t f = 0; f < n; f++) {
        ck_file *cf = &ck->files[f];
        uint64_t hn = 0;
        cf->size = cf->remote->size;
        if (st_prefix_check(first8 + 8 * f, cf->size, &hn, &ck->err) != SL_OK)
            return sl_err_prefix(&ck->err, cf->path);
        hdr[f] = malloc(hn ? (size_t)hn : 1);
        SL_CHECK(hdr[f], &ck->err, SL_E_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header", cf->path, hn);
        r[f] = (sl_http_range){.obj = cf->remote, .off = 8, .len = (size_t)hn, .buf = hdr[f]};
    }
    SL_TRY(sl_http_get_many(r, n, &ck->err));
    for (size_t f = 0; f < n; f++) {
        ck_file *cf = &ck->files[f];
        if (st_header_parse(hdr[f], r[f].len, cf->size, &cf->h, &ck->err) != SL_OK)
            return sl_err_prefix(&ck->err, cf->path);
    }
    return SL_OK;
}

/* An object is known by its size, ETag and Last-Modified (http_xfer.c): from a server that sends
 * neither of the last two, a rewrite of the same size during the load cannot be told apart. Said
 * once, with how many files it concerns. */
static void ck_check_validators(sl_checkpoint *ck)
{
    size_t bare = 0, first = 0;
    for (size_t f = ck->n_files; f-- > 0;) {
        if (!ck->files[f].remote->etag && !ck->files[f].remote->last_modified) {
            bare++;
            first = f;
        }
    }
    if (bare)
        ck_warn(ck, "%s: the server sent no ETag or Last-Modified (%zu of %zu files): a rewrite of the "
                "same size during the load would go unnoticed (--verify checks the bytes)",
                ck->files[first].path, bare, ck->n_files);
}

static sl_status ck_remote_files(sl_checkpoint *ck)
{
    const size_t n = ck->n_files;
    sl_http_range *r = calloc(n + 1, sizeof *r);
    unsigned char *first8 = calloc(n + 1, 8), **hdr = calloc(n + 1, sizeof *hdr);
    sl_status st = r && first8 && hdr ? ck_remote_headers(ck, r, first8, hdr)
                                      : sl_err_set(&ck->err, SL_E_NOMEM, "out of memory");
    for (size_t f = 0; hdr && f < n; f++)
        free(hdr[f]);
    free(hdr);
    free(first8);
    free(r);
    if (st == SL_OK)
        ck_check_validators(ck);
    if (st == SL_OK)
        st = ck_build_tensors(ck);
    return st == SL_OK ? ck_check_duplicates(ck) : st;
}

/* The file `name` of the directory (a shard named by the index or the listing): requested
 * percent-encoded for http(s), named as written, as a local file or an S3 key is. */
static sl_status ck_add_named(sl_checkpoint *ck, const char *name)
{
    char *u = sl_http_join_name(ck->remote_base, name), *shown = sl_http_join(ck->dir, name);
    const sl_status st = u && shown ? ck_add_remote(ck, u, shown)
                                     : sl_err_set(&ck->err, SL_E_NOMEM, "out of memory");
    free(u);
    free(shown);
    return st;
}

static sl_status ck_remote_indexed(sl_checkpoint *ck, char *buf, size_t len, const char *index_name)
{
    st_index ix;
    sl_status st = st_index_parse(buf, len, &ix, &ck->err);
    if (st != SL_OK)
        return sl_err_prefix(&ck->err, index_name);
    for (size_t i = 0; i < ix.n_shards && st == SL_OK; i++)
        st = ck_add_named(ck, ix.shards[i]);
    if (st == SL_OK)
        st = ck_remote_files(ck);
    if (st == SL_OK)
        st = ck_check_index(ck, &ix);
    if (st == SL_OK)
        ck_check_total_size(ck, &ix, index_name);
    st_index_free(&ix);
    return st;
}

static sl_status ck_remote_listed(sl_checkpoint *ck)
{
    char **names = NULL;
    size_t n = 0;
    sl_status st = sl_http_list(ck->remote_cfg, ck->remote_base, ck->dir, &names, &n, &ck->err);
    if (st == SL_OK && n == 0)
        st = sl_err_set(&ck->err, SL_E_NOT_FOUND, "%s: no *.safetensors objects and no " ST_INDEX_NAME, ck->dir);
    for (size_t i = 0; i < n && st == SL_OK; i++)
        st = ck_add_named(ck, names[i]);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (st != SL_OK)
        return st;
    ck_detect_presharded(ck);
    return ck_remote_files(ck);
}

/* A directory URL: its index, else (S3) the *.safetensors objects under the prefix. */
static sl_status ck_remote_dir(sl_checkpoint *ck)
{
    char *index = sl_http_join_name(ck->remote_base, ST_INDEX_NAME);
    char *index_name = sl_http_join(ck->dir, ST_INDEX_NAME);
    char *buf = NULL;
    size_t len = 0;
    sl_status st = index && index_name ? SL_OK : sl_err_set(&ck->err, SL_E_NOMEM, "out of memory");
    if (st == SL_OK)
        st = sl_http_get_all(ck->remote_cfg, index, ST_MAX_INDEX, &buf, &len, &ck->err);
    if (st == SL_OK)
        st = ck_remote_indexed(ck, buf, len, index_name);
    else if (st == SL_E_NOT_FOUND)
        st = ck_remote_listed(ck);
    free(buf);
    free(index);
    free(index_name);
    return st;
}

/* u (a URL without its query) cut to its directory: what is before a file's last '/', or without
 * trailing slashes. */
static void dir_of(char *u, int file)
{
    if (file) {
        *strrchr(u, '/') = '\0';
        return;
    }
    for (size_t n = strlen(u); n > 0 && u[n - 1] == '/';)
        u[--n] = '\0';
}

/* ck->dir: the directory's name for messages (no credentials), ck->remote_base: its URL. */
static sl_status ck_remote_names(sl_checkpoint *ck, const char *path, int file)
{
    sl_http_obj o;
    sl_status st = sl_http_obj_init(&o, ck->remote_cfg, path, &ck->err);
    if (st != SL_OK) {
        sl_http_obj_free(&o);
        return st;
    }
    const size_t path_len = sl_http_path_len(path);
    char *base = strndup(path, path_len), *dir = strdup(o.name);
    sl_http_obj_free(&o);
    if (!base || !dir) {
        free(base);
        free(dir);
        return sl_err_set(&ck->err, SL_E_NOMEM, "out of memory");
    }
    dir_of(base, file);
    dir_of(dir, file);
    ck->dir = dir;
    /* the query (a SAS token) goes back after the directory: sl_http_join puts names before it */
    const char *query = path + path_len;
    ck->remote_base = malloc(strlen(base) + strlen(query) + 1);
    if (ck->remote_base)
        sprintf(ck->remote_base, "%s%s", base, query);
    free(base);
    SL_CHECK(ck->remote_base, &ck->err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

static sl_status ck_open_remote_at(sl_checkpoint *ck, const char *path)
{
    const int file = names_file(path);
    SL_TRY(ck_remote_names(ck, path, file));
    if (!file)
        return ck_remote_dir(ck);
    SL_TRY(ck_add_remote(ck, path, NULL));
    return ck_remote_files(ck);
}

/* A URL naming a folder's index (".../model.safetensors.index.json?query") as the folder's own
 * (".../?query"), malloc'd; NULL when it names no index, or out of memory (*oom). */
static char *index_folder_url(const char *url, int *oom)
{
    const size_t plen = sl_http_path_len(url), k = strlen(ST_INDEX_NAME);
    *oom = 0;
    if (plen <= k || url[plen - k - 1] != '/' || strncmp(url + plen - k, ST_INDEX_NAME, k) != 0)
        return NULL;
    char *out = malloc(strlen(url) - k + 1);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    memcpy(out, url, plen - k);
    strcpy(out + plen - k, url + plen);
    return out;
}

static sl_status ck_open_remote(sl_checkpoint *ck, const char *url, const sl_load_opts *o)
{
    ck->remote_cfg = calloc(1, sizeof *ck->remote_cfg);
    SL_CHECK(ck->remote_cfg, &ck->err, SL_E_NOMEM, "out of memory");
    SL_TRY(sl_http_cfg_init(ck->remote_cfg, o, &ck->err));
    int oom = 0;
    char *folder = index_folder_url(url, &oom);   /* the index given for its folder */
    SL_CHECK(!oom, &ck->err, SL_E_NOMEM, "out of memory");
    ck->remote_cfg->note_region = 1;   /* the open is the cfg's only user (http.h) */
    const sl_status st = ck_open_remote_at(ck, folder ? folder : url);
    ck->remote_cfg->note_region = 0;
    free(folder);
    return st;
}

/* An S3 open that failed because the bucket is in another region than the one asked, S3 having
 * named it (http_fail.c records it), is done once more, from the start, in that region, as boto3
 * and the AWS CLI redirect: the same credentials signed for the region S3 named, and on AWS its
 * regional host (nothing else of the answer is used: no Location, no endpoint). Once: a second
 * failure is the answer, whatever it names. The retry is a warning of the new checkpoint (the
 * CLI prints it; Python's Checkpoint.warnings), which says how to skip the first round trip. */
static sl_status ck_open_in_named_region(sl_checkpoint **ckp, const char *path, const sl_load_opts *o)
{
    sl_checkpoint *first = *ckp, *again = calloc(1, sizeof(*again));
    SL_CHECK(again, &first->err, SL_E_NOMEM, "out of memory");
    char named[sizeof first->remote_cfg->bucket_region], asked[64];
    snprintf(named, sizeof named, "%s", first->remote_cfg->bucket_region);
    snprintf(asked, sizeof asked, "%s", first->remote_cfg->region);
    sl_load_opts in_named = o ? *o : (sl_load_opts){0};   /* zero fields: the defaults */
    in_named.s3_region = named;
    const char *how = first->remote_cfg->region_unnamed ? " to a HeadBucket" : "";
    sl_checkpoint_close(first);
    *ckp = again;
    const sl_status st = ck_open_remote(again, path, &in_named);
    if (st != SL_OK)   /* (sl_err_set formats before it frees the old message) */
        return sl_err_set(&again->err, st, "%s (opened again in region '%s', which S3 named%s when asked in "
                          "'%s')", sl_err_msg(&again->err), named, how, asked);
    ck_warn(again, "%s: the bucket is in region '%s', not '%s': opened in '%s', as S3 named it%s (--s3-region %s "
            "saves a round trip)", again->dir, named, asked, named, how, named);
    return SL_OK;
}

/* S3 said the bucket is in another region without naming it (a 301 or 307 without the header, an
 * IllegalLocationConstraintException): S3 is asked where, once, with a HeadBucket signed as the
 * failed request was, as botocore's redirector does. Only S3's own header is taken, and only a
 * region other than the one asked; a HeadBucket that fails or names none leaves the open's error
 * as it was, but a cancel during it is the caller's answer: SL_E_CANCELLED, in ck's error. */
static sl_status ck_ask_bucket_region(sl_checkpoint *ck, const char *path)
{
    sl_http_cfg *c = ck->remote_cfg;
    sl_err e = {0};
    char named[sizeof c->bucket_region];
    const sl_status st = sl_http_bucket_region(c, path, named, sizeof named, &e);
    if (st == SL_OK && named[0] && strcmp(named, c->region))
        snprintf(c->bucket_region, sizeof c->bucket_region, "%s", named);
    if (st == SL_E_CANCELLED)
        sl_err_copy(&ck->err, &e);
    sl_err_clear(&e);
    return st == SL_E_CANCELLED ? st : SL_OK;
}

sl_status sl_checkpoint_open_opts(const char *path, const sl_load_opts *o, sl_checkpoint **out)
{
    if (!path || !sl_http_is_url(path))
        return sl_checkpoint_open(path, out);
    sl_checkpoint *ck = calloc(1, sizeof(*ck));
    if (out)
        *out = ck;
    if (!ck)
        return SL_E_NOMEM;
    if (!out)
        return sl_err_set(&ck->err, SL_E_INVALID_ARG, "sl_checkpoint_open_opts: NULL argument");
    const sl_status st = ck_open_remote(ck, path, o);
    if (st == SL_OK || !ck->remote_cfg)
        return st;
    if (!ck->remote_cfg->bucket_region[0] && ck->remote_cfg->region_unnamed &&
        ck_ask_bucket_region(ck, path) == SL_E_CANCELLED)
        return SL_E_CANCELLED;
    if (!ck->remote_cfg->bucket_region[0])
        return st;
    return ck_open_in_named_region(out, path, o);
}

/* The file `name` next to a remote checkpoint, whole, with its settings and kept-alive connection. */
static sl_status ck_fetch(const sl_checkpoint *ck, const char *name, char **buf, size_t *len, sl_err *e)
{
    *buf = NULL;
    *len = 0;
    SL_CHECK(ck && name, e, SL_E_INVALID_ARG, "sl_checkpoint_fetch: NULL argument");
    SL_CHECK(ck->remote_cfg, e, SL_E_INVALID_ARG, "%s: not a remote checkpoint", sl_checkpoint_dir(ck));
    char *url = sl_http_join_name(ck->remote_base, name);
    SL_CHECK(url, e, SL_E_NOMEM, "out of memory");
    const sl_status st = sl_http_get_all(ck->remote_cfg, url, CK_MAX_FETCH, buf, len, e);
    free(url);
    return st;
}

sl_status sl_checkpoint_fetch_bytes(const sl_checkpoint *ck, const char *name, char **buf, size_t *len,
                                    char *err, size_t errlen)
{
    sl_err e = {0};
    char *b = NULL;
    size_t n = 0;
    const sl_status st = buf && len ? ck_fetch(ck, name, &b, &n, &e)
                                    : sl_err_set(&e, SL_E_INVALID_ARG, "sl_checkpoint_fetch_bytes: NULL argument");
    if (buf && len) {
        *buf = b;
        *len = n;
    }
    sl_err_export(&e, err, errlen);
    sl_err_clear(&e);
    return st;
}

sl_status sl_checkpoint_fetch(const sl_checkpoint *ck, const char *name, const char *dest, char *err,
                              size_t errlen)
{
    sl_err e = {0};
    char *buf = NULL;
    size_t len = 0;
    sl_status st = dest ? ck_fetch(ck, name, &buf, &len, &e)
                        : sl_err_set(&e, SL_E_INVALID_ARG, "sl_checkpoint_fetch: NULL argument");
    if (st == SL_OK)   /* never a half-written dest, nor an earlier one lost to a failed fetch */
        st = sl_file_write_atomic(dest, buf, len, &e);
    sl_err_export(&e, err, errlen);
    sl_err_clear(&e);
    free(buf);
    return st;
}
