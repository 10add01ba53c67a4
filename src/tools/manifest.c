/* manifest.c - sl_write_manifest: a sha256sum file of a checkpoint folder's files, so that a
 * folder synth or reshard wrote (which no Hugging Face cache names by digest) can be loaded with
 * --verify --manifest later. The files are the ones a load of the folder reads (the checkpoint
 * opener lists and validates them). Written to a temporary name, synced and renamed
 * (sl_file_write_atomic), so a crash never leaves a partial manifest under the final name.
 *
 * After each file's sha256sum line come comment lines (sha256sum -c skips lines starting with
 * '#', --strict too) holding the XXH3-64 of each RD_BLOCK_BYTES block of file offset, so that a
 * load that reads only part of a file can verify what it reads (read_verify.h has the layout):
 *
 *   <sha256>  model-00001-of-00002.safetensors
 *   #xxh3-blocks <size> <header end> <block bytes> model-00001-of-00002.safetensors
 *   #b <16 hex> <16 hex> ...            (RD_BLOCK_PER_LINE a line, block 0 first)
 *
 * and, last, a sha256sum line for each of the folder's config.json and index (RD_SIDE_FILES), which
 * a load checks whole: the config decides what a pre-sharded folder's parts are. */
#include "common/sl_bytes.h"
#include "common/sl_cancel.h"
#include "common/sl_err.h"
#include "common/sl_file.h"
#include "common/sl_sha256.h"
#include "common/sl_text.h"
#include "load/read_manifest.h"
#include "load/read_verify.h"
#include "shardload.h"
#include "tools/tools_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MF_BUF ((size_t)8 << 20)   /* whole blocks, so each block is hashed from one buffer */
_Static_assert(MF_BUF % RD_BLOCK_BYTES == 0, "the read buffer holds whole blocks");

/* One file's digests: the SHA-256 of the whole, the XXH3-64 of each block, the header's end. */
typedef struct mf_digest {
    char hex[SL_SHA256_HEX];
    uint64_t size, header_end;
    uint64_t *blocks;    /* ceil(size / RD_BLOCK_BYTES) */
    uint64_t n_blocks;
} mf_digest;

/* The 8-byte header length, bounded by the size (the checkpoint opener validated the header; a
 * file changed since then gets a header end that its blocks, hashed from the same bytes, cover). */
static void mf_header_end(const unsigned char *first, uint64_t size, mf_digest *d)
{
    const uint64_t len = size >= 8 ? sl_load_le64(first) : 0;
    d->header_end = size >= 8 && len <= size - 8 ? 8 + len : size;
}

static void mf_blocks(const unsigned char *buf, size_t n, uint64_t off, mf_digest *d)
{
    for (size_t k = 0; k < n; k += RD_BLOCK_BYTES) {
        const size_t len = n - k < RD_BLOCK_BYTES ? n - k : RD_BLOCK_BYTES;
        d->blocks[(off + k) / RD_BLOCK_BYTES] = rd_block_hash(buf + k, len);
    }
}

static sl_status mf_hash(const char *path, unsigned char *buf, mf_digest *d, sl_err *err)
{
    char nb[SL_TEXT_NAME];
    struct stat sb;
    const int fd = sl_file_open_regular(path, &sb);
    if (fd < 0)
        return sl_err_set(err, SL_E_IO, "%s: cannot open: %s", sl_text_name(path, nb, sizeof nb),
                          fd == SL_FILE_NOT_REGULAR ? "not a regular file" : strerror(errno));
    d->size = (uint64_t)sb.st_size;
    d->n_blocks = d->size / RD_BLOCK_BYTES + (d->size % RD_BLOCK_BYTES != 0);
    d->header_end = 0;
    free(d->blocks);
    d->blocks = calloc((size_t)d->n_blocks + 1, sizeof *d->blocks);
    sl_sha256 *h = d->blocks ? sl_sha256_new() : NULL;
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
        if (st == SL_OK && off == 0)
            mf_header_end(buf, d->size, d);
        if (st == SL_OK)
            mf_blocks(buf, n, off, d);
        off += n;
    }
    if (st == SL_OK && sl_sha256_final_hex(h, d->hex) != 0)
        st = sl_err_set(err, SL_E_IO, "%s: SHA-256 failed", sl_text_name(path, nb, sizeof nb));
    sl_sha256_free(h);
    close(fd);
    return st;
}

