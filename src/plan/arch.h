/* arch.h - a model's architecture as the planner sees it: the config's sizes (H, nh, K, D, I, V, L)
 * and the rule table of its architecture, instantiated into the list of checkpoint tensors the config
 * implies. Used by the planner and by `synth` (which writes exactly these tensors).
 *
 * A rule table (docs/rules.md) maps checkpoint names, with {i} for the layer, to the parameters of
 * the layout, with a shape in config symbols, a sharding kind and a placement. */
#ifndef SL_ARCH_H
#define SL_ARCH_H

#include "shardload.h"

#include "common/sl_arena.h"
#include "common/sl_err.h"

#include <stdint.h>

#define SL_RULE_MAX_DIMS 2
#define SL_GROUP_MAX_SLOTS 8

typedef enum sl_shard_kind {
    SL_SHARD_REPLICATED = 0,  /* full copy on every device */
    SL_SHARD_COLUMN,          /* dim 0 split in T blocks */
    SL_SHARD_ROW,             /* dim 1 split in T blocks (row-strided source); 1-D: replicated */
    SL_SHARD_VOCAB,           /* dim 0 padded to a multiple of 64, split, zero rows at the end */
    SL_SHARD_QKV,             /* slot q/k/v of a fused [q_r; k_r; v_r] parameter */
    SL_SHARD_MERGED           /* slot j of a fused [w0_r; w1_r; ...] parameter */
} sl_shard_kind;

typedef enum sl_place { SL_PLACE_LAYER = 0, SL_PLACE_FIRST, SL_PLACE_LAST } sl_place;

typedef struct sl_rule {
    const char *tensor;       /* checkpoint name pattern, {i} = layer (arena) */
    const char *param;        /* tp-layout parameter name pattern (arena) */
    const char *dim_expr[SL_RULE_MAX_DIMS];   /* the shape as written, for messages */
    uint64_t shape[SL_RULE_MAX_DIMS];         /* evaluated with the config */
    uint32_t ndim;
    sl_shard_kind shard;
    int32_t slot;             /* qkv: 0 q, 1 k, 2 v; merged: index; else 0 */
    sl_place place;
    int tied_also_last;       /* with tied embeddings also placed on the last stage */
    int tied_skip;            /* with tied embeddings not a parameter; the checkpoint's is skipped */
    int32_t group;            /* index of the tp parameter (rules with the same param pattern) */
    int32_t ord;              /* position among the rules of the same placement */
} sl_rule;

/* A tp-layout parameter: one rule, or the slots of a fused parameter, in slot order. */
typedef struct sl_rule_group {
    int32_t n_rules;
    int32_t rules[SL_GROUP_MAX_SLOTS];
} sl_rule_group;

typedef struct sl_arch_config {
    const char *architecture;     /* architectures[0] (arena) */
    int64_t H, nh, K, D, I, V, L;
    int tied;                     /* tie_word_embeddings */
    int32_t dtype;                /* sl_dtype of torch_dtype, -1 when absent */
} sl_arch_config;

/* One checkpoint tensor the config implies. */
typedef struct sl_arch_tensor {
    const char *name;             /* arena */
    int32_t rule;
    int32_t layer;                /* -1 for first/last-stage tensors */
    uint32_t ndim;
    const uint64_t *shape;        /* the rule's */
} sl_arch_tensor;

typedef struct sl_arch {
    sl_arena arena;
    sl_arch_config cfg;
    sl_rule *rules;
    int32_t n_rules;
    sl_rule_group *groups;
    int32_t n_groups;
    /* Every tensor of every rule, in a stable order: first-stage rules, then layer 0's rules,
     * layer 1's, ..., then last-stage rules, each in table order. Tied-skip rules are included
     * (flagged by the rule) so that the planner can recognise and skip them. */
    sl_arch_tensor *tensors;
    int64_t n_tensors;
    int32_t n_first, n_layer, n_last;   /* rules per placement */
} sl_arch;

/* Reads config_path and the rule table (rules_path, or the built-in one for architectures[0]),
 * checks the sizes (SL_E_CONFIG) and lists the tensors. On failure the message is in err and *out
 * is NULL. */
sl_status sl_arch_load(const char *config_path, const char *rules_path, sl_err *err,
                             sl_arch **out);
void sl_arch_free(sl_arch *m);

/* Index into m->tensors of a rule's tensor at a layer (layer ignored for first/last rules). */
int64_t sl_arch_tensor_index(const sl_arch *m, int32_t rule, int64_t layer);

/* pattern with every "{i}" replaced by layer, in arena a; NULL when out of memory. */
const char *sl_arch_name_format(sl_arena *a, const char *pattern, int64_t layer);

/* The tensors a checkpoint of this config holds (synth): tied-skip rules are left out when the
 * config ties embeddings. Calls fn once per tensor in m->tensors order. */
typedef void (*sl_arch_tensor_fn)(void *user, const sl_arch_tensor *t);
void sl_arch_each_checkpoint_tensor(const sl_arch *m, sl_arch_tensor_fn fn, void *user);

#endif /* SL_ARCH_H */
