/* test_plan_moe.c - mixture-of-experts plans (SHARDING-MOE-FP8.md): the worked figures from the
 * real Mixtral-8x7B and Qwen3-30B-A3B configs, vLLM's EP placement (uneven E % T included), that a
 * rank under EP reads exactly the experts it holds (plan file bytes and a load's bytes_read, with
 * one checkpoint file per tensor), and every MoE error: T > E, the experts' split, MLA heads not
 * divisible by T, EP with spmd, a missing and an unclaimed expert, and each malformed table form.
 * Exit 0 pass, 1 fail. */
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

static sl_status build(const sl_checkpoint *ck, const char *config, const char *rules, int tp,
                       int pp, int ep, sl_layout layout, sl_plan **p)
{
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = config;
    o.rules_path = rules;
    o.tp = tp;
    o.pp = pp;
    o.ep = ep;
    o.layout = layout;
    return sl_plan_build(ck, &o, p);
}

static int shape3(const sl_plan *p, int d, const char *name, uint64_t a, uint64_t b, uint64_t c)
{
    const sl_plan_param_t *x = tu_param(p, d, name);
    return x && x->ndim == (c ? 3u : 2u) && x->shape[0] == a && x->shape[1] == b &&
           (c == 0 || x->shape[2] == c);
}

/* ---- the spec's worked figures ---------------------------------------------------------------- */

