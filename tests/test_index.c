/* test_index.c - model.safetensors.index.json rules I1-I7 and directory checkpoints. */
#include "fmt_testutil.h"

#define T(n, dt, shape, b, e) "\"" n "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"
#define IDX "model.safetensors.index.json"
#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"

/* ---- I1-I3 on buffers ---- */

typedef struct idx_case {
    const char *what, *json;
    sl_status want;
    const char *needle;
} idx_case;

static const idx_case idx_cases[] = {
    {"minimal", "{\"weight_map\":{}}", SL_OK, NULL},
    {"typical", "{\"metadata\":{\"total_size\":16,\"total_parameters\":4},\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S1
     "\",\"c\":\"" S2 "\"}}", SL_OK, NULL},
    {"metadata without total_size", "{\"metadata\":{\"x\":\"y\"},\"weight_map\":{\"a\":\"m.safetensors\"}}", SL_OK, NULL},
    {"I1 root is an array", "[]", SL_E_INDEX, "root"},
    {"I1 invalid JSON", "{\"weight_map\":", SL_E_INDEX, "invalid JSON"},
    {"I1 no weight_map", "{\"metadata\":{}}", SL_E_INDEX, "weight_map"},
    {"I1 weight_map not an object", "{\"weight_map\":[]}", SL_E_INDEX, "weight_map"},
    {"I1 value not a string", "{\"weight_map\":{\"a\":1}}", SL_E_INDEX, "'a'"},
    {"I1 metadata not an object", "{\"metadata\":1,\"weight_map\":{}}", SL_E_INDEX, "metadata"},
    {"I1 total_size negative", "{\"metadata\":{\"total_size\":-1},\"weight_map\":{}}", SL_E_INDEX, "total_size"},
    {"I1 total_size float", "{\"metadata\":{\"total_size\":1.5},\"weight_map\":{}}", SL_E_INDEX, "total_size"},
    {"I1 total_size string", "{\"metadata\":{\"total_size\":\"16\"},\"weight_map\":{}}", SL_E_INDEX, "total_size"},
    /* integers beyond long long are valid JSON (read again as doubles): total_size only warns, other
     * metadata is tolerated; the checks on total_size still apply */
    {"I1 total_size 2^63", "{\"metadata\":{\"total_size\":9223372036854775808},\"weight_map\":{}}", SL_OK, NULL},
    {"I1 total_size 2^64", "{\"metadata\":{\"total_size\":18446744073709551616},\"weight_map\":{}}", SL_OK, NULL},
    {"I1 other metadata 2^64", "{\"metadata\":{\"total_size\":16,\"n\":18446744073709551616},\"weight_map\":{}}",
     SL_OK, NULL},
    {"I1 total_size -2^63-1", "{\"metadata\":{\"total_size\":-9223372036854775809},\"weight_map\":{}}", SL_E_INDEX,
     "total_size"},
    {"I1 total_size float beside 2^64", "{\"metadata\":{\"total_size\":1.5,\"n\":18446744073709551616},"
     "\"weight_map\":{}}", SL_E_INDEX, "total_size"},
    /* beside an integer beyond long long the file is read with doubles: total_size comes from
     * its own text (a double took "4.0", "8e0" and "1e300" for integers) */
    {"I1 total_size 4.0 beside 2^64", "{\"metadata\":{\"total_size\":4.0,\"n\":18446744073709551616},"
     "\"weight_map\":{}}", SL_E_INDEX, "total_size is not a non-negative integer"},
    {"I1 total_size 8e0 beside 2^64", "{\"metadata\":{\"total_size\":8e0,\"n\":18446744073709551616},"
     "\"weight_map\":{}}", SL_E_INDEX, "total_size is not a non-negative integer"},
    {"I1 total_size 1e300 beside 2^64", "{\"n\":18446744073709551616,\"metadata\":{\"x\":[{}],"
     "\"total_size\":1e300},\"weight_map\":{}}", SL_E_INDEX, "total_size is not a non-negative integer"},
    {"I1 total_size string beside 2^64", "{\"metadata\":{\"total_size\":\"1\",\"n\":18446744073709551616},"
     "\"weight_map\":{}}", SL_E_INDEX, "total_size"},
    {"I3 duplicate beside 2^64", "{\"metadata\":{\"n\":18446744073709551616},\"weight_map\":{\"a\":\"" S1
     "\",\"a\":\"" S2 "\"}}", SL_E_INDEX, "duplicate"},
    {"I2 parent", "{\"weight_map\":{\"a\":\"../x.safetensors\"}}", SL_E_INDEX, "../x.safetensors"},
    {"I2 absolute", "{\"weight_map\":{\"a\":\"/abs.safetensors\"}}", SL_E_INDEX, "/abs.safetensors"},
    {"I2 subdirectory", "{\"weight_map\":{\"a\":\"a/b.safetensors\"}}", SL_E_INDEX, "a/b"},
    {"I2 backslash", "{\"weight_map\":{\"a\":\"a\\\\b.safetensors\"}}", SL_E_INDEX, "'/' or '\\'"},
    {"I2 drive letter", "{\"weight_map\":{\"a\":\"C:x.safetensors\"}}", SL_E_INDEX, "drive"},
    {"I2 NUL", "{\"weight_map\":{\"a\":\"x\\u0000.safetensors\"}}", SL_E_INDEX, NULL},
    {"I2 wrong extension", "{\"weight_map\":{\"a\":\"x.bin\"}}", SL_E_INDEX, ".safetensors"},
    {"I2 only the extension", "{\"weight_map\":{\"a\":\".safetensors\"}}", SL_E_INDEX, ".safetensors"},
    {"I2 empty", "{\"weight_map\":{\"a\":\"\"}}", SL_E_INDEX, "empty"},
    {"I2 dot-dot", "{\"weight_map\":{\"a\":\"..\"}}", SL_E_INDEX, NULL},
    {"I3 duplicate key", "{\"weight_map\":{\"a\":\"" S1 "\",\"a\":\"" S2 "\"}}", SL_E_INDEX, "duplicate"},
    {"I3 duplicate after unescaping", "{\"weight_map\":{\"a\":\"" S1 "\",\"\\u0061\":\"" S1 "\"}}", SL_E_INDEX,
     "duplicate"},
};

