/* hf_cache.c - "hf://org/name[@revision]" to a snapshot folder of a Hugging Face hub cache.
 *
 * The cache (huggingface_hub's layout) keeps one folder per model, models--org--name, with
 * refs/<revision> (a file holding a commit hash), snapshots/<commit>/ (the files, as links into
 * blobs/) and blobs/ (named by their sha256 for LFS files). Resolving is reading one small ref file:
 * no network, and the snapshot is then an ordinary checkpoint folder.
 *
 * The reference comes from a user and becomes a path, so every part is checked before use: a name
 * or revision with "..", an empty part or a byte outside the hub's alphabet would otherwise reach
 * outside the cache. */
#include "common/sl_err.h"
#include "common/sl_file.h"
#include "common/sl_text.h"
#include "shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HF_PREFIX "hf://"
#define HF_COMMIT_LEN 40
#define HF_REF_MAX 4096 /* a ref file holds one hash; anything longer is not a ref */

/* The hub's repo names and revisions: letters, digits, '-', '_', '.' (and '/' between the parts of
 * a revision such as refs/pr/1, checked by the caller). */
static int hf_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

/* One path component [s, s+n): non-empty, not "." or "..", only hub characters. */
static int hf_part_ok(const char *s, size_t n)
{
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!hf_char_ok(s[i]))
            return 0;
    return 1;
}

/* "a/b/c" with every part valid and at most max_parts parts. */
static int hf_path_ok(const char *s, size_t n, int max_parts)
{
    int parts = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '/')
            continue;
        if (!hf_part_ok(s + start, i - start) || ++parts > max_parts)
            return 0;
        start = i + 1;
    }
    return 1;
}

static int hf_is_commit(const char *s, size_t n)
{
    return sl_text_is_hex(s, n, HF_COMMIT_LEN);
}

static int hf_is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

typedef struct hf_ref {
    const char *ref;  /* the whole reference, for messages */
    const char *repo; /* org/name, repo_len bytes */
    size_t repo_len;
    const char *rev; /* revision, rev_len bytes ("main" when none was given) */
    size_t rev_len;
} hf_ref;

static sl_status hf_parse(const char *ref, hf_ref *r, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    if (strncmp(ref, HF_PREFIX, strlen(HF_PREFIX)) != 0)
        return sl_err_set(err, SL_E_INVALID_ARG, "'%s' is not an hf://org/name[@revision] reference",
                          sl_text_name(ref, nb, sizeof nb));
    r->ref = ref;
    r->repo = ref + strlen(HF_PREFIX);
    const char *at = strchr(r->repo, '@');
    r->repo_len = at ? (size_t)(at - r->repo) : strlen(r->repo);
    r->rev = at ? at + 1 : "main";
    r->rev_len = strlen(r->rev);
    if (!hf_path_ok(r->repo, r->repo_len, 2))
        return sl_err_set(err, SL_E_INVALID_ARG,
                          "%s: the model must be org/name or name (letters, digits, '-', '_', '.')",
                          sl_text_name(ref, nb, sizeof nb));
    if (!hf_path_ok(r->rev, r->rev_len, 8))
        return sl_err_set(err, SL_E_INVALID_ARG,
                          "%s: the revision must be a branch, tag or commit (letters, digits, '-', "
                          "'_', '.', '/'; no '..')",
                          sl_text_name(ref, nb, sizeof nb));
    return SL_OK;
}

/* "<cache>/models--org--name" into buf. */
static sl_status hf_model_dir(const hf_ref *r, const char *cache, char *buf, size_t n, sl_err *err)
{
    size_t len = (size_t)snprintf(buf, n, "%s/models--", cache);
    for (size_t i = 0; i < r->repo_len && len + 2 < n; i++) {
        if (r->repo[i] == '/') {
            buf[len++] = '-';
            buf[len++] = '-';
        } else {
            buf[len++] = r->repo[i];
        }
    }
    if (len + 1 >= n)
        return sl_err_set(err, SL_E_INVALID_ARG, "hf: the cache path is too long");
    buf[len] = '\0';
    return SL_OK;
}

