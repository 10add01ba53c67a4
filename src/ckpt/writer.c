/* writer.c - sl_writer: writes a .safetensors file the reference reader accepts.
 *
 * Layout decisions follow the reference serializer (safetensors tensor.rs `prepare`): tensors are
 * ordered by dtype descending (enum order) then by name, data is packed in that order with no gaps,
 * and the header is padded with spaces so that 8 + N is a multiple of 8. With that order every
 * tensor starts at a multiple of its element size. The file is written under a temporary name and
 * renamed by sl_writer_finish, so a crash never leaves a half-written file under the final name;
 * the temporary file is locked while it is open (writer.h), and a cancel request (sl_cancel)
 * stops the next write. */
#include "ckpt/ckpt_file.h"
#include "ckpt/writer.h"
#include "format/st_format.h"
#include "common/sl_cancel.h"
#include "common/sl_file.h"
#include "common/sl_strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct wr_range {
    uint64_t b, e;
} wr_range;

typedef struct wr_tensor {
    char *name;
    sl_dtype dtype;
    uint32_t ndim;
    uint64_t *shape;
    uint64_t nbytes;
    uint64_t offset;       /* absolute, known after begin */
    wr_range *done;        /* merged written ranges, sorted; usually one */
    size_t n_done, cap_done;
} wr_tensor;

typedef struct wr_meta {
    char *key, *value;
} wr_meta;

enum { WR_OPEN, WR_BEGUN, WR_FINISHED, WR_FAILED };

struct sl_writer {
    sl_err err;
    char *path, *tmp;
    int fd;              /* -1 while parked by a ck_writer_set (or failed to open) */
    int state;
    unsigned busy;       /* in a ck_writer_set: writes under way */
    uint64_t last_use;   /* in a ck_writer_set: for choosing the writer to park */
    int in_set;          /* listed among the set's open writers */
    wr_tensor *t;
    size_t n, cap;
    wr_meta *meta;
    size_t n_meta;
};

static sl_status wr_nomem(sl_writer *w)
{
    return sl_err_set(&w->err, SL_E_NOMEM, "%s: out of memory", w->path ? w->path : "writer");
}

sl_status sl_writer_open(const char *path, sl_writer **out)
{
    sl_writer *w = calloc(1, sizeof(*w));
    if (out)
        *out = w;
    if (!w)
        return SL_E_NOMEM;
    w->fd = -1;
    if (!path || !out)
        return sl_err_set(&w->err, SL_E_INVALID_ARG, "sl_writer_open: NULL argument");
    w->path = strdup(path);
    if (!w->path)
        return wr_nomem(w);
    return sl_file_temp_create(path, &w->fd, &w->tmp, &w->err);
}

