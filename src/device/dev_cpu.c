/* dev_cpu.c - the "cpu" device backend: each mesh device is one private anonymous mapping of
 * exactly the plan's bytes (rounded up to whole pages by the kernel, never by us: allocated()
 * reports the plan's bytes), so devices never share pages and a device's memory can be bound to a
 * NUMA node on its own.
 *
 * First touch of fresh anonymous memory costs a page fault per 4 KiB page, which dominates a load
 * from the page cache. prefault() populates the mapping with MADV_POPULATE_WRITE from a helper
 * thread while the I/O runs, instead of faulting serially inside the scatter copies. It never
 * writes bytes, so it can race with the scatter threads safely. */
#include "device/device.h"

#include "common/sl_bytes.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

typedef struct cpu_dev {
    int32_t index;
    int32_t node;          /* NUMA node to bind to, -1 for none */
    unsigned char *base;   /* NULL when bytes == 0 */
    uint64_t bytes;
    size_t map_len;        /* 0 when base is not ours */
    unsigned char *dest;   /* the caller's memory (opts.dest), or NULL */
    sl_device_blocks blocks; /* the caller's block per parameter (opts.param_dest), no base */
} cpu_dev;

/* NUMA nodes present: /sys/devices/system/node/node<N> entries (1 when the directory is absent). */
static int32_t cpu_numa_nodes(void)
{
    DIR *dir = opendir("/sys/devices/system/node");
    int32_t n = 0;
    if (!dir)
        return 1;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += !strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9';
    closedir(dir);
    return n > 0 ? n : 1;
}

/* Binds the (not yet touched) mapping to d->node with the raw mbind system call, so that no
 * libnuma is needed: MPOL_BIND, a one-word node mask. */
static sl_status cpu_bind(const cpu_dev *d, void *p, size_t len, sl_err *err)
{
    const unsigned long mpol_bind = 2;
    unsigned long mask = 1ul << d->node;
    if (syscall(SYS_mbind, p, len, mpol_bind, &mask, sizeof(mask) * 8, 0ul) != 0)
        return sl_err_set(err, SL_E_DEVICE, "cpu device %d: cannot bind to NUMA node %d: %s", d->index,
                          d->node, strerror(errno));
    return SL_OK;
}

static sl_status cpu_alloc(void *ctx, uint64_t bytes, sl_err *err)
{
    cpu_dev *d = ctx;
    if (bytes == 0)
        return SL_OK;
    if (d->blocks.n) { /* the caller's blocks: nothing to allocate; sizes checked at open */
        d->bytes = bytes;
        return SL_OK;
    }
    if (d->dest) { /* not ours to bind, advise or pre-fault */
        d->base = d->dest;
        d->bytes = bytes;
        return SL_OK;
    }
    if (bytes > (uint64_t)SIZE_MAX - 65536)
        return sl_err_set(err, SL_E_NOMEM, "cpu device %d: %llu bytes do not fit in memory", d->index,
                          (unsigned long long)bytes);
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return sl_err_set(err, SL_E_NOMEM, "cpu device %d: cannot allocate %llu bytes: %s", d->index,
                          (unsigned long long)bytes, strerror(errno));
    if (d->node >= 0) {
        const sl_status st = cpu_bind(d, p, (size_t)bytes, err);
        if (st != SL_OK) {
            munmap(p, (size_t)bytes);
            return st;
        }
    }
    /* Huge pages fault in 2 MiB at a time. Advisory: the mapping stays exactly `bytes` long
     * whatever the kernel decides (only whole aligned 2 MiB spans inside it become huge pages).
     * Populating them is 2.5-3x faster where the host keeps the guest's memory backed (2.2 GB:
     * 0.37 s against 0.85-1.1 s of system time on the project's VM), which the one prefault
     * thread needs to keep ahead of fast storage. It costs on a VM that hands free memory back to
     * its host (virtio-balloon free page reporting) right after much memory was freed: a fresh
     * huge page is then often one the host took back, 5-7x slower to fault in, while 4 KiB pages
     * mostly find memory still backed (bench/moe.md: a hot 2.2 GB load after a drop_caches, 3.0
     * against 1.5 CPU seconds). */
    if (bytes >= ((uint64_t)2 << 20))
        (void)madvise(p, (size_t)bytes, MADV_HUGEPAGE);
    d->base = p;
    d->bytes = bytes;
    d->map_len = (size_t)bytes;
    return SL_OK;
}

static sl_status cpu_check_range(const cpu_dev *d, uint64_t off, uint64_t n, sl_err *err)
{
    return sl_device_check_range("cpu", d->index, d->bytes, off, n, err);
}

typedef enum cpu_xfer { CPU_WRITE, CPU_ZERO, CPU_READ } cpu_xfer;

static void cpu_xfer_at(unsigned char *at, cpu_xfer how, unsigned char *host, size_t n)
{
    if (how == CPU_WRITE)
        memcpy(at, host, n);
    else if (how == CPU_ZERO)
        memset(at, 0, n);
    else
        memcpy(host, at, n);
}

/* One range of device bytes, range-checked, through the base or across the parameter blocks it
 * spans (a write may cover several parameters when the engine coalesces). */
static sl_status cpu_xfer_range(cpu_dev *d, uint64_t off, unsigned char *host, uint64_t n,
                                cpu_xfer how, sl_err *err)
{
    SL_TRY(cpu_check_range(d, off, n, err));
    if (n && !d->blocks.n) {
        cpu_xfer_at(d->base + off, how, host, (size_t)n);
        return SL_OK;
    }
    while (n) {
        uint64_t avail = 0;
        unsigned char *at = sl_device_blocks_at(&d->blocks, off, &avail);
        const uint64_t m = sl_min_u64(n, avail);
        cpu_xfer_at(at, how, host, (size_t)m);
        off += m;
        n -= m;
        host = host ? host + m : NULL;
    }
    return SL_OK;
}

