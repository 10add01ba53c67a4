/* cli_remote.c - remote checkpoints in the CLI (declared in cli.h). The library takes credentials,
 * region and endpoint as options only; here they come, as the AWS tools find them, from the
 * flags, then the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
 * AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_PROFILE), then the
 * profile's entries in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and AWS_CONFIG_FILE
 * (~/.aws/config). A profile named with --s3-profile wins over the key variables, as with aws.
 * The CA bundle for https: --ca-bundle, else AWS_CA_BUNDLE for s3:// (as aws reads it), else
 * CURL_CA_BUNDLE (as curl reads it). */
#include "cli.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *cli_profile;   /* --s3-profile: one command per process */

int cli_remote_flag(sl_load_opts *lo, const char *s)
{
    if (!strcmp(s, "--s3-path-style"))
        lo->s3_addressing = 1;
    else if (!strcmp(s, "--s3-virtual-host"))
        lo->s3_addressing = 2;
    else
        return 0;
    return 1;
}

static int remote_int(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi, int32_t *out)
{
    int64_t x = 0;
    if (cli_parse_int(v, lo, hi, &x) != 0)
        return cli_usage_error(cmd, "%s needs an integer in [%" PRId64 ", %" PRId64 "]", opt, lo, hi);
    *out = (int32_t)x;
    return CLI_EXIT_OK;
}

int cli_remote_value(const char *cmd, sl_load_opts *lo, const char *opt, const char *v, int *rc)
{
    *rc = CLI_EXIT_OK;
    if (!strcmp(opt, "--s3-endpoint"))
        lo->s3_endpoint = v;
    else if (!strcmp(opt, "--s3-region"))
        lo->s3_region = v;
    else if (!strcmp(opt, "--s3-profile"))
        cli_profile = v;
    else if (!strcmp(opt, "--ca-bundle"))
        lo->ca_bundle = v;
    else if (!strcmp(opt, "--remote-connections"))
        *rc = remote_int(cmd, opt, v, 1, 256, &lo->remote_connections);
    else if (!strcmp(opt, "--remote-retries"))
        *rc = remote_int(cmd, opt, v, 0, 1000, &lo->remote_retries);
    else if (!strcmp(opt, "--remote-backoff-ms"))
        *rc = remote_int(cmd, opt, v, 1, 600000, &lo->remote_backoff_ms);
    else if (!strcmp(opt, "--remote-timeout-ms"))
        *rc = remote_int(cmd, opt, v, 1, 3600000, &lo->remote_timeout_ms);
    else if (!strcmp(opt, "--remote-range")) {
        if (cli_parse_size(v, &lo->remote_range_bytes) != 0 || lo->remote_range_bytes < 4096)
            *rc = cli_usage_error(cmd, "--remote-range needs a size of at least 4K, e.g. 8M");
    } else
        return 0;
    if (!strcmp(opt, "--remote-retries") && *rc == CLI_EXIT_OK && lo->remote_retries == 0)
        lo->remote_retries = -1;   /* the library's 0 is "default"; the flag's 0 is "none" */
    return 1;
}

int cli_remote_arg(const char *cmd, sl_load_opts *lo, int argc, char **argv, int *i, int *rc)
{
    static const char *const names[] = {CLI_REMOTE_OPTIONS, NULL};
    const char *s = argv[*i];
    *rc = CLI_EXIT_OK;
    if (cli_remote_flag(lo, s))
        return 1;
    if (!cli_listed(s, names))
        return 0;
    if (*i + 1 >= argc)
        *rc = cli_usage_error(cmd, "%s needs a value", s);
    else
        cli_remote_value(cmd, lo, s, argv[++*i], rc);
    return 1;
}

/* ---- the AWS files ---- */

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* One line of an AWS file as botocore's configparser.RawConfigParser reads it: "[name]" a section;
 * blank, or '#' or ';' first, nothing; a line indented deeper than the key above it (*indent, -1
 * after a header) that key's continuation (a nested "s3 =" block), never a key; else "key = value"
 * or "key: value" (the first of either delimiter). Sets *section to the header (in line), or
 * *key and *value. */
static void ini_line(char *line, int *indent, char **section, char **key, char **value)
{
    *section = *key = *value = NULL;
    const int ind = (int)strspn(line, " \t");
    char *s = trim(line), *d = strpbrk(s, "=:");
    if (!*s || *s == '#' || *s == ';' || (*indent >= 0 && ind > *indent))
        return;
    if (*s == '[') {
        char *e = strrchr(s, ']');
        if (e) {
            *e = '\0';
            *section = trim(s + 1);
            *indent = -1;
        }
        return;
    }
    if (!d)
        return;
    *d = '\0';
    *key = trim(s);
    *value = trim(d + 1);
    *indent = ind;
}

/* The value of `key` (in any case, as configparser folds keys) in section `section` (or, for
 * "default", "profile default", as botocore reads the config file) of an AWS INI file, strdup'd;
 * NULL when absent. Lines of any length: an STS session token can be thousands of characters,
 * and a line cut at a buffer's size was read as two (the token cut short, the rest taken for
 * another key). */
