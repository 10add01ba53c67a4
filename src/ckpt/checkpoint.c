/* checkpoint.c - sl_checkpoint: one .safetensors file, or a directory of shards (with or without
 * model.safetensors.index.json). Only the 8-byte length and the header of each file are read; the
 * data buffer is never touched here. Every message reads "<file>: <what is wrong>", where <file> is
 * the path the user gave, joined with the shard name for directories. */
#include "ckpt/ckpt_file.h"
#include "format/st_format.h"
#include "common/sl_file.h"
#include "common/sl_text.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ck_file {
    char *path;
    uint64_t size;
    st_header h;
    int32_t rank;               /* device of a pre-sharded file (model-rank-{d}-part-{p}), else -1 */
} ck_file;

typedef struct ck_name {
    const char *name;
    int32_t rank;               /* of the tensor's file: entries sort by (name, rank, idx) */
    int64_t idx;
} ck_name;

struct sl_checkpoint {
    sl_err err;
    char *dir;
    ck_file *files;
    size_t n_files, cap_files;
    sl_tensor_info *tensors;    /* ordered by (file, offset) */
    size_t n_tensors;
    ck_name *by_name;           /* sorted by name, for O(log n) look-up */
    uint64_t total_bytes;
    bool presharded;            /* every file is model-rank-{d}-part-{p}.safetensors */
    char **warnings;            /* what is odd but not wrong (I7); the loader never relies on it */
    size_t n_warnings;
};

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

static bool has_suffix(const char *s)
{
    const size_t n = strlen(s), k = sizeof(ST_SUFFIX) - 1;
    return n > k && strcmp(s + n - k, ST_SUFFIX) == 0;
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
        if (has_suffix(de->d_name) && names_push(nm, de->d_name) != 0)
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

/* ---- merging files ---- */

static int cmp_name(const void *a, const void *b)
{
    const ck_name *x = a, *y = b;
    const int c = strcmp(x->name, y->name);
    if (c)
        return c;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static sl_status ck_build_tensors(sl_checkpoint *ck)
{
    size_t n = 0;
    for (size_t f = 0; f < ck->n_files; f++)
        n += ck->files[f].h.n_tensors;   /* each bounded by its header size: no overflow */
    ck->tensors = calloc(n ? n : 1, sizeof(*ck->tensors));
    ck->by_name = calloc(n ? n : 1, sizeof(*ck->by_name));
    SL_CHECK(ck->tensors && ck->by_name, &ck->err, SL_E_NOMEM, "out of memory");
    for (size_t f = 0; f < ck->n_files; f++) {
        const ck_file *cf = &ck->files[f];
        for (size_t i = 0; i < cf->h.n_tensors; i++) {
            const st_tensor *t = &cf->h.tensors[i];
            sl_tensor_info *o = &ck->tensors[ck->n_tensors];
            *o = (sl_tensor_info){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
                                  .file = (int32_t)f, .nbytes = t->end - t->begin};
            SL_CHECK(!sl_add_overflow(cf->h.data_start, t->begin, &o->offset), &ck->err, SL_E_OVERFLOW,
                     "%s: tensor offset overflows", cf->path);
            ck->by_name[ck->n_tensors] = (ck_name){t->name, cf->rank, (int64_t)ck->n_tensors};
            ck->n_tensors++;
        }
        SL_CHECK(!sl_add_overflow(ck->total_bytes, cf->h.data_len, &ck->total_bytes), &ck->err, SL_E_OVERFLOW,
                 "%s: total size overflows", cf->path);
    }
    qsort(ck->by_name, ck->n_tensors, sizeof(*ck->by_name), cmp_name);
    return SL_OK;
}

/* I6: a name in two files (names within one file are already unique). In a pre-sharded directory
 * every device has its own copy of a name: a duplicate is the same name twice for one device. The
 * entries of one (name, device) are adjacent in by_name (rank is -1 for every other file). */
static sl_status ck_check_duplicates(sl_checkpoint *ck)
{
    char nb[160];
    for (size_t i = 1; i < ck->n_tensors; i++) {
        const ck_name *a = &ck->by_name[i - 1], *b = &ck->by_name[i];
        if (a->rank != b->rank || strcmp(a->name, b->name) != 0)
            continue;
        return sl_err_set(&ck->err, SL_E_DUPLICATE, "%s: tensor '%s' is also in %s",
                          ck->files[ck->tensors[b->idx].file].path,
                          st_display(b->name, strlen(b->name), nb, sizeof nb),
                          ck->files[ck->tensors[a->idx].file].path);
    }
    return SL_OK;
}

/* The position of an entry's shard in ix->shards (sorted, unique; entries point into it). */
static size_t ck_shard_file(const st_index *ix, const char *shard)
{
    size_t lo = 0, hi = ix->n_shards;
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ix->shards[mid], shard) <= 0)
            lo = mid;
        else
            hi = mid;
    }
    assert(ix->shards[lo] == shard);
    return lo;
}

