/* cli_dist.c - `shardload load` and `shardload reshard` under mpirun (--dist, or started by an
 * MPI launcher): every rank opens the checkpoint and plans it. `load` loads its own devices with
 * sl_load_dist and rank 0 prints one report for the job: each rank renders its own devices (and
 * checksums) into a string, and rank 0 gathers them, so the report covers every device of the
 * job. `reshard` writes its own devices' files with sl_reshard_dist. A failure anywhere ends every
 * rank with exit 1; rank 0 prints the failing rank's message as the one error line. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Propagates a failing status (the message is on the model handle). */
#define DIST_TRY(expr)                  \
    do {                                \
        sl_status dist_try_st_ = (expr); \
        if (dist_try_st_ != SL_OK)       \
            return dist_try_st_;         \
    } while (0)

int cli_dist_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int cli_dist_wanted(const cli_opts *a, int *rc)
{
    *rc = CLI_EXIT_OK;
    if (!a->dist_set && !(cli_dist_launched() && sl_dist_available()))
        return 0;
    if (a->po.config_json)   /* after parsing, only --config - has set it */
        *rc = cli_usage_error(a->cmd, "--config - is for one process (under MPI only rank 0 reads "
                              "stdin): give a FILE");
    else if (a->lo.devices)
        *rc = cli_usage_error(a->cmd, "--devices is for one process; under MPI each rank holds "
                              "--devices-per-rank mesh devices");
    return 1;
}

/* ---- per-rank fragments ----------------------------------------------------------------------- */

static sl_status dist_checksums(FILE *f, const sl_plan *p, const sl_model *m, int32_t d, int json)
{
    sl_param_info pi;
    const int32_t g = sl_model_device_index(m, d);
    for (int64_t i = 0; sl_plan_param(p, g, i, &pi) == SL_OK; i++) {
        uint64_t h = 0;
        DIST_TRY(sl_model_param_xxh3(m, d, i, &h));
        if (json) {
            fprintf(f, "%s{\"name\":", i ? "," : "");
            cli_json_str(f, pi.name);
            fprintf(f, ",\"xxh3\":\"%016" PRIx64 "\"}", h);
        } else {
            char nb[CLI_TEXT_NAME];
            fprintf(f, "    %016" PRIx64 "  %s\n", h, cli_text(pi.name, nb, sizeof nb));
        }
    }
    return SL_OK;
}

/* This rank's devices: JSON objects (each but the job's first led by a comma) or text lines. */
static sl_status dist_devices(FILE *f, const sl_plan *p, const sl_model *m, int checksums, int json)
{
    char b1[32], b2[32];
    for (int32_t d = 0; d < sl_model_device_count(m); d++) {
        const int32_t g = sl_model_device_index(m, d);
        if (json)
            fprintf(f, "%s{\"index\":%d,\"allocated_bytes\":%" PRIu64, g ? "," : "", (int)g,
                    sl_model_device_allocated(m, d));
        else
            fprintf(f, "device %d: %s bytes allocated (plan %s)\n", (int)g,
                    cli_commas(sl_model_device_allocated(m, d), b1, sizeof b1),
                    cli_commas(sl_plan_device_bytes(p, g), b2, sizeof b2));
        if (checksums && json)
            fputs(",\"params\":[", f);
        if (checksums)
            DIST_TRY(dist_checksums(f, p, m, d, json));
        if (json)
            fputs(checksums ? "]}" : "}", f);
    }
    return SL_OK;
}

/* Renders this rank's devices into *buf (NULL on failure, then msg says why). Local: no MPI. */
static sl_status dist_render(const sl_plan *p, const sl_model *m, int checksums, int json,
                             char **buf, char *msg, size_t msglen)
{
    size_t len = 0;
    FILE *f = open_memstream(buf, &len);
    sl_status st = f ? dist_devices(f, p, m, checksums, json) : SL_E_NOMEM;
    const char *why = st != SL_OK && f ? sl_model_errmsg(m) : "out of memory rendering the report";
    /* open_memstream reports running out of memory when the stream is closed */
    if (f && fclose(f) != 0 && st == SL_OK)
        st = SL_E_NOMEM;
    if (st != SL_OK) {
        snprintf(msg, msglen, "rank %d: %s", (int)sl_dist_rank(), why);
        free(*buf);
        *buf = NULL;
    }
    return st;
}

/* ---- job report (rank 0) ---------------------------------------------------------------------- */

typedef struct dist_totals {
    uint64_t read, sent, received, staging_max, requests, rss_max, retries, restarts;
    uint32_t depth_max;
    double setup_max;
} dist_totals;

