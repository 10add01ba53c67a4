/* test_writer.c - sl_writer round trips through sl_checkpoint_open, and the exact bytes of the
 * layout the reference writer produces (padding to 8, dtype-descending then name order). */
#include "fmt_testutil.h"

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void test_empty(const char *dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s/empty.safetensors", dir);
    sl_writer *w = NULL;
    EXPECT(sl_writer_open(p, &w) == SL_OK, "open: %s", sl_writer_errmsg(w));
    EXPECT(sl_writer_begin(w) == SL_OK && sl_writer_finish(w) == SL_OK, "empty: %s", sl_writer_errmsg(w));
    sl_writer_free(w);
    size_t n = 0;
    unsigned char *b = read_all(p, &n);
    /* the reference's test_empty: 08 00.. "{}" + 6 spaces */
    EXPECT(b && n == 16 && b[0] == 8 && memcmp(b + 8, "{}      ", 8) == 0, "empty file bytes (n=%zu)", n);
    free(b);
}

typedef struct wt {
    const char *name;
    sl_dtype dt;
    uint32_t ndim;
    uint64_t shape[3];
} wt;

static const wt wts[] = {
    {"b.weight", SL_DTYPE_U8, 1, {3}},         {"a.weight", SL_DTYPE_F32, 2, {2, 3}},
    {"scalar", SL_DTYPE_F64, 0, {0}},          {"empty", SL_DTYPE_BF16, 2, {0, 7}},
    {"c.weight", SL_DTYPE_F32, 1, {5}},        {"f4", SL_DTYPE_F4, 1, {6}},
    {"n\xc3\xa9 \"q\"\n", SL_DTYPE_I16, 1, {2}},
};
#define NW (sizeof(wts) / sizeof(wts[0]))

static void fill(unsigned char *buf, size_t n, size_t seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(seed * 31 + i * 7 + 1);
}

