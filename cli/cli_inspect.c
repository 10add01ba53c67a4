/* cli_inspect.c - `shardload inspect PATH [--json]`: validate a checkpoint (file or directory) and
 * list its files, tensors, totals and __metadata__. Exit 0 valid, 1 invalid (one line on stderr),
 * 2 usage error. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inspect_help(FILE *out)
{
    fprintf(out, "usage: shardload inspect PATH [--json] [remote options]\n\n"
                 "Validates a .safetensors file, or a directory of shards (with or without\n"
                 "model.safetensors.index.json), and lists its files, tensors and metadata.\n\n"
                 "  --json   machine-readable output: {\"files\":[...],\"tensors\":[...],\"total_bytes\":N,\n"
                 "           \"metadata\":{...},\"warnings\":[...]}\n"
                 "  --help   this text\n"
                 "A remote PATH (http(s)://, s3://: docs/remote.md) takes:\n" CLI_REMOTE_HELP "\n"
                 "Warnings (odd but valid, e.g. an index total_size that disagrees with the shards)\n"
                 "go to stderr as 'shardload: warning: ...' and do not change the exit status.\n"
                 "Exit status: 0 valid, 1 invalid (one line on stderr), 2 usage error.\n");
}

static void print_shape(const sl_tensor_info *t, const char *sep)
{
    putchar('[');
    for (uint32_t d = 0; d < t->ndim; d++)
        printf("%s%" PRIu64, d ? sep : "", t->shape[d]);
    putchar(']');
}

static void inspect_json_files(const sl_checkpoint *ck)
{
    printf("{\"files\":[");
    for (int64_t f = 0; f < sl_checkpoint_file_count(ck); f++) {
        printf(f ? "," : "");
        cli_json_str(stdout, sl_checkpoint_file_path(ck, f));
    }
    printf("],\"tensors\":[");
    sl_tensor_info t;
    for (int64_t i = 0; sl_checkpoint_tensor(ck, i, &t) == SL_OK; i++) {
        printf("%s{\"name\":", i ? "," : "");
        cli_json_str(stdout, t.name);
        printf(",\"dtype\":\"%s\",\"shape\":", sl_dtype_name(t.dtype));
        print_shape(&t, ",");
        printf(",\"file\":");
        cli_json_str(stdout, sl_checkpoint_file_path(ck, t.file));
        printf(",\"offset\":%" PRIu64 ",\"nbytes\":%" PRIu64 "}", t.offset, t.nbytes);
    }
    printf("]");
}

static void inspect_json(const sl_checkpoint *ck)
{
    inspect_json_files(ck);
    printf(",\"total_bytes\":%" PRIu64 ",\"metadata\":{", sl_checkpoint_total_bytes(ck));
    for (int64_t f = 0; f < sl_checkpoint_file_count(ck); f++) {
        printf(f ? "," : "");
        cli_json_str(stdout, sl_checkpoint_file_path(ck, f));
        printf(":{");
        const char *k, *v;
        for (int64_t i = 0; sl_checkpoint_metadata(ck, f, i, &k, &v) == SL_OK; i++) {
            printf(i ? "," : "");
            cli_json_str(stdout, k);
            putchar(':');
            cli_json_str(stdout, v);
        }
        putchar('}');
    }
    printf("},\"warnings\":[");
    for (int64_t i = 0; i < sl_checkpoint_warning_count(ck); i++) {
        printf(i ? "," : "");
        cli_json_str(stdout, sl_checkpoint_warning(ck, i));
    }
    printf("]}\n");
}

/* Tensors per file, counted in one pass over the tensors (not one pass per file: a checkpoint of
 * 20,000 small shards would take seconds). NULL when out of memory. */
static int64_t *inspect_file_counts(const sl_checkpoint *ck, int64_t nf)
{
    int64_t *count = calloc((size_t)nf + 1, sizeof(*count));
    sl_tensor_info t;
    for (int64_t i = 0; count && sl_checkpoint_tensor(ck, i, &t) == SL_OK; i++) {
        if (t.file >= 0 && t.file < nf)
            count[t.file]++;
    }
    return count;
}

static int inspect_text(const sl_checkpoint *ck)
{
    char b1[40], b2[40];
    const int64_t nf = sl_checkpoint_file_count(ck), nt = sl_checkpoint_tensor_count(ck);
    int64_t *count = inspect_file_counts(ck, nf);
    if (!count)
        return cli_fail("out of memory");
    char nb[CLI_TEXT_NAME], vb[CLI_TEXT_NAME];
    printf("files (%" PRId64 "):\n", nf);
    for (int64_t f = 0; f < nf; f++) {
        fputs("  ", stdout);
        cli_put_text(stdout, sl_checkpoint_file_path(ck, f));
        printf("  %s bytes  %" PRId64 " tensors\n", cli_commas(sl_checkpoint_file_size(ck, f), b1, sizeof b1),
               count[f]);
    }
    free(count);
    printf("tensors (%" PRId64 "):\n", nt);
    sl_tensor_info t;
    for (int64_t i = 0; sl_checkpoint_tensor(ck, i, &t) == SL_OK; i++) {
        printf("  %s  %s  ", cli_text(t.name, nb, sizeof nb), sl_dtype_name(t.dtype));
        print_shape(&t, ", ");
        printf("  %s bytes  ", cli_commas(t.nbytes, b1, sizeof b1));
        cli_put_text(stdout, sl_checkpoint_file_path(ck, t.file));
        putchar('\n');
    }
    printf("total: %" PRId64 " files, %" PRId64 " tensors, %s data bytes\n", nf, nt,
           cli_commas(sl_checkpoint_total_bytes(ck), b2, sizeof b2));
    for (int64_t f = 0; f < nf; f++) {
        const char *k, *v;
        for (int64_t i = 0; sl_checkpoint_metadata(ck, f, i, &k, &v) == SL_OK; i++) {
            if (i == 0) {
                fputs("__metadata__ of ", stdout);
                cli_put_text(stdout, sl_checkpoint_file_path(ck, f));
                fputs(":\n", stdout);
            }
            printf("  %s = %s\n", cli_text(k, nb, sizeof nb), cli_text(v, vb, sizeof vb));
        }
    }
    return CLI_EXIT_OK;
}

int cli_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, rc = CLI_EXIT_OK;
    sl_load_opts lo;   /* a remote checkpoint's settings (cli_remote.c) */
    sl_load_opts_init(&lo);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return inspect_help(stdout), CLI_EXIT_OK;
        if (cli_remote_arg("inspect", &lo, argc, argv, &i, &rc)) {
            if (rc != CLI_EXIT_OK)
                return rc;
        } else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (path)
            return cli_usage_error("inspect", "more than one PATH ('%s' and '%s')", path, argv[i]);
        else
            path = argv[i];
    }
    if (!path)
        return cli_usage_error("inspect", "missing PATH");
    char pb[CLI_PATH_MAX];
    if (cli_ckpt_path(path, pb, sizeof pb, &path) != CLI_EXIT_OK)
        return CLI_EXIT_FAIL;
    sl_checkpoint *ck = NULL;
    const sl_status st = cli_remote_open(path, &lo, &ck);
    if (st != SL_OK) {
        rc = cli_fail("%s", ck ? sl_checkpoint_errmsg(ck) : "out of memory");
        sl_checkpoint_close(ck);
        return rc;
    }
    cli_warnings(ck);
    if (json)
        inspect_json(ck);
    else
        rc = inspect_text(ck);
    sl_checkpoint_close(ck);
    return rc;
}
