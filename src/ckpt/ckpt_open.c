/* ckpt_open.c - sl_checkpoint_open: one .safetensors file, or a directory of shards (with or without
 * model.safetensors.index.json). Only the 8-byte length and the header of each file are read, one
 * file open at a time; the data buffer is never touched here. Every message reads "<file>: <what
 * is wrong>", where <file> is the path the user gave, joined with the shard name for directories. */
#include "ckpt/ckpt_file.h"
#include "ckpt/ckpt_merge.h"
#include "common/sl_text.h"
#include "io/http.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reading one file ---- */

static sl_status ck_fail_errno(sl_err *e, const char *path, const char *what, bool missing_is_not_found)
{
    const int err = errno;
    const sl_status st = (err == ENOENT && missing_is_not_found) ? SL_E_NOT_FOUND : SL_E_IO;
    return sl_err_set(e, st, "%s: %s: %s", path, what, err ? strerror(err) : "unexpected end of file");
}

/* Validates the prefix before allocating N bytes: N <= 100,000,000 and 8+N <= file size. */
static sl_status ck_read_header_fd(int fd, ck_file *f, sl_err *e)
{
    unsigned char first8[8] = {0};
    unsigned char *buf = NULL;
    uint64_t n = 0;
    sl_status st = SL_OK;
    if (sl_pread_full(fd, first8, f->size < 8 ? (size_t)f->size : 8, 0) != 0)
        return ck_fail_errno(e, f->path, "read", false);
    st = st_prefix_check(first8, f->size, &n, e);
    if (st != SL_OK)
        goto out;
    buf = malloc(n ? (size_t)n : 1);
    if (!buf) {
        st = sl_err_set(e, SL_E_NOMEM, "out of memory for a %" PRIu64 "-byte header", n);
        goto out;
    }
    if (sl_pread_full(fd, buf, (size_t)n, 8) != 0) {
        st = ck_fail_errno(e, f->path, "read", false);
        free(buf);
        return st;
    }
    st = st_header_parse(buf, (size_t)n, f->size, &f->h, e);
out:
    free(buf);
    if (st != SL_OK)
        sl_err_prefix(e, f->path);
    return st;
}

/* A FIFO or a device is refused before anything could block on it (sl_file.h). */
static sl_status ck_not_regular(sl_err *e, const char *path, const struct stat *sb)
{
    return sl_err_set(e, SL_E_IO, "%s: not a regular file (%s)", path, sl_file_kind((unsigned)sb->st_mode));
}

static sl_status ck_read_header(ck_file *f, bool from_index, sl_err *e)
{
    struct stat sb;
    const int fd = sl_file_open_regular(f->path, &sb);
    if (fd == SL_FILE_NOT_REGULAR)
        return ck_not_regular(e, f->path, &sb);
    if (fd < 0)
        return ck_fail_errno(e, f->path, from_index ? "shard named by " ST_INDEX_NAME " cannot be opened" : "open",
                             true);
    f->size = (uint64_t)sb.st_size;
    sl_file_id_from_stat(&sb, &f->id);   /* what the loader checks the file against */
    const sl_status st = ck_read_header_fd(fd, f, e);
    close(fd);
    return st;
}

/* ---- choosing the files ---- */

static sl_status ck_add_file(sl_checkpoint *ck, char *path)
{
    if (ck->n_files == ck->cap_files) {   /* doubling: 20,000 shards are 12 reallocations */
        const size_t cap = ck->cap_files ? 2 * ck->cap_files : 8;
        ck_file *nf = realloc(ck->files, cap * sizeof(*nf));
        if (!nf) {
            free(path);
            return sl_err_set(&ck->err, SL_E_NOMEM, "out of memory");
        }
        ck->files = nf;
        ck->cap_files = cap;
    }
    ck_file *nf = ck->files;
    memset(&nf[ck->n_files], 0, sizeof(*nf));
    nf[ck->n_files].rank = -1;
    nf[ck->n_files++].path = path;
    return SL_OK;
}

