/* sl_status.c - names of statuses and dtypes. */
#include "shardload.h"

#include <string.h>

const char *sl_status_str(sl_status st)
{
    switch (st) {
    case SL_OK: return "SL_OK";
    case SL_E_HEADER_TOO_SMALL: return "SL_E_HEADER_TOO_SMALL";
    case SL_E_HEADER_TOO_LARGE: return "SL_E_HEADER_TOO_LARGE";
    case SL_E_HEADER_LENGTH: return "SL_E_HEADER_LENGTH";
    case SL_E_HEADER_UTF8: return "SL_E_HEADER_UTF8";
    case SL_E_HEADER_JSON: return "SL_E_HEADER_JSON";
    case SL_E_INVALID_OFFSET: return "SL_E_INVALID_OFFSET";
    case SL_E_OVERFLOW: return "SL_E_OVERFLOW";
    case SL_E_MISALIGNED: return "SL_E_MISALIGNED";
    case SL_E_TENSOR_INFO: return "SL_E_TENSOR_INFO";
    case SL_E_INCOMPLETE: return "SL_E_INCOMPLETE";
    case SL_E_POLICY: return "SL_E_POLICY";
    case SL_E_INDEX: return "SL_E_INDEX";
    case SL_E_NOT_FOUND: return "SL_E_NOT_FOUND";
    case SL_E_DUPLICATE: return "SL_E_DUPLICATE";
    case SL_E_IO: return "SL_E_IO";
    case SL_E_NOMEM: return "SL_E_NOMEM";
    case SL_E_INVALID_ARG: return "SL_E_INVALID_ARG";
    case SL_E_UNSUPPORTED: return "SL_E_UNSUPPORTED";
    case SL_E_CONFIG: return "SL_E_CONFIG";
    case SL_E_SHAPE: return "SL_E_SHAPE";
    case SL_E_DIVISIBILITY: return "SL_E_DIVISIBILITY";
    case SL_E_UNCLAIMED: return "SL_E_UNCLAIMED";
    case SL_E_MISSING: return "SL_E_MISSING";
    case SL_E_CHANGED: return "SL_E_CHANGED";
    case SL_E_DEVICE: return "SL_E_DEVICE";
    }
    return "SL_E_UNKNOWN";
}

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
    for (int i = 0; i < SL_DTYPE_COUNT; i++) {
        if (strlen(sl_dtypes[i].name) == len && memcmp(sl_dtypes[i].name, name, len) == 0) {
            *out = (sl_dtype)i;
            return 0;
        }
    }
    return -1;
}
