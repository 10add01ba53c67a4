/* plan_mesh.c - whether a mesh fits a config (SHARDING.md, SHARDING-MOE-FP8.md): in layout tp every
 * dimension a rule splits divisible by T, heads first; for MoE models no more ranks than experts,
 * and the experts' own split only without expert parallelism (under EP experts are whole). Layout
 * spmd pads its tiles and needs only FP8 tiles of whole blocks. */
#include "plan/plan_ctx.h"
#include "plan/arch_config.h"

#include "common/sl_bytes.h"

#include <stdio.h>
#include <string.h>

#define SL_VOCAB_PAD 64

/* ---- mesh checks ------------------------------------------------------------------------------ */

/* "intermediate_size 14336" for a one-symbol dimension, else "dim 1 of <tensor> (nh*D = 4096)". */
static void dim_desc(const sl_arch_config *c, const sl_rule *r, uint32_t d, char *buf, size_t len)
{
    const int si = sl_arch_sym_find(c, r->dim_expr[d], strlen(r->dim_expr[d]));
    if (si >= 0) {   /* a table symbol: its config key */
        snprintf(buf, len, "%s %llu", c->sym_key[si], (unsigned long long)r->shape[d]);
        return;
    }
    static const char *const sym[] = {"H", "nh", "K", "D", "I", "V", "L"};
    static const char *const field[] = {"hidden_size", "num_attention_heads", "num_key_value_heads",
                                        "head_dim", "intermediate_size", "vocab_size",
                                        "num_hidden_layers"};
    for (size_t i = 0; i < sizeof(sym) / sizeof(sym[0]); i++) {
        if (strcmp(r->dim_expr[d], sym[i]) == 0) {
            snprintf(buf, len, "%s %llu", field[i], (unsigned long long)r->shape[d]);
            return;
        }
    }
    snprintf(buf, len, "dim %u of %s (%s = %llu)", d, r->tensor, r->dim_expr[d],
             (unsigned long long)r->shape[d]);
}

static sl_status check_dim(sl_plan *p, const sl_arch_config *c, const sl_rule *r, uint32_t d)
{
    char what[256];
    if (r->shape[d] % (uint64_t)p->tp == 0)
        return SL_OK;
    dim_desc(c, r, d, what, sizeof(what));
    return sl_err_set(&p->err, SL_E_DIVISIBILITY, "%s is not divisible by tp %d%s", what, (int)p->tp,
                      r->expert ? " (the routed experts' split; --ep keeps each expert whole)" : "");
}

uint64_t sl_plan_vocab_padded(uint64_t v)
{
    return (v + SL_VOCAB_PAD - 1) / SL_VOCAB_PAD * SL_VOCAB_PAD;
}

/* The dimension layout tp splits a rule along, -1 when it splits none (qkv: dim 0). */
static int split_dim(const sl_rule *r)
{
    switch (r->shard) {
    case SL_SHARD_REPLICATED:
    case SL_SHARD_CONCAT: return -1;
    case SL_SHARD_ROW: return r->ndim == 2 ? 1 : -1;
    case SL_SHARD_COLUMN:
    case SL_SHARD_MERGED:
    case SL_SHARD_VOCAB:
    case SL_SHARD_QKV: return 0;
    }
    return -1;
}

/* Whether a rule cuts attention heads: a qkv slot, or a split dimension with nh as a factor of a
 * term ("nh*D", DeepSeek MLA's "nh*dn+nh*dr" and "nh*dv", a --rules table's own). T dividing
 * such a dimension is not enough: with nh 6 at tp 4, 6*(16+8) rows split evenly and every rank
 * would hold a head and a half, which vLLM refuses (num_heads % tp_size). */
static int splits_heads(const sl_rule *r)
{
    if (r->shard == SL_SHARD_QKV)
        return 1;
    const int d = split_dim(r);
    if (d < 0)
        return 0;
    for (const char *s = r->dim_expr[d]; *s;) {   /* terms and factors, "nh*dn+nh*dr" */
        const size_t n = strcspn(s, "*+");
        if (n == 2 && memcmp(s, "nh", 2) == 0)
            return 1;
        s += n + (s[n] != '\0');
    }
    return 0;
}

static sl_status check_heads(sl_plan *p, const sl_arch_config *cfg)
{
    SL_CHECK(cfg->nh % p->tp == 0, &p->err, SL_E_DIVISIBILITY,
             "num_attention_heads %lld is not divisible by tp %d", (long long)cfg->nh, (int)p->tp);
    return SL_OK;
}

