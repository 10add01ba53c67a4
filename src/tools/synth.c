/* synth.c - synthetic checkpoints in Hugging Face layout, for tests, benchmarks and the demo.
 *
 * The tensors are exactly those the config implies under its rule table (plan/arch.h), filled
 * with uniform values in [-0.05, 0.05) from a per-tensor generator seeded by (seed, name), so a
 * file's bytes depend only on the config, the dtype and the seed. Shards follow huggingface_hub:
 * tensors in order, a new shard when the next tensor would pass max_shard_bytes (a bigger tensor
 * gets a shard of its own), names model-0000i-of-0000n.safetensors plus model.safetensors.index.json,
 * or a single model.safetensors without index. Memory use is one fixed chunk buffer. */
#include "shardload.h"

#include "ckpt/writer.h"
#include "load/convert.h"
#include "plan/arch.h"
#include "plan/plan_ctx.h"
#include "common/sl_bytes.h"
#include "common/sl_err.h"
#include "common/sl_file.h"
#include "common/sl_text.h"
#include "tools/tools_common.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SYNTH_CHUNK_ELEMS (1u << 20)
#define SYNTH_DEFAULT_SHARD 5000000000ull

typedef struct synth_shard {
    int64_t first, count;    /* range of desc tensors */
} synth_shard;

typedef struct synth {
    const sl_arch *desc;
    sl_dtype dtype;
    uint64_t seed;
    const char *outdir;
    int64_t *tensors;        /* desc tensor indices that a checkpoint holds */
    int64_t n_tensors;
    synth_shard *shards;
    int64_t n_shards;
    int64_t n_written;       /* shards this run finished (removed again if it fails) */
    int made_outdir;         /* directories this run created for outdir (removed if it fails) */
    void *chunk;             /* SYNTH_CHUNK_ELEMS elements of the widest dtype */
    float *fchunk;
    sl_err err;
} synth;

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* FNV-1a of the name mixed with the seed: each tensor has its own stream. */
static uint64_t tensor_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

static uint64_t tensor_numel(const sl_arch_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];   /* shapes were checked against overflow by sl_arch_load */
    return n;
}

/* The checkpoint dtype of a tensor: the rule's (FP8 weights F8_E4M3, their scales F32) or the
 * run's. */
static sl_dtype tensor_dtype(const synth *s, const sl_arch_tensor *t)
{
    return t->dtype >= 0 ? (sl_dtype)t->dtype : s->dtype;
}

static uint64_t tensor_bytes(const synth *s, const sl_arch_tensor *t)
{
    return tensor_numel(t) * (sl_dtype_bits(tensor_dtype(s, t)) / 8);
}

static void collect_tensor(void *user, const sl_arch_tensor *t)
{
    synth *s = user;
    s->tensors[s->n_tensors++] = t - s->desc->tensors;
}

static sl_status synth_split(synth *s, uint64_t max_shard)
{
    s->shards = calloc((size_t)s->n_tensors + 1, sizeof(*s->shards));
    if (!s->shards)
        return sl_err_set(&s->err, SL_E_NOMEM, "out of memory");
    uint64_t fill = 0;
    for (int64_t i = 0; i < s->n_tensors; i++) {
        const uint64_t nb = tensor_bytes(s, &s->desc->tensors[s->tensors[i]]);
        synth_shard *cur = s->n_shards ? &s->shards[s->n_shards - 1] : NULL;
        if (!cur || (fill > 0 && fill + nb > max_shard)) {
            cur = &s->shards[s->n_shards++];
            cur->first = i;
            fill = 0;
        }
        cur->count++;
        fill += nb;
    }
    return SL_OK;
}

static void shard_name(const synth *s, int64_t k, char *buf, size_t len)
{
    if (s->n_shards == 1)
        snprintf(buf, len, "model.safetensors");
    else
        snprintf(buf, len, "model-%05lld-of-%05lld.safetensors", (long long)k + 1, (long long)s->n_shards);
}

/* n values of a tensor of dtype dt into s->chunk. FP8 weights: random e4m3 bytes, never the NaN
 * patterns 0x7f/0xff (every other e4m3 byte is finite); their F32 scales (block, per-tensor,
 * per-channel and input scales alike): positive, in [2^-12, 2^-11) like a real scale of weights of
 * magnitude about 0.05. */