/* The commit refs/<rev> names, into commit[HF_COMMIT_LEN + 1]. */
static sl_status hf_read_ref(const hf_ref *r, const char *model_dir, char *commit, sl_err *err)
{
    char path[4096], nb[SL_TEXT_NAME], pb[SL_TEXT_NAME];
    if ((size_t)snprintf(path, sizeof path, "%s/refs/%.*s", model_dir, (int)r->rev_len, r->rev) >=
        sizeof path)
        return sl_err_set(err, SL_E_INVALID_ARG, "hf: the cache path is too long");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sl_err_set(err, SL_E_NOT_FOUND, "%s: no revision '%.*s' in the Hugging Face cache (%s is missing)",
                          sl_text_name(r->ref, nb, sizeof nb), (int)r->rev_len, r->rev,
                          sl_text_name(path, pb, sizeof pb));
    char *text = NULL;
    size_t len = 0;
    sl_status st = sl_file_read_all(path, HF_REF_MAX, SL_E_NOT_FOUND, err, &text, &len);
    if (st != SL_OK)
        return st;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        len--;
    if (!hf_is_commit(text, len)) {
        free(text);
        return sl_err_set(err, SL_E_NOT_FOUND, "%s: does not hold a 40-digit commit hash",
                          sl_text_name(path, pb, sizeof pb));
    }
    memcpy(commit, text, HF_COMMIT_LEN);
    commit[HF_COMMIT_LEN] = '\0';
    free(text);
    return SL_OK;
}

static sl_status hf_resolve(const char *ref, const char *cache, char *out, size_t outlen, sl_err *err)
{
    char nb[SL_TEXT_NAME], pb[SL_TEXT_NAME];
    if (!ref || !cache || !out || outlen == 0)
        return sl_err_set(err, SL_E_INVALID_ARG, "sl_hf_resolve: NULL argument");
    hf_ref r = {0};
    char model_dir[4096], commit[HF_COMMIT_LEN + 1];
    sl_status st = hf_parse(ref, &r, err);
    if (st == SL_OK)
        st = hf_model_dir(&r, cache, model_dir, sizeof model_dir, err);
    if (st != SL_OK)
        return st;
    if (!hf_is_dir(model_dir))
        return sl_err_set(err, SL_E_NOT_FOUND, "%s: not in the Hugging Face cache %s (no %s)",
                          sl_text_name(ref, nb, sizeof nb), sl_text_name(cache, pb, sizeof pb),
                          strrchr(model_dir, '/') + 1);
    /* A commit given as the revision names its snapshot directly (there is no ref for it). */
    if (hf_is_commit(r.rev, r.rev_len)) {
        memcpy(commit, r.rev, HF_COMMIT_LEN);
        commit[HF_COMMIT_LEN] = '\0';
    } else if ((st = hf_read_ref(&r, model_dir, commit, err)) != SL_OK) {
        return st;
    }
    if ((size_t)snprintf(out, outlen, "%s/snapshots/%s", model_dir, commit) >= outlen)
        return sl_err_set(err, SL_E_INVALID_ARG, "sl_hf_resolve: the output buffer is too small");
    if (!hf_is_dir(out))
        return sl_err_set(err, SL_E_NOT_FOUND, "%s: snapshot %s is not in the cache (%s is missing)",
                          sl_text_name(ref, nb, sizeof nb), commit, sl_text_name(out, pb, sizeof pb));
    return SL_OK;
}

sl_status sl_hf_resolve(const char *ref, const char *hub_cache, char *out, size_t outlen, char *err,
                        size_t errlen)
{
    sl_err e = {0};
    const sl_status st = hf_resolve(ref, hub_cache, out, outlen, &e);
    if (st != SL_OK && out && outlen)
        out[0] = '\0';
    sl_err_export(&e, err, errlen);
    sl_err_clear(&e);
    return st;
}
