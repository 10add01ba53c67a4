/* test_plan_fp8.c - FP8 block-quantized checkpoints as the planner sees them
 * (SHARDING-MOE-FP8.md, "FP8 checkpoints"): the spec's worked figures for DeepSeek-V3 and
 * Qwen3-30B-A3B-FP8 (weights F8_E4M3, scales F32 with their block shapes), vLLM's divisibility
 * errors, fused layers whose slots straddle blocks (vLLM's Fp8Config loads them where its loader
 * writes each scale row once), the block rows and columns each rank's scale copies, synth's FP8 checkpoints (finite e4m3
 * bytes, positive scales), and every FP8 error: E5M2 weights, a BF16 weight where FP8 is expected,
 * a missing scale, a fused layer quantized in part, ignored_layers, unsupported formats, layout
 * spmd (tiles of whole blocks, scales tiled by the same blocks, else SL_E_DIVISIBILITY), and
 * a load (the engine writes one dtype per plan: FP8 plans are refused, not loaded wrongly).
 * Per-tensor and per-channel scales (fp8 without blocks, fbgemm_fp8, compressed-tensors): the
 * spec's shapes from the real Mixtral and Llama configs, synth's checkpoints ([] and [1] scalars,
 * [out, 1] channels, equal w1/w3 input scales), and their errors: a scale of the wrong shape, a
 * missing input scale, unequal w1/w3 input scales, an F64 scale, regular expressions in "ignore",
 * formats that are not FP8. Exit 0 pass, 1 fail. */
#include "expect.h"
#include "plan_testutil.h"
#include "scratch.h"
#include "shardload.h"

#include "plan/plan_data.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIGS SL_TEST_CONFIGS

static char dir[256];

static sl_status build(const sl_checkpoint *ck, const char *config, int tp, int ep, sl_layout layout,
                       sl_plan **p)
{
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = config;
    o.tp = tp;
    o.ep = ep;
    o.layout = layout;
    return sl_plan_build(ck, &o, p);
}

static int is(const sl_plan *p, int d, const char *name, sl_dtype dt, uint64_t a, uint64_t b, uint64_t c)
{
    const sl_plan_param_t *x = tu_param(p, d, name);
    return x && x->dtype == dt && x->ndim == (c ? 3u : 2u) && x->shape[0] == a && x->shape[1] == b &&
           (c == 0 || x->shape[2] == c);
}

static int is1(const sl_plan *p, int d, const char *name, uint64_t a)
{
    const sl_plan_param_t *x = tu_param(p, d, name);
    return x && x->dtype == SL_DTYPE_F32 && x->ndim == 1 && x->shape[0] == a;
}

/* A config from a base file with quantization_config (and other keys) replaced. */
static const char *config_with(const char *base, const char *name, const char *quant_json)
{
    static char path[8][300];
    static int k;
    char *out = path[k++ % 8];
    snprintf(out, 300, "%s/%s", dir, name);
    json_t *root = json_load_file(base, 0, NULL);
    json_t *q = quant_json ? json_loads(quant_json, 0, NULL) : NULL;
    if (root && q)
        json_object_set_new(root, "quantization_config", q);
    if (!root || json_dump_file(root, out, 0) != 0)
        fprintf(stderr, "cannot write %s\n", out);
    json_decref(root);
    return out;
}

static const char small_quant[] = "{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":"
                                  "\"fp8\",\"weight_block_size\":[128,128]}";

/* ---- the spec's figures ----------------------------------------------------------------------- */

