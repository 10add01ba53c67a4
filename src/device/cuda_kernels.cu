// cuda_kernels.cu - the cuda backend's GPU conversions (cuda_kernels.h has the element
// functions, shared with the host tests). Compiled to PTX by scripts/cuda_ptx.sh into
// cuda_kernels_ptx.c, which the build embeds: the library needs no CUDA toolkit, and the driver
// JIT-compiles the PTX for whatever GPU it meets. Each kernel: n elements from src to dst,
// grid-stride, one element per thread per step (the loads coalesce; the work is memory-bound).
#define SLK_FN __device__ __forceinline__
#include "cuda_kernels.h"

#define SLK_KERNEL(name, elem)                                                                   \
    extern "C" __global__ void name(unsigned *dst, const unsigned short *src, unsigned long long n) \
    {                                                                                            \
        const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;              \
        for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;   \
             i < n; i += step)                                                                   \
            dst[i] = elem(src[i]);                                                               \
    }

SLK_KERNEL(sl_bf16_to_f32, slk_bf16_to_f32)
SLK_KERNEL(sl_f16_to_f32, slk_f16_to_f32)
