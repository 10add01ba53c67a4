/* load_to_gpu.c - loading straight into GPU memory with the C API, the way an inference engine
 * would: plan a checkpoint for TP GPUs, load it with the cuda backend, and take each parameter's
 * device address (and GPU) to wrap in the engine's own tensors. Needs no CUDA headers: the
 * library loads the runtime itself. Built with the tests; tests/cli_cuda.sh runs it on the
 * host-memory stand-in of the runtime.
 * Usage: load_to_gpu CHECKPOINT_DIR [TP] */
#include <shardload.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    sl_checkpoint *ck = NULL;
    sl_plan *plan = NULL;
    sl_model *m = NULL;
    int rc = 1;
    if (argc < 2) {
        fprintf(stderr, "usage: load_to_gpu CHECKPOINT_DIR [TP]\n");
        return 2;
    }
    sl_cuda_set_runtime(getenv("SL_CUDART"));                 /* NULL: libcudart from the loader's path */
    if (sl_cuda_gpu_count() == 0) {
        fprintf(stderr, "no CUDA GPU here (or no CUDA runtime; SL_CUDART picks one)\n");
        return 1;
    }
    if (sl_checkpoint_open(argv[1], &ck) != SL_OK) {
        fprintf(stderr, "%s\n", sl_checkpoint_errmsg(ck));
        goto out;
    }
    sl_plan_opts po;
    sl_plan_opts_init(&po);
    po.tp = argc > 2 ? atoi(argv[2]) : 1;
    if (sl_plan_build(ck, &po, &plan) != SL_OK) {
        fprintf(stderr, "%s\n", sl_plan_errmsg(plan));
        goto out;
    }
    sl_load_opts lo;
    sl_load_opts_init(&lo);
    lo.device = "cuda";                                        /* device d on GPU d % count */
    if (sl_load(ck, plan, &lo, &m) != SL_OK) {
        fprintf(stderr, "%s\n", sl_model_errmsg(m));
        goto out;
    }
    for (int32_t d = 0; d < sl_model_device_count(m); d++) {
        const int64_t n = sl_plan_param_count(plan, d);
        sl_param_info first, last;
        sl_plan_param(plan, d, 0, &first);
        sl_plan_param(plan, d, n - 1, &last);
        printf("device %d on GPU %d: %lld parameters, %llu bytes; %s at %p, %s at %p\n", d,
               sl_model_device_gpu(m, d), (long long)n,
               (unsigned long long)sl_model_device_allocated(m, d), first.name,
               sl_model_param_ptr(m, d, 0), last.name, sl_model_param_ptr(m, d, n - 1));
    }
    rc = 0;
out:
    sl_model_free(m);   /* the device memory goes with the model */
    sl_plan_free(plan);
    sl_checkpoint_close(ck);
    return rc;
}
