"""Which index box of each tensor each of this process's devices holds: the shardings asked for
(a mapping, a callable, (regex, PartitionSpec) rules, or SHARDING.md's spmd rule by default), the
boxes JAX's shardings give, and for dist="cooperative" the sharding a tensor is read with so that
no byte is read by two processes."""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._dtypes import CONVERTS, NAMES, VALUE, target_value
from ..checkpoint import Checkpoint, Tensor
from ..errors import Error
from ..plan import ConfigSource, Plan

ShardingSpec = Any  # a Mapping name -> Sharding, a callable, or a list of (regex, PartitionSpec)


class Targets(dict[str, int]):
    """Each tensor's target as load_into checked it (sl_dtype values, -1: its own dtype): what
    load's `dtype` may be inside this package; a plain mapping from a caller is no dtype."""
Box = tuple[str, int, tuple[int, ...], tuple[int, ...]]  # name, mesh device, start, length
Item = tuple[Tensor, list[tuple[Any, Box]]]  # a tensor and (device, box) of each device


def default_specs(ck: Checkpoint, mesh: Any, config: ConfigSource | None,
                  dtype: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """SHARDING.md's spmd rule on the mesh's last axis, as the C planner applies it: each
    tensor of the spmd plan is split along the dimension its tile is shorter in, else
    replicated. Tensors the rule table skips (tied heads, rotary caches) are not loaded. With
    them, each tensor's dtype in that plan (FP8 weights and their F32 scales kept under any
    target)."""
    from jax.sharding import PartitionSpec
    axis = mesh.axis_names[-1]
    n = int(mesh.shape[axis])
    plan = Plan(ck, config=config, tp=n, layout="spmd", dtype=dtype, describe=False)
    tensors = ck._by_name()
    out: dict[str, Any] = {}
    dtypes: dict[str, str] = {}
    for p in plan.device(0).params:  # one device's tiles tell: the others are the same shapes
        whole = tensors[p.name].shape
        split = [k for k in range(len(whole)) if p.shape[k] != whole[k]]
        spec = [None] * len(whole)
        if split:
            spec[split[0]] = axis
        out[p.name] = PartitionSpec(*spec)  # type: ignore[no-untyped-call]
        dtypes[p.name] = p.dtype
    plan.close()
    return out, dtypes


_NO_RULE = object()


def _sharding_of(name: str, t: Tensor, mesh: Any, shardings: ShardingSpec) -> Any:
    """The Sharding of one tensor, from a mapping, a callable or (regex, PartitionSpec) rules
    (a rule's spec None: replicated, as P())."""
    from jax.sharding import NamedSharding, PartitionSpec, Sharding
    if callable(shardings):
        s = shardings(name, t.shape, t.dtype)
    elif isinstance(shardings, Mapping):
        s = shardings[name]
    else:
        s = next((spec for pat, spec in shardings if re.search(pat, name)), _NO_RULE)
        if s is _NO_RULE:
            raise ValueError(f"tensor '{name}': no sharding rule matches it")
        if s is None:
            s = PartitionSpec()  # type: ignore[no-untyped-call]
    if isinstance(s, PartitionSpec):
        try:
            s = NamedSharding(mesh, s)
        except Exception as e:  # JAX's message names the axis, not the tensor; an axis used
            # twice is its DuplicateSpecError, no ValueError
            raise ValueError(f"tensor '{name}': {e}") from e
    if not isinstance(s, Sharding):
        raise TypeError(f"tensor '{name}': expected a jax.sharding.Sharding or PartitionSpec, "
                        f"got {type(s).__name__}")
    return concrete(name, s)


def concrete(name: str, s: Any) -> Any:
    """s over a concrete mesh. jax.eval_shape under jax.set_mesh gives NamedShardings over the
    AbstractMesh of that mesh (no devices): the context's mesh, where it is that one, stands in
    for it. A spec entry PartitionSpec.UNCONSTRAINED (jit's "let the compiler choose") places
    nothing: JAX lays such a dimension out as replicated, and the array's sharding then fails
    every later device_put and jit that is given it."""
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec
    spec = getattr(s, "spec", None)
    if spec is not None and any(e is PartitionSpec.UNCONSTRAINED for e in spec):
        raise ValueError(f"tensor '{name}': PartitionSpec.UNCONSTRAINED in {spec} leaves the "
                         "placement to a compiler; a loaded array needs each dimension's axes "
                         "(None: not split)")
    mesh = getattr(s, "mesh", None)
    if not isinstance(mesh, AbstractMesh):
        return s
    import jax
    get_mesh = getattr(jax.sharding, "get_mesh", None)
    ctx = get_mesh() if get_mesh is not None else None
    if ctx is None or ctx.empty or ctx.abstract_mesh != mesh:
        raise ValueError(f"tensor '{name}': its sharding is over an abstract mesh ({mesh}) and "
                         "no mesh of that shape is set (jax.set_mesh): load inside the "
                         "jax.set_mesh it was made under, or give shardings over a Mesh")
    return NamedSharding(ctx, s.spec, memory_kind=s.memory_kind)


def _shardings(ck: Checkpoint, mesh: Any, shardings: ShardingSpec, config: ConfigSource | None,
               dtype: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """Each tensor's Sharding and target (targets)."""
    by_name = ck._by_name()
    if shardings is None:
        specs, planned = default_specs(ck, mesh, config, dtype)
        return ({n: _sharding_of(n, by_name[n], mesh, specs) for n in specs},
                targets(by_name, specs, dtype, planned))
    if isinstance(shardings, Mapping):
        missing = [n for n in shardings if n not in by_name]
        if missing:
            raise KeyError(f"shardings names '{missing[0]}', which is not in the checkpoint")
        names: Iterable[str] = shardings
    elif callable(shardings):
        names = by_name
    elif isinstance(shardings, (list, tuple)):
        _check_rules(shardings)
        names = by_name
    else:
        raise TypeError("shardings must be None, a mapping name -> Sharding, a callable "
                        "(name, shape, dtype) -> Sharding or a list of (regex, PartitionSpec)")
    specs = {n: _sharding_of(n, by_name[n], mesh, shardings) for n in names}
    return specs, targets(by_name, specs, dtype, planned_dtypes(ck, config, dtype))


def planned_dtypes(ck: Checkpoint, config: ConfigSource | None, dtype: Any) -> dict[str, str] | None:
    """Each tensor's dtype in the C planner's spmd plan (one device: it reads nothing) under
    `dtype`, where the planner can plan the checkpoint (its architecture and config.json known);
    None where it cannot, or dtype and config are None (each tensor kept). A config given is
    the caller's: one the planner cannot use is an error, not ignored."""
    if dtype is None and config is None:
        return None
    try:
        plan = Plan(ck, config=config, tp=1, layout="spmd", dtype=dtype)
    except (Error, ValueError, OSError):  # an unknown architecture, no config: the float rule
        if config is not None:
            raise
        return None
    try:
        return {p.name: p.dtype for p in plan.devices[0].params}
    finally:
        plan.close()


def targets(tensors: Mapping[str, Tensor], names: Iterable[str], dtype: Any,
            planned: Mapping[str, str] | None = None) -> dict[str, int]:
    """Each tensor's target, an sl_dtype value (-1: its own dtype): dtype=None keeps every one;
    else a tensor of the C planner's spmd plan takes its dtype there (`planned`: FP8 weights,
    their F32 scales, DeepSeek's F32 e_score_correction_bias kept), and any other float tensor
    (F32, F16, BF16, F64) converts to dtype while the rest (FP8, integers, bool) keep theirs."""
    to = target_value(dtype, "each tensor's checkpoint dtype")
    out = {}
    for n in names:
        own = tensors[n].dtype
        want = (planned or {}).get(n) or (NAMES[to] if own in CONVERTS else own)
        out[n] = -1 if to < 0 or want == own else VALUE[want]
    return out


def _check_rules(rules: list[Any] | tuple[Any, ...]) -> None:
    """Each rule a (regex, PartitionSpec or Sharding) pair: a single rule passed bare,
    (".*", P()), would be taken for two rules of one and three characters."""
    for k, r in enumerate(rules):
        ok = isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], (str, re.Pattern))
        if not ok:
            raise TypeError(f"shardings rule {k}: expected a (regex, PartitionSpec) pair, got "
                            f"{r!r} (a single rule goes in a list: [(regex, spec)])")


