/* read_manifest.c - --verify's manifest (read_manifest.h): sha256sum lines, and the block records
 * and hash lines sl_write_manifest adds as comments (layout in read_verify.h). Every number is
 * checked before use; a record's allocation is bounded by the size of the file it matches. */
#include "load/read_manifest.h"

#include "load/read_verify.h"
#include "ckpt/checkpoint.h"
#include "format/st_format.h"
#include "io/http.h"

#include "common/sl_file.h"
#include "common/sl_text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RD_MANIFEST_MAX ((size_t)64 << 20)
/* A block hash on a '#b' line: a space and 16 hex digits. */
#define RD_HASH_CHARS 17

/* The manifest being read: the files it may name, and the block record being read (its file,
 * NULL when it names none of ours, and how many of its hashes came so far). */
typedef struct rd_mparse {
    rd_vfile *v;
    int64_t n;
    const char *manifest;    /* its path, for messages */
    const char *text_end;    /* the end of its text: a record's hashes must fit before it */
    rd_vfile *rec;
    uint64_t rec_have;
    int rec_open;
    int64_t rec_line;
} rd_mparse;

const char *rd_base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* name [*name, +*nlen) cut to its last path component (checkpoints are flat folders). */
static void rd_last_part(const char **name, size_t *nlen)
{
    for (size_t k = *nlen; k > 0; k--)
        if ((*name)[k - 1] == '/') {
            *name += k, *nlen -= k;
            return;
        }
}

static rd_vfile *rd_find(rd_mparse *v, const char *name, size_t nlen)
{
    rd_last_part(&name, &nlen);
    for (int64_t i = 0; i < v->n; i++) {
        const char *b = rd_base(v->v[i].path);
        if (strlen(b) == nlen && memcmp(b, name, nlen) == 0)
            return &v->v[i];
    }
    return NULL;
}

#define RD_LINE_ERR(v, lineno, err, ...)                                                          \
    rd_line_err((v), (lineno), (err), SL_E_INVALID_ARG, __VA_ARGS__)

static sl_status rd_line_err(const rd_mparse *v, int64_t lineno, sl_err *err, sl_status st,
                             const char *fmt, ...) SL_PRINTF(5, 6);

/* A manifest line that is not what it should be: "MANIFEST: line N: what". */
static sl_status rd_line_err(const rd_mparse *v, int64_t lineno, sl_err *err, sl_status st,
                             const char *fmt, ...)
{
    char nb[SL_TEXT_NAME], what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sl_err_set(err, st, "%s: line %lld: %s", sl_text_name(v->manifest, nb, sizeof nb),
                      (long long)lineno, what);
}

/* The digest at the start of a line, in lower case (sha256sum -c takes upper-case hex too), into
 * hex; 0 when the line is too short for one. */
static int rd_digest(const char *line, size_t len, char hex[2 * SL_SHA256_LEN])
{
    if (len < 2 * SL_SHA256_LEN)
        return 0;
    for (size_t i = 0; i < 2 * SL_SHA256_LEN; i++)
        hex[i] = line[i] >= 'A' && line[i] <= 'F' ? (char)(line[i] - 'A' + 'a') : line[i];
    return 1;
}

/* sha256sum's line, "<64 hex> <space or *><name>" (its text and binary forms): its digest in
 * lower case into hex, and its name; 0 when the line is not one. */
static int rd_sha_fields(const char *line, size_t len, char hex[2 * SL_SHA256_LEN],
                         const char **name, size_t *nlen)
{
    if (len < 2 * SL_SHA256_LEN + 2 || !rd_digest(line, len, hex) ||
        !sl_sha256_is_hex(hex, 2 * SL_SHA256_LEN) || line[2 * SL_SHA256_LEN] != ' ')
        return 0;
    *name = line + 2 * SL_SHA256_LEN + 1;
    *nlen = len - 2 * SL_SHA256_LEN - 1;
    if (*nlen && (**name == ' ' || **name == '*'))
        ++*name, --*nlen;
    return 1;
}

