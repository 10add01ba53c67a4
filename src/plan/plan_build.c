/* plan_build.c - sl_plan_build: for each device of the mesh, the parameters it holds (packed back to
 * back) and the copy/zero operations that fill them, following SHARDING.md.
 *
 * The plan is built in two walks over the same code: the first counts parameters and operations
 * per device, the second fills arrays allocated once at the exact size (STYLE.md rule 10). */
#include "plan/plan_ctx.h"

#include "common/sl_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SL_PLAN_MAX_DEVICES 65536

/* ---- shard math ------------------------------------------------------------------------------- */

/* One rectangle of a source tensor viewed as [R, C] (1-D: [R, 1]) placed at row dst_row of a
 * parameter viewed as [Pr, Pc], column 0. */
typedef struct piece {
    uint64_t R, C;
    uint64_t r0, r1, c0, c1;
    uint64_t dst_row;
} piece;

typedef struct param_ctx {
    plan_ctx *c;
    sl_plan_device *dev;
    int64_t pidx;
    uint64_t offset;              /* of the parameter in the device buffer */
    uint64_t Pr, Pc;              /* parameter as a 2-D view */
    const plan_tmpl *t;
    int64_t layer;
    int64_t expert;               /* spmd: the expert of an {e} template's parameter */
    int32_t rank, n;              /* tp rank (spmd: device) and tp size (spmd: N); for the slices
                                     of an expert under EP, 0 and 1 */
    sl_dtype dt;                  /* the parameter's dtype */
} param_ctx;

static uint64_t dtype_size(sl_dtype dt)
{
    return sl_dtype_bits(dt) / 8;
}

static sl_op *op_next(param_ctx *pc)
{
    sl_plan_device *d = pc->dev;
    sl_op *op = d->ops ? &d->ops[d->n_ops] : NULL;
    d->n_ops++;
    if (op) {
        memset(op, 0, sizeof(*op));
        op->param = pc->pidx;
    }
    return op;
}

static void emit_zero(param_ctx *pc, uint64_t dst_elem, uint64_t elems)
{
    if (elems == 0)
        return;
    sl_op *op = op_next(pc);
    if (op == NULL)
        return;
    const uint64_t esz = dtype_size(pc->dt);
    op->kind = SL_OP_ZERO;
    op->src_dtype = pc->dt;
    op->file = -1;
    op->tensor = -1;
    op->dst_offset = pc->offset + dst_elem * esz;
    op->dst_stride = elems * esz;
    op->rows = 1;
    op->row_elems = elems;
}

static void emit_copy(param_ctx *pc, const plan_src *s, const piece *q)
{
    const uint64_t rows = q->r1 - q->r0, w = q->c1 - q->c0;
    if (rows == 0 || w == 0)
        return;
    sl_op *op = op_next(pc);
    if (op == NULL)
        return;
    const uint64_t es = dtype_size(s->dtype), ed = dtype_size(pc->dt);
    op->kind = SL_OP_COPY;
    op->src_dtype = s->dtype;
    op->file = s->file;
    op->tensor = s->index;
    op->src_offset = s->offset + (q->r0 * q->C + q->c0) * es;
    op->dst_offset = pc->offset + q->dst_row * pc->Pc * ed;
    if (w == q->C && w == pc->Pc) {   /* whole rows on both sides: one contiguous run */
        op->rows = 1;
        op->row_elems = rows * w;
        op->src_stride = rows * w * es;
        op->dst_stride = rows * w * ed;
    } else {
        op->rows = rows;
        op->row_elems = w;
        op->src_stride = q->C * es;
        op->dst_stride = pc->Pc * ed;
    }
}

static void rule_rc(const sl_rule *r, uint64_t *R, uint64_t *C)
{
    *R = r->shape[0];
    *C = r->ndim == 2 ? r->shape[1] : 1;
}

static uint64_t tp_weight_rows(const param_ctx *pc, const sl_rule *r, uint64_t *kv_block);

/* Layout tp: rows of the parameter contributed by slot j, and where they start (kv_block: the
 * source block of the slot's rows). A block-scale rule's rows are its weight's in blocks of bn,
 * cdiv(rows, bn) a slot, as vLLM counts them (adjust_block_scale_shard): plan_mesh.c checked that
 * they tile the parameter where a slot straddles blocks. */
