/* cli_opts.c - the options `load` and `reshard` share (mesh, dtype, I/O, staging, MPI, ...): one
 * parser, so both commands accept and check each option the same way. */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int opts_int(const cli_opts *o, const char *name, const char *v, int64_t lo, int64_t hi,
                    int64_t *out)
{
    if (cli_parse_int(v, lo, hi, out) != 0)
        return cli_usage_error(o->cmd, "%s needs an integer in [%" PRId64 ", %" PRId64 "]", name, lo, hi);
    return CLI_EXIT_OK;
}

/* "0,1,1,0": a comma-separated list of integers in [0, hi], at most cap of them, into out. */
static int opts_list(const cli_opts *o, const char *opt, const char *what, const char *v,
                     int64_t hi, int32_t *out, size_t cap, int32_t *n_out)
{
    char item[16];
    size_t n_items = 0;
    for (const char *p = v;; p++) {
        const size_t n = strcspn(p, ",");
        int64_t x = 0;
        if (n == 0 || n >= sizeof item || n_items == cap)
            return cli_usage_error(o->cmd, "%s needs a comma-separated list of %s numbers "
                                   "(at most %zu)", opt, what, cap);
        memcpy(item, p, n);
        item[n] = '\0';
        if (cli_parse_int(item, 0, hi, &x) != 0)
            return cli_usage_error(o->cmd, "%s: bad %s number '%s'", opt, what, item);
        out[n_items++] = (int32_t)x;
        p += n;
        if (!*p)
            break;
    }
    *n_out = (int32_t)n_items;
    return CLI_EXIT_OK;
}

/* --gpus: the GPU of each mesh device, in mesh order. */
static int opts_gpus(cli_opts *o, const char *v)
{
    o->lo.gpus = o->gpus;
    return opts_list(o, "--gpus", "GPU", v, 65535, o->gpus, sizeof o->gpus / sizeof o->gpus[0],
                     &o->lo.n_gpus);
}

/* --devices: the mesh devices this process loads (an engine rank's: --devices 3); the library
 * checks them against the plan. */
static int opts_devices(cli_opts *o, const char *v)
{
    o->lo.devices = o->devices;
    return opts_list(o, "--devices", "mesh device", v, 65535, o->devices,
                     sizeof o->devices / sizeof o->devices[0], &o->lo.n_devices);
}

/* --staging and --request, one rule: a plain number is MiB, whatever its size; a number with a
 * unit is that size (4096B, 64K, 256M, 1G, 2GiB, 500MB: cli_parse_size). Either way the result lies
 * in [min, 1 TiB]: 4 KiB for --request, the library's SL_STAGING_MIN (16 KiB) for --staging, so
 * that a budget the load would refuse is a usage error here. (A plain number above 1,048,576 was
 * once taken as bytes.) */
#define OPTS_MIB_MAX (1ull << 40)

static int opts_mib(const cli_opts *o, const char *opt, const char *v, uint64_t min, uint64_t *out)
{
    const int plain = v[0] != '\0' && v[strspn(v, "0123456789")] == '\0';
    int64_t mib = 0;
    uint64_t bytes = 0;   /* 0: not valid */
    if (plain && cli_parse_int(v, 0, (int64_t)(OPTS_MIB_MAX >> 20), &mib) == 0)
        bytes = (uint64_t)mib << 20;
    else if (!plain && cli_parse_size(v, &bytes) != 0)
        bytes = 0;
    if (bytes >= min && bytes <= OPTS_MIB_MAX) {
        *out = bytes;
        return CLI_EXIT_OK;
    }
    return cli_usage_error(o->cmd, "%s '%s': give MiB as a plain number (64) or a size with a unit "
                           "(256M, 1G, %lluK), from %llu KiB to 1 TiB", opt, v,
                           (unsigned long long)(min >> 10), (unsigned long long)(min >> 10));
}

static int opts_enum(cli_opts *o, const char *opt, const char *v)
{
    sl_dtype dt;
    if (!strcmp(opt, "--dtype") && cli_parse_dtype(v, &dt) == 0)
        o->po.dtype = (int32_t)dt;
    else if (!strcmp(opt, "--layout") && (!strcmp(v, "tp") || !strcmp(v, "spmd")))
        o->po.layout = !strcmp(v, "tp") ? SL_LAYOUT_TP : SL_LAYOUT_SPMD;
    else if (!strcmp(opt, "--device") &&
             (!strcmp(v, "cpu") || !strcmp(v, "cuda") || !strcmp(v, "pjrt")))
        o->lo.device = v;
    else if (!strcmp(opt, "--io") && !strcmp(v, "auto"))
        o->lo.io = SL_IO_AUTO;
    else if (!strcmp(opt, "--io") && !strcmp(v, "direct"))
        o->lo.io = SL_IO_DIRECT;
    else if (!strcmp(opt, "--io") && !strcmp(v, "buffered"))
        o->lo.io = SL_IO_BUFFERED;
    else if (!strcmp(opt, "--format") && (!strcmp(v, "auto") || !strcmp(v, "dummy")))
        o->lo.dummy = !strcmp(v, "dummy");
    else if (!strcmp(opt, "--dist") && (!strcmp(v, "independent") || !strcmp(v, "cooperative")))
        o->dist.strategy = !strcmp(v, "independent") ? SL_DIST_INDEPENDENT : SL_DIST_COOPERATIVE;
    else
        return cli_usage_error(o->cmd, "bad value '%s' for %s", v, opt);
    o->dist_set |= !strcmp(opt, "--dist");
    return CLI_EXIT_OK;
}

