/* test_plan.c - plans from configs alone: SHARDING.md's figures, the rules that change shapes
 * (kv replication, vocab padding, biases, head_dim, tied embeddings with PP, vLLM's PP split,
 * spmd tiles), every planning error, the embedded rule tables and --rules equivalence.
 * Exit 0 pass, 1 fail. */
#include "expect.h"
#include "plan_testutil.h"
#include "scratch.h"
#include "shardload.h"

#include "plan/plan_data.h"
#include "plan/rules_builtin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIGS SL_TEST_CONFIGS
#define RULES SL_RULES_DIR

static sl_status build(const char *config, const char *rules, int tp, int pp, sl_layout layout,
                       sl_plan **p)
{
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = config;
    o.rules_path = rules;
    o.tp = tp;
    o.pp = pp;
    o.layout = layout;
    return sl_plan_build(NULL, &o, p);
}

static int shape_is(const sl_plan *p, int d, const char *name, uint64_t a, uint64_t b)
{
    const sl_plan_param_t *x = tu_param(p, d, name);
    return x && x->shape[0] == a && (x->ndim == 1 ? b == 0 : x->shape[1] == b);
}

static void llama8b(void)
{
    const uint64_t want[] = {16060522496ull, 8030527488ull, 0, 4015529984ull, 0, 0, 0, 2008031232ull};
    for (int t = 1; t <= 8; t *= 2) {
        sl_plan *p = NULL;
        EXPECT(build(CONFIGS "/llama-3-8b.json", NULL, t, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s",
               sl_plan_errmsg(p));
        for (int d = 0; p && d < sl_plan_device_count(p); d++)
            EXPECT(sl_plan_device_bytes(p, d) == want[t - 1], "T=%d device %d: %llu", t, d,
                   (unsigned long long)sl_plan_device_bytes(p, d));
        EXPECT(sl_plan_read_bytes(p) == UINT64_MAX, "read_bytes without a checkpoint");
        sl_plan_free(p);
    }
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/llama-3-8b.json", NULL, 8, 1, SL_LAYOUT_SPMD, &p) == SL_OK, "spmd");
    for (int d = 0; d < 8; d++)
        EXPECT(sl_plan_device_bytes(p, d) == 2008031232ull, "spmd device %d", d);
    EXPECT(shape_is(p, 3, "model.layers.0.self_attn.k_proj.weight", 128, 4096), "spmd k shape");
    sl_plan_free(p);
    /* T=16 > K=8: 2 q heads and 1 kv head (r/2) per rank */
    EXPECT(build(CONFIGS "/llama-3-8b.json", NULL, 16, 1, SL_LAYOUT_TP, &p) == SL_OK, "T=16");
    EXPECT(shape_is(p, 5, "model.layers.0.self_attn.qkv_proj.weight", 512, 4096), "T=16 qkv");
    EXPECT(sl_plan_device_bytes(p, 15) == 1037836288ull, "T=16 bytes %llu",
           (unsigned long long)sl_plan_device_bytes(p, 15));
    for (int64_t i = 0; i < p->devices[5].n_ops; i++) {   /* k rows of head 2 at qkv row 256 */
        const sl_op *op = &p->devices[5].ops[i];
        const sl_plan_param_t *qkv = tu_param(p, 5, "model.layers.0.self_attn.qkv_proj.weight");
        if (op->dst_offset == qkv->offset + 256 * 4096 * 2)
            EXPECT(op->file == -1 && op->src_offset == 2 * 128 * 4096 * 2 && op->kind == SL_OP_COPY,
                   "T=16 rank 5 k source offset %llu", (unsigned long long)op->src_offset);
    }
    sl_plan_free(p);
}

static char scratch[512];   /* the test's scratch directory (tu_tmpdir), not the current one */

static const char *cfg_path(void)
{
    static char path[600];
    snprintf(path, sizeof(path), "%s/config.json", scratch);
    return path;
}

/* A config of architecture arch written from a template with %s for the overriding fields. */
static const char *cfg_arch_with(const char *arch, const char *fields)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"architectures\":[\"%s\"],\"hidden_size\":64,\"num_attention_heads\":8,"
             "\"intermediate_size\":96,\"vocab_size\":1000,\"num_hidden_layers\":4,"
             "\"torch_dtype\":\"bfloat16\"%s}", arch, fields);
    /* later duplicate keys are rejected by the parser, so fields replace by name below */
    tu_write_text(cfg_path(), text);
    return cfg_path();
}