static uint64_t tp_slot_rows(const param_ctx *pc, const sl_rule *r, uint64_t *kv_block)
{
    const uint64_t bn = pc->c->m->quant.bn;
    switch (r->scale_kind) {
    case SL_SCALE_NONE:
    case SL_SCALE_CHANNEL: return tp_weight_rows(pc, r, kv_block);
    case SL_SCALE_BLOCK:
        return (tp_weight_rows(pc, &pc->c->m->rules[r->scale_of], kv_block) + bn - 1) / bn;
    case SL_SCALE_TENSOR: return 1;
    case SL_SCALE_INPUT: return sl_arch_input_scale_dup(r) ? 0 : 1;
    }
    return 0;
}

static uint64_t tp_weight_rows(const param_ctx *pc, const sl_rule *r, uint64_t *kv_block)
{
    const sl_arch_config *cfg = &pc->c->m->cfg;
    const uint64_t T = (uint64_t)pc->n, D = (uint64_t)cfg->D, K = (uint64_t)cfg->K;
    const uint64_t kl = T <= K ? K / T : 1, rep = T <= K ? 1 : T / K;
    *kv_block = (uint64_t)pc->rank;
    switch (r->shard) {
    case SL_SHARD_QKV:
        if (r->slot == 0)
            return (uint64_t)cfg->nh / T * D;
        *kv_block = (uint64_t)pc->rank / rep;
        return kl * D;
    case SL_SHARD_COLUMN:
    case SL_SHARD_MERGED: return r->shape[0] / T;
    case SL_SHARD_VOCAB: return sl_plan_vocab_padded(r->shape[0]) / T;
    case SL_SHARD_REPLICATED:
    case SL_SHARD_CONCAT:
    case SL_SHARD_ROW: return r->shape[0];
    }
    return 0;
}

/* A weight's piece in blocks: the scale entries of the blocks it covers (SHARDING-MOE-FP8.md:
 * slot rows [s*nb, (s+1)*nb) for source block s, row-layer columns [r*kb, (r+1)*kb)). s*nb, not
 * the piece's first row / bn: where a slot straddles blocks vLLM's loader still reads nb rows
 * from s*nb (linear.py, adjust_block_scale_shard and load_merged_column_weight). */
static void piece_to_blocks(const plan_ctx *c, const sl_rule *scale, uint64_t s, piece *q)
{
    const uint64_t bn = c->m->quant.bn, bk = c->m->quant.bk;
    const uint64_t rows = (q->r1 - q->r0 + bn - 1) / bn, cols = (q->c1 - q->c0 + bk - 1) / bk;
    rule_rc(scale, &q->R, &q->C);
    q->r0 = s * rows;
    q->r1 = q->r0 + rows;
    q->c0 /= bk;
    q->c1 = q->c0 + cols;
}

/* A per-tensor scale: its one element, never sliced (the slot's scalar); the second of an
 * expert's w1/w3 input scales writes nothing (vLLM's w13_input_scale has one per expert: the
 * planner checked the two equal). */
static void tp_scalar_ops(param_ctx *pc, const sl_rule *r, const plan_src *s, uint64_t dst_row)
{
    if (sl_arch_input_scale_dup(r))
        return;
    const piece q = {.R = 1, .C = 1, .r1 = 1, .c1 = 1, .dst_row = dst_row};
    emit_copy(pc, s, &q);
}