/* A parked writer's temporary file, opened again by name and locked again. */
static sl_status wr_reopen(sl_writer *w)
{
    if (w->fd >= 0)
        return SL_OK;
    w->fd = open(w->tmp, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (w->fd < 0)
        return sl_err_set(&w->err, SL_E_IO, "%s: cannot open again: %s", w->tmp, strerror(errno));
    (void)flock(w->fd, LOCK_EX | LOCK_NB);
    return SL_OK;
}

static sl_status wr_cancelled(sl_writer *w)
{
    return sl_err_set(&w->err, SL_E_CANCELLED, "%s: cancelled, not finished", w->path);
}

/* Names and metadata become JSON strings a strict reader must accept again. */
static sl_status wr_check_text(sl_writer *w, const char *what, const char *s)
{
    char nb[160];
    SL_CHECK(s, &w->err, SL_E_INVALID_ARG, "%s: NULL %s", w->path, what);
    const size_t n = strlen(s);
    SL_CHECK(st_utf8_check((const unsigned char *)s, n) == n, &w->err, SL_E_INVALID_ARG,
             "%s: %s '%s' is not valid UTF-8", w->path, what, st_display(s, n, nb, sizeof nb));
    return SL_OK;
}

sl_status sl_writer_set_metadata(sl_writer *w, const char *key, const char *value)
{
    if (!w)
        return SL_E_INVALID_ARG;
    SL_CHECK(w->state == WR_OPEN && w->fd >= 0, &w->err, SL_E_INVALID_ARG,
             "%s: metadata must be set before sl_writer_begin", w->path);
    SL_TRY(wr_check_text(w, "metadata key", key));
    SL_TRY(wr_check_text(w, "metadata value", value));
    for (size_t i = 0; i < w->n_meta; i++)
        SL_CHECK(strcmp(w->meta[i].key, key) != 0, &w->err, SL_E_INVALID_ARG,
                 "%s: duplicate metadata key '%s'", w->path, key);
    wr_meta *m = realloc(w->meta, (w->n_meta + 1) * sizeof(*m));
    if (!m)
        return wr_nomem(w);
    w->meta = m;
    m[w->n_meta].key = strdup(key);
    m[w->n_meta].value = strdup(value);
    w->n_meta++;
    if (!m[w->n_meta - 1].key || !m[w->n_meta - 1].value)
        return wr_nomem(w);
    return SL_OK;
}

static sl_status wr_check_tensor(sl_writer *w, const char *name, sl_dtype dt, uint32_t ndim, const uint64_t *shape,
                                 uint64_t *nbytes)
{
    SL_CHECK(w->state == WR_OPEN && w->fd >= 0, &w->err, SL_E_INVALID_ARG,
             "%s: tensors must be added before sl_writer_begin", w->path);
    SL_TRY(wr_check_text(w, "tensor name", name));
    SL_CHECK(strcmp(name, "__metadata__") != 0, &w->err, SL_E_INVALID_ARG,
             "%s: '__metadata__' is reserved and cannot name a tensor", w->path);
    SL_CHECK((unsigned)dt < SL_DTYPE_COUNT, &w->err, SL_E_INVALID_ARG, "%s: tensor '%s': invalid dtype %d",
             w->path, name, (int)dt);
    SL_CHECK(ndim == 0 || shape, &w->err, SL_E_INVALID_ARG, "%s: tensor '%s': NULL shape", w->path, name);
    const sl_status st = st_tensor_nbytes(dt, ndim, shape, nbytes);
    SL_CHECK(st == SL_OK, &w->err, st, "%s: tensor '%s': shape and dtype %s give %s", w->path, name,
             sl_dtype_name(dt), st == SL_E_OVERFLOW ? "a size that overflows" : "a size that is not whole bytes");
    for (size_t i = 0; i < w->n; i++)   /* O(n^2) over adds; writers hold at most thousands */
        SL_CHECK(strcmp(w->t[i].name, name) != 0, &w->err, SL_E_DUPLICATE, "%s: duplicate tensor '%s'",
                 w->path, name);
    return SL_OK;
}

sl_status sl_writer_add(sl_writer *w, const char *name, sl_dtype dt, uint32_t ndim, const uint64_t *shape,
                        int64_t *idx)
{
    if (!w)
        return SL_E_INVALID_ARG;
    uint64_t nbytes = 0;
    SL_TRY(wr_check_tensor(w, name, dt, ndim, shape, &nbytes));
    if (w->n == w->cap) {
        const size_t nc = w->cap ? w->cap * 2 : 16;
        wr_tensor *nt = realloc(w->t, nc * sizeof(*nt));
        if (!nt)
            return wr_nomem(w);
        w->t = nt;
        w->cap = nc;
    }
    wr_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    t->shape = malloc((ndim ? ndim : 1) * sizeof(uint64_t));
    if (!t->name || !t->shape) {
        free(t->name);
        free(t->shape);
        return wr_nomem(w);
    }
    if (ndim)
        memcpy(t->shape, shape, ndim * sizeof(uint64_t));
    t->dtype = dt;
    t->ndim = ndim;
    t->nbytes = nbytes;
    if (idx)
        *idx = (int64_t)w->n;
    w->n++;
    return SL_OK;
}

/* ---- begin: layout and header ---- */

static int cmp_order(const void *a, const void *b)
{
    const wr_tensor *x = *(const wr_tensor *const *)a, *y = *(const wr_tensor *const *)b;
    if (x->dtype != y->dtype)
        return x->dtype > y->dtype ? -1 : 1;   /* dtype descending */
    return strcmp(x->name, y->name);          /* then name, bytewise like Rust's String order */
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp(((const wr_meta *)a)->key, ((const wr_meta *)b)->key);
}

static void wr_header_json(sl_writer *w, wr_tensor **order, sl_strbuf *sb)
{
    sl_strbuf_puts(sb, "{");
    if (w->n_meta) {
        qsort(w->meta, w->n_meta, sizeof(*w->meta), cmp_meta);
        sl_strbuf_puts(sb, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            sl_strbuf_puts(sb, i ? "," : "");
            sl_strbuf_json_str(sb, w->meta[i].key);
            sl_strbuf_puts(sb, ":");
            sl_strbuf_json_str(sb, w->meta[i].value);
        }
        sl_strbuf_puts(sb, w->n ? "}," : "}");
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        wr_tensor *t = order[i];
        sl_strbuf_puts(sb, i ? "," : "");
        sl_strbuf_json_str(sb, t->name);
        sl_strbuf_printf(sb, ":{\"dtype\":\"%s\",\"shape\":[", sl_dtype_name(t->dtype));
        for (uint32_t d = 0; d < t->ndim; d++)
            sl_strbuf_printf(sb, "%s%" PRIu64, d ? "," : "", t->shape[d]);
        sl_strbuf_printf(sb, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + t->nbytes);
        t->offset = off;   /* relative for now; made absolute once N is known */
        off += t->nbytes;
    }
    sl_strbuf_puts(sb, "}");
    while (sb->len % 8 != 0)
        sl_strbuf_puts(sb, " ");
}

static sl_status wr_layout_total(sl_writer *w, uint64_t *out)
{
    uint64_t total = 8 + ST_MAX_HEADER;   /* the offsets made absolute in begin stay in range */
    for (size_t i = 0; i < w->n; i++)
        SL_CHECK(!sl_add_overflow(total, w->t[i].nbytes, &total), &w->err, SL_E_OVERFLOW,
                 "%s: total data size overflows", w->path);
    *out = total;
    return SL_OK;
}

sl_status sl_writer_begin(sl_writer *w)
{
    if (!w)
        return SL_E_INVALID_ARG;
    SL_CHECK(w->state == WR_OPEN && w->fd >= 0, &w->err, SL_E_INVALID_ARG, "%s: sl_writer_begin called twice",
             w->path);
    uint64_t total = 0;
    SL_TRY(wr_layout_total(w, &total));
    sl_status st = SL_OK;
    sl_strbuf sb = {0};
    wr_tensor **order = malloc((w->n ? w->n : 1) * sizeof(*order));
    if (!order)
        return wr_nomem(w);
    for (size_t i = 0; i < w->n; i++)
        order[i] = &w->t[i];
    qsort(order, w->n, sizeof(*order), cmp_order);
    wr_header_json(w, order, &sb);
    unsigned char len8[8];
    sl_store_le64(len8, sb.len);
    if (sb.oom)
        st = wr_nomem(w);
    else if (sb.len > ST_MAX_HEADER)
        st = sl_err_set(&w->err, SL_E_HEADER_TOO_LARGE, "%s: header of %zu bytes exceeds 100,000,000", w->path,
                        sb.len);
    else if (sl_pwrite_full(w->fd, len8, 8, 0) != 0 || sl_pwrite_full(w->fd, sb.data, sb.len, 8) != 0)
        st = sl_err_set(&w->err, SL_E_IO, "%s: write: %s", w->tmp, strerror(errno));
    for (size_t i = 0; i < w->n && st == SL_OK; i++)
        w->t[i].offset += 8 + (uint64_t)sb.len;
    w->state = st == SL_OK ? WR_BEGUN : WR_FAILED;
    sl_strbuf_free(&sb);
    free(order);
    return st;
}

/* ---- data ---- */

/* Adds [b, e) to t's written set, merging neighbours; the set stays sorted and disjoint. */
static int wr_mark(wr_tensor *t, uint64_t b, uint64_t e)
{
    size_t i = 0;
    while (i < t->n_done && t->done[i].e < b)
        i++;
    size_t j = i;
    while (j < t->n_done && t->done[j].b <= e) {
        b = sl_min_u64(b, t->done[j].b);
        e = sl_max_u64(e, t->done[j].e);
        j++;
    }
    if (i == j) {   /* insert a new range at i */
        if (t->n_done == t->cap_done) {
            const size_t nc = t->cap_done ? t->cap_done * 2 : 2;
            wr_range *nr = realloc(t->done, nc * sizeof(*nr));
            if (!nr)
                return -1;
            t->done = nr;
            t->cap_done = nc;
        }
        memmove(t->done + i + 1, t->done + i, (t->n_done - i) * sizeof(*t->done));
        t->n_done++;
        j = i + 1;
    }
    t->done[i] = (wr_range){b, e};
    memmove(t->done + i + 1, t->done + j, (t->n_done - j) * sizeof(*t->done));
    t->n_done -= j - i - 1;
    return 0;
}

sl_status sl_writer_write(sl_writer *w, int64_t idx, uint64_t offset, const void *data, size_t n)
{
    if (!w)
        return SL_E_INVALID_ARG;
    SL_CHECK(w->state == WR_BEGUN, &w->err, SL_E_INVALID_ARG, "%s: sl_writer_write outside begin..finish",
             w->path);
    SL_CHECK(idx >= 0 && (uint64_t)idx < w->n, &w->err, SL_E_INVALID_ARG, "%s: no tensor %" PRId64, w->path, idx);
    wr_tensor *t = &w->t[idx];
    uint64_t end;
    SL_CHECK(!sl_add_overflow(offset, n, &end) && end <= t->nbytes && (data || n == 0), &w->err,
             SL_E_INVALID_ARG, "%s: tensor '%s': write of %zu bytes at %" PRIu64 " is outside its %" PRIu64 " bytes",
             w->path, t->name, n, offset, t->nbytes);
    if (n == 0)
        return SL_OK;
    if (sl_cancel_requested())
        return wr_cancelled(w);
    SL_TRY(wr_reopen(w));
    if (sl_pwrite_full(w->fd, data, n, t->offset + offset) != 0)
        return sl_err_set(&w->err, SL_E_IO, "%s: write: %s", w->tmp, strerror(errno));
    if (wr_mark(t, offset, end) != 0)
        return wr_nomem(w);
    return SL_OK;
}

sl_status sl_writer_finish(sl_writer *w)
{
    if (!w)
        return SL_E_INVALID_ARG;
    SL_CHECK(w->state == WR_BEGUN, &w->err, SL_E_INVALID_ARG, "%s: sl_writer_finish without sl_writer_begin",
             w->path);
    for (size_t i = 0; i < w->n; i++) {
        const wr_tensor *t = &w->t[i];
        const bool full = t->nbytes == 0 || (t->n_done == 1 && t->done[0].b == 0 && t->done[0].e == t->nbytes);
        SL_CHECK(full, &w->err, SL_E_INCOMPLETE, "%s: tensor '%s': not every byte was written", w->path, t->name);
    }
    if (sl_cancel_requested())   /* no complete file appears once a stop was asked for */
        return wr_cancelled(w);
    SL_TRY(wr_reopen(w));
    const int fd = w->fd;
    w->fd = -1;   /* closed by the commit, whatever happens */
    SL_TRY(sl_file_temp_commit(fd, w->tmp, w->path, &w->err));
    w->state = WR_FINISHED;
    return SL_OK;
}

void sl_writer_free(sl_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->state != WR_FINISHED && w->tmp)
        unlink(w->tmp);
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].shape);
        free(w->t[i].done);
    }
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->t);
    free(w->meta);
    free(w->path);
    free(w->tmp);
    sl_err_clear(&w->err);
    free(w);
}

