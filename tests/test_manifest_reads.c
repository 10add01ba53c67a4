/* test_manifest_reads.c - --verify's manifest is read once per load: sl_load_job_plan reads its
 * text, checks the folder's side files (config.json, the index) against it and hands the same text
 * to the read engine, which read the file again before; sl_reshard, whose job is planned twice
 * (checked before OUTDIR is touched, then run), reads it once too. This executable's open()
 * stands in front of libc's (the library is linked in statically: its calls resolve here) and
 * counts the opens of the manifest. Skipped (77) in a build without SHA-256, where no manifest
 * can be written. */
#include "shardload.h"

#include "expect.h"
#include "scratch.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static char g_watch[600];   /* the path whose opens are counted ("" : none) */
static int g_opens;         /* atomic */

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (g_watch[0] && !strcmp(path, g_watch))
        __atomic_add_fetch(&g_opens, 1, __ATOMIC_SEQ_CST);
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static void watch(const char *path)
{
    snprintf(g_watch, sizeof g_watch, "%s", path);
    __atomic_store_n(&g_opens, 0, __ATOMIC_SEQ_CST);
}

static int opens(void)
{
    return __atomic_load_n(&g_opens, __ATOMIC_SEQ_CST);
}

static void write_config(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        exit(1);
    fputs("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":256,"
          "\"intermediate_size\":512,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
          "\"num_hidden_layers\":2,\"vocab_size\":1001,\"tie_word_embeddings\":false,"
          "\"torch_dtype\":\"bfloat16\",\"rms_norm_eps\":1e-05,\"head_dim\":32}", f);
    fclose(f);
}

int main(void)
{
    char dir[512], cfg[600], ck_dir[600], man[640], out[600], err[1024];
    tu_tmpdir(dir, sizeof dir, "manifest_reads");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(ck_dir, sizeof ck_dir, "%s/ck", dir);
    snprintf(man, sizeof man, "%s/SHA256SUMS", ck_dir);
    snprintf(out, sizeof out, "%s/out", dir);
    write_config(cfg);
    EXPECT(sl_synth(cfg, NULL, ck_dir, -1, 1234, 600000, err, sizeof err) == SL_OK, "synth: %s", err);
    const sl_status wm = sl_write_manifest(ck_dir, NULL, err, sizeof err);
    if (wm == SL_E_UNSUPPORTED) {
        fprintf(stderr, "test_manifest_reads: skip: %s\n", err);
        tu_rm_rf(dir);
        return 77;
    }
    EXPECT(wm == SL_OK, "write manifest: %s", err);

    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_model *m = NULL;
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.tp = 2;
    EXPECT(sl_checkpoint_open(ck_dir, &ck) == SL_OK, "open: %s", sl_checkpoint_errmsg(ck));
    EXPECT(sl_plan_build(ck, &po, &p) == SL_OK, "plan: %s", sl_plan_errmsg(p));
    sl_load_opts o;
    sl_load_opts_init(&o);
    o.verify = 1;
    o.manifest_path = man;

    watch(man);
    sl_status st = sl_load(ck, p, &o, &m);
    sl_load_stats s = {0};
    EXPECT(st == SL_OK && sl_model_stats(m, &s) == SL_OK && s.verified_files > 0,
           "verified load: %s (%lld files verified)", sl_model_errmsg(m), (long long)s.verified_files);
    EXPECT(opens() == 1, "a verified load opened the manifest %d times", opens());
    sl_model_free(m);

    watch(man);
    st = sl_reshard(ck, p, &o, out, 0, err, sizeof err);
    EXPECT(st == SL_OK, "verified reshard: %s", err);
    EXPECT(opens() == 1, "a verified reshard opened the manifest %d times", opens());
    watch("");

    sl_plan_free(p);
    sl_checkpoint_close(ck);
    tu_rm_rf(dir);
    return expect_failures ? 1 : 0;
}