/* The next line of [*at, end), without its "\n" or "\r\n"; 0 when there is none left. */
static int rd_next_line(const char **at, const char *end, const char **line, size_t *len)
{
    if (*at >= end)
        return 0;
    const char *nl = memchr(*at, '\n', (size_t)(end - *at)), *e = nl ? nl : end;
    *line = *at;
    *len = (size_t)(e - *at);
    if (*len && e[-1] == '\r')
        --*len;
    *at = nl ? nl + 1 : end;
    return 1;
}

static sl_status rd_sha_line(rd_mparse *v, const char *line, size_t len, int64_t lineno,
                             sl_err *err)
{
    char nb[SL_TEXT_NAME], hex[2 * SL_SHA256_LEN];
    const char *name = NULL;
    size_t nlen = 0;
    if (!rd_sha_fields(line, len, hex, &name, &nlen))
        return sl_err_set(err, SL_E_INVALID_ARG,
                          "%s: line %lld is not '<sha256>  <file>' (sha256sum's format)",
                          sl_text_name(v->manifest, nb, sizeof nb), (long long)lineno);
    rd_vfile *f = rd_find(v, name, nlen);
    if (!f)
        return SL_OK;
    if (f->source && strncmp(f->want, hex, 2 * SL_SHA256_LEN) != 0)
        return sl_err_set(err, SL_E_INVALID_ARG, "%s: two different SHA-256 for %s",
                          sl_text_name(v->manifest, nb, sizeof nb), rd_base(f->path));
    memcpy(f->want, hex, 2 * SL_SHA256_LEN);
    f->want[2 * SL_SHA256_LEN] = '\0';
    f->source = "the manifest";
    return SL_OK;
}

/* A decimal field and the one space after it; 0 when it is not one (or overflows). */
static int rd_u64_field(const char **p, const char *end, uint64_t *out)
{
    uint64_t x = 0;
    const char *s = *p;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (x > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return 0;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    if (s == *p || s >= end || *s != ' ')
        return 0;
    *p = s + 1;
    *out = x;
    return 1;
}

static int rd_hex16(const char *s, uint64_t *out)
{
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        const int d = sl_text_hex_digit((unsigned char)s[i]);
        if (d < 0)
            return 0;
        x = x << 4 | (uint64_t)d;
    }
    *out = x;
    return 1;
}

/* The record before must have had all its hashes. */
static sl_status rd_record_close(rd_mparse *v, sl_err *err)
{
    const rd_vfile *f = v->rec;
    const int open = v->rec_open;
    v->rec = NULL;
    v->rec_open = 0;
    if (open && f && v->rec_have != f->n_blocks)
        return RD_LINE_ERR(v, v->rec_line, err, "%s: %llu of its %llu block hashes follow",
                           rd_base(f->path), (unsigned long long)v->rec_have,
                           (unsigned long long)f->n_blocks);
    return SL_OK;
}

