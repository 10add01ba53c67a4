"""shardload.jax.load against NumPy on random cases: random tensors (0-3 dimensions, eight
dtypes), shardings over random meshes (1-3 axes, an axis on any dimension, two on one), budgets,
I/O modes and threads, devices that adopt or copy the buffers, dtype targets, cooperative reads
and memory kinds. Every case is a sharding JAX accepts; every addressable shard must equal NumPy
slicing, bit for bit, in its memory kind, and on devices that copy no buffer may exceed the group
bound. Cases are seeded, so a failure names its seed: SHARDLOAD_RANDOM_CASES=N runs N of them
(default 150, about 20 s). Such runs found three defects that the hand-written cases missed
(SL_E_DUPLICATE from two bands of one tensor in a group; a deleted array from gather; a row
larger than a group through a fresh host buffer)."""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
if jax.device_count() < 8:
    pytest.skip("JAX was started with fewer than 8 devices (XLA_FLAGS set too late)",
                allow_module_level=True)

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from sl_fixtures import devices_copy  # noqa: E402  (puts tests/ on the path, for the oracle)
import oracle_shards as oracle  # noqa: E402
import shardload.jax as sj  # noqa: E402
import shardload.jax._shardings as jsh  # noqa: E402

CASES = int(os.environ.get("SHARDLOAD_RANDOM_CASES", "150"))
RAW = {"BF16": np.uint16, "F8_E4M3": np.uint8, "F16": np.float16, "F32": np.float32,
       "F64": np.float64, "I8": np.int8, "I32": np.int32, "U8": np.uint8}
FLOATS = ["BF16", "F16", "F32"]  # the ones a dtype target converts
TARGETS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def _meshes() -> list[Mesh]:
    d = np.array(jax.devices()[:8])
    return [Mesh(d, ("m",)), Mesh(d.reshape(2, 4), ("data", "model")),
            Mesh(d.reshape(4, 2), ("data", "model")), Mesh(d.reshape(2, 2, 2), ("a", "b", "c")),
            Mesh(d[:4], ("m",)), Mesh(d.reshape(1, 8), ("data", "model"))]


def _values(rng: np.random.Generator, dt: str, shape: tuple[int, ...]) -> np.ndarray:
    if dt == "BF16":
        return oracle.f32_to_bf16(rng.standard_normal(shape).astype(np.float32))
    if dt in ("F16", "F32", "F64"):
        return rng.standard_normal(shape).astype(RAW[dt])
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(RAW[dt]).itemsize
    return rng.integers(0, 256, size=n, dtype=np.uint8).view(RAW[dt]).reshape(shape)


def _tensor(rng: np.random.Generator, mesh: Mesh, dtypes: list[str]
            ) -> tuple[str, np.ndarray, P]:
    """A random tensor and a PartitionSpec JAX accepts for it: each dimension a multiple of the
    mesh axes it is split over; now and then one of a few MiB, larger than a group."""
    axes = list(mesh.axis_names)
    rng.shuffle(axes)  # type: ignore[arg-type]
    ndim = int(rng.integers(0, 4))
    spec: list[Any] = []
    ways, mult = [], []
    for _ in range(ndim):
        pick = int(rng.integers(0, 4))
        entry: Any = None
        if pick == 3 and len(axes) >= 2:
            entry = (axes.pop(), axes.pop())
        elif pick and axes:
            entry = axes.pop()
        spec.append(entry)
        names = entry if isinstance(entry, tuple) else (entry,) if entry else ()
        ways.append(int(np.prod([mesh.shape[a] for a in names])))
        mult.append(int(rng.choice([1, 2, 3, 5, 8, 16, 64, 256])))
    dt = str(rng.choice(dtypes))
    width = np.dtype(RAW[dt]).itemsize

    def nbytes() -> int:
        return int(np.prod([w * m for w, m in zip(ways, mult)])) * width
    if ndim and rng.random() < 0.3:
        while nbytes() < (1 << 20):
            mult[int(rng.integers(0, ndim))] *= 4
    while nbytes() > (6 << 20):
        k = int(np.argmax(mult))
        mult[k] = max(1, mult[k] // 2)
    shape = [w * m for w, m in zip(ways, mult)]
    return dt, _values(rng, dt, tuple(shape)), P(*spec)


def _expected(a: np.ndarray, dt: str, target: str | None, index: Any) -> np.ndarray:
    want = a
    if target is not None and dt in FLOATS:
        want = oracle.convert(a, dt, TARGETS[target])
    e = np.array(want[index])
    return e.astype(np.float32) if e.dtype == np.float64 else e  # JAX without x64


@pytest.mark.parametrize("seed", range(CASES))
def test_random_case(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    mesh = _meshes()[int(rng.integers(0, 6))]
    floats = rng.random() < 0.5
    dtypes = FLOATS if floats else list(RAW)
    tensors = {f"t{i}.weight": _tensor(rng, mesh, dtypes) for i in range(int(rng.integers(1, 6)))}
    oracle.write_checkpoint(str(tmp_path), {k: (dt, a) for k, (dt, a, _) in tensors.items()},
                            int(rng.integers(1, 3)), random.Random(seed))
    staging = int(rng.choice([2 << 20, 3 << 20, 8 << 20]))
    copying = bool(rng.random() < 0.6)
    target = str(rng.choice(list(TARGETS))) if floats and rng.random() < 0.4 else None
    cooperative = bool(rng.random() < 0.3)
    io, threads = str(rng.choice(["auto", "direct", "buffered"])), int(rng.choice([0, 1, 3]))
    kinds = {m.kind for m in mesh.devices.flat[0].addressable_memories()}
    kind = "pinned_host" if "pinned_host" in kinds and rng.random() < 0.3 else None
    if copying:
        devices_copy(monkeypatch)
    if cooperative:  # some axes taken to span processes: this process reads parts and gathers
        span = tuple(a for a in mesh.axis_names if rng.random() < 0.5)
        monkeypatch.setattr(jsh, "_spanning_axes", lambda m: span)
    case = dict(seed=seed, mesh=dict(mesh.shape), staging=staging, io=io, threads=threads,
                copying=copying,
                target=target, cooperative=cooperative, kind=kind,
                tensors={k: (dt, a.shape, s) for k, (dt, a, s) in tensors.items()})
    stats: dict = {}
    arrays = sj.load(tmp_path, mesh, {k: NamedSharding(mesh, s, memory_kind=kind)
                                      for k, (_, _, s) in tensors.items()},
                     dtype=target, staging=staging, io=io, threads=threads, stats=stats,
                     dist="cooperative" if cooperative else "independent")
    assert set(arrays) == set(tensors), case
    for name, (dt, a, _) in tensors.items():
        got = arrays[name]
        assert got.shape == a.shape, (name, case)
        for s in got.addressable_shards:
            g, e = np.asarray(s.data), _expected(a, dt, target, s.index)
            assert g.shape == e.shape and g.tobytes() == e.tobytes(), (name, s.device, case)
            assert s.data.sharding.memory_kind == (kind or "device"), (name, case)
    if copying:
        assert stats["oversize_groups"] == 0, (stats, case)