const char *sl_writer_errmsg(const sl_writer *w)
{
    return w ? sl_err_msg(&w->err) : "out of memory";
}

/* ---- temporary files of runs that died ---- */

/* "<final>.tmp.XXXXXX" (sl_file_temp_create's six characters): the length of <final>, or 0. */
static size_t wr_tmp_final_len(const char *name)
{
    const size_t n = strlen(name), k = sizeof(".tmp.XXXXXX") - 1;
    return n > k && strncmp(name + n - k, ".tmp.", 5) == 0 ? n - k : 0;
}

/* Removes dir/name when no live writer holds it: a writer locks its temporary file while it has
 * it open, so a lock taken here means the writer is gone. */
static sl_status wr_remove_if_unlocked(const char *dir, const char *name, sl_err *err)
{
    char *path = ck_path_join(dir, name);
    SL_CHECK(path, err, SL_E_NOMEM, "out of memory");
    struct stat sb;
    sl_status st = SL_OK;
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        unlink(path) != 0 && errno != ENOENT)
        st = sl_err_set(err, SL_E_IO, "%s: cannot remove a stale temporary file: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(path);
    return st;
}

sl_status ck_writer_remove_stale(const char *dir, int (*ours)(void *user, const char *final_name),
                                 void *user, sl_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return SL_OK;   /* nothing there yet */
    sl_status st = SL_OK;
    char final[256];
    for (struct dirent *de; st == SL_OK && (de = readdir(d)) != NULL;) {
        const size_t k = wr_tmp_final_len(de->d_name);
        if (k == 0 || k >= sizeof final)
            continue;
        memcpy(final, de->d_name, k);
        final[k] = '\0';
        if (ours(user, final))
            st = wr_remove_if_unlocked(dir, de->d_name, err);
    }
    closedir(d);
    return st;
}

