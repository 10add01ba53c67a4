/* plan_ctx.h - state shared by the planner's files while one plan is built (not part of the plan
 * the loader sees). */
#ifndef SL_PLAN_CTX_H
#define SL_PLAN_CTX_H

#include "plan/arch.h"
#include "plan/plan_data.h"

/* A parameter of the layout: the rules (checkpoint tensors) that fill it. In layout tp a rule group;
 * in layout spmd one rule each (no fusing). */
typedef struct plan_tmpl {
    int32_t n_rules;
    int32_t rules[SL_GROUP_MAX_SLOTS];
    const char *param;            /* name pattern */
    sl_place place;
    int tied_also_last, tied_skip, all_stages;
    int expert;                   /* the rules have {e}: layout tp stacks the experts a rank holds
                                     into one parameter; layout spmd keeps one per expert */
    int32_t dtype;                /* the parameter's dtype, -1: the plan's */
    const char **names;           /* per layer (1 entry for first/last); spmd experts: per layer
                                     and expert, names[l * E + e]; arena */
} plan_tmpl;

/* Where a model tensor lives in the checkpoint. Without a checkpoint: index -1, offset 0 (ops
 * then carry offsets relative to the tensor), dtype the plan's. */
typedef struct plan_src {
    int64_t index;
    int32_t file;
    uint64_t offset;
    sl_dtype dtype;
} plan_src;

/* What messages call a config given as text (sl_plan_opts.config_json) without a config_path. */
#define SL_CONFIG_MEMORY_NAME "config.json (in memory)"

typedef struct plan_ctx {
    sl_plan *p;
    const sl_arch *m;
    const sl_checkpoint *ck;
    const char *config_path;      /* the config.json read, or the name of the text in memory
                                     (arena): messages about it name it */
    const char *rules_path;       /* the --rules table, or NULL for the built-in one (borrowed for
                                     the build): a message the table's sizes cause names it too */
    plan_src *src;                /* per m->tensors entry */
    plan_tmpl *tmpl;
    int32_t n_tmpl;
} plan_ctx;

/* plan_build.c: whether expert parallelism changes any byte of the plan: the model has MoE layers
 * and tp > 1 (at tp 1 the one rank of a stage holds every expert whole either way). When it does
 * not, the plan is the one without it (p->ep 0), and pre-sharded files' "ep" stamp is not
 * compared. */
int sl_plan_ep_matters(const plan_ctx *c);
/* plan_mesh.c: the mesh against the config (divisibility, T > E, pp > L, or a pp_partition's
 * sum against L); messages name the config. */
sl_status sl_plan_check_mesh(plan_ctx *c, const sl_plan_opts *o);
/* plan_mesh.c: sl_plan_opts.pp_partition before the config is read (SL_E_INVALID_ARG): one
 * entry per stage, none negative, layout tp. */
sl_status sl_plan_check_partition(sl_plan *p, const sl_plan_opts *o);
/* plan_mesh.c: vocab size padded to a multiple of 64 (vLLM's VocabParallelEmbedding). */
uint64_t sl_plan_vocab_padded(uint64_t v);
/* plan_tmpl.c: each pipeline stage's first layer, c->p->stage_start[0..pp] (vLLM
 * get_pp_indices): from partition (pp entries, none negative: sl_plan_check_partition; summing to
 * L: sl_plan_check_mesh) when not NULL, else vLLM's default split. */
sl_status sl_plan_stages_split(plan_ctx *c, const int32_t *partition);
/* plan_tmpl.c: c->tmpl, the parameter templates and their names. */
sl_status sl_plan_tmpl_build(plan_ctx *c);
/* plan_tmpl.c: the routed experts tp rank `rank` holds, [*first, *first + *count): all of them
 * without EP, else vLLM's contiguous ranges (the first E % T ranks one more). */
void sl_plan_expert_range(const plan_ctx *c, int32_t rank, int64_t *first, int64_t *count);
/* plan_tmpl.c: the parameters template t has per layer: E for experts under layout spmd (one per
 * expert, under the checkpoint names), else 1. */
int64_t sl_plan_tmpl_per_layer(const plan_ctx *c, const plan_tmpl *t);
/* plan_tmpl.c: the name of template t's parameter at a layer (and expert, for spmd experts). */
const char *sl_plan_tmpl_name(const plan_ctx *c, const plan_tmpl *t, int64_t layer, int64_t e);
/* plan_tmpl.c: whether a template placed first or last has a parameter on pipeline stage
 * `stage` (ties included). Per-layer templates are on every stage, for the stage's layers. */
int sl_plan_tmpl_on_stage(const plan_ctx *c, const plan_tmpl *t, int32_t stage);
/* plan_build.c: the dimension layout spmd tiles a rule's tensor along (0 or 1), -1 for whole. */
int sl_plan_spmd_tile_dim(const sl_rule *r);
/* plan_build.c: layout spmd's tile of rule r along dim over N devices: ceil(dim/N), and for a
 * block scale the blocks its weight's tile covers. */
uint64_t sl_plan_spmd_tile(const plan_ctx *c, const sl_rule *r, int dim, uint64_t N);
/* plan_bound.c: refuses (SL_E_NOMEM, naming the config and the figures) a plan whose parameters,
 * operations and per-file totals would take more than SL_PLAN_MAX_BYTES, from the config and the
 * mesh alone, before anything is allocated for it. */
sl_status sl_plan_check_size(plan_ctx *c);
/* The same bound for a plan from boxes, once their operations are counted. */
sl_status sl_plan_check_box_size(sl_plan *p, uint64_t boxes, uint64_t ops, uint64_t files);

/* plan_ckpt.c: binds checkpoint tensors to model tensors and enforces the strictness rules. */
sl_status sl_plan_bind_checkpoint(plan_ctx *c);
/* plan_presharded.c: operations for a pre-sharded directory (sl_checkpoint_file_rank >= 0): each
 * parameter one copy of its own device's tensor. Replaces the ops devices_build made. */
sl_status sl_plan_bind_presharded(plan_ctx *c);
/* plan_tied.c: the names a tied embedding is planned and stored under (sl_plan.tied_*). */
sl_status sl_plan_tied_names(sl_plan *p, const sl_arch *m);
/* plan_totals.c: sorts each device's ops, fills file_bytes and read_bytes. */
sl_status sl_plan_finish(plan_ctx *c);

/* A dtype a plan converts to, or -1 (none: the config's, or each tensor's own). */
static inline int sl_plan_is_target(int32_t dtype)
{
    return dtype == -1 || dtype == SL_DTYPE_F32 || dtype == SL_DTYPE_F16 || dtype == SL_DTYPE_BF16;
}

#endif /* SL_PLAN_CTX_H */
