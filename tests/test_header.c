/* test_header.c - the safetensors header rules: valid edge cases, then a table of malformed files
 * (one row per failure class, in the style of llama.cpp's handcrafted files), each asserting the
 * exact sl_status and that the message names the file and, where one is involved, the tensor. */
#include "fmt_testutil.h"
#include "format/st_format.h"

#define T(n, dt, shape, b, e) "\"" n "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static sl_status check_buf(const fmt_buf *b, char *err, size_t errlen)
{
    return sl_validate_buffer(b->p, b->len, "t.safetensors", err, errlen);
}

/* digits for numbers past a double's range (10^309) and within it (10^60): bad_cases */
#define ZEROS_30 "000000000000000000000000000000"
#define ZEROS_309 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 ZEROS_30 "000000000"

/* ---- valid files ---- */

static void expect_valid(const char *json, size_t zeros, const char *what)
{
    char err[512];
    fmt_buf b = fmt_make(json, zeros);
    const sl_status st = check_buf(&b, err, sizeof err);
    EXPECT(st == SL_OK, "%s: got %s: %s", what, sl_status_str(st), err);
    free(b.p);
}

/* Parses with the internal API to check what was understood, not only that it was accepted. */
static int parse(const char *json, size_t zeros, st_header *h)
{
    sl_err e = {0};
    const size_t n = strlen(json);
    const sl_status st = st_header_parse((const unsigned char *)json, n, 8 + n + zeros, h, &e);
    EXPECT(st == SL_OK, "parse %s: %s", json, sl_err_msg(&e));
    sl_err_clear(&e);
    return st == SL_OK;
}

