/* cli_load.c - placeholder until the subcommands land. */
#include "cli.h"

int cli_load(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'load' is not implemented yet");
}

int cli_reshard(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'reshard' is not implemented yet");
}

int cli_synth(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'synth' is not implemented yet");
}

int cli_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'demo' is not implemented yet");
}
