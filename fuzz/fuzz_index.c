/* fuzz_index.c - sl_validate_index_buffer on arbitrary bytes; failures must name the file. */
#include "shardload.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    const sl_status st = sl_validate_index_buffer(data, size, err, sizeof err);
    if (st != SL_OK && (st != SL_E_INDEX && st != SL_E_NOMEM))
        abort();
    if (st != SL_OK && strncmp(err, "model.safetensors.index.json: ", 30) != 0)
        abort();
    return 0;
}