/* --read-gap none|SIZE: a size needs its unit (64K, 4096B), since a gap is not MiB. */
static int opts_read_gap(cli_opts *o, const char *v)
{
    uint64_t bytes = 0;
    const int plain = v[0] != '\0' && v[strspn(v, "0123456789")] == '\0';
    if (!strcmp(v, "none")) {
        o->lo.read_gap = SL_READ_GAP_NONE;
        return CLI_EXIT_OK;
    }
    if (!plain && cli_parse_size(v, &bytes) == 0 && bytes >= 1 && bytes <= (uint64_t)SL_READ_GAP_MAX) {
        o->lo.read_gap = (int64_t)bytes;
        return CLI_EXIT_OK;
    }
    return cli_usage_error(o->cmd, "--read-gap '%s': give none (read only the bytes the devices "
                           "need) or a size with a unit from 1B to 1MiB (64K, 4096B)", v);
}

static int opts_value(cli_opts *o, const char *opt, const char *v)
{
    int64_t x = 0;
    int rc = CLI_EXIT_OK;
    if (v == NULL)
        return cli_usage_error(o->cmd, "%s needs a value", opt);
    if (!strcmp(opt, "--tp") || !strcmp(opt, "--pp")) {
        rc = opts_int(o, opt, v, 1, 65536, &x);
        *(!strcmp(opt, "--tp") ? &o->po.tp : &o->po.pp) = (int32_t)x;
    } else if (!strcmp(opt, "--pp-partition")) {
        rc = cli_pp_partition_arg(o->cmd, v, &o->po);
    } else if (!strcmp(opt, "--threads")) {
        rc = opts_int(o, opt, v, 1, 256, &x);
        o->lo.threads = (int32_t)x;
    } else if (!strcmp(opt, "--seed")) {
        rc = opts_int(o, opt, v, 0, INT64_MAX, &x);
        o->lo.seed = (uint64_t)x;
    } else if (!strcmp(opt, "--devices-per-rank")) {
        rc = opts_int(o, opt, v, 1, 65536, &x);
        o->dist.devices_per_rank = (int32_t)x;
        o->dist_set = 1;
    } else if (!strcmp(opt, "--staging")) {
        rc = opts_mib(o, opt, v, SL_STAGING_MIN, &o->lo.staging_bytes);
    } else if (!strcmp(opt, "--request")) {
        rc = opts_mib(o, opt, v, 4096, &o->lo.request_bytes);
    } else if (!strcmp(opt, "--read-gap")) {
        rc = opts_read_gap(o, v);
    } else if (!strcmp(opt, "--max-part-size")) {
        if (cli_parse_size(v, &o->max_part) != 0 || o->max_part == 0)
            rc = cli_usage_error(o->cmd, "--max-part-size needs a size, e.g. 5GB or 512MiB");
    } else if (!strcmp(opt, "--gpus")) {
        rc = opts_gpus(o, v);
    } else if (!strcmp(opt, "--devices")) {
        rc = opts_devices(o, v);
    } else if (!strcmp(opt, "--pjrt-plugin")) {
        o->lo.pjrt_plugin = v;
        /* XLA's plugins log INFO lines to stderr (absl) unless told not to, and stderr is the one
         * line of an error; a value the user set wins. */
        setenv("TF_CPP_MIN_LOG_LEVEL", "1", 0);
    } else if (!strcmp(opt, "--config")) {
        rc = cli_config_arg(o->cmd, v, &o->po);
    } else if (!strcmp(opt, "--rules")) {
        o->po.rules_path = v;
    } else if (!strcmp(opt, "--manifest")) {
        o->lo.manifest_path = v;
        o->lo.verify = 1;
    } else if (cli_remote_value(o->cmd, &o->lo, opt, v, &rc)) {
    } else {
        rc = opts_enum(o, opt, v);
    }
    return rc;
}

static int opts_flag(cli_opts *o, const char *s)
{
    if (!strcmp(s, "--json"))
        o->json = 1;
    else if (!strcmp(s, "--checksums"))
        o->checksums = 1;
    else if (!strcmp(s, "--numa"))
        o->lo.numa = 1;
    else if (!strcmp(s, "--ep"))
        o->po.ep = 1;
    else if (!strcmp(s, "--verify"))
        o->lo.verify = 1;
    else if (!strcmp(s, "--write-manifest"))
        o->write_manifest = 1;
    else
        return cli_remote_flag(&o->lo, s);
    return 1;
}

