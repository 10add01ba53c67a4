"""shardload.jax: checkpoints straight into jax.Arrays sharded over a Mesh, each device getting
exactly its index of each tensor, with bounded host memory.

How: every tensor's sharding says which index box each addressable device holds
(``addressable_devices_indices_map``). The boxes become a plan of the C core
(``sl_plan_build_boxes``: no layout rule, any sharding), loaded group by group into fresh host
buffers, one per box, that go to their device with ``jax.device_put``; the global arrays are
assembled with ``jax.make_array_from_single_device_arrays``. A group holds at most half the
staging budget of boxes (the engine's own staging takes the other half), so host memory beyond the
device arrays stays within the budget (or one box, when a single box is larger). A buffer is never
reused: a CPU ``device_put`` may alias it, and then it *is* the device array.

Each process loads its addressable devices only, reading only the bytes they need.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ._dtypes import numpy_dtype
from .checkpoint import Checkpoint, Tensor
from .model import _load_opts, _run, _set_list
from .plan import Plan

ShardingSpec = Any  # a Mapping name -> Sharding, a callable, or a list of (regex, PartitionSpec)
Box = tuple[str, int, tuple[int, ...], tuple[int, ...]]


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


def _groups(items: list[tuple[Tensor, list[tuple[Any, Box]]]], budget: int,
            target: Any) -> list[list[tuple[Tensor, list[tuple[Any, Box]]]]]:
    """Consecutive tensors (checkpoint order) whose boxes fit the budget together; one source
    dtype per group when no target dtype is given (a plan has one dtype)."""
    groups: list[list[tuple[Tensor, list[tuple[Any, Box]]]]] = []
    size, key = 0, None
    for t, boxes in items:
        n = sum(_box_bytes(b, 4) for _, b in boxes)  # 4: the widest target, an upper bound
        k = t.dtype if target is None else None
        if not groups or size + n > budget or k != key:
            groups.append([])
            size, key = 0, k
        groups[-1].append((t, boxes))
        size += n
    return groups


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
            bufs[(d, i)] = buf = np.empty(p.shape, numpy_dtype(p.dtype))
            ptrs.append(buf.ctypes.data if p.nbytes else None)
        rows.append((ctypes.c_void_p * max(len(ptrs), 1))(*ptrs))
        table[d] = ctypes.cast(rows[-1], ctypes.POINTER(ctypes.c_void_p))
    return table, rows


def _load_group(ck: Checkpoint, plan: Plan, group: list[tuple[Tensor, list[tuple[Any, Box]]]],
                opts: dict[str, Any], progress: Any, shards: dict[str, list[Any]]) -> None:
    """Loads one group's boxes into host buffers and hands each to its device."""
    import jax
    devs = sorted({b[1] for _, bs in group for _, b in bs})
    bufs: dict[tuple[int, int], np.ndarray] = {}
    table, rows = _dest_table(plan, devs, bufs)
    o = _load_opts("cpu", opts["io"], opts["staging"], opts["threads"], False, 1234)
    keep: list[Any] = [rows]
    _set_list(o, keep, "devices", "n_devices", devs)
    o.param_dest, o.n_param_dest = table, len(plan.devices)
    _run(ck, plan, o, progress)
    nth = dict.fromkeys(devs, 0)  # device d's i-th parameter is its i-th box of the group
    for _, bs in group:
        for dev, (name, d, _, _) in bs:
            shards.setdefault(name, []).append(jax.device_put(bufs[(d, nth[d])], dev))
            nth[d] += 1


class _Progress:
    """One (done, total) over every group's load."""

    def __init__(self, fn: Callable[[int, int], None] | None | bool, total: int) -> None:
        self.fn, self.total, self.base, self.last = fn, total, 0, 0

    def group(self) -> Any:
        if not callable(self.fn):
            return False
        fn = self.fn

        def call(done: int, _total: int) -> None:
            self.last = done
            fn(self.base + done, self.total)
        return call

    def next(self) -> None:
        self.base += self.last
        self.last = 0


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
        groups = _groups(items, staging // 2, dtype)
        plans = [Plan.from_boxes(ck, [b for _, bs in g for _, b in bs], len(index), dtype)
                 for g in groups]
        opts = {"io": io, "staging": staging - staging // 2, "threads": threads}
        prog = _Progress(progress, sum(p.read_bytes or 0 for p in plans))
        shards: dict[str, list[Any]] = {}
        for g, plan in zip(groups, plans):
            _load_group(ck, plan, g, opts, prog.group(), shards)
            plan.close()
            prog.next()
    return {n: jax.make_array_from_single_device_arrays(shapes[n], specs[n], shards[n])
            for n in specs}


__all__ = ["load", "plan"]
