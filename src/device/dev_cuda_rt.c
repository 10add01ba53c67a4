/* dev_cuda_rt.c - loading the CUDA runtime (dev_cuda_rt.h). Once loaded, the runtime is never
 * unloaded (unloading libcudart while other code may still hold its streams is unsafe, and the
 * driver keeps its context anyway). A failed load is not remembered: the next open tries again,
 * e.g. after the caller has named another runtime (sl_cuda_set_runtime). */
#include "device/dev_cuda_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cuda_api sl_cuda_api;

static pthread_mutex_t cu_load_lock = PTHREAD_MUTEX_INITIALIZER; /* guards the three below */
static int cu_loaded;
static char cu_path[4096]; /* sl_cuda_set_runtime's choice; "": the default search */

static const struct {
    const char *name;
    size_t off;
    int optional;   /* left NULL where the runtime lacks it */
} cu_syms[] = {
    {"cudaGetDeviceCount", offsetof(cuda_api, GetDeviceCount), 0},
    {"cudaSetDevice", offsetof(cuda_api, SetDevice), 0},
    {"cudaMalloc", offsetof(cuda_api, Malloc), 0},
    {"cudaFree", offsetof(cuda_api, Free), 0},
    {"cudaMemGetInfo", offsetof(cuda_api, MemGetInfo), 0},
    {"cudaStreamCreate", offsetof(cuda_api, StreamCreate), 0},
    {"cudaStreamDestroy", offsetof(cuda_api, StreamDestroy), 0},
    {"cudaStreamSynchronize", offsetof(cuda_api, StreamSynchronize), 0},
    {"cudaMemcpy", offsetof(cuda_api, Memcpy), 0},
    {"cudaMemcpyAsync", offsetof(cuda_api, MemcpyAsync), 0},
    {"cudaMemcpy2D", offsetof(cuda_api, Memcpy2D), 0},
    {"cudaMemcpy2DAsync", offsetof(cuda_api, Memcpy2DAsync), 0},
    {"cudaMemsetAsync", offsetof(cuda_api, MemsetAsync), 0},
    {"cudaHostRegister", offsetof(cuda_api, HostRegister), 0},
    {"cudaHostUnregister", offsetof(cuda_api, HostUnregister), 0},
    {"cudaEventCreateWithFlags", offsetof(cuda_api, EventCreateWithFlags), 0},
    {"cudaEventRecord", offsetof(cuda_api, EventRecord), 0},
    {"cudaEventSynchronize", offsetof(cuda_api, EventSynchronize), 0},
    {"cudaEventDestroy", offsetof(cuda_api, EventDestroy), 0},
    {"cudaGetErrorString", offsetof(cuda_api, GetErrorString), 0},
    {"cudaGetLastError", offsetof(cuda_api, GetLastError), 0},
    {"cudaLibraryLoadData", offsetof(cuda_api, LibraryLoadData), 1},
    {"cudaLibraryGetKernel", offsetof(cuda_api, LibraryGetKernel), 1},
    {"cudaLaunchKernel", offsetof(cuda_api, LaunchKernel), 1},
};

static int cu_resolve(void *lib, const char *path, char *msg, size_t len)
{
    for (size_t i = 0; i < sizeof cu_syms / sizeof cu_syms[0]; i++) {
        void *sym = dlsym(lib, cu_syms[i].name);
        if (!sym && cu_syms[i].optional)
            continue;
        if (!sym) {
            snprintf(msg, len, "device 'cuda': the CUDA runtime %.300s lacks %s", path,
                     cu_syms[i].name);
            return -1;
        }
        /* memcpy: ISO C has no cast from an object pointer to a function pointer. */
        memcpy((char *)&sl_cuda_api + cu_syms[i].off, &sym, sizeof sym);
    }
    return 0;
}

/* The loader's search path first; then the toolkit's usual home, which CUDA's installers do not
 * always add to ld.so.conf. */