static void worked_figures(void)
{
    sl_plan *p = NULL;
    const char *w13 = "model.layers.0.block_sparse_moe.experts.w13_weight";
    EXPECT(build(NULL, CONFIGS "/mixtral-8x7b.json", NULL, 2, 1, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    EXPECT(shape3(p, 0, w13, 4, 28672, 4096), "Mixtral T=2 EP: rank 0 w13 [4, 28672, 4096]");
    EXPECT(shape3(p, 1, "model.layers.31.block_sparse_moe.experts.w2_weight", 4, 4096, 14336),
           "Mixtral T=2 EP: w2 [4, 4096, 14336]");
    EXPECT(shape3(p, 1, "model.layers.31.block_sparse_moe.gate.weight", 8, 4096, 0), "router full");
    sl_plan_free(p);
    EXPECT(build(NULL, CONFIGS "/mixtral-8x7b.json", NULL, 2, 1, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    EXPECT(shape3(p, 1, w13, 8, 14336, 4096), "Mixtral T=2: all 8 experts, I/T rows each");
    sl_plan_free(p);

    const char *q3 = CONFIGS "/qwen3-30b-a3b.json";
    EXPECT(build(NULL, q3, NULL, 2, 1, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(shape3(p, 0, "model.layers.0.self_attn.qkv_proj.weight", 2560, 2048, 0), "Qwen3 qkv");
    EXPECT(shape3(p, 1, "model.layers.47.mlp.experts.w13_weight", 128, 768, 2048), "Qwen3 T=2 w13");
    EXPECT(tu_param(p, 0, "model.layers.0.mlp.gate_up_proj.weight") == NULL,
           "no dense MLP in an all-MoE Qwen3 (mlp_only_layers [])");
    EXPECT(tu_param(p, 0, "model.layers.0.mlp.shared_expert.gate_up_proj.weight") == NULL,
           "no shared expert (shared_expert_intermediate_size absent)");
    sl_plan_free(p);
    EXPECT(build(NULL, q3, NULL, 8, 2, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(shape3(p, 15, "model.layers.47.mlp.experts.w13_weight", 16, 1536, 2048), "Qwen3 T=8 EP");
    EXPECT(shape3(p, 8, "model.layers.24.mlp.experts.w2_weight", 16, 2048, 768), "Qwen3 EP stage 1");
    sl_plan_free(p);
    /* DeepSeek-V3 (MLA, 256 experts, 3 dense layers), T = 8 */
    const char *ds = CONFIGS "/deepseek-v3.json";
    EXPECT(build(NULL, ds, NULL, 8, 1, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(shape3(p, 7, "model.layers.3.mlp.experts.w13_weight", 256, 512, 7168), "DS-V3 w13");
    EXPECT(shape3(p, 7, "model.layers.60.mlp.experts.w2_weight", 256, 7168, 256), "DS-V3 w2");
    EXPECT(shape3(p, 0, "model.layers.0.self_attn.fused_qkv_a_proj.weight", 2112, 7168, 0), "fused_qkv_a");
    EXPECT(shape3(p, 0, "model.layers.0.self_attn.q_b_proj.weight", 3072, 1536, 0), "q_b_proj");
    EXPECT(shape3(p, 0, "model.layers.0.self_attn.kv_b_proj.weight", 4096, 512, 0), "kv_b_proj");
    EXPECT(shape3(p, 0, "model.layers.0.self_attn.o_proj.weight", 7168, 2048, 0), "o_proj");
    EXPECT(shape3(p, 0, "model.layers.2.mlp.gate_up_proj.weight", 4608, 7168, 0), "dense layer 2");
    EXPECT(tu_param(p, 0, "model.layers.3.mlp.gate_up_proj.weight") == NULL, "layer 3 is MoE");
    EXPECT(shape3(p, 0, "model.layers.3.mlp.shared_experts.gate_up_proj.weight", 512, 7168, 0),
           "shared experts: 2 * 2048 * 1 / 8 rows");
    const sl_plan_param_t *bias = tu_param(p, 0, "model.layers.3.mlp.gate.e_score_correction_bias");
    EXPECT(bias && bias->ndim == 1 && bias->shape[0] == 256, "noaux_tc: the correction bias [256]");
    /* embed, norm, lm_head; 8 attention and norm parameters a layer; 2 dense MLP ones in layers
     * 0-2; router, bias, w13, w2 and the shared expert's 2 in layers 3-60; and a block scale for
     * each FP8 weight (4 attention, 2 dense, 4 MoE; test_plan_fp8 checks them) */
    EXPECT(p && p->devices[0].n_params == 3 + 3 * (10 + 6) + 58 * (14 + 8), "DS-V3 params per device: %lld",
           p ? (long long)p->devices[0].n_params : -1ll);
    sl_plan_free(p);
    EXPECT(build(NULL, ds, NULL, 8, 1, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(shape3(p, 5, "model.layers.3.mlp.experts.w13_weight", 32, 4096, 7168), "DS-V3 EP El = 32");
    sl_plan_free(p);
    /* --ep at T = 1 changes nothing */
    sl_plan *a = NULL, *b = NULL;
    EXPECT(build(NULL, q3, NULL, 1, 1, 0, SL_LAYOUT_TP, &a) == SL_OK &&
               build(NULL, q3, NULL, 1, 1, 1, SL_LAYOUT_TP, &b) == SL_OK, "T=1");
    EXPECT(a && b && sl_plan_device_bytes(a, 0) == sl_plan_device_bytes(b, 0), "T=1 EP same bytes");
    EXPECT(b && sl_plan_ep(b) == 0, "T=1 --ep: the plan without it (a reshard stamps no ep)");
    sl_plan_free(a);
    sl_plan_free(b);
}

/* ---- a small Mixtral: uneven EP, bytes read ---------------------------------------------------- */

/* E = 8 over T = 3 (attention allows 3): ranks hold [0,3), [3,6), [6,8). */
static const char *small_mixtral(void)
{
    static char path[300];
    snprintf(path, sizeof path, "%s/mixtral.json", dir);
    tu_write_text(path, "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":48,"
                     "\"intermediate_size\":96,\"num_attention_heads\":6,\"num_key_value_heads\":3,"
                     "\"num_hidden_layers\":2,\"vocab_size\":192,\"num_local_experts\":8,"
                     "\"torch_dtype\":\"bfloat16\"}");
    return path;
}

static void uneven_ep(void)
{
    const int64_t want[3] = {3, 3, 2};
    sl_plan *p = NULL;
    EXPECT(build(NULL, small_mixtral(), NULL, 3, 1, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s",
           sl_plan_errmsg(p));
    for (int d = 0; p && d < 3; d++)
        EXPECT(shape3(p, d, "model.layers.1.block_sparse_moe.experts.w13_weight", (uint64_t)want[d],
                      192, 48), "E=8 over T=3: rank %d holds %lld", d, (long long)want[d]);
    sl_plan_free(p);
}

static int64_t tensor_index(const sl_checkpoint *ck, const char *name)
{
    for (int64_t i = 0; i < sl_checkpoint_tensor_count(ck); i++) {
        sl_tensor_info ti;
        if (sl_checkpoint_tensor(ck, i, &ti) == SL_OK && !strcmp(ti.name, name))
            return i;
    }
    return -1;
}

/* One file per tensor (max shard 1 byte): the plan's bytes per file show which experts a device
 * reads. Under EP, rank r reads every byte of the experts it holds and none of the others. */
static void ep_reads_held_experts(void)
{
    char ckdir[300], err[512];
    snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
    EXPECT(sl_synth(small_mixtral(), NULL, ckdir, -1, 7, 1, err, sizeof err) == SL_OK, "%s", err);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK, "open %s", ckdir);
    if (!ck)
        return;
    sl_plan *p = NULL;
    EXPECT(build(ck, small_mixtral(), NULL, 3, 1, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    const int64_t first[3] = {0, 3, 6}, count[3] = {3, 3, 2};
    const uint64_t expert_bytes = 96 * 48 * 2;   /* each of w1, w2, w3 */
    for (int d = 0; p && d < 3; d++) {
        for (int e = 0; e < 8; e++) {
            for (int w = 1; w <= 3; w++) {
                char name[128];
                snprintf(name, sizeof name, "model.layers.1.block_sparse_moe.experts.%d.w%d.weight", e, w);
                sl_tensor_info ti;
                const int64_t i = tensor_index(ck, name);
                EXPECT(i >= 0 && sl_checkpoint_tensor(ck, i, &ti) == SL_OK, "%s", name);
                const int held = e >= first[d] && e < first[d] + count[d];
                EXPECT(i < 0 || sl_plan_device_file_bytes(p, d, ti.file) == (held ? expert_bytes : 0),
                       "EP device %d reads %llu bytes of %s (held %d)", d,
                       (unsigned long long)sl_plan_device_file_bytes(p, d, ti.file), name, held);
            }
        }
        /* a load of this device alone reads exactly its plan bytes */
        uint64_t want = 0;
        for (int64_t f = 0; f < sl_checkpoint_file_count(ck); f++)
            want += sl_plan_device_file_bytes(p, d, f);
        sl_load_opts lo;
        sl_load_opts_init(&lo);
        lo.devices = &d;
        lo.n_devices = 1;
        lo.io = SL_IO_BUFFERED;
        sl_model *m = NULL;
        EXPECT(sl_load(ck, p, &lo, &m) == SL_OK, "load device %d: %s", d, m ? sl_model_errmsg(m) : "");
        /* The reader may take a small gap between the strided rows it needs along (o_proj's
         * column blocks), never a whole file: one unheld expert would add its 9,216 bytes. */
        sl_load_stats st = {0};
        EXPECT(m && sl_model_stats(m, &st) == SL_OK && st.bytes_read >= want &&
                   st.bytes_read < want + expert_bytes,
               "device %d bytes_read %llu, plan %llu", d, (unsigned long long)st.bytes_read,
               (unsigned long long)want);
        sl_model_free(m);
    }
    sl_plan_free(p);
    /* without EP every rank reads a third of every expert */
    EXPECT(build(ck, small_mixtral(), NULL, 3, 1, 0, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    const int64_t i = tensor_index(ck, "model.layers.0.block_sparse_moe.experts.7.w2.weight");
    sl_tensor_info ti;
    EXPECT(p && i >= 0 && sl_checkpoint_tensor(ck, i, &ti) == SL_OK &&
               sl_plan_device_file_bytes(p, 0, ti.file) == 96 * 48 * 2 / 3, "no EP: a third");
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

/* ---- errors ----------------------------------------------------------------------------------- */

/* T > E: vLLM refuses it in qwen2_moe.py and qwen3_moe.py alone (at 9aaf83ef), with or without
 * EP; a Mixtral (or DeepSeek) at T > E cuts its experts along I, or under EP leaves ranks r >= E
 * with none (w13_weight [0, 2I, H], FusedMoE's local_num_experts 0). */
static void more_ranks_than_experts(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/mixtral16.json", dir);
    tu_write_text(path, "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":64,"
                        "\"intermediate_size\":128,\"num_attention_heads\":16,\"num_key_value_heads\":4,"
                        "\"num_hidden_layers\":2,\"vocab_size\":192,\"num_local_experts\":8,"
                        "\"torch_dtype\":\"bfloat16\"}");
    const char *w13 = "model.layers.1.block_sparse_moe.experts.w13_weight";
    const char *w2 = "model.layers.1.block_sparse_moe.experts.w2_weight";
    sl_plan *p = NULL;
    sl_status st = build(NULL, path, NULL, 16, 1, 0, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && shape3(p, 15, w13, 8, 16, 64) && shape3(p, 15, w2, 8, 64, 8),
           "Mixtral T 16 > E 8, no EP: every expert cut along I: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    p = NULL;
    st = build(NULL, path, NULL, 16, 1, 1, SL_LAYOUT_TP, &p);
    EXPECT(st == SL_OK && shape3(p, 7, w13, 1, 256, 64) && shape3(p, 8, w13, 0, 256, 64) &&
               shape3(p, 8, w2, 0, 64, 128) && tu_param(p, 8, w13)->nbytes == 0,
           "Mixtral T 16 > E 8, EP: ranks 8-15 hold no expert: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    snprintf(path, sizeof path, "%s/qwen3moe8.json", dir);
    tu_write_text(path, "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64,"
                        "\"intermediate_size\":128,\"num_attention_heads\":8,\"num_key_value_heads\":4,"
                        "\"head_dim\":16,\"num_hidden_layers\":2,\"vocab_size\":192,\"num_experts\":4,"
                        "\"moe_intermediate_size\":32,\"torch_dtype\":\"bfloat16\"}");
    for (int ep = 0; ep < 2; ep++) {
        p = NULL;
        st = build(NULL, path, NULL, 8, 1, ep, SL_LAYOUT_TP, &p);
        tu_expect_plan_error("Qwen3-MoE T > E", st, p, SL_E_DIVISIBILITY,
                             "Tensor parallel size 8 is greater than the number of experts 4");
        sl_plan_free(p);
    }
}

static void mesh_errors(void)
{
    sl_plan *p = NULL;
    const char *cfg = small_mixtral();
    /* layout spmd tiles each expert's tensor on its own: 12 devices over 8 experts, w1's 96 rows
     * in tiles of 8 */
    const sl_status spmd = build(NULL, cfg, NULL, 12, 1, 0, SL_LAYOUT_SPMD, &p);
    EXPECT(spmd == SL_OK, "spmd N > E: %s", sl_plan_errmsg(p));
    EXPECT(spmd == SL_OK && shape3(p, 11, "model.layers.1.block_sparse_moe.experts.7.w1.weight", 8, 48, 0) &&
               shape3(p, 11, "model.layers.1.block_sparse_moe.experts.7.w2.weight", 48, 8, 0),
           "spmd N = 12: an expert's w1 [8, 48], w2 [48, 8]");
    sl_plan_free(p);
    /* the experts' intermediate split only without EP: I = 96 over T = 6 heads-wise fine, 96 % 6
     * == 0; over T = 3 with I = 100 it is not */
    char path[300];
    snprintf(path, sizeof path, "%s/mixtral-i.json", dir);
    tu_write_text(path, "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":48,"
                     "\"intermediate_size\":100,\"num_attention_heads\":6,\"num_key_value_heads\":3,"
                     "\"num_hidden_layers\":2,\"vocab_size\":192,\"num_local_experts\":8,"
                     "\"torch_dtype\":\"bfloat16\"}");
    sl_status st = build(NULL, path, NULL, 3, 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("experts' I % T", st, p, SL_E_DIVISIBILITY, "intermediate_size 100 is not divisible by tp 3");
    sl_plan_free(p);
    EXPECT(build(NULL, path, NULL, 3, 1, 1, SL_LAYOUT_TP, &p) == SL_OK, "EP keeps experts whole: %s",
           sl_plan_errmsg(p));
    sl_plan_free(p);
    /* DeepSeek MLA has no qkv rule, yet its heads are split: with 6 heads at T = 4 q_b_proj
     * (6*24 rows), kv_b_proj (6*32) and o_proj (6*16 columns) all divide, each rank would hold a
     * head and a half. Layout spmd tiles the tensors and may cut heads. So may a --rules table's
     * column rule of nh*D rows (nh 6, D 8: 48 rows over 4). */
    snprintf(path, sizeof path, "%s/deepseek-nh6.json", dir);
    tu_write_text(path, "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"hidden_size\":96,"
                     "\"intermediate_size\":64,\"moe_intermediate_size\":32,\"num_attention_heads\":6,"
                     "\"num_hidden_layers\":2,\"first_k_dense_replace\":1,\"n_routed_experts\":4,"
                     "\"n_shared_experts\":1,\"q_lora_rank\":48,\"kv_lora_rank\":32,"
                     "\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"
                     "\"vocab_size\":128,\"topk_method\":\"noaux_tc\",\"torch_dtype\":\"bfloat16\"}");
    st = build(NULL, path, NULL, 4, 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("MLA heads % T", st, p, SL_E_DIVISIBILITY,
                         "num_attention_heads 6 is not divisible by tp 4");
    sl_plan_free(p);
    EXPECT(build(NULL, path, NULL, 2, 1, 0, SL_LAYOUT_TP, &p) == SL_OK, "MLA 6 heads at T = 2: %s",
           sl_plan_errmsg(p));
    sl_plan_free(p);
    EXPECT(build(NULL, path, NULL, 4, 1, 0, SL_LAYOUT_SPMD, &p) == SL_OK, "MLA 6 heads, spmd N = 4: %s",
           sl_plan_errmsg(p));
    sl_plan_free(p);
    char rules[300];
    snprintf(rules, sizeof rules, "%s/heads-rules.json", dir);
    tu_write_text(rules, "{\"rules\":[{\"tensor\":\"model.layers.{i}.q.weight\",\"shape\":[\"nh*D\",\"H\"],"
                      "\"shard\":\"column\"}]}");
    snprintf(path, sizeof path, "%s/heads.json", dir);
    tu_write_text(path, "{\"architectures\":[\"MyForCausalLM\"],\"hidden_size\":48,\"intermediate_size\":64,"
                     "\"num_attention_heads\":6,\"num_hidden_layers\":1,\"vocab_size\":128,"
                     "\"torch_dtype\":\"bfloat16\"}");
    st = build(NULL, path, rules, 4, 1, 0, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("--rules heads % T", st, p, SL_E_DIVISIBILITY,
                         "num_attention_heads 6 is not divisible by tp 4");
    sl_plan_free(p);
    st = build(NULL, cfg, NULL, 2, 1, 1, SL_LAYOUT_SPMD, &p);
    tu_expect_plan_error("ep + spmd", st, p, SL_E_INVALID_ARG, "layout tp only");
    sl_plan_free(p);
    st = build(NULL, cfg, NULL, 2, 1, 2, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("ep 2", st, p, SL_E_INVALID_ARG, "ep must be 0 or 1");
    sl_plan_free(p);
}

/* Edits a checkpoint's index: adds name -> file (file non-NULL) or drops name and deletes its file. */
static int index_edit(const char *ckdir, const char *name, const char *file)
{
    char path[400];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", ckdir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    int ok = wm != NULL;
    if (ok && file) {
        ok = json_object_set_new(wm, name, json_string(file)) == 0;
    } else if (ok) {
        char old[400];
        const char *f = json_string_value(json_object_get(wm, name));
        snprintf(old, sizeof old, "%s/%s", ckdir, f ? f : "?");
        ok = f && unlink(old) == 0 && json_object_del(wm, name) == 0;
    }
    ok = ok && json_dump_file(root, path, 0) == 0;
    json_decref(root);
    return ok;
}

static void checkpoint_errors(void)
{
    char ckdir[300], err[512], path[400];
    /* an expert the config does not have (index 8 of E = 8) is unclaimed */
    snprintf(ckdir, sizeof ckdir, "%s/ck-extra", dir);
    EXPECT(sl_synth(small_mixtral(), NULL, ckdir, -1, 7, 1, err, sizeof err) == SL_OK, "%s", err);
    snprintf(path, sizeof path, "%s/extra.safetensors", ckdir);
    sl_writer *w = NULL;
    const uint64_t shape[2] = {96, 48};
    int64_t idx = 0;
    const char *stray = "model.layers.0.block_sparse_moe.experts.8.w1.weight";
    EXPECT(sl_writer_open(path, &w) == SL_OK &&
               sl_writer_add(w, stray, SL_DTYPE_BF16, 2, shape, &idx) == SL_OK &&
               sl_writer_begin(w) == SL_OK, "writer");
    void *zero = calloc(96 * 48, 2);
    EXPECT(w && zero && sl_writer_write(w, idx, 0, zero, 96 * 48 * 2) == SL_OK &&
               sl_writer_finish(w) == SL_OK, "write %s", w ? sl_writer_errmsg(w) : "");
    free(zero);
    sl_writer_free(w);
    EXPECT(index_edit(ckdir, stray, "extra.safetensors"), "index add");
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK, "open with extra expert");
    sl_plan *p = NULL;
    sl_status st = build(ck, small_mixtral(), NULL, 3, 1, 1, SL_LAYOUT_TP, &p);
    tu_expect_plan_error("unclaimed expert", st, p, SL_E_UNCLAIMED, stray);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    /* a missing expert is an error with or without EP, whichever rank would hold it */
    snprintf(ckdir, sizeof ckdir, "%s/ck-missing", dir);
    EXPECT(sl_synth(small_mixtral(), NULL, ckdir, -1, 7, 1, err, sizeof err) == SL_OK, "%s", err);
    EXPECT(index_edit(ckdir, "model.layers.1.block_sparse_moe.experts.5.w3.weight", NULL), "index drop");
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK, "open");
    for (int ep = 0; ep < 2; ep++) {
        st = build(ck, small_mixtral(), NULL, 3, 1, ep, SL_LAYOUT_TP, &p);
        tu_expect_plan_error("missing expert", st, p, SL_E_MISSING,
                     "{'model.layers.1.block_sparse_moe.experts.w13_weight'} (checkpoint tensors missing: "
                     "'model.layers.1.block_sparse_moe.experts.5.w3.weight')");
        sl_plan_free(p);
    }
    sl_checkpoint_close(ck);
}

/* Each malformed table form, from a copy of the Mixtral table with one thing changed. */
static void table_errors(void)
{
    static const struct {
        const char *top, *rule, *want;
    } cases[] = {
        {"\"moe\":{\"experts\":\"E\",\"stepp\":\"x\"}", "", "rule table \"moe\": unknown key \"stepp\""},
        {"\"moe\":{\"experts\":\"X\"}", "", "\"experts\" must name a symbol"},
        {"\"moe\":{\"experts\":\"E\"},\"extra\":1", "", "rule table: unknown key \"extra\""},
        {"\"moe\":{\"experts\":\"E\"}", ",\"when\":\"Q\"", "\"when\" must name a symbol"},
        {"\"moe\":{\"experts\":\"E\"}", ",\"layers\":\"some\"", "\"layers\" must be"},
        {"\"moe\":{\"experts\":\"E\"}", ",\"layers\":\"dense\"", "applies to MoE layers only"},
        {"\"moe\":{\"experts\":\"E\"}", ",\"color\":1", "unknown key \"color\""},
        {"\"moe\":{\"experts\":\"E\",\"step\":\"num_hidden_layers\",\"freq\":\"zero\"}", "",
         "config 'zero' is 0; it must be at least 1"},
        {"", "", "{e} needs the table's \"moe\" entry"},
        {"\"moe\":{\"experts\":\"E\"}", ",\"unless\":\"Q\"", "\"unless\" must name a symbol"},
        {"\"moe\":{\"experts\":\"E\"},\"skip_extra_layers\":1", "", "\"skip_extra_layers\" is neither a boolean nor a config key"},
        {"\"moe\":{\"experts\":\"E\"}", ",\"dtype\":\"F8_E4M3\"", "\"dtype\" must be \"F32\", \"BF16\" or \"F16\""},
        {"\"moe\":{\"experts\":\"E\"}", ",\"dtype\":32", "\"dtype\" must be \"F32\", \"BF16\" or \"F16\""},
        {"\"moe\":{\"experts\":\"E\"}", ",\"otherwise\":\"optional\"",
         "\"otherwise\" can only be \"optional\", beside \"when\" or \"unless\""},
        {"\"moe\":{\"experts\":\"E\"}", ",\"when\":\"E\",\"otherwise\":\"maybe\"",
         "\"otherwise\" can only be \"optional\", beside \"when\" or \"unless\""},
        {"\"moe\":{\"experts\":\"E\"}", ",\"when\":\"E\",\"otherwise\":\"optional\"",
         "an {e} rule cannot be optional"},
    };
    char cfg[300], rules[300];
    snprintf(cfg, sizeof cfg, "%s/mixtral-z.json", dir);
    tu_write_text(cfg, "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":48,"
                    "\"intermediate_size\":96,\"num_attention_heads\":6,\"num_key_value_heads\":3,"
                    "\"num_hidden_layers\":2,\"vocab_size\":192,\"num_local_experts\":8,\"zero\":0,"
                    "\"torch_dtype\":\"bfloat16\"}");
    snprintf(rules, sizeof rules, "%s/rules.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "{\"symbols\":{\"E\":\"num_local_experts\"}%s%s,\"rules\":["
                 "{\"tensor\":\"model.layers.{i}.experts.{e}.w1.weight\",\"shape\":[\"I\",\"H\"],"
                 "\"shard\":\"merged\",\"slot\":0,\"param\":\"model.layers.{i}.experts.w13_weight\"%s}]}",
                 cases[i].top[0] ? "," : "", cases[i].top, cases[i].rule);
        tu_write_text(rules, text);
        sl_plan *p = NULL;
        const sl_status st = build(NULL, cfg, rules, 1, 1, 0, SL_LAYOUT_TP, &p);
        tu_expect_plan_error(cases[i].want, st, p, SL_E_CONFIG, cases[i].want);
        sl_plan_free(p);
    }
    /* an optional tensor ("unless": E, E = 8: optional here) cannot be a slot of a fused param */
    tu_write_text(rules, "{\"symbols\":{\"E\":\"num_local_experts\"},\"rules\":["
                         "{\"tensor\":\"a.weight\",\"shape\":[\"H\",\"H\"],\"shard\":\"concat\",\"slot\":0,"
                         "\"param\":\"ab.weight\",\"place\":\"first\",\"unless\":\"E\",\"otherwise\":\"optional\"},"
                         "{\"tensor\":\"b.weight\",\"shape\":[\"H\",\"H\"],\"shard\":\"concat\",\"slot\":1,"
                         "\"param\":\"ab.weight\",\"place\":\"first\"}]}");
    sl_plan *po = NULL;
    const sl_status sto = build(NULL, cfg, rules, 1, 1, 0, SL_LAYOUT_TP, &po);
    tu_expect_plan_error("optional slot", sto, po, SL_E_CONFIG, "rule 'b.weight': an optional tensor "
                         "(\"otherwise\") cannot be a slot of param 'ab.weight'");
    sl_plan_free(po);
    /* symbols: a built-in name, a bad default, a missing key without default */
    static const struct {
        const char *syms, *want;
    } sym_cases[] = {
        {"\"H\":\"num_local_experts\"", "symbol 'H' is built in"},
        {"\"E\":{\"key\":\"num_local_experts\",\"default\":-1}", "\"default\" must be an integer"},
        {"\"E\":{\"key\":\"num_local_experts\",\"dflt\":1}", "unknown key \"dflt\""},
        {"\"E\":\"no_such_key\"", "config has no 'no_such_key'"},
        {"\"E\":{\"key\":\"num_local_experts\",\"equals\":3}", "\"equals\" must be a string"},
        {"\"E\":{\"key\":[]}", "needs a config key (a string or a list of strings"},
        {"\"E\":{\"key\":[\"num_local_experts\",7]}", "\"key\"[1] is not a string"},
        {"\"E\":{\"key\":[\"no_such_key\",\"nor_this\"]}", "config has no 'no_such_key'"},
        {"\"B\":{\"key\":\"m\",\"equals\":\"x\",\"default\":1}", "must be a string or an object of strings"},
        {"\"B\":{\"key\":\"m\",\"equals\":\"x\",\"default\":{\"MixtralForCausalLM\":1}}",
         "\"default\" for 'MixtralForCausalLM' is not a string"},
    };
    for (size_t i = 0; i < sizeof sym_cases / sizeof sym_cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "{\"symbols\":{%s},\"rules\":[{\"tensor\":\"model.norm.weight\","
                 "\"shape\":[\"H\"],\"shard\":\"replicated\",\"place\":\"last\"}]}", sym_cases[i].syms);
        tu_write_text(rules, text);
        sl_plan *p = NULL;
        const sl_status st = build(NULL, cfg, rules, 1, 1, 0, SL_LAYOUT_TP, &p);
        tu_expect_plan_error(sym_cases[i].want, st, p, SL_E_CONFIG, sym_cases[i].want);
        sl_plan_free(p);
    }
}

/* A symbol's key may be a list, the first the config has (transformers' aliases); an "equals"
 * symbol's "default" is the value assumed when the config lacks the key, alone or by architecture
 * (DeepSeek-V3's topk_method "noaux_tc"). Each case: whether rule 'b' (when B) is planned, and E. */
static void symbol_forms(void)
{
    static const struct {
        const char *cfg_extra, *b, *what;
        int has_b;
    } cases[] = {
        {"", "{\"key\":\"m\",\"equals\":\"x\"}", "absent, no default", 0},
        {"", "{\"key\":\"m\",\"equals\":\"x\",\"default\":\"x\"}", "absent, default x", 1},
        {"", "{\"key\":\"m\",\"equals\":\"x\",\"default\":\"y\"}", "absent, default y", 0},
        {",\"m\":null", "{\"key\":\"m\",\"equals\":\"x\",\"default\":\"x\"}", "null: absent", 1},
        {"", "{\"key\":\"m\",\"equals\":\"x\",\"default\":{\"MixtralForCausalLM\":\"x\"}}",
         "absent, this architecture's default x", 1},
        {"", "{\"key\":\"m\",\"equals\":\"x\",\"default\":{\"OtherForCausalLM\":\"x\"}}",
         "absent, only another architecture's default", 0},
        {",\"m\":\"y\"", "{\"key\":\"m\",\"equals\":\"x\",\"default\":{\"MixtralForCausalLM\":\"x\"}}",
         "present y: the default is not used", 0},
        {",\"m\":\"x\"", "{\"key\":\"m\",\"equals\":\"x\"}", "present x", 1},
    };
    char cfg[300], rules[300];
    snprintf(cfg, sizeof cfg, "%s/sym.json", dir);
    snprintf(rules, sizeof rules, "%s/sym-rules.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        /* num_experts is absent, num_local_experts (8) present: the list takes the second */
        snprintf(text, sizeof text, "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":48,"
                 "\"intermediate_size\":96,\"num_attention_heads\":6,\"num_hidden_layers\":2,"
                 "\"vocab_size\":192,\"num_local_experts\":8,\"torch_dtype\":\"bfloat16\"%s}",
                 cases[i].cfg_extra);
        tu_write_text(cfg, text);
        snprintf(text, sizeof text, "{\"symbols\":{\"E\":{\"key\":[\"num_experts\",\"num_local_experts\"]},"
                 "\"B\":%s},\"rules\":[{\"tensor\":\"e\",\"shape\":[\"E\"],\"shard\":\"replicated\","
                 "\"place\":\"first\"},{\"tensor\":\"b\",\"shape\":[\"H\"],\"shard\":\"replicated\","
                 "\"place\":\"first\",\"when\":\"B\"}]}", cases[i].b);
        tu_write_text(rules, text);
        sl_plan *p = NULL;
        const sl_status st = build(NULL, cfg, rules, 1, 1, 0, SL_LAYOUT_TP, &p);
        EXPECT(st == SL_OK, "%s", cases[i].what);
        if (st == SL_OK) {
            const sl_plan_param_t *e = tu_param(p, 0, "e");
            EXPECT(e && e->ndim == 1 && e->shape[0] == 8, "%s", cases[i].what);
            EXPECT((tu_param(p, 0, "b") != NULL) == cases[i].has_b, "%s", cases[i].what);
        } else {
            fprintf(stderr, "  %s\n", sl_plan_errmsg(p));
        }
        sl_plan_free(p);
    }
}

int main(void)
{
    tu_tmpdir(dir, sizeof dir, "test_plan_moe");
    worked_figures();
    uneven_ep();
    ep_reads_held_experts();
    mesh_errors();
    more_ranks_than_experts();
    checkpoint_errors();
    table_errors();
    symbol_forms();
    tu_rm_rf(dir);
    if (expect_failures)
        fprintf(stderr, "%d failure(s)\n", expect_failures);
    else
        printf("test_plan_moe: all passed\n");
    return expect_failures ? 1 : 0;
}
