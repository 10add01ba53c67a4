"""One load into jax.Arrays: each group's C load on a loader thread into host buffers, each group
handed to its devices (one batched device_put) while the next one loads, and each global array
assembled (under dist="cooperative", gathered to its sharding) as soon as its boxes are on their
devices."""
from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import _interrupt
from .. import _native as N
from .._dtypes import NAMES, numpy_dtype
from ..checkpoint import Checkpoint
from ..model import _load_opts, _run, _set_list, wants_bar
from ..plan import Param, Plan
from ._groups import Group, distinct, groups, room, width
from ._parts import Parts, view
from ._shardings import Box, Item, boxes_plan
from ._staging import Staging, adopts, clients

ENGINE_PART = 8  # the engine's staging is staging // ENGINE_PART
ADOPTED_GROUP = 1 << 30  # bytes of boxes per C load when the devices adopt the buffers
Received = list[tuple[Any, Box, np.ndarray]]  # (device, box or part of it, buffer) of each
Reads = tuple[int, int, int]  # a C load's bytes_read, read_requests, read_depth_peak


def _params(loaded: Group, n_devices: int, targets: Mapping[str, int],
            plan: Plan) -> dict[int, list[Param]]:
    """Each device's parameters in the plan of the boxes of `loaded`: its boxes in order, each of
    its tensor's target dtype (the plan holds them so, packed: checked against the plan's counts
    and bytes, which costs a millisecond where reading 150,000 parameters back costs a second)."""
    out: dict[int, list[Param]] = {}
    for t, bs in loaded:
        to = targets.get(t.name, -1)
        dtype = NAMES[to] if to >= 0 else t.dtype
        size = numpy_dtype(dtype).itemsize
        for _, b in bs:
            mine = out.setdefault(b[1], [])
            mine.append(Param(t.name, dtype, b[3], math.prod(b[3]) * size, 0))
    for d in range(n_devices):
        ps = out.get(d, [])
        if (N.lib.sl_plan_param_count(plan.handle, d) != len(ps)
                or N.lib.sl_plan_device_bytes(plan.handle, d) != sum(p.nbytes for p in ps)):
            raise RuntimeError(f"shardload.jax: device {d}'s plan is not the boxes given for it")
    return out


def _dest_table(params: dict[int, list[Param]], n_devices: int, staging: Staging,
                slot: int | None,
                bufs: dict[tuple[int, int], np.ndarray]) -> tuple[Any, list[Any]]:
    """param_dest for the devices of a group: a buffer per box, from `staging`."""
    table = (ctypes.POINTER(ctypes.c_void_p) * n_devices)()
    flat = [(d, i, p) for d in sorted(params) for i, p in enumerate(params[d])]
    for (d, i, _), buf in zip(flat, staging.take(slot, [p for _, _, p in flat])):
        bufs[(d, i)] = buf
    rows = []
    for d in sorted(params):
        ptrs = [bufs[(d, i)].ctypes.data if p.nbytes else None for i, p in enumerate(params[d])]
        rows.append((ctypes.c_void_p * max(len(ptrs), 1))(*ptrs))
        table[d] = ctypes.cast(rows[-1], ctypes.POINTER(ctypes.c_void_p))
    return table, rows


