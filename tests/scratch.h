/* scratch.h - a test's scratch directory: under TMPDIR, or /tmp when it is unset or empty (never
 * the current directory, which may be the source tree when a test is run by hand), removed by the
 * test at its end. */
#ifndef SL_TESTS_SCRATCH_H
#define SL_TESTS_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>

static inline void tu_tmpdir(char *buf, size_t len, const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, len, "%s/sl_%s_XXXXXX", t && *t ? t : "/tmp", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* Writes text to path; a test that cannot write its own input stops. */
static inline void tu_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static inline void tu_rm_rf(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

#endif /* SL_TESTS_SCRATCH_H */