/* ---- a set of writers with a few descriptors ---- */

struct ck_writer_set {
    pthread_mutex_t lock;
    sl_writer **open;    /* the writers holding a descriptor */
    size_t n_open, cap;
    unsigned max_open;
    uint64_t clock;
};

sl_status ck_writer_set_new(ck_writer_set **out, sl_err *err)
{
    ck_writer_set *s = calloc(1, sizeof *s);
    *out = s;
    SL_CHECK(s, err, SL_E_NOMEM, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    s->max_open = sl_file_open_budget(64);
    return SL_OK;
}

void ck_writer_set_free(ck_writer_set *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->open);
    free(s);
}

static void wr_set_remove(ck_writer_set *s, size_t k)
{
    s->open[k]->in_set = 0;
    s->open[k] = s->open[--s->n_open];
}

/* Parks the least recently used writer that no thread is writing; none when all are busy (then
 * one more stays open for a while: never more than the threads writing at once). */
static void wr_set_park_one(ck_writer_set *s)
{
    size_t best = s->n_open;
    for (size_t k = 0; k < s->n_open; k++) {
        if (!s->open[k]->busy && (best == s->n_open || s->open[k]->last_use < s->open[best]->last_use))
            best = k;
    }
    if (best == s->n_open)
        return;
    sl_writer *w = s->open[best];
    close(w->fd);   /* only its own pwrites use it, and none is under way */
    w->fd = -1;
    wr_set_remove(s, best);
}