static sl_status check_rule_tp(sl_plan *p, const sl_arch_config *cfg, const sl_rule *r)
{
    const int64_t T = p->tp;
    if (r->expert && p->ep)   /* expert parallelism: each expert whole on one rank */
        return SL_OK;
    if (splits_heads(r))
        SL_TRY(check_heads(p, cfg));
    switch (r->shard) {
    case SL_SHARD_REPLICATED:
    case SL_SHARD_CONCAT: return SL_OK;
    case SL_SHARD_COLUMN:
    case SL_SHARD_MERGED: return check_dim(p, cfg, r, 0);
    case SL_SHARD_ROW: return r->ndim == 2 ? check_dim(p, cfg, r, 1) : SL_OK;
    case SL_SHARD_VOCAB:
        SL_CHECK(sl_plan_vocab_padded(r->shape[0]) % (uint64_t)T == 0, &p->err, SL_E_DIVISIBILITY,
                 "padded vocab size %llu (%s %llu rounded up to a multiple of 64) is not divisible "
                 "by tp %d", (unsigned long long)sl_plan_vocab_padded(r->shape[0]), r->dim_expr[0],
                 (unsigned long long)r->shape[0], (int)T);
        return SL_OK;
    case SL_SHARD_QKV:   /* heads checked above */
        SL_CHECK(cfg->K % T == 0 || T % cfg->K == 0, &p->err, SL_E_DIVISIBILITY,
                 "num_key_value_heads %lld is not divisible by tp %d, nor tp %d by it",
                 (long long)cfg->K, (int)T, (int)T);
        return SL_OK;
    }
    return SL_OK;
}

/* ---- FP8 block scales: vLLM's divisibility errors (fp8_utils.validate_fp8_block_shape and
 * Fp8MoEMethod.create_weights), each naming the parameter ------------------------------------- */

/* Rows of weight slot r on one rank: what the split leaves of dim 0. */
static uint64_t slot_rows(const plan_ctx *c, const sl_rule *r, int split)
{
    const sl_arch_config *cfg = &c->m->cfg;
    const uint64_t T = split ? (uint64_t)c->p->tp : 1, K = (uint64_t)cfg->K;
    if (r->shard == SL_SHARD_QKV)
        return r->slot == 0 ? (uint64_t)cfg->nh / T * (uint64_t)cfg->D
                            : (T <= K ? K / T : 1) * (uint64_t)cfg->D;
    return r->shard == SL_SHARD_COLUMN || r->shard == SL_SHARD_MERGED ? r->shape[0] / T : r->shape[0];
}

static sl_status check_fp8_expert(sl_plan *p, const plan_ctx *c, const sl_rule *r)
{
    const uint64_t bn = c->m->quant.bn, bk = c->m->quant.bk;
    const uint64_t T = p->ep ? 1 : (uint64_t)p->tp;
    if (r->shard == SL_SHARD_ROW) {
        const uint64_t ip = r->shape[1] / T;
        SL_CHECK(p->tp == 1 || ip % bk == 0, &p->err, SL_E_DIVISIBILITY,
                 "parameter '%s': The input_size of down's weight = %llu is not divisible by weight "
                 "quantization block_k = %llu.", r->param, (unsigned long long)ip, (unsigned long long)bk);
        return SL_OK;
    }
    const uint64_t ip = r->shape[0] / T;
    SL_CHECK(ip % bn == 0, &p->err, SL_E_DIVISIBILITY, "parameter '%s': The output_size of gate's "
             "and up's weight = %llu is not divisible by weight quantization block_n = %llu.",
             r->param, (unsigned long long)ip, (unsigned long long)bn);
    return SL_OK;
}

/* ---- fp8 fused layers whose slots straddle blocks ------------------------------------------------
 * vLLM's Fp8Config lets a merged or QKV layer with a slot that is not whole blocks a rank skip the
 * block check (linear.py _maybe_allow_fp8_block_shape_mismatch, since 969bbc7c6; compressed-tensors
 * has no weight_block_size on its config, so not there). Its loader still counts each slot's scale
 * in blocks of its own (adjust_block_scale_shard): slot j's nb_j = cdiv(s_j, bn) rows, from row
 * idx * nb_j of the checkpoint's scale (idx: the rank, or its kv-head block), at row cdiv(o_j, bn)
 * of a parameter of cdiv(S, bn) rows (o_j: the rows of the slots before j; S: all of them).
 * shardload copies the slots' block rows back to back, which is vLLM's result when they tile the
 * parameter (sum nb_j == cdiv(S, bn)). Otherwise a row falls past the end and vLLM's load fails,
 * or two slots write the same rows and they hold the slot read last, an order the checkpoint's
 * files decide: both refused. */

