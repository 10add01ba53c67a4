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
memory beyond the device arrays stays within the budget. A tensor larger than a group is cut into
pieces of whole boxes when its boxes split dimension 0 only (disjoint byte ranges); on devices that
copy, one split along another dimension (pieces would read its rows again) or with a box larger
than a group goes in bands of rows (of a row's first elements where one row is larger), which each
device writes into one buffer in place (_parts.py). On CPU devices XLA adopts an aligned host
buffer as the device buffer (no copy): there a group's buffers *are* device arrays, fresh for each
group, so groups are large (few C loads); every put is checked, and the first buffer JAX copies
instead brings the bound back. On devices that copy, the groups go through two slabs of the group
bound (a box's copies on several devices one buffer in them, written once and put to each), used in
turn and reused once JAX has finished with the previous group loaded into that slab (its arrays are
ready: the transfers are done), each DMA-mapped once (``client.dma_map``) where the backend
implements it and unmapped when the load ends, failed or not (``dma=False`` or SHARDLOAD_JAX_DMA=0:
plain host memory). A slab that a device adopted after all is never reused: it is that device's
memory now.

Each process loads its addressable devices only, reading only the bytes they need; with
dist="cooperative", what the shardings replicate across processes is read in disjoint parts, one
per process, and all-gathered over the devices (``_shardings.read_sharding``, ``_loader.gather``).

Where things are: _shardings.py (which box each device holds), _groups.py (boxes into groups
that fit the budget), _staging.py (the host buffers), _parts.py (boxes written in parts on their
devices), _loader.py (the load loop).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype, target_value
from ..checkpoint import opened
from ..errors import UnsupportedError
from ..model import ReadGap, _load_opts, wants_bar
from ..plan import ConfigSource, Plan
from ._loader import Loader, check_fits
from ._shardings import ShardingSpec, Targets, boxes_plan, concrete, items, local_devices

_DMA_ENV = "SHARDLOAD_JAX_DMA"  # "0": never dma_map the slabs
_KEEP = "each tensor's checkpoint dtype"  # what dtype=None means here


def _dist(dist: str) -> bool:
    if dist not in ("independent", "cooperative"):
        raise ValueError(f"dist {dist!r}: expected 'independent' or 'cooperative'")
    return dist == "cooperative"


def plan(path: Any, mesh: Any, shardings: ShardingSpec = None, *, dtype: Any = None,
         config: ConfigSource | None = None, dist: str = "independent") -> Plan:
    """What each of this process's mesh devices would hold (the C planner's plan of the boxes):
    plan(...).devices[i] is mesh.devices.flat's i-th local device. Reads no data. With
    dist="cooperative", the boxes it reads before the gather (read_bytes: this process's)."""
    cooperative = _dist(dist)
    _check_dtype(dtype)
    with opened(path) as ck:
        index = local_devices(mesh)
        _, _, its, to = items(ck, mesh, shardings, config, dtype, index, cooperative)
        return boxes_plan(ck, its, len(index), to)


def _check_options(staging: int, io: str, threads: int, progress: Any, dma: bool | None,
                   stats: dict[str, Any] | None, dist: str, read_gap: ReadGap) -> tuple[bool, bool]:
    """The options of load and load_into checked before any file is opened (load_into: before
    it deletes the arrays it was given), not at the first group's C load: (dma used,
    cooperative)."""
    if isinstance(staging, bool) or not isinstance(staging, int) or staging < (2 << 20):
        raise ValueError("staging must be an int of at least 2 MiB")
    _load_opts("cpu", io, staging, threads, False, 0, read_gap)
    if not callable(progress):
        wants_bar(progress)
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be None or a dict, got {type(stats).__name__}")
    return _use_dma(dma), _dist(dist)


def _check_dtype(dtype: Any) -> None:
    """A dtype load takes (or load_into's Targets, which it checked)."""
    if not isinstance(dtype, Targets):
        target_value(dtype, _KEEP)


def _use_dma(dma: bool | None) -> bool:
    if dma is not None and not isinstance(dma, bool):
        raise TypeError(f"dma must be None or a bool, got {type(dma).__name__}")
    return dma if dma is not None else os.environ.get(_DMA_ENV, "1") != "0"


def load(path: Any, mesh: Any, shardings: ShardingSpec = None, *, dtype: Any = None,
         staging: int = 64 << 20, io: str = "auto", threads: int = 0,
         progress: Callable[[int, int], None] | None | bool = None,
         config: ConfigSource | None = None, dma: bool | None = None,
         stats: dict[str, Any] | None = None, dist: str = "independent",
         read_gap: ReadGap = None) -> dict[str, Any]:
    """The checkpoint's tensors as global jax.Arrays of their logical shapes, sharded as asked
    (default: the spmd rule on the mesh's last axis), each addressable device holding exactly
    its index. Host memory beyond the device arrays stays within `staging`. dtype (bf16, f16,
    f32; None: each tensor's own) converts the float tensors; what the C planner keeps (FP8
    weights, their F32 scales) and integer and bool tensors keep their dtype.

    dist="independent": each process reads the bytes its devices hold. dist="cooperative" (for
    jax.distributed jobs): a tensor the shardings replicate across processes is read in disjoint
    parts, one per process, and gathered to its sharding over the devices' interconnect, so that
    each byte is read once per job. read_gap="none": a process reads only the bytes its devices
    hold (the gaps under 1 MiB between them, read by default to keep requests large, are skipped;
    a weight split along its rows is then read row by row).

    On devices that copy, the host buffers are DMA-mapped (client.dma_map) where the backend
    implements it; dma=False, or SHARDLOAD_JAX_DMA=0 when dma is None, keeps them plain. A dict
    passed as `stats` is filled with what the load did: "staging" ("dma-mapped" or "plain"),
    "dma" (mapped, off, unused, or the backend's refusal), groups, slabs, reused, copied and
    adopted bytes, read_bytes (what the plan reads), bytes_read (what the engine read, over
    all its C loads), read_requests (over all of them) and read_depth_peak (the most in flight
    in any), seconds."""
    use_dma, cooperative = _check_options(staging, io, threads, progress, dma, stats, dist,
                                          read_gap)
    _check_dtype(dtype)
    t_start = time.perf_counter()
    with opened(path) as ck:
        loader = _prepare(ck, mesh, shardings, config, dtype, cooperative,
                         {"io": io, "threads": threads, "read_gap": read_gap}, staging,
                         progress, use_dma)
        out = loader.run()
    if stats is not None:
        stats.update(loader.stats(), seconds=time.perf_counter() - t_start)
    return out


def _prepare(ck: Any, mesh: Any, shardings: ShardingSpec, config: ConfigSource | None,
            dtype: Any, cooperative: bool, opts: dict[str, Any], staging: int,
            progress: Callable[[int, int], None] | None | bool, use_dma: bool) -> Loader:
    """The load of load and load_into, every box checked by the C planner (nothing read yet)."""
    index = local_devices(mesh)
    specs, reads, its, to = items(ck, mesh, shardings, config, dtype, index, cooperative)
    return Loader(ck, its, specs, reads, index, to, staging, opts, progress, use_dma)


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
              dma: bool | None = None, dist: str = "independent",
              read_gap: ReadGap = None, stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """The checkpoint's tensors named in `arrays` (name -> jax.Array or jax.ShapeDtypeStruct
    with a sharding), each loaded with that array's sharding, shape and dtype (bf16, f16 and
    f32 converted on the way), all in one load whatever the dtypes (each byte read once).
    JAX arrays are immutable, so these are new arrays, returned: nothing is written into the
    given ones. donate=True deletes the given jax.Arrays before the load (after every name,
    shape, dtype and conversion is checked), so that their device memory is free for the new
    ones; they are gone if the load then fails. dist, read_gap and stats: as in load."""
    import jax
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays must be a mapping name -> jax.Array, got {type(arrays).__name__}")
    use_dma, cooperative = _check_options(staging, io, threads, progress, dma, stats, dist,
                                          read_gap)
    if not arrays:
        return {}
    t_start = time.perf_counter()
    with opened(path) as ck:   # opened once (a remote one: its headers fetched once)
        specs, to = _targets(ck._by_name(), arrays)
        try:  # the C planner checks every box and conversion (its plans read nothing): before
            # any deletion
            loader = _prepare(ck, _Devices(specs.values()), specs, None, to, cooperative,
                             {"io": io, "threads": threads, "read_gap": read_gap}, staging,
                             progress, use_dma)
        except UnsupportedError as e:
            raise ValueError(str(e)) from e
        if donate:
            try:
                _check_narrowed(ck, to, staging)
            except BaseException:
                loader.progress.close()
                raise
            for a in arrays.values():
                if isinstance(a, jax.Array):
                    a.delete()
        out = loader.run()
    if stats is not None:
        stats.update(loader.stats(), seconds=time.perf_counter() - t_start)
    return {name: out[name] for name in arrays}


def _targets(tensors: Mapping[str, Any],
             arrays: Mapping[str, Any]) -> tuple[dict[str, Any], Targets]:
    """The arrays' shardings and targets (sl_dtype values, -1: the checkpoint's own), each name,
    shape and dtype checked against the checkpoint."""
    from jax.dtypes import canonicalize_dtype as canonical  # I64 is int32 without x64
    specs: dict[str, Any] = {}
    to = Targets()
    for name, a in arrays.items():
        t = tensors.get(name)
        if t is None:
            raise KeyError(f"arrays names '{name}', which is not in the checkpoint")
        if tuple(a.shape) != t.shape:
            raise ValueError(f"tensor '{name}': shape {tuple(a.shape)}, the checkpoint has "
                             f"{t.shape}")
        if getattr(a, "sharding", None) is None:
            raise ValueError(f"tensor '{name}': the array has no sharding")
        dt, own = np.dtype(a.dtype), numpy_dtype(t.dtype)
        if dt != own and dt.name in ("bfloat16", "float16", "float32"):
            to[name] = target_value(dt.name)
        elif dt in (own, canonical(own)):   # canonical: what load makes of it (_check_x64)
            to[name] = -1
        else:
            raise ValueError(f"tensor '{name}': dtype {dt}, the checkpoint has {t.dtype} "
                             "(conversions go to bf16, f16 or f32 only)")
        specs[name] = concrete(name, a.sharding)
    return specs, to


def _check_narrowed(ck: Any, to: Targets, staging: int) -> None:
    """The values of each tensor JAX will hold narrowed (I64, U64 without x64) checked before
    donate deletes anything (the load checks them as they arrive, too late then): read in
    chunks of at most the staging budget, so these tensors are read twice."""
    from jax.dtypes import canonicalize_dtype as canonical
    tensors = ck._by_name()
    for name, v in to.items():
        t = tensors[name]
        own = numpy_dtype(t.dtype)
        narrow = np.dtype(canonical(own))
        if v >= 0 or narrow == own or own.kind not in "iu" or not t.nbytes:
            continue   # (F64 is converted by the C core: _shardings._as_f32)
        step = max(staging // own.itemsize, 1) * own.itemsize
        for off in range(0, t.nbytes, step):
            part = ck._read_bytes(name, off, min(step, t.nbytes - off)).view(own)
            check_fits(name, part, ", found before donate deleted anything")


__all__ = ["load", "load_into", "plan"]
