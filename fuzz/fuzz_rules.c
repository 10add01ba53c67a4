/* fuzz_rules.c - a user rule table (`shardload plan --rules FILE`, sl_plan_opts.rules_path) on
 * arbitrary bytes: the table parser (symbols, moe, rules, shape expressions, slots, placement), the
 * FP8 scale rules it implies, the tensor list and the planner. The config is fixed and valid, so
 * whatever fails is the table's fault.
 *
 * The bytes go to rules.json in a private temporary directory, beside configs written there once,
 * tiny in their sizes so that a plan is cheap: Llama; Qwen2 (tied, a vocab that is no multiple of
 * 64); Qwen3 (explicit head_dim); Mixtral (every layer MoE); Qwen2-MoE (fbgemm FP8, a dense layer,
 * a shared expert); Qwen3-MoE (static per-tensor FP8, MoE every second layer); DeepSeek-V3 (FP8
 * blocks, MLA); and one with Qwen3-30B-A3B's counts (48 layers, 128 experts), where what a table
 * costs per tensor shows. A table is planned against each config whose architecture it lists (all
 * of them when it lists none): tp 1 in BF16, and when that works, tp 2 pp 2 with and without
 * expert parallelism in the config's dtype, and spmd 4 in F32.
 *
 * A failure is a documented status whose message names the rules file (the config is valid: the
 * table is what is wrong; what depends on the mesh may name the config instead); a plan packs
 * each device's parameters with no gaps, under names that differ. A plan that takes more than
 * FZ_PLAN_MAX_S seconds, or a peak resident memory above FZ_RSS_MAX_MB, aborts: a table of a few
 * KB must cost neither minutes nor gigabytes (libFuzzer's -timeout and -rss_limit_mb say so too,
 * but the corpus replay runs without them). FZ_RULES_TRACE=1 in the environment prints what each
 * plan gave (to check a seed). */
#include "fz_plan.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Peak resident memory of the process, checked after each plan (below the -rss_limit_mb=2048 that
 * fuzzing runs with, above the few hundred MB libFuzzer itself takes). */
#define FZ_RSS_MAX_MB 1536

/* The largest plan the limits allow (1M tensors, big_moe's) takes about 11 s under ASan; the seed
 * one_moe_layer_65536_experts (393k tensors, four plans) about 10 s, 15 s with libFuzzer's
 * instrumentation: fuzz with a -timeout above that (make fuzz gives 60). */
#define FZ_PLAN_MAX_S 30.0

#define FZ_DENSE "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, " \
                 "\"intermediate_size\": 128, \"num_hidden_layers\": 4, "

static const struct fz_config {
    const char *name;
    const char *json;
} fz_configs[] = {
    {"llama", "{\"architectures\": [\"LlamaForCausalLM\"], " FZ_DENSE
              "\"vocab_size\": 256, \"torch_dtype\": \"bfloat16\"}"},
    {"qwen2", "{\"architectures\": [\"Qwen2ForCausalLM\"], " FZ_DENSE
              "\"vocab_size\": 200, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\"}"},
    {"qwen3", "{\"architectures\": [\"Qwen3ForCausalLM\"], " FZ_DENSE "\"head_dim\": 32, "
              "\"vocab_size\": 256, \"tie_word_embeddings\": true, \"torch_dtype\": \"float16\"}"},
    {"mixtral", "{\"architectures\": [\"MixtralForCausalLM\"], " FZ_DENSE
                "\"vocab_size\": 256, \"num_local_experts\": 8, \"torch_dtype\": \"bfloat16\"}"},
    {"qwen2_moe", "{\"architectures\": [\"Qwen2MoeForCausalLM\"], " FZ_DENSE
                  "\"vocab_size\": 256, \"num_experts\": 5, \"moe_intermediate_size\": 32, "
                  "\"shared_expert_intermediate_size\": 64, \"decoder_sparse_step\": 1, "
                  "\"mlp_only_layers\": [1], \"torch_dtype\": \"bfloat16\", "
                  "\"quantization_config\": {\"quant_method\": \"fbgemm_fp8\", "
                  "\"modules_to_not_convert\": [\"lm_head\"]}}"},
    {"qwen3_moe", "{\"architectures\": [\"Qwen3MoeForCausalLM\"], " FZ_DENSE "\"head_dim\": 32, "
                  "\"vocab_size\": 256, \"num_experts\": 8, \"moe_intermediate_size\": 32, "
                  "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [], \"torch_dtype\": \"bfloat16\", "
                  "\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"static\"}}"},
    {"deepseek_v3", "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 64, "
                    "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128, "
                    "\"num_hidden_layers\": 4, \"vocab_size\": 256, \"n_routed_experts\": 8, "
                    "\"moe_intermediate_size\": 32, \"n_shared_experts\": 1, \"first_k_dense_replace\": 1, "
                    "\"moe_layer_freq\": 1, \"q_lora_rank\": 32, \"kv_lora_rank\": 32, "
                    "\"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, \"v_head_dim\": 16, "
                    "\"topk_method\": \"noaux_tc\", \"torch_dtype\": \"bfloat16\", "
                    "\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", "
                    "\"fmt\": \"e4m3\", \"weight_block_size\": [8, 8]}}"},
    /* Qwen3-30B-A3B's counts (48 layers, 128 experts) in tiny sizes, under a name and an expert
     * key of its own so that only a table asking for it pays for its 6,144 tensors an expert rule */
    {"big_moe", "{\"architectures\": [\"BigMoeForCausalLM\"], \"hidden_size\": 64, "
                "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 128, "
                "\"num_hidden_layers\": 48, \"vocab_size\": 256, \"n_experts\": 128, "
                "\"torch_dtype\": \"bfloat16\"}"},
};
#define FZ_N_CONFIGS (sizeof fz_configs / sizeof fz_configs[0])

