/* cli_job.c - an MPI job's first collective (docs/mpi.md): under a launcher every rank says which
 * command it runs, with the arguments the ranks must share, and the ranks compare before anything
 * else. MPI's collectives pair by order alone, so ranks running different commands, or one with
 * another --dist, met in different collectives: the job hung (a rank that ran `plan` exited 0
 * without joining, and the `load` ranks waited in MPI_Init's fence for ever) or aborted inside
 * Open MPI. Here every rank, whatever it runs, makes the same calls once: a gather of a signature
 * of fixed size to rank 0, which compares them, then an agreement on the verdict, so a mismatch
 * is one line from rank 0 naming what differs and on which ranks, and exit 1 everywhere.
 *
 * A signature is "name=value" lines (the command first), padded with spaces to CLI_SIG_BYTES: long
 * values are cut and carry a hash of the whole, so that what is compared stays exact. */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SIG_VALUE_SHOWN 72   /* a value longer than this is cut, with the hash of all of it */
#define SIG_GROUPS 4         /* distinct values named in a message; more are counted */

static int job_joined;   /* cli_job_start initialised MPI */
static int job_agreed;   /* this process took part in the comparison (once) */

void cli_job_start(void)
{
    job_joined = cli_dist_launched() && sl_dist_available() && sl_dist_init() == SL_OK;
}

void cli_sig_init(cli_sig *s, const char *command)
{
    s->len = 0;
    s->text[0] = '\0';
    cli_sig_add(s, "command", "%s", command);
}

/* One line "name=value": a value's line breaks and control bytes become '?' (a line each), and a
 * long one is cut; either is followed by the XXH3 of all of it as given (a path of any length). A
 * signature that would overflow keeps what fits: every rank cuts at the same field. */
void cli_sig_add(cli_sig *s, const char *name, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    char *v = cli_vformat(fmt, ap);
    va_end(ap);
    const size_t n = v ? strlen(v) : 0;
    /* hashed as given: two values that differ only in the bytes '?' stands for (OUTDIRs "o\x01"
     * and "o\x02") must not compare equal */
    const unsigned long long h = v ? (unsigned long long)sl_xxh3(v, n) : 0;
    int shown_other = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
            v[i] = '?';
            shown_other = 1;
        }
    }
    if (!v)
        snprintf(line, sizeof line, "%s=(out of memory)\n", name);
    else if (n > SIG_VALUE_SHOWN)
        snprintf(line, sizeof line, "%s=%.*s... (xxh3 %016llx)\n", name, SIG_VALUE_SHOWN - 8, v, h);
    else if (shown_other)
        snprintf(line, sizeof line, "%s=%.*s (xxh3 %016llx)\n", name, SIG_VALUE_SHOWN, v, h);
    else
        snprintf(line, sizeof line, "%s=%.*s\n", name, SIG_VALUE_SHOWN, v);
    free(v);
    const size_t k = strlen(line);
    if (s->len + k < CLI_SIG_BYTES) {
        memcpy(s->text + s->len, line, k + 1);
        s->len += k;
    }
}

/* The pipeline split, from --pp-partition or VLLM_PP_LAYER_PARTITION (each rank's environment
 * may hold its own), as the counts it became; a long list is hashed whole by cli_sig_add. */
static void sig_partition(cli_sig *s, const sl_plan_opts *po)
{
    if (po->pp_partition == NULL) {
        cli_sig_add(s, "--pp-partition", "%s", "(vLLM's default)");
        return;
    }
    const size_t cap = (size_t)po->n_pp_partition * 12 + 1;   /* ",-2147483648" an entry */
    char *text = malloc(cap);
    size_t at = 0;
    if (text)
        text[0] = '\0';
    for (int32_t i = 0; text && i < po->n_pp_partition; i++)
        at += (size_t)snprintf(text + at, cap - at, "%s%d", i ? "," : "", (int)po->pp_partition[i]);
    cli_sig_add(s, "--pp-partition", "%s", text ? text : "(out of memory)");
    free(text);
}

/* What the ranks of a `load` or `reshard` must share: the mesh, dtype, weights and how the ranks
 * split the work. Not what each host may set for itself: --staging, --request, --io, --device,
 * --gpus, the remote options (the cooperative rounds are compared later, where they matter:
 * docs/mpi.md), nor the paths of the checkpoint, --config and --rules: a host's copy may live
 * elsewhere than another's (node-local disks), and what they hold is compared once opened (the
 * plan and the files' sizes and sampled bytes, mpi_load.c). */
