"""shardload.jax: checkpoints straight into jax.Arrays sharded over a Mesh, each device getting
exactly its index of each tensor, with bounded host memory.

How: every tensor's sharding says which index box each addressable device holds
(``addressable_devices_indices_map``). The boxes become plans of the C core
(``sl_plan_build_boxes``: no layout rule, any sharding): one of them all, built first (it checks
every box before a byte is read), then one per group of consecutive tensors, loaded on a loader
thread into fresh 64-byte aligned host buffers, one per box, while the previous group goes to its
devices in one batched ``jax.device_put``; the global arrays are assembled with
``jax.make_array_from_single_device_arrays``.

Host memory: an eighth of the staging budget is the engine's own staging; the rest holds the
buffers of two groups (the one being loaded, the one whose transfers JAX is finishing), so host
memory beyond the device arrays stays within the budget. A tensor larger than a group is cut
into pieces of whole boxes when its boxes split dimension 0 only (disjoint byte ranges); one split
along another dimension stays one group (pieces would read its rows again), the one case over
the budget. On CPU devices XLA adopts an aligned host buffer as the device buffer (no copy): there a
group's buffers *are* device arrays, fresh for each group, so groups are large (few C loads); every
put is checked, and the first buffer JAX copies instead brings the bound back. On devices that
copy, the groups go through two slabs of the group bound, used in turn and reused once JAX has
finished with the previous group loaded into that slab (its arrays are ready: the transfers are
done), each DMA-mapped once (``client.dma_map``) where the backend implements it and unmapped when
the load ends, failed or not (``dma=False`` or SHARDLOAD_JAX_DMA=0: plain host memory). A slab
that a device adopted after all is never reused: it is that device's memory now.

Each process loads its addressable devices only, reading only the bytes they need; with
dist="cooperative", what the shardings replicate across processes is read in disjoint parts, one
per process, and all-gathered over the devices (``_read_sharding``, ``_gather``).
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import _interrupt
from . import _native as N
from ._dtypes import NAMES, numpy_dtype, target_value
from .checkpoint import Checkpoint, Tensor, opened
from .model import _load_opts, _run, _set_list
from .plan import ConfigSource, Plan

ShardingSpec = Any  # a Mapping name -> Sharding, a callable, or a list of (regex, PartitionSpec)
Box = tuple[str, int, tuple[int, ...], tuple[int, ...]]
_ALIGN = 64  # bytes: XLA's CPU client adopts a host buffer this aligned instead of copying it
_ENGINE_PART = 8  # the engine's staging is staging // _ENGINE_PART
_ADOPTED_GROUP = 1 << 30  # bytes of boxes per C load when the devices adopt the buffers
_DMA_ENV = "SHARDLOAD_JAX_DMA"  # "0": never dma_map the slabs
_PAGE = 4096  # slabs are page aligned, whole pages (what cudaHostRegister pins)


def _default_specs(ck: Checkpoint, mesh: Any, config: ConfigSource | None,
                   dtype: Any) -> dict[str, Any]:
    """SHARDING.md's spmd rule on the mesh's last axis, as the C planner applies it: each
    tensor of the spmd plan is split along the dimension its tile is shorter in, else
    replicated. Tensors the rule table skips (tied heads, rotary caches) are not loaded."""
    from jax.sharding import PartitionSpec
    axis = mesh.axis_names[-1]
    n = int(mesh.shape[axis])
    plan = Plan(ck, config=config, tp=n, layout="spmd", dtype=dtype)
    shapes = {t.name: t.shape for t in ck.tensors}
    out: dict[str, Any] = {}
    for p in plan.devices[0].params:
        whole = shapes[p.name]
        split = [k for k in range(len(whole)) if p.shape[k] != whole[k]]
        spec = [None] * len(whole)
        if split:
            spec[split[0]] = axis
        out[p.name] = PartitionSpec(*spec)  # type: ignore[no-untyped-call]
    plan.close()
    return out


def _sharding_of(name: str, t: Tensor, mesh: Any, shardings: ShardingSpec) -> Any:
    """The Sharding of one tensor, from a mapping, a callable or (regex, PartitionSpec) rules."""
    from jax.sharding import NamedSharding, PartitionSpec, Sharding
    if callable(shardings):
        s = shardings(name, t.shape, t.dtype)
    elif isinstance(shardings, Mapping):
        s = shardings[name]
    else:
        s = next((spec for pat, spec in shardings if re.search(pat, name)), None)
        if s is None:
            raise ValueError(f"tensor '{name}': no sharding rule matches it")
    if isinstance(s, PartitionSpec):
        s = NamedSharding(mesh, s)
    if not isinstance(s, Sharding):
        raise TypeError(f"tensor '{name}': expected a jax.sharding.Sharding or PartitionSpec, "
                        f"got {type(s).__name__}")
    return s


def _shardings(ck: Checkpoint, mesh: Any, shardings: ShardingSpec, config: ConfigSource | None,
               dtype: Any) -> dict[str, Any]:
    by_name = {t.name: t for t in ck.tensors}
    if shardings is None:
        specs = _default_specs(ck, mesh, config, dtype)
        return {n: _sharding_of(n, by_name[n], mesh, specs) for n in specs}
    if isinstance(shardings, Mapping):
        missing = [n for n in shardings if n not in by_name]
        if missing:
            raise KeyError(f"shardings names '{missing[0]}', which is not in the checkpoint")
        names: Iterable[str] = shardings
    elif callable(shardings) or isinstance(shardings, (list, tuple)):
        names = by_name
    else:
        raise TypeError("shardings must be None, a mapping name -> Sharding, a callable "
                        "(name, shape, dtype) -> Sharding or a list of (regex, PartitionSpec)")
    return {n: _sharding_of(n, by_name[n], mesh, shardings) for n in names}


def _boxes(name: str, shape: tuple[int, ...], sharding: Any,
           index: dict[Any, int]) -> list[tuple[Any, Box]]:
    """(device, box) of every addressable device of the sharding, in the mesh's order."""
    spec = getattr(sharding, "spec", None)
    if spec is not None and len(spec) > len(shape):  # JAX says only "list index out of range"
        raise ValueError(f"tensor '{name}' {shape}: its PartitionSpec {spec} has {len(spec)} "
                         f"entries for {len(shape)} dimension{'s' if len(shape) != 1 else ''}")
    try:
        imap = sharding.addressable_devices_indices_map(shape)
    except Exception as e:  # noqa: BLE001 - JAX's own message, with the tensor named
        raise ValueError(f"tensor '{name}' {shape}: JAX rejects its sharding: {e}") from e
    out = []
    for dev, idx in imap.items():
        if dev not in index:
            raise ValueError(f"tensor '{name}': its sharding uses {dev}, not a device of the mesh")
        start, length = [], []
        for k, sl in enumerate(idx):
            a, b, step = sl.indices(shape[k])
            if step != 1:
                raise ValueError(f"tensor '{name}': strided index {sl} on {dev}")
            start.append(a)
            length.append(max(b - a, 0))
        out.append((dev, (name, index[dev], tuple(start), tuple(length))))
    return sorted(out, key=lambda x: x[1][1])