static void *cu_dlopen_default(char *why, size_t len)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11",
                                        "libcudart.so"};
    static const char *const dirs[] = {"", "/usr/local/cuda/lib64/",
                                       "/usr/local/cuda/targets/x86_64-linux/lib/"};
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char path[160];
            snprintf(path, sizeof path, "%s%s", dirs[k], names[i]);
            void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (lib)
                return lib;
            const char *e = dlerror();
            if (k == 0)
                snprintf(why, len, "%s", e ? e : "not found");
        }
    }
    return NULL;
}

/* Caller holds load_lock. 0 when the table is filled; else msg says why. */
static int cu_try_load(char *msg, size_t len)
{
    const char *env = cu_path; /* the caller's runtime, or "" */
    char why[512] = "";
    void *lib = NULL;
    if (env && *env) {
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            snprintf(msg, len, "device 'cuda': CUDA runtime not found: cannot load %.300s "
                     "(%.300s); use --device cpu", env, e ? e : "dlopen failed");
            return -1;
        }
    } else if (!(lib = cu_dlopen_default(why, sizeof why))) {
        snprintf(msg, len, "device 'cuda': CUDA runtime not found (libcudart.so.13/12/11: %s); "
                 "install it, name it (SL_CUDART for the CLI), or use --device cpu", why);
        return -1;
    }
    if (cu_resolve(lib, env && *env ? env : "libcudart", msg, len) != 0) {
        dlclose(lib);
        return -1;
    }
    return 0;
}

sl_status sl_cuda_rt_load(sl_err *err)
{
    char msg[768] = "";
    pthread_mutex_lock(&cu_load_lock);
    if (!cu_loaded)
        cu_loaded = cu_try_load(msg, sizeof msg) == 0;
    const int ok = cu_loaded;
    pthread_mutex_unlock(&cu_load_lock);
    return ok ? SL_OK : sl_err_set(err, SL_E_UNSUPPORTED, "%s", msg);
}


/* The kernels' library: loaded once, never unloaded (as the runtime). */
static cudaLibrary_t cu_lib;
static int cu_lib_tried;
static char cu_lib_why[256];

int sl_cuda_kernel(const char *name, cudaKernel_t *k, char *why, size_t why_len)
{
    pthread_mutex_lock(&cu_load_lock);
    if (!cu_lib_tried && cu_loaded) {
        cu_lib_tried = 1;
        if (!sl_cuda_api.LibraryLoadData || !sl_cuda_api.LibraryGetKernel || !sl_cuda_api.LaunchKernel) {
            snprintf(cu_lib_why, sizeof cu_lib_why, "the CUDA runtime lacks cudaLibraryLoadData (CUDA 12+)");
        } else {
            const cudaError_t e = sl_cuda_api.LibraryLoadData(&cu_lib, sl_cuda_kernels_ptx, NULL, NULL, 0,
                                                              NULL, NULL, 0);
            if (e != 0) {
                snprintf(cu_lib_why, sizeof cu_lib_why, "cudaLibraryLoadData of the conversion kernels: %s",
                         sl_cuda_api.GetErrorString(e));
                (void)sl_cuda_api.GetLastError();
                cu_lib = NULL;
            }
        }
    }
    cudaError_t e = cu_lib ? sl_cuda_api.LibraryGetKernel(k, cu_lib, name) : -1;
    if (cu_lib && e != 0) {
        snprintf(why, why_len, "cudaLibraryGetKernel %s: %s", name, sl_cuda_api.GetErrorString(e));
        (void)sl_cuda_api.GetLastError();
    } else if (!cu_lib) {
        snprintf(why, why_len, "%s", cu_loaded ? cu_lib_why : "the CUDA runtime is not loaded");
    }
    pthread_mutex_unlock(&cu_load_lock);
    return e == 0 ? 0 : -1;
}

sl_status sl_cuda_set_runtime(const char *path)
{
    const char *want = path ? path : "";
    sl_status st = SL_OK;
    if (strlen(want) >= sizeof cu_path)
        return SL_E_INVALID_ARG;
    pthread_mutex_lock(&cu_load_lock);
    if (!cu_loaded)
        snprintf(cu_path, sizeof cu_path, "%s", want);
    else if (strcmp(cu_path, want) != 0)
        st = SL_E_INVALID_ARG; /* a runtime is loaded already: it stays for the process */
    pthread_mutex_unlock(&cu_load_lock);
    return st;
}
