/* test_ckpt_read.c - sl_checkpoint_read on a local file (tests/cli_http.sh reads remote ones
 * through the planner): the bytes of a tensor and of the whole file as written; a range past the
 * end, one whose end overflows, a file index out of range and NULL arguments refused with
 * SL_E_INVALID_ARG and a message naming the file; a file rewritten, cut or removed since the open
 * is SL_E_CHANGED / SL_E_NOT_FOUND, never other bytes; the planner's reads of a static-FP8 MoE
 * checkpoint's input scales report such a file with the scale's name. Exit 0 pass, 1 fail. */
#include "shardload.h"

#include "expect.h"
#include "scratch.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], path[300];

static void write_file(void)
{
    static const float a[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    static const unsigned char b[3] = {7, 8, 9};
    static const uint64_t sa[] = {4}, sb[] = {3};
    sl_writer *w = NULL;
    int64_t ia = 0, ib = 0;
    EXPECT(sl_writer_open(path, &w) == SL_OK && sl_writer_add(w, "a", SL_DTYPE_F32, 1, sa, &ia) == SL_OK &&
               sl_writer_add(w, "b", SL_DTYPE_U8, 1, sb, &ib) == SL_OK && sl_writer_begin(w) == SL_OK &&
               sl_writer_write(w, ia, 0, a, sizeof a) == SL_OK &&
               sl_writer_write(w, ib, 0, b, sizeof b) == SL_OK &&
               sl_writer_finish(w) == SL_OK,
           "write %s: %s", path, w ? sl_writer_errmsg(w) : "?");
    sl_writer_free(w);
}

static unsigned char *file_bytes(size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc(1 << 16);
    *n = f && buf ? fread(buf, 1, 1 << 16, f) : 0;
    if (f)
        fclose(f);
    return buf;
}

/* st and a message holding text (and the file's path when named). */
static void expect_err(const char *what, sl_status st, const char *err, sl_status want, const char *text,
                       int named)
{
    EXPECT(st == want, "%s: status %s, want %s (%s)", what, sl_status_str(st), sl_status_str(want), err);
    EXPECT(strstr(err, text) != NULL, "%s: '%s' lacks '%s'", what, err, text);
    EXPECT(!named || strstr(err, path) != NULL, "%s: '%s' does not name %s", what, err, path);
}

static void reads(const sl_checkpoint *ck)
{
    sl_tensor_info ti;
    float got[4] = {0};
    char err[512] = "";
    const int64_t i = sl_checkpoint_find_tensor(ck, "a");
    EXPECT(i >= 0 && sl_checkpoint_tensor(ck, i, &ti) == SL_OK, "tensor a");
    EXPECT(sl_checkpoint_read(ck, 0, ti.offset, got, sizeof got, err, sizeof err) == SL_OK, "read a: %s",
           err);
    EXPECT(got[0] == 1.0f && got[3] == 4.0f, "a read back as %g .. %g", (double)got[0], (double)got[3]);
    size_t n = 0;
    unsigned char *want = file_bytes(&n), *all = malloc(n + 1);
    const uint64_t size = sl_checkpoint_file_size(ck, 0);
    EXPECT(n == size && all && sl_checkpoint_read(ck, 0, 0, all, n, err, sizeof err) == SL_OK &&
               memcmp(all, want, n) == 0,
           "whole file: %zu bytes of %llu (%s)", n, (unsigned long long)size, err);
    EXPECT(sl_checkpoint_read(ck, 0, size, NULL, 0, err, sizeof err) == SL_OK, "0 bytes at the end: %s", err);
    EXPECT(sl_checkpoint_read(ck, 0, 0, all, 1, NULL, 0) == SL_OK, "no message buffer");
    free(all);
    free(want);
}

static void range_errors(const sl_checkpoint *ck)
{
    char err[512], text[400];
    unsigned char buf[8];
    const uint64_t size = sl_checkpoint_file_size(ck, 0);
    sl_status st = sl_checkpoint_read(ck, 0, size - 2, buf, 4, err, sizeof err);
    snprintf(text, sizeof text, "%s: 4 bytes at offset %llu run past the end of the file (%llu bytes)", path,
             (unsigned long long)(size - 2), (unsigned long long)size);
    expect_err("past the end", st, err, SL_E_INVALID_ARG, text, 1);
    st = sl_checkpoint_read(ck, 0, UINT64_MAX - 1, buf, 4, err, sizeof err);
    expect_err("end overflows", st, err, SL_E_INVALID_ARG, "run past the end of the file", 1);
    st = sl_checkpoint_read(ck, 0, size + 1, buf, 0, err, sizeof err);
    expect_err("0 bytes past the end", st, err, SL_E_INVALID_ARG, "run past the end of the file", 1);
    st = sl_checkpoint_read(ck, 1, 0, buf, 1, err, sizeof err);
    expect_err("file 1", st, err, SL_E_INVALID_ARG, "file 1 out of range (1 files)", 0);
    st = sl_checkpoint_read(ck, -1, 0, buf, 1, err, sizeof err);
    expect_err("file -1", st, err, SL_E_INVALID_ARG, "out of range", 0);
    st = sl_checkpoint_read(ck, 0, 0, NULL, 1, err, sizeof err);
    expect_err("NULL buf", st, err, SL_E_INVALID_ARG, "NULL argument", 0);
    st = sl_checkpoint_read(NULL, 0, 0, buf, 1, err, sizeof err);
    expect_err("NULL checkpoint", st, err, SL_E_INVALID_ARG, "NULL argument", 0);
}

/* The file rewritten (same size, another modification time), cut, then removed. */
static void changed(const sl_checkpoint *ck)
{
    char err[512];
    unsigned char buf[4];
    struct timespec ts[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    EXPECT(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat %s", path);
    sl_status st = sl_checkpoint_read(ck, 0, 0, buf, 4, err, sizeof err);
    expect_err("rewritten", st, err, SL_E_CHANGED, "file changed since the checkpoint was opened", 1);
    EXPECT(truncate(path, 20) == 0, "truncate %s", path);
    st = sl_checkpoint_read(ck, 0, 0, buf, 4, err, sizeof err);
    expect_err("cut", st, err, SL_E_CHANGED, "size is 20 bytes", 1);
    EXPECT(unlink(path) == 0, "unlink %s", path);
    st = sl_checkpoint_read(ck, 0, 0, buf, 4, err, sizeof err);
    expect_err("removed", st, err, SL_E_NOT_FOUND, "cannot open", 1);
}

/* The planner reads a static-FP8 MoE checkpoint's expert input scales through sl_checkpoint_read:
 * a plan, then, once the files' modification times changed, SL_E_CHANGED naming the file and the
 * scale it was reading. */
static void planner(void)
{
    char cfg[300], ck_dir[300], err[512], cmd[700];
    snprintf(cfg, sizeof cfg, "%s/mx.json", dir);
    snprintf(ck_dir, sizeof ck_dir, "%s/mx", dir);
    tu_write_text(cfg, "{\"architectures\":[\"MixtralForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":"
                       "128,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_hidden_layers\":2,"
                       "\"vocab_size\":130,\"num_local_experts\":4,\"torch_dtype\":\"bfloat16\",\"quantization_"
                       "config\":{\"quant_method\":\"fp8\",\"activation_scheme\":\"static\"}}");
    EXPECT(sl_synth(cfg, NULL, ck_dir, -1, 3, 1 << 16, err, sizeof err) == SL_OK, "synth: %s", err);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(ck_dir, &ck) == SL_OK, "open %s: %s", ck_dir, sl_checkpoint_errmsg(ck));
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    o.config_path = cfg;
    o.tp = 2;
    sl_plan *p = NULL;
    EXPECT(sl_plan_build(ck, &o, &p) == SL_OK, "plan: %s", sl_plan_errmsg(p));
    sl_plan_free(p);
    p = NULL;
    snprintf(cmd, sizeof cmd, "touch -d @1000000000 '%s'/*.safetensors", ck_dir);
    EXPECT(system(cmd) == 0, "%s", cmd);
    const sl_status st = sl_plan_build(ck, &o, &p);
    const char *msg = sl_plan_errmsg(p);
    EXPECT(st == SL_E_CHANGED && strstr(msg, ck_dir) &&
               strstr(msg, "file changed since the checkpoint was opened") &&
               strstr(msg, "(reading the input scale 'model.layers."),
           "plan of changed files: %s: %s", sl_status_str(st), msg);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

int main(void)
{
    tu_tmpdir(dir, sizeof dir, "ckread");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file();
    sl_checkpoint *ck = NULL;
    if (sl_checkpoint_open(path, &ck) != SL_OK) {
        fprintf(stderr, "open %s: %s\n", path, sl_checkpoint_errmsg(ck));
        return 1;
    }
    reads(ck);
    range_errors(ck);
    changed(ck);
    sl_checkpoint_close(ck);
    planner();
    tu_rm_rf(dir);
    if (expect_failures)
        fprintf(stderr, "test_ckpt_read: %d failures\n", expect_failures);
    return expect_failures ? 1 : 0;
}
