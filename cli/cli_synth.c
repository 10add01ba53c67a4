/* cli_synth.c - `shardload synth`: a synthetic checkpoint of a config's shapes. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void synth_help(FILE *out)
{
    fprintf(out,
            "usage: shardload synth --config FILE OUTDIR [--dtype D] [--seed S] [--max-shard-size SIZE]\n"
            "                       [--rules FILE] [--write-manifest]\n\n"
            "Writes a synthetic checkpoint in Hugging Face layout into OUTDIR: the tensors the config\n"
            "implies (names and shapes of its architecture's rule table) with uniform random values,\n"
            "shards model-0000i-of-0000n.safetensors with model.safetensors.index.json (or one\n"
            "model.safetensors), and config.json (the config as read, its torch_dtype the files').\n"
            "Memory use does not grow with the model. One model.safetensors (no index) is refused,\n"
            "before anything is written, where OUTDIR holds other .safetensors files: a folder\n"
            "without an index loads every one of them. OUTDIR and its missing parents are created;\n"
            "a failed run removes the directories it created.\n\n"
            "options:\n"
            "  --config FILE          the model's config.json (required; -: read from stdin)\n"
            "  --dtype bf16|f16|f32   element type (default: the config's torch_dtype)\n"
            "  --seed S               random seed (default 1234); same seed, same bytes\n"
            "  --max-shard-size SIZE  largest shard, e.g. 5GB, 512MiB (default 5GB)\n"
            "  --rules FILE           rule table for an architecture that is not built in\n"
            "  --write-manifest       also write OUTDIR/SHA256SUMS (sha256sum format, with XXH3 lines\n"
            "                         of 1 MiB blocks), for `load --manifest` (--verify) later\n"
            "  -h, --help             this text\n\n"
            "Exit status: 0 success, 1 failure (one line on stderr), 2 usage error; a run stopped\n"
            "by SIGINT or SIGTERM removes the files it had not finished and ends by that signal.\n");
}

int cli_synth(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"dtype", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 's'},   {"max-shard-size", required_argument, NULL, 'm'},
        {"rules", required_argument, NULL, 'r'},  {"help", no_argument, NULL, 'h'},
        {"write-manifest", no_argument, NULL, 'w'},
        {NULL, 0, NULL, 0}};
    sl_plan_opts po;
    sl_plan_opts_init(&po);   /* its config, rules_path and dtype: what synth takes */
    uint64_t seed = 1234, max_shard = 0;
    int64_t v;
    int c, rc, manifest = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        sl_dtype dt;
        switch (c) {
        case 'c':
            if ((rc = cli_config_arg("synth", optarg, &po)) != CLI_EXIT_OK)
                return rc;
            break;
        case 'r': po.rules_path = optarg; break;
        case 'w': manifest = 1; break;
        case 'd':
            if (cli_parse_dtype(optarg, &dt) != 0)
                return cli_usage_error("synth", "--dtype must be bf16, f16 or f32, not '%s'", optarg);
            po.dtype = (int32_t)dt;
            break;
        case 's':
            if (cli_parse_int(optarg, 0, INT64_MAX, &v) != 0)
                return cli_usage_error("synth", "--seed must be a non-negative integer");
            seed = (uint64_t)v;
            break;
        case 'm':
            if (cli_parse_size(optarg, &max_shard) != 0 || max_shard == 0)
                return cli_usage_error("synth", "--max-shard-size '%s' is not a size", optarg);
            break;
        case 'h': synth_help(stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("synth", "unknown option");
        }
    }
    if (!po.config_path)
        return cli_usage_error("synth", "--config FILE is required");
    if (optind != argc - 1)
        return cli_usage_error("synth", "expected one OUTDIR");
    char err[1024];
    cli_signals_catch();
    const sl_status st = sl_synth_opts(&po, argv[optind], seed, max_shard, err, sizeof(err));
    if (cli_signals_caught())
        return cli_signals_exit("synth", argv[optind]);
    if (st != SL_OK)
        return cli_fail("%s", err);
    if (manifest && sl_write_manifest(argv[optind], NULL, err, sizeof err) != SL_OK)
        return cli_fail("%s", err);
    fputs("wrote a synthetic checkpoint of ", stdout);
    cli_put_text(stdout, po.config_path);
    fputs(" to ", stdout);
    cli_put_text(stdout, argv[optind]);
    putchar('\n');
    return CLI_EXIT_OK;
}