/* The highest source block a rank reads slot r from: its rank, a replicated k or v slot's kv-head
 * block (T > K), 0 for a layer that is not split. */
static uint64_t slot_source_max(const plan_ctx *c, const sl_rule *r, int split)
{
    const uint64_t T = (uint64_t)c->p->tp, K = (uint64_t)c->m->cfg.K;
    if (!split)
        return 0;
    return r->shard == SL_SHARD_QKV && r->slot > 0 && T > K ? K - 1 : T - 1;
}

static int slots_whole(const plan_ctx *c, const sl_rule_group *g, int split)
{
    for (int32_t k = 0; k < g->n_rules; k++) {
        if (slot_rows(c, &c->m->rules[g->rules[k]], split) % c->m->quant.bn != 0)
            return 0;
    }
    return 1;
}

/* Every rank's nb scale rows of slot r come from within the checkpoint's cdiv(rows, bn). */
static sl_status check_straddle_source(plan_ctx *c, const sl_rule *r, int split)
{
    const uint64_t bn = c->m->quant.bn, s = slot_rows(c, r, split), n = sl_cdiv_u64(s, bn);
    const uint64_t idx = slot_source_max(c, r, split), have = sl_cdiv_u64(r->shape[0], bn);
    SL_CHECK(n == 0 || idx < have / n, &c->p->err, SL_E_DIVISIBILITY, "parameter '%s': its slot "
             "'%s' holds %llu rows a rank, not a multiple of weight quantization block_n = %llu, so "
             "vLLM's Fp8Config skips its block check; its loader then reads the last rank's %llu scale "
             "rows from row %llu of the %llu (cdiv(%llu, %llu)) the checkpoint's scale has, and "
             "fails", r->param, r->tensor, (unsigned long long)s, (unsigned long long)bn, (unsigned long long)n,
             (unsigned long long)(idx * n), (unsigned long long)have,
             (unsigned long long)r->shape[0], (unsigned long long)bn);
    return SL_OK;
}

static sl_status check_fp8_straddle(plan_ctx *c, const sl_rule_group *g, int split)
{
    const uint64_t bn = c->m->quant.bn;
    uint64_t S = 0, nb = 0, end = 0;
    char sizes[160] = "";
    size_t len = 0;
    for (int32_t k = 0; k < g->n_rules; k++) {
        const sl_rule *r = &c->m->rules[g->rules[k]];
        const uint64_t s = slot_rows(c, r, split), at = sl_cdiv_u64(S, bn) + sl_cdiv_u64(s, bn);
        SL_TRY(check_straddle_source(c, r, split));
        end = end > at ? end : at;   /* the end of the rows vLLM writes it at */
        S += s;
        nb += sl_cdiv_u64(s, bn);
        if (len < sizeof sizes)
            len += (size_t)snprintf(sizes + len, sizeof sizes - len, "%s%llu", k ? " + " : "",
                                    (unsigned long long)s);
    }
    const sl_rule *r0 = &c->m->rules[g->rules[0]];
    const uint64_t rows = sl_cdiv_u64(S, bn);
    SL_CHECK(nb == rows, &c->p->err, SL_E_DIVISIBILITY, "parameter '%s': its slots hold %s "
             "rows a rank, not all multiples of weight quantization block_n = %llu, so vLLM's Fp8Config "
             "skips its block check; its loader then puts slot j's cdiv(rows, %llu) scale rows at row "
             "cdiv(offset, %llu), %llu rows in all where the parameter has cdiv(%llu, %llu) = %llu: %s",
             r0->param, sizes, (unsigned long long)bn, (unsigned long long)bn, (unsigned long long)bn,
             (unsigned long long)nb, (unsigned long long)S, (unsigned long long)bn,
             (unsigned long long)rows,
             end > rows ? "a row past the end fails its load"
                        : "two slots write the same rows, which then hold whichever the "
                          "checkpoint's files give last, so shardload cannot know them");
    return SL_OK;
}

