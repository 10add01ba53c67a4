/* arch_config.h - reading a model's config.json into sl_arch_config (arch_config.c), and the JSON
 * file reader the rule tables share. */
#ifndef SL_ARCH_CONFIG_H
#define SL_ARCH_CONFIG_H

#include "plan/arch.h"

#include <jansson.h>

/* Parses the JSON file at path, refusing anything but a regular file of at most 16 MiB before
 * reading it (a FIFO would block). NULL on failure, with SL_E_CONFIG in *st and "<path>: ..." in err.
 * Where numbers beyond jansson's range had to be clamped to parse the text (an integer past long
 * long, a real past a double: valid JSON, which Python reads), *verbatim (when not NULL) is a
 * malloc'd copy of the text as given, else NULL: what a config written back must be, not the
 * clamped tree's dump. */
json_t *sl_arch_json_read(sl_err *err, const char *path, sl_status *st, char **verbatim);

/* Parses len bytes of JSON text (not necessarily NUL-terminated) as sl_arch_json_read parses a
 * file's: the same flags (duplicate keys rejected), the same 16 MiB limit and *verbatim. NULL on
 * failure, with SL_E_CONFIG in *st and "<name>: ..." in err. */
json_t *sl_arch_json_parse(sl_err *err, const char *name, const char *text, size_t len,
                           sl_status *st, char **verbatim);

/* Reads the config src (a file, or text in memory) and its sizes (H, nh, K, D, I, V, L),
 * architectures[0], tie_word_embeddings and the dtype, and checks them: positive; at most 100,000
 * layers; kv heads at most the heads and dividing them; head_dim at most 65,536. SL_E_CONFIG with
 * "<src->path>: config '<key>' ..." on failure. On success *root_out is the parsed config
 * (json_decref it), for the table's symbols, and *verbatim as sl_arch_json_parse's. */
sl_status sl_arch_config_load(sl_err *err, sl_arena *a, const sl_arch_source *src,
                              sl_arch_config *c, json_t **root_out, char **verbatim);

/* A non-negative integer config value for a table symbol or MoE key (null/absent: dflt, or
 * SL_E_CONFIG "config has no 'key'" when dflt < 0). The caller prefixes the path. */
sl_status sl_arch_config_sym(sl_err *err, const json_t *root, const char *key, int64_t dflt,
                             int64_t *out);

/* arch_moe.c: the table's "symbols" (into m->cfg) and "moe" entries (m->layer_moe, m->cfg.E),
 * read against the config. Called before the rules are parsed. */
sl_status sl_arch_table_extras(sl_err *err, sl_arch *m, const json_t *table, const json_t *cfg);

/* arch_quant.c: the config's quantization_config into m->quant (fp8 with blocks or per-tensor
 * scales, fbgemm_fp8, compressed-tensors float 8-bit; SL_E_UNSUPPORTED, or SL_E_CONFIG, for what
 * it cannot plan). */
sl_status sl_arch_quant_parse(sl_err *err, sl_arch *m, const json_t *cfg);
/* 1,000,000 tensors: ten times the largest checkpoints (DeepSeek-V3 and Kimi K2 in FP8, their
 * experts' weights and scales, hold about 100k). The planner spends about 500 bytes a tensor, so
 * the bound is what keeps a config of a few hundred bytes from asking for gigabytes: 65,536 experts
 * at 50 layers, within every other limit, was a plan of 9.8M tensors, 5.3 GB and 9 s. Checked by
 * sl_arch_tensors_build, and by sl_arch_quant_rules before it names every module of the rules. */
#define SL_MAX_TENSORS 1000000

/* arch_tensors.c: m->tensors, every checkpoint tensor the rules imply, and the layers' index. */
sl_status sl_arch_tensors_build(sl_err *err, sl_arch *m);
/* arch_tensors.c: SL_E_CONFIG when the config implies more parameters than any real model. */
sl_status sl_arch_check_size(sl_err *err, const sl_arch *m);

/* arch_quant.c: marks the quantized linear rules F8_E4M3 and appends their scale rules (weight
 * and input scales; m->rules has room for cap rules). Before the rules are grouped. */
sl_status sl_arch_quant_rules(sl_err *err, sl_arch *m, int32_t cap);

/* arch_moe.c: index of table symbol s[0, n) in c, or -1. */
int sl_arch_sym_find(const sl_arch_config *c, const char *s, size_t n);

/* arch_moe.c: the rule keys "layers" and "when", and {e}; *absent is set when "when" names a
 * symbol whose value is 0 (the rule then has no tensors for this config). */
sl_status sl_arch_rule_extras(sl_err *err, const sl_arch *m, const json_t *r, const char *t,
                              sl_rule *out, int *absent);

#endif /* SL_ARCH_CONFIG_H */