static void synth_values(synth *s, sl_dtype dt, int scale, uint64_t *state, size_t n)
{
    if (dt == SL_DTYPE_F8_E4M3) {
        unsigned char *b = (unsigned char *)s->chunk;
        for (size_t k = 0; k < n; k++) {
            b[k] = (unsigned char)(splitmix64(state) >> 56);
            if ((b[k] & 0x7f) == 0x7f)
                b[k] ^= 0x01;
        }
        return;
    }
    for (size_t k = 0; k < n; k++) {
        const uint64_t r = splitmix64(state);
        /* 24 random bits -> [0,1) exactly in f32, then scaled to [-0.05, 0.05). */
        const float u = (float)(r >> 40) * 0x1p-24f;
        s->fchunk[k] = scale ? (1.0f + u) * 0x1p-12f : (u - 0.5f) * 0.1f;
    }
    sl_convert(s->chunk, dt, s->fchunk, SL_DTYPE_F32, n);
}

static sl_status synth_fill_tensor(synth *s, sl_writer *w, int64_t widx, const sl_arch_tensor *t)
{
    const uint64_t numel = tensor_numel(t);
    const sl_dtype dt = tensor_dtype(s, t);
    const size_t esz = sl_dtype_bits(dt) / 8;
    const sl_rule *r = &s->desc->rules[t->rule];
    const int scale = r->scale_of >= 0;
    /* w3's input scale is w1's value: vLLM keeps one per expert and the planner checks them equal */
    const char *seed_name = t->name;
    if (sl_arch_input_scale_dup(r)) {
        const int32_t r0 = s->desc->groups[r->group].rules[0];
        seed_name = s->desc->tensors[sl_arch_tensor_index(s->desc, r0, t->layer, t->expert)].name;
    }
    uint64_t state = tensor_seed(s->seed, seed_name);
    for (uint64_t done = 0; done < numel;) {
        const size_t n = (size_t)sl_min_u64(numel - done, SYNTH_CHUNK_ELEMS);
        synth_values(s, dt, scale, &state, n);
        const sl_status st = sl_writer_write(w, widx, done * esz, s->chunk, n * esz);
        if (st != SL_OK)   /* SL_E_CANCELLED stays itself (sl_cancel) */
            return sl_err_set(&s->err, st == SL_E_CANCELLED ? st : SL_E_IO, "%s", sl_writer_errmsg(w));
        done += n;
    }
    return SL_OK;
}

static sl_status synth_drop_stale(synth *s);

static sl_status synth_write_shard(synth *s, int64_t k, json_t *wmap)
{
    char name[64], path[4096];
    shard_name(s, k, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", s->outdir, name);
    sl_writer *w = NULL;
    sl_status st = sl_writer_open(path, &w);
    const synth_shard *sh = &s->shards[k];
    int64_t *widx = calloc((size_t)sh->count, sizeof(*widx));
    if (st == SL_OK && !widx)
        st = SL_E_NOMEM;
    if (st == SL_OK)
        st = sl_writer_set_metadata(w, "format", "pt");
    for (int64_t i = 0; st == SL_OK && i < sh->count; i++) {
        const sl_arch_tensor *t = &s->desc->tensors[s->tensors[sh->first + i]];
        st = sl_writer_add(w, t->name, tensor_dtype(s, t), t->ndim, t->shape, &widx[i]);
        if (st == SL_OK && json_object_set_new(wmap, t->name, json_string(name)) != 0)
            st = SL_E_NOMEM;
    }
    if (st == SL_OK)
        st = sl_writer_begin(w);
    for (int64_t i = 0; st == SL_OK && i < sh->count; i++)
        st = synth_fill_tensor(s, w, widx[i], &s->desc->tensors[s->tensors[sh->first + i]]);
    if (st == SL_OK && k == 0)
        st = synth_drop_stale(s);   /* the first rename ends the earlier output */
    if (st == SL_OK)
        st = sl_writer_finish(w);
    if (st != SL_OK && s->err.st == SL_OK)
        sl_err_set(&s->err, st, "%s", w ? sl_writer_errmsg(w) : "out of memory");
    free(widx);
    sl_writer_free(w);
    return st;
}

/* root as JSON text, written whole (sl_file_write_atomic): a crash leaves no half index or config. */
static sl_status synth_write_json(synth *s, const char *name, const json_t *root, size_t flags)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", s->outdir, name);
    char *text = root ? json_dumps(root, flags) : NULL;
    sl_status st = text ? sl_file_write_atomic(path, text, strlen(text), &s->err)
                        : sl_err_set(&s->err, SL_E_NOMEM, "%s: out of memory", path);
    free(text);
    return st;
}