void cli_sig_opts(cli_sig *s, const cli_opts *a)
{
    const sl_plan_opts *po = &a->po;
    cli_sig_add(s, "--layout", "%s", po->layout == SL_LAYOUT_SPMD ? "spmd" : "tp");
    cli_sig_add(s, "--tp", "%d", (int)po->tp);
    cli_sig_add(s, "--pp", "%d", (int)po->pp);
    sig_partition(s, po);
    cli_sig_add(s, "--ep", "%s", po->ep ? "on" : "off");
    cli_sig_add(s, "--dtype", "%s", po->dtype < 0 ? "(the config's)" : sl_dtype_name((sl_dtype)po->dtype));
    cli_sig_add(s, "--format", "%s", a->lo.dummy ? "dummy" : "auto");
    if (a->lo.dummy)
        cli_sig_add(s, "--seed", "%llu", (unsigned long long)a->lo.seed);
    cli_sig_add(s, "--dist", "%s", a->dist.strategy == SL_DIST_INDEPENDENT ? "independent" : "cooperative");
    cli_sig_add(s, "--devices-per-rank", "%d", (int)a->dist.devices_per_rank);
}

/* ---- rank 0 compares ---------------------------------------------------------------------- */

/* The value of `name` in signature sig (len bytes) as [*v, *v + *vl); 0 when it has none. */
static int sig_value(const char *sig, size_t len, const char *name, const char **v, size_t *vl)
{
    const size_t k = strlen(name);
    for (const char *p = sig, *end = sig + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return 0;
        if ((size_t)(nl - p) > k && !strncmp(p, name, k) && p[k] == '=') {
            *v = p + k + 1;
            *vl = (size_t)(nl - *v);
            return 1;
        }
        p = nl + 1;
    }
    return 0;
}

/* Whether ranks a and b give name the same value (or both none). */
static int sig_same(const char *all, int a, int b, const char *name)
{
    const char *va = NULL, *vb = NULL;
    size_t la = 0, lb = 0;
    const int ha = sig_value(all + (size_t)a * CLI_SIG_BYTES, CLI_SIG_BYTES, name, &va, &la);
    const int hb = sig_value(all + (size_t)b * CLI_SIG_BYTES, CLI_SIG_BYTES, name, &vb, &lb);
    return ha == hb && la == lb && (!ha || !memcmp(va, vb, la));
}

/* "0, 2-5, 7" into out: the ranks r in [0, size) with in[r] set. */
static void rank_list(const unsigned char *in, int size, char *out, size_t n)
{
    size_t at = 0;
    out[0] = '\0';
    for (int r = 0; r < size && at < n; r++) {
        if (!in[r])
            continue;
        int e = r;
        while (e + 1 < size && in[e + 1])
            e++;
        const int w = e > r ? snprintf(out + at, n - at, "%s%d-%d", at ? ", " : "", r, e)
                            : snprintf(out + at, n - at, "%s%d", at ? ", " : "", r);
        at += w > 0 ? (size_t)w : 0;
        r = e;
    }
}

/* "VALUE on ranks 0, 2-3" for each distinct value of name (the first SIG_GROUPS), into msg. */
static void describe(const char *all, int size, const char *name, char *msg, size_t n)
{
    unsigned char *in = calloc((size_t)size, 1), *seen = calloc((size_t)size, 1);
    const int label = name[0] != '-' && !(name[0] >= 'A' && name[0] <= 'Z');   /* not an option or OUTDIR */
    size_t at = (size_t)snprintf(msg, n, "ranks differ in %s%s:", label ? "the " : "", name);
    int groups = 0, more = 0;
    for (int r = 0; in && seen && r < size; r++) {
        if (seen[r])
            continue;
        memset(in, 0, (size_t)size);
        for (int q = r; q < size; q++)
            if (!seen[q] && sig_same(all, r, q, name))
                in[q] = seen[q] = 1;
        if (++groups > SIG_GROUPS) {   /* (no need to sort the rest: O(groups x ranks)) */
            more = 1;
            break;
        }
        const char *v = NULL;
        size_t vl = 0;
        char ranks[256];
        const int has = sig_value(all + (size_t)r * CLI_SIG_BYTES, CLI_SIG_BYTES, name, &v, &vl);
        rank_list(in, size, ranks, sizeof ranks);
        if (at < n)
            at += (size_t)snprintf(msg + at, n - at, "%s %.*s on rank%s %s", groups > 1 ? ";" : "",
                                   has ? (int)vl : 9, has ? v : "not given", strpbrk(ranks, ",-") ? "s" : "",
                                   ranks);
    }
    if (at < n)
        snprintf(msg + at, n - at, "%s (every rank of the job runs the same command with the same "
                 "checkpoint, mesh and report options: docs/mpi.md)", more ? "; and other values" : "");
    free(in);
    free(seen);
}

