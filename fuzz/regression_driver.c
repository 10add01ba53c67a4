/* regression_driver.c - replays every file of a corpus directory through a fuzz target's
 * LLVMFuzzerTestOneInput, so the corpus runs in ordinary ctest without libFuzzer. */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return perror(path), -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0)
        return fclose(f), -1;
    const size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    const int ok = buf && fread(buf, 1, n, f) == n;
    fclose(f);
    if (ok)
        LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    int count = 0, failed = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) {
            failed += replay_file(argv[a]) != 0;
            count++;
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[a], e->d_name);
            failed += replay_file(path) != 0;
            count++;
        }
        closedir(d);
    }
    printf("replayed %d inputs, %d unreadable\n", count, failed);
    return failed ? 1 : (count ? 0 : 77);
}
