/* test_messages.c - every message is one printable line of bounded length (issue 18 item 6),
 * whatever the file or path it quotes holds: control bytes shown as \xNN, names cut at about 120
 * bytes (docs/format.md), a whole message at most SL_TEXT_MSG_MAX bytes. Checked over the fuzz
 * corpus (fuzz/corpus/<target>/) and over crafted inputs for each layer: the header parser (the
 * byte after a backslash), the index (shard names that forge a second "shardload: error:" line),
 * checkpoint directories (paths, tensor names), the planner (architectures, unclaimed names, rule
 * tables) and the writer. */
#include "fmt_testutil.h"
#include "common/sl_text.h"

#include <dirent.h>

#define CORPUS SL_RULES_DIR "/../fuzz/corpus"

static int checked;

/* One line, printable, bounded; `what` says where the message came from. */
static void expect_clean(const char *what, const char *msg)
{
    checked++;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++, n++) {
        if (*p < 0x20 || *p == 0x7F) {
            EXPECT(0, "%s: raw byte 0x%02x at %zu in the message", what, *p, n);
            return;
        }
    }
    EXPECT(n <= SL_TEXT_MSG_MAX, "%s: message of %zu bytes", what, n);
}

/* ---- the fuzz corpus -------------------------------------------------------------------------- */

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    struct stat sb;
    if (f && fstat(fileno(f), &sb) == 0 && (buf = malloc((size_t)sb.st_size + 1)) != NULL)
        *n = fread(buf, 1, (size_t)sb.st_size, f);
    if (f)
        fclose(f);
    return buf;
}

static void corpus(const char *target, int index)
{
    char dir[512], path[1024], err[8192];
    snprintf(dir, sizeof dir, "%s/%s", CORPUS, target);
    DIR *d = opendir(dir);
    EXPECT(d != NULL, "no corpus at %s", dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        unsigned char *buf = read_all(path, &n);
        err[0] = '\0';
        if (index)
            sl_validate_index_buffer(buf, n, err, sizeof err);
        else
            sl_validate_buffer(buf, n, e->d_name, err, sizeof err);
        expect_clean(path, err);
        free(buf);
    }
    if (d)
        closedir(d);
}

/* ---- crafted inputs, layer by layer ----------------------------------------------------------- */

static void header_cases(void)
{
    char err[8192];
    /* an invalid escape whose byte is ESC, a tensor name with a newline and ESC, a 1 MB name */
    const char esc_escape[] = "{\"a\\\x1b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    fmt_buf b = fmt_make(esc_escape, 1);
    EXPECT(sl_validate_buffer(b.p, b.len, "esc.safetensors", err, sizeof err) == SL_E_HEADER_JSON, "%s", err);
    expect_clean("invalid escape of ESC", err);
    free(b.p);
    const char nl_name[] = "{\"x\\n\\u001b[2Jshardload: error: forged\":{\"dtype\":\"U8\",\"shape\":[2],"
                           "\"data_offsets\":[0,1]}}";
    b = fmt_make(nl_name, 1);
    EXPECT(sl_validate_buffer(b.p, b.len, "nl.safetensors", err, sizeof err) != SL_OK, "newline name accepted");
    expect_clean("tensor name with a newline", err);
    free(b.p);
    const size_t big = 1 << 20;
    char *json = malloc(big + 128);
    int o = snprintf(json, big + 128, "{\"");
    memset(json + o, 'n', big);
    snprintf(json + o + big, 128, "\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,1]}}");
    b = fmt_make(json, 1);
    sl_validate_buffer(b.p, b.len, "big.safetensors", err, sizeof err);
    expect_clean("1 MB tensor name", err);
    EXPECT(strlen(err) < 400, "1 MB tensor name: a %zu-byte message", strlen(err));
    free(b.p);
    free(json);
}

