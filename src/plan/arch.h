/* arch.h - a model's architecture as the planner sees it: the config's sizes (H, nh, K, D, I, V, L,
 * and the symbols a table declares from other config keys) and the rule table of its architecture,
 * instantiated into the list of checkpoint tensors the config implies. Used by the planner and by
 * `synth` (which writes exactly these tensors).
 *
 * A rule table (docs/rules.md) maps checkpoint names, with {i} for the layer and {e} for a routed
 * expert, to the parameters of the layout, with a shape in config symbols, a sharding kind, a
 * placement and the layers (all, dense or mixture-of-experts) it applies to. */
#ifndef SL_ARCH_H
#define SL_ARCH_H

#include "shardload.h"

#include "common/sl_arena.h"
#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

#define SL_RULE_MAX_DIMS 2
#define SL_GROUP_MAX_SLOTS 8
#define SL_ARCH_MAX_SYMS 16
#define SL_ARCH_SYM_LEN 8

typedef enum sl_shard_kind {
    SL_SHARD_REPLICATED = 0,  /* full copy on every device */
    SL_SHARD_COLUMN,          /* dim 0 split in T blocks */
    SL_SHARD_ROW,             /* dim 1 split in T blocks (row-strided source); 1-D: replicated */
    SL_SHARD_VOCAB,           /* dim 0 padded to a multiple of 64, split, zero rows at the end */
    SL_SHARD_QKV,             /* slot q/k/v of a fused [q_r; k_r; v_r] parameter */
    SL_SHARD_MERGED,          /* slot j of a fused [w0_r; w1_r; ...] parameter */
    SL_SHARD_CONCAT           /* slot j of a replicated fused [w0; w1; ...] (DeepSeek fused_qkv_a_proj) */
} sl_shard_kind;

typedef enum sl_place { SL_PLACE_LAYER = 0, SL_PLACE_FIRST, SL_PLACE_LAST } sl_place;

/* The layers a per-layer rule applies to. A layer is an MoE layer when the table's "moe" entry
 * says so for the config (arch_moe.c); every other layer is dense. */
typedef enum sl_layers { SL_LAYERS_ALL = 0, SL_LAYERS_DENSE, SL_LAYERS_MOE } sl_layers;

/* What a rule arch_quant.c adds beside an FP8 weight is (SHARDING-MOE-FP8.md, "FP8 checkpoints"). */
typedef enum sl_scale_kind {
    SL_SCALE_NONE = 0,        /* not a scale: a table rule */
    SL_SCALE_BLOCK,           /* [cdiv(out, bn), cdiv(in, bk)], sliced in blocks as the weight */
    SL_SCALE_TENSOR,          /* weight_scale [] or [1]: one element per slot, never sliced */
    SL_SCALE_CHANNEL,         /* weight_scale [out, 1]: rows as the weight's; a row layer's whole */
    SL_SCALE_INPUT            /* static input_scale [] or [1]: as SL_SCALE_TENSOR */
} sl_scale_kind;

/* The FP8 scheme of a quantization_config (arch_quant.c). */
typedef enum sl_quant_scheme { SL_QUANT_BLOCK = 0, SL_QUANT_TENSOR, SL_QUANT_CHANNEL } sl_quant_scheme;

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
    int all_stages;           /* a first or last rule placed on every pipeline stage ("stages": "all") */
    int32_t group;            /* index of the tp parameter (rules with the same param pattern) */
    int32_t ord;              /* position among the rules of the same placement */
    sl_layers layers;         /* per-layer rules: which layers have the tensor */
    int expert;               /* the name has {e}: one tensor per routed expert, stacked into a
                                 parameter [El, ...] in layout tp */
    const uint8_t *at_layer;  /* per-layer rules: NULL, or the layers that have this form of the
                                 tensor (at_layer[l] != 0): a rule quantization_config ignores in
                                 some layers only is two, its FP8 form and its model-dtype
                                 twin, as vLLM quantizes each layer's module as listed
                                 (arch_quant.c) */
    int quant_twin;           /* that model-dtype twin: its own parameter group */
    int32_t dtype;            /* the parameter's sl_dtype: -1 the plan's; F8_E4M3 for an FP8
                                 weight; F32 for its scale */
    int32_t scale_of;         /* a scale rule (arch_quant.c): the rule of its weight; else -1 */
    sl_scale_kind scale_kind; /* SL_SCALE_NONE unless scale_of >= 0 */
    int no_quant;             /* "quant": false: never quantized (routers) */
    int optional;             /* "otherwise": "optional" where "when"/"unless" would leave it out:
                                 a parameter only where the checkpoint has its tensor (vLLM's
                                 Qwen2-MoE makes shared_expert_gate whatever the shared expert) */
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
    /* Symbols the rule table declares ("symbols": name -> config key), with the config's values
     * (0 allowed: a "when" rule is then absent). */
    int32_t n_syms;
    char sym_name[SL_ARCH_MAX_SYMS][SL_ARCH_SYM_LEN];
    const char *sym_key[SL_ARCH_MAX_SYMS];
    int64_t sym_val[SL_ARCH_MAX_SYMS];
    int64_t E;                    /* routed experts (the "moe" entry's symbol); 0: no MoE layers */
} sl_arch_config;

