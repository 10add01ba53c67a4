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
group's buffers *are* device arrays, so groups are large (few C loads); every put is checked, and
the first buffer JAX copies instead brings the bound back. A buffer is never reused: a CPU
``device_put`` may alias it, and then it *is* the device array.

Each process loads its addressable devices only, reading only the bytes they need.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._dtypes import NAMES, numpy_dtype, target_value
from .checkpoint import Checkpoint, Tensor
from .model import _load_opts, _run, _set_list
from .plan import Plan

ShardingSpec = Any  # a Mapping name -> Sharding, a callable, or a list of (regex, PartitionSpec)
Box = tuple[str, int, tuple[int, ...], tuple[int, ...]]
_ALIGN = 64  # bytes: XLA's CPU client adopts a host buffer this aligned instead of copying it
_ENGINE_PART = 8  # the engine's staging is staging // _ENGINE_PART
_ADOPTED_GROUP = 1 << 30  # bytes of boxes per C load when the devices adopt the buffers


def _default_specs(ck: Checkpoint, mesh: Any, config: Any, dtype: Any) -> dict[str, Any]:
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


def _shardings(ck: Checkpoint, mesh: Any, shardings: ShardingSpec, config: Any,
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


def _box_bytes(box: Box, itemsize: int) -> int:
    return int(np.prod(box[3], dtype=np.int64)) * itemsize


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


def _dest_table(plan: Plan, devs: list[int],
                bufs: dict[tuple[int, int], np.ndarray]) -> tuple[Any, list[Any]]:
    """param_dest for the devices of a group: a fresh host buffer per box (never reused: a CPU
    device_put may alias it)."""
    import ctypes
    table = (ctypes.POINTER(ctypes.c_void_p) * len(plan.devices))()
    rows = []
    for d in devs:
        ptrs = []
        for i, p in enumerate(plan.devices[d].params):
            bufs[(d, i)] = buf = _host_buffer(p.shape, numpy_dtype(p.dtype), p.nbytes)
            ptrs.append(buf.ctypes.data if p.nbytes else None)
        rows.append((ctypes.c_void_p * max(len(ptrs), 1))(*ptrs))
        table[d] = ctypes.cast(rows[-1], ctypes.POINTER(ctypes.c_void_p))
    return table, rows


def _fill_group(ck: Checkpoint, group: Group, n_devices: int, dtype: Any, opts: dict[str, Any],
                progress: "_Progress") -> list[tuple[Any, str, np.ndarray]]:
    """Plans one group's boxes and loads them into fresh host buffers: (device, tensor name,
    buffer) per box, in the group's order. Runs on the loader thread (ctypes releases the GIL
    for the C load), while the caller hands the previous group to JAX."""
    plan = Plan.from_boxes(ck, [b for _, bs in group for _, b in bs], n_devices, dtype)
    try:
        devs = sorted({b[1] for _, bs in group for _, b in bs})
        bufs: dict[tuple[int, int], np.ndarray] = {}
        table, rows = _dest_table(plan, devs, bufs)
        o = _load_opts("cpu", opts["io"], opts["staging"], opts["threads"], False, 1234)
        keep: list[Any] = [rows]
        _set_list(o, keep, "devices", "n_devices", devs)
        o.param_dest, o.n_param_dest = table, len(plan.devices)
        _run(ck, plan, o, progress.group(plan.read_bytes or 0))
        progress.next(plan.read_bytes or 0)
    finally:
        plan.close()
    nth = dict.fromkeys(devs, 0)  # device d's i-th parameter is its i-th box of the group
    out = []
    for _, bs in group:
        for dev, (name, d, _, _) in bs:
            out.append((dev, name, bufs[(d, nth[d])]))
            nth[d] += 1
    return out


def _put_group(boxes: list[tuple[Any, str, np.ndarray]],
               shards: dict[str, list[Any]]) -> tuple[list[Any], int]:
    """Hands a group's buffers to their devices (one batched device_put): the arrays, and the
    bytes JAX copied rather than adopted (0 when every buffer became its device array)."""
    import jax
    arrays = jax.device_put([b for _, _, b in boxes], [dev for dev, _, _ in boxes])
    copied = 0
    for (_, name, buf), a in zip(boxes, arrays):
        shards.setdefault(name, []).append(a)
        if buf.nbytes and a.unsafe_buffer_pointer() != buf.ctypes.data:
            copied += buf.nbytes
    return arrays, copied


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


def _items(ck: Checkpoint, mesh: Any, shardings: ShardingSpec, config: Any, dtype: Any,
           index: dict[Any, int]) -> tuple[dict[str, Any], list[tuple[Tensor, list[tuple[Any, Box]]]]]:
    specs = _shardings(ck, mesh, shardings, config, dtype)
    order = {t.name: k for k, t in enumerate(ck.tensors)}
    tensors = {t.name: t for t in ck.tensors}
    return specs, [(tensors[n], _boxes(n, tensors[n].shape, specs[n], index))
                   for n in sorted(specs, key=order.__getitem__)]


def plan(path: Any, mesh: Any, shardings: ShardingSpec = None, *, dtype: Any = None,
         config: Any = None) -> Plan:
    """What each of this process's mesh devices would hold (the C planner's plan of the boxes):
    plan(...).devices[i] is mesh.devices.flat's i-th local device. Reads no data."""
    with Checkpoint(path) as ck:
        index = _local_devices(mesh)
        _, items = _items(ck, mesh, shardings, config, dtype, index)
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


def load(path: Any, mesh: Any, shardings: ShardingSpec = None, *, dtype: Any = None,
         staging: int = 64 << 20, io: str = "auto", threads: int = 0,
         progress: Callable[[int, int], None] | None | bool = None,
         config: Any = None) -> dict[str, Any]:
    """The checkpoint's tensors as global jax.Arrays of their logical shapes, sharded as asked
    (default: the spmd rule on the mesh's last axis), each addressable device holding exactly
    its index. Host memory beyond the device arrays stays within `staging`."""
    import jax
    if isinstance(staging, bool) or not isinstance(staging, int) or staging < (2 << 20):
        raise ValueError("staging must be an int of at least 2 MiB")
    index = _local_devices(mesh)
    with Checkpoint(path) as ck:
        specs, items = _items(ck, mesh, shardings, config, dtype, index)
        shapes = {t.name: t.shape for t, _ in items}
        whole = Plan.from_boxes(ck, [b for _, bs in items for _, b in bs], len(index), dtype)
        total = whole.read_bytes or 0  # also checks every box before a byte is read
        whole.close()
        # An eighth of the budget is the engine's staging (populated afresh by each C load: a
        # small one costs less set-up and read no slower here); the rest holds the boxes of two
        # groups, one being loaded while the other goes to JAX. Unless the devices adopt the
        # buffers: then a group's buffers are its device arrays, not host memory beyond them,
        # and groups are large (each C load costs ~7 ms of set-up whatever its size).
        engine = max(staging // _ENGINE_PART, 1 << 20)
        bounded = (staging - engine) // 2
        state = {"budget": _ADOPTED_GROUP if _adopts(index) else bounded}
        opts = {"io": io, "staging": engine, "threads": threads}
        prog = _Progress(progress, total)
        groups = _groups(items, lambda: state["budget"], dtype)
        shards: dict[str, list[Any]] = {}
        sent: list[Any] = []  # the arrays of the group handed to JAX last
        with ThreadPoolExecutor(1, thread_name_prefix="shardload.jax") as ex:
            group = next(groups, None)
            ahead = ex.submit(_fill_group, ck, group, len(index), dtype, opts, prog) if group else None
            while ahead is not None:
                boxes = ahead.result()
                # The previous group's transfers are done (JAX holds a host buffer until its
                # transfer completes), so two groups at most are alive: this one and the next.
                for a in sent:
                    a.block_until_ready()
                group = next(groups, None)
                ahead = (ex.submit(_fill_group, ck, group, len(index), dtype, opts, prog)
                         if group else None)
                sent, copied = _put_group(boxes, shards)
                del boxes
                if copied:  # not adopted: the buffers are host memory after all
                    state["budget"] = bounded
    return {n: jax.make_array_from_single_device_arrays(shapes[n], specs[n], shards[n])
            for n in specs}


__all__ = ["load", "plan"]
