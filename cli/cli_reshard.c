/* cli_reshard.c - `shardload reshard PATH OUTDIR`: per-device pre-sharded safetensors files. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void reshard_help(FILE *out)
{
    fprintf(out,
            "usage: shardload reshard PATH OUTDIR [--tp T] [--pp P] [--pp-partition LIST] [--ep]\n"
            "                         [--layout tp|spmd] [--dtype D] [--max-part-size SIZE]\n"
            "                         [--staging MiB] [--request MiB] [--threads N]\n"
            "                         [--io auto|direct|buffered] [--config FILE] [--rules FILE]\n"
            "                         [--dist cooperative|independent] [--devices-per-rank K]\n"
            "                         [--write-manifest] [remote options]\n\n"
            "Writes each device's parameters, with exactly their device shapes (padding included),\n"
            "to OUTDIR/model-rank-{d}-part-{p}.safetensors (vLLM's sharded_state layout), reading\n"
            "each checkpoint byte once with the same host-memory bound as `load`, and then\n"
            "OUTDIR/config.json: the config the plan was built from (--config's, or PATH's own).\n"
            "`shardload load OUTDIR` with the same layout, T and P (and pipeline split) then reads\n"
            "each device's own files directly.\n\n"
            "OUTDIR is refused, before anything is written, when it is or contains PATH, holds a\n"
            "Hugging Face checkpoint, or holds rank files this reshard would not overwrite (from a\n"
            "reshard for another mesh or part size): use a new or empty directory. OUTDIR and its\n"
            "missing parents are created; a failed run removes the directories it created.\n\n"
            "  --tp T, --pp P, --pp-partition LIST, --ep, --layout L, --dtype D, --config FILE,\n"
            "  --rules FILE           as for `load` ($VLLM_PP_LAYER_PARTITION too); the parts of a\n"
            "                         split other than vLLM's default say so (\"pp_partition\")\n"
            "  --max-part-size SIZE   largest part file, e.g. 5GB, 512MiB (default 5GB)\n"
            "  --write-manifest       also write OUTDIR/SHA256SUMS (sha256sum format, with XXH3 lines\n"
            "                         of 1 MiB blocks) of the part files, for `load OUTDIR\n"
            "                         --manifest` (--verify); one process\n"
            "  --staging MiB          host staging budget (default 64, at least 16 KiB)\n"
            "  --request MiB          size of one read request (default: the budget cut into\n"
            "                         about --threads or CPU-count slots of 4 to 16 MiB)\n"
            "                         (--staging, --request: a plain number is MiB, whatever its\n"
            "                         size; with a unit it is that size: 4096B, 512K, 256M, 1G;\n"
            "                         up to 1 TiB, from 16 KiB (--staging) or 4 KiB (--request))\n"
            "  --threads N            I/O requests in flight (default automatic)\n"
            "  --io M                 auto, direct or buffered (default auto)\n"
            "  --dist S, --devices-per-rank K   under mpirun, as for `load` (docs/mpi.md): rank r\n"
            "                         writes the files of devices [r*K, (r+1)*K), rank 0 config.json\n"
            "  --s3-*, --remote-*     PATH as an http(s):// or s3:// URL, as for `load` (docs/remote.md)\n"
            "  -h, --help             this text\n\n"
            "Exit status: 0 success, 1 failure (one line on stderr), 2 usage error; a run stopped\n"
            "by SIGINT or SIGTERM removes the files it had not finished and ends by that signal.\n");
}

static const char *const reshard_allowed[] = {
    "--tp",      "--pp",      "--pp-partition", "--layout", "--dtype",         "--config", "--rules",
    "--staging", "--request", "--threads", "--io", "--max-part-size", "--dist",
    "--devices-per-rank", "--ep", "--write-manifest", CLI_REMOTE_OPTIONS, NULL};

static int reshard_run(const char *path, const char *outdir, cli_opts *a)
{
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    int rc = CLI_EXIT_OK;
    char err[2048];
    char cerr[1024];
    if (cli_remote_open(path, &a->lo, &ck) != SL_OK)
        rc = cli_fail("%s", ck ? sl_checkpoint_errmsg(ck) : "out of memory");
    else if (cli_remote_config(ck, &a->po, cerr, sizeof cerr) != SL_OK)   /* a URL's config.json */
        rc = cli_fail("%s", cerr);
    else if (cli_warnings(ck), sl_plan_build(ck, &a->po, &p) != SL_OK)
        rc = cli_fail("%s", cli_plan_errmsg(p, cerr, sizeof cerr));
    else if (cli_signals_catch(), sl_reshard(ck, p, &a->lo, outdir, a->max_part, err,
                                             sizeof(err)) != SL_OK || cli_signals_caught())
        rc = cli_signals_caught() ? cli_signals_exit("reshard", outdir) : cli_fail("%s", err);
    else if (a->write_manifest && sl_write_manifest(outdir, NULL, err, sizeof err) != SL_OK)
        rc = cli_fail("%s", err);
    else {
        printf("wrote %d devices' shards (%llu bytes) to ", sl_plan_device_count(p),
               (unsigned long long)sl_plan_total_bytes(p));
        cli_put_text(stdout, outdir);
        putchar('\n');
    }
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    return rc;
}

int cli_reshard(int argc, char **argv)
{
    cli_opts a = {0};
    int rc = cli_opts_parse(&a, "reshard", argc, argv, reshard_allowed, 2, reshard_help);
    if (rc != CLI_EXIT_OK)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (a.n_pos != 2)
        return cli_usage_error("reshard", "expected PATH and OUTDIR");
    if (!a.pos[1][0])
        return cli_usage_error("reshard", "OUTDIR is empty");
    char pb[CLI_PATH_MAX];
    if ((rc = cli_ckpt_path(a.pos[0], pb, sizeof pb, &a.pos[0])) != CLI_EXIT_OK)
        return rc;
    if (cli_dist_wanted(&a, &rc)) {
        if (rc != CLI_EXIT_OK)
            return rc;
        if (a.write_manifest)
            return cli_usage_error("reshard", "--write-manifest is for one process (run "
                                   "`shardload reshard` without MPI, or sha256sum afterwards)");
        cli_sig sig;
        cli_sig_init(&sig, "reshard");
        cli_sig_opts(&sig, &a);
        cli_sig_add(&sig, "OUTDIR", "%s", a.pos[1]);
        cli_sig_add(&sig, "--max-part-size", "%llu", (unsigned long long)a.max_part);
        return cli_reshard_dist(&sig, a.pos[0], a.pos[1], &a.po, &a.lo, &a.dist, a.max_part);
    }
    return reshard_run(a.pos[0], a.pos[1], &a);
}
