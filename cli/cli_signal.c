/* cli_signal.c - SIGINT and SIGTERM during the commands that write files (reshard, synth).
 *
 * The library never installs a handler; it offers sl_cancel, which only stores to an atomic. The
 * handler here calls it and notes the signal: the running command then fails at its next check,
 * and its usual cleanup removes the temporary files it was writing (GBs each, which used to pile
 * up run after run). The command then reports one line and the process ends by the same signal
 * with its default action, so that a shell or a supervisor sees it was interrupted (a shell's $?
 * is 128 + the signal number: 130, 143). A signal that was ignored when the process started
 * (nohup, a shell's background job) stays ignored, as other tools do. */
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t cli_caught;

static void cli_on_signal(int sig)
{
    cli_caught = sig;
    sl_cancel();
}

static void cli_catch(int sig)
{
    struct sigaction old, sa;
    if (sigaction(sig, NULL, &old) != 0 || old.sa_handler == SIG_IGN)
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cli_on_signal;
    sa.sa_flags = SA_RESTART;   /* the library's reads and writes carry on to their next check */
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

void cli_signals_catch(void)
{
    cli_catch(SIGINT);
    cli_catch(SIGTERM);
}

int cli_signals_caught(void)
{
    return cli_caught;
}

int cli_signals_exit(const char *cmd, const char *outdir)
{
    const int sig = cli_caught;
    char b[CLI_TEXT_NAME];
    fflush(stdout);
    if (cmd)
        fprintf(stderr, "shardload: error: %s interrupted by %s: %s: the files it had not finished "
                "were removed\n", cmd, sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal",
                cli_text(outdir, b, sizeof b));
    fflush(stderr);
    signal(sig, SIG_DFL);
    raise(sig);
    return CLI_EXIT_FAIL;   /* only if the signal could not end the process */
}