static void test_index_buffers(void)
{
    for (size_t i = 0; i < sizeof(idx_cases) / sizeof(idx_cases[0]); i++) {
        const idx_case *c = &idx_cases[i];
        char err[512] = "";
        const sl_status st = sl_validate_index_buffer(c->json, strlen(c->json), err, sizeof err);
        EXPECT(st == c->want, "[%s] want %s got %s: %s", c->what, sl_status_str(c->want), sl_status_str(st), err);
        if (c->want != SL_OK) {
            EXPECT(strncmp(err, IDX ": ", strlen(IDX) + 2) == 0, "[%s] message does not name the file: %s", c->what,
                   err);
            EXPECT(!c->needle || strstr(err, c->needle), "[%s] lacks '%s': %s", c->what, c->needle, err);
        }
    }
}

/* ---- directories ---- */

typedef struct ckdir {
    char dir[256];
} ckdir;

static void put(const ckdir *d, const char *name, const char *json, size_t zeros)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d->dir, name);
    if (fmt_write_st(p, json, zeros) != 0) {
        perror(p);
        exit(1);
    }
}

static void put_text(const ckdir *d, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d->dir, name);
    if (fmt_write_file(p, text, strlen(text)) != 0) {
        perror(p);
        exit(1);
    }
}

/* Two shards: S1 holds a (F32[2]) and b (U8[4]); S2 holds c (BF16[2]). */
static void two_shards(ckdir *d, const char *index)
{
    tu_tmpdir(d->dir, sizeof d->dir, "idx");
    put(d, S1, "{\"__metadata__\":{\"format\":\"pt\"}," T("b", "U8", "[4]", 8, 12) "," T("a", "F32", "[2]", 0, 8) "}",
        12);
    put(d, S2, "{" T("c", "BF16", "[2]", 0, 4) "}", 4);
    if (index)
        put_text(d, IDX, index);
}

