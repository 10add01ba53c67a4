/* cli_demo.c - `shardload demo` (what `make demo` runs): synthesizes a small built-in model in a
 * temporary directory, plans and loads it at TP=2 on cpu (and on CUDA GPUs when there are any),
 * prints the plan and the load reports, and removes the directory. */
#define _XOPEN_SOURCE 700
#include "cli.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A Llama-shaped model of about 100 MB in bf16: GQA (8 query heads, 2 kv heads), a vocabulary
 * that is not a multiple of 64, 4 layers. */
static const char demo_config[] =
    "{\n"
    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    "  \"model_type\": \"llama\",\n"
    "  \"hidden_size\": 1024,\n"
    "  \"intermediate_size\": 2816,\n"
    "  \"num_attention_heads\": 8,\n"
    "  \"num_key_value_heads\": 2,\n"
    "  \"num_hidden_layers\": 4,\n"
    "  \"vocab_size\": 32001,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\"\n"
    "}\n";

static int demo_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int demo_write_config(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    const int ok = fputs(demo_config, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int demo_run(const char *dir)
{
    char cfg[4200], ck[4200], err[1024];
    snprintf(cfg, sizeof(cfg), "%s/demo-config.json", dir);
    snprintf(ck, sizeof(ck), "%s/checkpoint", dir);
    if (demo_write_config(cfg) != 0)
        return cli_fail("%s: cannot write", cfg);
    printf("== shardload demo: a synthetic Llama-shaped model (4 layers, GQA 8/2, vocab 32001)\n");
    if (sl_synth(cfg, NULL, ck, -1, 1234, 40u * 1000 * 1000, err, sizeof(err)) != SL_OK)
        return cli_fail("%s", err);
    printf("wrote %s\n", ck);
    char *plan[] = {"plan", ck, "--tp", "2", NULL};
    printf("\n== shardload plan %s --tp 2\n", ck);
    fflush(stdout);
    int rc = cli_plan(4, plan);
    char *load[] = {"load", ck, "--tp", "2", NULL};
    if (rc == CLI_EXIT_OK) {
        printf("\n== shardload load %s --tp 2\n", ck);
        fflush(stdout);
        rc = cli_load(4, load);
    }
    char *load_cuda[] = {"load", ck, "--tp", "2", "--device", "cuda", NULL};
    if (rc == CLI_EXIT_OK && sl_cuda_gpu_count() > 0) {
        printf("\n== shardload load %s --tp 2 --device cuda\n", ck);
        fflush(stdout);
        rc = cli_load(6, load_cuda);
    } else if (rc == CLI_EXIT_OK) {
        printf("\n(no CUDA GPU here: the same load with --device cuda is skipped)\n");
    }
    return rc;
}

int cli_demo(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: shardload demo\n\nSynthesizes a small built-in model in a temporary directory,\n"
               "plans and loads it at TP=2 on cpu (and on CUDA GPUs when there are any), prints\n"
               "the plan and the reports, and cleans up.\n\n"
               "Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.\n");
        return CLI_EXIT_OK;
    }
    if (argc > 1)
        return cli_usage_error("demo", "takes no arguments");
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/shardload-demo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return cli_fail("%s: cannot create a temporary directory", dir);
    const int rc = demo_run(dir);
    nftw(dir, demo_rm, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == CLI_EXIT_OK)
        printf("\n== demo done; %s removed\n", dir);
    return rc;
}