def fill_group(ck: Checkpoint, group: Group, n_devices: int, targets: Mapping[str, int],
               opts: dict[str, Any],
               progress: Progress, staging: Staging,
               slot: int | None) -> tuple[Received, float, Reads]:
    """Plans one group's boxes and loads them into host buffers from `staging`: (device, box,
    buffer) per box (or part of a box), in the group's order, the C load's seconds and Reads. In
    a slab (devices that copy) the copies of a box share one buffer, put to each of their
    devices: the plan has the first device's box only (room() sized the group so).
    Runs on the loader thread (ctypes releases the GIL for the C load), while the caller hands
    the previous group to JAX."""
    loaded = group if slot is None else [(t, distinct(bs)) for t, bs in group]
    plan = boxes_plan(ck, loaded, n_devices, targets, describe=False)
    try:
        params = _params(loaded, n_devices, targets, plan)
        devs = sorted(params)
        bufs: dict[tuple[int, int], np.ndarray] = {}
        table, rows = _dest_table(params, n_devices, staging, slot, bufs)
        o = _load_opts("cpu", opts["io"], opts["staging"], opts["threads"], False, 1234,
                       opts["read_gap"])
        keep: list[Any] = [rows]
        _set_list(o, keep, "devices", "n_devices", devs)
        o.param_dest, o.n_param_dest = table, n_devices
        t0 = time.perf_counter()
        native = _run(ck, plan, o, progress.group(plan.read_bytes or 0))
        seconds = time.perf_counter() - t0
        st = N.LoadStats()
        N.lib.sl_model_stats(native.h, ctypes.byref(st))
        del native  # the model's devices are the caller's buffers: nothing of it is needed
        progress.next(plan.read_bytes or 0)
    finally:
        plan.close()

    def key(dev: Any, box: Box) -> Any:  # which buffer a device's box is in
        return dev if slot is None else (box[2], box[3])
    nth = dict.fromkeys(devs, 0)  # device d's i-th parameter is its i-th box of the group
    out: Received = []
    for (_, bs), (_, firsts) in zip(group, loaded):
        of = {}
        for dev, box in firsts:
            of[key(dev, box)] = bufs[(box[1], nth[box[1]])]
            nth[box[1]] += 1
        out += [(dev, box, of[key(dev, box)]) for dev, box in bs]
    return out, seconds, (int(st.bytes_read), int(st.read_requests), int(st.read_depth_peak))


def _target(dev: Any, kind: str | None) -> Any:
    """Where a box goes: its device, in the memory its tensor's sharding names (a sharding of
    memory_kind "pinned_host" wants its shards in host memory, not the device's default)."""
    if kind is None or kind == dev.default_memory().kind:
        return dev
    from jax.sharding import SingleDeviceSharding
    return SingleDeviceSharding(dev, memory_kind=kind)


def host_memory(devices: Iterable[Any]) -> bool:
    """Whether some device's memory is host memory (a CPU device), where XLA may take a host
    buffer as the device array (adopts() tells whether it does). A GPU's or TPU's default memory
    is its own: device_put copies into it."""
    return any(d.platform == "cpu" for d in devices)


def wait(arrays: list[Any]) -> None:
    """Waits for the arrays' transfers (a deleted one's were done: a gathered tensor's parts)."""
    for a in arrays:
        if not a.is_deleted():
            a.block_until_ready()


def put_group(bufs: list[np.ndarray], targets: list[Any]) -> tuple[list[Any], int, int]:
    """Hands a group's buffers to their targets (one batched device_put): the arrays, the bytes
    JAX copied and the bytes it adopted (the buffer became the device array). Two arrays that
    are one memory (a box's copies share a buffer, which two devices adopted; or JAX narrowed
    that buffer, an int64 one without x64, into one int32 array that both adopted): the later
    one gets a copy of its own."""
    import jax
    arrays = jax.device_put(bufs, targets)
    copied = adopted = 0
    seen: set[int] = set()
    for i, (buf, a) in enumerate(zip(bufs, arrays)):
        ptr = _pointer(a) if buf.nbytes else None
        if ptr is not None and ptr in seen:
            arrays[i] = jax.device_put(a, a.sharding, may_alias=False)  # same memory kind
            copied += buf.nbytes
            continue
        if ptr is not None:
            seen.add(ptr)
        if ptr is not None and ptr == buf.ctypes.data:
            adopted += buf.nbytes
        else:
            copied += buf.nbytes
    return arrays, copied, adopted


def _pointer(a: Any) -> int | None:
    """A single-device array's buffer address, or None where the backend gives none (its memory
    is then its own)."""
    try:
        return _address(a)
    except Exception:  # noqa: BLE001 - no address to compare
        return None


IndexKeys = dict[Any, tuple[Any, dict[int, tuple[int, ...]]]]


