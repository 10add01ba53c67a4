/* rules_builtin.h - the rule tables compiled into the library (generated from rules/ by
 * rules/embed.py), so that an installed binary plans without any data file. */
#ifndef SL_RULES_BUILTIN_H
#define SL_RULES_BUILTIN_H

typedef struct sl_builtin_rules {
    const char *name;                /* "llama": the file rules/llama.json */
    const char *const *lines;        /* the file's lines, each with its '\n', NULL-terminated */
} sl_builtin_rules;

/* Terminated by an entry whose name is NULL. */
extern const sl_builtin_rules sl_builtin_rule_tables[];

#endif /* SL_RULES_BUILTIN_H */
