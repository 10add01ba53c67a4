/* cli_hf.c - checkpoint arguments of the form hf://org/name[@revision]: the CLI finds the hub
 * cache folder as huggingface_hub does (the library reads no environment) and the library
 * resolves the reference in it to a snapshot folder. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $HF_HUB_CACHE (or its old name), else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
 * else ~/.cache/huggingface/hub: huggingface_hub's order. An empty variable counts as unset. */
static const char *cli_hf_cache(char *buf, size_t n)
{
    const char *v;
    if ((v = getenv("HF_HUB_CACHE")) && *v)
        return v;
    if ((v = getenv("HUGGINGFACE_HUB_CACHE")) && *v)
        return v;
    if ((v = getenv("HF_HOME")) && *v)
        snprintf(buf, n, "%s/hub", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        snprintf(buf, n, "%s/huggingface/hub", v);
    else
        snprintf(buf, n, "%s/.cache/huggingface/hub", (v = getenv("HOME")) && *v ? v : ".");
    return buf;
}

int cli_ckpt_path(const char *arg, char *buf, size_t n, const char **path)
{
    *path = arg;
    if (!arg || strncmp(arg, "hf://", 5) != 0)
        return CLI_EXIT_OK;
    char cache[4096], err[1024];
    if (sl_hf_resolve(arg, cli_hf_cache(cache, sizeof cache), buf, n, err, sizeof err) != SL_OK)
        return cli_fail("%s", err);
    *path = buf;
    return CLI_EXIT_OK;
}