static sl_status synth_write_index(synth *s, json_t *wmap)
{
    uint64_t total = 0;
    for (int64_t i = 0; i < s->n_tensors; i++)
        total += tensor_bytes(s, &s->desc->tensors[s->tensors[i]]);
    json_t *root = json_pack("{s:{s:I},s:O}", "metadata", "total_size", (json_int_t)total,
                             "weight_map", wmap);
    const sl_status st = synth_write_json(s, "model.safetensors.index.json", root,
                                          JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return st;
}

/* The config the shapes came from (as parsed, not the file read again, which may have changed or
 * been given as text), saying the dtype the files hold. */
static sl_status synth_write_config(synth *s)
{
    json_t *cfg = json_loads(s->desc->config_text, 0, NULL);
    const char *known = sl_tools_torch_dtype(s->dtype), *tname = known ? known : "float32";
    if (cfg && json_object_set_new(cfg, "torch_dtype", json_string(tname)) != 0) {
        json_decref(cfg);
        cfg = NULL;
    }
    const sl_status st = synth_write_json(s, "config.json", cfg, JSON_INDENT(2));
    json_decref(cfg);
    return st;
}

static sl_status synth_prepare(synth *s, const char *outdir, int32_t dtype)
{
    if (dtype < 0)
        dtype = s->desc->cfg.dtype >= 0 ? s->desc->cfg.dtype : SL_DTYPE_BF16;
    if (dtype != SL_DTYPE_BF16 && dtype != SL_DTYPE_F16 && dtype != SL_DTYPE_F32)
        return sl_err_set(&s->err, SL_E_INVALID_ARG, "synth writes bf16, f16 or f32, not %s",
                          sl_dtype_name((sl_dtype)dtype) ? sl_dtype_name((sl_dtype)dtype) : "?");
    s->dtype = (sl_dtype)dtype;
    SL_TRY(sl_tools_make_dir(outdir, &s->made_outdir, &s->err));
    s->tensors = calloc((size_t)s->desc->n_tensors + 1, sizeof(*s->tensors));
    s->chunk = malloc(SYNTH_CHUNK_ELEMS * 4);
    s->fchunk = malloc(SYNTH_CHUNK_ELEMS * sizeof(float));
    if (!s->tensors || !s->chunk || !s->fchunk)
        return sl_err_set(&s->err, SL_E_NOMEM, "out of memory");
    sl_arch_each_checkpoint_tensor(s->desc, collect_tensor, s);
    return SL_OK;
}

/* The index and config.json are written last. Ones left by an earlier run would load something
 * else than this run wrote: an old index shadows a single model.safetensors, and a failed run's mix
 * of new and old shards would look complete. Both go, with the earlier run's SHA256SUMS (it would
 * call the new shards corrupt), just before the first shard is renamed into place: a run that
 * fails before then leaves the earlier output whole (the config is held as text, so even one read
 * from outdir/config.json). */
static sl_status synth_drop_stale(synth *s)
{
    static const char *const names[] = {"model.safetensors.index.json", "config.json", SL_TOOLS_MANIFEST};
    return sl_tools_remove_stale_names(s->outdir, NULL, names, sizeof names / sizeof names[0], &s->err);
}

/* Bytes the shards take (data plus a generous header per tensor), against the free space: a config
 * of absurd but accepted sizes is refused here instead of being written until the disk is full.
 * Shards of the same names that the run replaces count as free, but the largest of them: each is
 * replaced when its new shard is complete, so one old shard and its new one are on disk together. */
#define SYNTH_HEADER_PER_TENSOR 512u

static sl_status synth_check_space(synth *s)
{
    uint64_t need = 0, reclaimed = 0, largest = 0;
    for (int64_t i = 0; i < s->n_tensors; i++)   /* each below 2^44 bytes (sl_arch_load's bound) */
        need += tensor_bytes(s, &s->desc->tensors[s->tensors[i]]) + SYNTH_HEADER_PER_TENSOR;
    for (int64_t k = 0; k < s->n_shards; k++) {
        char name[64], path[4096];
        shard_name(s, k, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/%s", s->outdir, name);
        const uint64_t old = sl_tools_file_size(path);
        reclaimed += old;
        largest = old > largest ? old : largest;
    }
    return sl_tools_check_space(s->outdir, need, reclaimed - largest, &s->err);
}

/* The temporary files of shards of this run's names that a run which died left (writer.h). */
static int synth_ours(void *user, const char *name)
{
    const synth *s = user;
    long long k = 0, n = 0;
    int end = 0;
    if (s->n_shards == 1)
        return strcmp(name, "model.safetensors") == 0;
    return sscanf(name, "model-%5lld-of-%5lld.safetensors%n", &k, &n, &end) == 2 && name[end] == '\0' &&
           n == s->n_shards && k >= 1 && k <= n;
}

/* A *.safetensors in outdir that this run would not write belongs to another checkpoint (another
 * synth's of another shard count, or any other), and the run is refused before anything is
 * written. A one-shard run writes no index, and a folder without one loads every *.safetensors
 * in it: beside such a file it would not load (a tensor in two files). With shards, the run would
 * have replaced that checkpoint's index and config, orphaning its shards. */
static sl_status synth_check_outdir(synth *s)
{
    DIR *d = opendir(s->outdir);
    if (!d)
        return SL_OK;   /* a new folder, or checked by the writes */
    const struct dirent *de;
    char nb[SL_TEXT_NAME];
    sl_status st = SL_OK;
    while (st == SL_OK && (de = readdir(d)) != NULL) {
        const size_t n = strlen(de->d_name), k = sizeof(".safetensors") - 1;
        if (n <= k || strcmp(de->d_name + n - k, ".safetensors") != 0 || synth_ours(s, de->d_name))
            continue;
        if (s->n_shards == 1)
            st = sl_err_set(&s->err, SL_E_INVALID_ARG, "%s: holds %s, beside which this synth's one "
                            "model.safetensors (no index) would not load: remove it, write to another "
                            "folder, or give a --max-shard-size that makes shards and an index; nothing "
                            "was written", s->outdir, sl_text_name(de->d_name, nb, sizeof nb));
        else
            st = sl_err_set(&s->err, SL_E_INVALID_ARG, "%s: holds %s, a file of another checkpoint "
                            "(or of an earlier synth of another shard count; this one writes %lld "
                            "shards and their index over what is there): remove it or write to "
                            "another folder; nothing was written", s->outdir,
                            sl_text_name(de->d_name, nb, sizeof nb), (long long)s->n_shards);
    }
    closedir(d);
    return st;
}

/* A failed run (no space, an error, sl_cancel) leaves nothing it made: the shards it finished and
 * the index (config.json comes last: a failed run wrote none), and outdir if it created it. */
static void synth_undo(synth *s)
{
    char name[64], path[4096];
    for (int64_t k = 0; k < s->n_written; k++) {
        shard_name(s, k, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/%s", s->outdir, name);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", s->outdir);
    if (s->n_written == s->n_shards && s->n_shards > 1)
        unlink(path);
    sl_tools_unmake_dir(s->outdir, s->made_outdir);   /* kept if anything else was put there */
}

static sl_status synth_run(synth *s, uint64_t max_shard)
{
    SL_TRY(synth_split(s, max_shard));
    SL_TRY(synth_check_outdir(s));
    SL_TRY(synth_check_space(s));
    SL_TRY(ck_writer_remove_stale(s->outdir, synth_ours, s, &s->err));
    json_t *wmap = json_object();
    if (!wmap)
        return sl_err_set(&s->err, SL_E_NOMEM, "out of memory");
    sl_status st = SL_OK;
    for (int64_t k = 0; st == SL_OK && k < s->n_shards; k++)
        if ((st = synth_write_shard(s, k, wmap)) == SL_OK)
            s->n_written = k + 1;
    if (st == SL_OK && s->n_shards > 1)
        st = synth_write_index(s, wmap);
    json_decref(wmap);
    if (st == SL_OK)
        st = synth_write_config(s);
    return st;
}

sl_status sl_synth_opts(const sl_plan_opts *po, const char *outdir, uint64_t seed, uint64_t max_shard_bytes,
                        char *err, size_t errlen)
{
    synth s = {0};
    sl_arch *desc = NULL;
    s.seed = seed;
    s.outdir = outdir;
    sl_status st = SL_OK;
    if (!po || !outdir || (!po->config_path && !po->config_json))
        st = sl_err_set(&s.err, SL_E_INVALID_ARG, "sl_synth: %s", !po || !outdir ? "NULL argument"
                        : "no config: set config_path or config_json");
    if (st == SL_OK) {
        const sl_arch_source src = {.path = po->config_path ? po->config_path : SL_CONFIG_MEMORY_NAME,
                                    .text = po->config_json, .len = po->config_json_len};
        st = sl_arch_load_source(&src, po->rules_path, &s.err, &desc);
    }
    s.desc = desc;
    if (st == SL_OK)
        st = synth_prepare(&s, outdir, po->dtype);
    if (st == SL_OK)
        st = synth_run(&s, max_shard_bytes ? max_shard_bytes : SYNTH_DEFAULT_SHARD);
    if (st != SL_OK)
        synth_undo(&s);
    sl_err_export(&s.err, err, errlen);
    sl_err_clear(&s.err);
    free(s.tensors);
    free(s.shards);
    free(s.chunk);
    free(s.fchunk);
    sl_arch_free(desc);
    return st;
}

sl_status sl_synth(const char *config_path, const char *rules_path, const char *outdir, int32_t dtype,
                   uint64_t seed, uint64_t max_shard_bytes, char *err, size_t errlen)
{
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.config_path = config_path;
    po.rules_path = rules_path;
    po.dtype = dtype;
    return sl_synth_opts(&po, outdir, seed, max_shard_bytes, err, errlen);
}