static void tp_rule_ops(param_ctx *pc, const sl_rule *r, const plan_src *s, uint64_t dst_row)
{
    if (sl_arch_scale_scalar(r)) {
        tp_scalar_ops(pc, r, s, dst_row);
        return;
    }
    const sl_rule *scale = r->scale_kind == SL_SCALE_BLOCK ? r : NULL;
    if (scale)
        r = &pc->c->m->rules[scale->scale_of];
    piece q = {0};
    uint64_t block = 0, src_block = 0;
    const uint64_t n = tp_weight_rows(pc, r, &block);
    rule_rc(r, &q.R, &q.C);
    q.dst_row = dst_row;
    q.c1 = q.C;
    q.r1 = q.R;
    if (r->shard == SL_SHARD_ROW && r->ndim == 2) {
        const uint64_t w = q.C / (uint64_t)pc->n;
        q.c0 = (uint64_t)pc->rank * w;
        q.c1 = q.c0 + w;
    } else if (r->shard == SL_SHARD_VOCAB) {
        q.r0 = sl_min_u64((uint64_t)pc->rank * n, q.R);
        q.r1 = sl_min_u64(((uint64_t)pc->rank + 1) * n, q.R);
    } else if (r->shard != SL_SHARD_REPLICATED && r->shard != SL_SHARD_ROW &&
               r->shard != SL_SHARD_CONCAT) {
        q.r0 = block * n;
        q.r1 = q.r0 + n;
        src_block = block;
    }
    if (scale)
        piece_to_blocks(pc->c, scale, src_block, &q);
    emit_copy(pc, s, &q);
    if (r->shard == SL_SHARD_VOCAB)   /* padding rows are zero */
        emit_zero(pc, (dst_row + q.r1 - q.r0) * pc->Pc, (n - (q.r1 - q.r0)) * pc->Pc);
}

/* Layout spmd: GSPMD tile of dim 0 or 1 of size ceil(dim/N), zero padded; 1-D and replicated
 * tensors whole. */
int sl_plan_spmd_tile_dim(const sl_rule *r)
{
    if (r->ndim == 1 || r->shard == SL_SHARD_REPLICATED || r->shard == SL_SHARD_CONCAT)
        return -1;
    return r->shard == SL_SHARD_ROW ? 1 : 0;
}

uint64_t sl_plan_spmd_tile(const plan_ctx *c, const sl_rule *r, int dim, uint64_t N)
{
    if (r->scale_kind != SL_SCALE_BLOCK)
        return (r->shape[dim] + N - 1) / N;
    /* the blocks of the weight's tile: whole blocks when N > 1 (plan_mesh.c), all of them at N = 1 */
    const uint64_t b = dim == 0 ? c->m->quant.bn : c->m->quant.bk;
    const uint64_t t = (c->m->rules[r->scale_of].shape[dim] + N - 1) / N;
    return (t + b - 1) / b;
}

static void spmd_rule_ops(param_ctx *pc, const sl_rule *r, const plan_src *s)
{
    piece q = {0};
    rule_rc(r, &q.R, &q.C);
    q.r1 = q.R;
    q.c1 = q.C;
    const int dim = sl_plan_spmd_tile_dim(r);
    const uint64_t i = (uint64_t)pc->rank, N = (uint64_t)pc->n;
    const uint64_t t = dim >= 0 ? sl_plan_spmd_tile(pc->c, r, dim, N) : 0;
    if (dim == 0) {
        q.r0 = sl_min_u64(i * t, q.R);
        q.r1 = sl_min_u64((i + 1) * t, q.R);
        emit_copy(pc, s, &q);
        emit_zero(pc, (q.r1 - q.r0) * q.C, (t - (q.r1 - q.r0)) * q.C);
    } else if (dim == 1) {
        q.c0 = sl_min_u64(i * t, q.C);
        q.c1 = sl_min_u64((i + 1) * t, q.C);
        emit_copy(pc, s, &q);
        const uint64_t w = q.c1 - q.c0;
        for (uint64_t row = 0; row < q.R && w < t; row++)   /* the pad ends each row */
            emit_zero(pc, row * t + w, t - w);
    } else {
        emit_copy(pc, s, &q);
    }
}

