/* einval_inject.h - O_DIRECT refused on demand, for the tests of the engine's buffered fallback.
 * Filesystems refuse O_DIRECT at open (tmpfs on older kernels: EINVAL) or only on some reads
 * (alignment stricter than the page the engine aligns to: EINVAL again); neither happens on the
 * ext4 these tests run on, so this executable's open() and pread() stand in front of libc's (the
 * library is linked in statically: its calls resolve here) and answer EINVAL when told to.
 * Everything else goes straight to the kernel. io_uring's reads do not pass through pread: read
 * refusals reach the pread engine only. Include in one translation unit of a test executable. */
#ifndef SL_EINVAL_INJECT_H
#define SL_EINVAL_INJECT_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

typedef enum ei_mode {
    EI_OFF,
    EI_OPEN,   /* open(O_DIRECT) fails */
    EI_READ,   /* pread through an O_DIRECT descriptor fails, after ei_reads_ok ones succeed */
} ei_mode;

static volatile ei_mode ei_mode_now;
static int ei_reads_ok;   /* reads let through before EI_READ refuses (atomically counted down) */
static int ei_refused;    /* calls answered EINVAL so far (atomic) */

/* From now on, refuse as mode says; the counts start again. */
static void ei_set(ei_mode mode, int reads_ok)
{
    __atomic_store_n(&ei_refused, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ei_reads_ok, reads_ok, __ATOMIC_SEQ_CST);
    ei_mode_now = mode;
}

static int ei_refusals(void)
{
    return __atomic_load_n(&ei_refused, __ATOMIC_SEQ_CST);
}

static int ei_refuse(void)
{
    __atomic_add_fetch(&ei_refused, 1, __ATOMIC_SEQ_CST);
    errno = EINVAL;
    return -1;
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (ei_mode_now == EI_OPEN && (flags & O_DIRECT))
        return ei_refuse();
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    if (ei_mode_now == EI_READ && (fcntl(fd, F_GETFL) & O_DIRECT) &&
        __atomic_sub_fetch(&ei_reads_ok, 1, __ATOMIC_SEQ_CST) < 0)
        return ei_refuse();
    return syscall(SYS_pread64, fd, buf, n, off);
}

#endif