def _padded(nbytes: int) -> int:
    """A box's room in a slab: boxes start 64-byte aligned."""
    return -(-nbytes // _ALIGN) * _ALIGN


def _box_bytes(box: Box, itemsize: int) -> int:
    """A box's bytes, as room in a slab."""
    return _padded(int(np.prod(box[3], dtype=np.int64)) * itemsize)


Group = list[tuple[Tensor, list[tuple[Any, Box]]]]


def _pieces(t: Tensor, boxes: list[tuple[Any, Box]], width: int,
            limit: int) -> list[list[tuple[Any, Box]]]:
    """A tensor's boxes cut into pieces of at most `limit` bytes (at least one distinct box each)
    where that reads no byte twice: the boxes split dimension 0 only, so distinct boxes are
    disjoint byte ranges (a box on several devices stays in one piece, read once). Otherwise,
    or when they fit, one piece of all of them."""
    whole = all(b[2][k] == 0 and b[3][k] == t.shape[k]
                for _, b in boxes for k in range(1, len(t.shape)))
    if not whole or sum(_box_bytes(b, width) for _, b in boxes) <= limit:
        return [boxes]
    same: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[Any, Box]]] = {}
    for db in boxes:
        same.setdefault((db[1][2], db[1][3]), []).append(db)
    out: list[list[tuple[Any, Box]]] = []
    size = 0
    for copies in same.values():
        n = _box_bytes(copies[0][1], width) * len(copies)
        if not out or size + n > limit:
            out.append([])
            size = 0
        out[-1] += copies
        size += n
    return out


