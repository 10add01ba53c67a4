/* sl_dtype.h - what the engine converts: one list for the planners, which refuse a checkpoint
 * tensor it cannot take to the plan's dtype, and for src/load/convert.c, which does the work. */
#ifndef SL_DTYPE_H
#define SL_DTYPE_H

#include "shardload.h"

/* 1 when dt converts to each of F32, F16 and BF16 (equal dtypes need no conversion). */
static inline int sl_dtype_converts(sl_dtype dt)
{
    return dt == SL_DTYPE_F32 || dt == SL_DTYPE_F16 || dt == SL_DTYPE_BF16 || dt == SL_DTYPE_F64;
}

#endif /* SL_DTYPE_H */
