/* test_plan_stages.c - an explicit pipeline split (sl_plan_opts.pp_partition, vLLM's
 * VLLM_PP_LAYER_PARTITION): each stage's layers read back from the parameter names against ranges
 * written out here by hand from vLLM's rule (stage s from the sum of the entries before it), a
 * stage of no layers, pp above the layers, the MoE tables that hold embed/norm/lm_head on every
 * stage, DeepSeek's MTP layer (not counted) and dense-first layers, the plan a partition equal to
 * the default split gives, sl_plan_stage_layers, and every refusal with its message.
 * Exit 0 pass, 1 fail. */
#include "expect.h"
#include "plan_testutil.h"
#include "scratch.h"
#include "shardload.h"

#include "plan/plan_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIGS SL_TEST_CONFIGS

static char scratch[512];

static sl_status build(const char *config, int tp, int pp, const int32_t *part, int32_t n,
                       sl_layout layout, sl_plan **p)
{
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = config;
    o.tp = tp;
    o.pp = pp;
    o.layout = layout;
    o.pp_partition = part;
    o.n_pp_partition = n;
    return sl_plan_build(NULL, &o, p);
}

/* A Llama config of L layers in the scratch directory. */
static const char *llama_cfg(int L)
{
    static char path[600];
    char text[512];
    snprintf(path, sizeof path, "%s/config.json", scratch);
    snprintf(text, sizeof text, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
             "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":1000,"
             "\"num_hidden_layers\":%d,\"torch_dtype\":\"bfloat16\"}", L);
    tu_write_text(path, text);
    return path;
}

/* The build fails with status want and a message containing text. */
static void refused(const char *what, const char *cfg, int tp, int pp, const int32_t *part,
                    int32_t n, sl_layout layout, sl_status want, const char *text)
{
    sl_plan *p = NULL;
    const sl_status st = build(cfg, tp, pp, part, n, layout, &p);
    tu_expect_plan_error(what, st, p, want, text);
    sl_plan_free(p);
}

/* Device d holds exactly the layers [first, end), each whole (its input_layernorm is the marker
 * every table has), and sl_plan_stage_layers says the same for its stage. */
static void expect_layers(const char *what, const sl_plan *p, int d, int first, int end)
{
    int n = 0, lo = -1, hi = -1;
    for (int64_t i = 0; p && i < p->devices[d].n_params; i++) {
        int l;
        const char *name = p->devices[d].params[i].name;
        if (strstr(name, ".input_layernorm.") && sscanf(name, "model.layers.%d.", &l) == 1) {
            lo = lo < 0 ? l : lo;
            hi = l;
            n++;
        }
    }
    const int ok = end == first ? n == 0 : n == end - first && lo == first && hi == end - 1;
    EXPECT(ok, "%s device %d: %d layers [%d..%d], want [%d, %d)", what, d, n, lo, hi, first, end);
    int64_t f = -1, c = -1;
    const int32_t stage = p ? p->devices[d].pp_rank : 0;
    EXPECT(sl_plan_stage_layers(p, stage, &f, &c) == SL_OK && f == first && c == end - first,
           "%s stage %d: sl_plan_stage_layers [%lld, +%lld), want [%d, %d)", what, (int)stage,
           (long long)f, (long long)c, first, end);
}

/* Llama-3-8B, 32 layers: 10,12,10 at tp 2 (vLLM's own example form); the embedding on stage 0
 * only, norm and lm_head on the last. */
static void llama_split(void)
{
    const int32_t part[] = {10, 12, 10};
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/llama-3-8b.json", 2, 3, part, 3, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    const int want[3][2] = {{0, 10}, {10, 22}, {22, 32}};
    for (int d = 0; p && d < 6; d++)
        expect_layers("llama 10,12,10", p, d, want[d / 2][0], want[d / 2][1]);
    EXPECT(tu_param(p, 1, "model.embed_tokens.weight") && !tu_param(p, 3, "model.embed_tokens.weight") &&
               !tu_param(p, 5, "model.embed_tokens.weight"), "embedding on stage 0 only");
    EXPECT(tu_param(p, 4, "lm_head.weight") && tu_param(p, 5, "model.norm.weight") &&
               !tu_param(p, 2, "lm_head.weight") && !tu_param(p, 0, "model.norm.weight"),
           "norm and lm_head on the last stage only");
    EXPECT(p && p->stages_custom, "10,12,10 is not vLLM's default split (11,11,10)");
    char *text = p ? sl_plan_partition_text(p) : NULL;
    EXPECT(text && !strcmp(text, "10,12,10"), "partition text '%s'", text ? text : "(null)");
    free(text);
    sl_plan_free(p);
}

/* Stages of no layers, which vLLM's get_pp_indices takes: a first stage of the embedding alone, a
 * last of norm and lm_head alone, a middle one of nothing; and pp above the layers, which the
 * default split refuses, with a partition that says where the layers go. */
