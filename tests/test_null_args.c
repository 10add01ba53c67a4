/* test_null_args.c - every public call given a NULL handle or a NULL out-pointer answers with a
 * status, 0 or NULL, as the header's conventions say, instead of dereferencing it: a constructor
 * that ran out of memory hands back a NULL handle, and a caller that passes it on must get an
 * error, not a crash. (sl_plan_build with a NULL out, the plan getters on a NULL plan,
 * sl_plan_param, sl_model_read_param and sl_model_param_xxh3 with NULL destinations,
 * sl_dtype_from_name and sl_plan_opts_init with NULL all crashed.) */
#include "expect.h"
#include "load_testutil.h"

static void test_plan_calls(void)
{
    const sl_plan *p = NULL;
    EXPECT(sl_plan_tp(p) == 0 && sl_plan_pp(p) == 0 && sl_plan_ep(p) == 0 &&
               sl_plan_device_count(p) == 0 && sl_plan_param_count(p, 0) == 0 &&
               sl_plan_device_bytes(p, 0) == 0 && sl_plan_total_bytes(p) == 0 &&
               sl_plan_read_bytes(p) == 0 && sl_plan_device_file_bytes(p, 0, 0) == 0,
           "a NULL plan's getters");
    (void)sl_plan_layout(p);
    (void)sl_plan_dtype(p);
    sl_param_info pi;
    EXPECT(sl_plan_param(p, 0, 0, &pi) == SL_E_INVALID_ARG, "sl_plan_param of a NULL plan");
    int32_t tr = 0, pr = 0;
    EXPECT(sl_plan_device_ranks(p, 0, &tr, &pr) == SL_E_INVALID_ARG, "sl_plan_device_ranks");
    int64_t first = -1, count = -1;
    EXPECT(sl_plan_stage_layers(p, 0, &first, &count) == SL_E_INVALID_ARG && first == 0 && count == 0,
           "sl_plan_stage_layers of a NULL plan");
    EXPECT(sl_plan_errmsg(p) != NULL, "sl_plan_errmsg of a NULL plan");
    sl_plan_opts_init(NULL);
    sl_plan_opts o;
    sl_plan_opts_init(&o);
    EXPECT(sl_plan_build(NULL, &o, NULL) == SL_E_INVALID_ARG, "sl_plan_build with a NULL out");
    EXPECT(sl_plan_build(NULL, NULL, NULL) == SL_E_INVALID_ARG, "sl_plan_build with NULL options and out");
    sl_plan_free(NULL);
}

static void test_dtype_calls(void)
{
    sl_dtype dt = SL_DTYPE_F32;
    EXPECT(sl_dtype_from_name(NULL, 3, &dt) == -1 && sl_dtype_from_name("F32", 3, NULL) == -1,
           "sl_dtype_from_name with NULL");
    EXPECT(sl_dtype_from_name("F32", 3, &dt) == 0 && dt == SL_DTYPE_F32, "sl_dtype_from_name");
}

/* A model's calls with NULL destinations: a real one-tensor load, so that only the NULL is wrong. */
static void test_model_calls(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/one.safetensors", dir);
    sl_writer *w = NULL;
    const uint64_t shape[1] = {16};
    int64_t idx = 0;
    float v[16] = {0};
    EXPECT(sl_writer_open(path, &w) == SL_OK && sl_writer_add(w, "x", SL_DTYPE_F32, 1, shape, &idx) == SL_OK &&
               sl_writer_begin(w) == SL_OK && sl_writer_write(w, idx, 0, v, sizeof v) == SL_OK &&
               sl_writer_finish(w) == SL_OK, "writer: %s", sl_writer_errmsg(w));
    sl_writer_free(w);
    sl_checkpoint *ck = NULL;
    EXPECT(sl_checkpoint_open(path, &ck) == SL_OK, "open: %s", sl_checkpoint_errmsg(ck));
    const uint64_t start[1] = {0}, len[1] = {16};
    const sl_box b = {.tensor = "x", .device = 0, .ndim = 1, .start = start, .len = len};
    sl_plan *p = NULL;
    EXPECT(sl_plan_build_boxes(ck, &b, 1, 1, -1, &p) == SL_OK, "plan: %s", sl_plan_errmsg(p));
    EXPECT(sl_plan_param(p, 0, 0, NULL) == SL_E_INVALID_ARG, "sl_plan_param into NULL");
    sl_model *m = NULL;
    EXPECT(sl_load(ck, p, NULL, &m) == SL_OK, "load: %s", sl_model_errmsg(m));
    EXPECT(sl_model_read_param(m, 0, 0, 0, NULL, 4) == SL_E_INVALID_ARG &&
               strstr(sl_model_errmsg(m), "into NULL"), "sl_model_read_param into NULL: %s",
           sl_model_errmsg(m));
    EXPECT(sl_model_read_param(m, 0, 0, 0, NULL, 0) == SL_OK, "an empty read into NULL");
    EXPECT(sl_model_param_xxh3(m, 0, 0, NULL) == SL_E_INVALID_ARG, "sl_model_param_xxh3 into NULL");
    uint64_t h = 0;
    EXPECT(sl_model_param_xxh3(m, 0, 0, &h) == SL_OK && h == sl_xxh3(v, sizeof v), "sl_model_param_xxh3");
    sl_model_free(m);
    sl_plan_free(p);
    sl_checkpoint_close(ck);
    unlink(path);
}

int main(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "null_args");
    test_plan_calls();
    test_dtype_calls();
    test_model_calls(dir);
    rmdir(dir);
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    else
        printf("test_null_args: all passed\n");
    return expect_failures ? 1 : 0;
}
