/* test_device.c - the device interface (src/device/device.h) without the engine: the ops table
 * check (required members, an async part that is all or nothing), the defaults the sl_device_*
 * wrappers give a backend that sets only the required members (what a new backend such as PJRT
 * starts from), write2d's row-by-row fallback, and the cpu backend through the wrappers,
 * including a prefault stopped by its atomic flag. */
#include "device/device.h"
#include "expect.h"

#include <stdlib.h>
#include <string.h>

/* ---- a minimal synchronous backend: host memory, required members only ----------------------- */

typedef struct mini {
    unsigned char mem[4096];
    uint64_t bytes;
    int writes;
} mini;

static sl_status mini_alloc(void *ctx, uint64_t bytes, sl_err *err)
{
    mini *m = ctx;
    SL_CHECK(bytes <= sizeof m->mem, err, SL_E_NOMEM, "mini: %llu bytes", (unsigned long long)bytes);
    m->bytes = bytes;
    return SL_OK;
}

static sl_status mini_write(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err)
{
    mini *m = ctx;
    SL_TRY(sl_device_check_range("mini", 0, m->bytes, off, n, err));
    memcpy(m->mem + off, src, n);
    m->writes++;
    return SL_OK;
}

static sl_status mini_zero(void *ctx, uint64_t off, uint64_t n, sl_err *err)
{
    mini *m = ctx;
    SL_TRY(sl_device_check_range("mini", 0, m->bytes, off, n, err));
    memset(m->mem + off, 0, (size_t)n);
    return SL_OK;
}

static sl_status mini_read(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err)
{
    mini *m = ctx;
    SL_TRY(sl_device_check_range("mini", 0, m->bytes, off, n, err));
    memcpy(dst, m->mem + off, n);
    return SL_OK;
}

static uint64_t mini_allocated(const void *ctx)
{
    return ((const mini *)ctx)->bytes;
}

static void mini_free(void *ctx)
{
    (void)ctx;
}

static const sl_device_ops mini_ops = {
    .name = "mini", .alloc = mini_alloc, .write = mini_write, .zero = mini_zero,
    .read = mini_read, .allocated = mini_allocated, .free = mini_free,
};

/* ---- an async part with a counter per member ------------------------------------------------- */

static int n_pin, n_unpin, n_fence, n_mark, n_wait, n_2d;

static sl_status a_pin(void *c, void *p, size_t n, sl_err *e)
{
    (void)c, (void)p, (void)n, (void)e;
    n_pin++;
    return SL_OK;
}
static void a_unpin(void *c, void *p)
{
    (void)c, (void)p;
    n_unpin++;
}
static sl_status a_fence(void *c, sl_err *e)
{
    (void)c, (void)e;
    n_fence++;
    return SL_OK;
}
static sl_status a_mark(void *c, unsigned t, sl_err *e)
{
    (void)c, (void)t, (void)e;
    n_mark++;
    return SL_OK;
}
static sl_status a_wait(void *c, unsigned t, sl_err *e)
{
    (void)c, (void)t, (void)e;
    n_wait++;
    return SL_OK;
}
static sl_status a_2d(void *c, uint64_t o, uint64_t dp, const void *s, size_t sp, size_t w, size_t r,
                      sl_err *e)
{
    (void)c, (void)o, (void)dp, (void)s, (void)sp, (void)w, (void)r, (void)e;
    n_2d++;
    return SL_OK;
}

static const sl_device_async_ops full_async = {a_pin, a_unpin, a_fence, a_mark, a_wait, a_2d};

static void test_check(void)
{
    EXPECT(sl_device_ops_check(&mini_ops) == NULL, "minimal backend refused: %s",
           sl_device_ops_check(&mini_ops));
    sl_device_ops o = mini_ops;
    o.async = &full_async;
    EXPECT(sl_device_ops_check(&o) == NULL, "complete async part refused");
    for (int k = 0; k < 6; k++) {   /* any async member missing: refused */
        sl_device_async_ops a = full_async;
        a.pin = k == 0 ? NULL : a.pin;
        a.unpin = k == 1 ? NULL : a.unpin;
        a.fence = k == 2 ? NULL : a.fence;
        a.mark = k == 3 ? NULL : a.mark;
        a.wait_mark = k == 4 ? NULL : a.wait_mark;
        a.write2d = k == 5 ? NULL : a.write2d;
        o.async = &a;
        const char *why = sl_device_ops_check(&o);
        EXPECT(why && strstr(why, "async"), "async part without member %d accepted", k);
    }
    o = mini_ops;
    o.read = NULL;
    EXPECT(sl_device_ops_check(&o) && !strcmp(sl_device_ops_check(&o), "read"), "no read accepted");
    o = mini_ops;
    o.name = NULL;
    EXPECT(sl_device_ops_check(&o) != NULL, "no name accepted");
    EXPECT(sl_device_ops_check(NULL) != NULL, "NULL table accepted");
}

