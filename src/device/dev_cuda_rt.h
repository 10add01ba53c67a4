/* dev_cuda_rt.h - the CUDA runtime as the cuda backend (dev_cuda.c) sees it: libcudart loaded at
 * run time with dlopen (dev_cuda_rt.c), the entry points it uses resolved into one table. The
 * prototypes and the few constants are declared here (cudaError_t is an int, streams and events
 * are opaque pointers, enums are passed as int), which is ABI-stable across CUDA 11-13; they were
 * compared by hand with CUDA 13's cuda_runtime_api.h and driver_types.h. */
#ifndef SL_DEV_CUDA_RT_H
#define SL_DEV_CUDA_RT_H

#include "shardload.h"

#include "common/sl_err.h"

#include <stddef.h>

typedef int cudaError_t;          /* cudaSuccess == 0 */
typedef void *cudaStream_t;
typedef void *cudaEvent_t;

enum {
    CU_MEMCPY_H2D = 1,            /* cudaMemcpyHostToDevice */
    CU_MEMCPY_D2H = 2,            /* cudaMemcpyDeviceToHost */
    CU_HOST_REGISTER_PORTABLE = 1, /* cudaHostRegisterPortable: pinned for every context */
    CU_EVENT_DISABLE_TIMING = 2    /* cudaEventDisableTiming: the cheapest kind of event */
};

typedef struct cuda_api {
    cudaError_t (*GetDeviceCount)(int *count);
    cudaError_t (*SetDevice)(int gpu);
    cudaError_t (*Malloc)(void **ptr, size_t n);
    cudaError_t (*Free)(void *ptr);
    cudaError_t (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);
    cudaError_t (*StreamCreate)(cudaStream_t *s);
    cudaError_t (*StreamDestroy)(cudaStream_t s);
    cudaError_t (*StreamSynchronize)(cudaStream_t s);
    cudaError_t (*Memcpy)(void *dst, const void *src, size_t n, int kind);
    cudaError_t (*MemcpyAsync)(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
    cudaError_t (*Memcpy2D)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t height, int kind);
    cudaError_t (*Memcpy2DAsync)(void *dst, size_t dpitch, const void *src, size_t spitch,
                                 size_t width, size_t height, int kind, cudaStream_t s);
    cudaError_t (*MemsetAsync)(void *ptr, int value, size_t n, cudaStream_t s);
    cudaError_t (*HostRegister)(void *ptr, size_t n, unsigned flags);
    cudaError_t (*HostUnregister)(void *ptr);
    cudaError_t (*EventCreateWithFlags)(cudaEvent_t *e, unsigned flags);
    cudaError_t (*EventRecord)(cudaEvent_t e, cudaStream_t s);
    cudaError_t (*EventSynchronize)(cudaEvent_t e);
    cudaError_t (*EventDestroy)(cudaEvent_t e);
    const char *(*GetErrorString)(cudaError_t e);
    cudaError_t (*GetLastError)(void);   /* returns and clears the thread's last error */
} cuda_api;

/* The entry points; filled by the first sl_cuda_rt_load that succeeds, never changed after. */
extern cuda_api sl_cuda_api;

/* Loads the runtime once per process: $SL_CUDART alone when set, else libcudart.so.13, .12, .11,
 * .so from the loader's path, then from /usr/local/cuda. SL_E_UNSUPPORTED "CUDA runtime not found
 * ..." (or naming the entry point it lacks) otherwise; a failure is not remembered. */
sl_status sl_cuda_rt_load(sl_err *err);

#endif /* SL_DEV_CUDA_RT_H */
