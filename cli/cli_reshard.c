/* cli_reshard.c - `shardload reshard PATH OUTDIR`: per-device pre-sharded safetensors files. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void reshard_help(FILE *out)
{
    fprintf(out,
            "usage: shardload reshard PATH OUTDIR [--tp T] [--pp P] [--layout tp|spmd] [--dtype D]\n"
            "                         [--max-part-size SIZE] [--staging MiB] [--threads N]\n"
            "                         [--io auto|direct|buffered] [--config FILE] [--rules FILE]\n"
            "                         [--dist cooperative|independent] [--devices-per-rank K]\n\n"
            "Writes each device's parameters, with exactly their device shapes (padding included),\n"
            "to OUTDIR/model-rank-{d}-part-{p}.safetensors (vLLM's sharded_state layout), reading\n"
            "each checkpoint byte once with the same host-memory bound as `load`; config.json is\n"
            "copied. `shardload load OUTDIR` with the same layout, T and P then reads each device's\n"
            "own files directly.\n\n"
            "  --tp T, --pp P, --layout L, --dtype D, --config FILE, --rules FILE   as for `load`\n"
            "  --max-part-size SIZE   largest part file, e.g. 5GB, 512MiB (default 5GB)\n"
            "  --staging MiB          host staging budget (default 64)\n"
            "  --threads N            I/O requests in flight (default automatic)\n"
            "  --io M                 auto, direct or buffered (default auto)\n"
            "  --dist S, --devices-per-rank K   under mpirun, as for `load` (docs/mpi.md): rank r\n"
            "                         writes the files of devices [r*K, (r+1)*K), rank 0 config.json\n"
            "  -h, --help             this text\n");
}

typedef struct reshard_args {
    sl_plan_opts po;
    sl_load_opts lo;
    uint64_t max_part;
    sl_dist_opts dist;
    int dist_set;             /* --dist or --devices-per-rank given */
} reshard_args;

static int reshard_opt(reshard_args *a, int c, const char *v)
{
    int64_t n;
    sl_dtype dt;
    switch (c) {
    case 't': if (cli_parse_int(v, 1, 65536, &n)) return -1; a->po.tp = (int32_t)n; return 0;
    case 'p': if (cli_parse_int(v, 1, 65536, &n)) return -1; a->po.pp = (int32_t)n; return 0;
    case 'n': if (cli_parse_int(v, 1, 1024, &n)) return -1; a->lo.threads = (int32_t)n; return 0;
    case 'd': if (cli_parse_dtype(v, &dt)) return -1; a->po.dtype = (int32_t)dt; return 0;
    case 'c': a->po.config_path = v; return 0;
    case 'r': a->po.rules_path = v; return 0;
    case 'm': return cli_parse_size(v, &a->max_part) || a->max_part == 0 ? -1 : 0;
    case 'k':
        if (cli_parse_int(v, 1, 65536, &n)) return -1;
        a->dist.devices_per_rank = (int32_t)n;
        return a->dist_set = 1, 0;
    case 'D':
        if (strcmp(v, "cooperative") && strcmp(v, "independent"))
            return -1;
        a->dist.strategy = strcmp(v, "cooperative") ? SL_DIST_INDEPENDENT : SL_DIST_COOPERATIVE;
        return a->dist_set = 1, 0;
    case 's':
        if (cli_parse_int(v, 1, 1 << 20, &n) == 0)
            return a->lo.staging_bytes = (uint64_t)n << 20, 0;
        return cli_parse_size(v, &a->lo.staging_bytes) ? -1 : 0;
    case 'l':
        if (strcmp(v, "tp") && strcmp(v, "spmd"))
            return -1;
        a->po.layout = strcmp(v, "tp") ? SL_LAYOUT_SPMD : SL_LAYOUT_TP;
        return 0;
    case 'i':
        if (!strcmp(v, "auto")) a->lo.io = SL_IO_AUTO;
        else if (!strcmp(v, "direct")) a->lo.io = SL_IO_DIRECT;
        else if (!strcmp(v, "buffered")) a->lo.io = SL_IO_BUFFERED;
        else return -1;
        return 0;
    default: return -1;
    }
}

static int reshard_run(const char *path, const char *outdir, reshard_args *a)
{
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    int rc = CLI_EXIT_OK;
    char err[2048];
    if (sl_checkpoint_open(path, &ck) != SL_OK)
        rc = cli_fail("%s", ck ? sl_checkpoint_errmsg(ck) : "out of memory");
    else if (sl_plan_build(ck, &a->po, &p) != SL_OK)
        rc = cli_fail("%s", p ? sl_plan_errmsg(p) : "out of memory");
    else if (sl_reshard(ck, p, &a->lo, outdir, a->max_part, err, sizeof(err)) != SL_OK)
        rc = cli_fail("%s", err);
    else
        printf("wrote %d devices' shards (%llu bytes) to %s\n", sl_plan_device_count(p),
               (unsigned long long)sl_plan_total_bytes(p), outdir);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    return rc;
}

int cli_reshard(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tp", required_argument, NULL, 't'},      {"pp", required_argument, NULL, 'p'},
        {"layout", required_argument, NULL, 'l'},  {"dtype", required_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'},  {"rules", required_argument, NULL, 'r'},
        {"staging", required_argument, NULL, 's'}, {"threads", required_argument, NULL, 'n'},
        {"io", required_argument, NULL, 'i'},      {"max-part-size", required_argument, NULL, 'm'},
        {"dist", required_argument, NULL, 'D'},    {"devices-per-rank", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    reshard_args a = {0};
    sl_plan_opts_init(&a.po);
    sl_load_opts_init(&a.lo);
    sl_dist_opts_init(&a.dist);
    int c, idx = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (c == 'h')
            return reshard_help(stdout), CLI_EXIT_OK;
        if (c == '?')
            return cli_usage_error("reshard", "unknown option");
        if (reshard_opt(&a, c, optarg) != 0)
            return cli_usage_error("reshard", "bad value '%s' for --%s", optarg, opts[idx].name);
    }
    if (optind != argc - 2)
        return cli_usage_error("reshard", "expected PATH and OUTDIR");
    if (a.po.layout == SL_LAYOUT_SPMD && a.po.pp != 1)
        return cli_usage_error("reshard", "--pp applies to layout tp only");
    /* As for load: MPI only under an MPI launcher or when asked for, so a plain run is unchanged. */
    if (a.dist_set || (cli_dist_launched() && sl_dist_available()))
        return cli_reshard_dist(argv[optind], argv[optind + 1], &a.po, &a.lo, &a.dist, a.max_part);
    return reshard_run(argv[optind], argv[optind + 1], &a);
}
