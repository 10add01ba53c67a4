/* checkpoint.c - the getters of an open sl_checkpoint (shardload.h), and ck_file_id. */
#include "ckpt/checkpoint.h"

#include <string.h>

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

sl_status ck_file_id(const sl_checkpoint *ck, int64_t file, sl_file_id *out)
{
    const ck_file *f = ck_file_at(ck, file);
    if (!f)
        return SL_E_INVALID_ARG;
    *out = f->id;
    return SL_OK;
}
