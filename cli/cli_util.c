/* cli_util.c - error printing and option parsing shared by the subcommands. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

static int cli_control(unsigned char c)
{
    return c < 0x20 || c == 0x7F;
}

const char *cli_text(const char *s, char *buf, size_t len)
{
    size_t o = 0, i = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "?");
    for (; p[i] && o + (cli_control(p[i]) ? 4 : 1) + 4 <= len; i++)
        o += (size_t)snprintf(buf + o, len - o, cli_control(p[i]) ? "\\x%02x" : "%c", p[i]);
    if (p[i] && len >= 4)
        o += (size_t)snprintf(buf + o, len - o, "...");
    if (len)
        buf[o < len ? o : len - 1] = '\0';
    return buf;
}

void cli_put_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)(s ? s : "?"); *p; p++) {
        if (cli_control(*p))
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
}

/* s with control bytes as \xNN into out (4 * strlen(s) + 1 bytes at least); returns its end. */
static char *cli_escape_into(char *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (cli_control(*p))
            out += sprintf(out, "\\x%02x", *p);
        else
            *out++ = (char)*p;
    }
    *out = '\0';
    return out;
}

/* prefix, the text with control bytes escaped, suffix, in one write: stderr is unbuffered, so a
 * byte at a time (cli_put_text) was a write() each, and under mpirun another rank's output landed
 * inside rank 0's one error line (the launcher forwards what each read of a rank's pipe returns). */
void cli_put_line(const char *prefix, const char *text, const char *suffix)
{
    const size_t lp = strlen(prefix), lt = strlen(text), ls = strlen(suffix);
    char *line = lt <= (SIZE_MAX - lp - ls - 1) / 4 ? malloc(lp + 4 * lt + ls + 1) : NULL;
    if (!line) {   /* out of memory: the same bytes, in pieces */
        fputs(prefix, stderr);
        cli_put_text(stderr, text);
        fputs(suffix, stderr);
        return;
    }
    memcpy(line, prefix, lp);
    strcpy(cli_escape_into(line + lp, text), suffix);
    fputs(line, stderr);
    free(line);
}

char *cli_vformat(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    const int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

/* prefix, the formatted message with control bytes escaped (argv and library messages alike),
 * suffix. */
static void cli_vmessage(const char *prefix, const char *suffix, const char *fmt, va_list ap)
    CLI_PRINTF(3, 0);
static void cli_vmessage(const char *prefix, const char *suffix, const char *fmt, va_list ap)
{
    char *msg = cli_vformat(fmt, ap);
    cli_put_line(prefix, msg ? msg : "out of memory", suffix);
    free(msg);
}

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vmessage("shardload: error: ", "\n", fmt, ap);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

void cli_warnings(const sl_checkpoint *ck)
{
    for (int64_t i = 0; i < sl_checkpoint_warning_count(ck); i++) {
        const char *w = sl_checkpoint_warning(ck, i);
        cli_put_line("shardload: warning: ", w ? w : "?", "\n");
    }
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char prefix[64], suffix[96];
    snprintf(prefix, sizeof prefix, "shardload %s: ", cmd);
    snprintf(suffix, sizeof suffix, "\nTry 'shardload %s --help'.\n", cmd);
    va_list ap;
    va_start(ap, fmt);
    cli_vmessage(prefix, suffix, fmt, ap);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_listed(const char *s, const char *const *list)
{
    for (; *list; list++) {
        if (!strcmp(s, *list))
            return 1;
    }
    return 0;
}

int cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    char *end = NULL;
    const long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static const struct {
    const char *suffix;
    uint64_t mult;
} cli_units[] = {
    {"", 1},          {"B", 1},
    {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000ull},
    {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"MB", 1000000ull},
    {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000ull},
    {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1000000000000ull},
};

int cli_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    for (size_t i = 0; i < sizeof(cli_units) / sizeof(cli_units[0]); i++) {
        if (strcasecmp(end, cli_units[i].suffix) == 0) {
            if (v > UINT64_MAX / cli_units[i].mult)
                return -1;
            *out = v * cli_units[i].mult;
            return 0;
        }
    }
    return -1;
}

int cli_parse_dtype(const char *s, sl_dtype *out)
{
    static const struct {
        const char *name;
        sl_dtype dt;
    } names[] = {{"bf16", SL_DTYPE_BF16}, {"bfloat16", SL_DTYPE_BF16}, {"f16", SL_DTYPE_F16},
                 {"float16", SL_DTYPE_F16}, {"fp16", SL_DTYPE_F16},    {"half", SL_DTYPE_F16},
                 {"f32", SL_DTYPE_F32},     {"float32", SL_DTYPE_F32}, {"fp32", SL_DTYPE_F32},
                 {"float", SL_DTYPE_F32}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].dt;
            return 0;
        }
    }
    return -1;
}

const char *cli_commas(uint64_t v, char *buf, size_t len)
{
    char digits[32];
    const int n = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* ---- --config - ------------------------------------------------------------------------------- */

/* The library's bound on a config.json (sl_plan_opts.config_json). A stream is read up to one byte
 * more, so that a longer text is refused by the planner, not cut to a valid-looking prefix. */
#define CLI_CONFIG_MAX ((size_t)16 << 20)

/* f's text, malloc'd, *len bytes (at most CLI_CONFIG_MAX + 1); NULL on a read error or out of
 * memory (never a prefix). The buffer doubles from 64 KiB, so a config of a few KiB does not cost
 * the bound. */
static char *cli_config_read(FILE *f, size_t *len)
{
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (n == cap) {
            if (cap == CLI_CONFIG_MAX + 1)
                break;   /* one byte over the bound: the planner refuses it */
            size_t grown = cap ? 2 * cap : (size_t)64 << 10;
            if (grown > CLI_CONFIG_MAX + 1)
                grown = CLI_CONFIG_MAX + 1;
            char *p = realloc(buf, grown);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
            cap = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0 || ferror(f))
            break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static char *cli_stdin_config;   /* --config -'s text: po borrows it until the plan is built */

static void cli_stdin_config_free(void)
{
    free(cli_stdin_config);
}

int cli_config_arg(const char *cmd, const char *v, sl_plan_opts *po)
{
    po->config_path = v;
    if (strcmp(v, "-") != 0)
        return CLI_EXIT_OK;
    if (cli_stdin_config)
        return cli_usage_error(cmd, "--config - given twice (stdin is read once)");
    size_t n = 0;
    errno = 0;
    char *buf = cli_config_read(stdin, &n);
    if (!buf)
        return cli_fail("--config -: cannot read stdin: %s", errno ? strerror(errno) : "out of memory");
    cli_stdin_config = buf;
    atexit(cli_stdin_config_free);
    po->config_path = "<stdin>";   /* only the name of the text, for messages */
    po->config_json = buf;
    po->config_json_len = n;
    return CLI_EXIT_OK;
}

/* VmHWM from /proc (bytes), else ru_maxrss (KiB on Linux). */
uint64_t cli_peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    }
    if (f)
        fclose(f);
    if (kb)
        return (uint64_t)kb * 1024;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        return (uint64_t)ru.ru_maxrss * 1024;
    return 0;
}
