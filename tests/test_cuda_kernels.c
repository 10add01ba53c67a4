/* test_cuda_kernels.c - the GPU's conversions (src/device/cuda_kernels.h, what cuda_kernels.cu
 * runs) equal the host's (load/convert.c) for every 16-bit input, bit for bit: what a load that
 * converts on the GPU writes is what one that converts on the host writes. */
#include "device/cuda_kernels.h"
#include "load/convert.h"
#include "expect.h"

#include <stdint.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

int main(void)
{
    unsigned bad_bf16 = 0, bad_f16 = 0;
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        bad_bf16 += slk_bf16_to_f32((unsigned short)h) != bits(sl_bf16_to_f32((uint16_t)h));
        bad_f16 += slk_f16_to_f32((unsigned short)h) != bits(sl_f16_to_f32((uint16_t)h));
    }
    EXPECT(bad_bf16 == 0, "%u of 65536 bf16 inputs differ from the host's", bad_bf16);
    EXPECT(bad_f16 == 0, "%u of 65536 f16 inputs differ from the host's", bad_f16);
    /* spot values, so that a host conversion gone wrong the same way is caught too */
    EXPECT(slk_f16_to_f32(0x3c00u) == 0x3f800000u, "spot value");   /* 1.0 */
    EXPECT(slk_f16_to_f32(0x0001u) == 0x33800000u, "spot value");   /* 2^-24, the smallest subnormal */
    EXPECT(slk_f16_to_f32(0xfc00u) == 0xff800000u, "spot value");   /* -inf */
    EXPECT(slk_f16_to_f32(0x7c01u) == 0x7fc02000u, "spot value");   /* a signalling NaN, quieted, payload kept */
    EXPECT(slk_bf16_to_f32(0xbf80u) == 0xbf800000u, "spot value");  /* -1.0 */
    return expect_failures ? 1 : 0;
}
