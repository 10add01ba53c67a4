/* test_http_engine.c - the remote read engine's own memory (io/io_http.c), without a server: what it
 * holds for requests in flight beyond their buffers (the staging) is bounded by its connections,
 * not by the requests' lengths over the range size. Four requests of 64 MiB in 4 KiB ranges are
 * 65536 ranges; the engine made a ~3 KB transfer for each at submit (194 MB of heap outside the
 * staging budget). Now it makes them as they can run, twice `connections` at most. The heap in use
 * is read with glibc's mallinfo2; elsewhere (and under a sanitizer's allocator) the test skips.
 * Nothing is sent: the requests are dropped by close, as after a failed load. */
#include "io/http.h"
#include "expect.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
static size_t heap_in_use(void)
{
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}
#else
static size_t heap_in_use(void)
{
    return 0;
}
#endif

enum { N_REQ = 4 };
#define REQ_BYTES ((size_t)64 << 20)

int main(void)
{
    if (heap_in_use() == 0) {
        fprintf(stderr, "skip: mallinfo2 sees no heap (glibc before 2.33, or a sanitizer's allocator)\n");
        return 77;
    }
    sl_http_cfg cfg;
    sl_http_obj obj;
    sl_err e = {0};
    sl_load_opts o;
    sl_load_opts_init(&o);
    o.remote_range_bytes = 4096;
    EXPECT(sl_http_cfg_init(&cfg, &o, &e) == SL_OK, "cfg: %s", sl_err_msg(&e));
    EXPECT(sl_http_obj_init(&obj, &cfg, "http://127.0.0.1:1/m.safetensors", &e) == SL_OK, "obj: %s", sl_err_msg(&e));
    obj.size = (uint64_t)N_REQ * REQ_BYTES;
    obj.size_known = 1;
    /* the requests' buffers: mapped, never touched (nothing is received) */
    unsigned char *buf = mmap(NULL, N_REQ * REQ_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(buf != MAP_FAILED, "mmap of the buffers");
    sl_io io;
    const sl_status st = sl_io_http_open(&cfg.tune, N_REQ, &io, &e);
    if (st == SL_E_UNSUPPORTED) {
        fprintf(stderr, "skip: built without libcurl\n");
        return 77;
    }
    EXPECT(st == SL_OK, "open: %s", sl_err_msg(&e));
    if (st != SL_OK || buf == MAP_FAILED)
        return 1;
    sl_io_req r[N_REQ];
    const size_t before = heap_in_use();
    for (size_t i = 0; i < N_REQ; i++) {
        r[i] = (sl_io_req){.fd = -1, .obj = &obj, .off = i * REQ_BYTES, .len = REQ_BYTES, .buf = buf + i * REQ_BYTES};
        EXPECT(io.ops->submit(io.ctx, &r[i], &e) == SL_OK, "submit %zu: %s", i, sl_err_msg(&e));
    }
    const size_t grew = heap_in_use() - before;
    /* a part record is ~3 KB and there are 2 * 16 of them, made at open: submit adds next to nothing */
    EXPECT(grew < ((size_t)1 << 20), "%d requests of %zu MiB in 4 KiB ranges took %zu bytes of heap at submit "
           "(%zu ranges)", N_REQ, REQ_BYTES >> 20, grew, N_REQ * REQ_BYTES / 4096);
    sl_io_close(&io);
    munmap(buf, N_REQ * REQ_BYTES);
    sl_http_obj_free(&obj);
    sl_http_cfg_free(&cfg);
    sl_err_clear(&e);
    return expect_failures ? 1 : 0;
}
