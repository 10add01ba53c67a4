/* cli_plan.c - `shardload plan (PATH | --config FILE) [--tp T] [--pp P] [--layout tp|spmd]
 * [--dtype D] [--rules FILE] [--json] [--verbose]`: show what each device of a mesh holds.
 * Exit 0 success, 1 failure (one line on stderr), 2 usage error. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct plan_args {
    const char *path;
    sl_plan_opts o;
    sl_load_opts lo;   /* a remote checkpoint's settings (cli_remote.c) */
    int json, verbose;
} plan_args;

static void plan_help(FILE *out)
{
    fprintf(out,
            "usage: shardload plan (PATH | --config FILE) [--tp T] [--pp P] [--pp-partition LIST]\n"
            "                      [--ep] [--layout tp|spmd] [--dtype bf16|f16|f32] [--rules FILE]\n"
            "                      [--json] [--verbose]\n"
            "                      [remote options]\n\n"
            "Shows the parameters each device of a mesh holds, per SHARDING.md, without loading.\n"
            "With PATH (a .safetensors file or a checkpoint directory) every tensor is checked\n"
            "against the config (shapes, unclaimed and missing weights) and the bytes to read are\n"
            "counted; with --config alone the plan comes from the config's shapes.\n\n"
            "  PATH            checkpoint; its config is PATH/config.json unless --config is given\n"
            "  --config FILE   the model's Hugging Face config.json; - reads it from stdin\n"
            "  --tp T          tensor-parallel size (layout spmd: the mesh size N); default 1\n"
            "  --pp P          pipeline-parallel size; default 1 (layout tp only)\n"
            CLI_PP_PARTITION_HELP
            "  --ep            expert parallelism (MoE models, layout tp): the T ranks of a stage\n"
            "                  share the routed experts, each whole, in contiguous ranges (the\n"
            "                  first E %% T ranks one more; vLLM --enable-expert-parallel)\n"
            "  --layout L      tp (vLLM tensor parallel, default) or spmd (XLA/GSPMD 1-D mesh)\n"
            "  --dtype D       target dtype bf16, f16 or f32; default the config's torch_dtype\n"
            "  --rules FILE    rule table for the architecture instead of the built-in one\n"
            "                  (docs/rules.md)\n"
            "  --json          machine-readable output: {\"layout\",\"tp\",\"pp\",\"dtype\",\"ep\",\n"
            "                  \"pp_partition\",\"devices\":[...],\"total_bytes\",\"read_bytes\"}\n"
            "                  (pp_partition: the layers of each pipeline stage; read_bytes null\n"
            "                  without a checkpoint)\n"
            "  --verbose       text output also lists every parameter of each device\n"
            "  --help          this text\n"
            "A remote PATH (http(s)://, s3://: docs/remote.md) takes:\n" CLI_REMOTE_HELP "\n"
            "Devices are numbered d = pp_rank*T + tp_rank.\n"
            "Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.\n");
}

static int plan_int_opt(const char *name, const char *v, int32_t *out)
{
    int64_t x = 0;
    if (v == NULL || cli_parse_int(v, 1, 65536, &x) != 0)
        return cli_usage_error("plan", "%s needs an integer in [1, 65536]", name);
    *out = (int32_t)x;
    return CLI_EXIT_OK;
}

static int plan_opt_value(plan_args *a, const char *opt, const char *v)
{
    sl_dtype dt;
    if (v == NULL)
        return cli_usage_error("plan", "%s needs a value", opt);
    if (!strcmp(opt, "--tp"))
        return plan_int_opt(opt, v, &a->o.tp);
    if (!strcmp(opt, "--pp"))
        return plan_int_opt(opt, v, &a->o.pp);
    if (!strcmp(opt, "--config"))
        return cli_config_arg("plan", v, &a->o);
    if (!strcmp(opt, "--pp-partition"))
        return cli_pp_partition_arg("plan", v, &a->o);
    if (!strcmp(opt, "--rules"))
        a->o.rules_path = v;
    else if (!strcmp(opt, "--dtype") && cli_parse_dtype(v, &dt) == 0)
        a->o.dtype = (int32_t)dt;
    else if (!strcmp(opt, "--layout") && (!strcmp(v, "tp") || !strcmp(v, "spmd")))
        a->o.layout = !strcmp(v, "tp") ? SL_LAYOUT_TP : SL_LAYOUT_SPMD;
    else
        return cli_usage_error("plan", "bad value '%s' for %s", v, opt);
    return CLI_EXIT_OK;
}

