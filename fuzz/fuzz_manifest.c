/* fuzz_manifest.c - rd_manifest_parse (--verify --manifest FILE) on arbitrary bytes, for a fixed
 * checkpoint of four files: the three shards of the seed corpus's synthetic checkpoint (sizes as
 * `shardload synth` wrote them) and a 1 TiB file, whose block record must not make the parser
 * allocate for more hashes than the manifest can hold. A failure is a status with a message naming
 * the manifest or the file; a success leaves every file with no blocks or with all of them. */
#include "load/read_manifest.h"
#include "load/read_verify.h"

#include <stdlib.h>
#include <string.h>

#define FZ_MANIFEST "SHA256SUMS"
#define FZ_NFILES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void files_init(rd_vfile *v)
{
    static const struct {
        const char *path;
        uint64_t size;
    } files[FZ_NFILES] = {{"/ckpt/model-00001-of-00003.safetensors", 90656},
                          {"/ckpt/model-00002-of-00003.safetensors", 91424},
                          {"model-00003-of-00003.safetensors", 99296},
                          {"/ckpt/model.safetensors", (uint64_t)1 << 40}};
    memset(v, 0, FZ_NFILES * sizeof *v);
    for (int i = 0; i < FZ_NFILES; i++) {
        v[i].path = files[i].path;
        v[i].size = files[i].size;
    }
}

static void check_success(const rd_vfile *v)
{
    for (int i = 0; i < FZ_NFILES; i++) {
        const rd_vfile *f = &v[i];
        if (f->source && (strlen(f->want) != 64 || strcmp(f->source, "the manifest") != 0))
            abort();
        if (!f->blocks)
            continue;
        const uint64_t b = f->block;
        if (b < RD_BLOCK_MIN || b > RD_BLOCK_MAX || (b & (b - 1)) || f->header_end > f->size ||
            f->n_blocks != f->size / b + (f->size % b != 0))
            abort();
    }
}

static int names_file(const char *msg)
{
    static const char *const names[] = {FZ_MANIFEST ": ", "/ckpt/model-00001-of-00003.safetensors: ",
                                        "/ckpt/model-00002-of-00003.safetensors: ",
                                        "model-00003-of-00003.safetensors: ",
                                        "/ckpt/model.safetensors: "};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(msg, names[i], strlen(names[i])) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd_vfile v[FZ_NFILES];
    sl_err err = {0};
    files_init(v);
    const sl_status st = rd_manifest_parse(v, FZ_NFILES, FZ_MANIFEST, (const char *)data, size, &err);
    if (st == SL_OK)
        check_success(v);
    else if ((st != SL_E_INVALID_ARG && st != SL_E_INTEGRITY && st != SL_E_NOMEM) ||
             !names_file(sl_err_msg(&err)))
        abort();   /* a failure is one of the documented statuses, and names the file */
    for (int i = 0; i < FZ_NFILES; i++) {
        /* a record's hashes are 17 bytes each of the manifest: its array is never larger */
        if (v[i].blocks && v[i].n_blocks > size / 17)
            abort();
        free(v[i].blocks);
    }
    sl_err_clear(&err);
    return 0;
}
