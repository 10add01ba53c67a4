/* test_plan_config.c - a config.json given as text in memory (sl_plan_opts.config_json): the plan
 * it makes equals the plan of the same file, with and without a checkpoint (every tests/configs
 * file, a synthetic checkpoint at tp 2 and pp 2, FP8); the buffer is read only up to its length
 * (never NUL-terminated here, so ASan sees an over-read); the errors are the file's, naming
 * config_path or "config.json (in memory)"; config_path is then not opened.
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
#define MEMORY_NAME "config.json (in memory)"

static char scratch[512];

/* A copy of len bytes of text with no NUL after it (malloc'd exactly): a parser that reads to a
 * NUL reads past the end. */
static char *unterminated(const char *text, size_t len)
{
    char *b = malloc(len ? len : 1);
    if (!b) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memcpy(b, text, len);
    return b;
}

/* The whole file at path, unterminated (exact size), or NULL. */
static char *file_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        b = n > 0 ? malloc((size_t)n) : NULL;
        rewind(f);
        if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
        *len = b ? (size_t)n : 0;
    }
    if (f)
        fclose(f);
    return b;
}

static sl_status build(const sl_checkpoint *ck, const char *path, const char *text, size_t len,
                       int tp, int pp, sl_plan **p)
{
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = path;
    o.config_json = text;
    o.config_json_len = len;
    o.tp = tp;
    o.pp = pp;
    return sl_plan_build(ck, &o, p);
}

static int same_param(const sl_plan_param_t *a, const sl_plan_param_t *b)
{
    return !strcmp(a->name, b->name) && a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, sizeof(a->shape)) && a->nbytes == b->nbytes &&
           a->offset == b->offset;
}

/* Devices, parameters (names, dtypes, shapes, sizes, offsets), operations and totals. */
static int same_plan(const sl_plan *a, const sl_plan *b, const char *what)
{
    const int before = expect_failures;
    EXPECT(a && b && a->devices && b->devices && a->n_devices == b->n_devices && a->dtype == b->dtype && a->tied == b->tied &&
               a->total_bytes == b->total_bytes && a->read_bytes == b->read_bytes,
           "%s: plans differ", what);
    for (int32_t d = 0; a && b && before == expect_failures && d < a->n_devices; d++) {
        const sl_plan_device *x = &a->devices[d], *y = &b->devices[d];
        EXPECT(x->n_params == y->n_params && x->n_ops == y->n_ops && x->bytes == y->bytes,
               "%s: device %d differs", what, (int)d);
        for (int64_t i = 0; before == expect_failures && i < x->n_params; i++)
            EXPECT(same_param(&x->params[i], &y->params[i]), "%s: device %d param %lld (%s)", what,
                   (int)d, (long long)i, x->params[i].name);
        for (int64_t i = 0; before == expect_failures && i < x->n_ops; i++)
            EXPECT(!memcmp(&x->ops[i], &y->ops[i], sizeof(sl_op)), "%s: device %d op %lld", what,
                   (int)d, (long long)i);
    }
    return before == expect_failures;
}

/* The plan of the file and the plan of its text, unterminated and then followed by junk the
 * length leaves out. */
static void same_as_file(const sl_checkpoint *ck, const char *path, int tp, int pp)
{
    size_t len = 0;
    char *text = file_text(path, &len);
    EXPECT(text != NULL, "cannot read %s", path);
    if (!text)
        return;
    sl_plan *pf = NULL, *pm = NULL, *pj = NULL;
    EXPECT(build(ck, path, NULL, 0, tp, pp, &pf) == SL_OK, "%s: %s", path, sl_plan_errmsg(pf));
    EXPECT(build(ck, NULL, text, len, tp, pp, &pm) == SL_OK, "%s as text: %s", path, sl_plan_errmsg(pm));
    same_plan(pf, pm, path);
    char *junk = malloc(len + 8);
    if (junk) {
        memcpy(junk, text, len);
        memcpy(junk + len, "}}junk{", 7);
        EXPECT(build(ck, NULL, junk, len, tp, pp, &pj) == SL_OK, "%s with junk after len: %s", path,
               sl_plan_errmsg(pj));
        same_plan(pf, pj, "text followed by junk");
    }
    free(junk);
    sl_plan_free(pf);
    sl_plan_free(pm);
    sl_plan_free(pj);
    free(text);
}