static sl_status cpu_write(void *ctx, uint64_t off, const void *src, size_t n, sl_err *err)
{
    /* The cast drops const for the shared helper only; CPU_WRITE never writes to src. */
    return cpu_xfer_range(ctx, off, (unsigned char *)(uintptr_t)src, n, CPU_WRITE, err);
}

static sl_status cpu_zero(void *ctx, uint64_t off, uint64_t n, sl_err *err)
{
    return cpu_xfer_range(ctx, off, NULL, n, CPU_ZERO, err);
}

static sl_status cpu_read(void *ctx, uint64_t off, void *dst, size_t n, sl_err *err)
{
    return cpu_xfer_range(ctx, off, dst, n, CPU_READ, err);
}

/* Populates in 8 MiB steps so that a stop request (load failed) is noticed quickly. It walks from
 * the end of the buffer towards the start while the reads fill it roughly from the start: the two
 * fault different pages at the same time instead of queueing on the same ones (measured on this
 * project's VM, 5 alternating TP=1 hot loads of 2.2 GB: median 1.35 s against 2.0 s walking
 * forward). When the kernel lacks MADV_POPULATE_WRITE we simply leave the faults to the copies. */
/* Populates [p, p + len) from its end in 8 MiB steps; 0 when stopped or refused. */
static int cpu_populate(unsigned char *p, size_t len, const atomic_int *stop)
{
    const size_t step = (size_t)8 << 20;
    /* relaxed: the flag only says "stop soon"; no data is published through it */
    for (size_t end = len; end > 0 && !atomic_load_explicit(stop, memory_order_relaxed);) {
        const size_t n = end < step ? end : step;
        end -= n;
        if (madvise(p + end, n, MADV_POPULATE_WRITE) != 0)
            return 0;
    }
    return !atomic_load_explicit(stop, memory_order_relaxed);
}

/* The whole pages inside the caller's memory [p, p + len): populating them changes no byte, and
 * takes the first-touch faults of fresh engine tensors (torch.empty) off the copying threads
 * (measured by bench/python_peers.py: load_into into fresh tensors 1.4-2.5 s against 0.5 s into
 * touched ones, TP 1 hot). */
static int cpu_populate_caller(unsigned char *p, size_t len, const atomic_int *stop)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p;
    const uintptr_t first = (a + page - 1) / page * page, last = (a + len) / page * page;
    return last <= first || cpu_populate((unsigned char *)first, (size_t)(last - first), stop);
}

static void cpu_prefault(void *ctx, const atomic_int *stop)
{
    cpu_dev *d = ctx;
    if (d->map_len) {
        cpu_populate(d->base, d->map_len, stop);
        return;
    }
    if (d->dest && d->bytes) {
        cpu_populate_caller(d->dest, (size_t)d->bytes, stop);
        return;
    }
    for (int64_t i = 0; i < d->blocks.n; i++)
        if (!cpu_populate_caller(d->blocks.ptr[i], (size_t)d->blocks.len[i], stop))
            return;
}

/* Our own mapping is fresh anonymous memory: zero until written. The caller's is not known. */
static int cpu_zeroed(const void *ctx)
{
    return ((const cpu_dev *)ctx)->map_len > 0;
}

static void *cpu_host_ptr(void *ctx)
{
    return ((cpu_dev *)ctx)->base;
}

/* The caller's blocks have no base: a run inside one of them still has a host address, so that
 * the engine reads large runs straight into an engine's own tensors (load_into). */
static void *cpu_host_at(void *ctx, uint64_t off, uint64_t n)
{
    cpu_dev *d = ctx;
    if (n == 0 || off > d->bytes || n > d->bytes - off)
        return NULL;
    if (!d->blocks.n)
        return d->base + off;
    uint64_t avail = 0;
    unsigned char *at = sl_device_blocks_at(&d->blocks, off, &avail);
    return avail >= n ? at : NULL;
}

static uint64_t cpu_allocated(const void *ctx)
{
    return ((const cpu_dev *)ctx)->bytes;
}

static void cpu_free(void *ctx)
{
    cpu_dev *d = ctx;
    if (!d)
        return;
    if (d->base && d->map_len)
        munmap(d->base, d->map_len);
    sl_device_blocks_free(&d->blocks);
    free(d);
}

static const sl_device_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .write = cpu_write,
    .zero = cpu_zero,
    .read = cpu_read,
    .prefault = cpu_prefault,
    .host_ptr = cpu_host_ptr,
    .host_at = cpu_host_at,
    .allocated = cpu_allocated,
    .free = cpu_free,
    .zeroed = cpu_zeroed,
};

sl_status sl_device_cpu_open(int32_t index, const sl_load_opts *o, const sl_device_segs *segs,
                             sl_device *out, sl_err *err)
{
    cpu_dev *d = calloc(1, sizeof *d);
    if (!d)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    const sl_status st = sl_device_blocks_copy(&d->blocks, segs, err);
    if (st != SL_OK) {
        free(d);
        return st;
    }
    d->index = index;
    d->dest = sl_device_dest(o, index);
    /* --numa: device d on node d % nodes, so that a host with several sockets spreads the mesh. */
    d->node = o && o->numa ? index % cpu_numa_nodes() : -1;
    if (d->node >= 64) {
        const int32_t node = d->node;
        free(d);
        return sl_err_set(err, SL_E_UNSUPPORTED, "cpu device %d: NUMA node %d is beyond 63", index, node);
    }
    out->ops = &cpu_ops;
    out->ctx = d;
    return SL_OK;
}