/* The parameter's shape on this device. */
static void param_shape(const param_ctx *pc, sl_plan_param_t *pp)
{
    const sl_rule *r0 = &pc->c->m->rules[pc->t->rules[0]];
    pp->ndim = r0->ndim;
    pp->shape[0] = r0->shape[0];
    pp->shape[1] = r0->ndim == 2 ? r0->shape[1] : 0;
    const uint64_t N = (uint64_t)pc->n;
    if (pc->c->p->layout == SL_LAYOUT_SPMD) {
        const int dim = sl_plan_spmd_tile_dim(r0);
        if (dim >= 0)
            pp->shape[dim] = sl_plan_spmd_tile(pc->c, r0, dim, N);
        if (pc->c->m->quant.scalar && sl_arch_scale_scalar(r0))
            pp->ndim = 0;   /* AutoFP8's 0-d scale keeps its rank */
        return;
    }
    if (r0->shard == SL_SHARD_ROW && r0->ndim == 2) {
        if (r0->scale_kind == SL_SCALE_BLOCK) {   /* kb = cdiv(Ii, bk) of the weight's Ii */
            const uint64_t bk = pc->c->m->quant.bk;
            pp->shape[1] = (pc->c->m->rules[r0->scale_of].shape[1] / N + bk - 1) / bk;
        } else {
            pp->shape[1] /= N;
        }
        return;
    }
    uint64_t rows = 0, block = 0;
    for (int32_t k = 0; k < pc->t->n_rules; k++) {
        const sl_rule *r = &pc->c->m->rules[pc->t->rules[k]];
        rows += tp_slot_rows(pc, r, &block);
    }
    pp->shape[0] = rows;
}

/* Layout tp, an {e} template: [El, rows, cols] from the per-expert [rows, cols] of one expert's
 * slices (TP-sliced without EP, whole with it). */
static void expert_shape(const param_ctx *pc, const param_ctx *sub, sl_plan_param_t *pp)
{
    int64_t first = 0, count = 0;
    sl_plan_expert_range(pc->c, pc->rank, &first, &count);
    sl_plan_param_t one;
    param_shape(sub, &one);
    pp->shape[0] = (uint64_t)count;
    /* a scalar per expert (w2_weight_scale, the input scales) is [El], as vLLM has it */
    if (sl_arch_scale_scalar(&pc->c->m->rules[pc->t->rules[0]]) && one.shape[0] == 1) {
        pp->ndim = 1;
        return;
    }
    pp->ndim = one.ndim + 1;
    for (uint32_t k = 0; k < one.ndim; k++)
        pp->shape[k + 1] = one.shape[k];
}

/* The copies of every slot of every expert the rank holds: expert j's rows start at j * rows. */
static void expert_ops(param_ctx *pc, const param_ctx *sub)
{
    int64_t first = 0, count = 0;
    sl_plan_expert_range(pc->c, pc->rank, &first, &count);
    const sl_arch *m = pc->c->m;
    param_ctx q = *sub;
    q.pidx = pc->pidx;
    q.offset = pc->offset;
    q.Pc = pc->Pc;
    uint64_t dst_row = 0, block = 0;
    for (int64_t j = 0; j < count; j++) {
        for (int32_t k = 0; k < pc->t->n_rules; k++) {
            const int32_t ri = pc->t->rules[k];
            const sl_rule *r = &m->rules[ri];
            tp_rule_ops(&q, r, &pc->c->src[sl_arch_tensor_index(m, ri, pc->layer, first + j)], dst_row);
            dst_row += tp_slot_rows(&q, r, &block);
        }
    }
}