/* Lists w as open (it opens itself again when written: wr_reopen), parking another if need be. */
static int wr_set_use(ck_writer_set *s, sl_writer *w)
{
    w->last_use = ++s->clock;
    w->busy++;
    if (w->in_set)
        return 0;
    if (s->n_open >= s->max_open)
        wr_set_park_one(s);
    if (s->n_open == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 16;
        sl_writer **v = realloc(s->open, cap * sizeof *v);
        if (!v)
            return -1;
        s->open = v;
        s->cap = cap;
    }
    s->open[s->n_open++] = w;
    w->in_set = 1;
    return 0;
}

sl_status ck_writer_set_join(ck_writer_set *s, sl_writer *w, sl_err *err)
{
    pthread_mutex_lock(&s->lock);
    const int rc = wr_set_use(s, w);
    w->busy--;
    pthread_mutex_unlock(&s->lock);
    SL_CHECK(rc == 0, err, SL_E_NOMEM, "out of memory");
    return SL_OK;
}

sl_status ck_writer_set_write(ck_writer_set *s, sl_writer *w, int64_t idx, uint64_t offset,
                              const void *data, size_t n)
{
    pthread_mutex_lock(&s->lock);
    const int rc = wr_set_use(s, w);
    pthread_mutex_unlock(&s->lock);
    const sl_status st = rc == 0 ? sl_writer_write(w, idx, offset, data, n) : wr_nomem(w);
    pthread_mutex_lock(&s->lock);
    w->busy--;
    pthread_mutex_unlock(&s->lock);
    return st;
}

sl_status ck_writer_set_finish(ck_writer_set *s, sl_writer *w)
{
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; k < s->n_open; k++) {
        if (s->open[k] == w) {
            wr_set_remove(s, k);
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return sl_writer_finish(w);   /* opens w again if it was parked, and closes it */
}
