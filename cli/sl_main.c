/* sl_main.c - entry point of the shardload CLI: dispatches to one subcommand per file. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} cli_commands[] = {
    {"inspect", cli_inspect, "validate a checkpoint and list its files and tensors"},
    {"plan", cli_plan, "show what each device of a mesh holds (from a checkpoint or a config)"},
    {"load", cli_load, "load a checkpoint onto a mesh of devices and report speed and memory"},
    {"reshard", cli_reshard, "write per-device pre-sharded safetensors files"},
    {"synth", cli_synth, "write a synthetic checkpoint of a config's shapes"},
    {"demo", cli_demo, "synthesize a small model, plan and load it at TP=2"},
};

static void main_help(FILE *out)
{
    fprintf(out, "usage: shardload COMMAND [OPTIONS]\n\n"
                 "Loads safetensors checkpoints into per-device tensor-parallel / pipeline-parallel /\n"
                 "SPMD shards, reading each byte once under a fixed host-memory budget.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(cli_commands) / sizeof(cli_commands[0]); i++)
        fprintf(out, "  %-9s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(out, "\n`shardload COMMAND --help` describes a command's options.\n"
                 "Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.\n");
}

static int main_dispatch(int argc, char **argv)
{
    if (argc < 2)
        return main_help(stderr), CLI_EXIT_USAGE;
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
        return main_help(stdout), CLI_EXIT_OK;
    if (!strcmp(argv[1], "--version"))
        return printf("shardload %s\n", SL_VERSION_STRING), CLI_EXIT_OK;
    for (size_t i = 0; i < sizeof(cli_commands) / sizeof(cli_commands[0]); i++) {
        if (!strcmp(argv[1], cli_commands[i].name))
            return cli_commands[i].run(argc - 1, argv + 1);
    }
    cli_put_line("shardload: unknown command '", argv[1], "'\n");
    main_help(stderr);
    return CLI_EXIT_USAGE;
}

/* Everything a command prints goes through stdout's buffer, so a write that failed (a full disk,
 * /dev/full, a closed pipe) shows in the stream's error flag or in the final flush and close: the
 * output is then incomplete, which is a failure, reported once. A command that failed already has
 * printed its one line, and keeps its status. */
static int main_close_stdout(int rc)
{
    errno = 0;
    int err = fflush(stdout) != 0 || ferror(stdout) ? (errno ? errno : EIO) : 0;
    errno = 0;
    if (fclose(stdout) != 0 && err == 0)
        err = errno ? errno : EIO;
    if (err == 0 || rc != CLI_EXIT_OK)
        return rc;
    return cli_fail("cannot write the output to stdout: %s", strerror(err));
}

/* `load` and `reshard` run over MPI under a launcher and compare the ranks' commands with their
 * arguments once those are parsed (cli_dist.c). Every other command, and a rank that ends before
 * comparing (its help, a usage error), compares what it runs here, so that no rank leaves the job
 * while the others wait for it in a collective (cli_job.c). */
static int main_uses_mpi(int argc, char **argv)
{
    return argc >= 2 && (!strcmp(argv[1], "load") || !strcmp(argv[1], "reshard"));
}

int main(int argc, char **argv)
{
    /* The library reads no environment; the CLI keeps the knob it documents (load --help). */
    sl_cuda_set_runtime(getenv("SL_CUDART"));
    const char *command = argc >= 2 ? argv[1] : "(none)";
    cli_job_start();
    int rc = CLI_EXIT_OK;
    if (!main_uses_mpi(argc, argv)) {
        cli_sig sig;
        cli_sig_init(&sig, command);
        rc = cli_job_agree(&sig);
    }
    if (rc == CLI_EXIT_OK)
        rc = main_dispatch(argc, argv);
    return main_close_stdout(cli_job_end(command, rc));
}