static sl_status param_emit(param_ctx *pc)
{
    sl_plan *p = pc->c->p;
    sl_plan_device *d = pc->dev;
    sl_plan_param_t tmp, *pp = d->params ? &d->params[d->n_params] : &tmp;
    const int stacked = pc->t->expert && p->layout == SL_LAYOUT_TP;
    param_ctx sub = *pc;
    if (stacked && p->ep) {   /* whole experts: slice as at T = 1 */
        sub.rank = 0;
        sub.n = 1;
    }
    memset(pp, 0, sizeof(*pp));
    pc->dt = pc->t->dtype >= 0 ? (sl_dtype)pc->t->dtype : p->dtype;
    sub.dt = pc->dt;
    pp->dtype = pc->dt;
    pp->name = sl_plan_tmpl_name(pc->c, pc->t, pc->layer, pc->expert);
    if (stacked)
        expert_shape(pc, &sub, pp);
    else
        param_shape(pc, pp);
    uint64_t nb = dtype_size(pc->dt);
    for (uint32_t k = 0; k < pp->ndim; k++)
        SL_CHECK(!sl_mul_overflow(nb, pp->shape[k], &nb), &p->err, SL_E_CONFIG,
                 "%s: parameter %s: size overflows", pc->c->config_path, pp->name);
    pp->nbytes = nb;
    pp->offset = d->bytes;
    SL_CHECK(!sl_add_overflow(d->bytes, nb, &d->bytes), &p->err, SL_E_CONFIG,
             "%s: device %d: size overflows", pc->c->config_path, (int)d->index);
    pc->pidx = d->n_params++;
    pc->offset = pp->offset;
    pc->Pr = pp->shape[0];
    pc->Pc = pp->ndim == (stacked ? 3u : 2u) ? pp->shape[pp->ndim - 1] : 1;
    if (stacked) {
        expert_ops(pc, &sub);
        return SL_OK;
    }
    uint64_t dst_row = 0, block = 0;
    for (int32_t k = 0; k < pc->t->n_rules; k++) {
        const int32_t ri = pc->t->rules[k];
        const sl_rule *r = &pc->c->m->rules[ri];
        const plan_src *s = &pc->c->src[sl_arch_tensor_index(pc->c->m, ri, pc->layer, pc->expert)];
        if (p->layout == SL_LAYOUT_SPMD) {
            spmd_rule_ops(pc, r, s);
        } else {
            tp_rule_ops(pc, r, s, dst_row);
            dst_row += tp_slot_rows(pc, r, &block);
        }
    }
    return SL_OK;
}

/* ---- devices ---------------------------------------------------------------------------------- */

/* An optional rule's parameter is there where the checkpoint has its tensor (a pre-sharded
 * folder: the parameter), at each layer on its own, as vLLM loads whichever it finds; a plan
 * without a checkpoint has none. */
static int tmpl_present(const plan_ctx *c, const plan_tmpl *t, int64_t layer)
{
    if (!c->m->rules[t->rules[0]].optional)
        return 1;
    if (c->ck == NULL)
        return 0;
    const int presharded = sl_checkpoint_file_rank(c->ck, 0) >= 0;
    const char *name = presharded ? sl_plan_tmpl_name(c, t, layer, 0)
                                  : c->m->tensors[sl_arch_tensor_index(c->m, t->rules[0], layer, 0)].name;
    return sl_checkpoint_find_tensor(c->ck, name) >= 0;
}

static sl_status device_walk(plan_ctx *c, sl_plan_device *d)
{
    param_ctx pc = {.c = c, .dev = d, .rank = d->tp_rank, .n = c->p->tp};
    d->n_params = d->n_ops = 0;
    d->bytes = 0;
    for (int pass = 0; pass < 3; pass++) {
        const sl_place place = pass == 0 ? SL_PLACE_FIRST : pass == 1 ? SL_PLACE_LAYER : SL_PLACE_LAST;
        const int64_t l0 = pass == 1 ? c->p->stage_start[d->pp_rank] : -1;
        const int64_t l1 = pass == 1 ? c->p->stage_start[d->pp_rank + 1] : 0;
        for (int64_t l = l0; l < l1; l++) {
            for (int32_t i = 0; i < c->n_tmpl; i++) {
                pc.t = &c->tmpl[i];
                pc.layer = l;
                if (pc.t->place != place ||
                    (place == SL_PLACE_LAYER ? !sl_arch_rule_at(c->m, pc.t->rules[0], l)
                                             : !sl_plan_tmpl_on_stage(c, pc.t, d->pp_rank)) ||
                    !tmpl_present(c, pc.t, l))
                    continue;
                /* layout spmd: one parameter per expert; layout tp stacks them in one */
                const int64_t ne = sl_plan_tmpl_per_layer(c, pc.t);
                for (pc.expert = 0; pc.expert < ne; pc.expert++)
                    SL_TRY(param_emit(&pc));
            }
        }
    }
    return SL_OK;
}

