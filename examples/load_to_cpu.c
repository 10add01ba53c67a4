/* load_to_cpu.c - the README's C API example, built with the tests so that it keeps compiling:
 * open a checkpoint directory, plan it for 4 devices in vLLM's TP layout, load it on cpu. */
#include <shardload.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    sl_checkpoint *ck = NULL;
    sl_plan *plan = NULL;
    sl_model *m = NULL;
    int rc = 1;
    if (sl_checkpoint_open(argc > 1 ? argv[1] : "ckpt/", &ck) != SL_OK) {  /* validates every header */
        fprintf(stderr, "%s\n", sl_checkpoint_errmsg(ck));
        goto out;
    }
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.tp = 4;                                                 /* 4 devices, vLLM TP layout */
    if (sl_plan_build(ck, &po, &plan) != SL_OK) {              /* strict: missing/extra/shape */
        fprintf(stderr, "%s\n", sl_plan_errmsg(plan));
        goto out;
    }
    sl_load_opts lo;
    sl_load_opts_init(&lo);                                    /* cpu, auto I/O, 64 MiB staging */
    if (sl_load(ck, plan, &lo, &m) != SL_OK) {                 /* all or nothing */
        fprintf(stderr, "%s\n", sl_model_errmsg(m));
        goto out;
    }
    for (int32_t d = 0; d < sl_model_device_count(m); d++) {
        sl_param_info pi;
        sl_plan_param(plan, d, 0, &pi);
        printf("device %d: %llu bytes; %s at %p\n", d, (unsigned long long)sl_model_device_allocated(m, d),
               pi.name, sl_model_param_host_ptr(m, d, 0));
    }
    rc = 0;
out:
    sl_model_free(m);
    sl_plan_free(plan);
    sl_checkpoint_close(ck);
    return rc;
}