static void configs_alone(void)
{
    static const char *const names[] = {"llama-3-8b", "mistral-7b-v0.3", "mixtral-8x7b", "qwen2-0.5b",
                                        "qwen3-0.6b", "qwen3-30b-a3b", "tinyllama-1.1b", "deepseek-v3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s.json", CONFIGS, names[i]);
        same_as_file(NULL, path, 2, 1);
    }
    same_as_file(NULL, CONFIGS "/llama-3-8b.json", 8, 2);
}

static const char TINY[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"intermediate_size\":96,\"vocab_size\":130,\"num_hidden_layers\":4,"
    "\"torch_dtype\":\"bfloat16\"}";
static const char TINY_FP8[] =
    "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":128,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_hidden_layers\":2,\"vocab_size\":130,"
    "\"num_local_experts\":4,\"torch_dtype\":\"bfloat16\",\"quantization_config\":{\"quant_method\":"
    "\"fp8\",\"activation_scheme\":\"static\"}}";

/* A synthetic checkpoint of text; returns it open, its config at cfg (outside its folder). */
static sl_checkpoint *synth_ckpt(const char *tag, const char *text, char *cfg, size_t n)
{
    char dir[600], err[512];
    snprintf(cfg, n, "%s/%s.json", scratch, tag);
    snprintf(dir, sizeof dir, "%s/%s", scratch, tag);
    tu_write_text(cfg, text);
    EXPECT(sl_synth(cfg, NULL, dir, -1, 3, 1 << 14, err, sizeof err) == SL_OK, "synth: %s", err);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(dir, &ck) == SL_OK, "open %s: %s", dir, sl_checkpoint_errmsg(ck));
    return ck;
}

/* With a checkpoint: the same operations and read bytes; the checkpoint's own config.json is not
 * read (removed), nor is config_path when text is given (it only names it). */