static void empty_stages(void)
{
    const int32_t ends[] = {0, 11, 11, 0};
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/tinyllama-1.1b.json", 1, 4, ends, 4, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    expect_layers("0,11,11,0", p, 0, 0, 0);
    expect_layers("0,11,11,0", p, 1, 0, 11);
    expect_layers("0,11,11,0", p, 2, 11, 22);
    expect_layers("0,11,11,0", p, 3, 22, 22);
    EXPECT(sl_plan_param_count(p, 0) == 1 && tu_param(p, 0, "model.embed_tokens.weight"),
           "stage 0: the embedding alone (%lld params)", (long long)sl_plan_param_count(p, 0));
    EXPECT(sl_plan_param_count(p, 3) == 2 && tu_param(p, 3, "lm_head.weight") &&
               tu_param(p, 3, "model.norm.weight"), "stage 3: norm and lm_head alone");
    sl_plan_free(p);
    const char *cfg = llama_cfg(2);
    const int32_t wide[] = {1, 0, 0, 1};
    EXPECT(build(cfg, 2, 4, wide, 4, SL_LAYOUT_TP, &p) == SL_OK, "pp 4 > L 2: %s", sl_plan_errmsg(p));
    expect_layers("1,0,0,1", p, 0, 0, 1);
    expect_layers("1,0,0,1", p, 3, 1, 1);
    expect_layers("1,0,0,1", p, 5, 1, 1);
    expect_layers("1,0,0,1", p, 7, 1, 2);
    EXPECT(sl_plan_param_count(p, 2) == 0 && sl_plan_device_bytes(p, 2) == 0,
           "a middle stage of no layers holds nothing");
    sl_plan_free(p);
    refused("pp 4 > L 2, default split", cfg, 1, 4, NULL, 0, SL_LAYOUT_TP, SL_E_CONFIG,
            "pp 4 is larger than num_hidden_layers 2");
}

/* The same split given explicitly is the plan without it: nothing to stamp, the same params. */
static void default_equal(void)
{
    const int32_t same[] = {9, 10, 9};   /* qwen3-0.6b, 28 layers: 9 each, one more on P-2 */
    sl_plan *a = NULL, *b = NULL;
    EXPECT(build(CONFIGS "/qwen3-0.6b.json", 2, 3, same, 3, SL_LAYOUT_TP, &a) == SL_OK, "%s",
           sl_plan_errmsg(a));
    EXPECT(build(CONFIGS "/qwen3-0.6b.json", 2, 3, NULL, 0, SL_LAYOUT_TP, &b) == SL_OK, "%s",
           sl_plan_errmsg(b));
    EXPECT(a && b && !a->stages_custom && !b->stages_custom, "the default split is not custom");
    for (int d = 0; a && b && d < 6; d++) {
        EXPECT(a->devices[d].n_params == b->devices[d].n_params &&
                   a->devices[d].bytes == b->devices[d].bytes, "device %d differs", d);
        for (int64_t i = 0; i < a->devices[d].n_params && i < b->devices[d].n_params; i++)
            EXPECT(!strcmp(a->devices[d].params[i].name, b->devices[d].params[i].name),
                   "device %d param %lld", d, (long long)i);
    }
    const int want[3][2] = {{0, 9}, {9, 19}, {19, 28}};
    for (int d = 0; b && d < 6; d++)
        expect_layers("qwen3 default", b, d, want[d / 2][0], want[d / 2][1]);
    sl_plan_free(a);
    sl_plan_free(b);
}

/* Mixtral makes embed_tokens, norm and lm_head on every stage; the layers follow the partition. */
static void moe_every_stage(void)
{
    const int32_t part[] = {20, 12};
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/mixtral-8x7b.json", 2, 2, part, 2, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    for (int d = 0; p && d < 4; d++) {
        expect_layers("mixtral 20,12", p, d, d < 2 ? 0 : 20, d < 2 ? 20 : 32);
        EXPECT(tu_param(p, d, "model.embed_tokens.weight") && tu_param(p, d, "lm_head.weight") &&
                   tu_param(p, d, "model.norm.weight"), "mixtral device %d: embed, norm, lm_head", d);
    }
    EXPECT(tu_param(p, 3, "model.layers.31.block_sparse_moe.experts.w13_weight") &&
               !tu_param(p, 1, "model.layers.20.block_sparse_moe.experts.w13_weight"),
           "experts of layers 20.. on stage 1");
    sl_plan_free(p);
}

/* DeepSeek-V3: 61 layers (the first 3 dense) and 1 MTP layer past them, which is no stage's: the
 * partition sums to 61, and 62 is refused with a word on the MTP layer. */