/* The defaults: what the engine sees of a backend that sets nothing optional. */
static void test_defaults(void)
{
    mini m = {0};
    sl_device d = {&mini_ops, &m};
    sl_err err = {0};
    atomic_int stop;
    atomic_init(&stop, 0);
    uint64_t fb = 1, fa = 1;
    EXPECT(sl_device_alloc(&d, 1000, &err) == SL_OK && sl_device_allocated(&d) == 1000, "alloc");
    EXPECT(!strcmp(sl_device_name(&d), "mini"), "name");
    EXPECT(sl_device_host_ptr(&d) == NULL && sl_device_ptr(&d) == NULL, "pointers");
    EXPECT(sl_device_zeroed(&d) == 0 && sl_device_gpu(&d) == -1, "zeroed, gpu");
    EXPECT(!sl_device_is_async(&d), "async");
    sl_device_prefault(&d, &stop);
    EXPECT(sl_device_mem_info(&d, &fb, &fa, &err) == SL_E_UNSUPPORTED &&
               strstr(sl_err_msg(&err), "device 'mini' does not report free memory"),
           "mem_info: %s", sl_err_msg(&err));
    EXPECT(sl_device_pin(&d, m.mem, 10, &err) == SL_OK && sl_device_fence(&d, &err) == SL_OK &&
               sl_device_mark(&d, 3, &err) == SL_OK && sl_device_wait_mark(&d, 3, &err) == SL_OK,
           "async no-ops");
    sl_device_unpin(&d, m.mem);
    /* write2d: one write per row, at the pitches */
    unsigned char src[64];
    for (int i = 0; i < 64; i++)
        src[i] = (unsigned char)(i + 1);
    m.writes = 0;
    EXPECT(sl_device_write2d(&d, 100, 20, src, 16, 5, 3, &err) == SL_OK, "write2d");
    EXPECT(m.writes == 3, "%d writes for 3 rows", m.writes);
    for (int r = 0; r < 3; r++)
        EXPECT(!memcmp(m.mem + 100 + 20 * r, src + 16 * r, 5) && m.mem[100 + 20 * r + 5] == 0,
               "row %d", r);
    EXPECT(sl_device_write2d(&d, 990, 20, src, 16, 5, 2, &err) == SL_E_INVALID_ARG,
           "row past the end accepted");
    unsigned char back[5];
    EXPECT(sl_device_read(&d, 120, back, 5, &err) == SL_OK && !memcmp(back, src + 16, 5), "read");
    EXPECT(sl_device_zero(&d, 120, 5, &err) == SL_OK && m.mem[120] == 0, "zero");
    sl_err_clear(&err);
}

/* The wrappers reach an async part, and only it. */
static void test_async(void)
{
    mini m = {0};
    sl_device_ops o = mini_ops;
    o.async = &full_async;
    sl_device d = {&o, &m};
    sl_err err = {0};
    EXPECT(sl_device_alloc(&d, 100, &err) == SL_OK && sl_device_is_async(&d), "async");
    m.writes = 0;
    EXPECT(sl_device_pin(&d, m.mem, 1, &err) == SL_OK && sl_device_fence(&d, &err) == SL_OK &&
               sl_device_mark(&d, 1, &err) == SL_OK && sl_device_wait_mark(&d, 1, &err) == SL_OK &&
               sl_device_write2d(&d, 0, 10, m.mem, 10, 5, 4, &err) == SL_OK,
           "async calls");
    sl_device_unpin(&d, m.mem);
    EXPECT(n_pin == 1 && n_unpin == 1 && n_fence == 1 && n_mark == 1 && n_wait == 1 && n_2d == 1 &&
               m.writes == 0,
           "async part called %d %d %d %d %d %d, writes %d", n_pin, n_unpin, n_fence, n_mark, n_wait,
           n_2d, m.writes);
}

/* The cpu backend: host memory, fresh zeros, and a prefault that stops when asked. */
static void test_cpu(void)
{
    sl_device d;
    sl_err err = {0};
    atomic_int stop;
    EXPECT(sl_device_open("cpu", 0, NULL, NULL, &d, &err) == SL_OK, "open: %s", sl_err_msg(&err));
    EXPECT(sl_device_alloc(&d, (uint64_t)64 << 20, &err) == SL_OK, "alloc");
    EXPECT(sl_device_host_ptr(&d) != NULL && sl_device_ptr(&d) == sl_device_host_ptr(&d), "host");
    EXPECT(sl_device_zeroed(&d) == 1 && !sl_device_is_async(&d), "zeroed, sync");
    atomic_init(&stop, 1);
    sl_device_prefault(&d, &stop);   /* returns at once */
    atomic_store(&stop, 0);
    sl_device_prefault(&d, &stop);
    const unsigned char *h = sl_device_host_ptr(&d);
    EXPECT(h[0] == 0 && h[(64u << 20) - 1] == 0, "prefault changed bytes");
    EXPECT(sl_device_write2d(&d, 10, 100, "abcdefgh", 4, 4, 2, &err) == SL_OK &&
               !memcmp(h + 10, "abcd", 4) && !memcmp(h + 110, "efgh", 4),
           "cpu write2d");
    sl_device_close(&d);
    EXPECT(d.ops == NULL, "closed");
    EXPECT(sl_device_open("tpu", 0, NULL, NULL, &d, &err) == SL_E_INVALID_ARG, "unknown backend");
    sl_err_clear(&err);
}

int main(void)
{
    test_check();
    test_defaults();
    test_async();
    test_cpu();
    if (expect_failures)
        fprintf(stderr, "%d failures\n", expect_failures);
    return expect_failures ? 1 : 0;
}