static void index_cases(void)
{
    char err[8192];
    /* a shard name that would end the line and forge a second error line */
    const char forged[] = "{\"weight_map\":{\"a\":\"x\\nshardload: error: all good\\u001b[0m\"}}";
    EXPECT(sl_validate_index_buffer(forged, strlen(forged), err, sizeof err) == SL_E_INDEX, "%s", err);
    expect_clean("index shard name with a newline", err);
    const char bell[] = "{\"weight_map\":{\"a\\u0007\":17}}";
    EXPECT(sl_validate_index_buffer(bell, strlen(bell), err, sizeof err) == SL_E_INDEX, "%s", err);
    expect_clean("index key with BEL", err);
}

static void write_text(const char *path, const char *text)
{
    EXPECT(fmt_write_file(path, text, strlen(text)) == 0, "cannot write %s", path);
}

static void checkpoint_cases(const char *tmp)
{
    char dir[512], path[1024];
    sl_checkpoint *ck = NULL;
    /* a directory whose name and shard name hold control bytes; the shard is corrupt */
    snprintf(dir, sizeof dir, "%s/ck\x1b[31m\nred", tmp);
    EXPECT(mkdir(dir, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/model\x07.safetensors", dir);
    fmt_write_st(path, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", 4);
    EXPECT(sl_checkpoint_open(dir, &ck) != SL_OK, "corrupt shard accepted");
    expect_clean("path with ESC, newline and BEL", sl_checkpoint_errmsg(ck));
    sl_checkpoint_close(ck);
    /* an index naming a shard with ESC that is missing */
    snprintf(dir, sizeof dir, "%s/ix", tmp);
    EXPECT(mkdir(dir, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"weight_map\":{\"a\":\"m\\u001b]0;title\\u0007.safetensors\"}}");
    ck = NULL;
    EXPECT(sl_checkpoint_open(dir, &ck) == SL_E_NOT_FOUND, "%s", sl_checkpoint_errmsg(ck));
    expect_clean("missing shard with ESC", sl_checkpoint_errmsg(ck));
    sl_checkpoint_close(ck);
}

static const char *const llama_cfg =
    "{\"architectures\":[\"%s\"],\"hidden_size\":8,\"intermediate_size\":8,\"num_attention_heads\":2,"
    "\"num_key_value_heads\":1,\"num_hidden_layers\":1,\"vocab_size\":8,\"torch_dtype\":\"bfloat16\"}";

static sl_status plan_config(const char *cfg_path, const char *rules, sl_plan **p)
{
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = cfg_path;
    o.rules_path = rules;
    return sl_plan_build(NULL, &o, p);
}

static void plan_cases(const char *tmp)
{
    char path[1024], text[1024], rules[1024];
    sl_plan *p = NULL;
    /* an architecture that sets the terminal's title */
    snprintf(path, sizeof path, "%s/arch.json", tmp);
    snprintf(text, sizeof text, llama_cfg, "\\u001b]0;pwned\\u0007Evil\\nshardload: error: forged");
    write_text(path, text);
    EXPECT(plan_config(path, NULL, &p) == SL_E_CONFIG, "%s", sl_plan_errmsg(p));
    expect_clean("architecture with OSC", sl_plan_errmsg(p));
    EXPECT(strstr(sl_plan_errmsg(p), path) != NULL, "message does not name the config: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    /* a rule table whose shape term and tensor pattern hold control bytes */
    snprintf(path, sizeof path, "%s/cfg.json", tmp);
    snprintf(text, sizeof text, llama_cfg, "LlamaForCausalLM");
    write_text(path, text);
    snprintf(rules, sizeof rules, "%s/rules.json", tmp);
    write_text(rules, "{\"rules\":[{\"tensor\":\"w\\u001b[1m\",\"shape\":[\"H\\u0008\"],\"shard\":\"replicated\","
                      "\"place\":\"first\"}]}");
    p = NULL;
    EXPECT(plan_config(path, rules, &p) == SL_E_CONFIG, "%s", sl_plan_errmsg(p));
    expect_clean("rule term with BS", sl_plan_errmsg(p));
    sl_plan_free(p);
    /* a checkpoint tensor no rule claims, named with a newline and 200 KB long */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/unclaimed", tmp);
    EXPECT(mkdir(dir, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, text);
    const size_t big = 200000;
    char *json = malloc(big + 256);
    int o = snprintf(json, big + 256, "{\"model.x\\nshardload: error: forged");
    memset(json + o, 'y', big);
    snprintf(json + o + big, 256, "\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    fmt_write_st(path, json, 2);
    free(json);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(dir, &ck) == SL_OK, "%s", sl_checkpoint_errmsg(ck));
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    p = NULL;
    EXPECT(sl_plan_build(ck, &po, &p) == SL_E_UNCLAIMED, "%s", sl_plan_errmsg(p));
    expect_clean("unclaimed tensor with a newline", sl_plan_errmsg(p));
    EXPECT(strlen(sl_plan_errmsg(p)) < 1000, "unclaimed 200 KB name: a %zu-byte message", strlen(sl_plan_errmsg(p)));
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    /* a tensor of 10,000 dimensions where the config implies one: the message keeps what the
     * config implies (every dimension printed cut it at SL_TEXT_MSG_MAX before that part) */
    snprintf(dir, sizeof dir, "%s/shape10k", tmp);
    EXPECT(mkdir(dir, 0755) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, text);
    json = malloc(10000 * 2 + 256);
    o = snprintf(json, 256, "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[1");
    for (int i = 1; i < 10000; i++)
        o += snprintf(json + o, 3, ",1");
    snprintf(json + o, 256, "],\"data_offsets\":[0,2]}}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    fmt_write_st(path, json, 2);
    free(json);
    ck = NULL;
    EXPECT(sl_checkpoint_open(dir, &ck) == SL_OK, "%s", sl_checkpoint_errmsg(ck));
    p = NULL;
    EXPECT(sl_plan_build(ck, &po, &p) == SL_E_SHAPE, "%s", sl_plan_errmsg(p));
    EXPECT(strstr(sl_plan_errmsg(p), "has shape [1, 1, 1, 1, 1, 1, 1, 1, ... (10000 dims)] but the config "
                                     "implies [") != NULL, "10,000 dimensions: %.300s", sl_plan_errmsg(p));
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

static void writer_cases(const char *tmp)
{
    char path[1024];
    sl_writer *w = NULL;
    snprintf(path, sizeof path, "%s/w\x1b.safetensors", tmp);
    const uint64_t shape[1] = {1};
    int64_t idx = 0;
    EXPECT(sl_writer_open(path, &w) == SL_OK, "%s", sl_writer_errmsg(w));
    EXPECT(sl_writer_add(w, "t\x1b", SL_DTYPE_U8, 1, shape, &idx) == SL_OK, "%s", sl_writer_errmsg(w));
    EXPECT(sl_writer_add(w, "t\x1b", SL_DTYPE_U8, 1, shape, &idx) == SL_E_DUPLICATE, "%s", sl_writer_errmsg(w));
    expect_clean("writer: duplicate name with ESC", sl_writer_errmsg(w));
    sl_writer_free(w);
}

int main(void)
{
    char tmp[256];
    tu_tmpdir(tmp, sizeof tmp, "messages");
    corpus("fuzz_header", 0);
    corpus("fuzz_index", 1);
    header_cases();
    index_cases();
    checkpoint_cases(tmp);
    plan_cases(tmp);
    writer_cases(tmp);
    tu_rm_rf(tmp);
    if (expect_failures)
        fprintf(stderr, "%d failure(s) in %d messages\n", expect_failures, checked);
    else
        printf("test_messages: all %d messages clean\n", checked);
    return expect_failures ? 1 : 0;
}