static sl_status ck_add_joined(sl_checkpoint *ck, const char *name)
{
    char *p = ck_path_join(ck->dir, name);
    SL_CHECK(p, &ck->err, SL_E_NOMEM, "out of memory");
    return ck_add_file(ck, p);
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The *.safetensors names in a directory, sorted (free with names_free). */
typedef struct ck_names {
    char **v;
    size_t n, cap;
} ck_names;

static void names_free(ck_names *nm)
{
    for (size_t i = 0; i < nm->n; i++)
        free(nm->v[i]);
    free(nm->v);
}

static int names_push(ck_names *nm, const char *name)
{
    if (nm->n == nm->cap) {
        const size_t cap = nm->cap ? 2 * nm->cap : 16;
        char **v = realloc(nm->v, cap * sizeof(*v));
        if (!v)
            return -1;
        nm->v = v;
        nm->cap = cap;
    }
    if ((nm->v[nm->n] = strdup(name)) == NULL)
        return -1;
    nm->n++;
    return 0;
}

static sl_status ck_scan_dir(sl_checkpoint *ck, ck_names *nm)
{
    sl_status st = SL_OK;
    DIR *d = opendir(ck->dir);
    if (!d)
        return ck_fail_errno(&ck->err, ck->dir, "open directory", true);
    for (struct dirent *de; st == SL_OK && (de = readdir(d)) != NULL;) {
        if (st_has_suffix(de->d_name, strlen(de->d_name)) && names_push(nm, de->d_name) != 0)
            st = sl_err_set(&ck->err, SL_E_NOMEM, "out of memory");
    }
    closedir(d);
    if (nm->n > 1)
        qsort(nm->v, nm->n, sizeof(*nm->v), cmp_cstr);
    return st;
}

/* The first rank file (model-rank-{d}-part-{p}.safetensors) and the first other name; NULL when
 * there is none of that kind. */
static void names_kinds(const ck_names *nm, const char **rank_file, const char **other)
{
    *rank_file = *other = NULL;
    for (size_t i = 0; i < nm->n; i++) {
        const char **k = st_rank_file_name(nm->v[i], NULL, NULL) ? rank_file : other;
        if (!*k)
            *k = nm->v[i];
    }
}

/* A directory is one checkpoint: Hugging Face shards (with or without an index) or the rank files
 * of a reshard, never both, because which one a load would read is a guess. (A reshard into a
 * Hugging Face checkpoint's directory once loaded the old model through its index.) */
static sl_status ck_check_one_kind(sl_checkpoint *ck, const ck_names *nm, bool indexed)
{
    char b1[160], b2[160];
    const char *rank_file, *other;
    names_kinds(nm, &rank_file, &other);
    if (rank_file && indexed)
        return sl_err_set(&ck->err, SL_E_INDEX, "%s: holds " ST_INDEX_NAME " (a Hugging Face checkpoint) and "
                          "pre-sharded rank files such as %s: which one to load is ambiguous; remove one of "
                          "them", ck->dir, st_display(rank_file, strlen(rank_file), b1, sizeof b1));
    if (rank_file && other)
        return sl_err_set(&ck->err, SL_E_INDEX, "%s: mixes pre-sharded rank files such as %s with other "
                          "*.safetensors files such as %s: which ones to load is ambiguous; remove one kind",
                          ck->dir, st_display(rank_file, strlen(rank_file), b1, sizeof b1),
                          st_display(other, strlen(other), b2, sizeof b2));
    return SL_OK;
}

static sl_status ck_list_dir(sl_checkpoint *ck, const ck_names *nm)
{
    sl_status st = SL_OK;
    SL_CHECK(nm->n > 0, &ck->err, SL_E_NOT_FOUND, "%s: no *.safetensors files and no " ST_INDEX_NAME, ck->dir);
    for (size_t i = 0; i < nm->n && st == SL_OK; i++)
        st = ck_add_joined(ck, nm->v[i]);
    return st;
}

static sl_status ck_read_index(const char *path, st_index *ix, sl_err *e)
{
    struct stat sb;
    char *buf = NULL;
    sl_status st = SL_OK;
    const int fd = sl_file_open_regular(path, &sb);
    if (fd == SL_FILE_NOT_REGULAR)
        return ck_not_regular(e, path, &sb);
    if (fd < 0)
        return ck_fail_errno(e, path, "open", true);
    if ((uint64_t)sb.st_size > ST_MAX_INDEX) {
        st = sl_err_set(e, SL_E_INDEX, "%s: %" PRIu64 " bytes, over the %llu-byte limit", path,
                        (uint64_t)sb.st_size, (unsigned long long)ST_MAX_INDEX);
        goto out;
    }
    buf = malloc(sb.st_size ? (size_t)sb.st_size : 1);
    if (!buf) {
        st = sl_err_set(e, SL_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (sl_pread_full(fd, buf, (size_t)sb.st_size, 0) != 0) {
        st = ck_fail_errno(e, path, "read", false);
        goto out;
    }
    st = st_index_parse(buf, (size_t)sb.st_size, ix, e);
    if (st != SL_OK)
        sl_err_prefix(e, path);
out:
    free(buf);
    close(fd);
    return st;
}


/* ---- opening ---- */

static sl_status ck_load_files(sl_checkpoint *ck, bool from_index)
{
    for (size_t f = 0; f < ck->n_files; f++)
        SL_TRY(ck_read_header(&ck->files[f], from_index, &ck->err));
    SL_TRY(ck_build_tensors(ck));
    return ck_check_duplicates(ck);
}

static sl_status ck_open_indexed(sl_checkpoint *ck, const char *index_path)
{
    st_index ix;
    sl_status st = ck_read_index(index_path, &ix, &ck->err);
    if (st != SL_OK)
        return st;
    for (size_t i = 0; i < ix.n_shards && st == SL_OK; i++)
        st = ck_add_joined(ck, ix.shards[i]);
    if (st == SL_OK)
        st = ck_load_files(ck, true);
    if (st == SL_OK)
        st = ck_check_index(ck, &ix);
    if (st == SL_OK)
        ck_check_total_size(ck, &ix, index_path);
    st_index_free(&ix);
    return st;
}

static sl_status ck_open_dir(sl_checkpoint *ck, const char *path)
{
    ck->dir = strdup(path);
    SL_CHECK(ck->dir, &ck->err, SL_E_NOMEM, "out of memory");
    char *index_path = ck_path_join(path, ST_INDEX_NAME);
    SL_CHECK(index_path, &ck->err, SL_E_NOMEM, "out of memory");
    ck_names nm = {0};
    struct stat sb;
    const bool indexed = lstat(index_path, &sb) == 0;
    sl_status st = ck_scan_dir(ck, &nm);
    if (st == SL_OK)
        st = ck_check_one_kind(ck, &nm, indexed);
    if (st == SL_OK && indexed)
        st = ck_open_indexed(ck, index_path);
    else if (st == SL_OK && (st = ck_list_dir(ck, &nm)) == SL_OK) {
        ck_detect_presharded(ck);
        st = ck_load_files(ck, false);
    }
    names_free(&nm);
    free(index_path);
    return st;
}

/* The folder of a file path, malloc'd ("." for a bare name); NULL when out of memory. */
static char *ck_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    return !slash ? strdup(".") : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
}

static sl_status ck_open_file(sl_checkpoint *ck, const char *path)
{
    ck->dir = ck_dirname(path);
    char *p = strdup(path);
    SL_CHECK(ck->dir && p, &ck->err, SL_E_NOMEM, "out of memory");
    SL_TRY(ck_add_file(ck, p));
    return ck_load_files(ck, false);
}

sl_status sl_checkpoint_open(const char *path, sl_checkpoint **out)
{
    sl_checkpoint *ck = calloc(1, sizeof(*ck));
    if (out)
        *out = ck;
    if (!ck)
        return SL_E_NOMEM;
    if (!path || !out)
        return sl_err_set(&ck->err, SL_E_INVALID_ARG, "sl_checkpoint_open: NULL argument");
    if (sl_http_is_url(path)) {   /* http(s):// or s3:// with default settings (ckpt_remote.c) */
        sl_checkpoint_close(ck);
        return sl_checkpoint_open_opts(path, NULL, out);
    }
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ck_fail_errno(&ck->err, path, "cannot open", true);
    if (S_ISDIR(sb.st_mode))
        return ck_open_dir(ck, path);
    /* a folder's index given for the folder (it was read as a safetensors file: "header length
     * 8387229874382703227 exceeds the limit") */
    const char *slash = strrchr(path, '/');
    if (strcmp(slash ? slash + 1 : path, ST_INDEX_NAME) != 0)
        return ck_open_file(ck, path);
    char *dir = ck_dirname(path);
    SL_CHECK(dir, &ck->err, SL_E_NOMEM, "out of memory");
    const sl_status st = ck_open_dir(ck, dir);
    free(dir);
    return st;
}

void sl_checkpoint_close(sl_checkpoint *ck)
{
    if (!ck)
        return;
    ck_remote_free(ck);
    for (size_t f = 0; f < ck->n_files; f++) {
        free(ck->files[f].path);
        st_header_free(&ck->files[f].h);
    }
    for (size_t i = 0; i < ck->n_warnings; i++)
        free(ck->warnings[i]);
    free(ck->warnings);
    free(ck->files);
    free(ck->tensors);
    free(ck->by_name);
    free(ck->dir);
    sl_err_clear(&ck->err);
    free(ck);
}
