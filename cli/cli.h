/* cli.h - shared pieces of the shardload command-line tool. The CLI sees only the public header;
 * it owns exit codes and everything printed. */
#ifndef SL_CLI_H
#define SL_CLI_H

#include "shardload.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* Text from files and paths on a terminal: control bytes as \xNN, so that a name can neither end
 * the line nor send escape sequences. cli_text writes a copy into buf (len bytes; cut with "..."
 * when it does not fit, CLI_TEXT_NAME holds about 120 bytes of name); cli_put_text writes all of s. */
#define CLI_TEXT_NAME 160
const char *cli_text(const char *s, char *buf, size_t len);
void cli_put_text(FILE *f, const char *s);
/* prefix, s with control bytes escaped, suffix, on stderr in one write (one line under mpirun). */
void cli_put_line(const char *prefix, const char *s, const char *suffix);
/* fmt formatted whole, malloc'd (the caller frees it); NULL when out of memory. ap is used up. */
char *cli_vformat(const char *fmt, va_list ap) CLI_PRINTF(1, 0);

/* Prints "shardload: error: <msg>" on stderr (control bytes escaped) and returns CLI_EXIT_FAIL. */
int cli_fail(const char *fmt, ...) CLI_PRINTF(1, 2);
/* SIGINT and SIGTERM during a command that writes files (cli_signal.c): cli_signals_catch makes
 * them call sl_cancel (unless ignored at start); after the library call returns, a command for
 * which cli_signals_caught() is nonzero calls cli_signals_exit, which prints one line ("<cmd>
 * interrupted by SIGINT: <outdir>: ...", none when cmd is NULL: an MPI rank other than 0) and
 * ends the process by that signal. */
void cli_signals_catch(void);
int cli_signals_caught(void);
int cli_signals_exit(const char *cmd, const char *outdir);
/* Prints the checkpoint's warnings on stderr, "shardload: warning: ..." one line each. */
void cli_warnings(const sl_checkpoint *ck);
/* Prints "shardload <cmd>: <msg>" and a hint to --help on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Parses "123", "64K", "16M", "5G", "5GB", "2GiB" (powers of 1000 for KB/MB/GB, 1024 for K/M/G,
 * KiB/MiB/GiB). Returns 0 on success. */
int cli_parse_size(const char *s, uint64_t *out);
/* 1 when s is one of the NULL-terminated list's strings. */
int cli_listed(const char *s, const char *const *list);
/* Parses a non-negative decimal integer in [lo, hi]. Returns 0 on success. */
int cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Parses bf16|f16|f32 (any case, also bfloat16/float16/float32) into an sl_dtype. */
int cli_parse_dtype(const char *s, sl_dtype *out);
/* Writes s to f as a JSON string literal (quotes, \" \\ and control characters escaped). */
void cli_json_str(FILE *f, const char *s);
/* "1,234,567" into buf. */
const char *cli_commas(uint64_t v, char *buf, size_t len);
/* This process's peak resident set, in bytes (0 when unknown). */
uint64_t cli_peak_rss_bytes(void);

/* 1 when started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK). */
int cli_dist_launched(void);

/* An MPI job's first collective (cli_job.c, docs/mpi.md): a signature of what each rank runs. */
#define CLI_SIG_BYTES 2048
typedef struct cli_sig {
    char text[CLI_SIG_BYTES];   /* "name=value\n" lines, the command first */
    size_t len;
} cli_sig;
void cli_sig_init(cli_sig *s, const char *command);
void cli_sig_add(cli_sig *s, const char *name, const char *fmt, ...) CLI_PRINTF(3, 4);
/* main: under an MPI launcher (in a build with MPI), joins the job before any command runs, so
 * that every rank, whatever it runs, can take part in the comparison. */
void cli_job_start(void);
/* Collective over the job that cli_job_start joined (or that sl_dist_init started): every rank's
 * signature against the others', once per process, before any other collective. CLI_EXIT_OK when
 * they are all equal (or there is one process); else CLI_EXIT_FAIL on every rank, rank 0 having
 * printed one line naming the first field that differs, its values and their ranks. */