def _piece(t: Tensor, boxes: list[tuple[Any, Box]], width: int,
           limit: int | None) -> list[tuple[Any, Box]]:
    return boxes if limit is None else _pieces(t, boxes, width, limit)[0]


def _groups(items: list[tuple[Tensor, list[tuple[Any, Box]]]], budget: Callable[[], int | None],
            target: Any) -> Iterator[Group]:
    """Consecutive tensors (checkpoint order) whose boxes fit the budget together (None: no
    bound; asked afresh for each group), one source dtype per group when no target dtype is
    given (a plan has one dtype). A tensor larger than the budget is cut into pieces of whole
    boxes where no byte is read twice (_pieces), else a group of its own."""
    group: Group = []
    size, key, limit = 0, None, budget()
    to = NAMES[target_value(target)] if target is not None else None
    for t, all_boxes in items:
        width = numpy_dtype(to or t.dtype).itemsize  # packed types: an upper bound
        k = t.dtype if target is None else None
        rest = all_boxes
        while rest:
            boxes = _piece(t, rest, width, limit)
            n = sum(_box_bytes(b, width) for _, b in boxes)
            if group and ((limit is not None and size + n > limit) or k != key):
                yield group
                group, size, limit = [], 0, budget()
                boxes = _piece(t, rest, width, limit)  # cut afresh: the budget may have changed
                n = sum(_box_bytes(b, width) for _, b in boxes)
            taken = {dev for dev, _ in boxes}  # a tensor has one box per device at most
            rest = [db for db in rest if db[0] not in taken]
            if not group:
                key = k
            group.append((t, boxes))
            size += n
    if group:
        yield group


def _host_buffer(shape: tuple[int, ...], dtype: Any, nbytes: int) -> np.ndarray:
    """An uninitialized host array at a 64-byte aligned address: XLA's CPU client adopts such a
    buffer as the device buffer on device_put (no copy); NumPy's own are only 16-byte aligned,
    which made every CPU device_put a copy."""
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    off = -raw.ctypes.data % _ALIGN
    out: np.ndarray = raw[off:off + nbytes].view(dtype).reshape(shape)
    return out


def _slab(nbytes: int) -> np.ndarray:
    """A slab: uninitialized host bytes, page aligned (so 64-byte aligned too)."""
    raw = np.empty(nbytes + _PAGE, np.uint8)
    off = -raw.ctypes.data % _PAGE
    out: np.ndarray = raw[off:off + nbytes]
    return out


def _clients(devices: Iterable[Any]) -> list[Any]:
    """The distinct JAX clients of the devices (the objects with dma_map / dma_unmap)."""
    out: dict[int, Any] = {}
    for d in devices:
        c = getattr(d, "client", None)
        if c is not None:
            out.setdefault(id(c), c)
    return list(out.values())