static const char *cfg_with(const char *fields)
{
    return cfg_arch_with("LlamaForCausalLM", fields);
}

static void shapes(void)
{
    sl_plan *p = NULL;
    /* vocab 1000 -> 1024 padded; T=4: rank 3 holds rows 768..999 and 24 zero rows */
    EXPECT(build(cfg_with(""), NULL, 4, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    EXPECT(shape_is(p, 3, "lm_head.weight", 256, 64), "padded lm_head");
    int zeros = 0;
    for (int64_t i = 0; i < p->devices[3].n_ops; i++) {
        const sl_op *op = &p->devices[3].ops[i];
        zeros += op->kind == SL_OP_ZERO && op->row_elems * op->rows == 24 * 64;
    }
    EXPECT(zeros == 2, "rank 3: %d zero ops of 24 rows, expected 2 (embed, lm_head)", zeros);
    sl_plan_free(p);
    /* qwen2-0.5b T=2: qkv bias [(7 + 2*1)*64] */
    EXPECT(build(CONFIGS "/qwen2-0.5b.json", NULL, 2, 1, SL_LAYOUT_TP, &p) == SL_OK, "qwen2");
    EXPECT(shape_is(p, 1, "model.layers.3.self_attn.qkv_proj.bias", 576, 0), "qwen2 bias");
    EXPECT(!tu_param(p, 0, "lm_head.weight"), "tied: no lm_head");
    sl_plan_free(p);
    /* qwen3-0.6b: head_dim 128 (H/nh would be 64), q_norm/k_norm [128]; T=16 > K=8 */
    EXPECT(build(CONFIGS "/qwen3-0.6b.json", NULL, 16, 1, SL_LAYOUT_TP, &p) == SL_OK, "qwen3");
    EXPECT(shape_is(p, 0, "model.layers.0.self_attn.qkv_proj.weight", 384, 1024), "qwen3 qkv");
    EXPECT(shape_is(p, 9, "model.layers.27.self_attn.q_norm.weight", 128, 0), "q_norm");
    EXPECT(shape_is(p, 9, "model.layers.27.self_attn.k_norm.weight", 128, 0), "k_norm");
    EXPECT(shape_is(p, 9, "model.layers.27.self_attn.o_proj.weight", 1024, 128), "qwen3 o");
    sl_plan_free(p);
    /* a config without head_dim: transformers' Qwen3Config (model_type qwen3) sets 128, which
     * vLLM's qwen3.py reads; Qwen3MoeConfig and Llama have no such default (H/nh = 8 here), nor
     * has a head_dim of null */
    static const struct {
        const char *arch, *type, *extra;
        uint64_t D;
    } hd[] = {{"Qwen3ForCausalLM", "qwen3", "", 128},
              {"Qwen3ForCausalLM", "qwen3", ",\"head_dim\":null", 8},
              {"Qwen3ForCausalLM", "qwen3", ",\"head_dim\":16", 16},
              {"Qwen3ForCausalLM", "qwen2", "", 8},
              {"Qwen3MoeForCausalLM", "qwen3_moe", ",\"num_experts\":4,\"moe_intermediate_size\":32", 8},
              {"LlamaForCausalLM", "llama", "", 8}};
    for (size_t i = 0; i < sizeof hd / sizeof hd[0]; i++) {
        char fields[256];
        snprintf(fields, sizeof fields, ",\"model_type\":\"%s\"%s", hd[i].type, hd[i].extra);
        const char *path = cfg_arch_with(hd[i].arch, fields);
        EXPECT(build(path, NULL, 1, 1, SL_LAYOUT_TP, &p) == SL_OK, "%s %s: %s", hd[i].arch, hd[i].extra,
               sl_plan_errmsg(p));
        EXPECT(shape_is(p, 0, "model.layers.0.self_attn.o_proj.weight", 64, 8 * hd[i].D),
               "%s model_type %s%s: head_dim %llu expected", hd[i].arch, hd[i].type, hd[i].extra,
               (unsigned long long)hd[i].D);
        sl_plan_free(p);
        p = NULL;
    }
    /* spmd N=3 on qwen2-0.5b: q [ceil(896/3)=299, 896], o [896, 299], bias replicated */
    EXPECT(build(CONFIGS "/qwen2-0.5b.json", NULL, 3, 1, SL_LAYOUT_SPMD, &p) == SL_OK, "spmd3");
    EXPECT(shape_is(p, 2, "model.layers.0.self_attn.q_proj.weight", 299, 896), "spmd q");
    EXPECT(shape_is(p, 2, "model.layers.0.self_attn.o_proj.weight", 896, 299), "spmd o");
    EXPECT(shape_is(p, 2, "model.layers.0.self_attn.q_proj.bias", 896, 0), "spmd bias");
    EXPECT(shape_is(p, 2, "model.embed_tokens.weight", 50646, 896), "spmd embed");
    sl_plan_free(p);
}

/* first layer index on each stage, from the parameter names */
static void stages(const char *config, int P, const int *want_first, int n_layers_per_stage[])
{
    sl_plan *p = NULL;
    EXPECT(build(config, NULL, 1, P, SL_LAYOUT_TP, &p) == SL_OK, "%s", sl_plan_errmsg(p));
    for (int s = 0; p && s < P; s++) {
        int first = -1, n = 0;
        for (int64_t i = 0; i < p->devices[s].n_params; i++) {
            int l;
            const char *name = p->devices[s].params[i].name;
            if (strstr(name, ".input_layernorm.") && sscanf(name, "model.layers.%d.", &l) == 1) {
                first = first < 0 ? l : first;
                n++;
            }
        }
        EXPECT(first == want_first[s] && n == n_layers_per_stage[s],
               "%s P=%d stage %d: layers from %d, %d of them", config, P, s, first, n);
    }
    sl_plan_free(p);
}

static void pipeline(void)
{
    /* qwen3-0.6b L=28, P=3: 28/3 = 9, remainder 1 to stage P-2=1 -> 9, 10, 9 */
    int f3[] = {0, 9, 19}, n3[] = {9, 10, 9};
    stages(CONFIGS "/qwen3-0.6b.json", 3, f3, n3);
    /* tinyllama L=22, P=5: 4 each, remainder 2 to stages 3 and 2 -> 4, 4, 5, 5, 4 */
    int f5[] = {0, 4, 8, 13, 18}, n5[] = {4, 4, 5, 5, 4};
    stages(CONFIGS "/tinyllama-1.1b.json", 5, f5, n5);
    /* tied with PP: embedding on stage 0 and on the last stage, norm on the last only */
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/qwen3-0.6b.json", NULL, 2, 3, SL_LAYOUT_TP, &p) == SL_OK, "tied pp");
    EXPECT(tu_param(p, 1, "model.embed_tokens.weight") && tu_param(p, 5, "model.embed_tokens.weight") &&
               !tu_param(p, 3, "model.embed_tokens.weight"), "tied embed placement");
    EXPECT(tu_param(p, 4, "model.norm.weight") && !tu_param(p, 0, "model.norm.weight"), "norm placement");
    sl_plan_free(p);
    EXPECT(build(CONFIGS "/llama-3-8b.json", NULL, 1, 2, SL_LAYOUT_TP, &p) == SL_OK, "untied pp");
    EXPECT(!tu_param(p, 1, "model.embed_tokens.weight") && tu_param(p, 1, "lm_head.weight") &&
               !tu_param(p, 0, "lm_head.weight"), "untied placement");
    sl_plan_free(p);
}

static void error_case(const char *config, int tp, int pp, sl_layout layout, sl_status want,
                       const char *needle)
{
    sl_plan *p = NULL;
    const sl_status st = build(config, NULL, tp, pp, layout, &p);
    EXPECT(st == want, "%s: got %s (%s), expected %s", needle, sl_status_str(st),
           sl_plan_errmsg(p), sl_status_str(want));
    EXPECT(strstr(sl_plan_errmsg(p), needle) != NULL, "message '%s' lacks '%s'",
           sl_plan_errmsg(p), needle);
    sl_plan_free(p);
}

static void errors(void)
{
    error_case(CONFIGS "/qwen2-0.5b.json", 4, 1, SL_LAYOUT_TP, SL_E_DIVISIBILITY,
               "num_attention_heads 14 is not divisible by tp 4");
    error_case(CONFIGS "/qwen2-0.5b.json", 7, 1, SL_LAYOUT_TP, SL_E_DIVISIBILITY,
               "num_key_value_heads 2 is not divisible by tp 7");
    error_case(cfg_with(",\"num_key_value_heads\":4,\"head_dim\":8,\"intermediate_size\":100"), 8, 1,
               SL_LAYOUT_TP, SL_E_CONFIG, "duplicate");   /* the writer trick is not allowed */
    error_case(CONFIGS "/llama-3-8b.json", 3, 1, SL_LAYOUT_TP, SL_E_DIVISIBILITY,
               "num_attention_heads 32 is not divisible by tp 3");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                           "\"num_attention_heads\":8,\"intermediate_size\":100,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2,\"torch_dtype\":\"bfloat16\"}");
    error_case(cfg_path(), 8, 1, SL_LAYOUT_TP, SL_E_DIVISIBILITY,
               "intermediate_size 100 is not divisible by tp 8");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":96,"
                           "\"num_attention_heads\":12,\"intermediate_size\":96,\"vocab_size\":1000,"
                           "\"num_hidden_layers\":2,\"torch_dtype\":\"bfloat16\"}");
    error_case(cfg_path(), 3, 1, SL_LAYOUT_TP, SL_E_DIVISIBILITY,
               "padded vocab size 1024 (V 1000 rounded up to a multiple of 64) is not divisible by tp 3");
    error_case(cfg_path(), 1, 3, SL_LAYOUT_TP, SL_E_CONFIG, "pp 3 is larger than num_hidden_layers 2");
    error_case(cfg_path(), 2, 2, SL_LAYOUT_SPMD, SL_E_INVALID_ARG, "pp must be 1");
    error_case(cfg_path(), 0, 1, SL_LAYOUT_TP, SL_E_INVALID_ARG, "at least 1");
    tu_write_text(cfg_path(), "{\"architectures\":[\"GPT2LMHeadModel\"],\"hidden_size\":64,"
                           "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "architecture 'GPT2LMHeadModel'");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                           "\"num_attention_heads\":8,\"vocab_size\":64,\"num_hidden_layers\":2}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "config has no 'intermediate_size'");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":0,"
                           "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "'hidden_size' is 0");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4611686018427387904,"
                           "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2,\"torch_dtype\":\"bfloat16\"}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "overflows");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                           "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "no torch_dtype");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                           "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2,\"torch_dtype\":\"bfloat16\",\"dtype\":\"float32\"}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "'torch_dtype' and 'dtype' differ");
    tu_write_text(cfg_path(), "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                           "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                           "\"num_hidden_layers\":2,\"dtype\":\"int8\"}");
    error_case(cfg_path(), 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "config dtype 'int8' is not supported");
    error_case("no/such/config.json", 1, 1, SL_LAYOUT_TP, SL_E_CONFIG, "no/such/config.json");
    sl_plan *p = NULL;
    EXPECT(build(CONFIGS "/llama-3-8b.json", "no/such/rules.json", 1, 1, SL_LAYOUT_TP, &p) ==
               SL_E_CONFIG, "missing rules file");
    sl_plan_free(p);
}