int cli_job_agree(const cli_sig *s);
/* main, after the command: a rank that joined and ended before comparing (its help, a usage error,
 * a command that uses no MPI fails or finishes first) compares "COMMAND (ended with exit RC ...)",
 * so the others fail instead of waiting for it; then MPI is finalized. Returns the exit code. */
int cli_job_end(const char *command, int rc);

/* The options `load` and `reshard` share, parsed by cli_opts_parse (cli_opts.c). */
typedef struct cli_opts {
    const char *cmd;             /* for messages */
    sl_plan_opts po;
    sl_load_opts lo;             /* lo.dummy set by --format dummy */
    sl_dist_opts dist;
    int dist_set;                /* --dist or --devices-per-rank given */
    int checksums, json;
    int write_manifest;          /* --write-manifest (reshard) */
    uint64_t max_part;           /* --max-part-size; 0: default */
    int32_t gpus[1024];          /* --gpus: lo.gpus points here */
    int32_t devices[1024];       /* --devices (load): lo.devices points here */
    const char *pos[2];          /* positional arguments */
    int n_pos;
} cli_opts;

/* The fields of a `load` or `reshard` that every rank of an MPI job must share (cli_job.c). */
void cli_sig_opts(cli_sig *s, const cli_opts *a);

/* `load` over MPI (cli_dist.c): every rank runs it; rank 0 prints. sig (the command and the
 * arguments every rank must share) is compared first (cli_job_agree). Returns the exit code. */
int cli_load_dist(const cli_sig *sig, const char *path, const sl_plan_opts *po, const sl_load_opts *lo,
                  const sl_dist_opts *d, int checksums, int json);
/* `reshard` over MPI (cli_dist.c): rank r writes its devices' files; rank 0 prints. */
int cli_reshard_dist(const cli_sig *sig, const char *path, const char *outdir, const sl_plan_opts *po,
                     const sl_load_opts *lo, const sl_dist_opts *d, uint64_t max_part);

/* Whether a.cmd runs over MPI: --dist or --devices-per-rank given, or started by an MPI launcher in
 * a build with MPI (so that a plain run is unchanged). Under MPI, --config - is refused (only rank
 * 0 reads stdin): *rc is then that usage error's exit code, else CLI_EXIT_OK. */
int cli_dist_wanted(const cli_opts *a, int *rc);

/* Parses argv[1..]: options not in `allowed` (NULL-terminated) are usage errors, and at most
 * max_pos positional arguments are taken. Returns -1 after printing help for --help, else an exit
 * code (CLI_EXIT_OK to go on). */
int cli_opts_parse(cli_opts *o, const char *cmd, int argc, char **argv, const char *const *allowed,
                   int max_pos, void (*help)(FILE *out));

/* A checkpoint argument as a path: hf://org/name[@revision] resolved in the Hugging Face cache
 * (cli_hf.c) into buf (CLI_PATH_MAX bytes), anything else as given. Returns an exit code, having
 * printed the error. */
#define CLI_PATH_MAX 4096
int cli_ckpt_path(const char *arg, char *buf, size_t n, const char **path);

/* Remote checkpoints (cli_remote.c, docs/remote.md): the --s3-* and --remote-* options, the AWS
 * environment and credential files (the library reads neither), config.json fetched next to a
 * remote checkpoint. */
/* The options, for a command's allowed list. */
#define CLI_REMOTE_OPTIONS                                                                        \
    "--s3-endpoint", "--s3-region", "--s3-profile", "--s3-path-style", "--s3-virtual-host",      \
        "--remote-connections", "--remote-range", "--remote-retries", "--remote-backoff-ms",     \
        "--remote-timeout-ms", "--ca-bundle"