static void with_checkpoint(void)
{
    char cfg[600], own[700];
    sl_checkpoint *ck = synth_ckpt("tiny", TINY, cfg, sizeof cfg);
    same_as_file(ck, cfg, 2, 1);
    same_as_file(ck, cfg, 2, 2);
    snprintf(own, sizeof own, "%s/config.json", sl_checkpoint_dir(ck));
    EXPECT(unlink(own) == 0, "cannot remove %s", own);
    char *text = unterminated(TINY, strlen(TINY));
    sl_plan *p = NULL;
    EXPECT(build(ck, NULL, text, strlen(TINY), 2, 1, &p) == SL_OK, "no config.json: %s", sl_plan_errmsg(p));
    EXPECT(p && p->read_bytes == sl_checkpoint_total_bytes(ck), "read_bytes");
    sl_plan_free(p);
    p = NULL;
    EXPECT(build(ck, "/nonexistent/config.json", text, strlen(TINY), 2, 1, &p) == SL_OK,
           "config_path only names the text: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    free(text);
    sl_checkpoint_close(ck);
    ck = synth_ckpt("fp8", TINY_FP8, cfg, sizeof cfg);   /* quantization_config from the text */
    same_as_file(ck, cfg, 2, 1);
    sl_checkpoint_close(ck);
}

/* The file's error for text, written to a file, and the text's: the same status and message but
 * for the name in front. With name NULL the text is unnamed ("config.json (in memory)"). */
static void same_error(const char *what, const char *text, size_t len, const char *name,
                       sl_status want, const char *has)
{
    char path[600];
    snprintf(path, sizeof path, "%s/bad.json", scratch);
    FILE *f = fopen(path, "wb");
    EXPECT(f && fwrite(text, 1, len, f) == len && fclose(f) == 0, "cannot write %s", path);
    char *buf = unterminated(text, len);
    sl_plan *pf = NULL, *pm = NULL;
    const sl_status sf = build(NULL, path, NULL, 0, 1, 1, &pf);
    const sl_status sm = build(NULL, name, buf, len, 1, 1, &pm);
    const char *mf = pf ? sl_plan_errmsg(pf) : "", *mm = pm ? sl_plan_errmsg(pm) : "";
    const char *label = name ? name : MEMORY_NAME;
    const size_t nf = strlen(path), nm = strlen(label);
    EXPECT(sf == want && sm == want, "%s: status file %d, text %d, want %d", what, (int)sf, (int)sm,
           (int)want);
    EXPECT(!strncmp(mf, path, nf) && !strncmp(mm, label, nm) && !strcmp(mf + nf, mm + nm),
           "%s: file says '%s', text says '%s'", what, mf, mm);
    EXPECT(strstr(mm, has) != NULL, "%s: '%s' lacks '%s'", what, mm, has);
    sl_plan_free(pf);
    sl_plan_free(pm);
    free(buf);
}

static void errors(void)
{
    static const char malformed[] = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":";
    static const char dup[] = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                              "\"hidden_size\":128}";
    static const char unknown[] = "{\"architectures\":[\"GPT9ForCausalLM\"],\"hidden_size\":64,"
                                  "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":"
                                  "130,\"num_hidden_layers\":2,\"torch_dtype\":\"bfloat16\"}";
    static const char no_layers[] = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                                    "\"num_attention_heads\":4,\"intermediate_size\":96,"
                                    "\"vocab_size\":130,\"num_hidden_layers\":0}";
    static const char bad_quant[] = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                                    "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":"
                                    "130,\"num_hidden_layers\":2,\"quantization_config\":"
                                    "{\"quant_method\":\"awq\"}}";
    same_error("malformed", malformed, strlen(malformed), NULL, SL_E_CONFIG, "(line 1)");
    same_error("malformed, named", malformed, strlen(malformed), "engine/config.json", SL_E_CONFIG,
               "engine/config.json: ");
    same_error("duplicate key", dup, strlen(dup), NULL, SL_E_CONFIG, "duplicate object key");
    same_error("unknown architecture", unknown, strlen(unknown), NULL, SL_E_CONFIG,
               "architecture 'GPT9ForCausalLM' has no built-in rule table");
    same_error("0 layers", no_layers, strlen(no_layers), NULL, SL_E_CONFIG,
               MEMORY_NAME ": config 'num_hidden_layers' is 0");
    same_error("quantization", bad_quant, strlen(bad_quant), NULL, SL_E_UNSUPPORTED, "awq");
    same_error("empty", "", 0, NULL, SL_E_CONFIG, MEMORY_NAME ": ");
    same_error("NUL byte", "{\"a\":1}\0{", 9, NULL, SL_E_CONFIG, MEMORY_NAME ": ");
    /* a valid text cut short by its length is malformed: the length, not a NUL, ends it */
    same_error("cut by length", TINY, strlen(TINY) - 1, NULL, SL_E_CONFIG, "(line 1)");
}

static void limits(void)
{
    const size_t big = (16u << 20) + 1;
    char *text = malloc(big);
    EXPECT(text != NULL, "out of memory");
    if (!text)
        return;
    memset(text, ' ', big);
    memcpy(text, TINY, strlen(TINY));
    sl_plan *p = NULL;
    const sl_status st = build(NULL, NULL, text, big, 1, 1, &p);
    tu_expect_plan_error("16 MiB + 1", st, p, SL_E_CONFIG,
                         MEMORY_NAME ": 16777217 bytes, over the 16777216-byte limit");
    sl_plan_free(p);
    p = NULL;
    EXPECT(build(NULL, NULL, text, big - 1, 1, 1, &p) == SL_OK, "16 MiB: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    free(text);
    p = NULL;
    sl_status st2 = build(NULL, NULL, NULL, 5, 1, 1, &p);
    tu_expect_plan_error("length without text", st2, p, SL_E_INVALID_ARG,
                         "config_json_len is 5 but config_json is NULL");
    sl_plan_free(p);
    p = NULL;
    st2 = build(NULL, NULL, NULL, 0, 1, 1, &p);
    tu_expect_plan_error("nothing to plan", st2, p, SL_E_INVALID_ARG,
                         "a plan needs a checkpoint, a config path or a config text");
    sl_plan_free(p);
}

/* Numbers beyond what jansson holds (an integer past long long, a real past a double) are valid
 * JSON, which Python's json and transformers read: over a key nobody reads the plan is the
 * config's without them (they failed the whole config with "too big integer"); in a key that is
 * read, that key's own range check refuses them. The text is unterminated: the scan stays inside. */
static void big_numbers(void)
{
    static const char extra[] = ",\"seed\":100000000000000000000,\"neg\":-9223372036854775809,"
                                "\"r\":[1e400,-1.5e999,\"a \\\" 1e400\"],\"ok\":9223372036854775807}";
    char text[1024];
    const size_t base = strlen(TINY) - 1;   /* TINY without its closing brace */
    memcpy(text, TINY, base);
    memcpy(text + base, extra, sizeof extra - 1);
    char *t = unterminated(text, base + sizeof extra - 1);
    sl_plan *p = NULL, *q = NULL;
    EXPECT(build(NULL, NULL, t, base + sizeof extra - 1, 2, 1, &p) == SL_OK, "big numbers: %s",
           sl_plan_errmsg(p));
    EXPECT(build(NULL, NULL, TINY, strlen(TINY), 2, 1, &q) == SL_OK, "tiny: %s", sl_plan_errmsg(q));
    if (p && q && p->devices && q->devices)
        same_plan(p, q, "big numbers beside the sizes");
    /* what reshard and synth write back is the text as given, not the clamped values */
    EXPECT(p && p->config_text && strlen(p->config_text) == base + sizeof extra - 1 &&
               !memcmp(p->config_text, text, base + sizeof extra - 1),
           "big numbers: the config kept is not the text given: %.300s", p && p->config_text ? p->config_text : "");
    sl_plan_free(p);
    sl_plan_free(q);
    free(t);
    /* only JSON numbers are clamped: a malformed token beside one that overflows stays malformed */
    static const char bad[] = ",\"seed\":100000000000000000000,\"x\":1-2-3-4-5-6-7-8-9-0-1-2}";
    memcpy(text + base, bad, sizeof bad);
    p = NULL;
    const sl_status sb = build(NULL, NULL, text, base + sizeof bad - 1, 1, 1, &p);
    EXPECT(sb == SL_E_CONFIG, "a malformed token beside a big integer: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    static const char used[] = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":130,"
                               "\"num_hidden_layers\":100000000000000000000}";
    p = NULL;
    const sl_status st = build(NULL, NULL, used, strlen(used), 1, 1, &p);
    tu_expect_plan_error("a size past long long", st, p, SL_E_CONFIG, "num_hidden_layers");
    sl_plan_free(p);
}

int main(void)
{
    tu_tmpdir(scratch, sizeof scratch, "plan_config");
    if (access(CONFIGS "/llama-3-8b.json", R_OK) != 0) {
        fprintf(stderr, "FAIL: %s/llama-3-8b.json not found\n", CONFIGS);
        return 1;
    }
    configs_alone();
    with_checkpoint();
    errors();
    limits();
    big_numbers();
    tu_rm_rf(scratch);
    if (expect_failures)
        fprintf(stderr, "%d failure(s)\n", expect_failures);
    else
        printf("test_plan_config: all passed\n");
    return expect_failures ? 1 : 0;
}
