/* ckpt_merge.c - a checkpoint's files merged into one tensor table, with the rules that span files
 * (SAFETENSORS.md I4-I7: every indexed tensor in its shard, every shard tensor indexed, no name
 * in two files, total_size only a warning). */
#include "ckpt/ckpt_merge.h"
#include "common/sl_text.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

sl_status ck_build_tensors(sl_checkpoint *ck)
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
sl_status ck_check_duplicates(sl_checkpoint *ck)
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
sl_status ck_check_index(sl_checkpoint *ck, const st_index *ix)
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

void ck_detect_presharded(sl_checkpoint *ck)
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


/* A warning that cannot be stored (out of memory) is dropped: warnings never fail an open. */
void ck_warn(sl_checkpoint *ck, const char *fmt, ...)
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
void ck_check_total_size(sl_checkpoint *ck, const st_index *ix, const char *index_path)
{
    uint64_t data = 0;
    for (size_t f = 0; f < ck->n_files; f++)
        data += ck->files[f].size - ck->files[f].h.data_start;   /* R11: no overflow */
    if (ix->has_total_size && ix->total_size_huge)
        ck_warn(ck, "%s: metadata.total_size is beyond 2^63 but the shards hold %llu bytes of "
                "tensor data (ignored: nothing is sized from it)", index_path,
                (unsigned long long)data);
    else if (ix->has_total_size && ix->total_size != data)
        ck_warn(ck, "%s: metadata.total_size is %llu but the shards hold %llu bytes of tensor data "
                "(ignored: nothing is sized from it)", index_path, (unsigned long long)ix->total_size,
                (unsigned long long)data);
}

