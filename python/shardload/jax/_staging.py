"""The host buffers groups are loaded into: fresh 64-byte aligned ones where the devices adopt
them (XLA's CPU client), else two page-aligned slabs used in turn, DMA-mapped where the backend
implements client.dma_map."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from ._groups import ALIGN, padded

PAGE = 4096  # slabs are page aligned, whole pages (what cudaHostRegister pins)


def host_buffer(shape: tuple[int, ...], dtype: Any, nbytes: int) -> np.ndarray:
    """An uninitialized host array at a 64-byte aligned address: XLA's CPU client adopts such a
    buffer as the device buffer on device_put (no copy); NumPy's own are only 16-byte aligned,
    which made every CPU device_put a copy."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = -raw.ctypes.data % ALIGN
    out: np.ndarray = raw[off:off + nbytes].view(dtype).reshape(shape)
    return out


def slab(nbytes: int) -> np.ndarray:
    """A slab: uninitialized host bytes, page aligned (so 64-byte aligned too)."""
    raw = np.empty(nbytes + PAGE, np.uint8)
    off = -raw.ctypes.data % PAGE
    out: np.ndarray = raw[off:off + nbytes]
    return out


def clients(devices: Iterable[Any]) -> list[Any]:
    """The distinct JAX clients of the devices (the objects with dma_map / dma_unmap)."""
    out: dict[int, Any] = {}
    for d in devices:
        c = getattr(d, "client", None)
        if c is not None:
            out.setdefault(id(c), c)
    return list(out.values())


class Staging:
    """The host buffers groups are loaded into. Slot None: fresh buffers per box (devices that
    adopt them make them their device arrays, so they are never reused). Slot 0 or 1: a slab of
    `size` bytes per group in flight, allocated once and reused; load waits for the arrays of the
    group last loaded into a slab before loading into it again. A slab is DMA-mapped on the
    devices' clients when it is allocated, where they implement client.dma_map (the first
    refusal, e.g. UNIMPLEMENTED on CPU, stops the tries), and unmapped by close(). A group
    larger than a slab (a box whose single row is over the group bound: groups cut anything
    else in bands) gets fresh plain buffers: mapping memory used once costs more than the copy
    it saves; a slab a device adopted is retired (it is that device's memory now: never loaded
    into again, but held, and so never freed, until close() has unmapped it, so that no
    mapped range is freed while mapped; CUDA refuses to register a range again that way)."""

    def __init__(self, clients: list[Any], size: int, dma: bool) -> None:
        self.clients, self.size = clients, -(-size // PAGE) * PAGE
        self.slabs: list[np.ndarray | None] = [None, None]
        self.retired: list[np.ndarray] = []  # held until close() has unmapped them
        self.mapped: list[tuple[Any, int]] = []
        self.dma = "unused: no group went through a slab" if dma else "off"
        self.refused = not dma
        # dtypes whose boxes get fresh buffers even in a slab group: where the devices adopt the
        # rest of a slab, JAX's narrowed copies (I64 as int32 without x64) would leave the
        # original bytes in the retired slab, held as long as the arrays adopted from it
        self.fresh: set[str] = set()
        self.counts = {"slabs": 0, "reused": 0, "retired": 0, "oversize_groups": 0,
                       "slab_bytes": 0, "dma_mapped_bytes": 0}

    def take(self, slot: int | None, params: list[Any]) -> list[np.ndarray]:
        """A buffer for each parameter (plan Params), in order."""
        over = slot is not None and sum(padded(p.nbytes) for p in params) > self.size
        if slot is None or over:
            self.counts["oversize_groups"] += over
            return [host_buffer(p.shape, numpy_dtype(p.dtype), p.nbytes) for p in params]
        if any(p.dtype in self.fresh for p in params):
            inslab = [p for p in params if p.dtype not in self.fresh]
            mine = iter(self.take(slot, inslab) if inslab else [])
            return [host_buffer(p.shape, numpy_dtype(p.dtype), p.nbytes)
                    if p.dtype in self.fresh else next(mine) for p in params]
        mem = self.slabs[slot]
        if mem is None:
            mem = self.slabs[slot] = slab(self.size)
            self.counts["slabs"] += 1
            self.counts["slab_bytes"] += self.size
            self._map(mem)
        else:
            self.counts["reused"] += 1
        out, off = [], 0
        for p in params:
            out.append(mem[off:off + p.nbytes].view(numpy_dtype(p.dtype)).reshape(p.shape))
            off += padded(p.nbytes)
        return out

    def _map(self, slab: np.ndarray) -> None:
        if self.refused:
            return
        for c in self.clients:
            try:
                c.dma_map(slab.ctypes.data, slab.nbytes)
            except Exception as e:  # noqa: BLE001 - the backend's refusal: plain slabs from now on
                self.refused, self.dma = True, f"{type(e).__name__}: {e}"[:300]
                return
            self.mapped.append((c, slab.ctypes.data))
        self.counts["dma_mapped_bytes"] += slab.nbytes
        self.dma = "mapped"

    def retire(self, slot: int) -> None:
        mem = self.slabs[slot]
        if mem is not None:
            self.retired.append(mem)
            self.slabs[slot] = None
            self.counts["retired"] += 1

    def close(self) -> BaseException | None:
        """Unmaps every mapped slab (all tried); the first error."""
        err = None
        for c, addr in self.mapped:
            try:
                c.dma_unmap(addr)
            except Exception as e:  # noqa: BLE001 - reported once all are unmapped
                err = err or e
        self.mapped, self.slabs, self.retired = [], [None, None], []
        return err

    def report(self) -> dict[str, Any]:
        c = self.counts
        kind = ("dma-mapped" if c["slab_bytes"] and c["dma_mapped_bytes"] == c["slab_bytes"]
                else "partly dma-mapped" if c["dma_mapped_bytes"] else "plain")
        return {"staging": kind, "dma": self.dma, **c}



def aliases(a: Any, buf: np.ndarray) -> bool:
    """Whether the device array is the host buffer itself (adopted, not copied)."""
    try:
        return bool(a.unsafe_buffer_pointer() == buf.ctypes.data)
    except Exception:  # noqa: BLE001 - no address to compare: memory of its own
        return False


def adopts(devices: Iterable[Any]) -> bool:
    """Whether device_put adopts an aligned host buffer as the device buffer on these devices
    (XLA's CPU client does: there device memory is host memory), tried on one of them."""
    import jax
    devs = list(devices)
    if not devs or any(d.platform != "cpu" for d in devs):
        return False
    buf = host_buffer((ALIGN,), np.uint8, ALIGN)
    return aliases(jax.device_put(buf, devs[0]), buf)