static void worked_figures(void)
{
    const char *ds = CONFIGS "/deepseek-v3.json";
    sl_plan *p = NULL;
    EXPECT(build(NULL, ds, 8, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 0, "model.layers.3.mlp.experts.w13_weight", SL_DTYPE_F8_E4M3, 256, 512, 7168), "w13");
    EXPECT(is(p, 0, "model.layers.3.mlp.experts.w13_weight_scale_inv", SL_DTYPE_F32, 256, 4, 56), "w13 s");
    EXPECT(is(p, 0, "model.layers.3.mlp.experts.w2_weight", SL_DTYPE_F8_E4M3, 256, 7168, 256), "w2");
    EXPECT(is(p, 0, "model.layers.3.mlp.experts.w2_weight_scale_inv", SL_DTYPE_F32, 256, 56, 2), "w2 s");
    EXPECT(is(p, 0, "model.layers.0.self_attn.fused_qkv_a_proj.weight", SL_DTYPE_F8_E4M3, 2112, 7168, 0),
           "fused_qkv_a_proj");
    EXPECT(is(p, 0, "model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv", SL_DTYPE_F32, 17, 56, 0),
           "fused_qkv_a_proj scale [17, 56]");
    EXPECT(is(p, 0, "model.layers.0.self_attn.q_b_proj.weight", SL_DTYPE_F8_E4M3, 3072, 1536, 0), "q_b");
    EXPECT(is(p, 0, "model.layers.3.mlp.gate.weight", SL_DTYPE_BF16, 256, 7168, 0), "router bf16");
    EXPECT(is(p, 0, "model.embed_tokens.weight", SL_DTYPE_BF16, 16160, 7168, 0), "embedding bf16");
    sl_param_info pi;
    EXPECT(p && sl_plan_param(p, 0, 1, &pi) == SL_OK && pi.dtype == SL_DTYPE_F8_E4M3,
           "sl_plan_param reports the parameter's dtype");
    sl_plan_free(p);
    EXPECT(build(NULL, ds, 8, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 3, "model.layers.3.mlp.experts.w13_weight", SL_DTYPE_F8_E4M3, 32, 4096, 7168), "EP w13");
    EXPECT(is(p, 3, "model.layers.3.mlp.experts.w13_weight_scale_inv", SL_DTYPE_F32, 32, 32, 56),
           "EP w13 scale [32, 32, 56]");
    sl_plan_free(p);

    /* Qwen3-30B-A3B-FP8 lists its 48 routers in modules_to_not_convert: vLLM's qwen3_moe.py makes
     * mlp.gate with the quant_config, so a router the config does not list is FP8 */
    static const char q3head[] = "{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":"
                                 "\"fp8\",\"weight_block_size\":[128,128],\"modules_to_not_convert\":"
                                 "[\"lm_head\"";
    char q3quant[4096];
    size_t n = (size_t)snprintf(q3quant, sizeof q3quant, "%s", q3head);
    for (int l = 0; l < 48; l++)
        n += (size_t)snprintf(q3quant + n, sizeof q3quant - n, ",\"model.layers.%d.mlp.gate\"", l);
    snprintf(q3quant + n, sizeof q3quant - n, "]}");
    const char *q3 = config_with(CONFIGS "/qwen3-30b-a3b.json", "q3fp8.json", q3quant);
    EXPECT(build(NULL, q3, 2, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 1, "model.layers.5.mlp.gate.weight", SL_DTYPE_BF16, 128, 2048, 0), "q3 router listed: bf16");
    EXPECT(!tu_param(p, 1, "model.layers.5.mlp.gate.weight_scale_inv"), "q3 router listed: no scale");
    EXPECT(is(p, 1, "model.layers.5.self_attn.qkv_proj.weight", SL_DTYPE_F8_E4M3, 2560, 2048, 0), "qkv");
    EXPECT(is(p, 1, "model.layers.5.self_attn.qkv_proj.weight_scale_inv", SL_DTYPE_F32, 20, 16, 0),
           "qkv scale [20, 16]");
    EXPECT(is(p, 1, "model.layers.5.mlp.experts.w13_weight", SL_DTYPE_F8_E4M3, 128, 768, 2048), "q3 w13");
    EXPECT(is(p, 1, "model.layers.5.mlp.experts.w13_weight_scale_inv", SL_DTYPE_F32, 128, 6, 16),
           "q3 w13 scale [128, 6, 16]");
    sl_plan_free(p);
    const char *q3r = config_with(CONFIGS "/qwen3-30b-a3b.json", "q3fp8r.json", small_quant);
    EXPECT(build(NULL, q3r, 2, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 1, "model.layers.5.mlp.gate.weight", SL_DTYPE_F8_E4M3, 128, 2048, 0), "q3 router fp8");
    EXPECT(is(p, 1, "model.layers.5.mlp.gate.weight_scale_inv", SL_DTYPE_F32, 1, 16, 0),
           "q3 router scale [1, 16], whole on every rank");
    sl_plan_free(p);
    /* loads at T = 1, 2 and with --ep at any T; not at T = 4 or 8 without it */
    sl_status st = build(NULL, q3, 4, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("Qwen3 FP8 T=4", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.mlp.experts."
                 "w13_weight': The output_size of gate's and up's weight = 192 is not divisible by "
                 "weight quantization block_n = 128.");
    sl_plan_free(p);
    for (int t = 4; t <= 8; t *= 2) {
        EXPECT(build(NULL, q3, t, 1, SL_LAYOUT_TP, &p) == SL_OK, "Qwen3 FP8 EP T=%d: %s", t, sl_plan_errmsg(p));
        sl_plan_free(p);
    }
    /* DeepSeek's dense gate_up at T = 32: 18432 / 32 = 576 rows a rank */
    st = build(NULL, ds, 32, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("DS-V3 T=32", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.mlp."
                 "gate_up_proj.weight': its slot 'model.layers.{i}.mlp.gate_proj.weight' holds 576 rows "
                 "a rank, not a multiple of weight quantization block_n = 128, so vLLM's Fp8Config skips "
                 "its block check; its loader then reads the last rank's 5 scale rows from row 155 of "
                 "the 144 (cdiv(18432, 128)) the checkpoint's scale has, and fails");
    sl_plan_free(p);
}

/* ---- a small DeepSeek FP8 checkpoint ---------------------------------------------------------- */


static const char *small_ds(const char *name, const char *extra)
{
    static char path[4][300];
    static int k;
    char *out = path[k++ % 4];
    snprintf(out, 300, "%s/%s", dir, name);
    FILE *f = fopen(out, "w");
    if (f) {
        fprintf(f, "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"hidden_size\":256,"
                   "\"intermediate_size\":512,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                   "\"vocab_size\":256,\"q_lora_rank\":256,\"kv_lora_rank\":128,\"qk_nope_head_dim\":64,"
                   "\"qk_rope_head_dim\":64,\"v_head_dim\":64,\"n_routed_experts\":4,"
                   "\"moe_intermediate_size\":256,\"n_shared_experts\":1,\"first_k_dense_replace\":1,"
                   "\"topk_method\":\"noaux_tc\",\"torch_dtype\":\"bfloat16\",\"quantization_config\":%s}",
                extra ? extra : small_quant);
        fclose(f);
    }
    return out;
}

static int64_t tensor_index(const sl_checkpoint *ck, const char *name, sl_tensor_info *ti)
{
    for (int64_t i = 0; i < sl_checkpoint_tensor_count(ck); i++) {
        if (sl_checkpoint_tensor(ck, i, ti) == SL_OK && !strcmp(ti->name, name))
            return i;
    }
    return -1;
}

/* Scales: rank 1 of T = 2 copies block column 1 of each expert's w2 scale [2, 2] and block row 1
 * of gate's and up's scales; fused_qkv_a_proj's scale stacks q_a's 2 block rows and kv_a's 2. */
static void scale_ops(const sl_checkpoint *ck, const sl_plan *p)
{
    const sl_plan_param_t *w2s = tu_param(p, 1, "model.layers.1.mlp.experts.w2_weight_scale_inv");
    EXPECT(is(p, 1, "model.layers.1.mlp.experts.w2_weight_scale_inv", SL_DTYPE_F32, 4, 2, 1), "w2 scale");
    EXPECT(is(p, 1, "model.layers.1.mlp.experts.w13_weight_scale_inv", SL_DTYPE_F32, 4, 2, 2), "w13 scale");
    EXPECT(is(p, 1, "model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv", SL_DTYPE_F32, 4, 2, 0),
           "fused scale [2 + 2, 2]");
    int seen = 0;
    for (int64_t i = 0; w2s && i < p->devices[1].n_ops; i++) {
        const sl_op *op = &p->devices[1].ops[i];
        if (op->param != w2s - p->devices[1].params)
            continue;
        sl_tensor_info ti;
        EXPECT(sl_checkpoint_tensor(ck, op->tensor, &ti) == SL_OK && strstr(ti.name, "down_proj.weight_scale_inv") &&
                   op->rows == 2 && op->row_elems == 1 && op->src_stride == 8 &&
                   op->src_offset == ti.offset + 4 && op->src_dtype == SL_DTYPE_F32,
               "w2 scale op %lld: rows %llu x %llu from +%llu", (long long)i, (unsigned long long)op->rows,
               (unsigned long long)op->row_elems, (unsigned long long)(op->src_offset - ti.offset));
        seen++;
    }
    EXPECT(seen == 4, "one op per expert for the w2 scale, %d", seen);
    sl_tensor_info ti;
    const sl_plan_param_t *w13s = tu_param(p, 1, "model.layers.1.mlp.experts.w13_weight_scale_inv");
    for (int64_t i = 0; w13s && i < p->devices[1].n_ops; i++) {
        const sl_op *op = &p->devices[1].ops[i];
        if (op->param == w13s - p->devices[1].params)
            EXPECT(sl_checkpoint_tensor(ck, op->tensor, &ti) == SL_OK && op->rows * op->row_elems == 2 &&
                       op->src_offset == ti.offset + 2 * 4,
                   "w13 scale: block row 1 of %s", ti.name);
    }
    EXPECT(tensor_index(ck, "model.layers.1.mlp.gate.e_score_correction_bias", &ti) >= 0, "bias present");
}

/* ---- fused layers whose slots straddle blocks (vLLM's Fp8Config, since 969bbc7c6) --------------- */

/* A one-layer dense Qwen3 FP8 config: nh heads of D, K kv heads, MLP width I, blocks [128, bk]. */
static const char *small_q3(const char *name, int nh, int K, int D, int I, int bk, int ct)
{
    static char path[4][300];
    static int k;
    char *out = path[k++ % 4];
    snprintf(out, 300, "%s/%s", dir, name);
    FILE *f = fopen(out, "w");
    if (f) {
        fprintf(f, "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":256,\"intermediate_size\":%d,"
                   "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,"
                   "\"num_hidden_layers\":1,\"vocab_size\":256,\"torch_dtype\":\"bfloat16\","
                   "\"quantization_config\":", I, nh, K, D);
        if (ct)
            fprintf(f, "{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":"
                       "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":"
                       "[128,%d]}}}}}", bk);
        else
            fprintf(f, "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,%d]}}", bk);
        fclose(f);
    }
    return out;
}

/* The first row of the checkpoint scale `name` that device d's copy into param reads. */
static int64_t scale_row_read(const sl_checkpoint *ck, const sl_plan *p, int d, const char *param,
                              const char *name)
{
    const sl_plan_param_t *x = tu_param(p, d, param);
    sl_tensor_info ti;
    if (!x || tensor_index(ck, name, &ti) < 0)
        return -1;
    for (int64_t i = 0; i < p->devices[d].n_ops; i++) {
        const sl_op *op = &p->devices[d].ops[i];
        if (op->param == x - p->devices[d].params && op->tensor == tensor_index(ck, name, &ti))
            return (int64_t)((op->src_offset - ti.offset) / (ti.shape[1] * 4));
    }
    return -1;
}

/* vLLM's Fp8Config skips its block check for a merged or QKV layer with a slot that is not whole
 * blocks; its loader then takes slot j's cdiv(s, bn) scale rows from row rank * cdiv(s, bn) of the
 * checkpoint's, at row cdiv(offset, bn). Loaded where those rows tile the parameter, refused where
 * a row falls past the end, where two slots write the same rows, or where a rank reads past the
 * checkpoint's scale; compressed-tensors keeps the block check. */
static void straddling_slots(void)
{
    sl_plan *p = NULL;
    /* I = 480 at T = 1: gate 4 block rows (the 4th half a block), up 4 at row cdiv(480, 128) = 4 */
    sl_status st = build(NULL, small_q3("s480.json", 4, 2, 128, 480, 128, 0), 1, 0, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && is(p, 0, "model.layers.0.mlp.gate_up_proj.weight_scale_inv", SL_DTYPE_F32, 8, 2, 0),
           "I=480 T=1: gate_up scale [8, 2]: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    st = build(NULL, small_q3("ct480.json", 4, 2, 128, 480, 128, 1), 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("compressed-tensors I=480", st, p, SL_E_DIVISIBILITY, "Weight "
                         "output_partition_size = 480 is not divisible by weight quantization block_n = 128.");
    sl_plan_free(p);
    /* I = 448: up's 4 rows at row cdiv(448, 128) = 4 of cdiv(896, 128) = 7 */
    st = build(NULL, small_q3("s448.json", 4, 2, 128, 448, 128, 0), 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("I=448 T=1", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.mlp."
                         "gate_up_proj.weight': its slots hold 448 + 448 rows a rank, not all multiples of "
                         "weight quantization block_n = 128, so vLLM's Fp8Config skips its block check; its "
                         "loader then puts slot j's cdiv(rows, 128) scale rows at row cdiv(offset, 128), 8 "
                         "rows in all where the parameter has cdiv(896, 128) = 7: a row past the end fails its load");
    sl_plan_free(p);
    /* 3 heads of 64, one kv head: q's 2 block rows, k's 1 at row 2 and v's 1 at row cdiv(256, 128) = 2 */
    st = build(NULL, small_q3("s64.json", 3, 1, 64, 512, 128, 0), 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("qkv D=64", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.self_attn."
                         "qkv_proj.weight': its slots hold 192 + 64 + 64 rows a rank, not all multiples of "
                         "weight quantization block_n = 128, so vLLM's Fp8Config skips its block check; its "
                         "loader then puts slot j's cdiv(rows, 128) scale rows at row cdiv(offset, 128), 4 "
                         "rows in all where the parameter has cdiv(320, 128) = 3: two slots write the same rows");
    sl_plan_free(p);
    /* I = 320 at T = 4, blocks [128, 16]: rank 3 reads scale row 3 of cdiv(320, 128) = 3 */
    st = build(NULL, small_q3("s320.json", 4, 2, 128, 320, 16, 0), 4, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("I=320 T=4", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.mlp."
                         "gate_up_proj.weight': its slot 'model.layers.{i}.mlp.gate_proj.weight' holds 80 rows "
                         "a rank, not a multiple of weight quantization block_n = 128, so vLLM's Fp8Config skips "
                         "its block check; its loader then reads the last rank's 1 scale rows from row 3 of the "
                         "3 (cdiv(320, 128)) the checkpoint's scale has, and fails");
    sl_plan_free(p);
    /* I = 480 at T = 2, blocks [128, 16]: rank 1's 240 gate rows [240, 480) straddle blocks 1-3;
     * vLLM reads its 2 scale rows from row 1 * 2 = 2, not from row 240 / 128 = 1 */
    char ckdir[300], err[512];
    snprintf(ckdir, sizeof ckdir, "%s/ck480", dir);
    const char *cfg = small_q3("s480k.json", 4, 2, 128, 480, 16, 0);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_synth(cfg, NULL, ckdir, -1, 1, 0, err, sizeof err) == SL_OK && sl_checkpoint_open(ckdir, &ck) == SL_OK,
           "synth I=480: %s", err);
    EXPECT(ck && build(ck, cfg, 2, 0, SL_LAYOUT_TP, &p) == SL_OK, "I=480 T=2: %s", sl_plan_errmsg(p));
    EXPECT(is(p, 1, "model.layers.0.mlp.gate_up_proj.weight_scale_inv", SL_DTYPE_F32, 4, 16, 0), "[2 + 2, 16]");
    for (int d = 0; d < 2; d++) {
        EXPECT(scale_row_read(ck, p, d, "model.layers.0.mlp.gate_up_proj.weight_scale_inv",
                              "model.layers.0.mlp.gate_proj.weight_scale_inv") == 2 * d &&
                   scale_row_read(ck, p, d, "model.layers.0.mlp.gate_up_proj.weight_scale_inv",
                                  "model.layers.0.mlp.up_proj.weight_scale_inv") == 2 * d,
               "rank %d reads gate's and up's scale from row %d", d, 2 * d);
    }
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

static void synth_and_bind(void)
{
    char ckdir[300], err[512];
    snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
    const char *cfg = small_ds("ds.json", NULL);
    EXPECT(sl_synth(cfg, NULL, ckdir, -1, 3, 1, err, sizeof err) == SL_OK, "synth: %s", err);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK, "open");
    if (!ck)
        return;
    int f8 = 0, scales = 0, bad = 0;
    for (int64_t i = 0; i < sl_checkpoint_tensor_count(ck); i++) {
        sl_tensor_info ti;
        sl_checkpoint_tensor(ck, i, &ti);
        uint64_t n = 1;
        for (uint32_t d = 0; d < ti.ndim; d++)
            n *= ti.shape[d];
        if (ti.dtype != SL_DTYPE_F8_E4M3 && !strstr(ti.name, "_scale_inv"))
            continue;
        const size_t nb = (size_t)(n * (ti.dtype == SL_DTYPE_F32 ? 4 : 1));
        unsigned char *b = malloc(nb);
        FILE *f = fopen(sl_checkpoint_file_path(ck, ti.file), "rb");
        EXPECT(b && f && fseek(f, (long)ti.offset, SEEK_SET) == 0 && fread(b, 1, nb, f) == nb, "read %s", ti.name);
        for (size_t k = 0; b && ti.dtype == SL_DTYPE_F8_E4M3 && k < nb; k++)
            bad += (b[k] & 0x7f) == 0x7f;   /* e4m3's NaN */
        for (size_t k = 0; b && ti.dtype == SL_DTYPE_F32 && k < nb / 4; k++) {
            float v;
            memcpy(&v, b + 4 * k, 4);
            bad += !(v > 0.0f && v < 1.0f);
        }
        f8 += ti.dtype == SL_DTYPE_F8_E4M3;
        scales += ti.dtype == SL_DTYPE_F32 && strstr(ti.name, "_scale_inv") != NULL;
        if (f)
            fclose(f);
        free(b);
    }
    /* per layer: q_a, kv_a, q_b, kv_b, o; layer 0 dense gate/up/down, layer 1 12 experts + 3 shared */
    EXPECT(f8 == 5 * 2 + 3 + 12 + 3 && scales == f8 && bad == 0, "synth FP8: %d weights, %d scales, %d bad",
           f8, scales, bad);
    sl_plan *p = NULL;
    EXPECT(build(ck, cfg, 2, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    if (p)
        scale_ops(ck, p);
    /* An engine that writes one dtype per plan refuses an FP8 plan; one that writes each
     * parameter's dtype loads it: then rank 1's o_proj is the checkpoint's FP8 bytes, columns
     * [128, 256) of each row, bit for bit. Never loaded wrongly either way. */
    sl_load_opts lo;
    sl_load_opts_init(&lo);
    sl_model *m = NULL;
    const sl_plan_param_t *o = tu_param(p, 1, "model.layers.0.self_attn.o_proj.weight");
    sl_tensor_info ti;
    if (p && o && tensor_index(ck, "model.layers.0.self_attn.o_proj.weight", &ti) >= 0 &&
        sl_load(ck, p, &lo, &m) == SL_OK) {
        unsigned char *got = malloc(256 * 128), *row = malloc(256);
        FILE *f = fopen(sl_checkpoint_file_path(ck, ti.file), "rb");
        int same = got && row && f && sl_model_read_param(m, 1, o - p->devices[1].params, 0, got,
                                                          256 * 128) == SL_OK;
        for (int k = 0; same && k < 256; k++)
            same = fseek(f, (long)(ti.offset + (uint64_t)k * 256), SEEK_SET) == 0 &&
                   fread(row, 1, 256, f) == 256 && !memcmp(got + k * 128, row + 128, 128);
        EXPECT(same, "rank 1 o_proj: the checkpoint's FP8 columns [128, 256) bit for bit");
        if (f)
            fclose(f);
        free(got);
        free(row);
    } else {
        EXPECT(m != NULL && strstr(sl_model_errmsg(m), "parameter") != NULL,
               "an FP8 plan the engine cannot load is refused naming a parameter: %s",
               m ? sl_model_errmsg(m) : "");
    }
    sl_model_free(m);
    sl_plan_free(p);
    /* layout spmd: checkpoint names, FP8 tiles of whole blocks and their scales by the same
     * blocks (down_proj's 256 columns in tiles of 128: one block column of its [2, 2] scale) */
    EXPECT(build(ck, cfg, 2, 0, SL_LAYOUT_SPMD, &p) == SL_OK, "spmd: %s", sl_plan_errmsg(p));
    EXPECT(is(p, 1, "model.layers.1.mlp.experts.2.down_proj.weight", SL_DTYPE_F8_E4M3, 256, 128, 0) &&
               is(p, 1, "model.layers.1.mlp.experts.2.down_proj.weight_scale_inv", SL_DTYPE_F32, 2, 1, 0) &&
               is(p, 1, "model.layers.1.mlp.experts.2.up_proj.weight_scale_inv", SL_DTYPE_F32, 1, 2, 0) &&
               is(p, 1, "model.layers.0.self_attn.q_a_proj.weight_scale_inv", SL_DTYPE_F32, 2, 2, 0),
           "spmd FP8 tiles and block scales");
    sl_plan_free(p);
    const sl_status st = build(ck, cfg, 4, 0, SL_LAYOUT_SPMD, &p);
    tu_expect_plan_error("spmd N=4", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.self_attn."
                         "o_proj.weight' (layout spmd, 4 devices): its tile of 64 columns is not a multiple "
                         "of the weight quantization block_k = 128");
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

/* A tensor of the one-file-per-tensor checkpoint rewritten as zeros of dtype dt and shape. */
static void rewrite_tensor(const char *ckdir, const char *name, sl_dtype dt, uint32_t ndim, const uint64_t *shape)
{
    sl_checkpoint *ck = NULL;
    sl_tensor_info ti;
    char path[600];
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK && tensor_index(ck, name, &ti) >= 0, "%s", name);
    if (!ck)
        return;
    snprintf(path, sizeof path, "%s", sl_checkpoint_file_path(ck, ti.file));
    sl_checkpoint_close(ck);
    uint64_t n = 1;
    for (uint32_t d = 0; d < ndim; d++)
        n *= shape[d];
    sl_writer *w = NULL;
    int64_t idx = 0;
    const size_t nb = (size_t)(n * sl_dtype_bits(dt) / 8);
    void *zero = calloc(1, nb + 1);
    EXPECT(zero && sl_writer_open(path, &w) == SL_OK && sl_writer_add(w, name, dt, ndim, shape, &idx) == SL_OK &&
               sl_writer_begin(w) == SL_OK && sl_writer_write(w, idx, 0, zero, nb) == SL_OK &&
               sl_writer_finish(w) == SL_OK, "rewrite %s", name);
    sl_writer_free(w);
    free(zero);
}

/* Replaces a tensor of the one-file-per-tensor checkpoint by zeros of dtype dt (same shape). */
static void replace_tensor(const char *ckdir, const char *name, sl_dtype dt)
{
    sl_checkpoint *ck = NULL;
    sl_tensor_info ti;
    uint64_t shape[8] = {0};
    const int ok = sl_checkpoint_open(ckdir, &ck) == SL_OK && tensor_index(ck, name, &ti) >= 0 && ti.ndim <= 8;
    EXPECT(ok, "%s", name);
    const uint32_t ndim = ok ? ti.ndim : 0;
    for (uint32_t k = 0; k < ndim; k++)
        shape[k] = ti.shape[k];   /* borrowed from the checkpoint, closed below */
    sl_checkpoint_close(ck);
    if (ok)
        rewrite_tensor(ckdir, name, dt, ndim, shape);
}

static void drop_tensor(const char *ckdir, const char *name)
{
    char path[400], old[700];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", ckdir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    const char *f = wm ? json_string_value(json_object_get(wm, name)) : NULL;
    snprintf(old, sizeof old, "%s/%s", ckdir, f ? f : "?");
    EXPECT(f && unlink(old) == 0 && json_object_del(wm, name) == 0 && json_dump_file(root, path, 0) == 0,
           "drop %s", name);
    json_decref(root);
}

/* Plans ckdir at T 2 (ep: with --ep) and checks the outcome: a plan for SL_OK, else status want
 * with text in the message (what names the case). */
static void expect_plan_of(const char *ckdir, const char *cfg, int ep, const char *what, sl_status want,
                           const char *text)
{
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK, "open %s", ckdir);
    sl_plan *p = NULL;
    const sl_status st = build(ck, cfg, 2, ep, SL_LAYOUT_TP, &p);
    if (want == SL_OK)
        EXPECT(st == SL_OK, "%s: %s", what, sl_plan_errmsg(p));
    else
        tu_expect_plan_error(what, st, p, want, text);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

static void checkpoint_errors(void)
{
    static const struct {
        const char *name;
        sl_dtype dt;      /* replace with this dtype; SL_DTYPE_BOOL: drop the tensor */
        sl_status want;
        const char *text;
    } cases[] = {
        {"model.layers.1.mlp.experts.2.up_proj.weight", SL_DTYPE_F8_E5M2, SL_E_UNSUPPORTED,
         "'model.layers.1.mlp.experts.2.up_proj.weight' is F8_E5M2: only F8_E4M3 weights"},
        {"model.layers.0.self_attn.o_proj.weight", SL_DTYPE_BF16, SL_E_UNSUPPORTED,
         "'model.layers.0.self_attn.o_proj.weight' has dtype BF16, but the config's quantization_config"},
        {"model.layers.1.self_attn.kv_b_proj.weight_scale_inv", SL_DTYPE_BOOL, SL_E_MISSING,
         "(checkpoint tensors missing: 'model.layers.1.self_attn.kv_b_proj.weight_scale_inv')"},
        {"model.layers.0.mlp.down_proj.weight_scale_inv", SL_DTYPE_BF16, SL_OK, ""},   /* widened */
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ckdir[300];
        snprintf(ckdir, sizeof ckdir, "%s/ck-%zu", dir, i);
        const char *cfg = small_ds("ds.json", NULL);
        EXPECT(sl_synth(cfg, NULL, ckdir, -1, 3, 1, err, sizeof err) == SL_OK, "synth: %s", err);
        if (cases[i].dt == SL_DTYPE_BOOL)
            drop_tensor(ckdir, cases[i].name);
        else
            replace_tensor(ckdir, cases[i].name, cases[i].dt);
        expect_plan_of(ckdir, cfg, 1, cases[i].name, cases[i].want, cases[i].text);
    }
}

/* An entry naming one expert's module, or the MoE block itself, keeps every expert of that layer's
 * block in the model dtype (vLLM's is_layer_skipped: an ignored entry with "experts" in it that
 * contains the FusedMoE prefix); the shared experts beside them stay FP8. */
static void ignored_experts(void)
{
    static const char *const lists[] = {"[\"model.layers.1.mlp.experts.2.down_proj\"]",
                                        "[\"model.layers.1.mlp.experts\"]"};
    char quant[256], err[512], ckdir[300];
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        snprintf(quant, sizeof quant, "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],"
                 "\"ignored_layers\":%s}", lists[i]);
        const char *cfg = small_ds("ign-experts.json", quant);
        sl_plan *p = NULL;
        const sl_status st = build(NULL, cfg, 2, 0, SL_LAYOUT_TP, &p);
        EXPECT(st == SL_OK && is(p, 1, "model.layers.1.mlp.experts.w13_weight", SL_DTYPE_BF16, 4, 256, 256) &&
                   is(p, 1, "model.layers.1.mlp.experts.w2_weight", SL_DTYPE_BF16, 4, 256, 128) &&
                   !tu_param(p, 1, "model.layers.1.mlp.experts.w13_weight_scale_inv") &&
                   !tu_param(p, 1, "model.layers.1.mlp.experts.w2_weight_scale_inv") &&
                   is(p, 1, "model.layers.1.mlp.shared_experts.gate_up_proj.weight", SL_DTYPE_F8_E4M3,
                      256, 256, 0),
               "ignored_layers %s: the block's experts BF16: %s", lists[i], sl_plan_errmsg(p));
        sl_plan_free(p);
        /* synth writes them BF16 and the checkpoint plans */
        snprintf(ckdir, sizeof ckdir, "%s/ign-experts-%zu", dir, i);
        EXPECT(sl_synth(cfg, NULL, ckdir, -1, 3, 1, err, sizeof err) == SL_OK, "synth: %s", err);
        expect_plan_of(ckdir, cfg, 1, lists[i], SL_OK, "");
    }
    /* 12 layers, layer 1's block alone: "model.layers.1.mlp.experts" is in neither layer 10's nor
     * 11's names, so layer 1's experts alone keep the model dtype, as vLLM asks is_layer_skipped of
     * each layer's FusedMoE prefix */
    char path[300];
    snprintf(path, sizeof path, "%s/q3-12.json", dir);
    tu_write_text(path, "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":128,"
                        "\"intermediate_size\":256,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                        "\"head_dim\":32,\"num_hidden_layers\":12,\"vocab_size\":256,\"num_experts\":2,"
                        "\"moe_intermediate_size\":128,\"torch_dtype\":\"bfloat16\",\"quantization_config\":"
                        "{\"quant_method\":\"fp8\",\"activation_scheme\":\"dynamic\",\"ignored_layers\":"
                        "[\"model.layers.1.mlp.experts.0.up_proj\"]}}");
    sl_plan *p = NULL;
    const sl_status st = build(NULL, path, 1, 0, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && is(p, 0, "model.layers.1.mlp.experts.w13_weight", SL_DTYPE_BF16, 2, 256, 128) &&
               !tu_param(p, 0, "model.layers.1.mlp.experts.w13_weight_scale") &&
               is(p, 0, "model.layers.10.mlp.experts.w13_weight", SL_DTYPE_F8_E4M3, 2, 256, 128) &&
               tu_param(p, 0, "model.layers.10.mlp.experts.w13_weight_scale") &&
               is(p, 0, "model.layers.1.self_attn.qkv_proj.weight", SL_DTYPE_F8_E4M3, 256, 128, 0),
           "one layer's experts: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    snprintf(ckdir, sizeof ckdir, "%s/q3-12-ck", dir);
    EXPECT(sl_synth(path, NULL, ckdir, -1, 3, 1, err, sizeof err) == SL_OK, "synth: %s", err);
    expect_plan_of(ckdir, path, 1, "one layer's experts", SL_OK, "");
}

/* A module quantization_config lists in some layers only keeps the model dtype there, without a
 * scale, and is FP8 elsewhere: vLLM's Fp8Config asks is_layer_skipped of each layer's module.
 * helper-2 found it refused ("ignores 1 of its 2 modules"). Qwen3-MoE's router in one layer,
 * and DeepSeek's o_proj and layer 0's (dense) gate_up_proj; synth writes them so and a load of
 * its checkpoint plans. */
static void ignored_some_layers(void)
{
    char path[300], ckdir[300], err[512];
    snprintf(path, sizeof path, "%s/q3-router.json", dir);
    tu_write_text(path, "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":256,"
                        "\"intermediate_size\":256,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                        "\"head_dim\":128,\"num_hidden_layers\":3,\"vocab_size\":256,\"num_experts\":2,"
                        "\"moe_intermediate_size\":256,\"torch_dtype\":\"bfloat16\",\"quantization_config\":"
                        "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],"
                        "\"modules_to_not_convert\":[\"model.layers.1.mlp.gate\"]}}");
    sl_plan *p = NULL;
    sl_status st = build(NULL, path, 2, 0, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && is(p, 1, "model.layers.1.mlp.gate.weight", SL_DTYPE_BF16, 2, 256, 0) &&
               !tu_param(p, 1, "model.layers.1.mlp.gate.weight_scale_inv") &&
               is(p, 1, "model.layers.0.mlp.gate.weight", SL_DTYPE_F8_E4M3, 2, 256, 0) &&
               is(p, 1, "model.layers.2.mlp.gate.weight", SL_DTYPE_F8_E4M3, 2, 256, 0) &&
               is(p, 1, "model.layers.2.mlp.gate.weight_scale_inv", SL_DTYPE_F32, 1, 2, 0),
           "router of layer 1 listed: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    snprintf(ckdir, sizeof ckdir, "%s/q3-router-ck", dir);
    EXPECT(sl_synth(path, NULL, ckdir, -1, 3, 1, err, sizeof err) == SL_OK, "synth: %s", err);
    expect_plan_of(ckdir, path, 1, "router of layer 1 listed", SL_OK, "");
    st = build(NULL, small_ds("ign-some.json", "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],"
                                               "\"ignored_layers\":[\"model.layers.0.self_attn.o_proj\","
                                               "\"model.layers.0.mlp.gate_proj\",\"model.layers.0.mlp.up_proj\"]}"),
               2, 0, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && is(p, 0, "model.layers.0.self_attn.o_proj.weight", SL_DTYPE_BF16, 256, 128, 0) &&
               !tu_param(p, 0, "model.layers.0.self_attn.o_proj.weight_scale_inv") &&
               is(p, 0, "model.layers.1.self_attn.o_proj.weight", SL_DTYPE_F8_E4M3, 256, 128, 0) &&
               tu_param(p, 0, "model.layers.1.self_attn.o_proj.weight_scale_inv") &&
               is(p, 0, "model.layers.0.mlp.gate_up_proj.weight", SL_DTYPE_BF16, 512, 256, 0) &&
               !tu_param(p, 0, "model.layers.0.mlp.gate_up_proj.weight_scale_inv") &&
               tu_param(p, 0, "model.layers.1.mlp.shared_experts.gate_up_proj.weight_scale_inv"),
           "o_proj and gate_up_proj of layer 0 listed: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
}

/* Layers of one kind share their tensors' places (arch_tensors.c); each layer listing another set
 * of modules is a kind of its own, and past 64 kinds the config is refused, not planned slowly:
 * 70 MoE layers listing 70 subsets of 7 modules. */
static void ignored_too_many_kinds(void)
{
    /* the 7 modules, two of them fused pairs listed whole */
    static const char *const mods[7][2] = {{"self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"},
                                           {"self_attn.q_b_proj", NULL}, {"self_attn.kv_b_proj", NULL},
                                           {"self_attn.o_proj", NULL},
                                           {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"},
                                           {"mlp.shared_experts.down_proj", NULL}, {"mlp.experts", NULL}};
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap), path[300];
    EXPECT(text != NULL, "out of memory");
    if (!text)
        return;
    n += (size_t)snprintf(text + n, cap - n, "{\"architectures\":[\"DeepseekV3ForCausalLM\"],"
                          "\"hidden_size\":256,\"intermediate_size\":512,\"num_attention_heads\":4,"
                          "\"num_hidden_layers\":70,\"vocab_size\":256,\"q_lora_rank\":256,\"kv_lora_rank\":128,"
                          "\"qk_nope_head_dim\":64,\"qk_rope_head_dim\":64,\"v_head_dim\":64,"
                          "\"n_routed_experts\":4,\"moe_intermediate_size\":256,\"n_shared_experts\":1,"
                          "\"first_k_dense_replace\":0,\"torch_dtype\":\"bfloat16\",\"quantization_config\":"
                          "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],\"ignored_layers\":[\"x\"");
    for (int l = 0; l < 70; l++) {
        for (int b = 0; b < 7; b++) {
            if (!(l >> b & 1))
                continue;
            for (int k = 0; k < 2 && mods[b][k]; k++)
                n += (size_t)snprintf(text + n, cap - n, ",\"model.layers.%d.%s\"", l, mods[b][k]);
        }
    }
    snprintf(text + n, cap - n, "]}}");
    snprintf(path, sizeof path, "%s/kinds.json", dir);
    tu_write_text(path, text);
    free(text);
    sl_plan *p = NULL;
    const sl_status st = build(NULL, path, 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("70 kinds of layer", st, p, SL_E_UNSUPPORTED, "quantization_config's ignored "
                         "modules make more than 64 kinds of layer (by which of their modules are FP8; "
                         "layer 64 is one more): not supported");
    sl_plan_free(p);
}

static void config_errors(void)
{
    sl_plan *p = NULL;
    /* o_proj at T = 4: 4 heads * 64 / 4 = 64 columns a rank */
    sl_status st = build(NULL, small_ds("ds.json", NULL), 4, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("row block_k", st, p, SL_E_DIVISIBILITY, "parameter 'model.layers.{i}.self_attn.o_proj."
                 "weight': Weight input_size_per_partition = 64 is not divisible by weight quantization "
                 "block_k = 128.");
    sl_plan_free(p);
    static const struct {
        const char *quant, *want;
        sl_status st;
    } cases[] = {
        {"{\"quant_method\":\"awq\"}", "quant_method 'awq' is not supported (FP8 only", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"fp8\",\"activation_scheme\":\"static\",\"weight_block_size\":[128,128]}",
         "The block-wise quantization only supports dynamic activation scheme", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"fp8\",\"activation_scheme\":\"sometimes\"}", "Unsupported activation scheme "
         "sometimes", SL_E_CONFIG},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"int\",\"strategy\":\"channel\"}}}}", "only float 8-bit weights (FP8) are supported, "
         "not int 8-bit", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"group\"}}}}", "weight strategy 'group' is not supported",
         SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"a\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"tensor\"}},\"b\":{\"weights\":{\"num_bits\":8,\"type\":"
         "\"float\",\"strategy\":\"channel\"}}}}", "config group 'b' differs from the others", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"targets\":[\"Embedding\"],"
         "\"weights\":{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\"}}}}",
         "target 'Embedding' is not supported yet", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"tensor\"}}},\"ignore\":[\"lm_head\",\"re:.*mlp.gate$\"]}",
         "'ignore' entry 're:.*mlp.gate$' is a regular expression: only exact module names", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"tensor\"},\"input_activations\":{\"dynamic\":false,"
         "\"strategy\":\"token\"}}}}", "static input activations with strategy 'token'", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,128]},\"input_activations\":"
         "{\"dynamic\":false,\"strategy\":\"tensor\"}}}}", "The block-wise quantization only supports dynamic "
         "activation scheme", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128]}}}}",
         "'block_structure' is not [bn, bk]", SL_E_CONFIG},
        {"{\"quant_method\":\"compressed-tensors\"}", "(compressed-tensors) has no \"config_groups\"", SL_E_CONFIG},
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{}}",
         "format 'pack-quantized' is not supported (only float-quantized FP8)", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"targets\":[\"Linear\"]}}}",
         "a config group without \"weights\" is not an FP8 scheme", SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"tensor\"},\"input_activations\":{\"strategy\":\"tensor\"}}}}",
         "\"input_activations\" needs \"dynamic\" true or false", SL_E_CONFIG},
        {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\",\"strategy\":\"channel\"},\"input_activations\":{\"dynamic\":false,"
         "\"strategy\":\"tensor\"}}}}", "parameter 'model.layers.{i}.mlp.experts.w13_weight': For FP8 Fused "
         "MoE layer, we require either per tensor or channelwise, dynamic per token quantization.",
         SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"fp8\",\"fmt\":\"e5m2\",\"weight_block_size\":[128,128]}", "only e4m3",
         SL_E_UNSUPPORTED},
        {"{\"quant_method\":\"fp8\",\"weight_block_size\":[128]}", "'weight_block_size' is not [bn, bk]",
         SL_E_CONFIG},
        {"{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],\"ignored_layers\":"
         "[\"model.layers.0.self_attn.q_a_proj\",\"model.layers.1.self_attn.q_a_proj\"]}",
         "Detected some but not all shards of model.layers.{i}.self_attn.fused_qkv_a_proj.weight are "
         "quantized", SL_E_UNSUPPORTED},
        /* one layer's slot of a fused layer: vLLM's is_layer_skipped refuses it at that layer */
        {"{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],\"ignored_layers\":"
         "[\"model.layers.1.self_attn.kv_a_proj_with_mqa\"]}", "Detected some but not all shards of "
         "model.layers.{i}.self_attn.fused_qkv_a_proj.weight are quantized", SL_E_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = build(NULL, small_ds("bad.json", cases[i].quant), 2, 0, SL_LAYOUT_TP, &p);
        tu_expect_plan_error(cases[i].want, st, p, cases[i].st, cases[i].want);
        sl_plan_free(p);
    }
    /* a module listed for every layer stays in the model dtype, without a scale; an empty
     * ignored_layers falls back to modules_to_not_convert, as vLLM's Fp8Config does */
    for (int empty = 0; empty < 2; empty++) {
        char quant[256];
        snprintf(quant, sizeof quant, "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],%s"
                 "\"modules_to_not_convert\":[\"model.layers.0.self_attn.o_proj\","
                 "\"model.layers.1.self_attn.o_proj\"]}", empty ? "\"ignored_layers\":[]," : "");
        st = build(NULL, small_ds("ign.json", quant), 2, 0, SL_LAYOUT_TP, &p);
        EXPECT(st == SL_OK && is(p, 0, "model.layers.1.self_attn.o_proj.weight", SL_DTYPE_BF16, 256, 128, 0) &&
                   !tu_param(p, 0, "model.layers.1.self_attn.o_proj.weight_scale_inv") &&
                   is(p, 0, "model.layers.1.self_attn.kv_b_proj.weight", SL_DTYPE_F8_E4M3, 256, 128, 0),
               "ignored o_proj%s: %s", empty ? " (ignored_layers [])" : "", sl_plan_errmsg(p));
        sl_plan_free(p);
    }
    /* a dense layer's module (layer 0 here; layer 1 is MoE) listed where it exists: all of it,
     * not "1 of its 2 modules" counting a layer that has no such module */
    st = build(NULL, small_ds("ign-dense.json", "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],"
                                                "\"ignored_layers\":[\"model.layers.0.mlp.down_proj\"]}"),
               2, 0, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && is(p, 0, "model.layers.0.mlp.down_proj.weight", SL_DTYPE_BF16, 256, 256, 0) &&
               !tu_param(p, 0, "model.layers.0.mlp.down_proj.weight_scale_inv") &&
               tu_param(p, 0, "model.layers.0.mlp.gate_up_proj.weight_scale_inv"),
           "ignored dense down_proj: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    ignored_some_layers();
    ignored_too_many_kinds();
    ignored_experts();
}

/* ---- per-tensor and per-channel scales -------------------------------------------------------- */

static const char pt_static[] = "{\"quant_method\":\"fp8\",\"activation_scheme\":\"static\"}";
static const char ct_static[] = "{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                                "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\""
                                ":8,\"type\":\"float\",\"strategy\":\"tensor\"},\"input_activations\":{"
                                "\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":false}}},"
                                "\"ignore\":[\"lm_head\"]}";