static sl_status check_fp8_rule(plan_ctx *c, const sl_rule *r)
{
    sl_plan *p = c->p;
    const uint64_t bn = c->m->quant.bn, bk = c->m->quant.bk;
    if (r->expert)
        return check_fp8_expert(p, c, r);
    if (r->shard == SL_SHARD_ROW) {
        const uint64_t ii = r->shape[1] / (uint64_t)p->tp;
        SL_CHECK(p->tp == 1 || ii % bk == 0, &p->err, SL_E_DIVISIBILITY, "parameter '%s': Weight "
                 "input_size_per_partition = %llu is not divisible by weight quantization block_k = "
                 "%llu.", r->param, (unsigned long long)ii, (unsigned long long)bk);
        return SL_OK;
    }
    /* a TP-split layer: every slot; an unsplit one (T = 1, replicated, concat): all but the last */
    const int split = p->tp > 1 && (r->shard == SL_SHARD_COLUMN || r->shard == SL_SHARD_MERGED ||
                                    r->shard == SL_SHARD_QKV);
    const sl_rule_group *g = &c->m->groups[r->group];
    if (c->m->quant.mismatch_ok && g->n_rules > 1 && !slots_whole(c, g, split))
        return r == &c->m->rules[g->rules[0]] ? check_fp8_straddle(c, g, split) : SL_OK;
    const int last = r->slot == c->m->groups[r->group].n_rules - 1;
    const uint64_t o = slot_rows(c, r, split);
    SL_CHECK((!split && last) || o % bn == 0, &p->err, SL_E_DIVISIBILITY, "parameter '%s': Weight "
             "output_partition_size = %llu is not divisible by weight quantization block_n = %llu.",
             r->param, (unsigned long long)o, (unsigned long long)bn);
    return SL_OK;
}

static sl_status check_fp8(plan_ctx *c)
{
    if (!c->m->quant.on || c->m->quant.scheme != SL_QUANT_BLOCK)   /* only blocks constrain T */
        return SL_OK;
    for (int32_t i = 0; i < c->m->n_rules; i++) {
        const sl_rule *r = &c->m->rules[i];
        if (r->dtype == SL_DTYPE_F8_E4M3 && sl_arch_rule_used(c->m, i))
            SL_TRY(check_fp8_rule(c, r));
    }
    return SL_OK;
}

/* Layout spmd: an FP8 weight's tile along its tiled dimension is whole blocks, so that its block
 * scale tiles by the same blocks (SHARDING-MOE-FP8.md, "Layout spmd"). One device has one tile. */
static sl_status check_fp8_spmd(plan_ctx *c)
{
    sl_plan *p = c->p;
    const uint64_t N = (uint64_t)p->tp;
    if (!c->m->quant.on || c->m->quant.scheme != SL_QUANT_BLOCK || N == 1)
        return SL_OK;
    for (int32_t i = 0; i < c->m->n_rules; i++) {
        const sl_rule *r = &c->m->rules[i];
        const int dim = sl_plan_spmd_tile_dim(r);
        if (r->dtype != SL_DTYPE_F8_E4M3 || dim < 0 || !sl_arch_rule_used(c->m, i))
            continue;
        const uint64_t t = (r->shape[dim] + N - 1) / N, b = dim == 0 ? c->m->quant.bn : c->m->quant.bk;
        SL_CHECK(t % b == 0, &p->err, SL_E_DIVISIBILITY, "parameter '%s' (layout spmd, %d devices): "
                 "its tile of %llu %s is not a multiple of the weight quantization %s = %llu, so its "
                 "block scale cannot be tiled by the same blocks", r->tensor, (int)N,
                 (unsigned long long)t, dim == 0 ? "rows" : "columns", dim == 0 ? "block_n" : "block_k",
                 (unsigned long long)b);
    }
    return SL_OK;
}

/* ---- pipeline stages: an explicit partition (vLLM's VLLM_PP_LAYER_PARTITION) ----------------- */

