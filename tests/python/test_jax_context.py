"""shardload.jax as MaxText-style code calls it: under a caller's jax.set_mesh (the band path's own
shard_map included), with what jax.eval_shape gives there (shardings over an AbstractMesh), with
rule lists whose spec is None; PartitionSpec.UNCONSTRAINED refused; and, on CPU devices that adopt
the buffers, int64 boxes (narrowed by JAX without x64) kept out of the slabs the devices adopt."""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
if jax.device_count() < 8:
    pytest.skip("JAX was started with fewer than 8 devices (XLA_FLAGS set too late)",
                allow_module_level=True)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from sl_fixtures import devices_copy  # noqa: E402  (puts tests/ on the path)
import shardload.jax as sj  # noqa: E402
import shardload.jax._staging as jst  # noqa: E402

needs_set_mesh = pytest.mark.skipif(not hasattr(jax, "set_mesh"), reason="no jax.set_mesh")


def mesh_2d(devices: list | None = None) -> Mesh:
    return Mesh(np.array(devices or jax.devices()[:8]).reshape(2, 4), ("data", "model"))


def exact(arrays: dict, want: dict) -> None:
    """Every addressable shard is the NumPy slice of its tensor at its index, bit for bit."""
    assert set(arrays) == set(want)
    for name, a in arrays.items():
        assert a.shape == want[name].shape, name
        for s in a.addressable_shards:
            got, exp = np.asarray(s.data), np.ascontiguousarray(want[name][s.index])
            assert got.dtype == exp.dtype and got.tobytes() == exp.tobytes(), (name, s.device)


@needs_set_mesh
def test_bands_under_a_context_mesh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On devices that copy (GPUs, TPUs; here CPU devices made to), a box over the group bound
    is written on its devices in parts by a shard_map over a mesh of its own, which refused to
    run under the caller's jax.set_mesh ("The context mesh ... should match the mesh passed to
    shard_map")."""
    rng = np.random.default_rng(3)
    want = {"down": rng.standard_normal((1024, 1024)).astype(np.float32),  # 1 MiB boxes
            "norm": rng.standard_normal(1024).astype(np.float32)}
    save_file(want, str(tmp_path / "model.safetensors"))
    devices_copy(monkeypatch)
    mesh = mesh_2d()
    rules = [("down", P(None, "model")), (".*", P())]
    for context in (mesh, mesh_2d(jax.devices()[:8][::-1])):  # its own mesh, another one
        stats: dict = {}
        with jax.set_mesh(context):
            arrays = sj.load(tmp_path, mesh, rules, staging=2 << 20, stats=stats)
        assert stats["parts"] > 0, stats
        exact(arrays, want)
        assert arrays["down"].sharding == NamedSharding(mesh, P(None, "model"))


@needs_set_mesh
def test_load_into_abstract_shardings(tmp_path: Path) -> None:
    """jax.eval_shape under jax.set_mesh with Explicit axes gives ShapeDtypeStructs whose
    NamedSharding is over an AbstractMesh: load_into takes them on the mesh that is set, and
    outside it says which tensor and why (it raised JAX's "device_set is not implemented for
    AbstractMesh")."""
    from jax.sharding import AxisType
    want = {"w": np.arange(64 * 32, dtype=np.float32).reshape(64, 32)}
    save_file(want, str(tmp_path / "model.safetensors"))
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        abstract = jax.eval_shape(
            lambda: {"w": jnp.zeros((64, 32), jnp.float32, out_sharding=P("model", "data"))})
        arrays = sj.load_into(tmp_path, abstract)
    exact(arrays, want)
    assert arrays["w"].sharding.mesh == mesh and arrays["w"].sharding.spec == P("model", "data")
    with pytest.raises(ValueError, match=r"tensor 'w': its sharding is over an abstract mesh"):
        sj.load_into(tmp_path, abstract)


def test_unconstrained_is_refused(tmp_path: Path) -> None:
    """UNCONSTRAINED leaves a dimension to jit's compiler: JAX laid the array out replicated
    along it and its sharding then failed every later device_put and jit; refused, by name."""
    save_file({"w": np.ones((8, 8), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"tensor 'w': PartitionSpec.UNCONSTRAINED"):
        sj.load(tmp_path, mesh_2d(), {"w": P(P.UNCONSTRAINED, "model")})


def test_rule_spec_none_is_replicated(tmp_path: Path) -> None:
    """A rule (regex, None) matches and replicates, as P() (it was reported as no match)."""
    want = {"w": np.arange(64, dtype=np.float32).reshape(8, 8), "b": np.ones(8, np.float32)}
    save_file(want, str(tmp_path / "model.safetensors"))
    arrays = sj.load(tmp_path, mesh_2d(), [("w", P("model")), (".*", None)])
    exact(arrays, want)
    assert arrays["b"].is_fully_replicated and not arrays["w"].is_fully_replicated


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="int64 is held as it is with x64")
def test_narrowed_boxes_stay_out_of_adopted_slabs(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Without x64 JAX copies an int64 box into int32, so a load with one goes through slabs;
    CPU devices adopt the float boxes of a slab, which is then held for as long as those arrays
    live, with every int64 box loaded into it: a 640 MB checkpoint of 4 MiB F32 and I64 tensors
    held 163 MiB beyond its arrays at 64 MiB of staging (3 MiB now). The int64 boxes get buffers
    of their own, which JAX's copy leaves free."""
    want = {}
    for i in range(6):
        want[f"l{i}.w"] = np.full((256, 512), i, np.float32)  # 512 KiB
        want[f"l{i}.ids"] = np.arange(256 * 256, dtype=np.int64) * (i + 1)  # 512 KiB
    save_file(want, str(tmp_path / "model.safetensors"))
    taken: list[tuple[str, int, list]] = []  # (dtype, address, the slabs at that moment)
    take = jst.Staging.take

    def spy(self: jst.Staging, slot: int | None, params: list) -> list:
        out = take(self, slot, params)
        slabs = [s for s in self.slabs if s is not None]
        taken.extend((p.dtype, b.ctypes.data, slabs) for p, b in zip(params, out))
        return out
    monkeypatch.setattr(jst.Staging, "take", spy)
    stats: dict = {}
    arrays = sj.load(tmp_path, mesh_2d(), [(r"\.w$", P("model")), ("ids", P("model"))],
                     staging=4 << 20, stats=stats)
    for k, v in want.items():
        assert np.array_equal(np.asarray(arrays[k]), v), k
    assert stats["retired"] > 0 and stats["adopted_bytes"] > 0, stats  # slabs the devices took

    def in_slab(addr: int, slabs: list) -> bool:
        return any(s.ctypes.data <= addr < s.ctypes.data + s.nbytes for s in slabs)
    assert any(in_slab(a, s) for dt, a, s in taken if dt == "F32")
    assert not any(in_slab(a, s) for dt, a, s in taken if dt == "I64")