#define GOOD_MAP "\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"" S2 "\"}"

/* Opens d and expects want; the message must contain every needle. */
static sl_checkpoint *open_expect(const ckdir *d, sl_status want, const char *what, const char *n1, const char *n2)
{
    sl_checkpoint *ck = NULL;
    const sl_status st = sl_checkpoint_open(d->dir, &ck);
    const char *msg = sl_checkpoint_errmsg(ck);
    EXPECT(st == want, "[%s] want %s got %s: %s", what, sl_status_str(want), sl_status_str(st), msg);
    EXPECT(!n1 || strstr(msg, n1), "[%s] lacks '%s': %s", what, n1, msg);
    EXPECT(!n2 || strstr(msg, n2), "[%s] lacks '%s': %s", what, n2, msg);
    if (st != SL_OK) {
        sl_checkpoint_close(ck);
        return NULL;
    }
    return ck;
}

static void test_valid_indexed(void)
{
    ckdir d;
    /* I7: total_size 999 disagrees with the 16 data bytes: accepted with a warning naming the index.
     * An extra file is ignored. */
    two_shards(&d, "{\"metadata\":{\"total_size\":999}," GOOD_MAP "}");
    put(&d, "zz-unlisted.safetensors", "{" T("a", "U8", "[1]", 0, 1) "}", 1);
    sl_checkpoint *ck = open_expect(&d, SL_OK, "valid index", NULL, NULL);
    if (ck) {
        char p1[512];
        snprintf(p1, sizeof p1, "%s/%s", d.dir, S1);
        EXPECT(sl_checkpoint_file_count(ck) == 2, "2 files");
        EXPECT(strcmp(sl_checkpoint_file_path(ck, 0), p1) == 0, "path %s", sl_checkpoint_file_path(ck, 0));
        EXPECT(strcmp(sl_checkpoint_dir(ck), d.dir) == 0, "dir");
        EXPECT(sl_checkpoint_tensor_count(ck) == 3, "3 tensors");
        EXPECT(sl_checkpoint_total_bytes(ck) == 16, "total %llu", (unsigned long long)sl_checkpoint_total_bytes(ck));
        sl_tensor_info t;
        EXPECT(sl_checkpoint_tensor(ck, 0, &t) == SL_OK && strcmp(t.name, "a") == 0 && t.file == 0 &&
               t.offset == sl_checkpoint_file_data_start(ck, 0) && t.nbytes == 8, "tensor 0 is a at data start");
        EXPECT(sl_checkpoint_tensor(ck, 1, &t) == SL_OK && strcmp(t.name, "b") == 0 &&
               t.offset == sl_checkpoint_file_data_start(ck, 0) + 8, "tensor 1 is b, absolute offset");
        EXPECT(sl_checkpoint_find_tensor(ck, "c") == 2 && sl_checkpoint_find_tensor(ck, "zz") == -1, "find");
        EXPECT(sl_checkpoint_tensor(ck, 3, &t) == SL_E_INVALID_ARG, "out of range");
        const char *k = NULL, *v = NULL;
        EXPECT(sl_checkpoint_metadata_count(ck, 0) == 1 && sl_checkpoint_metadata(ck, 0, 0, &k, &v) == SL_OK &&
               strcmp(k, "format") == 0 && strcmp(v, "pt") == 0, "metadata");
        EXPECT(sl_checkpoint_metadata_count(ck, 1) == 0, "no metadata in shard 2");
        const char *w = sl_checkpoint_warning(ck, 0);
        EXPECT(sl_checkpoint_warning_count(ck) == 1 && w && strstr(w, IDX) &&
                   strstr(w, "metadata.total_size is 999 but the shards hold 16 bytes"),
               "I7 warning: %s", w ? w : "(none)");
        EXPECT(sl_checkpoint_warning(ck, 1) == NULL && sl_checkpoint_warning(ck, -1) == NULL,
               "warning out of range");
        sl_checkpoint_close(ck);
    }
    tu_rm_rf(d.dir);

    /* total_size beyond 2^63 (the index read again with doubles): the same warning, saying so */
    two_shards(&d, "{\"metadata\":{\"total_size\":18446744073709551615}," GOOD_MAP "}");
    ck = open_expect(&d, SL_OK, "huge total_size", NULL, NULL);
    const char *w = ck ? sl_checkpoint_warning(ck, 0) : NULL;
    EXPECT(ck && sl_checkpoint_warning_count(ck) == 1 && w &&
               strstr(w, "metadata.total_size is beyond 2^63 but the shards hold 16 bytes"),
           "huge total_size warning: %s", w ? w : "(none)");
    sl_checkpoint_close(ck);
    tu_rm_rf(d.dir);

    /* beside a huge integer, total_size read exactly (a double made 2^53 + 1 into 2^53) */
    two_shards(&d, "{\"metadata\":{\"n\":18446744073709551616,\"total_size\":9007199254740993}," GOOD_MAP "}");
    ck = open_expect(&d, SL_OK, "exact total_size", NULL, NULL);
    w = ck ? sl_checkpoint_warning(ck, 0) : NULL;
    EXPECT(ck && w && strstr(w, "metadata.total_size is 9007199254740993 but the shards hold 16 bytes"),
           "exact total_size warning: %s", w ? w : "(none)");
    sl_checkpoint_close(ck);
    tu_rm_rf(d.dir);

    /* total_size that matches (16 data bytes), also beside a huge integer, or is absent: no warning */
    const char *const quiet[] = {"{\"metadata\":{\"total_size\":16}," GOOD_MAP "}", "{" GOOD_MAP "}",
                                 "{\"metadata\":{\"total_size\":16,\"n\":18446744073709551616}," GOOD_MAP "}"};
    for (int i = 0; i < 3; i++) {
        two_shards(&d, quiet[i]);
        ck = open_expect(&d, SL_OK, "quiet index", NULL, NULL);
        EXPECT(ck && sl_checkpoint_warning_count(ck) == 0, "index %d: unexpected warning %s", i,
               ck ? sl_checkpoint_warning(ck, 0) : "");
        sl_checkpoint_close(ck);
        tu_rm_rf(d.dir);
    }
}