/* Configs no engine can run, and plans too large to hold, with their statuses; every message
 * names the config (issue 18 items 3, 7, 15). */
static void config_checks(void)
{
    static const struct {
        const char *fields;
        int tp;
        sl_layout layout;
        sl_status want;
        const char *needle;
    } cases[] = {
        {",\"num_key_value_heads\":16", 1, SL_LAYOUT_TP, SL_E_CONFIG,
         "config 'num_key_value_heads' 16 is larger than 'num_attention_heads' 8"},
        {",\"num_key_value_heads\":3", 1, SL_LAYOUT_TP, SL_E_CONFIG,
         "config 'num_attention_heads' 8 is not a multiple of 'num_key_value_heads' 3"},
        {",\"head_dim\":1099511627776", 1, SL_LAYOUT_TP, SL_E_CONFIG, "config 'head_dim' is 1099511627776"},
        {",\"head_dim\":null", 1, SL_LAYOUT_TP, SL_OK, ""},
        {",\"num_key_value_heads\":2", 3, SL_LAYOUT_TP, SL_E_DIVISIBILITY, "is not divisible by tp 3"},
        {",\"num_key_value_heads\":8", 65536, SL_LAYOUT_SPMD, SL_E_NOMEM, "above the planner's limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_plan *p = NULL;
        const char *path = cfg_with(cases[i].fields);
        const sl_status st = build(path, NULL, cases[i].tp, 1, cases[i].layout, &p);
        EXPECT(st == cases[i].want, "%s: got %s (%s)", cases[i].fields, sl_status_str(st), sl_plan_errmsg(p));
        EXPECT(st == SL_OK || (!strncmp(sl_plan_errmsg(p), path, strlen(path)) &&
                               strstr(sl_plan_errmsg(p), cases[i].needle)),
               "%s: message '%s' does not start with the config or lacks '%s'", cases[i].fields,
               sl_plan_errmsg(p), cases[i].needle);
        sl_plan_free(p);
    }
}

/* transformers 4.56 and later write the config's dtype as "dtype" (torch_dtype before): both are
 * read, and agree when both are there. */
static void dtype_keys(void)
{
    static const char *const cases[][2] = {
        {"\"dtype\":\"float32\"", "F32"},
        {"\"torch_dtype\":\"float16\"", "F16"},
        {"\"torch_dtype\":\"bfloat16\",\"dtype\":\"bfloat16\"", "BF16"},
        {"\"torch_dtype\":null,\"dtype\":\"float16\"", "F16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                 "\"num_attention_heads\":8,\"intermediate_size\":96,\"vocab_size\":64,"
                 "\"num_hidden_layers\":2,%s}", cases[i][0]);
        tu_write_text(cfg_path(), text);
        sl_plan *p = NULL;
        EXPECT(build(cfg_path(), NULL, 1, 1, SL_LAYOUT_TP, &p) == SL_OK &&
                   !strcmp(sl_dtype_name(sl_plan_dtype(p)), cases[i][1]),
               "dtype keys %s: %s", cases[i][0], sl_plan_errmsg(p));
        sl_plan_free(p);
    }
}

/* The --rules example must give exactly the built-in plan, ops included. */
static void rules_equivalence(void)
{
    const char *cfgs[] = {CONFIGS "/llama-3-8b.json", CONFIGS "/mistral-7b-v0.3.json"};
    for (int k = 0; k < 2; k++) {
        sl_plan *a = NULL, *b = NULL;
        const int ok_a = build(cfgs[k], NULL, 4, 2, SL_LAYOUT_TP, &a) == SL_OK;
        const int ok_b = build(cfgs[k], RULES "/example-llama.json", 4, 2, SL_LAYOUT_TP, &b) == SL_OK;
        EXPECT(ok_a, "builtin: %s", sl_plan_errmsg(a));
        EXPECT(ok_b, "example rules: %s", sl_plan_errmsg(b));
        for (int d = 0; ok_a && ok_b && d < a->n_devices; d++) {
            const sl_plan_device *x = &a->devices[d], *y = &b->devices[d];
            int same = x->n_params == y->n_params && x->n_ops == y->n_ops && x->bytes == y->bytes;
            for (int64_t i = 0; same && i < x->n_params; i++)
                same = !strcmp(x->params[i].name, y->params[i].name) &&
                       x->params[i].nbytes == y->params[i].nbytes;
            same = same && !memcmp(x->ops, y->ops, (size_t)x->n_ops * sizeof(sl_op));
            EXPECT(same, "%s device %d differs with rules/example-llama.json", cfgs[k], d);
        }
        sl_plan_free(a);
        sl_plan_free(b);
    }
}

/* The tables compiled into the library are the files in rules/ (rules/embed.py regenerates). */
static void embedded_tables(void)
{
    for (const sl_builtin_rules *t = sl_builtin_rule_tables; t->name; t++) {
        char path[512], *file = calloc(1, 65536), *text = calloc(1, 65536);
        snprintf(path, sizeof(path), RULES "/%s.json", t->name);
        FILE *f = fopen(path, "r");
        const size_t n = f ? fread(file, 1, 65535, f) : 0;
        if (f)
            fclose(f);
        for (size_t i = 0; t->lines[i]; i++)
            strcat(text, t->lines[i]);
        EXPECT(n > 0 && !strcmp(file, text), "%s differs from src/plan/rules_builtin.c: run "
               "python3 rules/embed.py", path);
        free(file);
        free(text);
    }
}

int main(void)
{
    tu_tmpdir(scratch, sizeof scratch, "test_plan");
    dtype_keys();
    /* Without the configs every check below would fail on a NULL plan. */
    if (access(CONFIGS "/llama-3-8b.json", R_OK) != 0) {
        fprintf(stderr, "FAIL: %s/llama-3-8b.json not found\n", CONFIGS);
        return 1;
    }
    llama8b();
    shapes();
    pipeline();
    errors();
    config_checks();
    rules_equivalence();
    embedded_tables();
    tu_rm_rf(scratch);
    if (expect_failures)
        fprintf(stderr, "%d failure(s)\n", expect_failures);
    else
        printf("test_plan: all passed\n");
    return expect_failures ? 1 : 0;
}