/* I4 (every mapped tensor is in its shard) and I5 (every shard tensor is mapped). Files were opened
 * in ix->shards order, so file i is shard ix->shards[i]. */
static sl_status ck_check_index(sl_checkpoint *ck, const st_index *ix)
{
    char nb[160];
    bool *covered = calloc(ck->n_tensors ? ck->n_tensors : 1, 1);
    SL_CHECK(covered, &ck->err, SL_E_NOMEM, "out of memory");
    sl_status st = SL_OK;
    for (size_t i = 0; i < ix->n_entries && st == SL_OK; i++) {
        const st_index_entry *en = &ix->entries[i];
        const int64_t t = sl_checkpoint_find_tensor(ck, en->tensor);
        const size_t f = ck_shard_file(ix, en->shard);
        if (t >= 0 && (size_t)ck->tensors[t].file == f) {
            covered[t] = true;
            continue;
        }
        st = sl_err_set(&ck->err, SL_E_NOT_FOUND, "%s: tensor '%s' is listed in " ST_INDEX_NAME
                        " but missing from this shard", ck->files[f].path,
                        st_display(en->tensor, strlen(en->tensor), nb, sizeof nb));
    }
    for (size_t t = 0; t < ck->n_tensors && st == SL_OK; t++) {
        if (!covered[t])
            st = sl_err_set(&ck->err, SL_E_INDEX, "%s: tensor '%s' is in this shard but not in the weight_map of "
                            ST_INDEX_NAME, ck->files[ck->tensors[t].file].path,
                            st_display(ck->tensors[t].name, strlen(ck->tensors[t].name), nb, sizeof nb));
    }
    free(covered);
    return st;
}

/* vLLM's sharded_state names: model-rank-{d}-part-{p}.safetensors (st_rank_file_name). */
static int32_t ck_presharded_rank(const char *path)
{
    const char *base = strrchr(path, '/');
    int32_t rank = -1;
    return st_rank_file_name(base ? base + 1 : path, &rank, NULL) ? rank : -1;
}

static void ck_detect_presharded(sl_checkpoint *ck)
{
    for (size_t f = 0; f < ck->n_files; f++) {
        if ((ck->files[f].rank = ck_presharded_rank(ck->files[f].path)) < 0) {
            for (size_t g = 0; g < ck->n_files; g++)
                ck->files[g].rank = -1;
            return;
        }
    }
    ck->presharded = ck->n_files > 0;
}

static sl_status ck_load_files(sl_checkpoint *ck, bool from_index)
{
    for (size_t f = 0; f < ck->n_files; f++)
        SL_TRY(ck_read_header(&ck->files[f], from_index, &ck->err));
    SL_TRY(ck_build_tensors(ck));
    return ck_check_duplicates(ck);
}

static void ck_warn(sl_checkpoint *ck, const char *fmt, ...) SL_PRINTF(2, 3);

/* A warning that cannot be stored (out of memory) is dropped: warnings never fail an open. */
static void ck_warn(sl_checkpoint *ck, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = realloc(ck->warnings, (ck->n_warnings + 1) * sizeof *w);
    if (!w)
        return;
    ck->warnings = w;
    if ((w[ck->n_warnings] = sl_text_sanitize(buf, sizeof buf)) != NULL)   /* one printable line */
        ck->n_warnings++;
}

/* I7: total_size is unreliable (tied weights, writers that count differently), so a mismatch is a
 * warning, and nothing is ever sized from it. */