static void test_index_errors(void)
{
    ckdir d;
    two_shards(&d, "{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"model-00003-of-00003.safetensors\"}}");
    open_expect(&d, SL_E_NOT_FOUND, "missing shard", "model-00003-of-00003.safetensors", d.dir);
    tu_rm_rf(d.dir);

    two_shards(&d, "{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"" S2 "\",\"ghost\":\"" S2 "\"}}");
    open_expect(&d, SL_E_NOT_FOUND, "I4 tensor missing from shard", "'ghost'", S2);
    tu_rm_rf(d.dir);

    two_shards(&d, "{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S2 "\",\"c\":\"" S2 "\"}}");
    open_expect(&d, SL_E_NOT_FOUND, "I4 tensor in the other shard", "'b'", S2);
    tu_rm_rf(d.dir);

    two_shards(&d, "{\"weight_map\":{\"a\":\"" S1 "\",\"c\":\"" S2 "\"}}");
    open_expect(&d, SL_E_INDEX, "I5 unindexed tensor", "'b'", S1);
    tu_rm_rf(d.dir);

    two_shards(&d, "{" GOOD_MAP "}");
    put(&d, S2, "{" T("c", "BF16", "[2]", 0, 4) "," T("a", "U8", "[1]", 4, 5) "}", 5);
    open_expect(&d, SL_E_DUPLICATE, "I6 tensor in two shards", "'a'", S1);
    tu_rm_rf(d.dir);

    two_shards(&d, "{\"weight_map\":{\"a\":\"../" S1 "\"}}");
    open_expect(&d, SL_E_INDEX, "I2 traversal never opened", IDX, "../");
    tu_rm_rf(d.dir);

    two_shards(&d, "{\"weight_map\":{\"a\":\"" S1 "\",\"a\":\"" S1 "\"}}");
    open_expect(&d, SL_E_INDEX, "I3 duplicate key", IDX, NULL);
    tu_rm_rf(d.dir);

    two_shards(&d, "{" GOOD_MAP "}");
    put(&d, S2, "{" T("c", "BF16", "[2,2]", 0, 4) "}", 4);
    open_expect(&d, SL_E_TENSOR_INFO, "bad shard header", S2 ": tensor 'c'", d.dir);
    tu_rm_rf(d.dir);
}