static void test_round_trip(const char *dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s/rt.safetensors", dir);
    sl_writer *w = NULL;
    int64_t idx[NW];
    uint64_t nb[NW];
    EXPECT(sl_writer_open(p, &w) == SL_OK, "open");
    EXPECT(sl_writer_set_metadata(w, "format", "pt") == SL_OK, "metadata");
    for (size_t i = 0; i < NW; i++)
        EXPECT(sl_writer_add(w, wts[i].name, wts[i].dt, wts[i].ndim, wts[i].shape, &idx[i]) == SL_OK, "add %s: %s",
               wts[i].name, sl_writer_errmsg(w));
    EXPECT(sl_writer_add(w, "a.weight", SL_DTYPE_U8, 0, NULL, NULL) == SL_E_DUPLICATE, "duplicate add");
    EXPECT(sl_writer_add(w, "__metadata__", SL_DTYPE_U8, 0, NULL, NULL) == SL_E_INVALID_ARG, "reserved name");
    EXPECT(sl_writer_add(w, "odd", SL_DTYPE_F4, 1, (const uint64_t[]){3}, NULL) == SL_E_MISALIGNED, "F4 [3]");
    EXPECT(sl_writer_add(w, "bad\xff", SL_DTYPE_U8, 0, NULL, NULL) == SL_E_INVALID_ARG, "invalid UTF-8 name");
    EXPECT(sl_writer_write(w, idx[0], 0, "x", 1) == SL_E_INVALID_ARG, "write before begin");
    EXPECT(sl_writer_begin(w) == SL_OK, "begin: %s", sl_writer_errmsg(w));
    EXPECT(sl_writer_add(w, "late", SL_DTYPE_U8, 0, NULL, NULL) == SL_E_INVALID_ARG, "add after begin");
    unsigned char buf[64];
    for (size_t i = NW; i-- > 0;) {   /* reverse order, odd-sized pieces, one byte written twice */
        const uint64_t shape_bytes[] = {3, 24, 8, 0, 20, 3, 4};
        nb[i] = shape_bytes[i];
        fill(buf, (size_t)nb[i], i);
        if (nb[i] > 1) {
            EXPECT(sl_writer_write(w, idx[i], 1, buf + 1, (size_t)nb[i] - 1) == SL_OK, "piece 2");
            EXPECT(sl_writer_write(w, idx[i], 0, buf, 2) == SL_OK, "piece 1 overlapping");
        } else if (nb[i]) {
            EXPECT(sl_writer_write(w, idx[i], 0, buf, 1) == SL_OK, "single byte");
        }
    }
    EXPECT(sl_writer_write(w, idx[0], 2, buf, 2) == SL_E_INVALID_ARG, "write past the tensor");
    EXPECT(sl_writer_finish(w) == SL_OK, "finish: %s", sl_writer_errmsg(w));
    sl_writer_free(w);

    size_t n = 0;
    unsigned char *file = read_all(p, &n);
    sl_checkpoint *ck = NULL;
    EXPECT(file && sl_validate_buffer(file, n, p, NULL, 0) == SL_OK, "validates");
    EXPECT(file && (8 + file[0] + ((size_t)file[1] << 8)) % 8 == 0, "8+N is a multiple of 8");
    EXPECT(sl_checkpoint_open(p, &ck) == SL_OK, "reopen: %s", sl_checkpoint_errmsg(ck));
    EXPECT(sl_checkpoint_tensor_count(ck) == (int64_t)NW, "count");
    /* reference order: dtype descending, then name */
    static const char *order[] = {"scalar", "a.weight", "c.weight", "empty", "n\xc3\xa9 \"q\"\n", "b.weight", "f4"};
    for (int64_t i = 0; i < sl_checkpoint_tensor_count(ck); i++) {
        sl_tensor_info t;
        sl_checkpoint_tensor(ck, i, &t);
        EXPECT(strcmp(t.name, order[i]) == 0, "order %lld: %s", (long long)i, t.name);
        EXPECT(t.nbytes == 0 || t.offset % (sl_dtype_bits(t.dtype) >= 8 ? sl_dtype_bits(t.dtype) / 8 : 1) == 0,
               "%s aligned to its element size", t.name);
        size_t k = 0;
        while (strcmp(wts[k].name, t.name) != 0)
            k++;
        EXPECT(t.dtype == wts[k].dt && t.ndim == wts[k].ndim && t.nbytes == nb[k], "%s dtype/shape/size", t.name);
        for (uint32_t d = 0; d < t.ndim; d++)
            EXPECT(t.shape[d] == wts[k].shape[d], "%s shape[%u]", t.name, d);
        fill(buf, (size_t)nb[k], k);
        EXPECT(file && memcmp(file + t.offset, buf, (size_t)t.nbytes) == 0, "%s bytes", t.name);
    }
    const char *mk, *mv;
    EXPECT(sl_checkpoint_metadata(ck, 0, 0, &mk, &mv) == SL_OK && !strcmp(mk, "format") && !strcmp(mv, "pt"),
           "metadata round trip");
    sl_checkpoint_close(ck);
    free(file);
}

static void test_unfinished_removed(const char *dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s/partial.safetensors", dir);
    sl_writer *w = NULL;
    int64_t i = -1;
    EXPECT(sl_writer_open(p, &w) == SL_OK, "open");
    EXPECT(sl_writer_add(w, "t", SL_DTYPE_F32, 1, (const uint64_t[]){4}, &i) == SL_OK, "add");
    EXPECT(sl_writer_begin(w) == SL_OK, "begin");
    EXPECT(sl_writer_write(w, i, 0, "abcd", 4) == SL_OK, "write");
    EXPECT(sl_writer_finish(w) == SL_E_INCOMPLETE, "finish with 12 bytes missing");
    EXPECT(strstr(sl_writer_errmsg(w), "'t'") != NULL, "names the tensor: %s", sl_writer_errmsg(w));
    EXPECT(access(p, F_OK) != 0, "nothing under the final name before finish");
    sl_writer_free(w);
    EXPECT(access(p, F_OK) != 0, "unfinished file removed");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q partial", dir);
    EXPECT(system(cmd) != 0, "temporary file removed too");
}

int main(void)
{
    char dir[256];
    tu_tmpdir(dir, sizeof dir, "wr");
    test_empty(dir);
    test_round_trip(dir);
    test_unfinished_removed(dir);
    tu_rm_rf(dir);
    if (expect_failures)
        fprintf(stderr, "%d check(s) failed\n", expect_failures);
    else
        printf("test_writer: all checks passed\n");
    return expect_failures ? 1 : 0;
}
