/* tools_common.h - small file helpers shared by synth.c and reshard.c. */
#ifndef SL_TOOLS_COMMON_H
#define SL_TOOLS_COMMON_H

#include "sl_err.h"

/* Removes path (absent is fine) unless it is the very file keep_if_same names (same device and
 * inode; keep_if_same may be NULL). Both tools write their config.json last, so an older one must
 * go before anything else is written, but never the source config itself. */
sl_status sl_tools_remove_stale(const char *path, const char *keep_if_same, sl_err *err);

#endif /* SL_TOOLS_COMMON_H */