static void test_no_index(void)
{
    ckdir d;
    two_shards(&d, NULL);
    put(&d, "a-first.safetensors", "{" T("z", "U8", "[1]", 0, 1) "}", 1);
    put_text(&d, "notes.txt", "ignored");
    sl_checkpoint *ck = open_expect(&d, SL_OK, "no index", NULL, NULL);
    if (ck) {
        EXPECT(sl_checkpoint_file_count(ck) == 3, "3 files");
        EXPECT(strstr(sl_checkpoint_file_path(ck, 0), "/a-first.safetensors") != NULL, "sorted by name");
        EXPECT(strstr(sl_checkpoint_file_path(ck, 2), S2) != NULL, "sorted by name");
        sl_tensor_info t;
        EXPECT(sl_checkpoint_tensor(ck, 0, &t) == SL_OK && strcmp(t.name, "z") == 0 && t.file == 0, "(file, offset)");
        sl_checkpoint_close(ck);
    }
    put(&d, "b-dup.safetensors", "{" T("c", "U8", "[1]", 0, 1) "}", 1);
    open_expect(&d, SL_E_DUPLICATE, "duplicate without index", "'c'", "b-dup.safetensors");
    tu_rm_rf(d.dir);

    tu_tmpdir(d.dir, sizeof d.dir, "empty");
    open_expect(&d, SL_E_NOT_FOUND, "empty directory", d.dir, NULL);
    tu_rm_rf(d.dir);

    sl_checkpoint *bad = NULL;
    EXPECT(sl_checkpoint_open("/nonexistent/x.safetensors", &bad) == SL_E_NOT_FOUND, "missing file");
    EXPECT(strstr(sl_checkpoint_errmsg(bad), "/nonexistent/x.safetensors") != NULL, "names the file");
    sl_checkpoint_close(bad);
}

static void test_single_file(void)
{
    ckdir d;
    two_shards(&d, NULL);
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d.dir, S2);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(p, &ck) == SL_OK, "single file: %s", sl_checkpoint_errmsg(ck));
    EXPECT(strcmp(sl_checkpoint_dir(ck), d.dir) == 0, "dir of a file: %s", sl_checkpoint_dir(ck));
    EXPECT(strcmp(sl_checkpoint_file_path(ck, 0), p) == 0, "path as given");
    EXPECT(sl_checkpoint_file_size(ck, 0) == sl_checkpoint_file_data_start(ck, 0) + 4, "size");
    sl_checkpoint_close(ck);
    tu_rm_rf(d.dir);
}

int main(void)
{
    test_index_buffers();
    test_valid_indexed();
    test_index_errors();
    test_no_index();
    test_single_file();
    if (expect_failures)
        fprintf(stderr, "%d check(s) failed\n", expect_failures);
    else
        printf("test_index: all checks passed\n");
    return expect_failures ? 1 : 0;
}