#define CLI_REMOTE_HELP                                                                           \
    "  --s3-endpoint URL   S3-compatible endpoint (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL,\n" \
    "                  else AWS); credentials from $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY\n"   \
    "                  [$AWS_SESSION_TOKEN], else the profile in ~/.aws/credentials\n"             \
    "  --s3-region R, --s3-profile NAME   default $AWS_REGION, $AWS_PROFILE or 'default'\n"       \
    "  --s3-path-style, --s3-virtual-host  addressing (default path-style with an endpoint)\n"    \
    "  --remote-connections N  ranged GETs in flight (16); --remote-range SIZE per GET (8M)\n"   \
    "  --remote-retries N (5), --remote-backoff-ms MS (200), --remote-timeout-ms MS (30000)\n"   \
    "  --ca-bundle FILE    https: trust these CAs (PEM) instead of the system's (default\n"          \
    "                  $AWS_CA_BUNDLE for s3://, else $CURL_CA_BUNDLE)\n"

/* A flag of CLI_REMOTE_OPTIONS: 1 when s is one (applied to lo). */
int cli_remote_flag(sl_load_opts *lo, const char *s);
/* An option with a value: 1 when opt is one, with *rc the exit code of parsing v (cmd: for the
 * usage message). */
int cli_remote_value(const char *cmd, sl_load_opts *lo, const char *opt, const char *v, int *rc);
/* For commands with parsers of their own (plan, inspect): 1 when argv[*i] is one of
 * CLI_REMOTE_OPTIONS, applied to lo with its value (*i moves past it), *rc the exit code. */
int cli_remote_arg(const char *cmd, sl_load_opts *lo, int argc, char **argv, int *i, int *rc);
/* Opens path (local, hf:// already resolved, or a URL with lo's remote settings completed from
 * the environment), printing nothing: the message is the checkpoint's. */
sl_status cli_remote_open(const char *path, const sl_load_opts *lo, sl_checkpoint **ck);
/* For a remote checkpoint without --config: its config.json fetched (through a private temporary
 * folder, removed at once) and held in memory as po->config_json until exit, named by its URL in
 * messages. The message goes to err. */
sl_status cli_remote_config(const sl_checkpoint *ck, sl_plan_opts *po, char *err, size_t n);

/* --config VALUE into po: a config.json's path, or "-": the config read whole from stdin into
 * memory (po->config_json, kept until exit; messages call it "<stdin>"). Returns an exit code,
 * having printed the error. */
int cli_config_arg(const char *cmd, const char *v, sl_plan_opts *po);

/* An explicit pipeline split (cli_pp.c): --pp-partition v into po (kept until exit; returns an
 * exit code, having printed a usage error). cli_pp_partition_finish, once the options are read:
 * without --pp-partition, VLLM_PP_LAYER_PARTITION (unset or empty: none) for layout tp; either
 * list's length against --pp, and --pp-partition with layout spmd, as usage errors. */
int cli_pp_partition_arg(const char *cmd, const char *v, sl_plan_opts *po);
int cli_pp_partition_finish(const char *cmd, sl_plan_opts *po);
/* sl_plan_errmsg(p), saying where the pp_partition it names came from when that was
 * VLLM_PP_LAYER_PARTITION (into buf when it adds to it). */
const char *cli_plan_errmsg(const sl_plan *p, char *buf, size_t n);
/* The help text's lines for --pp-partition and the variable. */
#define CLI_PP_PARTITION_HELP                                                                     \
    "  --pp-partition LIST  layers per pipeline stage, e.g. 10,12,10 (one entry per stage, summing\n" \
    "                  to num_hidden_layers; layout tp), as vLLM's VLLM_PP_LAYER_PARTITION sets\n" \
    "                  them; default $VLLM_PP_LAYER_PARTITION when set, else vLLM's default split\n" \
    "                  (L/P each, the remainder one each to stages P-2, P-3, ...)\n"

int cli_inspect(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_load(int argc, char **argv);
int cli_reshard(int argc, char **argv);
int cli_synth(int argc, char **argv);
int cli_demo(int argc, char **argv);

#endif /* SL_CLI_H */
