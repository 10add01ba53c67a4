/* fuzz_header.c - sl_validate_buffer on arbitrary bytes. When a buffer is accepted, the internal
 * parse must agree with it and the result must satisfy the format's invariants (tensors tile the
 * data buffer in order, sizes match dtype and shape). */
#include "format/st_format.h"

#include <stdlib.h>

static void check_invariants(const uint8_t *data, size_t size)
{
    sl_err e = {0};
    st_header h;
    const uint64_t n = sl_load_le64(data);
    if (st_header_parse(data + 8, (size_t)n, size, &h, &e) != SL_OK)
        abort();   /* the public and internal paths disagree */
    uint64_t start = 0;
    for (size_t i = 0; i < h.n_tensors; i++) {
        const st_tensor *t = &h.tensors[i];
        uint64_t nb = 0;
        if (t->begin != start || t->end < t->begin || strlen(t->name) != t->name_len)
            abort();
        if (st_tensor_nbytes(t->dtype, t->ndim, t->shape, &nb) != SL_OK || nb != t->end - t->begin)
            abort();
        start = t->end;
    }
    if (start != size - 8 - n || h.data_start != 8 + n)
        abort();
    st_header_free(&h);
    sl_err_clear(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    const sl_status st = sl_validate_buffer(data, size, "fuzz", err, sizeof err);
    if (st == SL_OK)
        check_invariants(data, size);
    else if (strncmp(err, "fuzz: ", 6) != 0)
        abort();   /* every failure names the file */
    return 0;
}
