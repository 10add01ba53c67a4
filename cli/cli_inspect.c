/* cli_inspect.c - placeholder until the subcommand lands. */
#include "cli.h"

int cli_inspect(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("'inspect' is not implemented yet");
}