static void test_valid_edges(void)
{
    expect_valid("{}", 0, "empty header: 10-byte file");
    expect_valid("{}      ", 0, "writer's empty file (16 bytes)");
    expect_valid("{" T("s", "F32", "[]", 0, 4) "}", 4, "rank-0 tensor");
    expect_valid("{" T("a", "F32", "[0]", 0, 0) "," T("b", "F32", "[0,5]", 0, 0) "," T("c", "F32", "[1]", 0, 4) ","
                 T("d", "U8", "[0]", 4, 4) "}", 4, "zero-size tensors sharing offsets");
    expect_valid(" \t\r\n{}\n\t  \r", 0, "whitespace before and after");
    expect_valid("{" T("a", "U8", "[3]", 0, 3) "," T("b", "F32", "[1]", 3, 7) "}", 7, "unaligned offsets, odd N");
    expect_valid("{" T("a", "F4", "[2]", 0, 1) "," T("b", "F4", "[3,2]", 1, 4) "," T("c", "F6_E2M3", "[4]", 4, 7) ","
                 T("d", "F6_E3M2", "[8]", 7, 13) "}", 13, "sub-byte dtypes sized in bits");
    expect_valid("{" T("z", "U8", "[0,18446744073709551615]", 0, 0) "}", 0, "[0, MAX] has numel 0");
    expect_valid("{\"__metadata__\":{\"format\":\"pt\",\"k\":\"\"}," T("a", "U8", "[1]", 0, 1) "}", 1, "metadata");
    expect_valid("{\"__metadata__\":{}}", 0, "empty metadata");
    expect_valid("{ \"a\" : { \"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 2 ] , \"dtype\" : \"F16\" } }", 2,
                 "spaces everywhere, fields in any order");
    expect_valid("{\"\\u0061\":{\"\\u0064type\":\"\\u0046\\u0033\\u0032\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 4, "escaped keys and dtype");
}

static void test_all_dtypes(void)
{
    char json[4096];
    size_t o = 0;
    uint64_t off = 0;
    o += (size_t)snprintf(json + o, sizeof json - o, "{");
    for (int d = 0; d < SL_DTYPE_COUNT; d++) {
        const uint64_t nb = sl_dtype_bits((sl_dtype)d);   /* shape [8]: 8 elements = bits bytes */
        o += (size_t)snprintf(json + o, sizeof json - o, "%s\"t%d\":{\"dtype\":\"%s\",\"shape\":[8],"
                              "\"data_offsets\":[%llu,%llu]}", d ? "," : "", d, sl_dtype_name((sl_dtype)d),
                              (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    snprintf(json + o, sizeof json - o, "}");
    st_header h;
    if (!parse(json, off, &h))
        return;
    EXPECT(h.n_tensors == SL_DTYPE_COUNT, "22 dtypes: got %zu", h.n_tensors);
    for (size_t i = 0; i < h.n_tensors; i++)
        EXPECT(h.tensors[i].dtype == (sl_dtype)i, "dtype %zu parsed as %d", i, (int)h.tensors[i].dtype);
    EXPECT(h.data_len == off, "data_len");
    st_header_free(&h);
}

static void test_parsed_fields(void)
{
    st_header h;
    /* é, U+1F600 as a surrogate pair, newline, quote */
    if (parse("{\"__metadata__\":{\"b\":\"2\",\"a\":\"x\\ty\"},"
              "\"n\\u00e9\\ud83d\\ude00\\n\\\"\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[4,16]},"
              "\"first\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}   ", 16, &h)) {
        EXPECT(h.n_tensors == 2, "count");
        EXPECT(strcmp(h.tensors[0].name, "first") == 0, "file order: %s", h.tensors[0].name);
        EXPECT(strcmp(h.tensors[1].name, "n\xc3\xa9\xf0\x9f\x98\x80\n\"") == 0, "unescaped name");
        EXPECT(h.tensors[1].ndim == 2 && h.tensors[1].shape[0] == 2 && h.tensors[1].shape[1] == 3, "shape");
        EXPECT(h.tensors[0].ndim == 0, "rank 0");
        EXPECT(h.n_meta == 2 && strcmp(h.meta[0].key, "a") == 0 && strcmp(h.meta[0].value, "x\ty") == 0,
               "metadata sorted and unescaped");
        EXPECT(h.data_start == 8 + h.header_len, "data_start");
        st_header_free(&h);
    }
}

/* ---- malformed files ---- */

typedef struct bad_case {
    const char *what;
    const char *json;      /* NULL: raw bytes in raw/raw_len */
    size_t zeros;
    sl_status want;
    const char *needle;    /* must appear in the message (tensor name, detail), or NULL */
    const char *raw;
    size_t raw_len;
} bad_case;

#define DEEP "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
#define DEEP_END "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"

static const bad_case bad_cases[] = {
    /* steps 1-3 */
    {"empty file", NULL, 0, SL_E_HEADER_TOO_SMALL, "too small", "", 0},
    {"7 bytes", NULL, 0, SL_E_HEADER_TOO_SMALL, NULL, "\x02\0\0\0\0\0\0", 7},
    {"N = 100,000,001", NULL, 0, SL_E_HEADER_TOO_LARGE, "100000001", "\x01\xe1\xf5\x05\0\0\0\0{}", 10},
    {"N = 2^64-1", NULL, 0, SL_E_HEADER_TOO_LARGE, NULL, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10},
    {"N = 100,000,000 is not too large, only past EOF", NULL, 0, SL_E_HEADER_LENGTH, "100000000",
     "\x00\xe1\xf5\x05\0\0\0\0{}", 10},
    {"N past EOF", NULL, 0, SL_E_HEADER_LENGTH, NULL, "\x32\0\0\0\0\0\0\0{}", 10},
    {"N = 1, file 8 bytes", NULL, 0, SL_E_HEADER_LENGTH, NULL, "\x01\0\0\0\0\0\0\0", 8},
    /* step 4 */
    {"0xFF in a name", "{\"a\xff\":{}}", 0, SL_E_HEADER_UTF8, "byte 3", NULL, 0},
    {"overlong '/'", "{\"\xc0\xaf\":{}}", 0, SL_E_HEADER_UTF8, NULL, NULL, 0},
    {"encoded surrogate", "{\"\xed\xa0\x80\":{}}", 0, SL_E_HEADER_UTF8, NULL, NULL, 0},
    {"above U+10FFFF", "{\"\xf4\x90\x80\x80\":{}}", 0, SL_E_HEADER_UTF8, NULL, NULL, 0},
    {"bad UTF-8 in padding", "{}  \x80", 0, SL_E_HEADER_UTF8, NULL, NULL, 0},
    {"truncated sequence at the end", "{}\xe2\x82", 0, SL_E_HEADER_UTF8, NULL, NULL, 0},
    {"UTF-8 checked before JSON", "[\xff", 0, SL_E_HEADER_UTF8, NULL, NULL, 0},
    /* step 5 */
    {"N = 0", "", 0, SL_E_HEADER_JSON, "at byte 0", NULL, 0},
    {"whitespace only", "    ", 0, SL_E_HEADER_JSON, NULL, NULL, 0},
    {"root is an array", "[]", 0, SL_E_HEADER_JSON, NULL, NULL, 0},
    {"trailing characters", "{} x", 0, SL_E_HEADER_JSON, "at byte 3", NULL, 0},
    {"NUL padding", NULL, 0, SL_E_HEADER_JSON, "trailing", "\x04\0\0\0\0\0\0\0{}\0\0", 12},
    {"byte order mark", "\xef\xbb\xbf{}", 0, SL_E_HEADER_JSON, NULL, NULL, 0},
    {"unclosed root", "{" T("a", "U8", "[1]", 0, 1), 1, SL_E_HEADER_JSON, NULL, NULL, 0},
    {"unknown dtype", "{" T("w", "F128", "[1]", 0, 16) "}", 16, SL_E_HEADER_JSON, "'w': unknown dtype 'F128'", NULL, 0},
    {"dtype case", "{" T("w", "f32", "[1]", 0, 4) "}", 4, SL_E_HEADER_JSON, "unknown dtype", NULL, 0},
    {"dtype not a string", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON,
     "tensor 'w': expected a string", NULL, 0},
    {"negative shape", "{" T("w", "U8", "[-1]", 0, 1) "}", 1, SL_E_HEADER_JSON, "tensor 'w': negative", NULL, 0},
    {"float shape", "{" T("w", "U8", "[1.0]", 0, 1) "}", 1, SL_E_HEADER_JSON, "tensor 'w': number is not an integer", NULL, 0},
    {"string in shape", "{" T("w", "U8", "[\"1\"]", 0, 1) "}", 1, SL_E_HEADER_JSON,
     "tensor 'w': expected an unsigned integer", NULL, 0},
    {"negative offset", "{" T("w", "U8", "[1]", -1, 0) "}", 1, SL_E_HEADER_JSON, "tensor 'w': negative", NULL, 0},
    {"exponent", "{" T("w", "U8", "[1e0]", 0, 1) "}", 1, SL_E_HEADER_JSON, "not an integer", NULL, 0},
    {"leading zero", "{" T("w", "U8", "[01]", 0, 1) "}", 1, SL_E_HEADER_JSON, "leading zero", NULL, 0},
    {"-0", "{" T("w", "U8", "[-0]", 0, 0) "}", 0, SL_E_HEADER_JSON, "negative", NULL, 0},
    {"2^64 in offsets", "{" T("w", "U8", "[0]", 0, 18446744073709551616) "}", 0, SL_E_HEADER_JSON, "2^64-1", NULL, 0},
    {"shape not an array", "{\"w\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON, NULL,
     NULL, 0},
    {"1 data offset", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, SL_E_HEADER_JSON, "'w'",
     NULL, 0},
    {"3 data offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}", 1, SL_E_HEADER_JSON,
     "'w'", NULL, 0},
    {"missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON,
     "'w': missing field 'dtype'", NULL, 0},
    {"missing data_offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, SL_E_HEADER_JSON, "data_offsets", NULL, 0},
    {"duplicate field", "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     SL_E_HEADER_JSON, "duplicate field 'dtype'", NULL, 0},
    {"duplicate field after unescaping",
     "{\"w\":{\"dtype\":\"U8\",\"\\u0064type\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON,
     "duplicate field", NULL, 0},
    {"duplicate __metadata__", "{\"__metadata__\":{},\"__metadata\\u005f_\":{}}", 0, SL_E_HEADER_JSON,
     "__metadata__", NULL, 0},
    {"metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, SL_E_HEADER_JSON, "'k'", NULL, 0},
    {"metadata is an array", "{\"__metadata__\":[]}", 0, SL_E_HEADER_JSON, NULL, NULL, 0},
    {"tensor is a string", "{\"w\":\"F32\"}", 0, SL_E_HEADER_JSON, "'w'", NULL, 0},
    {"lone leading surrogate", "{\"\\ud800\":{}}", 0, SL_E_HEADER_JSON, "surrogate", NULL, 0},
    {"lone trailing surrogate", "{\"\\udc00x\":{}}", 0, SL_E_HEADER_JSON, "surrogate", NULL, 0},
    {"raw control character", "{\"a\tb\":{}}", 0, SL_E_HEADER_JSON, "control character", NULL, 0},
    {"invalid escape", "{\"a\\x\":{}}", 0, SL_E_HEADER_JSON, "escape", NULL, 0},
    {"bad \\u hex", "{\"a\\u12g4\":{}}", 0, SL_E_HEADER_JSON, "escape", NULL, 0},
    {"unterminated string", "{\"abc", 0, SL_E_HEADER_JSON, "unterminated", NULL, 0},
    {"missing colon", "{\"a\" 1}", 0, SL_E_HEADER_JSON, "':'", NULL, 0},
    {"trailing comma", "{" T("a", "U8", "[1]", 0, 1) ",}", 1, SL_E_HEADER_JSON, NULL, NULL, 0},
    {"nesting beyond 127", "{\"w\":{\"x\":" DEEP DEEP "1" DEEP_END DEEP_END ",\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON, "nesting", NULL, 0},
    {"bad literal in an unknown key", "{\"w\":{\"x\":nul,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     SL_E_HEADER_JSON, NULL, NULL, 0},
    /* the reference parses every number, and refuses one past a double's range wherever it is
     * (the class it gives, not SL_E_POLICY for the unknown key, nor a later step's) */
    {"number out of range in an unknown key", "{\"w\":{\"x\":1e400,\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON, "number out of range", NULL, 0},
    {"number out of range in an array, offsets wrong too", "{\"w\":{\"x\":[-2e308],\"dtype\":\"U8\","
     "\"shape\":[1],\"data_offsets\":[1,2]}}", 2, SL_E_HEADER_JSON, "number out of range", NULL, 0},
    {"an integer of 310 digits", "{\"w\":{\"x\":1" ZEROS_309 ",\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}", 1, SL_E_HEADER_JSON, "number out of range", NULL, 0},
    {"numbers a double holds (an underflow to 0): the unknown key's own class", "{\"w\":{\"x\":[1e-400,"
     "1.7976931348623157e308,1" ZEROS_30 ZEROS_30 "],\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     SL_E_POLICY, "unexpected key 'x'", NULL, 0},
    /* step 6 */
    {"first tensor not at 0", "{" T("w", "U8", "[1]", 1, 2) "}", 2, SL_E_INVALID_OFFSET, "'w'", NULL, 0},
    {"hole", "{" T("a", "U8", "[1]", 0, 1) "," T("b", "U8", "[1]", 2, 3) "}", 3, SL_E_INVALID_OFFSET, "'b'", NULL, 0},
    {"overlap", "{" T("a", "U8", "[2]", 0, 2) "," T("b", "U8", "[2]", 1, 3) "}", 3, SL_E_INVALID_OFFSET, "'b'", NULL,
     0},
    {"reversed range", "{" T("r", "U8", "[0]", 4, 0) "}", 0, SL_E_INVALID_OFFSET, "'r'", NULL, 0},
    {"reversed range at 0", "{" T("a", "U8", "[4]", 0, 4) "," T("r", "U8", "[0]", 4, 2) "}", 4, SL_E_INVALID_OFFSET,
     "end before begin", NULL, 0},
    {"aliasing (tie: name not asserted)", "{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 0, 4) "}", 4,
     SL_E_INVALID_OFFSET, NULL, NULL, 0},
    {"shape product overflow", "{" T("o", "U8", "[4294967296,4294967296]", 0, 0) "}", 0, SL_E_OVERFLOW, "'o'", NULL,
     0},
    {"[MAX,2,0] overflows left to right", "{" T("o", "U8", "[18446744073709551615,2,0]", 0, 0) "}", 0, SL_E_OVERFLOW,
     "'o'", NULL, 0},
    {"numel*bits overflow", "{" T("o", "U8", "[2305843009213693952]", 0, 0) "}", 0, SL_E_OVERFLOW, NULL, NULL, 0},
    {"F4 odd count", "{" T("m", "F4", "[3]", 0, 2) "}", 2, SL_E_MISALIGNED, "'m'", NULL, 0},
    {"F6 one element", "{" T("m", "F6_E3M2", "[1]", 0, 1) "}", 1, SL_E_MISALIGNED, "'m'", NULL, 0},
    {"size mismatch", "{" T("model.layers.3.mlp.up_proj.weight", "BF16", "[2,2]", 0, 4) "}", 4, SL_E_TENSOR_INFO,
     "t.safetensors: tensor 'model.layers.3.mlp.up_proj.weight': data_offsets [0, 4] but dtype BF16 and shape "
     "[2, 2] need 8 bytes", NULL, 0},
    {"offset error before size error", "{" T("a", "F32", "[2]", 0, 4) "," T("b", "U8", "[1]", 5, 6) "}", 6,
     SL_E_TENSOR_INFO, "'a'", NULL, 0},
    /* step 7 */
    {"trailing bytes", "{" T("a", "U8", "[1]", 0, 1) "}", 2, SL_E_INCOMPLETE, "trailing", NULL, 0},
    {"short data", "{" T("a", "U8", "[4]", 0, 4) "}", 3, SL_E_INCOMPLETE, "too short", NULL, 0},
    {"data but no tensors", "{}", 1, SL_E_INCOMPLETE, NULL, NULL, 0},
    /* policy */
    {"duplicate tensor names", "{" T("d", "U8", "[1]", 0, 1) "," T("d", "U8", "[1]", 0, 1) "}", 1, SL_E_POLICY,
     "duplicate tensor name 'd'", NULL, 0},
    {"duplicate names after unescaping", "{" T("d", "U8", "[1]", 0, 1) ",\"\\u0064\":{\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}", 1, SL_E_POLICY, "'d'", NULL, 0},
    {"duplicate name, last one wins for layout", "{" T("d", "U8", "[1]", 0, 1) "," T("d", "U8", "[2]", 0, 2) "}", 2,
     SL_E_POLICY, "duplicate", NULL, 0},
    {"duplicate __metadata__ keys", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, SL_E_POLICY, "'k'", NULL, 0},
    {"extra key in tensor", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":{}}}", 1,
     SL_E_POLICY, "'w': unexpected key 'x'", NULL, 0},
    {"__metadata__ null", "{\"__metadata__\":null}", 0, SL_E_POLICY, "null", NULL, 0},
    {"NUL in a name", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SL_E_POLICY,
     "U+0000", NULL, 0},
    {"NUL in metadata", "{\"__metadata__\":{\"k\":\"\\u0000\"}}", 0, SL_E_POLICY, "U+0000", NULL, 0},
    {"tensor in array form", "{\"w\":[\"U8\",[1],[0,1]]}", 1, SL_E_POLICY, "'w'", NULL, 0},
    {"reference errors win over policy", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2],\"x\":1}}", 2,
     SL_E_INVALID_OFFSET, "'w'", NULL, 0},
    {"JSON errors win over policy", "{\"__metadata__\":null,\"w\":5}", 0, SL_E_HEADER_JSON, NULL, NULL, 0},
};

static void test_bad_cases(void)
{
    const size_t n = sizeof(bad_cases) / sizeof(bad_cases[0]);
    EXPECT(n >= 40, "only %zu malformed cases", n);
    for (size_t i = 0; i < n; i++) {
        const bad_case *c = &bad_cases[i];
        fmt_buf b = c->json ? fmt_make(c->json, c->zeros) : (fmt_buf){malloc(c->raw_len + 1), c->raw_len};
        if (!c->json)
            memcpy(b.p, c->raw, c->raw_len);
        char err[512] = "";
        const sl_status st = check_buf(&b, err, sizeof err);
        EXPECT(st == c->want, "[%s] want %s, got %s: %s", c->what, sl_status_str(c->want), sl_status_str(st), err);
        EXPECT(strncmp(err, "t.safetensors: ", 15) == 0, "[%s] message does not name the file: %s", c->what, err);
        EXPECT(!c->needle || strstr(err, c->needle), "[%s] message lacks \"%s\": %s", c->what, c->needle, err);
        EXPECT(strchr(err, '\n') == NULL, "[%s] message is not one line", c->what);
        if (getenv("SL_TEST_VERBOSE"))
            printf("%-45s %-22s %s\n", c->what, sl_status_str(st), err);
        free(b.p);
    }
}

static void test_err_buffer(void)
{
    fmt_buf b = fmt_make("{}", 0);
    char err[8] = "garbage";
    EXPECT(sl_validate_buffer(b.p, b.len, NULL, err, sizeof err) == SL_OK && err[0] == '\0', "ok clears err");
    EXPECT(sl_validate_buffer(b.p, 3, NULL, NULL, 0) == SL_E_HEADER_TOO_SMALL, "NULL err buffer");
    EXPECT(sl_validate_buffer(b.p, 3, "x", err, sizeof err) == SL_E_HEADER_TOO_SMALL && strlen(err) == 7,
           "message truncated to the buffer");
    free(b.p);
}

int main(void)
{
    test_valid_edges();
    test_all_dtypes();
    test_parsed_fields();
    test_bad_cases();
    test_err_buffer();
    if (expect_failures)
        fprintf(stderr, "%d check(s) failed\n", expect_failures);
    else
        printf("test_header: %zu malformed cases, all checks passed\n", sizeof(bad_cases) / sizeof(bad_cases[0]));
    return expect_failures ? 1 : 0;
}
