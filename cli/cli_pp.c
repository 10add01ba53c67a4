/* cli_pp.c - an explicit pipeline split for plan, load and reshard: --pp-partition 10,12,10, or
 * vLLM's own variable VLLM_PP_LAYER_PARTITION, so that a vLLM user who sets it gets the shards
 * vLLM makes. The library reads no environment: the CLI maps the variable onto
 * sl_plan_opts.pp_partition, as it maps SL_IO_ENGINE and the AWS variables. The list is checked
 * here as text, each entry as vLLM's int() reads it (and a negative entry, which vLLM lets
 * through, refused), and its length against --pp, which names where the list came from (the
 * library checks that too); its sum against the config's layers is the library's to check. */
#include "cli.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PP_ENV "VLLM_PP_LAYER_PARTITION"
#define PP_MAX_ENTRIES 65536   /* --pp's bound */

static int32_t *pp_list;       /* kept until exit: po->pp_partition points into it */
static const char *pp_source;  /* "--pp-partition" or PP_ENV, for messages */
static const char *pp_text;    /* the list as given */

static void pp_list_free(void)
{
    free(pp_list);
    pp_list = NULL;
}

/* "<source> '<list>': <why> '<item>'" as a usage error. */
static int pp_error(const char *cmd, const char *what, const char *v, const char *why, const char *item)
{
    char ib[CLI_TEXT_NAME], vb[CLI_TEXT_NAME];
    return cli_usage_error(cmd, "%s '%s': %s%s%s%s", what, cli_text(v, vb, sizeof vb), why,
                           item ? " '" : "", item ? cli_text(item, ib, sizeof ib) : "", item ? "'" : "");
}

/* The whitespace Python's int() strips around its text, in ASCII: str.isspace's. */
static int pp_space(char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= '\x1c' && ch <= '\x1f');
}

/* n bytes at p read as Python's int() reads a base-10 literal, which is how vLLM reads each entry
 * of VLLM_PP_LAYER_PARTITION: a sign, digits with single underscores between them ("1_0"), leading
 * zeros. ASCII only (int() also takes other scripts' digits). *neg: a '-' before a number past 0
 * ("-0" is 0, as int() has it). -1 when it is no such number or exceeds INT32_MAX. */
static int pp_number(const char *p, size_t n, int64_t *out, int *neg)
{
    size_t i = 0;
    int64_t x = 0;
    const int minus = n > 0 && p[0] == '-';
    i += n > 0 && (p[0] == '-' || p[0] == '+');
    if (i == n)
        return -1;
    for (; i < n; i++) {
        const int between = i > 0 && i + 1 < n && isdigit((unsigned char)p[i - 1]) &&
                            isdigit((unsigned char)p[i + 1]);
        if (p[i] == '_' && between)
            continue;
        if (!isdigit((unsigned char)p[i]))
            return -1;
        x = x * 10 + (p[i] - '0');
        if (x > INT32_MAX)
            return -1;
    }
    *out = x;
    *neg = minus && x > 0;
    return 0;
}

/* One entry of n bytes at p, whitespace around it allowed: a count of layers. */
static int pp_entry(const char *cmd, const char *what, const char *v, const char *p, size_t n,
                    int32_t *out)
{
    while (n > 0 && pp_space(*p))
        p++, n--;
    while (n > 0 && pp_space(p[n - 1]))
        n--;
    char num[64];
    int64_t x = 0;
    int neg = 0;
    if (n == 0)
        return pp_error(cmd, what, v, "an empty entry: give one count of layers per pipeline "
                        "stage, separated by commas (10,12,10)", NULL);
    snprintf(num, sizeof num, "%.*s", (int)(n < sizeof num ? n : sizeof num - 1), p);
    if (pp_number(p, n, &x, &neg) != 0)
        return pp_error(cmd, what, v, "not a count of layers:", num);
    if (neg)
        return pp_error(cmd, what, v, "a stage holds 0 or more layers, not", num);
    *out = (int32_t)x;
    return CLI_EXIT_OK;
}

/* v into pp_list and po (replacing an earlier list). */
static int pp_parse(const char *cmd, const char *what, const char *v, sl_plan_opts *po)
{
    size_t n = 1;
    for (const char *p = v; *p; p++)
        n += *p == ',';
    if (n > PP_MAX_ENTRIES)
        return pp_error(cmd, what, v, "more entries than the 65536 pipeline stages --pp takes", NULL);
    int32_t *list = malloc(n * sizeof *list);
    if (!list)
        return cli_fail("out of memory");
    const char *p = v;
    for (size_t i = 0; i < n; i++) {
        const size_t len = strcspn(p, ",");
        const int rc = pp_entry(cmd, what, v, p, len, &list[i]);
        if (rc != CLI_EXIT_OK) {
            free(list);
            return rc;
        }
        p += len + (p[len] == ',');
    }
    if (!pp_list)
        atexit(pp_list_free);
    free(pp_list);
    pp_list = list;
    pp_source = what;
    pp_text = v;
    po->pp_partition = list;
    po->n_pp_partition = (int32_t)n;
    return CLI_EXIT_OK;
}

int cli_pp_partition_arg(const char *cmd, const char *v, sl_plan_opts *po)
{
    return pp_parse(cmd, "--pp-partition", v, po);
}

int cli_pp_partition_finish(const char *cmd, sl_plan_opts *po)
{
    const char *env = getenv(PP_ENV);
    const int given = po->pp_partition != NULL;
    if (po->layout == SL_LAYOUT_SPMD) {
        if (given)
            return cli_usage_error(cmd, "--pp-partition applies to layout tp only");
        return CLI_EXIT_OK;   /* vLLM's variable: a 1-D mesh has no pipeline stages */
    }
    if (!given && env && *env) {
        const int rc = pp_parse(cmd, PP_ENV, env, po);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    if (po->pp_partition && po->n_pp_partition != po->pp) {
        char vb[CLI_TEXT_NAME];
        const int env_list = pp_source != NULL && strcmp(pp_source, PP_ENV) == 0;
        return cli_usage_error(cmd, "%s '%s' has %d entr%s but --pp is %d: one count of layers "
                               "per pipeline stage%s", pp_source, cli_text(pp_text, vb, sizeof vb),
                               (int)po->n_pp_partition, po->n_pp_partition == 1 ? "y" : "ies", (int)po->pp,
                               env_list ? " (unset it, or give --pp-partition for this mesh)" : "");
    }
    return CLI_EXIT_OK;
}

const char *cli_plan_errmsg(const sl_plan *p, char *buf, size_t n)
{
    const char *msg = sl_plan_errmsg(p);
    if (!pp_source || strcmp(pp_source, PP_ENV) != 0 || !strstr(msg, "pp_partition"))
        return msg;
    snprintf(buf, n, "%s (pp_partition from %s)", msg, PP_ENV);
    return buf;
}
