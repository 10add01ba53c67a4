/* cli_load.c - `shardload load PATH [options]`: open a checkpoint, plan it for a mesh, load it into
 * the devices and report speed and memory. Exit 0 success, 1 failure (one line on stderr), 2 usage
 * error. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void load_help(FILE *out)
{
    fprintf(out,
            "usage: shardload load PATH [--tp T] [--pp P] [--pp-partition LIST] [--ep]\n"
            "                      [--layout tp|spmd] [--dtype D] [--device cpu|cuda|pjrt]\n"
            "                      [--io auto|direct|buffered] [--threads N]\n"
            "                      [--staging MiB] [--request MiB] [--read-gap G]\n"
            "                      [--format auto|dummy] [--seed S]\n"
            "                      [--checksums] [--json] [--config FILE] [--rules FILE]\n"
            "                      [--gpus LIST] [--numa] [--pjrt-plugin PATH] [--devices LIST]\n"
            "                      [--verify] [--manifest FILE] [--dist cooperative|independent]\n"
            "                      [--devices-per-rank K] [remote options]\n\n"
            "Loads a safetensors checkpoint into a mesh of devices, each device getting exactly its\n"
            "shard (SHARDING.md), reading each checkpoint byte once in large parallel requests under\n"
            "a fixed host staging budget; then reports the time, throughput, bytes read, the bytes\n"
            "allocated on each device (equal to the plan's) and the peak resident memory.\n\n"
            "  PATH            a .safetensors file or a checkpoint directory (may be omitted with\n"
            "                  --format dummy and --config)\n"
            "  --tp T          tensor-parallel size (layout spmd: the mesh size N); default 1\n"
            "  --pp P          pipeline-parallel size; default 1 (layout tp only)\n"
            CLI_PP_PARTITION_HELP
            "  --ep            expert parallelism (MoE models, layout tp): the T ranks of a stage\n"
            "                  share the routed experts, each whole (vLLM --enable-expert-parallel)\n"
            "  --layout L      tp (vLLM tensor parallel, default) or spmd (XLA/GSPMD 1-D mesh)\n");
    fprintf(out,
            "  --dtype D       target dtype bf16, f16 or f32 (converted while loading, round to\n"
            "                  nearest even); default the config's torch_dtype\n"
            "  --device D      cpu (default: one host allocation per device), cuda (CUDA runtime\n"
            "                  loaded at run time: $SL_CUDART, else libcudart.so.13/12/11 from\n"
            "                  the loader's path or /usr/local/cuda) or pjrt (a PJRT plugin)\n"
            "  --numa          cpu: bind device d's memory to NUMA node d %% number of nodes\n"
            "  --gpus LIST     cuda: GPU of each mesh device, e.g. 0,1,0,1; default device d on\n"
            "                  GPU d %% number of GPUs\n"
            "  --devices LIST  load these mesh devices only, e.g. 3 (what an engine's rank 3\n"
            "                  holds: only the bytes they need are read); default all\n"
            "  --pjrt-plugin PATH  pjrt: the PJRT plugin to load (XLA's CPU plugin\n"
            "                  xla_cpu_pjrt.so, JAX's xla_cuda_plugin.so, libtpu.so); each\n"
            "                  parameter becomes one PJRT buffer of its dtype and shape, device d\n"
            "                  on PJRT device d %% addressable devices (the CPU plugin is given\n"
            "                  the mesh size); checksums read the buffers back\n"
            "  --io M          auto (default: buffered when the file is mostly in the page cache,\n"
            "                  else O_DIRECT), direct or buffered\n"
            "  --threads N     I/O threads / requests in flight (for cuda, also the number of\n"
            "                  staging slots the budget is cut into); default automatic\n"
            "  --staging MiB   host staging budget; default 64, at least 16 KiB\n"
            "  --request MiB   size of one read request; default 16 (less when the budget\n"
            "                  holds fewer than two); for cuda, by default the\n"
            "                  budget is cut into about --threads (or CPU count, at most 16)\n"
            "                  slots of 4 to 16 MiB\n"
            "                  --staging and --request: a plain number is MiB (64 = 64 MiB,\n"
            "                  whatever its size); with a unit it is that size: 4096B, 512K,\n"
            "                  256M, 1G (or KiB/MiB/GiB; KB/MB/GB are powers of 1000); up to\n"
            "                  1 TiB, from 16 KiB (--staging) or 4 KiB (--request)\n"
            "  --read-gap G    gaps between needed byte ranges under G are read rather than\n"
            "                  skipped, so requests stay large; default 1MiB (at most); none:\n"
            "                  read only the bytes the devices need (with --devices, a rank\n"
            "                  then reads each row of a row-split weight apart, e.g. o_proj at\n"
            "                  --tp 8: many small requests, for fast local storage)\n");
    /* two pieces: C99 promises string literals of 4095 bytes only */
    fprintf(out,
            "  --format F      auto (read the checkpoint, default) or dummy (no file is read: values\n"
            "                  uniform in [-1e-3, 1e-3) from --seed, padding zero)\n"
            "  --seed S        dummy seed; default 1234\n"
            "  --verify        check the bytes while loading: with a manifest that has XXH3 blocks\n"
            "                  (--write-manifest), the blocks the load reads; else every file's\n"
            "                  SHA-256 (every byte of every file is read) against --manifest, or\n"
            "                  in a Hugging Face cache the blob name each file links to, or an\n"
            "                  S3 object's stored x-amz-checksum-sha256; a mismatch fails the\n"
            "                  load naming the file (and the byte range)\n"
            "  --manifest FILE a sha256sum file of the checkpoint's files, with or without\n"
            "                  --write-manifest's block lines (implies --verify)\n"
            "  --checksums     print the XXH3-64 of every parameter of every device\n"
            "  --json          machine-readable output: {\"seconds\",\"setup_seconds\",\"bytes_read\",\n"
            "                  \"gbps\",\"gbps_after_setup\",\n"
            "                  \"peak_rss_bytes\",\"io\",\"engine\",\"staging_peak\",\"verified_files\",\n"
            "                  \"verified_bytes\",\"read_requests\",\"read_depth_peak\",\n"
            "                  \"remote_retries\",\"remote_restarts\",\n"
            "                  \"devices\":[{\"index\",\"allocated_bytes\",\n"
            "                  \"params\":[{\"name\",\"xxh3\"}]}]} (params only with --checksums;\n"
            "                  cuda adds \"gpu\",\"mem_free_before\",\"mem_free_after\" and\n"
            "                  \"staging_memory\" (\"page-locked\" or \"plain (why)\") per device;\n"
            "                  pjrt adds the mem_free pair where its plugin reports memory, and\n"
            "                  \"staging_memory\": \"dma-mapped\" or \"plain (why)\" (but with\n"
            "                  --format dummy, which stages nothing) and \"pjrt_routes\": the\n"
            "                  parameters, bytes and calls of each way to a PJRT buffer; cuda\n"
            "                  with SL_CUDA_CONVERT=gpu: \"cuda_convert\", where it converted)\n"
            "  --config FILE   the model's config.json (-: read from stdin); default PATH's\n"
            "                  directory/config.json\n"
            "  --rules FILE    rule table for the architecture instead of the built-in one\n"
            "  --dist S        under mpirun (docs/mpi.md): cooperative (default: each byte read by\n"
            "                  one rank, pieces exchanged) or independent (each rank reads what its\n"
            "                  devices need); rank 0 prints one report, with per-rank figures\n"
            "  --devices-per-rank K  rank r holds mesh devices [r*K, (r+1)*K); default 1\n"
            "PATH may also be http(s)://HOST/DIR/, s3://BUCKET/PREFIX/ or a .safetensors URL\n"
            "(docs/remote.md); config.json is fetched next to it unless --config is given:\n"
            CLI_REMOTE_HELP
            "  --help          this text\n\n");
    fprintf(out,
            "Environment: SL_IO_ENGINE=pread|uring|uring-inline forces the read engine (default\n"
            "io_uring when available, else a pread thread pool; uring-inline lets page-cache reads\n"
            "be copied inline at submit instead of by the kernel's workers).\n"
            "SL_GATHER_ROWS=BYTES (cuda, for benchmarks): same-dtype rows narrower than BYTES are\n"
            "gathered on the host and copied in pieces instead of as 2-D copies.\n"
            "SL_PJRT_ASSEMBLY=BYTES (pjrt, for benchmarks): a device's parameters are assembled on\n"
            "the host within BYTES (default: staging / mesh size) and streamed beyond them.\n"
            "SL_PJRT_DMA_MAP=0 (pjrt, for benchmarks): the staging block is not DMA-mapped in the\n"
            "plugin's client (default 1: mapped where the plugin can).\n"
            "SL_CUDA_CONVERT=gpu (cuda, for benchmarks): bf16/f16 -> f32 conversions run on the GPU,\n"
            "which is sent the 16-bit bytes (default host: the host converts).\n"
            "Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.\n");
}