/* "#xxh3-blocks SIZE HEADER_END BLOCK NAME". A file of another size: the manifest is stale. */
static sl_status rd_block_record(rd_mparse *v, const char *line, size_t len, int64_t lineno,
                                 sl_err *err)
{
    char nb[SL_TEXT_NAME];
    const char *p = line + strlen(RD_BLOCK_TAG " "), *end = line + len;
    uint64_t size = 0, head = 0, block = 0;
    if (!rd_u64_field(&p, end, &size) || !rd_u64_field(&p, end, &head) ||
        !rd_u64_field(&p, end, &block) || p == end)
        return RD_LINE_ERR(v, lineno, err, "not '%s SIZE HEADER_END BLOCK NAME'", RD_BLOCK_TAG);
    if (block < RD_BLOCK_MIN || block > RD_BLOCK_MAX || (block & (block - 1)) || head > size)
        return RD_LINE_ERR(v, lineno, err, "block size %llu (a power of two from %llu to %llu) "
                           "or header end %llu (at most the size, %llu) out of range",
                           (unsigned long long)block, (unsigned long long)RD_BLOCK_MIN,
                           (unsigned long long)RD_BLOCK_MAX, (unsigned long long)head,
                           (unsigned long long)size);
    rd_vfile *f = rd_find(v, p, (size_t)(end - p));
    v->rec = f;
    v->rec_open = 1;
    v->rec_have = 0;
    v->rec_line = lineno;
    if (!f)   /* a file this load does not have: its hashes are skipped */
        return SL_OK;
    if (f->blocks)
        return RD_LINE_ERR(v, lineno, err, "a second block record for %s", rd_base(f->path));
    if (size != f->size)
        return sl_err_set(err, SL_E_INTEGRITY,
                          "%s: the manifest's blocks are of a file of %llu bytes, it has %llu: the "
                          "manifest is stale (write it again) or the file is not the one expected",
                          sl_text_name(f->path, nb, sizeof nb), (unsigned long long)size,
                          (unsigned long long)f->size);
    /* Each hash takes 17 bytes of the '#b' lines after this one: a record of more blocks than the
     * rest of the manifest can hold is refused before its array is allocated (a 60-byte line
     * naming a 1 TiB file with 4 KiB blocks would otherwise ask for 2 GiB). */
    const uint64_t n_blocks = size / block + (size % block != 0);
    const size_t room = (size_t)(v->text_end - (line + len)) / RD_HASH_CHARS;
    if (n_blocks > room)
        return RD_LINE_ERR(v, lineno, err, "%s: %llu blocks of %llu bytes, but the rest of the "
                           "manifest holds at most %zu block hashes", rd_base(f->path),
                           (unsigned long long)n_blocks, (unsigned long long)block, room);
    f->blocks = calloc((size_t)n_blocks + 1, sizeof *f->blocks);
    if (!f->blocks)
        return RD_LINE_ERR(v, lineno, err, "%s: out of memory for %llu block hashes",
                           rd_base(f->path), (unsigned long long)n_blocks);
    f->n_blocks = n_blocks;
    f->block = block;
    f->header_end = head;
    return SL_OK;
}

/* "#b HEX16 HEX16 ...": the next hashes of the record above. */
static sl_status rd_block_hashes(rd_mparse *v, const char *line, size_t len, int64_t lineno,
                                 sl_err *err)
{
    if (!v->rec_open)
        return RD_LINE_ERR(v, lineno, err, "block hashes without a '%s' line before", RD_BLOCK_TAG);
    rd_vfile *f = v->rec;
    for (size_t i = strlen(RD_BLOCK_LINE); i < len; i += RD_HASH_CHARS) {
        uint64_t h = 0;
        if (line[i] != ' ' || len - i < RD_HASH_CHARS || !rd_hex16(line + i + 1, &h))
            return RD_LINE_ERR(v, lineno, err, "not '%s' and 16-digit hex hashes", RD_BLOCK_LINE);
        if (f && v->rec_have >= f->n_blocks)
            return RD_LINE_ERR(v, lineno, err, "more block hashes than %s has blocks (%llu)",
                               rd_base(f->path), (unsigned long long)f->n_blocks);
        if (f)
            f->blocks[v->rec_have] = h;
        v->rec_have++;
    }
    return SL_OK;
}

static int rd_starts(const char *line, size_t len, const char *prefix)
{
    const size_t n = strlen(prefix);
    return len >= n && memcmp(line, prefix, n) == 0;
}

/* One manifest line: a block record, its hashes, another comment, or sha256sum's line. */
static sl_status rd_manifest_line(rd_mparse *v, const char *line, size_t len, int64_t lineno,
                                  sl_err *err)
{
    if (rd_starts(line, len, RD_BLOCK_LINE " "))
        return rd_block_hashes(v, line, len, lineno, err);
    SL_TRY(rd_record_close(v, err));
    if (rd_starts(line, len, RD_BLOCK_TAG " "))
        return rd_block_record(v, line, len, lineno, err);
    if (len == 0 || line[0] == '#')   /* sha256sum -c skips comments too */
        return SL_OK;
    return rd_sha_line(v, line, len, lineno, err);
}