/* The options of one device kind given for another are a usage error, not ignored (a
 * --pjrt-plugin without --device pjrt loaded on the cpu), as is checking files a dummy load
 * does not read. */
static int opts_device_only(const cli_opts *o)
{
    const char *dev = o->lo.device ? o->lo.device : "cpu";
    if (o->lo.pjrt_plugin && strcmp(dev, "pjrt") != 0)
        return cli_usage_error(o->cmd, "--pjrt-plugin goes with --device pjrt (the device is %s)", dev);
    if (o->lo.n_gpus > 0 && strcmp(dev, "cuda") != 0)
        return cli_usage_error(o->cmd, "--gpus goes with --device cuda (the device is %s)", dev);
    if (o->lo.numa && strcmp(dev, "cpu") != 0)
        return cli_usage_error(o->cmd, "--numa goes with --device cpu (the device is %s)", dev);
    if (o->lo.verify && o->lo.dummy)
        return cli_usage_error(o->cmd, "--verify and --manifest check checkpoint files; --format dummy reads none");
    return CLI_EXIT_OK;
}

/* A number of bytes from environment variable name into *out (unset or empty: 0, the default). */
static int env_bytes(const cli_opts *o, const char *name, uint64_t *out)
{
    const char *v = getenv(name);
    int64_t n = 0;
    if (v && *v && cli_parse_int(v, 0, INT64_MAX, &n) != 0)
        return cli_usage_error(o->cmd, "%s '%s': give a number of bytes (0: the default)", name, v);
    *out = (uint64_t)n;
    return CLI_EXIT_OK;
}

/* Engine knobs for benchmarks and tests, from the environment (load --help). A value the library
 * would refuse is a usage error here, as a bad option is (the engine names: sl_io_open's). */
static int opts_env(cli_opts *o)
{
    static const char *const engines[] = {"pread", "uring", "io_uring", "uring-inline", NULL};
    static const char *const maps[] = {"0", "1", NULL};
    static const char *const convs[] = {"gpu", "host", NULL};
    const char *engine = getenv("SL_IO_ENGINE");
    if (engine && *engine && !cli_listed(engine, engines))
        return cli_usage_error(o->cmd, "SL_IO_ENGINE '%s': give pread, uring or uring-inline "
                               "(unset: io_uring where it works, else pread)", engine);
    o->lo.io_engine = engine;
    if (env_bytes(o, "SL_GATHER_ROWS", &o->lo.gather_rows) != CLI_EXIT_OK ||
        env_bytes(o, "SL_PJRT_ASSEMBLY", &o->lo.pjrt_assembly) != CLI_EXIT_OK)
        return CLI_EXIT_USAGE;
    const char *map = getenv("SL_PJRT_DMA_MAP");
    if (map && *map && !cli_listed(map, maps))
        return cli_usage_error(o->cmd, "SL_PJRT_DMA_MAP '%s': give 0 (never map the staging) or 1 (the default)", map);
    o->lo.pjrt_dma_map = map && strcmp(map, "0") == 0 ? -1 : 0;
    const char *conv = getenv("SL_CUDA_CONVERT");
    if (conv && *conv && !cli_listed(conv, convs))
        return cli_usage_error(o->cmd, "SL_CUDA_CONVERT '%s': give gpu or host (the default)", conv);
    o->lo.cuda_convert = conv && strcmp(conv, "gpu") == 0;
    return CLI_EXIT_OK;
}

int cli_opts_parse(cli_opts *o, const char *cmd, int argc, char **argv, const char *const *allowed,
                   int max_pos, void (*help)(FILE *out))
{
    o->cmd = cmd;
    sl_plan_opts_init(&o->po);
    sl_load_opts_init(&o->lo);
    int rc = opts_env(o);
    if (rc != CLI_EXIT_OK)
        return rc;
    sl_dist_opts_init(&o->dist);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        rc = CLI_EXIT_OK;
        if (!strcmp(s, "--help") || !strcmp(s, "-h"))
            return help(stdout), -1;
        if (s[0] == '-' && s[1]) {
            if (!cli_listed(s, allowed))
                rc = cli_usage_error(cmd, "unknown option '%s'", s);
            else if (!opts_flag(o, s))
                rc = opts_value(o, s, i + 1 < argc ? argv[++i] : NULL);
        } else if (o->n_pos == max_pos)
            rc = cli_usage_error(cmd, "unexpected argument '%s'", s);
        else
            o->pos[o->n_pos++] = s;
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    if (o->po.layout == SL_LAYOUT_SPMD && o->po.pp != 1)
        return cli_usage_error(cmd, "--pp applies to layout tp only");
    if ((rc = cli_pp_partition_finish(cmd, &o->po)) != CLI_EXIT_OK)
        return rc;
    return opts_device_only(o);
}