/* One file's lines: its sha256sum line, then its block record. */
static int mf_print(FILE *f, const char *name, const mf_digest *d)
{
    if (fprintf(f, "%s  %s\n%s %llu %llu %llu %s\n", d->hex, name, RD_BLOCK_TAG,
                (unsigned long long)d->size, (unsigned long long)d->header_end,
                (unsigned long long)RD_BLOCK_BYTES, name) < 0)
        return -1;
    for (uint64_t k = 0; k < d->n_blocks; k++) {
        const int first = k % RD_BLOCK_PER_LINE == 0;
        const int last = k % RD_BLOCK_PER_LINE == RD_BLOCK_PER_LINE - 1 || k + 1 == d->n_blocks;
        if (fprintf(f, "%s%016llx%s", first ? RD_BLOCK_LINE " " : " ",
                    (unsigned long long)d->blocks[k], last ? "\n" : "") < 0)
            return -1;
    }
    return 0;
}

/* The folder's JSON files (RD_SIDE_FILES) that it has: a sha256sum line each, no blocks (a load
 * checks them whole, rd_manifest_check_side: config.json decides the layout of the parts). */
static sl_status mf_side_lines(const char *dir, FILE *f, unsigned char *buf, mf_digest *d, sl_err *err)
{
    static const char *const side[] = RD_SIDE_FILES;
    char path[4096];
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, side[i]);
        if (stat(path, &sb) != 0 && errno == ENOENT)
            continue;
        SL_TRY(mf_hash(path, buf, d, err));
        if (fprintf(f, "%s  %s\n", d->hex, side[i]) < 0)
            return sl_err_set(err, SL_E_IO, "manifest: write failed: %s", strerror(errno));
    }
    return SL_OK;
}

/* Every file of ck hashed into f (names relative to its folder), then its side files. */
static sl_status mf_write_lines(const sl_checkpoint *ck, const char *dir, FILE *f, sl_err *err)
{
    unsigned char *buf = malloc(MF_BUF);
    mf_digest d = {0};
    if (!buf)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    sl_status st = fprintf(f, "# %s\n", RD_BLOCK_COMMENT) < 0
                       ? sl_err_set(err, SL_E_IO, "manifest: write failed: %s", strerror(errno)) : SL_OK;
    for (int64_t i = 0; i < sl_checkpoint_file_count(ck) && st == SL_OK; i++) {
        const char *path = sl_checkpoint_file_path(ck, i), *base = strrchr(path, '/');
        if ((st = mf_hash(path, buf, &d, err)) == SL_OK && mf_print(f, base ? base + 1 : path, &d) != 0)
            st = sl_err_set(err, SL_E_IO, "manifest: write failed: %s", strerror(errno));
    }
    if (st == SL_OK)
        st = mf_side_lines(dir, f, buf, &d, err);
    free(d.blocks);
    free(buf);
    return st;
}

/* The manifest is built in memory (about 17 bytes a block: 12 MB for 700 GB) and written whole,
 * so that it lands as every other output does: mode 0644, synced, renamed into place. */
static sl_status mf_write(const char *dir, const char *name, sl_err *err)
{
    if (!sl_sha256_available())
        return sl_err_set(err, SL_E_UNSUPPORTED, "manifest: this build has no SHA-256 (rebuild with "
                          "OpenSSL's libcrypto: Debian libssl-dev)");
    sl_checkpoint *ck = NULL;
    char *final = NULL, *text = NULL;
    size_t len = 0;
    FILE *f = NULL;
    sl_status st = sl_checkpoint_open(dir, &ck);
    if (st != SL_OK)
        st = sl_err_set(err, st, "%s", ck ? sl_checkpoint_errmsg(ck) : "out of memory");
    if (st == SL_OK && (asprintf(&final, "%s/%s", dir, name) < 0 || !(f = open_memstream(&text, &len))))
        st = sl_err_set(err, SL_E_NOMEM, "out of memory");
    if (st == SL_OK)
        st = mf_write_lines(ck, dir, f, err);
    if (f && fclose(f) != 0 && st == SL_OK)
        st = sl_err_set(err, SL_E_NOMEM, "manifest: out of memory");
    if (st == SL_OK)
        st = sl_file_write_atomic(final, text, len, err);
    sl_checkpoint_close(ck);
    free(final);
    free(text);
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
        st = mf_write(dir, name ? name : SL_TOOLS_MANIFEST, &e);
    sl_err_export(&e, err, errlen);
    sl_err_clear(&e);
    return st;
}
