/* cli_plan.c - placeholder until the subcommand lands. */
#include "cli.h"

int cli_plan(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'plan' is not implemented yet");
}
