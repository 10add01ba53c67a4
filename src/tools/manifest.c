/* manifest.c - sl_write_manifest: a sha256sum file of a checkpoint folder's files, so that a
 * folder synth or reshard wrote (which no Hugging Face cache names by digest) can be loaded with
 * --verify --manifest later. The files are the ones a load of the folder reads (the checkpoint
 * opener lists and validates them). Written to a temporary name and renamed, so a crash never
 * leaves a partial manifest under the final name. */
#include "common/sl_cancel.h"
#include "common/sl_err.h"
#include "common/sl_file.h"
#include "common/sl_sha256.h"
#include "common/sl_text.h"
#include "shardload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MF_BUF ((size_t)8 << 20)

static sl_status mf_hash(const char *path, unsigned char *buf, char hex[SL_SHA256_HEX], sl_err *err)
{
    char nb[SL_TEXT_NAME];
    struct stat sb;
    const int fd = sl_file_open_regular(path, &sb);
    if (fd < 0)
        return sl_err_set(err, SL_E_IO, "%s: cannot open: %s", sl_text_name(path, nb, sizeof nb),
                          fd == SL_FILE_NOT_REGULAR ? "not a regular file" : strerror(errno));
    sl_sha256 *h = sl_sha256_new();
    sl_status st = h ? SL_OK : sl_err_set(err, SL_E_NOMEM, "out of memory");
    for (uint64_t off = 0; st == SL_OK && off < (uint64_t)sb.st_size;) {
        const size_t n = (uint64_t)sb.st_size - off < MF_BUF ? (size_t)((uint64_t)sb.st_size - off) : MF_BUF;
        if (sl_cancel_requested())
            st = sl_err_set(err, SL_E_CANCELLED, "%s: cancelled", sl_text_name(path, nb, sizeof nb));
        else if (sl_pread_full(fd, buf, n, off) != 0)
            st = sl_err_set(err, SL_E_IO, "%s: read error at offset %llu: %s",
                            sl_text_name(path, nb, sizeof nb), (unsigned long long)off,
                            errno ? strerror(errno) : "file shorter than its size");
        else if (sl_sha256_update(h, buf, n) != 0)
            st = sl_err_set(err, SL_E_IO, "%s: SHA-256 failed", sl_text_name(path, nb, sizeof nb));
        off += n;
    }
    if (st == SL_OK && sl_sha256_final_hex(h, hex) != 0)
        st = sl_err_set(err, SL_E_IO, "%s: SHA-256 failed", sl_text_name(path, nb, sizeof nb));
    sl_sha256_free(h);
    close(fd);
    return st;
}

/* Every file of ck hashed into f, one "<hex>  <name>" line each (names relative to its folder). */
static sl_status mf_write_lines(const sl_checkpoint *ck, FILE *f, sl_err *err)
{
    unsigned char *buf = malloc(MF_BUF);
    if (!buf)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    sl_status st = SL_OK;
    for (int64_t i = 0; i < sl_checkpoint_file_count(ck) && st == SL_OK; i++) {
        const char *path = sl_checkpoint_file_path(ck, i), *base = strrchr(path, '/');
        char hex[SL_SHA256_HEX];
        if ((st = mf_hash(path, buf, hex, err)) == SL_OK && fprintf(f, "%s  %s\n", hex, base ? base + 1 : path) < 0)
            st = sl_err_set(err, SL_E_IO, "manifest: write failed: %s", strerror(errno));
    }
    free(buf);
    return st;
}

static sl_status mf_write(const char *dir, const char *name, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    if (!sl_sha256_available())
        return sl_err_set(err, SL_E_UNSUPPORTED, "manifest: this build has no SHA-256 (rebuild with "
                          "OpenSSL's libcrypto: Debian libssl-dev)");
    sl_checkpoint *ck = NULL;
    char *final = NULL, *tmp = NULL;
    sl_status st = sl_checkpoint_open(dir, &ck);
    if (st != SL_OK)
        st = sl_err_set(err, st, "%s", ck ? sl_checkpoint_errmsg(ck) : "out of memory");
    if (st == SL_OK && (asprintf(&final, "%s/%s", dir, name) < 0 ||
                        asprintf(&tmp, "%s/.%s.tmp.XXXXXX", dir, name) < 0))
        st = sl_err_set(err, SL_E_NOMEM, "out of memory");
    int fd = -1;
    if (st == SL_OK && (fd = mkstemp(tmp)) < 0)
        st = sl_err_set(err, SL_E_IO, "%s: cannot create: %s", sl_text_name(tmp, nb, sizeof nb),
                        strerror(errno));
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && !f) {
        close(fd);
        st = sl_err_set(err, SL_E_NOMEM, "out of memory");
    }
    if (st == SL_OK)
        st = mf_write_lines(ck, f, err);
    if (f && fclose(f) != 0 && st == SL_OK)
        st = sl_err_set(err, SL_E_IO, "%s: write failed: %s", sl_text_name(tmp, nb, sizeof nb),
                        strerror(errno));
    if (st == SL_OK && rename(tmp, final) != 0)
        st = sl_err_set(err, SL_E_IO, "%s: rename: %s", sl_text_name(final, nb, sizeof nb), strerror(errno));
    if (st != SL_OK && fd >= 0)
        unlink(tmp);
    sl_checkpoint_close(ck);
    free(final);
    free(tmp);
    return st;
}

sl_status sl_write_manifest(const char *dir, const char *name, char *err, size_t errlen)
{
    sl_err e = {0};
    sl_status st;
    if (!dir)
        st = sl_err_set(&e, SL_E_INVALID_ARG, "sl_write_manifest: NULL folder");
    else if (name && (!*name || strchr(name, '/')))
        st = sl_err_set(&e, SL_E_INVALID_ARG, "sl_write_manifest: the manifest's name must be a "
                        "file name, without '/'");
    else
        st = mf_write(dir, name ? name : "SHA256SUMS", &e);
    sl_err_export(&e, err, errlen);
    sl_err_clear(&e);
    return st;
}
