"""Boxes that arrive in parts: a box larger than a group (on devices that copy: GPUs, TPUs)
goes through the slabs a band of rows at a time (or of a row's first elements, where one row
does not fit: _groups.band), and each device writes its parts into one buffer of its own, in
place (donated), so that host memory stays within the staging budget and the device holds the
box and one part at most.

The buffers are of an unsigned integer type of the tensor's width: XLA's CPU backend has no
bf16 arithmetic and runs a bf16 dynamic_update_slice as f32 over the whole buffer (a full copy
per part, and a NaN's payload may change); integers move bytes as they are. A finished box is
bitcast to its dtype (donated too). One call writes a part of every device that gets a part of
that shape at that place: a shard_map over those devices, compiled once per shape for all of them
(a single-device function is compiled for each device: 0.05-0.18 s each on JAX's CPU devices)."""
from __future__ import annotations

import contextlib
import functools
from typing import Any

import numpy as np

from ._shardings import Box

# (no uint64: without jax_enable_x64 JAX makes a uint64 array uint32, which would cut an F64 part
# in half; F64 is native arithmetic on every backend, moved as it is)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
Part = tuple[Any, Box, Box, Any, Any]  # device, its box, the whole box, array on device, dtype


def view(dtype: Any) -> Any:
    """The dtype a part travels and is assembled in: an unsigned integer of the same width for a
    floating type of 1, 2 or 4 bytes (integers, bools and F64 move unchanged)."""
    dt = np.dtype(dtype)
    if dt.kind in "biu" or dt.itemsize not in _UINT:
        return dt
    return np.dtype(_UINT[dt.itemsize])


def _own_mesh(mesh: Any) -> Any:
    """The context in which the writes run: their own mesh as the context mesh. Under a caller's
    jax.set_mesh (MaxText and tpu-inference run under one) shard_map refuses a mesh other than
    the context's ("The context mesh ... should match the mesh passed to shard_map")."""
    import jax
    set_mesh = getattr(jax, "set_mesh", None)  # jax >= 0.7; before it, no context mesh to clash
    return set_mesh(mesh) if set_mesh is not None else contextlib.nullcontext()


@functools.lru_cache(maxsize=64)
def _fns(devs: tuple[Any, ...]) -> tuple[Any, Any, Any, Any]:
    """For a set of devices: the sharding of their buffers side by side (box k of device k at
    rows k*b0...) and the jitted writes of a part into them: the first (into zeros), a middle
    one and the last (then bitcast to the tensor's dtype), the latter two donating the buffer.
    Zeros and the bitcast are fused in so that a box shape costs three compiles at most. Call
    them inside _own_mesh(sharding.mesh)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(devs, dtype=object), ("d",))
    rows, one = PartitionSpec("d"), PartitionSpec()  # type: ignore[no-untyped-call]

    def each(f: Any, *specs: Any) -> Any:  # f on each device's own rows
        return jax.shard_map(f, mesh=mesh, in_specs=specs, out_specs=rows)

    def write(b: Any, x: Any, at: Any) -> Any:  # at: the part's offset in the box, per dimension
        return lax.dynamic_update_slice(b, x, tuple(at[j] for j in range(b.ndim)))

    def first(part: Any, shape: tuple[int, ...]) -> Any:
        return each(lambda x: write(jnp.zeros(shape, x.dtype), x, [0] * len(shape)), rows)(part)

    def middle(buf: Any, part: Any, at: Any) -> Any:
        return each(write, rows, rows, one)(buf, part, at)

    def last(buf: Any, part: Any, at: Any, dtype: Any) -> Any:
        return each(lambda b, x, a: lax.bitcast_convert_type(write(b, x, a), dtype),
                    rows, rows, one)(buf, part, at)
    return (NamedSharding(mesh, rows),
            jax.jit(first, static_argnums=1),
            jax.jit(middle, donate_argnums=0),
            jax.jit(last, static_argnums=3, donate_argnums=0))


class Parts:
    """The buffers of the boxes being assembled: (tensor name, mesh device index) -> device
    buffer. Its parts come in row-major order: the first is at the box's origin, the last ends
    at its far corner."""

    def __init__(self) -> None:
        self.bufs: dict[tuple[str, int], Any] = {}
        self.count = {"parts": 0, "assembled_boxes": 0}

    def add(self, parts: list[Part]) -> list[tuple[Any, str, Any]]:
        """Writes a group's parts into their boxes' buffers: (device, tensor name, array) of each
        box now complete, in its tensor's dtype. The parts of a call are those of one tensor at
        the same place in boxes of the same shape."""
        calls: dict[tuple[Any, ...], list[Part]] = {}
        for p in parts:
            _, box, whole, _, _ = p
            at = tuple(a - w for a, w in zip(box[2], whole[2]))
            calls.setdefault((box[0], at, box[3], whole[3]), []).append(p)
        done = []
        for (name, at, size, shape), ps in calls.items():
            done += self._write(name, at, size, shape, ps)
        self.count["parts"] += len(parts)
        return done

    def _write(self, name: str, at: tuple[int, ...], size: tuple[int, ...],
               shape: tuple[int, ...], ps: list[Part]) -> list[tuple[Any, str, Any]]:
        import jax
        devs = tuple(p[0] for p in ps)
        sharding, first, middle, last = _fns(devs)
        keys = [(name, p[2][1]) for p in ps]
        dtype = ps[0][4]  # the tensor's dtype
        final = all(a + n == m for a, n, m in zip(at, size, shape))  # it ends at the far corner
        # a box in parts has two at least (groups cut it only when it is larger than a band), so
        # the first part is never the last: the last one's bitcast gives every box its dtype
        assert any(at) or not final, (name, shape, size)
        part = jax.make_array_from_single_device_arrays(
            (len(devs) * size[0],) + size[1:], sharding, [p[3] for p in ps])
        with _own_mesh(sharding.mesh):
            if not any(at):
                buf = first(part, shape)
            else:
                buf = jax.make_array_from_single_device_arrays(
                    (len(devs) * shape[0],) + shape[1:], sharding, [self.bufs.pop(k) for k in keys])
                offsets = np.array(at, np.int32)
                buf = last(buf, part, offsets, dtype) if final else middle(buf, part, offsets)
        if not final:
            by_dev = {s.device: s.data for s in buf.addressable_shards}
            for k, dev in zip(keys, devs):
                self.bufs[k] = by_dev[dev]
            return []
        by_dev = {s.device: s.data for s in buf.addressable_shards}
        self.count["assembled_boxes"] += len(devs)
        return [(dev, name, by_dev[dev]) for dev in devs]

    def arrays(self) -> list[Any]:
        """The buffers still being assembled (to wait for before a slab is unmapped)."""
        return list(self.bufs.values())