static void ck_check_total_size(sl_checkpoint *ck, const st_index *ix, const char *index_path)
{
    uint64_t data = 0;
    for (size_t f = 0; f < ck->n_files; f++)
        data += ck->files[f].size - ck->files[f].h.data_start;   /* R11: no overflow */
    if (ix->has_total_size && ix->total_size != data)
        ck_warn(ck, "%s: metadata.total_size is %llu but the shards hold %llu bytes of tensor data "
                "(ignored: nothing is sized from it)", index_path, (unsigned long long)ix->total_size,
                (unsigned long long)data);
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

static sl_status ck_open_file(sl_checkpoint *ck, const char *path)
{
    const char *slash = strrchr(path, '/');
    ck->dir = !slash ? strdup(".") : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
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
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ck_fail_errno(&ck->err, path, "cannot open", true);
    return S_ISDIR(sb.st_mode) ? ck_open_dir(ck, path) : ck_open_file(ck, path);
}

void sl_checkpoint_close(sl_checkpoint *ck)
{
    if (!ck)
        return;
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

/* ---- getters ---- */

const char *sl_checkpoint_errmsg(const sl_checkpoint *ck)
{
    return ck ? sl_err_msg(&ck->err) : "out of memory";
}

int64_t sl_checkpoint_warning_count(const sl_checkpoint *ck)
{
    return ck ? (int64_t)ck->n_warnings : 0;
}

const char *sl_checkpoint_warning(const sl_checkpoint *ck, int64_t i)
{
    return ck && i >= 0 && (size_t)i < ck->n_warnings ? ck->warnings[i] : NULL;
}

const char *sl_checkpoint_dir(const sl_checkpoint *ck)
{
    return ck && ck->dir ? ck->dir : "";
}

static const ck_file *ck_file_at(const sl_checkpoint *ck, int64_t file)
{
    return ck && file >= 0 && (uint64_t)file < ck->n_files ? &ck->files[file] : NULL;
}

int64_t sl_checkpoint_file_count(const sl_checkpoint *ck)
{
    return ck ? (int64_t)ck->n_files : 0;
}

const char *sl_checkpoint_file_path(const sl_checkpoint *ck, int64_t file)
{
    const ck_file *f = ck_file_at(ck, file);
    return f ? f->path : NULL;
}

uint64_t sl_checkpoint_file_size(const sl_checkpoint *ck, int64_t file)
{
    const ck_file *f = ck_file_at(ck, file);
    return f ? f->size : 0;
}

uint64_t sl_checkpoint_file_data_start(const sl_checkpoint *ck, int64_t file)
{
    const ck_file *f = ck_file_at(ck, file);
    return f ? f->h.data_start : 0;
}

int64_t sl_checkpoint_metadata_count(const sl_checkpoint *ck, int64_t file)
{
    const ck_file *f = ck_file_at(ck, file);
    return f ? (int64_t)f->h.n_meta : 0;
}

sl_status sl_checkpoint_metadata(const sl_checkpoint *ck, int64_t file, int64_t i, const char **key,
                                 const char **value)
{
    const ck_file *f = ck_file_at(ck, file);
    if (!f || i < 0 || (uint64_t)i >= f->h.n_meta)
        return SL_E_INVALID_ARG;
    if (key)
        *key = f->h.meta[i].key;
    if (value)
        *value = f->h.meta[i].value;
    return SL_OK;
}

int64_t sl_checkpoint_tensor_count(const sl_checkpoint *ck)
{
    return ck ? (int64_t)ck->n_tensors : 0;
}

sl_status sl_checkpoint_tensor(const sl_checkpoint *ck, int64_t i, sl_tensor_info *out)
{
    if (!ck || !out || i < 0 || (uint64_t)i >= ck->n_tensors)
        return SL_E_INVALID_ARG;
    *out = ck->tensors[i];
    return SL_OK;
}

int64_t sl_checkpoint_find_tensor(const sl_checkpoint *ck, const char *name)
{
    if (!ck || !name || !ck->by_name)
        return -1;
    size_t lo = 0, hi = ck->n_tensors;   /* first entry with name >= the key */
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ck->by_name[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ck->n_tensors && strcmp(ck->by_name[lo].name, name) == 0 ? ck->by_name[lo].idx : -1;
}

int32_t sl_checkpoint_file_rank(const sl_checkpoint *ck, int64_t file)
{
    const ck_file *f = ck_file_at(ck, file);
    return f ? f->rank : -1;
}

uint64_t sl_checkpoint_total_bytes(const sl_checkpoint *ck)
{
    return ck ? ck->total_bytes : 0;
}
