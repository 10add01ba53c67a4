/* sl_vm.h - which of the process's memory it may write, from the kernel's list of its mappings
 * (/proc/self/maps): a caller's destination that is read-only (a tensor over a read-only memmap)
 * is an error before a load starts, where a write into it would kill the process. */
#ifndef SL_VM_H
#define SL_VM_H

#include "common/sl_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl_vm_range {
    uintptr_t start, end;      /* [start, end): mappings with write permission, merged */
} sl_vm_range;

typedef struct sl_vm_maps {
    sl_vm_range *v;
    size_t n;
    int known;                 /* 0: the list could not be read (no procfs): nothing is refused */
} sl_vm_maps;

/* Reads the writable mappings now; SL_E_NOMEM only (an unreadable list leaves known 0). */
sl_status sl_vm_maps_read(sl_vm_maps *m, sl_err *err);
/* 1 when every byte of [p, p + n) lies in writable mappings, or the list is not known. */
int sl_vm_writable(const sl_vm_maps *m, const void *p, uint64_t n);
void sl_vm_maps_free(sl_vm_maps *m);

#endif /* SL_VM_H */