static char fz_dir[64], fz_rules[96], fz_cfg[FZ_N_CONFIGS][96];
static int fz_trace;

static long fz_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1024 : 0;
}

static void fz_cleanup(void)
{
    unlink(fz_rules);
    for (size_t i = 0; i < FZ_N_CONFIGS; i++)
        unlink(fz_cfg[i]);
    rmdir(fz_dir);
}

static void fz_write_file(const char *path, const void *data, size_t size)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0)
        abort();
}

static void fz_init(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fz_dir, sizeof fz_dir, "%s/fuzz_rules.XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(fz_dir))
        abort();
    snprintf(fz_rules, sizeof fz_rules, "%s/rules.json", fz_dir);
    for (size_t i = 0; i < FZ_N_CONFIGS; i++) {
        snprintf(fz_cfg[i], sizeof fz_cfg[i], "%s/%s.json", fz_dir, fz_configs[i].name);
        fz_write_file(fz_cfg[i], fz_configs[i].json, strlen(fz_configs[i].json));
    }
    fz_trace = getenv("FZ_RULES_TRACE") != NULL;
    atexit(fz_cleanup);
}

/* The message names the rules file. What depends on the mesh, this target's choice, may name the
 * config instead: a dimension the mesh does not divide (SL_E_DIVISIBILITY). */
static int fz_names_file(sl_status st, const char *msg, size_t ci)
{
    return strstr(msg, fz_rules) != NULL ||
           (st == SL_E_DIVISIBILITY && strstr(msg, fz_cfg[ci]) != NULL);
}

/* One plan of the table against config ci; 1 when it was built. */
static int fz_plan(size_t ci, int32_t tp, int32_t pp, sl_layout layout, int32_t ep, int32_t dtype)
{
    sl_plan_opts o;
    sl_plan *p = NULL;
    fz_mesh_opts(&o, tp, pp, layout, ep, dtype);
    o.config_path = fz_cfg[ci];
    o.rules_path = fz_rules;
    const double t0 = fz_now_s();
    const sl_status st = sl_plan_build(NULL, &o, &p);
    if (fz_now_s() - t0 > FZ_PLAN_MAX_S || fz_rss_mb() > FZ_RSS_MAX_MB)
        abort();
    const char *msg = p ? sl_plan_errmsg(p) : "";
    if (fz_trace)   /* FZ_RULES_TRACE=1: what each plan gave, to check a seed */
        fprintf(stderr, "%s tp %d pp %d %s ep %d: %s %s\n", fz_configs[ci].name, (int)tp, (int)pp,
                layout == SL_LAYOUT_SPMD ? "spmd" : "tp", (int)ep, sl_status_str(st), msg ? msg : "");
    if (st == SL_OK)
        fz_check_plan(p);
    else if (!fz_status_known(st) || !msg || !msg[0] || !fz_names_file(st, msg, ci)) {
        fprintf(stderr, "fuzz_rules: %s, tp %d pp %d layout %d ep %d: %s: %s\n", fz_configs[ci].name,
                (int)tp, (int)pp, (int)layout, (int)ep, sl_status_str(st), msg ? msg : "(none)");
        abort();   /* a documented status with a message that names the table */
    }
    sl_plan_free(p);
    return st == SL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz_rules[0])
        fz_init();
    fz_write_file(fz_rules, data, size);
    for (size_t ci = 0; ci < FZ_N_CONFIGS; ci++) {
        if (!fz_plan(ci, 1, 1, SL_LAYOUT_TP, 0, SL_DTYPE_BF16))
            continue;
        fz_plan(ci, 2, 2, SL_LAYOUT_TP, 0, -1);
        fz_plan(ci, 2, 2, SL_LAYOUT_TP, 1, -1);
        fz_plan(ci, 4, 1, SL_LAYOUT_SPMD, 0, SL_DTYPE_F32);
    }
    return 0;
}