static dist_totals dist_sum(const sl_model *m, const uint64_t *rss)
{
    dist_totals t = {0};
    sl_rank_stats r;
    for (int32_t i = 0; sl_model_rank_stats(m, i, &r) == SL_OK; i++) {
        t.rss_max = rss[i] > t.rss_max ? rss[i] : t.rss_max;
        t.setup_max = r.setup_seconds > t.setup_max ? r.setup_seconds : t.setup_max;
        t.read += r.bytes_read;
        t.sent += r.bytes_sent;
        t.received += r.bytes_received;
        t.staging_max = r.staging_peak > t.staging_max ? r.staging_peak : t.staging_max;
        t.requests += r.read_requests;
        t.depth_max = r.read_depth_peak > t.depth_max ? r.read_depth_peak : t.depth_max;
        t.retries += r.remote_retries;
        t.restarts += r.remote_restarts;
    }
    return t;
}

static double dist_ratio(uint64_t a, uint64_t b)
{
    return b && b != UINT64_MAX ? (double)a / (double)b : 0.0;
}

static const char *dist_name(const sl_dist_opts *d)
{
    return d->strategy == SL_DIST_INDEPENDENT ? "independent" : "cooperative";
}

/* The single-process JSON's figures for the job (setup_seconds and peak_rss_bytes: the largest
 * rank's; gbps_after_setup over the slowest rank's time less the slowest set-up), then the
 * job's own. */
static void dist_print_json(const sl_plan *p, const sl_model *m, const sl_dist_opts *d,
                            const char *devices, const uint64_t *rss)
{
    sl_load_stats s;
    sl_model_stats(m, &s);
    const dist_totals t = dist_sum(m, rss);
    const double after = s.seconds - t.setup_max;
    printf("{\"seconds\":%.6f,\"setup_seconds\":%.6f,\"bytes_read\":%" PRIu64 ",\"gbps\":%.3f,"
           "\"gbps_after_setup\":%.3f,\"peak_rss_bytes\":%" PRIu64, s.seconds, t.setup_max, t.read,
           s.seconds > 0 ? (double)t.read / s.seconds / 1e9 : 0.0,
           after > 0 ? (double)t.read / after / 1e9 : 0.0, t.rss_max);
    printf(",\"io\":\"%s\",\"engine\":"
           "\"%s\",\"staging_peak\":%" PRIu64 ",\"dist\":\"%s\",\"read_bytes_needed\":%" PRIu64
           ",\"read_amplification\":%.4f,\"bytes_exchanged\":%" PRIu64 ",\"verified_files\":%"
           PRId64 ",\"verified_bytes\":%" PRIu64 ",\"read_requests\":%" PRIu64
           ",\"read_depth_peak\":%u,\"remote_retries\":%" PRIu64 ",\"remote_restarts\":%" PRIu64
           ",\"devices\":[%s],\"ranks\":[",
           s.io, s.engine, t.staging_max, dist_name(d), sl_plan_read_bytes(p),
           dist_ratio(t.read, sl_plan_read_bytes(p)), t.sent, s.verified_files, s.verified_bytes,
           t.requests, t.depth_max, t.retries, t.restarts, devices);
    sl_rank_stats r;
    for (int32_t i = 0; sl_model_rank_stats(m, i, &r) == SL_OK; i++) {
        printf("%s{\"rank\":%d,\"devices\":[", i ? "," : "", (int)r.rank);
        for (int32_t k = 0; k < r.devices; k++)
            printf("%s%d", k ? "," : "", (int)(r.first_device + k));
        printf("],\"bytes_read\":%" PRIu64 ",\"bytes_sent\":%" PRIu64 ",\"bytes_received\":%" PRIu64
               ",\"staging_peak\":%" PRIu64 ",\"seconds\":%.6f,\"read_requests\":%" PRIu64
               ",\"read_depth_peak\":%u,\"setup_seconds\":%.6f,\"peak_rss_bytes\":%" PRIu64
               ",\"remote_retries\":%" PRIu64 ",\"remote_restarts\":%" PRIu64 "}",
               r.bytes_read, r.bytes_sent, r.bytes_received, r.staging_peak, r.seconds,
               r.read_requests, r.read_depth_peak, r.setup_seconds, rss[i], r.remote_retries,
               r.remote_restarts);
    }
    printf("]}\n");
}

