/* sl_vm.c - the process's writable mappings, read from /proc/self/maps (sl_vm.h). */
#include "common/sl_vm.h"

#include "common/sl_grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "start-end perms ...": the range and whether it may be written; 0 for a line of another form. */
static int parse_line(const char *line, sl_vm_range *r, int *writable)
{
    uintmax_t a = 0, b = 0;
    char perms[8] = {0};
    if (sscanf(line, "%jx-%jx %7s", &a, &b, perms) != 3 || a > b || b > UINTPTR_MAX)
        return 0;
    r->start = (uintptr_t)a;
    r->end = (uintptr_t)b;
    *writable = perms[1] == 'w';
    return 1;
}

/* The kernel lists mappings in address order: a writable one that begins where the last ends
 * extends it. */
static sl_status add_range(sl_vm_maps *m, size_t *cap, sl_vm_range r, sl_err *err)
{
    if (m->n && m->v[m->n - 1].end == r.start) {
        m->v[m->n - 1].end = r.end;
        return SL_OK;
    }
    sl_vm_range *v = sl_grow(m->v, cap, m->n, sizeof *v, 64);
    if (!v)
        return sl_err_set(err, SL_E_NOMEM, "out of memory");
    m->v = v;
    m->v[m->n++] = r;
    return SL_OK;
}

sl_status sl_vm_maps_read(sl_vm_maps *m, sl_err *err)
{
    *m = (sl_vm_maps){0};
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return SL_OK;
    char line[512];
    size_t cap = 0;
    sl_status st = SL_OK;
    int ok = 1;
    uintptr_t seen = 0;   /* the end of the last mapping listed */
    while (st == SL_OK && fgets(line, sizeof line, f)) {
        sl_vm_range r;
        int w = 0;
        /* a list of a form not understood refuses nothing; nor does one out of order, as another
         * thread's mmap between two reads of the file can make it (the kernel prints the list a
         * page at a time) */
        if (!parse_line(line, &r, &w) || r.start < seen) {
            ok = 0;
            break;
        }
        seen = r.end;
        if (w)
            st = add_range(m, &cap, r, err);
        /* the rest of a line longer than the buffer (a long path) is read as a line of its own:
         * skip it, up to its newline */
        while (st == SL_OK && !strchr(line, '\n') && fgets(line, sizeof line, f))
            ;
    }
    ok = ok && !ferror(f);
    fclose(f);
    if (st != SL_OK || !ok) {
        sl_vm_maps_free(m);
        return st;
    }
    m->known = 1;
    return SL_OK;
}

/* The range holding address a, or NULL. */
static const sl_vm_range *find(const sl_vm_maps *m, uintptr_t a)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].end <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->n && m->v[lo].start <= a ? &m->v[lo] : NULL;
}

int sl_vm_writable(const sl_vm_maps *m, const void *p, uint64_t n)
{
    if (!m->known || n == 0)
        return 1;
    const uintptr_t a = (uintptr_t)p;
    if (n - 1 > UINTPTR_MAX - a)
        return 0;
    const sl_vm_range *r = find(m, a);   /* merged: one range holds all of a writable block */
    return r && n - 1 < r->end - a;
}

void sl_vm_maps_free(sl_vm_maps *m)
{
    free(m->v);
    *m = (sl_vm_maps){0};
}