static int plan_is_valued(const char *s)
{
    static const char *const opts[] = {"--tp", "--pp", "--config", "--rules", "--dtype", "--layout",
                                        "--pp-partition"};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        if (!strcmp(s, opts[i]))
            return 1;
    }
    return 0;
}

/* Returns -1 after --help, else an exit code (CLI_EXIT_OK to go on). */
static int plan_parse(int argc, char **argv, plan_args *a)
{
    sl_plan_opts_init(&a->o);
    sl_load_opts_init(&a->lo);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int rc = CLI_EXIT_OK;
        if (!strcmp(s, "--help") || !strcmp(s, "-h"))
            return plan_help(stdout), -1;
        if (cli_remote_arg("plan", &a->lo, argc, argv, &i, &rc))
            ;
        else if (!strcmp(s, "--json"))
            a->json = 1;
        else if (!strcmp(s, "--ep"))
            a->o.ep = 1;
        else if (!strcmp(s, "--verbose") || !strcmp(s, "-v"))
            a->verbose = 1;
        else if (plan_is_valued(s))
            rc = plan_opt_value(a, s, i + 1 < argc ? argv[++i] : NULL);
        else if (s[0] == '-' && s[1])
            rc = cli_usage_error("plan", "unknown option '%s'", s);
        else if (a->path)
            rc = cli_usage_error("plan", "more than one PATH ('%s', '%s')", a->path, s);
        else
            a->path = s;
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    if (!a->path && !a->o.config_path)
        return cli_usage_error("plan", "give a checkpoint PATH or --config FILE");
    if (a->o.layout == SL_LAYOUT_SPMD && a->o.pp != 1)
        return cli_usage_error("plan", "--pp applies to layout tp only");
    return cli_pp_partition_finish("plan", &a->o);
}

/* ---- output ----------------------------------------------------------------------------------- */

static void print_shape(const sl_param_info *pi, const char *open, const char *sep, const char *close)
{
    fputs(open, stdout);
    for (uint32_t d = 0; d < pi->ndim; d++)
        printf("%s%" PRIu64, d ? sep : "", pi->shape[d]);
    fputs(close, stdout);
}

static void plan_json_device(const sl_plan *p, int32_t d)
{
    printf("%s{\"index\":%d,\"tp_rank\":%d,\"pp_rank\":%d,\"bytes\":%" PRIu64 ",\"params\":[",
           d ? "," : "", (int)d, (int)(d % sl_plan_tp(p)), (int)(d / sl_plan_tp(p)),
           sl_plan_device_bytes(p, d));
    sl_param_info pi;
    for (int64_t i = 0; sl_plan_param(p, d, i, &pi) == SL_OK; i++) {
        printf("%s{\"name\":", i ? "," : "");
        cli_json_str(stdout, pi.name);
        printf(",\"dtype\":\"%s\",\"shape\":", sl_dtype_name(pi.dtype));
        print_shape(&pi, "[", ",", "]");
        printf(",\"bytes\":%" PRIu64 "}", pi.nbytes);
    }
    printf("]}");
}

/* The layers of each pipeline stage, "10,12,10" (sep ","), or "[0, 10) [10, 22) [22, 32)". */
static void print_stages(const sl_plan *p, int ranges)
{
    for (int32_t s = 0; s < sl_plan_pp(p); s++) {
        int64_t first = 0, count = 0;
        sl_plan_stage_layers(p, s, &first, &count);
        if (ranges)
            printf("%s[%" PRId64 ", %" PRId64 ")", s ? " " : "", first, first + count);
        else
            printf("%s%" PRId64, s ? "," : "", count);
    }
}

