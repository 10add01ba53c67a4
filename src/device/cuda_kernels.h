/* cuda_kernels.h - the element conversions the cuda backend runs on the GPU (cuda_kernels.cu,
 * compiled to PTX into cuda_kernels_ptx.c by scripts/cuda_ptx.sh), written once for the kernels
 * and for the host: tests/test_cuda_kernels.c checks them against the engine's host conversions
 * (load/convert.c) for every one of the 65,536 inputs, bit for bit, and the CUDA stand-in runs
 * them for its kernels. Integer operations only: a GPU's float arithmetic returns its canonical
 * NaN (the host's keeps the payload), and nothing here may differ from the host's conversion.
 * Widening only: the host sends the narrower bytes and the GPU writes the wider ones. */
#ifndef SL_DEVICE_CUDA_KERNELS_H
#define SL_DEVICE_CUDA_KERNELS_H

#ifndef SLK_FN
#define SLK_FN static inline
#endif

/* The kernels' names in the PTX (extern "C"), each (dst, src, n): n elements, grid-stride. */
#define SLK_BF16_TO_F32 "sl_bf16_to_f32"
#define SLK_F16_TO_F32 "sl_f16_to_f32"

SLK_FN unsigned slk_bf16_to_f32(unsigned short h)
{
    return (unsigned)h << 16;
}

/* IEEE half to single: exact. A NaN keeps its payload and is quieted, as the host's conversion
 * (a float multiply) leaves it; subnormal halves become normal singles. */
SLK_FN unsigned slk_f16_to_f32(unsigned short h)
{
    const unsigned sign = ((unsigned)h & 0x8000u) << 16;
    const unsigned exp = ((unsigned)h >> 10) & 0x1fu;
    unsigned mant = (unsigned)h & 0x3ffu;
    if (exp == 0x1fu)
        return sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
    if (exp != 0)
        return sign | ((exp + 112u) << 23) | (mant << 13);
    if (mant == 0)
        return sign;
    unsigned e = 113u;   /* 2^-14 * (mant / 2^10): shift the leading 1 up to bit 10 */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return sign | (e << 23) | ((mant & 0x3ffu) << 13);
}

#endif /* SL_DEVICE_CUDA_KERNELS_H */