static char *ini_get(const char *path, const char *section, const char *key)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    char *line = NULL, *val = NULL;
    size_t cap = 0;
    int in = 0, indent = -1;
    while (f && !val && getline(&line, &cap, f) >= 0) {
        char *sec, *k, *v;
        ini_line(line, &indent, &sec, &k, &v);
        if (sec)
            in = !strcmp(sec, section) || (!strcmp(section, "default") && !strcmp(sec, "profile default"));
        else if (in && k && !strcasecmp(k, key))
            val = strdup(v);
    }
    free(line);
    if (f)
        fclose(f);
    return val;
}

static char *aws_file(const char *var, const char *name)
{
    const char *v = env(var), *home = env("HOME");
    char buf[4096];
    if (v)
        return strdup(v);
    if (!home)
        return NULL;
    snprintf(buf, sizeof buf, "%s/.aws/%s", home, name);
    return strdup(buf);
}

/* Kept for the process's life: the options point into them. */
static char *cli_keep[8];
static int cli_n_keep;

static const char *keep(char *s)
{
    if (s && cli_n_keep < (int)(sizeof cli_keep / sizeof cli_keep[0]))
        cli_keep[cli_n_keep++] = s;
    return s;
}

static void from_profile(sl_load_opts *lo, const char *profile, int keys)
{
    char *cred = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    char *conf = aws_file("AWS_CONFIG_FILE", "config");
    char section[512];
    snprintf(section, sizeof section, strcmp(profile, "default") ? "profile %s" : "%s", profile);
    if (keys) {
        lo->s3_access_key = keep(ini_get(cred, profile, "aws_access_key_id"));
        lo->s3_secret_key = keep(ini_get(cred, profile, "aws_secret_access_key"));
        lo->s3_session_token = keep(ini_get(cred, profile, "aws_session_token"));
    }
    if (!lo->s3_region)
        lo->s3_region = keep(ini_get(conf, section, "region"));
    if (!lo->s3_endpoint)
        lo->s3_endpoint = keep(ini_get(conf, section, "endpoint_url"));
    free(cred);
    free(conf);
}

static void remote_env(sl_load_opts *lo)
{
    const char *profile = cli_profile ? cli_profile : env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
    const int env_keys = !cli_profile && env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY");
    if (env_keys) {
        lo->s3_access_key = env("AWS_ACCESS_KEY_ID");
        lo->s3_secret_key = env("AWS_SECRET_ACCESS_KEY");
        lo->s3_session_token = env("AWS_SESSION_TOKEN");
    }
    if (!lo->s3_region)
        lo->s3_region = env("AWS_REGION") ? env("AWS_REGION") : env("AWS_DEFAULT_REGION");
    if (!lo->s3_endpoint)
        lo->s3_endpoint = env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3") : env("AWS_ENDPOINT_URL");
    from_profile(lo, profile, !env_keys);
}

static int is_url(const char *p)
{
    return !strncasecmp(p, "http://", 7) || !strncasecmp(p, "https://", 8) || !strncasecmp(p, "s3://", 5);
}

sl_status cli_remote_open(const char *path, const sl_load_opts *lo, sl_checkpoint **ck)
{
    sl_load_opts o = *lo;
    const int s3 = !strncasecmp(path, "s3://", 5);
    if (s3)
        remote_env(&o);
    if (!o.ca_bundle && s3)
        o.ca_bundle = env("AWS_CA_BUNDLE");
    if (!o.ca_bundle)
        o.ca_bundle = env("CURL_CA_BUNDLE");
    return sl_checkpoint_open_opts(path, &o, ck);
}

/* ---- config.json ---- */

/* The fetched config.json, held in memory: po borrows it (and its name, the URL) until exit. */
static char *cli_remote_cfg, *cli_remote_cfg_name;
static size_t cli_remote_cfg_len;

static void cli_remote_cfg_free(void)
{
    sl_free(cli_remote_cfg);
    free(cli_remote_cfg_name);
}

static sl_status fetch_config(const sl_checkpoint *ck, char **buf, size_t *len, char *err, size_t n)
{
    const sl_status st = sl_checkpoint_fetch_bytes(ck, "config.json", buf, len, err, n);
    if (st == SL_E_NOT_FOUND) {
        const size_t k = strlen(err);
        snprintf(err + k, n - k, " (give the model's config with --config FILE)");
    }
    return st;
}

sl_status cli_remote_config(const sl_checkpoint *ck, sl_plan_opts *po, char *err, size_t n)
{
    if (!ck || po->config_path || !is_url(sl_checkpoint_dir(ck)))
        return SL_OK;
    if (!cli_remote_cfg) {
        char *buf = NULL;
        size_t len = 0;
        const sl_status st = fetch_config(ck, &buf, &len, err, n);
        if (st != SL_OK)
            return st;
        if (asprintf(&cli_remote_cfg_name, "%s/config.json", sl_checkpoint_dir(ck)) < 0) {
            free(buf);
            cli_remote_cfg_name = NULL;
            snprintf(err, n, "out of memory");
            return SL_E_NOMEM;
        }
        cli_remote_cfg = buf;
        cli_remote_cfg_len = len;
        atexit(cli_remote_cfg_free);
    }
    po->config_json = cli_remote_cfg;
    po->config_json_len = cli_remote_cfg_len;
    po->config_path = cli_remote_cfg_name;   /* the URL, without credentials: only a name */
    return SL_OK;
}