static void dist_print_text(const sl_plan *p, const sl_model *m, const sl_dist_opts *d,
                            const char *devices, const uint64_t *rss)
{
    char b1[32], b2[32], b3[32], b4[32];
    sl_load_stats s;
    sl_model_stats(m, &s);
    const dist_totals t = dist_sum(m, rss);
    printf("Loading weights took %.3f s\n", s.seconds);
    printf("%d ranks (dist %s): read %s bytes at %.2f GB/s, read amplification %.3f; "
           "%s bytes exchanged\n",
           (int)sl_model_rank_count(m), dist_name(d), cli_commas(t.read, b1, sizeof b1),
           s.seconds > 0 ? (double)t.read / s.seconds / 1e9 : 0.0,
           dist_ratio(t.read, sl_plan_read_bytes(p)), cli_commas(t.sent, b2, sizeof b2));
    sl_rank_stats r;
    for (int32_t i = 0; sl_model_rank_stats(m, i, &r) == SL_OK; i++)
        printf("rank %d: devices %d-%d, read %s, sent %s, received %s bytes; %s read requests, "
               "at most %u in flight\n", (int)r.rank, (int)r.first_device,
               (int)(r.first_device + r.devices - 1), cli_commas(r.bytes_read, b1, sizeof b1),
               cli_commas(r.bytes_sent, b2, sizeof b2), cli_commas(r.bytes_received, b3, sizeof b3),
               cli_commas(r.read_requests, b4, sizeof b4), r.read_depth_peak);
    printf("staging peak per rank %s bytes; peak RSS per rank at most %s bytes (io %s, engine %s)\n",
           cli_commas(t.staging_max, b1, sizeof b1), cli_commas(t.rss_max, b2, sizeof b2), s.io,
           s.engine);
    if (s.verified_files > 0)   /* --verify; independent: rank 0's, cooperative: the job's */
        printf("verified %" PRId64 " files (%s bytes checked)\n", s.verified_files,
               cli_commas(s.verified_bytes, b1, sizeof b1));
    fputs(devices, stdout);
}

/* ---- command ---------------------------------------------------------------------------------- */

/* Opens and plans on this rank; on failure msg holds the message. A dummy load of a checkpoint
 * path plans from its tensors, as one process does (it reads none of their bytes). */
static sl_status dist_open(const char *path, const sl_plan_opts *po_in, const sl_load_opts *lo,
                           sl_checkpoint **ck, sl_plan **p, char *msg, size_t len)
{
    sl_status st = SL_OK;
    sl_plan_opts opts = *po_in;
    const sl_plan_opts *po = &opts;
    char err[1024];
    if (path && (st = cli_remote_open(path, lo, ck)) != SL_OK) {
        snprintf(msg, len, "rank %d: %s", (int)sl_dist_rank(),
                 *ck ? sl_checkpoint_errmsg(*ck) : "out of memory");
        return st;
    }
    if (path && (st = cli_remote_config(*ck, &opts, err, sizeof err)) != SL_OK) {
        snprintf(msg, len, "rank %d: %.900s", (int)sl_dist_rank(), err);
        return st;
    }
    if (sl_dist_rank() == 0)
        cli_warnings(*ck);   /* every rank opened the same files: say it once */
    if ((st = sl_plan_build(*ck, po, p)) != SL_OK)
        snprintf(msg, len, "rank %d: %s", (int)sl_dist_rank(), cli_plan_errmsg(*p, err, sizeof err));
    return st;
}

/* Prints rank 0's line for a failure agreed on by every rank; returns the exit code. */
static int dist_exit(sl_status st, const char *msg)
{
    if (st == SL_OK)
        return CLI_EXIT_OK;
    return sl_dist_rank() == 0 ? cli_fail("%s", msg) : CLI_EXIT_FAIL;
}

/* Each rank's peak RSS into rank 0's (*out)[r], n ranks (0 where a figure did not parse); every
 * rank calls it, as it gathers text. Other ranks get *out NULL. */
static sl_status dist_gather_rss(int32_t n, uint64_t **out)
{
    char mine[32], *all = NULL;
    snprintf(mine, sizeof mine, "%" PRIu64 " ", cli_peak_rss_bytes());
    *out = NULL;
    sl_status st = sl_dist_gather_text(mine, &all);
    if (st == SL_OK && sl_dist_rank() == 0 && !(*out = calloc((size_t)n, sizeof **out)))
        st = SL_E_NOMEM;
    const char *at = all;
    for (int32_t r = 0; st == SL_OK && *out && r < n; r++) {
        char *end = NULL;
        const unsigned long long v = strtoull(at, &end, 10);
        if (end == at)
            break;
        (*out)[r] = v;
        at = end;
    }
    free(all);
    return st;
}