static sl_status devices_build(plan_ctx *c)
{
    sl_plan *p = c->p;
    p->devices = sl_arena_alloc(&p->arena, (size_t)p->n_devices * sizeof(*p->devices));
    SL_CHECK(p->devices != NULL, &p->err, SL_E_NOMEM, "out of memory");
    memset(p->devices, 0, (size_t)p->n_devices * sizeof(*p->devices));
    for (int32_t i = 0; i < p->n_devices; i++) {
        sl_plan_device *d = &p->devices[i];
        d->index = i;
        d->tp_rank = i % p->tp;
        d->pp_rank = i / p->tp;
        SL_TRY(device_walk(c, d));   /* count */
        d->params = sl_arena_alloc(&p->arena, (size_t)d->n_params * sizeof(*d->params) + 1);
        d->ops = sl_arena_alloc(&p->arena, (size_t)d->n_ops * sizeof(*d->ops) + 1);
        SL_CHECK(d->params && d->ops, &p->err, SL_E_NOMEM, "out of memory");
        SL_TRY(device_walk(c, d));   /* fill */
        SL_CHECK(!sl_add_overflow(p->total_bytes, d->bytes, &p->total_bytes), &p->err,
                 SL_E_CONFIG, "%s: the total size of the mesh's devices overflows", c->config_path);
    }
    return SL_OK;
}

/* ---- options and entry point ------------------------------------------------------------------ */

void sl_plan_opts_init(sl_plan_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof(*o));
    o->tp = 1;
    o->pp = 1;
    o->layout = SL_LAYOUT_TP;
    o->dtype = -1;
}

static sl_status opts_check(sl_plan *p, const sl_checkpoint *ck, const sl_plan_opts *o)
{
    SL_CHECK(o->tp >= 1 && o->pp >= 1, &p->err, SL_E_INVALID_ARG, "tp and pp must be at least 1");
    SL_CHECK((int64_t)o->tp * o->pp <= SL_PLAN_MAX_DEVICES, &p->err, SL_E_INVALID_ARG,
             "tp*pp is above %d devices", SL_PLAN_MAX_DEVICES);
    SL_CHECK(o->layout == SL_LAYOUT_TP || o->layout == SL_LAYOUT_SPMD, &p->err, SL_E_INVALID_ARG,
             "unknown layout %d", (int)o->layout);
    SL_CHECK(sl_plan_is_target(o->dtype),
             &p->err, SL_E_INVALID_ARG, "target dtype must be F32, F16 or BF16");
    SL_CHECK(o->config_json != NULL || o->config_json_len == 0, &p->err, SL_E_INVALID_ARG,
             "config_json_len is %zu but config_json is NULL", o->config_json_len);
    SL_CHECK(ck != NULL || o->config_path != NULL || o->config_json != NULL, &p->err,
             SL_E_INVALID_ARG, "a plan needs a checkpoint, a config path or a config text");
    SL_CHECK(o->ep == 0 || o->ep == 1, &p->err, SL_E_INVALID_ARG, "ep must be 0 or 1");
    SL_CHECK(!o->ep || o->layout == SL_LAYOUT_TP, &p->err, SL_E_INVALID_ARG,
             "expert parallelism (ep) applies to layout tp only (layout spmd keeps one tensor per "
             "expert)");
    SL_TRY(sl_plan_check_partition(p, o));
    p->ep = o->ep;
    p->layout = o->layout;
    p->tp = o->tp;
    p->pp = o->pp;
    p->n_devices = o->tp * o->pp;
    return SL_OK;
}

/* The config: o->config_json in memory, else the file config_path, else the checkpoint's
 * config.json. c->config_path is the name every message about it uses: for text in memory
 * config_path when given (the file it came from), else SL_CONFIG_MEMORY_NAME. */
static sl_status desc_load(plan_ctx *c, const sl_checkpoint *ck, const sl_plan_opts *o,
                           sl_arch **m)
{
    sl_plan *p = c->p;
    char *path = NULL;
    const char *cfg = o->config_path;
    if (cfg == NULL && o->config_json != NULL) {
        cfg = SL_CONFIG_MEMORY_NAME;
    } else if (cfg == NULL) {
        const char *dir = sl_checkpoint_dir(ck);
        const size_t n = strlen(dir) + sizeof("/config.json");
        path = malloc(n);
        SL_CHECK(path != NULL, &p->err, SL_E_NOMEM, "out of memory");
        snprintf(path, n, "%s/config.json", dir);
        cfg = path;
    }
    c->config_path = sl_arena_strndup(&p->arena, cfg, strlen(cfg));
    c->rules_path = o->rules_path;
    const sl_arch_source src = {.path = c->config_path, .text = o->config_json,
                                .len = o->config_json_len};
    const sl_status st = c->config_path ? sl_arch_load_source(&src, o->rules_path, &p->err, m)
                                        : sl_err_set(&p->err, SL_E_NOMEM, "out of memory");
    free(path);
    return st;
}

