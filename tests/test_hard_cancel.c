/* test_hard_cancel.c - sl_cancel through the C API (issue 18 item 8): with a cancel request
 * pending, sl_load fails with SL_E_CANCELLED and keeps no device, sl_synth and sl_reshard fail
 * with it and leave neither temporary files nor the OUTDIR they would have created; after
 * sl_cancel_clear the same calls succeed. (The CLI's signals are tests/cli_hard_signals.sh.) */
#include "shardload.h"

#include "expect.h"
#include "scratch.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

int main(void)
{
    char dir[512], cfg[600], ck_dir[600], out[600], err[1024];
    tu_tmpdir(dir, sizeof dir, "hard_cancel");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(ck_dir, sizeof ck_dir, "%s/ck", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return 1;
    fputs("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":256,"
          "\"intermediate_size\":512,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
          "\"num_hidden_layers\":2,\"vocab_size\":1001,\"tie_word_embeddings\":false,"
          "\"torch_dtype\":\"bfloat16\",\"rms_norm_eps\":1e-05,\"head_dim\":32}", f);
    fclose(f);

    sl_cancel();
    sl_status st = sl_synth(cfg, NULL, ck_dir, -1, 1234, 600000, err, sizeof err);
    EXPECT(st == SL_E_CANCELLED && !strchr(err, '\n'), "synth cancelled: %s: %s", sl_status_str(st), err);
    EXPECT(!exists(ck_dir), "a cancelled synth left the OUTDIR it created");
    sl_cancel_clear();
    st = sl_synth(cfg, NULL, ck_dir, -1, 1234, 600000, err, sizeof err);
    EXPECT(st == SL_OK, "synth after sl_cancel_clear: %s", err);

    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_model *m = NULL;
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.tp = 2;
    EXPECT(sl_checkpoint_open(ck_dir, &ck) == SL_OK, "open: %s", sl_checkpoint_errmsg(ck));
    EXPECT(sl_plan_build(ck, &po, &p) == SL_OK, "plan: %s", sl_plan_errmsg(p));
    sl_cancel();
    st = sl_load(ck, p, NULL, &m);
    EXPECT(st == SL_E_CANCELLED && strstr(sl_model_errmsg(m), "cancelled") && sl_model_device_count(m) == 0,
           "load cancelled: %s: %s", sl_status_str(st), sl_model_errmsg(m));
    sl_model_free(m);
    m = NULL;
    st = sl_reshard(ck, p, NULL, out, 0, err, sizeof err);
    EXPECT(st == SL_E_CANCELLED, "reshard cancelled: %s: %s", sl_status_str(st), err);
    EXPECT(!exists(out), "a cancelled reshard left the OUTDIR it created");
    sl_cancel_clear();
    st = sl_load(ck, p, NULL, &m);
    EXPECT(st == SL_OK, "load after sl_cancel_clear: %s", sl_model_errmsg(m));
    sl_model_free(m);
    st = sl_reshard(ck, p, NULL, out, 0, err, sizeof err);
    EXPECT(st == SL_OK, "reshard after sl_cancel_clear: %s", err);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    tu_rm_rf(dir);
    return expect_failures ? 1 : 0;
}