/* "10,12,10" into buf; past 24 entries "10,12,...,10 (65536 entries)", as messages show it. */
static const char *partition_desc(const int32_t *v, int32_t n, char *buf, size_t len)
{
    enum { SHOWN = 24 };
    size_t at = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < n && at < len; i++) {
        if (n > SHOWN && i == SHOWN - 1) {   /* the last entry after the ellipsis */
            snprintf(buf + at, len - at, ",...,%d (%d entries)", (int)v[n - 1], (int)n);
            break;
        }
        const int w = snprintf(buf + at, len - at, "%s%d", i ? "," : "", (int)v[i]);
        at += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* What vLLM's get_pp_indices checks of the list before it knows the model's layers: one entry per
 * stage; and what it lets through, a negative entry (an empty range, the next stage's start before
 * its own), refused. Layout tp only, as pp is. */
sl_status sl_plan_check_partition(sl_plan *p, const sl_plan_opts *o)
{
    char d[256];
    SL_CHECK(o->pp_partition != NULL || o->n_pp_partition == 0, &p->err, SL_E_INVALID_ARG,
             "n_pp_partition is %d but pp_partition is NULL", (int)o->n_pp_partition);
    if (o->pp_partition == NULL)
        return SL_OK;
    SL_CHECK(o->layout == SL_LAYOUT_TP, &p->err, SL_E_INVALID_ARG,
             "pp_partition applies to layout tp only (layout spmd has no pipeline stages)");
    SL_CHECK(o->n_pp_partition == o->pp, &p->err, SL_E_INVALID_ARG,
             "pp_partition %s has %d entr%s but pp is %d: one entry (a count of layers) per "
             "pipeline stage", partition_desc(o->pp_partition, o->n_pp_partition, d, sizeof d),
             (int)o->n_pp_partition, o->n_pp_partition == 1 ? "y" : "ies", (int)o->pp);
    for (int32_t s = 0; s < o->n_pp_partition; s++)
        SL_CHECK(o->pp_partition[s] >= 0, &p->err, SL_E_INVALID_ARG,
                 "pp_partition %s: stage %d's entry %d is negative: a stage holds 0 or more layers",
                 partition_desc(o->pp_partition, o->n_pp_partition, d, sizeof d), (int)s,
                 (int)o->pp_partition[s]);
    return SL_OK;
}

/* The partition's layers against the config's, as vLLM checks them (sum(partitions) ==
 * num_hidden_layers); without one, vLLM's split needs a layer per stage. DeepSeek's MTP layers,
 * past L, belong to no stage: vLLM's main model makes num_hidden_layers layers. */
static sl_status check_stages(plan_ctx *c, const sl_plan_opts *o)
{
    sl_plan *p = c->p;
    const int64_t L = c->m->cfg.L;
    char d[256];
    if (o->pp_partition == NULL) {
        SL_CHECK(p->pp <= L, &p->err, SL_E_CONFIG, "pp %d is larger than num_hidden_layers %lld",
                 (int)p->pp, (long long)L);
        return SL_OK;
    }
    int64_t sum = 0;
    for (int32_t s = 0; s < o->n_pp_partition; s++)
        sum += o->pp_partition[s];
    if (sum == L)
        return SL_OK;
    char note[128] = "";
    if (c->m->skip_extra_layers > 0)
        snprintf(note, sizeof note, " (the %lld MTP layer%s past them, num_nextn_predict_layers, "
                 "on no stage)", (long long)c->m->skip_extra_layers,
                 c->m->skip_extra_layers == 1 ? "" : "s");
    return sl_err_set(&p->err, SL_E_CONFIG,
                      "pp_partition %s places %lld layers but num_hidden_layers is %lld%s",
                      partition_desc(o->pp_partition, o->n_pp_partition, d, sizeof d),
                      (long long)sum, (long long)L, note);
}

static sl_status check_mesh_impl(plan_ctx *c, const sl_plan_opts *o)
{
    sl_plan *p = c->p;
    const sl_arch_config *cfg = &c->m->cfg;
    SL_CHECK(p->layout != SL_LAYOUT_SPMD || p->pp == 1, &p->err, SL_E_INVALID_ARG,
             "layout spmd is a 1-D mesh: pp must be 1 (got %d)", (int)p->pp);
    SL_TRY(check_stages(c, o));
    /* layout spmd tiles each expert's tensor on its own (SHARDING-MOE-FP8.md), over any N */
    if (p->layout != SL_LAYOUT_TP)
        return check_fp8_spmd(c);
    /* vLLM's check, in qwen3_moe.py and qwen2_moe.py only (their tables ask for it): with or
     * without EP. Mixtral and DeepSeek take T > E: the experts cut along I, or under EP ranks
     * r >= E holding none. */
    SL_CHECK(c->m->n_moe_layers == 0 || !c->m->tp_at_most_experts || cfg->E >= p->tp, &p->err,
             SL_E_DIVISIBILITY,
             "Tensor parallel size %d is greater than the number of experts %lld", (int)p->tp,
             (long long)cfg->E);
    /* the rules that cut heads first: heads are what a user tunes tp by, and they imply o_proj's
     * split. A rule with no tensor for this config (the dense MLP of an all-MoE model) splits
     * nothing. */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < c->m->n_rules; i++) {
            const sl_rule *r = &c->m->rules[i];
            if (splits_heads(r) == (pass == 0) && r->scale_of < 0 &&
                sl_arch_rule_used(c->m, i))
                SL_TRY(check_rule_tp(p, cfg, r));
        }
    }
    return check_fp8(c);
}

/* Whether the mesh fits is a matter of the config's sizes: the message names the config. */
sl_status sl_plan_check_mesh(plan_ctx *c, const sl_plan_opts *o)
{
    const sl_status st = check_mesh_impl(c, o);
    if (st == SL_E_DIVISIBILITY || st == SL_E_CONFIG)
        sl_err_prefix(&c->p->err, c->config_path);
    return st;
}