/* ---- options ---------------------------------------------------------------------------------- */

static const char *const load_allowed[] = {
    "--tp",      "--pp",     "--layout", "--dtype",  "--device", "--io",   "--threads",
    "--staging", "--request", "--format", "--seed",   "--config", "--rules",  "--gpus", "--dist",
    "--devices-per-rank",    "--json",   "--checksums", "--numa", "--pjrt-plugin", "--ep",
    "--devices", "--pp-partition", CLI_REMOTE_OPTIONS, "--verify", "--manifest", "--read-gap", NULL};

/* Returns -1 after --help, else an exit code (CLI_EXIT_OK to go on). */
static int load_parse(int argc, char **argv, cli_opts *a)
{
    const int rc = cli_opts_parse(a, "load", argc, argv, load_allowed, 1, load_help);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (a->n_pos == 0 && !(a->lo.dummy && a->po.config_path))
        return cli_usage_error("load", "give a checkpoint PATH (or --format dummy with --config FILE)");
    return CLI_EXIT_OK;
}

/* ---- progress and memory ---------------------------------------------------------------------- */

static void load_progress(void *user, uint64_t done, uint64_t total)
{
    int *last = user;
    const int pct = total ? (int)(done * 100 / total) : 100;
    if (pct == *last)
        return;
    *last = pct;
    char bar[41];
    memset(bar, '#', (size_t)(pct * 40 / 100));
    memset(bar + pct * 40 / 100, '.', (size_t)(40 - pct * 40 / 100));
    bar[40] = '\0';
    fprintf(stderr, "\rloading [%s] %3d%%", bar, pct);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* ---- output ----------------------------------------------------------------------------------- */

/* d: the model's local device (the plan knows it by its mesh index). */
static int load_print_checksums(const sl_plan *p, const sl_model *m, int32_t d, int json)
{
    sl_param_info pi;
    const int32_t g = sl_model_device_index(m, d);
    for (int64_t i = 0; sl_plan_param(p, g, i, &pi) == SL_OK; i++) {
        uint64_t h = 0;
        if (sl_model_param_xxh3(m, d, i, &h) != SL_OK)
            return cli_fail("%s", sl_model_errmsg(m));
        if (json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_str(stdout, pi.name);
            printf(",\"xxh3\":\"%016" PRIx64 "\"}", h);
        } else {
            char nb[CLI_TEXT_NAME];
            printf("    %016" PRIx64 "  %s\n", h, cli_text(pi.name, nb, sizeof nb));
        }
    }
    return CLI_EXIT_OK;
}

/* How the staging reached the device (pjrt), and device free memory around the allocation: only
 * backends that report them (cuda, pjrt). */
static void load_print_mem(const sl_model *m, int32_t d, int json)
{
    uint64_t before = 0, after = 0;
    char b1[32], b2[32], b3[32];
    const int g = (int)sl_model_device_index(m, d);      /* the mesh index, as printed */
    const char *staging = sl_model_device_staging(m, d); /* pjrt: dma-mapped or plain */
    if (staging && json) {
        printf(",\"staging_memory\":");
        cli_json_str(stdout, staging);
    } else if (staging) {
        char sb[CLI_TEXT_NAME];
        printf("device %d: staging %s\n", g, cli_text(staging, sb, sizeof sb));
    }
    const char *routes = sl_model_device_routes(m, d);    /* pjrt: the ways bytes went */
    if (routes && json) {   /* cuda: where its conversions ran (opts.cuda_convert) */
        printf(sl_model_device_gpu(m, d) >= 0 ? ",\"cuda_convert\":" : ",\"pjrt_routes\":");
        cli_json_str(stdout, routes);
    } else if (routes) {
        char rb[256];
        printf("device %d: %s\n", g, cli_text(routes, rb, sizeof rb));
    }
    if (sl_model_device_mem(m, d, &before, &after) != SL_OK)
        return;
    /* -1: not a CUDA GPU (pjrt reports memory per PJRT device, which the model does not number) */
    const int gpu = (int)sl_model_device_gpu(m, d);
    if (json) {
        if (gpu >= 0)
            printf(",\"gpu\":%d", gpu);
        printf(",\"mem_free_before\":%" PRIu64 ",\"mem_free_after\":%" PRIu64, before, after);
        return;
    }
    char where[32] = "";
    if (gpu >= 0)
        snprintf(where, sizeof where, "GPU %d ", gpu);
    printf("device %d: %sfree memory %s -> %s bytes (%s used)\n", g, where,
           cli_commas(before, b1, sizeof b1), cli_commas(after, b2, sizeof b2),
           cli_commas(before >= after ? before - after : 0, b3, sizeof b3));
}

static double load_gbps(const sl_load_stats *s, uint64_t bytes)
{
    return s->seconds > 0 ? (double)bytes / s->seconds / 1e9 : 0.0;
}

static int load_print_json(const cli_opts *a, const sl_plan *p, const sl_model *m,
                           const sl_load_stats *s, uint64_t placed)
{
    const uint64_t moved = a->lo.dummy ? placed : s->bytes_read;
    const double after = s->seconds - s->setup_seconds;
    printf("{\"seconds\":%.6f,\"setup_seconds\":%.6f,\"bytes_read\":%" PRIu64 ",\"gbps\":%.3f,"
           "\"gbps_after_setup\":%.3f,\"peak_rss_bytes\":%" PRIu64 ",\"io\":\"%s\",\"engine\":\"%s\","
           "\"staging_peak\":%" PRIu64 ",",
           s->seconds, s->setup_seconds, s->bytes_read, load_gbps(s, moved),
           after > 0 ? (double)moved / after / 1e9 : 0.0, cli_peak_rss_bytes(), s->io, s->engine,
           s->staging_peak);
    printf("\"verified_files\":%" PRId64 ",\"verified_bytes\":%" PRIu64 ",", s->verified_files,
           s->verified_bytes);
    printf("\"read_requests\":%" PRIu64 ",\"read_depth_peak\":%u,", s->read_requests,
           s->read_depth_peak);
    printf("\"remote_retries\":%" PRIu64 ",\"remote_restarts\":%" PRIu64 ",", s->remote_retries,
           s->remote_restarts);
    printf("\"devices\":[");
    for (int32_t d = 0; d < sl_model_device_count(m); d++) {
        printf("%s{\"index\":%d,\"allocated_bytes\":%" PRIu64, d ? "," : "",
               (int)sl_model_device_index(m, d), sl_model_device_allocated(m, d));
        load_print_mem(m, d, 1);
        if (a->checksums) {
            printf(",\"params\":[");
            if (load_print_checksums(p, m, d, 1) != CLI_EXIT_OK)
                return CLI_EXIT_FAIL;
            printf("]");
        }
        printf("}");
    }
    printf("]}\n");
    return CLI_EXIT_OK;
}

static int load_print_text(const cli_opts *a, const sl_plan *p, const sl_model *m,
                           const sl_load_stats *s, uint64_t placed)
{
    char b1[32], b2[32];
    printf("Loading weights took %.3f s (device setup %.3f s)\n", s->seconds, s->setup_seconds);
    if (a->lo.dummy)
        printf("dummy weights: %s bytes placed (%.2f GB/s), seed %" PRIu64 "\n",
               cli_commas(placed, b1, sizeof b1), load_gbps(s, placed), a->lo.seed);
    else
        printf("read %s of %s checkpoint bytes at %.2f GB/s (io %s, engine %s)\n",
               cli_commas(s->bytes_read, b1, sizeof b1), cli_commas(s->checkpoint_bytes, b2, sizeof b2),
               load_gbps(s, s->bytes_read), s->io, s->engine);
    if (!a->lo.dummy && s->read_requests)
        printf("%s read requests, at most %u in flight\n",
               cli_commas(s->read_requests, b1, sizeof b1), s->read_depth_peak);
    if (s->remote_retries || s->remote_restarts)   /* a remote load's flaky ranges */
        printf("%s ranges retried, %s slow ones asked for again on a new connection\n",
               cli_commas(s->remote_retries, b1, sizeof b1), cli_commas(s->remote_restarts, b2, sizeof b2));
    printf("staging peak %s bytes; peak RSS %s bytes\n", cli_commas(s->staging_peak, b1, sizeof b1),
           cli_commas(cli_peak_rss_bytes(), b2, sizeof b2));
    if (a->lo.verify)
        printf("verified %" PRId64 " files (%s bytes checked)\n", s->verified_files,
               cli_commas(s->verified_bytes, b1, sizeof b1));
    for (int32_t d = 0; d < sl_model_device_count(m); d++) {
        const int32_t g = sl_model_device_index(m, d);   /* its mesh index */
        printf("device %d: %s bytes allocated (plan %s)\n", (int)g,
               cli_commas(sl_model_device_allocated(m, d), b1, sizeof b1),
               cli_commas(sl_plan_device_bytes(p, g), b2, sizeof b2));
        load_print_mem(m, d, 0);
        if (a->checksums && load_print_checksums(p, m, d, 0) != CLI_EXIT_OK)
            return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* ---- command ---------------------------------------------------------------------------------- */

static int load_open(const cli_opts *a, sl_checkpoint **ck, sl_plan **p)
{
    const char *path = a->n_pos ? a->pos[0] : NULL;
    sl_plan_opts po = a->po;
    char err[1024];
    if (path && cli_remote_open(path, &a->lo, ck) != SL_OK)
        return cli_fail("%s", *ck ? sl_checkpoint_errmsg(*ck) : "out of memory");
    if (path && cli_remote_config(*ck, &po, err, sizeof err) != SL_OK)
        return cli_fail("%s", err);
    cli_warnings(*ck);
    if (sl_plan_build(*ck, &po, p) != SL_OK)
        return cli_fail("%s", cli_plan_errmsg(*p, err, sizeof err));
    return CLI_EXIT_OK;
}

int cli_load(int argc, char **argv)
{
    cli_opts a = {0};
    int rc = load_parse(argc, argv, &a);
    if (rc != CLI_EXIT_OK)
        return rc < 0 ? CLI_EXIT_OK : rc;
    char pb[CLI_PATH_MAX];
    if (a.n_pos && (rc = cli_ckpt_path(a.pos[0], pb, sizeof pb, &a.pos[0])) != CLI_EXIT_OK)
        return rc;
    if (cli_dist_wanted(&a, &rc)) {
        if (rc != CLI_EXIT_OK)
            return rc;
        cli_sig sig;
        cli_sig_init(&sig, "load");
        cli_sig_opts(&sig, &a);
        cli_sig_add(&sig, "--checksums", "%s", a.checksums ? "on" : "off");
        cli_sig_add(&sig, "--json", "%s", a.json ? "on" : "off");
        return cli_load_dist(&sig, a.n_pos ? a.pos[0] : NULL, &a.po, &a.lo, &a.dist, a.checksums, a.json);
    }
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_model *m = NULL;
    int last_pct = -1;
    if (isatty(STDERR_FILENO)) {
        a.lo.progress = load_progress;
        a.lo.progress_user = &last_pct;
    }
    rc = load_open(&a, &ck, &p);
    if (rc == CLI_EXIT_OK && sl_load(a.lo.dummy ? NULL : ck, p, &a.lo, &m) != SL_OK)
        rc = cli_fail("%s", m ? sl_model_errmsg(m) : "out of memory");
    if (rc == CLI_EXIT_OK) {
        sl_load_stats s;
        sl_model_stats(m, &s);
        const uint64_t placed = sl_plan_total_bytes(p);
        rc = a.json ? load_print_json(&a, p, m, &s, placed) : load_print_text(&a, p, m, &s, placed);
    }
    sl_model_free(m);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    return rc;
}