def boxes(name: str, shape: tuple[int, ...], sharding: Any, index: dict[Any, int],
          seen: dict[Any, list[tuple[Any, Box]]] | None = None) -> list[tuple[Any, Box]]:
    """(device, box) of every addressable device of the sharding, in the mesh's order. seen:
    the boxes of (sharding, shape) pairs met before (an MoE checkpoint has 18,000 tensors of a
    few shapes), taken from there under this name."""
    key = (sharding, shape)
    if seen is not None and key in seen:
        return [(dev, (name,) + b[1:]) for dev, b in seen[key]]
    out = _boxes(name, shape, sharding, index)
    if seen is not None:
        seen[key] = out
    return out


def _boxes(name: str, shape: tuple[int, ...], sharding: Any,
           index: dict[Any, int]) -> list[tuple[Any, Box]]:
    """boxes(), worked out."""
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


def local_devices(mesh: Any) -> dict[Any, int]:
    """This process's devices of the mesh, in the mesh's order: mesh device index i."""
    import jax
    if not isinstance(getattr(mesh, "devices", None), np.ndarray):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    return {d: i for i, d in enumerate(local)}


def axes(entry: Any) -> tuple[str, ...]:
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


def read_sharding(s: Any, shape: tuple[int, ...]) -> Any:
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
    used = {a for e in spec for a in axes(e)}
    spans = tuple(a for a in _spanning_axes(mesh) if a not in used)
    if not spans:
        return s
    extra = int(np.prod([mesh.shape[a] for a in spans]))
    for k, n in enumerate(shape):
        parts = int(np.prod([mesh.shape[a] for a in axes(spec[k])]))
        if n % (parts * extra) == 0:
            spec[k] = axes(spec[k]) + spans
            return NamedSharding(mesh, PartitionSpec(*spec),  # type: ignore[no-untyped-call]
                                 memory_kind=s.memory_kind)
    return s