sl_status rd_manifest_parse(rd_vfile *files, int64_t n, const char *path, const char *text,
                            size_t len, sl_err *err)
{
    rd_mparse parse = {.v = files, .n = n, .manifest = path, .text_end = text + len}, *v = &parse;
    sl_status st = SL_OK;
    int64_t lineno = 0;
    const char *at = text, *line = NULL;
    size_t l = 0;
    while (st == SL_OK && rd_next_line(&at, text + len, &line, &l))
        st = rd_manifest_line(v, line, l, ++lineno, err);
    return st == SL_OK ? rd_record_close(v, err) : st;
}

#define RD_SIDE_CHUNK ((size_t)1 << 20)

/* The SHA-256 of a remote side file, fetched whole with the checkpoint's settings, up to the
 * size the opener takes an index of (ST_MAX_INDEX; sl_checkpoint_fetch_bytes stops at 16 MiB). */
static sl_status rd_side_remote(const sl_checkpoint *ck, const char *name, sl_sha256 *h, sl_err *err)
{
    char *url = sl_http_join_name(ck->remote_base, name), *buf = NULL;
    size_t n = 0;
    SL_CHECK(url, err, SL_E_NOMEM, "out of memory");
    sl_status st = sl_http_get_all(ck->remote_cfg, url, ST_MAX_INDEX, &buf, &n, err);
    if (st == SL_OK && sl_sha256_update(h, buf, n) != 0)
        st = sl_err_set(err, SL_E_IO, "%s: SHA-256 failed", name);
    free(buf);
    free(url);
    return st;
}

/* The SHA-256 of a local side file, read in chunks (an index may be tens of MB). */
static sl_status rd_side_local(const char *path, sl_sha256 *h, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    struct stat sb;
    const int fd = sl_file_open_regular(path, &sb);
    if (fd < 0)
        return sl_err_set(err, fd == SL_FILE_NOT_REGULAR || errno != ENOENT ? SL_E_IO : SL_E_NOT_FOUND,
                          "%s: cannot open: %s", sl_text_name(path, nb, sizeof nb),
                          fd == SL_FILE_NOT_REGULAR ? "not a regular file" : strerror(errno));
    unsigned char *buf = malloc(RD_SIDE_CHUNK);
    sl_status st = buf ? SL_OK : sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (uint64_t off = 0; st == SL_OK && off < (uint64_t)sb.st_size;) {
        const uint64_t left = (uint64_t)sb.st_size - off;
        const size_t k = left < RD_SIDE_CHUNK ? (size_t)left : RD_SIDE_CHUNK;
        if (sl_pread_full(fd, buf, k, off) != 0 || sl_sha256_update(h, buf, k) != 0)
            st = sl_err_set(err, SL_E_IO, "%s: read error at offset %llu", sl_text_name(path, nb, sizeof nb),
                            (unsigned long long)off);
        off += k;
    }
    free(buf);
    close(fd);
    return st;
}

#define RD_SIDE_N 2          /* RD_SIDE_FILES */
#define RD_SIDE_DIGESTS 16   /* digests kept per side file: a manifest of several folders */
static const char *const rd_side_names[] = RD_SIDE_FILES;
_Static_assert(sizeof rd_side_names / sizeof rd_side_names[0] == RD_SIDE_N, "RD_SIDE_N counts RD_SIDE_FILES");

/* The digests a manifest gives the side files: per name, the distinct ones of its lines. */
typedef struct rd_side {
    char hex[RD_SIDE_N][RD_SIDE_DIGESTS][2 * SL_SHA256_LEN];
    int n[RD_SIDE_N];
} rd_side;

/* One sha256sum line naming a side file (by its last path component, as data files are matched:
 * `sha256sum dir/...` names dir/config.json): its digest kept. */
