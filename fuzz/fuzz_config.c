/* fuzz_config.c - a plan built from a config.json alone (sl_plan_build with no checkpoint, the
 * public entry `shardload plan --config` takes) on arbitrary bytes: the config parser, the
 * built-in rule tables instantiated with its sizes (MoE, FP8 quantization_config), and the
 * planner on three meshes (tp 1 in BF16; then tp 2 pp 2 with expert parallelism in the config's
 * dtype, and spmd 4 in F32). The bytes are the config text in memory (sl_plan_opts.config_json,
 * exactly `size` bytes with no NUL after them, so a read past the end is ASan's to see); a file
 * is read whole into the same parser. A failure is a status with a message, and an SL_E_CONFIG
 * names the config; a plan packs each device's parameters with no gaps. A plan that takes more
 * than FZ_PLAN_MAX_S seconds aborts: a config of a few hundred bytes must not cost minutes
 * (libFuzzer's -timeout says so too, but the corpus replay runs without it). */
#include "fz_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The largest plan the limits allow (1M tensors) takes about 11 s under ASan. */
#define FZ_PLAN_MAX_S 60.0

#define FZ_NAME "fuzz/config.json"   /* the name the config's messages must begin with */

/* One plan; 1 when it was built. */
static int fz_plan(const uint8_t *text, size_t len, int32_t tp, int32_t pp, sl_layout layout,
                   int32_t ep, int32_t dtype)
{
    sl_plan_opts o;
    sl_plan *p = NULL;
    fz_mesh_opts(&o, tp, pp, layout, ep, dtype);
    o.config_path = FZ_NAME;   /* with config_json: only its name */
    o.config_json = (const char *)text;
    o.config_json_len = len;
    const double t0 = fz_now_s();
    const sl_status st = sl_plan_build(NULL, &o, &p);
    if (fz_now_s() - t0 > FZ_PLAN_MAX_S)
        abort();
    const char *msg = p ? sl_plan_errmsg(p) : "";
    if (st == SL_OK)
        fz_check_plan(p);
    else if (!fz_status_known(st) || !msg || !msg[0] ||
             (st == SL_E_CONFIG && strncmp(msg, FZ_NAME, strlen(FZ_NAME)) != 0))
        abort();   /* every failure is a documented status with a message; a config's names it */
    sl_plan_free(p);
    return st == SL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an empty input's pointer may be NULL, which config_json takes as "no text" */
    static const uint8_t empty[1];
    const uint8_t *text = size ? data : empty;
    if (fz_plan(text, size, 1, 1, SL_LAYOUT_TP, 0, SL_DTYPE_BF16)) {
        fz_plan(text, size, 2, 2, SL_LAYOUT_TP, 1, -1);   /* the config's dtype, if it has one */
        fz_plan(text, size, 4, 1, SL_LAYOUT_SPMD, 0, SL_DTYPE_F32);
    }
    return 0;
}
