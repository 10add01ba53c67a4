/* sl_dtype.c - the safetensors dtype table: names and element sizes, in shardload.h's enum order. */
#include "shardload.h"

#include <string.h>

static const struct {
    const char *name;
    unsigned bits;
} sl_dtypes[SL_DTYPE_COUNT] = {
    [SL_DTYPE_BOOL] = {"BOOL", 8},           [SL_DTYPE_F4] = {"F4", 4},
    [SL_DTYPE_F6_E2M3] = {"F6_E2M3", 6},     [SL_DTYPE_F6_E3M2] = {"F6_E3M2", 6},
    [SL_DTYPE_U8] = {"U8", 8},               [SL_DTYPE_I8] = {"I8", 8},
    [SL_DTYPE_F8_E5M2] = {"F8_E5M2", 8},     [SL_DTYPE_F8_E4M3] = {"F8_E4M3", 8},
    [SL_DTYPE_F8_E8M0] = {"F8_E8M0", 8},     [SL_DTYPE_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [SL_DTYPE_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [SL_DTYPE_I16] = {"I16", 16},            [SL_DTYPE_U16] = {"U16", 16},
    [SL_DTYPE_F16] = {"F16", 16},            [SL_DTYPE_BF16] = {"BF16", 16},
    [SL_DTYPE_I32] = {"I32", 32},            [SL_DTYPE_U32] = {"U32", 32},
    [SL_DTYPE_F32] = {"F32", 32},            [SL_DTYPE_C64] = {"C64", 64},
    [SL_DTYPE_F64] = {"F64", 64},            [SL_DTYPE_I64] = {"I64", 64},
    [SL_DTYPE_U64] = {"U64", 64},
};

const char *sl_dtype_name(sl_dtype dt)
{
    return (unsigned)dt < SL_DTYPE_COUNT ? sl_dtypes[dt].name : NULL;
}

unsigned sl_dtype_bits(sl_dtype dt)
{
    return (unsigned)dt < SL_DTYPE_COUNT ? sl_dtypes[dt].bits : 0;
}

int sl_dtype_from_name(const char *name, size_t len, sl_dtype *out)
{
    if (!name || !out)
        return -1;
    for (int i = 0; i < SL_DTYPE_COUNT; i++) {
        if (strlen(sl_dtypes[i].name) == len && memcmp(sl_dtypes[i].name, name, len) == 0) {
            *out = (sl_dtype)i;
            return 0;
        }
    }
    return -1;
}
