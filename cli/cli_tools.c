/* cli_tools.c - placeholders until the subcommands land (moved unchanged from cli_load.c; synth
 * has its own file now). */
#include "cli.h"

int cli_reshard(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'reshard' is not implemented yet");
}

int cli_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'demo' is not implemented yet");
}