def items(ck: Checkpoint, mesh: Any, shardings: ShardingSpec, config: ConfigSource | None,
          dtype: Any, index: dict[Any, int], cooperative: bool = False
          ) -> tuple[dict[str, Any], dict[str, Any], list[Item], dict[str, int]]:
    """The target sharding of every tensor, the one it is read with (the same unless
    cooperative), the boxes of this process's devices, in checkpoint order, and each tensor's
    target (targets). dtype may be such targets already (load_into's Targets)."""
    if isinstance(dtype, Targets):
        specs, to = _shardings(ck, mesh, shardings, config, None)[0], dict(dtype)
    else:
        specs, to = _shardings(ck, mesh, shardings, config, dtype)
    tensors = ck._by_name()
    _as_f32(tensors, to)
    order = {t.name: k for k, t in enumerate(ck.tensors)}
    reads = ({n: read_sharding(sp, tensors[n].shape) for n, sp in specs.items()} if cooperative
             else specs)
    seen: dict[Any, list[tuple[Any, Box]]] = {}
    return specs, reads, [(tensors[n], boxes(n, tensors[n].shape, reads[n], index, seen))
                          for n in sorted(specs, key=order.__getitem__)], to


def _as_f32(tensors: Mapping[str, Tensor], to: dict[str, int]) -> None:
    """Without jax_enable_x64 JAX holds F64 as F32: the C core converts a kept F64 tensor to F32
    on the way (round to nearest even, as JAX's own conversion), so that the buffers hold half
    the bytes and a CPU device adopts them instead of JAX copying each one to narrow it (host
    memory beyond the staging budget: 384 MiB for 256 MiB of F64 at 16 MiB)."""
    from jax.dtypes import canonicalize_dtype as canonical
    if np.dtype(canonical(np.float64)) == np.float64:   # x64 on
        return
    for n, v in to.items():
        if v < 0 and tensors[n].dtype == "F64":
            to[n] = VALUE["F32"]


def boxes_plan(ck: Checkpoint, its: list[Item], n_devices: int, to: Mapping[str, int],
               describe: bool = True) -> Plan:
    """The C planner's plan of every box of `its` (sl_plan_build_boxes), each to its tensor's
    target: it checks them all. describe: as Plan.from_boxes."""
    return Plan.from_boxes(ck, [b for _, bs in its for _, b in bs], n_devices, targets=to,
                           describe=describe)
