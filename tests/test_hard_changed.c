/* test_hard_changed.c - a checkpoint file changed between sl_checkpoint_open and sl_load (issue 18
 * item 10), through the public API, open -> plan -> change -> load:
 *   - replaced by a file of the same size (another inode), as a copy tool or a new download does;
 *   - rewritten in place with the same size (another mtime);
 *   - swapped for a FIFO, which must fail at once instead of blocking the load forever.
 * Each is SL_E_CHANGED naming the file, and leaves no device; an unchanged file loads. Before the
 * identity was checked, the first two loaded the other bytes with SL_OK and the third hung. */
#include "shardload.h"

#include "expect.h"
#include "scratch.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[512], ckdir[600], cfg[600];

/* A 2-layer Llama in shards of about 600 KB, written afresh (synth replaces every file). */
static void make_checkpoint(void)
{
    char err[1024];
    const sl_status st = sl_synth(cfg, NULL, ckdir, -1, 1234, 600000, err, sizeof err);
    if (st != SL_OK) {
        fprintf(stderr, "synth: %s\n", err);
        exit(1);
    }
}

typedef enum { CHANGE_NONE, CHANGE_REPLACE, CHANGE_REWRITE, CHANGE_FIFO, CHANGE_SKIPPED } change_kind;

/* Another byte at offset `at` of a file of the same size: a new file renamed over path (replace),
 * or a write into the file itself (rewrite). Returns 0 when a rewrite left the mtime as it was (a
 * file system with coarse timestamps: nothing can tell then). */
static int change_file(const char *path, uint64_t at, change_kind how)
{
    struct stat before, after;
    char tmp[700];
    unsigned char b = 0;
    if (how == CHANGE_FIFO) {
        EXPECT(unlink(path) == 0 && mkfifo(path, 0644) == 0, "mkfifo %s", path);
        return 1;
    }
    stat(path, &before);
    /* timestamps have the kernel's tick (a few ms): the change must land in a later one */
    nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
    int fd = open(path, O_RDWR);
    EXPECT(fd >= 0 && pread(fd, &b, 1, (off_t)at) == 1, "read %s", path);
    b ^= 0x5a;
    if (how == CHANGE_REWRITE) {
        EXPECT(pwrite(fd, &b, 1, (off_t)at) == 1, "rewrite %s", path);
        close(fd);
        stat(path, &after);
        return before.st_mtim.tv_sec != after.st_mtim.tv_sec || before.st_mtim.tv_nsec != after.st_mtim.tv_nsec;
    }
    snprintf(tmp, sizeof tmp, "%s.new", path);
    struct stat sb;
    fstat(fd, &sb);
    unsigned char *all = malloc((size_t)sb.st_size);
    EXPECT(all && pread(fd, all, (size_t)sb.st_size, 0) == sb.st_size, "read all of %s", path);
    close(fd);
    all[at] = b;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT(fd >= 0 && write(fd, all, (size_t)sb.st_size) == sb.st_size, "write %s", tmp);
    close(fd);
    free(all);
    EXPECT(rename(tmp, path) == 0, "rename over %s", path);
    return 1;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_hard_changed: the load blocked (on a FIFO?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static void check_change(change_kind how, const char *name)
{
    make_checkpoint();
    sl_checkpoint *ck = NULL;
    sl_plan *p = NULL;
    sl_model *m = NULL;
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.tp = 2;
    EXPECT(sl_checkpoint_open(ckdir, &ck) == SL_OK, "%s: open: %s", name, sl_checkpoint_errmsg(ck));
    EXPECT(sl_plan_build(ck, &po, &p) == SL_OK, "%s: plan: %s", name, sl_plan_errmsg(p));
    const int64_t file = sl_checkpoint_file_count(ck) - 1;   /* the last shard: read last */
    const char *path = sl_checkpoint_file_path(ck, file);
    EXPECT(sl_checkpoint_file_count(ck) > 1, "%s: expected several shards", name);
    if (how != CHANGE_NONE && !change_file(path, sl_checkpoint_file_data_start(ck, file) + 3, how)) {
        fprintf(stderr, "%s: the rewrite kept the file's mtime (coarse timestamps): not checked\n", name);
        how = CHANGE_SKIPPED;
    }
    sl_load_opts lo;
    sl_load_opts_init(&lo);
    alarm(60);
    const sl_status st = sl_load(ck, p, &lo, &m);
    alarm(0);
    if (how == CHANGE_SKIPPED) {
        /* nothing to expect */
    } else if (how == CHANGE_NONE) {
        EXPECT(st == SL_OK, "%s: %s", name, sl_model_errmsg(m));
    } else {
        EXPECT(st == SL_E_CHANGED && strstr(sl_model_errmsg(m), path) &&
                   strstr(sl_model_errmsg(m), "changed"),
               "%s: %s: %s", name, sl_status_str(st), sl_model_errmsg(m));
        EXPECT(sl_model_device_count(m) == 0, "%s: a failed load keeps no device", name);
        EXPECT(!strchr(sl_model_errmsg(m), '\n'), "%s: one line", name);
    }
    if (how == CHANGE_FIFO)
        unlink(path);
    sl_model_free(m);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
}

int main(void)
{
    tu_tmpdir(dir, sizeof dir, "hard_changed");
    snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    tu_write_text(cfg, "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":256,"
                    "\"intermediate_size\":512,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
                    "\"num_hidden_layers\":2,\"vocab_size\":1001,\"tie_word_embeddings\":false,"
                    "\"torch_dtype\":\"bfloat16\",\"rms_norm_eps\":1e-05,\"head_dim\":32}");
    signal(SIGALRM, on_alarm);
    check_change(CHANGE_NONE, "unchanged");
    check_change(CHANGE_REPLACE, "replaced by a file of the same size");
    check_change(CHANGE_REWRITE, "rewritten in place, same size");
    check_change(CHANGE_FIFO, "swapped for a FIFO");
    tu_rm_rf(dir);
    return expect_failures ? 1 : 0;
}