/* Every rank makes the same collective calls in the same order whatever fails on it: render
 * (local), gather (always, with "" after a local failure), agree (always). Returning early or
 * skipping the gather after a local failure (out of memory rendering, a checksum read failing)
 * would pair this rank's agreement with the others' gather, and the job would hang or abort. */
static int dist_report(const sl_plan *p, const sl_model *m, const sl_dist_opts *d, int checksums,
                       int json)
{
    char *mine = NULL, *devices = NULL, msg[1024] = "";
    uint64_t *rss = NULL;
    const sl_status rs = dist_gather_rss(sl_model_rank_count(m), &rss); /* before the report's buffers */
    sl_status st = dist_render(p, m, checksums, json, &mine, msg, sizeof msg);
    const sl_status gs = sl_dist_gather_text(mine ? mine : "", &devices); /* same on all ranks */
    free(mine);
    if (st == SL_OK && (gs != SL_OK || rs != SL_OK)) {
        st = gs != SL_OK ? gs : rs;
        snprintf(msg, sizeof msg, "rank 0: out of memory gathering the report");
    }
    st = sl_dist_agree(st, msg, msg, sizeof msg);
    int rc = dist_exit(st, msg);
    if (st == SL_OK && sl_dist_rank() == 0 && json)
        dist_print_json(p, m, d, devices, rss);
    else if (st == SL_OK && sl_dist_rank() == 0)
        dist_print_text(p, m, d, devices, rss);
    free(devices);
    free(rss);
    return rc;
}

/* MPI, and the ranks' commands compared before anything is opened (cli_job.c): the job's first
 * collective. Returns an exit code; MPI is finalized when it is not CLI_EXIT_OK. */
static int dist_join(const cli_sig *sig)
{
    if (sl_dist_init() != SL_OK)
        return cli_fail("--dist needs MPI, and this shardload was built without it (SL_WITH_MPI)");
    const int rc = cli_job_agree(sig);
    if (rc != CLI_EXIT_OK)
        sl_dist_finalize();
    return rc;
}

int cli_load_dist(const cli_sig *sig, const char *path, const sl_plan_opts *po, const sl_load_opts *lo,
                  const sl_dist_opts *d, int checksums, int json)
{
    char msg[1024] = "";
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_model *m = NULL;
    const int joined = dist_join(sig);   /* the sig holds --checksums and --json: each rank renders
                                           its own devices into rank 0's report */
    if (joined != CLI_EXIT_OK)
        return joined;
    sl_status st = dist_open(path, po, lo, &ck, &p, msg, sizeof msg);
    st = sl_dist_agree(st, msg, msg, sizeof msg);
    if (st == SL_OK && (st = sl_load_dist(lo->dummy ? NULL : ck, p, lo, d, &m)) != SL_OK)
        snprintf(msg, sizeof msg, "%s", m ? sl_model_errmsg(m) : "out of memory");
    const int rc = st != SL_OK ? dist_exit(st, msg) : dist_report(p, m, d, checksums, json);
    sl_model_free(m);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    sl_dist_finalize();
    return rc;
}

int cli_reshard_dist(const cli_sig *job, const char *path, const char *outdir, const sl_plan_opts *po,
                     const sl_load_opts *lo, const sl_dist_opts *d, uint64_t max_part)
{
    char msg[1024] = "";
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    const int joined = dist_join(job);
    if (joined != CLI_EXIT_OK)
        return joined;
    sl_status st = dist_open(path, po, lo, &ck, &p, msg, sizeof msg);
    st = sl_dist_agree(st, msg, msg, sizeof msg);
    cli_signals_catch();   /* mpirun passes SIGINT/SIGTERM on to the ranks: each cleans up */
    if (st == SL_OK) /* agreed inside: the same status on every rank */
        st = sl_reshard_dist(ck, p, lo, d, outdir, max_part, msg, sizeof msg);
    const int rank = sl_dist_rank(), sig = cli_signals_caught();
    const int rc = sig ? CLI_EXIT_FAIL : dist_exit(st, msg);
    if (st == SL_OK && !sig && rank == 0) {
        printf("wrote %d devices' shards (%llu bytes) to ", sl_plan_device_count(p),
               (unsigned long long)sl_plan_total_bytes(p));
        cli_put_text(stdout, outdir);
        printf(" from %d ranks\n", (int)sl_dist_size());
    }
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    sl_dist_finalize();
    /* A signalled rank ends by its signal once its files are gone; rank 0 says so, once. */
    return sig ? cli_signals_exit(rank == 0 ? "reshard" : NULL, outdir) : rc;
}
