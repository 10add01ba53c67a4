/* arch_config.h - reading a model's config.json into sl_arch_config (arch_config.c), and the JSON
 * file reader the rule tables share. */
#ifndef SL_ARCH_CONFIG_H
#define SL_ARCH_CONFIG_H

#include "plan/arch.h"

#include <jansson.h>

/* Parses the JSON file at path, refusing anything but a regular file of at most 16 MiB before
 * reading it (a FIFO would block). NULL on failure, with SL_E_CONFIG in *st and "<path>: ..." in err. */
json_t *sl_arch_json_read(sl_err *err, const char *path, sl_status *st);

/* Reads the sizes (H, nh, K, D, I, V, L), architectures[0], tie_word_embeddings and the dtype, and
 * checks them: positive; at most 100,000 layers; kv heads at most the heads and dividing them;
 * head_dim at most 65,536. SL_E_CONFIG with "<path>: config '<key>' ..." on failure. */
sl_status sl_arch_config_load(sl_err *err, sl_arena *a, const char *path, sl_arch_config *c);

#endif /* SL_ARCH_CONFIG_H */