/* One checkpoint tensor the config implies. */
typedef struct sl_arch_tensor {
    const char *name;             /* arena */
    int32_t rule;
    int32_t layer;                /* -1 for first/last-stage tensors */
    int32_t expert;               /* routed expert of an {e} rule, else -1 */
    int32_t dtype;                /* the rule's dtype (-1: the model's) */
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
    /* Layers: layer_moe[l] is 1 for an MoE layer; a layer's tensors are
     * tensors[layer_start[l], layer_start[l + 1]) (L + 1 entries). Layers of one kind
     * (layer_kind[l], n_kinds of them) have the same rules: dense and MoE layers, each split
     * further where a rule has at_layer; kind_ord[rule * n_kinds + k] is the offset of a per-layer
     * rule's first tensor among a kind-k layer's tensors (an expert rule takes E places), -1 when
     * absent there. */
    uint8_t *layer_moe;
    int64_t *layer_start;
    int64_t n_moe_layers;
    uint8_t *layer_kind;
    int32_t n_kinds;
    int64_t *kind_ord;
    int has_moe;                  /* the table has a "moe" entry */
    int tp_at_most_experts;       /* "moe": T > E is an error (vLLM's Qwen2-MoE and Qwen3-MoE) */
    int64_t skip_extra_layers;    /* "skip_extra_layers": checkpoint layers [L, L + this) are
                                     skipped (DeepSeek's MTP); -1: every one from L on */
    char *config_text;            /* the config as parsed, dumped as JSON (json_dumps; freed by
                                     sl_arch_free unless a plan took it): what reshard and synth
                                     write beside their files, whatever the source (file, text) */
    struct {
        int on;                   /* quantization_config: an FP8 format */
        sl_quant_scheme scheme;
        uint64_t bn, bk;          /* SL_QUANT_BLOCK */
        const char *scale_suffix; /* "_scale_inv" (fp8 blocks) or "_scale" */
        int mismatch_ok;          /* fp8 blocks (vLLM's Fp8Config has weight_block_size): a fused
                                     layer with a slot not whole blocks skips the block check
                                     (linear.py, since 969bbc7c6); plan_mesh.c */
        int input_static;         /* static activations: an input_scale beside each weight */
        int scalar;               /* per-tensor scales are written [] (fp8), not [1] (synth) */
        const char **ignored;     /* ignored_layers / modules_to_not_convert (arena) */
        int64_t n_ignored;
    } quant;
} sl_arch;

/* A model's config.json: the file at path, or, when text is not NULL, len bytes of its JSON text
 * held in memory (not necessarily NUL-terminated, borrowed for the call), read by the same parser
 * under the same limits; path then only names it in messages. path is never NULL. */
typedef struct sl_arch_source {
    const char *path;
    const char *text;
    size_t len;
} sl_arch_source;

/* Reads the config and the rule table (rules_path, or the built-in one for architectures[0]),
 * checks the sizes (SL_E_CONFIG) and lists the tensors. Messages about the config name src->path.
 * On failure the message is in err and *out is NULL. */
sl_status sl_arch_load_source(const sl_arch_source *src, const char *rules_path, sl_err *err,
                              sl_arch **out);
/* sl_arch_load_source of the file config_path. */
sl_status sl_arch_load(const char *config_path, const char *rules_path, sl_err *err,
                             sl_arch **out);
void sl_arch_free(sl_arch *m);

/* Index into m->tensors of a rule's tensor at a layer and, for an {e} rule, expert e (layer
 * ignored for first/last rules, e for others); -1 when the rule has no tensor at that layer. */
int64_t sl_arch_tensor_index(const sl_arch *m, int32_t rule, int64_t layer, int64_t e);

/* Whether per-layer rule `rule` has tensors at layer l (first/last rules: 1); valid once the
 * table's "moe" is read, before the tensors are listed. */
int sl_arch_rule_at(const sl_arch *m, int32_t rule, int64_t layer);

/* Whether rule `rule` has a tensor at some layer. */
int sl_arch_rule_used(const sl_arch *m, int32_t rule);

/* pattern with every "{i}" replaced by layer (and "{e}" by e), in arena a; NULL when out of memory. */
const char *sl_arch_name_format(sl_arena *a, const char *pattern, int64_t layer, int64_t e);

/* Whether r is a per-tensor weight or input scale: one element a slot, [] or [1] in a checkpoint. */
int sl_arch_scale_scalar(const sl_rule *r);
/* Whether input-scale rule r is w3's of an expert (slot 1 of w13_input_scale): it fills nothing,
 * w1's does, and the two must be equal (plan_ckpt.c checks; synth writes them equal). */
int sl_arch_input_scale_dup(const sl_rule *r);

/* The tensors a checkpoint of this config holds (synth): tied-skip rules are left out when the
 * config ties embeddings. Calls fn once per tensor in m->tensors order. */
typedef void (*sl_arch_tensor_fn)(void *user, const sl_arch_tensor *t);
void sl_arch_each_checkpoint_tensor(const sl_arch *m, sl_arch_tensor_fn fn, void *user);

#endif /* SL_ARCH_H */