class _Staging:
    """The host buffers groups are loaded into. Slot None: fresh buffers per box (devices that
    adopt them make them their device arrays, so they are never reused). Slot 0 or 1: a slab of
    `size` bytes per group in flight, allocated once and reused; load waits for the arrays of the
    group last loaded into a slab before loading into it again. A slab is DMA-mapped on the
    devices' clients when it is allocated, where they implement client.dma_map (the first
    refusal, e.g. UNIMPLEMENTED on CPU, stops the tries), and unmapped by close(). A group
    larger than a slab (one box over the group bound) gets fresh plain buffers: mapping memory
    used once costs more than the copy it saves; a slab a device adopted is retired (it is that
    device's memory now)."""

    def __init__(self, clients: list[Any], size: int, dma: bool) -> None:
        self.clients, self.size = clients, -(-size // _PAGE) * _PAGE
        self.slabs: list[np.ndarray | None] = [None, None]
        self.mapped: list[tuple[Any, int]] = []
        self.dma = "unused: no group went through a slab" if dma else "off"
        self.refused = not dma
        self.counts = {"slabs": 0, "reused": 0, "retired": 0, "oversize_groups": 0,
                       "slab_bytes": 0, "dma_mapped_bytes": 0}

    def take(self, slot: int | None, params: list[Any]) -> list[np.ndarray]:
        """A buffer for each parameter (plan Params), in order."""
        over = slot is not None and sum(_padded(p.nbytes) for p in params) > self.size
        if slot is None or over:
            self.counts["oversize_groups"] += over
            return [_host_buffer(p.shape, numpy_dtype(p.dtype), p.nbytes) for p in params]
        slab = self.slabs[slot]
        if slab is None:
            slab = self.slabs[slot] = _slab(self.size)
            self.counts["slabs"] += 1
            self.counts["slab_bytes"] += self.size
            self._map(slab)
        else:
            self.counts["reused"] += 1
        out, off = [], 0
        for p in params:
            out.append(slab[off:off + p.nbytes].view(numpy_dtype(p.dtype)).reshape(p.shape))
            off += _padded(p.nbytes)
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
        if self.slabs[slot] is not None:
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
        self.mapped, self.slabs = [], [None, None]
        return err

    def report(self) -> dict[str, Any]:
        c = self.counts
        kind = ("dma-mapped" if c["slab_bytes"] and c["dma_mapped_bytes"] == c["slab_bytes"]
                else "partly dma-mapped" if c["dma_mapped_bytes"] else "plain")
        return {"staging": kind, "dma": self.dma, **c}


def _dest_table(plan: Plan, devs: list[int], staging: _Staging, slot: int | None,
                bufs: dict[tuple[int, int], np.ndarray]) -> tuple[Any, list[Any]]:
    """param_dest for the devices of a group: a buffer per box, from `staging`."""
    import ctypes
    table = (ctypes.POINTER(ctypes.c_void_p) * len(plan.devices))()
    params = [(d, i, p) for d in devs for i, p in enumerate(plan.devices[d].params)]
    for (d, i, _), buf in zip(params, staging.take(slot, [p for _, _, p in params])):
        bufs[(d, i)] = buf
    rows = []
    for d in devs:
        ptrs = [bufs[(d, i)].ctypes.data if p.nbytes else None
                for i, p in enumerate(plan.devices[d].params)]
        rows.append((ctypes.c_void_p * max(len(ptrs), 1))(*ptrs))
        table[d] = ctypes.cast(rows[-1], ctypes.POINTER(ctypes.c_void_p))
    return table, rows


def _fill_group(ck: Checkpoint, group: Group, n_devices: int, dtype: Any, opts: dict[str, Any],
                progress: "_Progress", staging: _Staging,
                slot: int | None) -> tuple[list[tuple[Any, str, np.ndarray]], float, int]:
    """Plans one group's boxes and loads them into host buffers from `staging`: (device, tensor
    name, buffer) per box, in the group's order, the C load's seconds and the bytes its engine
    read. Runs on the loader thread (ctypes releases the GIL for the C load), while the caller
    hands the previous group to JAX."""
    plan = Plan.from_boxes(ck, [b for _, bs in group for _, b in bs], n_devices, dtype)
    try:
        devs = sorted({b[1] for _, bs in group for _, b in bs})
        bufs: dict[tuple[int, int], np.ndarray] = {}
        table, rows = _dest_table(plan, devs, staging, slot, bufs)
        o = _load_opts("cpu", opts["io"], opts["staging"], opts["threads"], False, 1234)
        keep: list[Any] = [rows]
        _set_list(o, keep, "devices", "n_devices", devs)
        o.param_dest, o.n_param_dest = table, len(plan.devices)
        t0 = time.perf_counter()
        native = _run(ck, plan, o, progress.group(plan.read_bytes or 0))
        seconds = time.perf_counter() - t0
        st = N.LoadStats()
        N.lib.sl_model_stats(native.h, ctypes.byref(st))
        del native  # the model's devices are the caller's buffers: nothing of it is needed
        progress.next(plan.read_bytes or 0)
    finally:
        plan.close()
    nth = dict.fromkeys(devs, 0)  # device d's i-th parameter is its i-th box of the group
    out = []
    for _, bs in group:
        for dev, (name, d, _, _) in bs:
            out.append((dev, name, bufs[(d, nth[d])]))
            nth[d] += 1
    return out, seconds, int(st.bytes_read)


def _aliases(a: Any, buf: np.ndarray) -> bool:
    """Whether the device array is the host buffer itself (adopted, not copied)."""
    try:
        return bool(a.unsafe_buffer_pointer() == buf.ctypes.data)
    except Exception:  # noqa: BLE001 - no address to compare: memory of its own
        return False


def _put_group(boxes: list[tuple[Any, str, np.ndarray]],
               shards: dict[str, list[Any]]) -> tuple[list[Any], int, int]:
    """Hands a group's buffers to their devices (one batched device_put): the arrays, the bytes
    JAX copied and the bytes it adopted (the buffer became the device array)."""
    import jax
    arrays = jax.device_put([b for _, _, b in boxes], [dev for dev, _, _ in boxes])
    copied = adopted = 0
    for (_, name, buf), a in zip(boxes, arrays):
        shards.setdefault(name, []).append(a)
        if buf.nbytes and _aliases(a, buf):
            adopted += buf.nbytes
        else:
            copied += buf.nbytes
    return arrays, copied, adopted


class _Progress:
    """One (done, total) over every group's load, in the whole plan's read bytes: a group's
    (done, total) from the engine (which counts the gaps it reads through) is scaled to the
    group plan's read bytes, so that the last report is (total, total)."""

    def __init__(self, fn: Callable[[int, int], None] | None | bool, total: int) -> None:
        self.fn, self.total, self.base = fn, total, 0

    def group(self, size: int) -> Any:
        if not callable(self.fn):
            return False
        fn, base = self.fn, self.base

        def call(done: int, total: int) -> None:
            fn(base + (done * size // total if total else size), self.total)
        return call

    def next(self, size: int) -> None:
        self.base += size


def _local_devices(mesh: Any) -> dict[Any, int]:
    """This process's devices of the mesh, in the mesh's order: mesh device index i."""
    import jax
    local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    return {d: i for i, d in enumerate(local)}


def _axes(entry: Any) -> tuple[str, ...]:
    """The mesh axes of one PartitionSpec entry (None, a name or a tuple of names)."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


@functools.lru_cache(maxsize=16)
def _spanning_axes(mesh: Any) -> tuple[str, ...]:
    """The mesh's axes along which devices belong to different processes (once per mesh, not per
    tensor: DeepSeek-V3 has 90,000 tensors)."""
    procs = np.vectorize(lambda d: d.process_index, otypes=[int])(mesh.devices)
    return tuple(a for k, a in enumerate(mesh.axis_names)
                 if bool((procs.min(axis=k) != procs.max(axis=k)).any()))


def _read_sharding(s: Any, shape: tuple[int, ...]) -> Any:
    """For dist="cooperative": the sharding each process reads a tensor with, so that no byte is
    read by two processes. A NamedSharding that replicates the tensor over mesh axes whose devices
    belong to several processes gets those axes added (minor) to the first dimension they divide
    evenly: the processes then read disjoint parts (whole rows where it is dimension 0), and
    going back to `s` is an all-gather over those axes. Anything else (another kind of Sharding,
    no such axis, no dimension they divide) is read as `s` itself, by every process that needs it."""
    from jax.sharding import NamedSharding, PartitionSpec
    if not isinstance(s, NamedSharding) or len(s.spec) > len(shape):
        return s
    spec = list(s.spec) + [None] * (len(shape) - len(s.spec))
    if any(e is PartitionSpec.UNCONSTRAINED for e in spec):
        return s
    mesh = s.mesh
    used = {a for e in spec for a in _axes(e)}
    spans = tuple(a for a in _spanning_axes(mesh) if a not in used)
    if not spans:
        return s
    extra = int(np.prod([mesh.shape[a] for a in spans]))
    for k, n in enumerate(shape):
        parts = int(np.prod([mesh.shape[a] for a in _axes(spec[k])]))
        if n % (parts * extra) == 0:
            spec[k] = _axes(spec[k]) + spans
            return NamedSharding(mesh, PartitionSpec(*spec),  # type: ignore[no-untyped-call]
                                 memory_kind=s.memory_kind)
    return s


def _items(ck: Checkpoint, mesh: Any, shardings: ShardingSpec, config: ConfigSource | None,
           dtype: Any, index: dict[Any, int], cooperative: bool = False
           ) -> tuple[dict[str, Any], dict[str, Any], list[tuple[Tensor, list[tuple[Any, Box]]]]]:
    """The target sharding of every tensor, the one it is read with (the same unless
    cooperative), and the boxes of this process's devices, in checkpoint order."""
    specs = _shardings(ck, mesh, shardings, config, dtype)
    order = {t.name: k for k, t in enumerate(ck.tensors)}
    tensors = {t.name: t for t in ck.tensors}
    reads = ({n: _read_sharding(sp, tensors[n].shape) for n, sp in specs.items()} if cooperative
             else specs)
    return specs, reads, [(tensors[n], _boxes(n, tensors[n].shape, reads[n], index))
                          for n in sorted(specs, key=order.__getitem__)]


def _dist(dist: str) -> bool:
    if dist not in ("independent", "cooperative"):
        raise ValueError(f"dist {dist!r}: expected 'independent' or 'cooperative'")
    return dist == "cooperative"


def _gather(a: Any, spec: Any) -> Any:
    """An array read with another sharding, moved to `spec` over the devices' interconnect (XLA's
    collectives: an all-gather over the axes the read added); what was read is deleted, so that
    the devices keep their target shards only."""
    import jax
    out = jax.device_put(a, spec)
    out.block_until_ready()
    if out is not a:  # (an equivalent sharding would give the array back)
        a.delete()
    return out


def plan(path: Any, mesh: Any, shardings: ShardingSpec = None, *, dtype: Any = None,
         config: ConfigSource | None = None, dist: str = "independent") -> Plan:
    """What each of this process's mesh devices would hold (the C planner's plan of the boxes):
    plan(...).devices[i] is mesh.devices.flat's i-th local device. Reads no data. With
    dist="cooperative", the boxes it reads before the gather (read_bytes: this process's)."""
    cooperative = _dist(dist)
    with opened(path) as ck:
        index = _local_devices(mesh)
        _, _, items = _items(ck, mesh, shardings, config, dtype, index, cooperative)
        return Plan.from_boxes(ck, [b for _, bs in items for _, b in bs], len(index), dtype)


def _adopts(devices: Iterable[Any]) -> bool:
    """Whether device_put adopts an aligned host buffer as the device buffer on these devices
    (XLA's CPU client does: there device memory is host memory), tried on one of them."""
    import jax
    devs = list(devices)
    if not devs or any(d.platform != "cpu" for d in devs):
        return False
    buf = _host_buffer((_ALIGN,), np.uint8, _ALIGN)
    return bool(jax.device_put(buf, devs[0]).unsafe_buffer_pointer() == buf.ctypes.data)


def _use_dma(dma: bool | None) -> bool:
    if dma is not None and not isinstance(dma, bool):
        raise TypeError(f"dma must be None or a bool, got {type(dma).__name__}")
    return dma if dma is not None else os.environ.get(_DMA_ENV, "1") != "0"


def load(path: Any, mesh: Any, shardings: ShardingSpec = None, *, dtype: Any = None,
         staging: int = 64 << 20, io: str = "auto", threads: int = 0,
         progress: Callable[[int, int], None] | None | bool = None,
         config: ConfigSource | None = None, dma: bool | None = None,
         stats: dict[str, Any] | None = None, dist: str = "independent") -> dict[str, Any]:
    """The checkpoint's tensors as global jax.Arrays of their logical shapes, sharded as asked
    (default: the spmd rule on the mesh's last axis), each addressable device holding exactly
    its index. Host memory beyond the device arrays stays within `staging`.

    dist="independent": each process reads the bytes its devices hold. dist="cooperative" (for
    jax.distributed jobs): a tensor the shardings replicate across processes is read in disjoint
    parts, one per process, and gathered to its sharding over the devices' interconnect, so that
    each byte is read once per job.

    On devices that copy, the host buffers are DMA-mapped (client.dma_map) where the backend
    implements it; dma=False, or SHARDLOAD_JAX_DMA=0 when dma is None, keeps them plain. A dict
    passed as `stats` is filled with what the load did: "staging" ("dma-mapped" or "plain"),
    "dma" (mapped, off, unused, or the backend's refusal), groups, slabs, reused, copied and
    adopted bytes, read_bytes (what the plan reads), bytes_read (what the engine read, over
    all its C loads), seconds."""
    import jax
    if isinstance(staging, bool) or not isinstance(staging, int) or staging < (2 << 20):
        raise ValueError("staging must be an int of at least 2 MiB")
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be None or a dict, got {type(stats).__name__}")
    use_dma = _use_dma(dma)
    cooperative = _dist(dist)
    t_start = time.perf_counter()
    index = _local_devices(mesh)
    with opened(path) as ck:
        specs, reads, items = _items(ck, mesh, shardings, config, dtype, index, cooperative)
        shapes = {t.name: t.shape for t, _ in items}
        whole = Plan.from_boxes(ck, [b for _, bs in items for _, b in bs], len(index), dtype)
        total = whole.read_bytes or 0  # also checks every box before a byte is read
        boxes_bytes = sum(_padded(p.nbytes) for d in whole.devices for p in d.params)
        whole.close()
        # An eighth of the budget is the engine's staging (populated afresh by each C load: a
        # small one costs less set-up and read no slower here); the rest holds the boxes of two
        # groups, one being loaded while the other goes to JAX. Unless the devices adopt the
        # buffers: then a group's buffers are its device arrays, not host memory beyond them,
        # and groups are large (fresh buffers are first touched by each C load).
        engine = max(staging // _ENGINE_PART, 1 << 20)
        bounded = (staging - engine) // 2
        adopting = _adopts(index)
        state = {"budget": _ADOPTED_GROUP if adopting else bounded, "adopting": adopting}
        opts = {"io": io, "staging": engine, "threads": threads}
        prog = _Progress(progress, total)
        pool = _Staging(_clients(index), min(bounded, boxes_bytes), use_dma)
        groups = _groups(items, lambda: state["budget"], dtype)
        shards: dict[str, list[Any]] = {}
        need = {t.name: len(bs) for t, bs in items}  # a tensor is whole once its boxes are put
        out: dict[str, Any] = {}
        sent: list[Any] = []  # the arrays of the group handed to JAX last
        count = {"groups": 0, "copied_bytes": 0, "adopted_bytes": 0, "bytes_read": 0,
                 "gathered_tensors": 0, "gathered_bytes": 0}
        secs = {"c_load_seconds": 0.0, "put_seconds": 0.0, "gather_seconds": 0.0}

        def assemble(n: str) -> Any:
            """Tensor n's global array, once all its boxes are on their devices; under
            cooperative, gathered to its sharding right away (while the next group loads), so
            that the parts read never pile up."""
            a = jax.make_array_from_single_device_arrays(shapes[n], reads[n], shards.pop(n, []))
            if reads[n] is specs[n]:
                return a
            t0 = time.perf_counter()
            count["gathered_bytes"] += sum(sh.data.nbytes for sh in a.addressable_shards)
            count["gathered_tensors"] += 1
            a = _gather(a, specs[n])
            secs["gather_seconds"] += time.perf_counter() - t0
            return a

        def submit(ex: ThreadPoolExecutor, group: Group) -> Any:
            slot = None if state["adopting"] else count["groups"] % 2
            count["groups"] += 1
            return ex.submit(_fill_group, ck, group, len(index), dtype, opts, prog, pool, slot), slot
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="shardload.jax") as ex:
                group = next(groups, None)
                ahead = submit(ex, group) if group else None
                try:
                    while ahead is not None:
                        boxes, c_seconds, c_read = ahead[0].result()
                        slot = ahead[1]
                        secs["c_load_seconds"] += c_seconds
                        count["bytes_read"] += c_read
                        t0 = time.perf_counter()
                        # The previous group's transfers are done (JAX holds a host buffer until
                        # its transfer completes), so two groups at most are alive, this one and
                        # the next, and the slab the next one is loaded into is free again.
                        # (A gathered tensor's parts are deleted: their transfers were done.)
                        for a in sent:
                            if not a.is_deleted():
                                a.block_until_ready()
                        group = next(groups, None)
                        ahead = submit(ex, group) if group else None
                        sent, copied, adopted = _put_group(boxes, shards)
                        secs["put_seconds"] += time.perf_counter() - t0
                        done = [n for n in dict.fromkeys(b[1] for b in boxes)
                                if len(shards[n]) == need[n]]
                        del boxes
                        for n in done:
                            out[n] = assemble(n)
                        count["copied_bytes"] += copied
                        count["adopted_bytes"] += adopted
                        if adopted and slot is not None:
                            pool.retire(slot)  # that slab is device memory now
                        if copied:  # not adopted: the buffers are host memory after all
                            state["budget"], state["adopting"] = bounded, False
                except KeyboardInterrupt:   # Ctrl-C: the C load of the next group stops too
                    _interrupt.stop(ahead[0] if ahead else None)
                    raise
        finally:
            # no transfer still reads a slab being unmapped
            for a in [a for xs in shards.values() for a in xs] + list(out.values()):
                try:
                    if not a.is_deleted():
                        a.block_until_ready()
                except Exception:  # noqa: BLE001 - the load's own error is the one raised
                    pass
            err = pool.close()
        if err is not None:
            raise err
        out.update((n, assemble(n)) for n in specs if n not in out)  # tensors with no box here
    if stats is not None:
        stats.update(pool.report(), **count, read_bytes=total, **secs,
                     seconds=time.perf_counter() - t_start)
    return {n: out[n] for n in specs}


class _Devices:
    """The devices of some shardings in id order: what load needs of a mesh when every tensor's
    Sharding is given."""

    def __init__(self, shardings: Iterable[Any]) -> None:
        devs = sorted({d for s in shardings for d in s.device_set}, key=lambda d: d.id)
        self.devices = np.empty(len(devs), dtype=object)
        self.devices[:] = devs


def load_into(path: Any, arrays: Mapping[str, Any], *, donate: bool = False,
              staging: int = 64 << 20, io: str = "auto", threads: int = 0,
              progress: Callable[[int, int], None] | None | bool = None,
              dma: bool | None = None, dist: str = "independent") -> dict[str, Any]:
    """The checkpoint's tensors named in `arrays` (name -> jax.Array or jax.ShapeDtypeStruct
    with a sharding), each loaded with that array's sharding, shape and dtype (bf16, f16 and
    f32 converted on the way). JAX arrays are immutable, so these are new arrays, returned:
    nothing is written into the given ones. donate=True deletes the given jax.Arrays before the
    load (after every name, shape and dtype is checked), so that their device memory is free
    for the new ones; they are gone if the load then fails. dist: as in load."""
    import jax
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays must be a mapping name -> jax.Array, got {type(arrays).__name__}")
    by_dtype: dict[Any, dict[str, Any]] = {}
    with opened(path) as ck:
        tensors = {t.name: t for t in ck.tensors}
        for name, a in arrays.items():
            t = tensors.get(name)
            if t is None:
                raise KeyError(f"arrays names '{name}', which is not in the checkpoint")
            if tuple(a.shape) != t.shape:
                raise ValueError(f"tensor '{name}': shape {tuple(a.shape)}, the checkpoint has "
                                 f"{t.shape}")
            if getattr(a, "sharding", None) is None:
                raise ValueError(f"tensor '{name}': the array has no sharding")
            dt = np.dtype(a.dtype)
            target = dt.name if dt.name in ("bfloat16", "float16", "float32") else None
            if target is None and dt != numpy_dtype(t.dtype):
                raise ValueError(f"tensor '{name}': dtype {dt}, the checkpoint has {t.dtype} "
                                 "(conversions go to bf16, f16 or f32 only)")
            by_dtype.setdefault(target, {})[name] = a.sharding
    if donate:
        for a in arrays.values():
            if isinstance(a, jax.Array):
                a.delete()
    out: dict[str, Any] = {}
    for target, specs in by_dtype.items():
        out.update(load(path, _Devices(specs.values()), specs, dtype=target, staging=staging,
                        io=io, threads=threads, progress=progress, dma=dma, dist=dist))
    return {name: out[name] for name in arrays}


__all__ = ["load", "load_into", "plan"]
