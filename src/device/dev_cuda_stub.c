/* dev_cuda_stub.c - the "cuda" backend when shardload is built without CUDA support. The real
 * backend (dev_cuda.c, loading libcudart with dlopen) replaces this file: when it lands, this stub
 * is compiled out by defining SL_WITH_CUDA. */
#include "device/device.h"

#ifndef SL_WITH_CUDA
sl_status sl_device_cuda_open(int32_t index, const sl_load_opts *o, sl_device *out, sl_err *err)
{
    (void)index;
    (void)o;
    (void)out;
    return sl_err_set(err, SL_E_UNSUPPORTED,
                      "device 'cuda' is not supported by this build (use --device cpu)");
}
#endif