static sl_status plan_dtype(plan_ctx *c, const sl_plan_opts *o)
{
    sl_plan *p = c->p;
    const int32_t dt = o->dtype >= 0 ? o->dtype : c->m->cfg.dtype;
    SL_CHECK(dt >= 0, &p->err, SL_E_CONFIG, "%s: the config has no torch_dtype (or dtype): choose a dtype",
             c->config_path);
    p->dtype = (sl_dtype)dt;
    return SL_OK;
}

static sl_status sources_init(plan_ctx *c)
{
    c->src = sl_arena_alloc(&c->p->arena, (size_t)c->m->n_tensors * sizeof(*c->src));
    SL_CHECK(c->src != NULL, &c->p->err, SL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < c->m->n_tensors; i++) {   /* FP8 weights and scales: their own */
        const int32_t dt = c->m->tensors[i].dtype;
        c->src[i] = (plan_src){.index = -1, .file = -1, .offset = 0,
                               .dtype = dt >= 0 ? (sl_dtype)dt : c->p->dtype};
    }
    return SL_OK;
}

int sl_plan_ep_matters(const plan_ctx *c)
{
    return c->m->n_moe_layers > 0 && c->p->tp > 1;
}

static sl_status plan_build_impl(sl_plan *p, const sl_checkpoint *ck, const sl_plan_opts *o)
{
    plan_ctx c = {.p = p, .ck = ck};
    sl_arch *m = NULL;
    sl_status st = opts_check(p, ck, o);
    if (st == SL_OK)
        st = desc_load(&c, ck, o, &m);
    c.m = m;
    if (st == SL_OK) {
        p->tied = m->cfg.tied;
        p->config_text = m->config_text;   /* taken, not copied: the description goes before the plan */
        m->config_text = NULL;
        st = sl_plan_tied_names(p, m);
    }
    if (st == SL_OK) {
        st = plan_dtype(&c, o);
    }
    /* ep that changes no byte (a dense model, or tp 1) gives the plan without it: it stamped a
     * reshard's parts "with expert parallelism", which a load without --ep then refused */
    if (st == SL_OK && !sl_plan_ep_matters(&c))
        p->ep = 0;
    if (st == SL_OK)
        st = sl_plan_check_mesh(&c, o);
    if (st == SL_OK)
        st = sl_plan_stages_split(&c, o->pp_partition);
    if (st == SL_OK)
        st = sources_init(&c);
    if (st == SL_OK)
        st = sl_plan_tmpl_build(&c);
    if (st == SL_OK)
        st = sl_plan_check_size(&c);
    const int presharded = ck != NULL && sl_checkpoint_file_rank(ck, 0) >= 0;
    if (st == SL_OK && ck != NULL && !presharded)
        st = sl_plan_bind_checkpoint(&c);
    if (st == SL_OK)
        st = devices_build(&c);
    if (st == SL_OK && presharded)
        st = sl_plan_bind_presharded(&c);
    if (st == SL_OK)
        st = sl_plan_finish(&c);
    sl_arch_free(m);
    return st;
}

sl_status sl_plan_build(const sl_checkpoint *ck, const sl_plan_opts *o, sl_plan **out)
{
    sl_plan_opts dflt;
    if (out == NULL)
        return SL_E_INVALID_ARG;
    if (o == NULL) {
        sl_plan_opts_init(&dflt);
        o = &dflt;
    }
    *out = NULL;
    sl_plan *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return SL_E_NOMEM;
    p->read_bytes = UINT64_MAX;
    p->has_checkpoint = ck != NULL;
    *out = p;
    return plan_build_impl(p, ck, o);
}

void sl_plan_free(sl_plan *p)
{
    if (p == NULL)
        return;
    sl_err_clear(&p->err);
    sl_arena_free(&p->arena);
    free(p->config_text);
    free(p);
}