static void rd_side_line(rd_side *sd, const char *line, size_t len)
{
    const char *const *side = rd_side_names;
    char want[2 * SL_SHA256_LEN];
    const char *name = NULL;
    size_t nlen = 0;
    if (!rd_sha_fields(line, len, want, &name, &nlen))
        return;   /* not a sha256sum line: rd_manifest_parse says so */
    rd_last_part(&name, &nlen);
    for (int i = 0; i < RD_SIDE_N; i++) {
        if (nlen != strlen(side[i]) || memcmp(name, side[i], nlen) != 0)
            continue;
        int k = 0;
        while (k < sd->n[i] && memcmp(sd->hex[i][k], want, sizeof want) != 0)
            k++;
        if (k == sd->n[i] && k < RD_SIDE_DIGESTS)
            memcpy(sd->hex[i][sd->n[i]++], want, sizeof want);
    }
}

/* Side file i of ck, which the manifest names, hashed and compared with its digests (a manifest
 * of several folders gives config.json one for each: this folder's must be one of them). One
 * the folder does not have is an integrity failure; one it cannot read, that read's error. */
static sl_status rd_side_check(const sl_checkpoint *ck, const char *manifest, const rd_side *sd,
                               int i, sl_err *err)
{
    const char *const *side = rd_side_names;
    char nb[SL_TEXT_NAME], hex[SL_SHA256_HEX], path[4096];
    snprintf(path, sizeof path, "%s/%s", sl_checkpoint_dir(ck), side[i]);
    SL_CHECK(sl_sha256_available(), err, SL_E_UNSUPPORTED, "%s names %s by its SHA-256, and this build "
             "has none (rebuild with OpenSSL's libcrypto: Debian libssl-dev)",
             sl_text_name(manifest, nb, sizeof nb), side[i]);
    sl_sha256 *h = sl_sha256_new();
    SL_CHECK(h, err, SL_E_NOMEM, "out of memory");
    sl_status st = ck->remote_cfg ? rd_side_remote(ck, side[i], h, err) : rd_side_local(path, h, err);
    if (st == SL_OK && sl_sha256_final_hex(h, hex) != 0)
        st = sl_err_set(err, SL_E_IO, "%s: SHA-256 failed", side[i]);
    sl_sha256_free(h);
    if (st == SL_E_NOT_FOUND)
        return sl_err_set(err, SL_E_INTEGRITY, "%s names %s, which %s does not have",
                          sl_text_name(manifest, nb, sizeof nb), side[i], sl_checkpoint_dir(ck));
    SL_TRY(st);
    for (int k = 0; k < sd->n[i]; k++)
        if (memcmp(hex, sd->hex[i][k], 2 * SL_SHA256_LEN) == 0)
            return SL_OK;
    return sl_err_set(err, SL_E_INTEGRITY, "%s: its SHA-256 is %s, the manifest's %.64s%s: the file "
                      "is not the one the manifest was written for", sl_text_name(path, nb, sizeof nb),
                      hex, sd->hex[i][0], sd->n[i] > 1 ? " (or another of its lines)" : "");
}

sl_status rd_manifest_check_side(const sl_checkpoint *ck, const char *path, const char *text,
                                 size_t len, sl_err *err)
{
    rd_side *sd = calloc(1, sizeof *sd);
    SL_CHECK(sd, err, SL_E_NOMEM, "out of memory");
    const char *at = text, *line = NULL;
    size_t l = 0;
    while (rd_next_line(&at, text + len, &line, &l))
        rd_side_line(sd, line, l);
    sl_status st = SL_OK;
    for (int i = 0; i < RD_SIDE_N && st == SL_OK; i++)
        if (sd->n[i] > 0)
            st = rd_side_check(ck, path, sd, i, err);
    free(sd);
    return st;
}

sl_status rd_manifest_load(const char *path, char **text, size_t *len, sl_err *err)
{
    return sl_file_read_all(path, RD_MANIFEST_MAX, SL_E_INVALID_ARG, err, text, len);
}