def _index_key(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """(start, stop) of each dimension of a device's index."""
    key: list[int] = []
    for sl, n in zip(index, shape):
        a, z, _ = sl.indices(n)
        key += (a, max(z, a))
    return tuple(key)


def _index_keys(shape: tuple[int, ...], sharding: Any, cache: IndexKeys) -> dict[int, tuple[int, ...]]:
    """_index_key of each index the sharding gives a device, by the index's id: JAX caches
    its map of indices per sharding and shape, so make_array_from_callback hands the same
    objects to data() for each tensor of that pair (an MoE checkpoint has 18,000 tensors of a
    few shapes). The map is kept in the cache with the ids, so that they name no other
    object; an index not in it is worked out."""
    k = (sharding, shape)
    if k not in cache:
        imap = sharding.addressable_devices_indices_map(shape)
        cache[k] = (imap, {id(i): _index_key(i, shape) for i in imap.values()})
    return cache[k][1]


def put_tensor(shape: tuple[int, ...], sharding: Any, boxes: list[tuple[Box, np.ndarray]],
               cache: IndexKeys | None = None, host: bool = True,
               seen: dict[Any, bool] | None = None) -> tuple[Any, int, int]:
    """A whole tensor's global array straight from its boxes' buffers (one buffer per device, or
    one shared by a box's copies), in one call into JAX for all its devices
    (make_array_from_callback: 6x less time per shard than a device_put of each, which made
    an MoE checkpoint's 150,000 shards cost 8 s); the array, the bytes JAX copied and those
    it adopted. Where two devices adopted one shared buffer, the later ones get copies of their
    own, as in put_group. host: whether the devices' memory is host memory (CPU devices: a
    buffer may become a device array); where it is not, every byte is a copy and no shard is
    looked at (reading one makes JAX keep an array object for every shard of the tensor: 192 MiB
    for 150,000 shards). seen: where the buffers are fresh (never loaded into again), whether
    the devices adopted a buffer of each dtype before, looked at once per dtype; None: each
    tensor's first shard is looked at (a slab a device adopted must be retired)."""
    import jax
    left: dict[tuple[int, ...], list[np.ndarray]] = {}
    for b, buf in boxes:  # keyed by (start, stop) of each dimension, as data() reads an index
        left.setdefault(tuple(v for a, n in zip(b[2], b[3]) for v in (a, a + n)), []).append(buf)
    given: list[np.ndarray] = []
    keys = _index_keys(shape, sharding, {} if cache is None else cache)

    def data(index: tuple[slice, ...] | None) -> np.ndarray:  # called once per device
        assert index is not None
        bufs = left[keys.get(id(index)) or _index_key(index, shape)]
        given.append(bufs.pop() if len(bufs) > 1 else bufs[0])
        return given[-1]
    a = jax.make_array_from_callback(shape, sharding, data)
    total = sum(buf.nbytes for _, buf in boxes)  # a box's bytes on each of its devices
    if not total or not host:
        return a, total, 0
    buf0 = boxes[0][1]
    if _narrows(buf0):  # JAX's own int32 copy of a buffer may go to several devices
        return _unshare(a, shape, sharding, {buf.ctypes.data for _, buf in boxes if buf.nbytes},
                        buf0.itemsize // np.dtype(a.dtype).itemsize)
    # The devices of one tensor all copy or all adopt (one client, one dtype, buffers equally
    # aligned), so the first shard with bytes tells (reading every shard's address costs 5x
    # the put); where they adopt a shared buffer (copies of a box are one array), each shard is
    # looked at.
    own = len({id(buf) for _, buf in boxes}) == len(boxes)
    if own and seen is not None and buf0.dtype in seen:
        return (a, 0, total) if seen[buf0.dtype] else (a, total, 0)
    first = next(sh for sh in (a.addressable_data(i) for i in range(len(given))) if sh.nbytes)
    adopted = _adopted(_address(first), given)
    if own and seen is not None:
        seen[buf0.dtype] = adopted
    if not adopted:
        return a, total, 0
    if own:
        return a, 0, total
    return _unshare(a, shape, sharding, {buf.ctypes.data for _, buf in boxes if buf.nbytes})


def _address(a: Any) -> int:
    """A single-device array's buffer address."""
    return int(a.unsafe_buffer_pointer())


def _adopted(ptr: int, given: list[np.ndarray]) -> bool:
    """Whether a shard's address is one of the buffers given (the first device's usually)."""
    return ptr == given[0].ctypes.data or ptr in {b.ctypes.data for b in given[1:]}


def _unshare(a: Any, shape: tuple[int, ...], sharding: Any, mine: set[int],
             scale: int = 1) -> tuple[Any, int, int]:
    """a with a copy of its own for each device whose shard is the memory of an earlier one's
    (a shared host buffer that two devices adopted, or the one int32 array JAX narrowed a shared
    int64 buffer into); the host bytes copied and adopted (`mine`: the host buffers; scale: host
    bytes per shard byte, 2 where JAX narrowed them)."""
    import jax
    shards = [s.data for s in a.addressable_shards]
    seen: set[int] = set()
    copied = adopted = 0
    fixed = False
    for i, sh in enumerate(shards):
        ptr = _pointer(sh) if sh.nbytes else None
        if ptr is not None and ptr in seen:
            shards[i] = jax.device_put(sh, sh.sharding, may_alias=False)
            fixed = True
            copied += sh.nbytes * scale
            continue
        if ptr is not None:
            seen.add(ptr)
        if ptr in mine:
            adopted += sh.nbytes * scale
        else:
            copied += sh.nbytes * scale
    if fixed:
        a = jax.make_array_from_single_device_arrays(shape, sharding, shards)
    return a, copied, adopted


def _narrows(buf: np.ndarray) -> bool:
    """Whether JAX holds this buffer's values in a narrower type (int64 as int32 without x64)."""
    from jax.dtypes import canonicalize_dtype as canonical
    return bool(np.dtype(canonical(buf.dtype)) != buf.dtype)


def _narrowed(dtype: str, target: int) -> bool:
    """Whether JAX holds a buffer of this tensor in a narrower type (I64 and U64 as 32-bit ones
    without jax_enable_x64; F64 is converted by the C core: _shardings._as_f32)."""
    from jax.dtypes import canonicalize_dtype as canonical
    own = numpy_dtype(dtype)
    return target < 0 and np.dtype(canonical(own)) != own


def check_fits(name: str, buf: np.ndarray, when: str = "") -> None:
    """Without jax_enable_x64 JAX holds 64-bit integers as 32-bit ones, wrapping what does not
    fit: such values in buf (tensor name's) are an error, never another number (F64 is rounded
    to F32, as JAX does). when: what the message adds about the moment."""
    from jax.dtypes import canonicalize_dtype as canonical
    to = np.dtype(canonical(buf.dtype))
    if buf.dtype.kind not in "iu" or to == buf.dtype or not buf.size:
        return
    lim = np.iinfo(to)
    if buf.min() < lim.min or buf.max() > lim.max:
        raise ValueError(f"tensor '{name}': {buf.dtype} values that {to} cannot hold (JAX "
                         f"without jax_enable_x64 holds {buf.dtype} as {to}: they would wrap)"
                         f"{when}; enable it (jax.config.update('jax_enable_x64', True)) or leave "
                         "the tensor out")


def _check_x64(boxes: Received) -> None:
    """check_fits of every box."""
    for _, b, buf in boxes:
        check_fits(b[0], buf)


class Progress:
    """One (done, total) over every group's load, in the whole plan's read bytes: a group's
    (done, total) from the engine (which counts the gaps it reads through) is scaled to the
    group plan's read bytes, so that the last report is (total, total). A tqdm bar (progress
    True, or None on a terminal: model.wants_bar) is one for the whole load, as shardload.load's
    (a bar per C load would be one per group)."""

    def __init__(self, fn: Callable[[int, int], None] | None | bool, total: int) -> None:
        self.fn, self.total, self.base = fn, total, 0
        self.bar: Any = None
        if not callable(fn) and wants_bar(fn):
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc="shardload.jax")

    def group(self, size: int) -> Any:
        fn = self.fn if callable(self.fn) else self._bar if self.bar is not None else None
        if fn is None:
            return False
        base = self.base

        def call(done: int, total: int) -> None:
            fn(base + (done * size // total if total else size), self.total)
        return call

    def next(self, size: int) -> None:
        self.base += size

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _bar(self, done: int, total: int) -> None:
        self.bar.update(done - self.bar.n)


def gather(a: Any, spec: Any) -> Any:
    """An array read with another sharding, moved to `spec` over the devices' interconnect (XLA's
    collectives: an all-gather over the axes the read added); what was read is deleted, so that
    the devices keep their target shards only."""
    import jax
    out = jax.device_put(a, spec)
    out.block_until_ready()
    if not _aliases(out, a):
        a.delete()
    return out


def _aliases(out: Any, a: Any) -> bool:
    """Whether out holds a buffer of a: device_put to an equivalent sharding gives a new array
    over the same buffers (then deleting a would delete out)."""
    try:
        held = {(s.device, s.data.unsafe_buffer_pointer()) for s in a.addressable_shards}
        return any((s.device, s.data.unsafe_buffer_pointer()) in held
                   for s in out.addressable_shards)
    except Exception:  # a backend without buffer pointers: a is then freed with its last use
        return True


class Loader:
    """One load: the groups of this process's boxes, the group loading ahead on the loader
    thread, the shards handed to JAX and the global arrays assembled from them.

    Host memory: an eighth of the staging budget is the engine's staging (populated afresh by
    each C load: a small one costs less set-up and read no slower here); the rest holds the boxes
    of two groups, one being loaded while the other goes to JAX. Unless the devices adopt the
    buffers: then a group's buffers are its device arrays, not host memory beyond them, and
    groups are large (fresh buffers are first touched by each C load); the first buffer JAX
    copies brings the bound back, and from then on a box too large for a group comes in bands
    of rows, written into its buffer on the device (Parts)."""

    def __init__(self, ck: Checkpoint, items: list[Item], specs: dict[str, Any],
                 reads: dict[str, Any], index: dict[Any, int], targets: Mapping[str, int],
                 staging: int,
                 opts: dict[str, Any], progress: Callable[[int, int], None] | None | bool,
                 dma: bool) -> None:
        self.ck, self.specs, self.reads, self.targets = ck, specs, reads, targets
        self.n_devices = len(index)
        self.shapes = {t.name: t.shape for t, _ in items}
        self.need = {t.name: len(bs) for t, bs in items}  # whole once its boxes are put
        self.kinds = {n: getattr(r, "memory_kind", None) for n, r in reads.items()}
        self.whole = {b[:2]: b for _, bs in items for _, b in bs}  # (name, device) -> its box
        self.parts = Parts()
        whole = boxes_plan(ck, items, len(index), targets, describe=False)
        try:
            self.total = whole.read_bytes or 0  # also checks every box before a byte is read
        finally:
            whole.close()
        boxes_bytes = sum(room(bs, width(t, targets), False) for t, bs in items)
        engine = max(staging // ENGINE_PART, 1 << 20)
        self.bounded = (staging - engine) // 2
        # JAX copies a buffer to narrow it (I64, U64 without x64): such a load goes as on devices
        # that copy from its first group (the first copy brings the bound back only for the
        # group after the next, and a replicated tensor's copies would each have a buffer)
        narrowed = {t.dtype for t, _ in items if _narrowed(t.dtype, targets.get(t.name, -1))}
        adopt = adopts(index)
        self.adopting = adopt and not narrowed
        self.host = host_memory(index)
        # What is read to be gathered (dist="cooperative") is deleted once gathered: beyond the
        # arrays even where the devices adopt the buffers, so those groups keep the bound.
        gathers = any(reads[n] is not specs[n] for n in specs)
        self.budget = ADOPTED_GROUP if self.adopting and not gathers else self.bounded
        self.opts = dict(opts, staging=engine)
        self.progress = Progress(progress, self.total)
        self.pool = Staging(clients(index), min(self.bounded, boxes_bytes), dma)
        if adopt:
            self.pool.fresh = narrowed
        self.groups = groups(items, lambda: self.budget, targets, lambda: not self.adopting)
        self.ahead: tuple[Future[tuple[Received, float, Reads]], int | None] | None = None
        self.shards: dict[str, list[Any]] = {}
        self.ready: dict[str, Any] = {}  # tensors put_tensor made whole, until assembled
        self.index_keys: IndexKeys = {}
        self.fresh_seen: dict[Any, bool] = {}  # put_tensor's seen, for fresh buffers
        self.out: dict[str, Any] = {}
        self.sent: list[Any] = []  # the arrays of the group handed to JAX last
        self.count = {"groups": 0, "copied_bytes": 0, "adopted_bytes": 0, "bytes_read": 0,
                      "read_requests": 0, "read_depth_peak": 0, "gathered_tensors": 0,
                      "gathered_bytes": 0}
        self.secs = {"c_load_seconds": 0.0, "put_seconds": 0.0, "assemble_seconds": 0.0,
                     "gather_seconds": 0.0}

    def run(self) -> dict[str, Any]:
        """Every tensor's global array, in the order of the shardings."""
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="shardload.jax") as ex:
                try:
                    self._submit(ex)
                    while self.ahead is not None:
                        self._receive(ex)
                except KeyboardInterrupt:   # Ctrl-C: the C load of the next group stops too
                    _interrupt.stop(self.ahead[0] if self.ahead else None)
                    raise
        finally:
            self._settle()
            self.progress.close()
            err = self.pool.close()
        if err is not None:
            raise err
        # tensors with no box on this process's devices
        self.out.update((n, self._assemble(n)) for n in self.specs if n not in self.out)
        return {n: self.out[n] for n in self.specs}

    def stats(self) -> dict[str, Any]:
        return {**self.pool.report(), **self.count, **self.parts.count, "read_bytes": self.total,
                **self.secs}

    def _submit(self, ex: ThreadPoolExecutor) -> None:
        """Starts the next group's C load on the loader thread (self.ahead: None once all are)."""
        group = next(self.groups, None)
        if group is None:
            self.ahead = None
            return
        slot = None if self.adopting else self.count["groups"] % 2
        self.count["groups"] += 1
        self.ahead = (ex.submit(fill_group, self.ck, group, self.n_devices, self.targets, self.opts,
                                self.progress, self.pool, slot), slot)

    def _receive(self, ex: ThreadPoolExecutor) -> None:
        """Hands the group loaded ahead to its devices, once the next group's load has begun."""
        assert self.ahead is not None
        loading, slot = self.ahead
        boxes, c_seconds, c_read = loading.result()  # (a Ctrl-C here stops self.ahead)
        self.ahead = None
        del loading  # (it holds the buffers too)
        self.secs["c_load_seconds"] += c_seconds
        self.count["bytes_read"] += c_read[0]
        self.count["read_requests"] += c_read[1]
        self.count["read_depth_peak"] = max(self.count["read_depth_peak"], c_read[2])
        t0 = time.perf_counter()
        # The previous group's transfers are done (JAX holds a host buffer until its transfer
        # completes), so two groups at most are alive, this one and the next, and the slab the
        # next one is loaded into is free again. (A gathered tensor's parts are deleted: their
        # transfers were done.)
        wait(self.sent)
        self._submit(ex)
        self.sent, copied, adopted = self._put(boxes, slot)
        self.secs["put_seconds"] += time.perf_counter() - t0
        done = [n for n in dict.fromkeys(b[0] for _, b, _ in boxes)
                if n in self.ready or len(self.shards.get(n, ())) == self.need[n]]
        del boxes
        for n in done:
            self.out[n] = self._assemble(n)
        self.count["copied_bytes"] += copied
        self.count["adopted_bytes"] += adopted
        if adopted and slot is not None:
            self.pool.retire(slot)  # that slab is device memory now
        if copied:  # not adopted: the buffers are host memory after all
            self.budget, self.adopting = self.bounded, False

    def _put(self, boxes: Received, slot: int | None) -> tuple[list[Any], int, int]:
        """Puts a group's buffers on their devices: a tensor whose boxes are all in the group
        becomes its global array at once (put_tensor) where it can; else a whole box becomes its
        tensor's shard there, a part of one goes into that box's buffer (Parts: in the device's
        default memory, as integers), the finished box moved to its tensor's memory kind if that
        is another."""
        _check_x64(boxes)
        whole, boxes = self._whole_tensors(boxes)
        arrays, copied, adopted = [], 0, 0
        for n, bs in whole.items():
            a, c, ad = put_tensor(self.shapes[n], self.reads[n], bs, self.index_keys, self.host,
                                  self.fresh_seen if slot is None else None)
            self.ready[n] = a
            arrays.append(a)
            copied, adopted = copied + c, adopted + ad
        if not boxes:
            return arrays, copied, adopted
        more, c, ad = self._put_boxes(boxes)
        return arrays + more, copied + c, adopted + ad

    def _whole_tensors(self, boxes: Received) -> tuple[dict[str, list[tuple[Box, np.ndarray]]],
                                                       Received]:
        """The group's tensors that put_tensor can make in one call (all their boxes whole in
        this group, in their devices' default memory, and not a fully replicated one whose every
        device has a buffer of its own: make_array_from_callback asks for such a tensor's data
        once), with their (box, buffer) pairs; the rest of the boxes."""
        by: dict[str, list[tuple[Any, Box, np.ndarray]]] = {}
        for dev, b, buf in boxes:
            by.setdefault(b[0], []).append((dev, b, buf))
        whole: dict[str, list[tuple[Box, np.ndarray]]] = {}
        rest: Received = []
        for n, bs in by.items():
            ok = (len(bs) == self.need[n] and n not in self.shards
                  and all(self.whole[b[:2]][3] == b[3] for _, b, _ in bs)
                  and _target(bs[0][0], self.kinds.get(n)) is bs[0][0]
                  and not (self.reads[n].is_fully_replicated
                           and len({buf.ctypes.data for _, _, buf in bs}) > 1))
            if ok:
                whole[n] = [(b, buf) for _, b, buf in bs]
            else:
                rest += bs
        return whole, rest

    def _put_boxes(self, boxes: Received) -> tuple[list[Any], int, int]:
        """put_group of boxes that are not whole tensors of the group (see _put)."""
        parts = [self.whole[b[:2]][3] != b[3] for _, b, _ in boxes]
        bufs = [buf.view(view(buf.dtype)) if part else buf
                for (_, _, buf), part in zip(boxes, parts)]
        targets = [dev if part else _target(dev, self.kinds.get(b[0]))
                   for (dev, b, _), part in zip(boxes, parts)]
        arrays, copied, adopted = put_group(bufs, targets)
        from jax.dtypes import canonicalize_dtype as canonical  # what JAX makes of F64 without x64
        assembling = []
        for (dev, b, buf), a, part in zip(boxes, arrays, parts):
            if part:
                assembling.append((dev, b, self.whole[b[:2]], a, canonical(buf.dtype)))
            else:
                self.shards.setdefault(b[0], []).append(a)
        if assembling:
            t0 = time.perf_counter()
            for dev, name, a in self.parts.add(assembling):
                target = _target(dev, self.kinds.get(name))
                if target is not dev:
                    a = gather(a, target)
                self.shards.setdefault(name, []).append(a)
            self.secs["assemble_seconds"] += time.perf_counter() - t0
        return arrays, copied, adopted

    def _assemble(self, n: str) -> Any:
        """Tensor n's global array, once all its boxes are on their devices; under cooperative,
        gathered to its sharding right away (while the next group loads), so that the parts read
        never pile up."""
        import jax
        a = self.ready.pop(n, None)
        if a is None:
            a = jax.make_array_from_single_device_arrays(self.shapes[n], self.reads[n],
                                                         self.shards.pop(n, []))
        if self.reads[n] is self.specs[n]:
            return a
        t0 = time.perf_counter()
        self.count["gathered_bytes"] += sum(sh.data.nbytes for sh in a.addressable_shards)
        self.count["gathered_tensors"] += 1
        a = gather(a, self.specs[n])
        self.secs["gather_seconds"] += time.perf_counter() - t0
        return a

    def _settle(self) -> None:
        """Waits for every transfer still running: no transfer reads a slab being unmapped (on a
        GPU, device_put of a host buffer reads it after returning, until the array is ready;
        self.sent: a group whose tensors were not all kept, when the load failed)."""
        for a in ([a for xs in self.shards.values() for a in xs] + list(self.out.values())
                  + list(self.ready.values()) + self.parts.arrays() + self.sent):
            try:
                if not a.is_deleted():
                    a.block_until_ready()
            except Exception:  # noqa: BLE001 - the load's own error is the one raised
                pass