static void deepseek(void)
{
    const int32_t part[] = {2, 59}, with_mtp[] = {31, 31};
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/deepseek-v3.json", 1, 2, part, 2, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    expect_layers("deepseek 2,59", p, 0, 0, 2);
    expect_layers("deepseek 2,59", p, 1, 2, 61);
    EXPECT(tu_param(p, 1, "model.layers.2.mlp.gate_up_proj.weight") &&
               tu_param(p, 1, "model.layers.3.mlp.experts.w13_weight") &&
               tu_param(p, 0, "model.layers.1.mlp.gate_up_proj.weight"),
           "dense layers 0-2 and MoE layers from 3 where the partition puts them");
    sl_plan_free(p);
    refused("deepseek 31,31", CONFIGS "/deepseek-v3.json", 1, 2, with_mtp, 2, SL_LAYOUT_TP,
            SL_E_CONFIG, "deepseek-v3.json: pp_partition 31,31 places 62 layers but "
            "num_hidden_layers is 61 (the 1 MTP layer past them, num_nextn_predict_layers, on no stage)");
}

static void errors(void)
{
    const char *cfg = CONFIGS "/llama-3-8b.json";
    const int32_t two[] = {16, 16}, neg[] = {10, -2, 24}, over[] = {10, 12, 11}, under[] = {10, 12, 9};
    refused("count", cfg, 1, 3, two, 2, SL_LAYOUT_TP, SL_E_INVALID_ARG,
            "pp_partition 16,16 has 2 entries but pp is 3: one entry (a count of layers) per pipeline stage");
    refused("count 1", cfg, 1, 2, two, 1, SL_LAYOUT_TP, SL_E_INVALID_ARG,
            "pp_partition 16 has 1 entry but pp is 2");
    refused("negative", cfg, 1, 3, neg, 3, SL_LAYOUT_TP, SL_E_INVALID_ARG,
            "pp_partition 10,-2,24: stage 1's entry -2 is negative: a stage holds 0 or more layers");
    refused("sum over", cfg, 2, 3, over, 3, SL_LAYOUT_TP, SL_E_CONFIG,
            "llama-3-8b.json: pp_partition 10,12,11 places 33 layers but num_hidden_layers is 32");
    refused("sum under", cfg, 2, 3, under, 3, SL_LAYOUT_TP, SL_E_CONFIG,
            "pp_partition 10,12,9 places 31 layers but num_hidden_layers is 32");
    refused("no list", cfg, 1, 2, NULL, 2, SL_LAYOUT_TP, SL_E_INVALID_ARG,
            "n_pp_partition is 2 but pp_partition is NULL");
    const int32_t one[] = {32};
    refused("spmd", cfg, 2, 1, one, 1, SL_LAYOUT_SPMD, SL_E_INVALID_ARG,
            "pp_partition applies to layout tp only");
    /* a long list is shown cut, with its last entry and its length */
    int32_t many[40];
    for (int i = 0; i < 40; i++)
        many[i] = i == 39 ? 7 : 1;
    refused("long", cfg, 1, 39, many, 40, SL_LAYOUT_TP, SL_E_INVALID_ARG,
            "pp_partition 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,...,7 (40 entries) has 40 entries but pp is 39");
}

/* The list is borrowed for the build only; sl_plan_stage_layers on spmd, boxes and bad stages. */
static void getters(void)
{
    int32_t part[] = {10, 22};
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/llama-3-8b.json", 1, 2, part, 2, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    part[0] = 30;
    part[1] = 2;
    expect_layers("after the caller's list changed", p, 1, 10, 32);
    int64_t f = 5, c = 5;
    EXPECT(sl_plan_stage_layers(p, 2, &f, &c) == SL_E_INVALID_ARG && f == 0 && c == 0, "stage 2 of 2");
    EXPECT(sl_plan_stage_layers(p, -1, &f, &c) == SL_E_INVALID_ARG, "stage -1");
    EXPECT(sl_plan_stage_layers(NULL, 0, &f, &c) == SL_E_INVALID_ARG, "NULL plan");
    EXPECT(sl_plan_stage_layers(p, 0, NULL, NULL) == SL_OK, "NULL out-pointers are allowed");
    sl_plan_free(p);
    EXPECT(build(CONFIGS "/llama-3-8b.json", 4, 1, NULL, 0, SL_LAYOUT_SPMD, &p) == SL_OK, "spmd");
    EXPECT(sl_plan_stage_layers(p, 0, &f, &c) == SL_OK && f == 0 && c == 32, "spmd: every layer");
    sl_plan_free(p);
}

int main(void)
{
    tu_tmpdir(scratch, sizeof scratch, "test_plan_stages");
    if (access(CONFIGS "/llama-3-8b.json", R_OK) != 0) {
        fprintf(stderr, "FAIL: %s/llama-3-8b.json not found\n", CONFIGS);
        return 1;
    }
    llama_split();
    empty_stages();
    default_equal();
    moe_every_stage();
    deepseek();
    errors();
    getters();
    tu_rm_rf(scratch);
    if (expect_failures)
        fprintf(stderr, "%d failure(s)\n", expect_failures);
    else
        printf("test_plan_stages: all passed\n");
    return expect_failures ? 1 : 0;
}