static void plan_json(const sl_plan *p)
{
    printf("{\"layout\":\"%s\",\"tp\":%d,\"pp\":%d,\"dtype\":\"%s\",\"ep\":%s,\"pp_partition\":[",
           sl_plan_layout(p) == SL_LAYOUT_SPMD ? "spmd" : "tp", (int)sl_plan_tp(p),
           (int)sl_plan_pp(p), sl_dtype_name(sl_plan_dtype(p)), sl_plan_ep(p) ? "true" : "false");
    print_stages(p, 0);
    printf("],\"devices\":[");
    for (int32_t d = 0; d < sl_plan_device_count(p); d++)
        plan_json_device(p, d);
    printf("],\"total_bytes\":%" PRIu64 ",\"read_bytes\":", sl_plan_total_bytes(p));
    if (sl_plan_read_bytes(p) == UINT64_MAX)
        printf("null}\n");
    else
        printf("%" PRIu64 "}\n", sl_plan_read_bytes(p));
}

static void plan_text_params(const sl_plan *p, int32_t d)
{
    sl_param_info pi;
    char b[32], nb[CLI_TEXT_NAME];
    for (int64_t i = 0; sl_plan_param(p, d, i, &pi) == SL_OK; i++) {
        printf("      %-56s %-5s ", cli_text(pi.name, nb, sizeof nb), sl_dtype_name(pi.dtype));
        print_shape(&pi, "[", ", ", "]");
        printf(" %s\n", cli_commas(pi.nbytes, b, sizeof(b)));
    }
}

static void plan_text(const sl_plan *p, int verbose)
{
    char b[32];
    printf("layout %s, tp %d, pp %d, dtype %s, %d devices\n\n",
           sl_plan_layout(p) == SL_LAYOUT_SPMD ? "spmd" : "tp", (int)sl_plan_tp(p),
           (int)sl_plan_pp(p), sl_dtype_name(sl_plan_dtype(p)), (int)sl_plan_device_count(p));
    if (sl_plan_pp(p) > 1) {
        printf("layers per stage: ");
        print_stages(p, 0);
        printf(" (");
        print_stages(p, 1);
        printf(")\n\n");
    }
    printf("%6s %7s %7s %20s %7s\n", "device", "tp_rank", "pp_rank", "bytes", "params");
    for (int32_t d = 0; d < sl_plan_device_count(p); d++) {
        printf("%6d %7d %7d %20s %7" PRId64 "\n", (int)d, (int)(d % sl_plan_tp(p)),
               (int)(d / sl_plan_tp(p)), cli_commas(sl_plan_device_bytes(p, d), b, sizeof(b)),
               sl_plan_param_count(p, d));
        if (verbose)
            plan_text_params(p, d);
    }
    printf("\ntotal bytes (all devices): %s\n", cli_commas(sl_plan_total_bytes(p), b, sizeof(b)));
    if (sl_plan_read_bytes(p) == UINT64_MAX)
        printf("bytes to read: unknown (no checkpoint)\n");
    else
        printf("bytes to read (each once): %s\n", cli_commas(sl_plan_read_bytes(p), b, sizeof(b)));
}

int cli_plan(int argc, char **argv)
{
    plan_args a = {0};
    const int rc = plan_parse(argc, argv, &a);
    if (rc != CLI_EXIT_OK)
        return rc < 0 ? CLI_EXIT_OK : rc;
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    int ret = CLI_EXIT_OK;
    char pb[CLI_PATH_MAX];
    if (a.path && (ret = cli_ckpt_path(a.path, pb, sizeof pb, &a.path)) != CLI_EXIT_OK)
        return ret;
    char err[1024];
    if (a.path && cli_remote_open(a.path, &a.lo, &ck) != SL_OK) {
        ret = cli_fail("%s", ck ? sl_checkpoint_errmsg(ck) : "out of memory");
        goto out;
    }
    if (cli_remote_config(ck, &a.o, err, sizeof err) != SL_OK) {   /* an http(s) checkpoint */
        ret = cli_fail("%s", err);
        goto out;
    }
    cli_warnings(ck);
    if (sl_plan_build(ck, &a.o, &p) != SL_OK) {
        ret = cli_fail("%s", cli_plan_errmsg(p, err, sizeof err));
        goto out;
    }
    if (a.json)
        plan_json(p);
    else
        plan_text(p, a.verbose);
out:
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    return ret;
}