static const char fbgemm[] = "{\"quant_method\":\"fbgemm_fp8\",\"modules_to_not_convert\":[\"lm_head\"],"
                             "\"activation_scale_ub\":1200.0}";

/* The spec's per-tensor MoE parameters (Mixtral-8x7B, AutoFP8 static) and per-channel rows
 * (Llama-3-8B, fbgemm, T = 8: kv heads 8 over 8 ranks, one each). */
static void scalar_channel_figures(void)
{
    sl_plan *p = NULL;
    const char *mx = config_with(CONFIGS "/mixtral-8x7b.json", "mx-pt.json", pt_static);
    EXPECT(build(NULL, mx, 2, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    const char *e = "model.layers.7.block_sparse_moe.experts.";
    char n[4][128];
    snprintf(n[0], sizeof n[0], "%sw13_weight_scale", e);
    snprintf(n[1], sizeof n[1], "%sw2_weight_scale", e);
    snprintf(n[2], sizeof n[2], "%sw13_input_scale", e);
    snprintf(n[3], sizeof n[3], "%sw2_input_scale", e);
    EXPECT(is(p, 1, n[0], SL_DTYPE_F32, 8, 2, 0) && is1(p, 1, n[1], 8) && is1(p, 1, n[2], 8) && is1(p, 1, n[3], 8),
           "Mixtral per-tensor: w13_weight_scale [8, 2], w2_weight_scale, w13/w2_input_scale [8]");
    EXPECT(is1(p, 0, "model.layers.0.self_attn.qkv_proj.weight_scale", 3) &&
               is1(p, 0, "model.layers.0.self_attn.qkv_proj.input_scale", 3) &&
               is1(p, 0, "model.layers.0.self_attn.o_proj.weight_scale", 1) &&
               is(p, 0, "model.layers.0.self_attn.qkv_proj.weight", SL_DTYPE_F8_E4M3, 3072, 4096, 0),
           "Mixtral per-tensor: qkv [3], o_proj [1]");
    sl_plan_free(p);
    EXPECT(build(NULL, mx, 2, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 0, n[0], SL_DTYPE_F32, 4, 2, 0) && is1(p, 0, n[1], 4) && is1(p, 0, n[2], 4),
           "Mixtral per-tensor EP: 4 experts a rank");
    sl_plan_free(p);
    /* fbgemm: Llama-3-8B at T = 4 would be refused with blocks (o_proj 1024 columns is fine, but
     * no block rule applies to per-channel scales at any T) */
    const char *ll = config_with(CONFIGS "/llama-3-8b.json", "ll-fb.json", fbgemm);
    EXPECT(build(NULL, ll, 8, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 5, "model.layers.3.self_attn.qkv_proj.weight_scale", SL_DTYPE_F32, 768, 1, 0) &&
               is(p, 5, "model.layers.3.self_attn.o_proj.weight_scale", SL_DTYPE_F32, 4096, 1, 0) &&
               is(p, 5, "model.layers.3.mlp.gate_up_proj.weight_scale", SL_DTYPE_F32, 3584, 1, 0) &&
               is(p, 5, "model.layers.3.mlp.down_proj.weight_scale", SL_DTYPE_F32, 4096, 1, 0) &&
               !tu_param(p, 5, "model.layers.3.mlp.down_proj.input_scale") &&
               is(p, 5, "lm_head.weight", SL_DTYPE_BF16, 16032, 4096, 0),
           "Llama-3-8B fbgemm T=8: channel scales [768|4096|3584|4096, 1], no input scales");
    sl_plan_free(p);
    /* compressed-tensors channels with static per-tensor inputs (dense layers allow it) */
    ll = config_with(CONFIGS "/llama-3-8b.json", "ll-ct.json", "{\"quant_method\":\"compressed-tensors\","
                     "\"config_groups\":{\"g\":{\"weights\":{\"num_bits\":8,\"type\":\"float\",\"strategy\":"
                     "\"channel\"},\"input_activations\":{\"dynamic\":false,\"strategy\":\"tensor\"}}}}");
    EXPECT(build(NULL, ll, 4, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(is(p, 2, "model.layers.3.self_attn.qkv_proj.weight_scale", SL_DTYPE_F32, 1536, 1, 0) &&
               is1(p, 2, "model.layers.3.self_attn.qkv_proj.input_scale", 3) &&
               is1(p, 2, "model.layers.3.mlp.down_proj.input_scale", 1),
           "Llama-3-8B CT channel + static inputs T=4: qkv scale [1536, 1], input scales [3] and [1]");
    sl_plan_free(p);
}

/* Synth writes AutoFP8's scalars 0-d and compressed-tensors' [1], w3's input scale equal to w1's
 * (so the checkpoint plans), fbgemm's scales [out, 1]; every scale positive. */
static void synth_scales(void)
{
    static const struct {
        const char *quant, *tensor;
        uint32_t ndim;
        uint64_t d0, d1;
    } cases[] = {
        {pt_static, "model.layers.1.mlp.experts.2.up_proj.input_scale", 0, 0, 0},
        {ct_static, "model.layers.1.mlp.experts.2.up_proj.weight_scale", 1, 1, 0},
        {fbgemm, "model.layers.1.mlp.experts.2.down_proj.weight_scale", 2, 256, 1},
        {fbgemm, "model.layers.0.self_attn.o_proj.weight_scale", 2, 256, 1},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ckdir[300];
        snprintf(ckdir, sizeof ckdir, "%s/sc-%zu", dir, i);
        const char *cfg = small_ds("sc.json", cases[i].quant);
        EXPECT(sl_synth(cfg, NULL, ckdir, -1, 5, 0, err, sizeof err) == SL_OK, "synth: %s", err);
        sl_checkpoint *ck = NULL;
        sl_tensor_info ti;
        EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK && tensor_index(ck, cases[i].tensor, &ti) >= 0 &&
                   ti.ndim == cases[i].ndim && ti.dtype == SL_DTYPE_F32 &&
                   (ti.ndim == 0 || ti.shape[0] == cases[i].d0) && (ti.ndim < 2 || ti.shape[1] == cases[i].d1),
               "synth %zu: %s has %u dims", i, cases[i].tensor, ck ? ti.ndim : 0);
        float v = 0.0f;
        FILE *f = ck ? fopen(sl_checkpoint_file_path(ck, ti.file), "rb") : NULL;
        EXPECT(f && fseek(f, (long)ti.offset, SEEK_SET) == 0 && fread(&v, 4, 1, f) == 1 && v > 0.0f && v < 1.0f,
               "synth %zu: a positive scale, %g", i, (double)v);
        if (f)
            fclose(f);
        sl_plan *p = NULL;
        EXPECT(ck && build(ck, cfg, 2, 1, SL_LAYOUT_TP, &p) == SL_OK, "synth %zu plans: %s", i, sl_plan_errmsg(p));
        sl_plan_free(p);
        /* the checkpoint's scheme against another config's: the unclaimed scales say which */
        if (i == 0) {
            const sl_status st = build(ck, small_ds("blk.json", NULL), 2, 0, SL_LAYOUT_TP, &p);
            tu_expect_plan_error("per-tensor checkpoint, block config", st, p, SL_E_UNCLAIMED,
                                 "(FP8 scales the config does not imply: its quantization_config gives "
                                 "block scales named <x>.weight_scale_inv and no input scales)");
            sl_plan_free(p);
            json_t *root = json_load_file(cfg, 0, NULL);
            json_object_del(root, "quantization_config");
            EXPECT(root && json_dump_file(root, cfg, 0) == 0, "config without quantization_config");
            json_decref(root);
            const sl_status st2 = build(ck, cfg, 2, 0, SL_LAYOUT_TP, &p);
            tu_expect_plan_error("FP8 checkpoint, config without quantization_config", st2, p, SL_E_UNSUPPORTED,
                                 "has dtype F8_E4M3, which cannot be converted to BF16 (an FP8 "
                                 "checkpoint: the config has no quantization_config)");
            sl_plan_free(p);
        }
        sl_checkpoint_close(ck);
    }
}

static void scale_errors(void)
{
    static const uint64_t two[] = {2}, col[] = {256}, one[] = {1}, chan[] = {256, 1};
    static const struct {
        const char *quant, *name;
        sl_dtype dt;       /* SL_DTYPE_BOOL: drop the tensor */
        uint32_t ndim;
        const uint64_t *shape;
        sl_status want;
        const char *text;
    } cases[] = {
        /* w3's input scale 0, w1's positive */
        {pt_static, "model.layers.1.mlp.experts.2.up_proj.input_scale", SL_DTYPE_F32, 0, NULL, SL_E_UNSUPPORTED,
         "input_scales of w1 and w3 of a layer must be equal: checkpoint tensors "
         "'model.layers.1.mlp.experts.2.gate_proj.input_scale' (F32 0x"},
        {ct_static, "model.layers.1.mlp.experts.0.gate_proj.input_scale", SL_DTYPE_F32, 1, one, SL_E_UNSUPPORTED,
         "and 'model.layers.1.mlp.experts.0.up_proj.input_scale' (F32 0x"},
        {ct_static, "model.layers.1.mlp.experts.0.up_proj.input_scale", SL_DTYPE_BF16, 1, one, SL_E_UNSUPPORTED,
         "'model.layers.1.mlp.experts.0.up_proj.input_scale' (BF16 0x00000000) differ"},
        {pt_static, "model.layers.1.self_attn.o_proj.input_scale", SL_DTYPE_BOOL, 0, NULL, SL_E_MISSING,
         "(checkpoint tensors missing: 'model.layers.1.self_attn.o_proj.input_scale')"},
        {pt_static, "model.layers.0.self_attn.q_b_proj.weight_scale", SL_DTYPE_F32, 1, two, SL_E_SHAPE,
         "'model.layers.0.self_attn.q_b_proj.weight_scale' has shape [2] but the config implies []"},
        {fbgemm, "model.layers.0.self_attn.o_proj.weight_scale", SL_DTYPE_F32, 1, col, SL_E_SHAPE,
         "'model.layers.0.self_attn.o_proj.weight_scale' has shape [256] but the config implies [256, 1]"},
        {fbgemm, "model.layers.1.mlp.experts.3.down_proj.weight_scale", SL_DTYPE_BOOL, 0, NULL, SL_E_MISSING,
         "(checkpoint tensors missing: 'model.layers.1.mlp.experts.3.down_proj.weight_scale')"},
        /* F64 scales: not widened exactly, and w1's and w3's input scales are compared as 2 or 4
         * bytes (8 escaped the comparison) */
        {pt_static, "model.layers.1.mlp.experts.2.up_proj.input_scale", SL_DTYPE_F64, 0, NULL, SL_E_UNSUPPORTED,
         "checkpoint tensor 'model.layers.1.mlp.experts.2.up_proj.input_scale' is an FP8 scale of dtype F64: "
         "scales must be F32, BF16 or F16"},
        {pt_static, "model.layers.0.self_attn.o_proj.weight_scale", SL_DTYPE_F64, 0, NULL, SL_E_UNSUPPORTED,
         "'model.layers.0.self_attn.o_proj.weight_scale' is an FP8 scale of dtype F64"},
        {fbgemm, "model.layers.0.self_attn.o_proj.weight_scale", SL_DTYPE_BF16, 2, chan, SL_OK, ""},   /* widened */
        {ct_static, "model.layers.0.self_attn.o_proj.weight_scale", SL_DTYPE_F32, 0, NULL, SL_OK, ""},   /* [] too */
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ckdir[300];
        snprintf(ckdir, sizeof ckdir, "%s/se-%zu", dir, i);
        const char *cfg = small_ds("se.json", cases[i].quant);
        EXPECT(sl_synth(cfg, NULL, ckdir, -1, 3, 1, err, sizeof err) == SL_OK, "synth: %s", err);
        if (cases[i].dt == SL_DTYPE_BOOL)
            drop_tensor(ckdir, cases[i].name);
        else
            rewrite_tensor(ckdir, cases[i].name, cases[i].dt, cases[i].ndim, cases[i].shape);
        expect_plan_of(ckdir, cfg, 0, cases[i].name, cases[i].want, cases[i].text);
    }
}

/* A table whose param does not end in "weight" gives its input scale no name. */
static void input_scale_name(void)
{
    char rules[300], cfg[300];
    snprintf(rules, sizeof rules, "%s/odd-rules.json", dir);
    snprintf(cfg, sizeof cfg, "%s/odd.json", dir);
    tu_write_text(rules, "{\"rules\": [{\"tensor\": \"model.layers.{i}.mlp.down_proj.weight\", \"shape\": "
                         "[\"H\", \"I\"], \"shard\": \"row\", \"param\": \"model.layers.{i}.mlp.down\"}]}");
    tu_write_text(cfg, "{\"architectures\":[\"OddForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":128,"
                       "\"num_attention_heads\":4,\"num_hidden_layers\":1,\"vocab_size\":64,"
                       "\"torch_dtype\":\"bfloat16\",\"quantization_config\":{\"quant_method\":\"fp8\","
                       "\"activation_scheme\":\"static\"}}");
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = cfg;
    o.rules_path = rules;
    sl_plan *p = NULL;
    const sl_status st = sl_plan_build(NULL, &o, &p);
    tu_expect_plan_error("input scale of an odd param", st, p, SL_E_CONFIG, "param 'model.layers.{i}.mlp.down' "
                         "does not end in \"weight\", so its input_scale has no name");
    sl_plan_free(p);
}

int main(void)
{
    tu_tmpdir(dir, sizeof dir, "test_plan_fp8");
    worked_figures();
    straddling_slots();
    synth_and_bind();
    checkpoint_errors();
    config_errors();
    scalar_channel_figures();
    synth_scales();
    scale_errors();
    input_scale_name();
    tu_rm_rf(dir);
    if (expect_failures)
        fprintf(stderr, "%d failure(s)\n", expect_failures);
    else
        printf("test_plan_fp8: all passed\n");
    return expect_failures ? 1 : 0;
}