/* The first field, in rank r's order, on which some rank differs from rank r, into *name. */
static int first_difference(const char *all, int size, int r, char *name, size_t n)
{
    const char *p = all + (size_t)r * CLI_SIG_BYTES, *end = p + CLI_SIG_BYTES;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *eq = memchr(p, '=', (size_t)(end - p));
        if (!nl || !eq || eq > nl)
            return 0;
        snprintf(name, n, "%.*s", (int)(eq - p), p);
        for (int q = 0; q < size; q++)
            if (!sig_same(all, r, q, name))
                return 1;
        p = nl + 1;
    }
    return 0;
}

/* Rank 0: SL_OK when every rank's signature equals its own, byte for byte, else the message. The
 * field named is the first of rank 0's on which some rank differs, else (a rank with a field rank
 * 0 lacks) the first such of the first rank that differs. */
static sl_status job_compare(const char *all, int size, char *msg, size_t n)
{
    char name[64];
    int odd = 0;
    if (strlen(all) != (size_t)size * CLI_SIG_BYTES) {
        snprintf(msg, n, "rank 0: the ranks' commands did not arrive whole");
        return SL_E_INVALID_ARG;
    }
    for (int r = 1; r < size && !odd; r++)
        odd = memcmp(all, all + (size_t)r * CLI_SIG_BYTES, CLI_SIG_BYTES) != 0 ? r : 0;
    if (!odd)
        return SL_OK;
    if (first_difference(all, size, 0, name, sizeof name) || first_difference(all, size, odd, name, sizeof name))
        describe(all, size, name, msg, n);
    else   /* the same fields and values in another order: not made by this program */
        snprintf(msg, n, "ranks 0 and %d run different commands", odd);
    return SL_E_INVALID_ARG;
}

/* ---- the collective ----------------------------------------------------------------------- */

int cli_job_agree(const cli_sig *s)
{
    if (job_agreed || sl_dist_size() <= 1) {   /* one process: nothing to compare */
        job_agreed = 1;
        return CLI_EXIT_OK;
    }
    job_agreed = 1;
    char mine[CLI_SIG_BYTES + 1], msg[1024] = "", *all = NULL;
    memset(mine, ' ', CLI_SIG_BYTES);
    memcpy(mine, s->text, s->len);
    mine[CLI_SIG_BYTES] = '\0';
    sl_status st = sl_dist_gather_text(mine, &all);   /* the same calls on every rank */
    if (st != SL_OK)
        snprintf(msg, sizeof msg, "rank %d: out of memory comparing the ranks' commands", (int)sl_dist_rank());
    else if (sl_dist_rank() == 0)
        st = job_compare(all, (int)sl_dist_size(), msg, sizeof msg);
    free(all);
    st = sl_dist_agree(st, msg, msg, sizeof msg);
    if (st == SL_OK)
        return CLI_EXIT_OK;
    return sl_dist_rank() == 0 ? cli_fail("%s", msg) : CLI_EXIT_FAIL;
}

int cli_job_end(const char *command, int rc)
{
    if (job_joined && !job_agreed) {
        cli_sig s;
        char what[96];
        snprintf(what, sizeof what, "%.40s (ended with exit %d before the job began)", command ? command : "", rc);
        cli_sig_init(&s, what);
        const int agreed = cli_job_agree(&s);
        rc = agreed == CLI_EXIT_OK || rc != CLI_EXIT_OK ? rc : agreed;
    }
    if (job_joined)
        sl_dist_finalize();
    return rc;
}
