"""shardload.jax on JAX's CPU backend with 8 virtual devices: every addressable shard equals NumPy
slicing of the checkpoint (the oracle's own writer and rounding), for 1-D and 2-D meshes,
replicated / row / column / both-dims shardings, the four built-in architectures, user rules;
buffers never reused under aliasing; host memory; the seed's per-device figure; errors."""
from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
if jax.device_count() < 8:
    pytest.skip("JAX was started with fewer than 8 devices (XLA_FLAGS set too late)",
                allow_module_level=True)

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from sl_fixtures import CONFIGS, devices_copy  # noqa: E402  (puts tests/ on the path)
import oracle_shards as oracle  # noqa: E402
import shardload  # noqa: E402
import shardload.jax as sj  # noqa: E402
import shardload.jax._groups as jg  # noqa: E402
import shardload.jax._loader as jl  # noqa: E402
import shardload.jax._parts as jp  # noqa: E402
import shardload.jax._shardings as jsh  # noqa: E402
import shardload.jax._staging as jst  # noqa: E402

# The oracle's architectures with sizes every mesh axis here divides (JAX wants even splits).
ARCHS = {
    "llama": dict(oracle.ARCHS["llama"], hidden_size=64, intermediate_size=128, vocab_size=320,
                  num_hidden_layers=2),
    "mistral": dict(oracle.ARCHS["mistral"], num_hidden_layers=2, vocab_size=256),
    "qwen2": dict(oracle.ARCHS["qwen2"], hidden_size=64, intermediate_size=96, vocab_size=192,
                  num_hidden_layers=2),
    "qwen3": dict(oracle.ARCHS["qwen3"], num_hidden_layers=2, vocab_size=128, head_dim=16),
}


def make_ckpt(tmp: Path, arch: str, src_dt: str = "BF16") -> tuple[Path, dict]:
    cfg = dict(ARCHS[arch], torch_dtype="bfloat16")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps(cfg))
    ck = oracle.checkpoint_tensors(arch, cfg, src_dt, np.random.default_rng(7))
    oracle.write_checkpoint(str(tmp), ck, 3, random.Random(3))
    return tmp, {k: v[1] for k, v in ck.items()}


def mesh_2d() -> Mesh:
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


def mesh_1d() -> Mesh:
    return Mesh(np.array(jax.devices()[:8]), ("model",))


def check_shards(arrays: dict, want: dict, dst: str | None = None, src: str = "BF16") -> None:
    """Every addressable shard is the NumPy slice of the checkpoint tensor at its index."""
    for name, a in arrays.items():
        w = want[name]
        if dst is not None and dst != src:
            w = oracle.convert(w, src, dst)
        assert a.shape == w.shape, name
        for s in a.addressable_shards:
            got = np.asarray(s.data)
            exp = w[s.index]
            assert got.shape == exp.shape, (name, s.device)
            assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(exp).view(np.uint8)), \
                (name, s.device, s.index)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_default_rule_every_arch(tmp_path: Path, arch: str) -> None:
    path, want = make_ckpt(tmp_path / arch, arch)
    arrays = sj.load(path, mesh_2d())
    skipped = {"model.layers.0.self_attn.rotary_emb.inv_freq"}
    if ARCHS[arch].get("tie_word_embeddings"):
        skipped.add("lm_head.weight")
    assert set(arrays) == set(want) - skipped
    check_shards(arrays, want)
    q = arrays["model.layers.0.self_attn.q_proj.weight"]
    o = arrays["model.layers.0.self_attn.o_proj.weight"]
    n = arrays["model.norm.weight"]
    assert q.sharding.spec == P("model", None) and o.sharding.spec == P(None, "model")
    assert n.sharding.spec == P(None)
    assert {s.data.shape for s in q.addressable_shards} == {(q.shape[0] // 4, q.shape[1])}


@pytest.mark.parametrize("spec", [P(), P("model"), P(None, "model"), P("data", "model"),
                                  P("model", "data"), P(("data", "model"))],
                         ids=["replicated", "rows", "columns", "both", "both_swapped", "flat8"])
def test_shardings_2d_mesh(tmp_path: Path, spec: P) -> None:
    path, want = make_ckpt(tmp_path / "m", "llama")
    names = ["model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "lm_head.weight"]
    arrays = sj.load(path, mesh_2d(), {n: NamedSharding(mesh_2d(), spec) for n in names})
    assert set(arrays) == set(names)
    check_shards(arrays, want)


def test_one_d_mesh_rules_and_conversion(tmp_path: Path) -> None:
    path, want = make_ckpt(tmp_path / "q", "qwen2", "F32")
    rules = [(r"embed_tokens|lm_head", P("model", None)), (r"(o|down)_proj\.weight", P(None, "model")),
             (r"_proj\.weight$", P("model", None)), (r".*", P())]
    arrays = sj.load(path, mesh_1d(), rules, dtype="bf16", staging=2 << 20)
    assert set(arrays) == set(want)  # rules: every checkpoint tensor
    assert all(a.dtype == jax.numpy.bfloat16 for a in arrays.values())
    check_shards(arrays, want, "BF16", "F32")


def test_callable_sharding(tmp_path: Path) -> None:
    path, want = make_ckpt(tmp_path / "c", "qwen3")
    mesh = mesh_2d()

    def pick(name: str, shape: tuple, dtype: str) -> P:
        return P("data", "model") if len(shape) == 2 else P()
    arrays = sj.load(path, mesh, pick, dtype="f32")
    check_shards(arrays, want, "F32")


def _spy(monkeypatch: pytest.MonkeyPatch, name: str, record: list) -> None:
    """Wraps shardload.jax._loader's function `name`, appending (args, result) of each call to record."""
    fn = getattr(jl, name)

    def call(*args: object) -> object:
        out = fn(*args)
        record.append((args, out))
        return out
    monkeypatch.setattr(jl, name, call)


def make_big_ckpt(tmp: Path) -> tuple[Path, dict]:
    """A llama of about 9.8 MB: several groups under a 2 MiB staging budget, and embeddings
    (2 MiB each) larger than a group."""
    cfg = dict(ARCHS["llama"], hidden_size=256, intermediate_size=512, vocab_size=4096,
               torch_dtype="bfloat16")
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(cfg))
    ck = oracle.checkpoint_tensors("llama", cfg, "BF16", np.random.default_rng(5))
    oracle.write_checkpoint(str(tmp), ck, 2, random.Random(5))
    return tmp, {k: v[1] for k, v in ck.items()}


def _group_bytes(group: list) -> int:
    return sum(int(np.prod(b[3])) * 2 for _, bs in group for _, b in bs)  # bf16 boxes


def test_buffers_never_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded groups (as on devices that copy) and a tiny budget: dozens of groups, two in
    flight, through slabs. A CPU device_put adopts its buffer, so a reused slab would change
    arrays made earlier: each slab is retired once adopted, and the arrays are all exact."""
    path, want = make_big_ckpt(tmp_path / "r")
    monkeypatch.setattr(jl, "adopts", lambda devices: False)
    fills: list = []
    _spy(monkeypatch, "fill_group", fills)
    stats: dict = {}
    arrays = sj.load(path, mesh_1d(), staging=2 << 20, stats=stats)
    assert len(fills) >= 5
    check_shards(arrays, want)
    # each slab was adopted by the CPU devices (64-byte aligned), so none was loaded into again
    assert stats["reused"] == 0 and stats["retired"] == stats["slabs"] >= 5, stats
    # the 1-D norms' 8 copies shared one slab buffer: the devices after the first that adopted
    # it got copies of their own, so that no two shards are one memory
    shared = sum(a.nbytes * 7 for a in arrays.values() if a.sharding.is_fully_replicated)
    assert shared and stats["copied_bytes"] == shared and stats["staging"] == "plain", stats
    addresses = [s.data.unsafe_buffer_pointer() for a in arrays.values()
                 for s in a.addressable_shards]
    assert len(set(addresses)) == len(addresses)


def test_cpu_devices_adopt_the_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU devices every box's 64-byte aligned buffer becomes its device array (device_put
    copies none of them), which is why groups there are not bounded by the staging budget."""
    from jax._src.array import ArrayImpl
    path, want = make_ckpt(tmp_path / "a", "llama")
    assert jst.adopts(list(mesh_1d().devices.flat))
    puts: list = []
    _spy(monkeypatch, "put_group", puts)
    looked: list = []  # each look keeps an array object per shard of the tensor in JAX
    inner = ArrayImpl.addressable_data
    monkeypatch.setattr(ArrayImpl, "addressable_data",
                        lambda self, i: looked.append(self.dtype) or inner(self, i))
    stats: dict = {}
    arrays = sj.load(path, mesh_1d(), staging=2 << 20, stats=stats)
    monkeypatch.setattr(ArrayImpl, "addressable_data", inner)
    assert len(looked) == len(set(looked)) == 1, looked  # fresh buffers: once per dtype (bf16)
    assert len(puts) == 1 and puts[0][1][1] == 0  # one group, 0 bytes copied (the norms)
    assert stats["copied_bytes"] == 0 and stats["adopted_bytes"] > 0, stats
    check_shards(arrays, want)
    assert {s.data.unsafe_buffer_pointer() % 64 for a in arrays.values()
            for s in a.addressable_shards if s.data.nbytes} == {0}


def test_copied_buffers_bound_the_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Buffers JAX copies (here: 16 bytes off its alignment) are host memory: after the first
    group that copies, groups shrink to the staging bound, and no more than two groups' buffers
    are alive at once (the one being loaded, the one handed to JAX)."""
    import weakref
    path, want = make_big_ckpt(tmp_path / "c")
    live: list = []

    def misaligned(shape: tuple, dtype: object, nbytes: int) -> np.ndarray:
        raw = np.empty(nbytes + 128, np.uint8)
        off = -raw.ctypes.data % 64 + 16
        buf = raw[off:off + nbytes].view(dtype).reshape(shape)
        live.append((weakref.ref(raw), nbytes))
        return buf
    monkeypatch.setattr(jst, "host_buffer", misaligned)
    monkeypatch.setattr(jst, "slab", lambda nbytes: misaligned((nbytes,), np.uint8, nbytes))
    monkeypatch.setattr(jl, "adopts", lambda devices: True)  # as if the probe had said so
    monkeypatch.setattr(jl, "ADOPTED_GROUP", 1 << 20)
    fills: list = []
    peak = [0]
    fill = jl.fill_group

    def counting_fill(*args: object) -> object:
        out = fill(*args)
        peak[0] = max(peak[0], sum(n for r, n in live if r() is not None))
        fills.append(args[1])
        return out
    monkeypatch.setattr(jl, "fill_group", counting_fill)
    staging = 2 << 20
    bound = (staging - (1 << 20)) // 2  # what is left after the engine's staging, halved
    arrays = sj.load(path, mesh_1d(), staging=staging)
    check_shards(arrays, want)
    sizes = [_group_bytes(g) for g in fills]
    assert sizes[0] > bound  # adopted until the first put showed otherwise
    assert all(n <= bound for n in sizes[2:]), sizes  # the 2 MiB lm_head too, in pieces
    assert sum("lm_head.weight" in [t.name for t, _ in g] for g in fills) >= 2
    assert len(fills) > 4
    # two groups' buffers at most: fresh ones before the fallback, slabs of the bound after
    pairs = [a + b for a, b in zip(sizes, sizes[1:])]
    assert peak[0] <= max(pairs[0], sizes[1] + bound, 2 * bound), (peak[0], sizes)


def _as_copying_devices(monkeypatch: pytest.MonkeyPatch) -> list:
    """The CPU devices made to copy every put; returns (buffer address, array, bytes) of every
    box handed to JAX (the array: the box's own, or its whole tensor's where put_tensor made
    it; the bytes: one device's copy), and checks, whenever a group is about to be loaded into
    a slab again, that load waited for every array put from that slab (a CPU copy is often done
    by then anyway: is_ready() alone would not notice a missing wait)."""
    devices_copy(monkeypatch)
    put: list = []  # the arrays stay alive, so their ids stay theirs
    waited: set[int] = set()
    put_group, put_tensor, take, wait = jl.put_group, jl.put_tensor, jst.Staging.take, jl.wait

    def spy_put(bufs: list, targets: list) -> tuple:
        arrays, copied, adopted = put_group(bufs, targets)
        put.extend((buf.ctypes.data, a, buf.nbytes) for buf, a in zip(bufs, arrays))
        return arrays, copied, adopted

    def spy_put_tensor(shape: tuple, sharding: object, boxes: list, cache: object,
                       host: bool, seen: object) -> tuple:
        a, copied, adopted = put_tensor(shape, sharding, boxes, cache, host, seen)
        put.extend((buf.ctypes.data, a, buf.nbytes) for _, buf in boxes)
        return a, copied, adopted

    def spy_wait(arrays: list) -> None:
        waited.update(id(a) for a in arrays)
        wait(arrays)

    def spy_take(self: object, slot: object, params: list) -> list:
        slab = self.slabs[slot] if slot is not None else None  # type: ignore[attr-defined]
        if slab is not None:
            lo, hi = slab.ctypes.data, slab.ctypes.data + slab.nbytes
            assert all(id(a) in waited for addr, a, _ in list(put) if lo <= addr < hi)
        return take(self, slot, params)  # type: ignore[arg-type]
    monkeypatch.setattr(jl, "put_group", spy_put)
    monkeypatch.setattr(jl, "put_tensor", spy_put_tensor)
    monkeypatch.setattr(jl, "wait", spy_wait)
    monkeypatch.setattr(jst.Staging, "take", spy_take)
    return put


class FakeClient:
    """A JAX client whose dma_map works (as a GPU's, cudaHostRegister): records the calls."""

    def __init__(self, unmap_error: Exception | None = None) -> None:
        self.maps: list[tuple[int, int]] = []
        self.unmaps: list[int] = []
        self.unmap_error = unmap_error

    def dma_map(self, address: int, size: int) -> None:
        self.maps.append((address, size))

    def dma_unmap(self, address: int) -> None:
        self.unmaps.append(address)
        if self.unmap_error is not None:
            raise self.unmap_error


def test_copying_devices_reuse_two_slabs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On devices that copy, the groups go through two slabs, reused once the arrays put from
    them are ready; the CPU client refuses dma_map (UNIMPLEMENTED), so they are plain host
    memory, and the stats say so. Every shard is exact after the reuse."""
    path, want = make_big_ckpt(tmp_path / "s")
    put = _as_copying_devices(monkeypatch)
    stats: dict = {}
    arrays = sj.load(path, mesh_1d(), staging=2 << 20, stats=stats)
    check_shards(arrays, want)
    assert stats["staging"] == "plain" and "UNIMPLEMENTED" in stats["dma"], stats
    assert stats["slabs"] == 2 and stats["reused"] >= 5 and stats["retired"] == 0, stats
    assert stats["slab_bytes"] == 2 * ((2 << 20) - (1 << 20)) // 2 and stats["dma_mapped_bytes"] == 0
    assert stats["adopted_bytes"] == 0 and stats["copied_bytes"] == sum(n for _, _, n in put)
    assert stats["groups"] == stats["reused"] + stats["slabs"] + stats["oversize_groups"]


def test_f64_parts_without_x64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An F64 tensor in parts, JAX without jax_enable_x64: the parts are not moved as uint64 (JAX
    would make them uint32, half of each element); they arrive as F32, as a whole F64 box does."""
    from safetensors.numpy import save_file
    tmp_path.mkdir(exist_ok=True)
    w = np.arange(600 * 1024, dtype=np.float64).reshape(600, 1024) * 0.5
    save_file({"w.weight": w}, str(tmp_path / "model.safetensors"))
    mesh = mesh_1d()
    _as_copying_devices(monkeypatch)
    stats: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX's "float64 requested, float32 used"
        a = sj.load(tmp_path, mesh, {"w.weight": NamedSharding(mesh, P(None, "model"))},
                    staging=2 << 20, stats=stats)["w.weight"]
    assert not jax.config.jax_enable_x64 and stats["parts"] > 8
    assert a.dtype == np.float32 and np.array_equal(np.asarray(a), w.astype(np.float32))


def test_fp8_parts_bit_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """F8_E4M3 in parts (split along dimension 1, 2 MiB under a 512 KiB bound): every byte
    pattern, NaNs (0x7f, 0xff) included, arrives as it is in the file, in float8_e4m3fn."""
    import jax.numpy as jnp
    bits = np.random.default_rng(4).integers(0, 256, (1024, 2048), dtype=np.uint8)
    oracle.write_checkpoint(str(tmp_path), {"w.weight": ("F8_E4M3", bits)}, 1, random.Random(4))
    mesh = mesh_2d()
    _as_copying_devices(monkeypatch)
    stats: dict = {}
    a = sj.load(tmp_path, mesh, {"w.weight": NamedSharding(mesh, P(None, "model"))},
                staging=2 << 20, stats=stats)["w.weight"]
    assert stats["parts"] > 8 and a.dtype == jnp.float8_e4m3fn
    for sh in a.addressable_shards:
        assert np.array_equal(np.asarray(sh.data).view(np.uint8), bits[sh.index])


def test_device_memory_shards_are_not_read_back(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the devices' memory is their own (GPU, TPU: host_memory() false), every put is a
    copy and no shard is looked at: reading one shard makes JAX keep an array object for each
    shard of the tensor (195 MiB for an MoE checkpoint's 150,000). Shards exact, every byte
    counted as copied."""
    from jax._src.array import ArrayImpl
    path, want = make_big_ckpt(tmp_path / "g")
    put = _as_copying_devices(monkeypatch)
    monkeypatch.setattr(jl, "host_memory", lambda devices: False)
    looked: list = []
    inner = ArrayImpl.addressable_data
    monkeypatch.setattr(ArrayImpl, "addressable_data",
                        lambda self, i: looked.append(i) or inner(self, i))
    stats: dict = {}
    arrays = sj.load(path, mesh_2d(), staging=2 << 20, stats=stats)
    assert not looked
    monkeypatch.undo()
    check_shards(arrays, want)
    assert stats["adopted_bytes"] == 0 and stats["copied_bytes"] == sum(n for _, _, n in put) > 0


def test_copies_of_a_box_share_a_slab_buffer(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """On devices that copy, the copies of a box (a sharding replicated over the data axis) are
    one buffer in the slab, put to each of its devices: the engine writes each box once, and a
    group holds twice the boxes. Every shard exact, each in memory of its own."""
    path, want = make_big_ckpt(tmp_path / "s")
    mesh = mesh_2d()
    spec = {n: NamedSharding(mesh, P("model") if len(w.shape) == 2 else P())
            for n, w in want.items() if "rotary" not in n}
    put = _as_copying_devices(monkeypatch)
    calls: list[list[int]] = []  # each put's buffer addresses (slabs are reused across groups)
    inner, inner_tensor = jl.put_group, jl.put_tensor

    def spy(bufs: list, targets: list) -> tuple:
        calls.append([b.ctypes.data for b in bufs])
        return inner(bufs, targets)

    def spy_tensor(shape: tuple, sharding: object, boxes: list, cache: object,
                   host: bool, seen: object) -> tuple:
        calls.append([b.ctypes.data for _, b in boxes])
        return inner_tensor(shape, sharding, boxes, cache, host, seen)
    monkeypatch.setattr(jl, "put_group", spy)
    monkeypatch.setattr(jl, "put_tensor", spy_tensor)
    stats: dict = {}
    arrays = sj.load(path, mesh, spec, staging=2 << 20, stats=stats)
    check_shards(arrays, {n: want[n] for n in spec})
    copies = {c.count(a) for c in calls for a in c}
    assert copies == {2, 8}, copies  # rows split over "model": 2 copies; 1-D replicated: 8
    assert stats["copied_bytes"] == sum(n for _, _, n in put)
    addresses = [s.data.unsafe_buffer_pointer() for a in arrays.values()
                 for s in a.addressable_shards]
    assert len(set(addresses)) == len(addresses)


def test_copying_devices_mixed_dtypes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint of mixed dtypes (F32 norms and gate weights among BF16 ones, as transformers
    writes DeepSeek's router) through the slabs of devices that copy: each array in its own
    dtype, every shard exact, F32 boxes of a slab at their alignment next to BF16 ones."""
    cfg = dict(ARCHS["llama"], hidden_size=256, intermediate_size=512, vocab_size=4096,
               torch_dtype="bfloat16")
    tmp = tmp_path / "m"
    tmp.mkdir()
    (tmp / "config.json").write_text(json.dumps(cfg))
    ck = oracle.checkpoint_tensors("llama", cfg, "BF16", np.random.default_rng(6))
    for name in [n for n in ck if "norm" in n or "gate_proj" in n]:
        ck[name] = ("F32", oracle.bf16_to_f32(ck[name][1]) * np.float32(1.5))
    oracle.write_checkpoint(str(tmp), ck, 2, random.Random(6))
    _as_copying_devices(monkeypatch)
    stats: dict = {}
    arrays = sj.load(tmp, mesh_1d(), staging=2 << 20, stats=stats)
    check_shards(arrays, {k: v[1] for k, v in ck.items()})
    assert stats["reused"] >= 3 and stats["adopted_bytes"] == 0, stats
    f32 = {k for k, (dt, _) in ck.items() if dt == "F32"} & set(arrays)
    assert f32 and all(arrays[k].dtype == np.float32 for k in f32)
    assert all(a.dtype != np.float32 for k, a in arrays.items() if k not in f32)


def test_fp8_dtypes_share_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An FP8 checkpoint (F8_E4M3 weights, F32 scales and BF16 norms alternating in checkpoint
    order) in its own dtypes: groups hold tensors of every dtype (on adopting CPU devices, one
    group for all, where one group per dtype run made 90 of these 164 tensors), and every shard is exact, also
    through the slabs of devices that copy."""
    cfg = dict(oracle.FP8_MORE[("llama-pt", "llama")], torch_dtype="bfloat16")
    tmp = tmp_path / "f"
    tmp.mkdir()
    (tmp / "config.json").write_text(json.dumps(cfg))
    ck = oracle.checkpoint_tensors("llama", cfg, "BF16", np.random.default_rng(8), "F32")
    oracle.write_checkpoint(str(tmp), ck, 2, random.Random(8))
    assert {dt for dt, _ in ck.values()} == {"F8_E4M3", "F32", "BF16"}
    want = {k: v[1] for k, v in ck.items() if "rotary_emb" not in k}
    rules = {k: P() for k in want}  # every device holds every tensor whole

    def exact(arrays: dict) -> None:
        assert set(arrays) == set(want)
        for k, a in arrays.items():
            assert {s.data.tobytes() for s in a.addressable_shards} == {want[k].tobytes()}, k
    stats: dict = {}
    arrays = sj.load(tmp, mesh_1d(), rules, stats=stats)
    exact(arrays)
    assert str(arrays["model.layers.0.mlp.up_proj.weight"].dtype) == "float8_e4m3fn"
    assert stats["groups"] == 1 and stats["copied_bytes"] == 0, stats
    _as_copying_devices(monkeypatch)
    arrays = sj.load(tmp, mesh_1d(), rules, staging=2 << 20, stats=stats)
    exact(arrays)
    bound = ((2 << 20) - (1 << 20)) // 2  # a group's room: half what the engine leaves
    assert stats["groups"] <= 2 * -(-stats["read_bytes"] * 8 // bound), stats  # 8 copies


def _fp8_ckpt(tmp: Path) -> tuple[Path, dict]:
    """A Llama FP8 checkpoint (F8_E4M3 weights, F32 scales, BF16 norms and embeddings) with its
    quantization_config: (path, name -> (dtype, array))."""
    cfg = dict(oracle.FP8_MORE[("llama-pt", "llama")], torch_dtype="bfloat16")
    tmp.mkdir()
    (tmp / "config.json").write_text(json.dumps(cfg))
    ck = oracle.checkpoint_tensors("llama", cfg, "BF16", np.random.default_rng(9), "F32")
    oracle.write_checkpoint(str(tmp), ck, 2, random.Random(9))
    return tmp, ck


def _exact(arrays: dict, ck: dict, to: str, kept: set[str]) -> None:
    """Each shard is the oracle's slice, the tensors in `kept` in their own dtype, the others
    converted to `to`."""
    from shardload._dtypes import numpy_dtype
    for name, a in arrays.items():
        dt, w = ck[name]
        if name not in kept:
            w, dt = oracle.convert(w, dt, to), to
        assert a.dtype == numpy_dtype(dt), (name, a.dtype, dt)
        for s in a.addressable_shards:
            assert np.asarray(s.data).tobytes() == np.ascontiguousarray(w[s.index]).tobytes(), name


@pytest.mark.parametrize("to", ["F32", "F16"])
def test_target_dtype_keeps_fp8_and_scales(tmp_path: Path, to: str) -> None:
    """load(dtype=...) of an FP8 checkpoint converts the float tensors and keeps what the C
    planner keeps: F8_E4M3 weights and their F32 scales (one target for every box was refused:
    "no conversion from F8_E4M3 to F32"), under the default rule and with rules given, in one C
    load per group. Without the config (the planner cannot plan it), every float tensor converts,
    scales too, and the FP8 ones are kept."""
    tmp, ck = _fp8_ckpt(tmp_path / "t")
    arrays = sj.load(tmp, mesh_2d(), dtype=to.lower())
    kept = {k for k, (dt, _) in ck.items() if dt in ("F8_E4M3", "F32")}
    assert kept & set(arrays) and {ck[k][0] for k in arrays} == {"F8_E4M3", "F32", "BF16"}
    _exact(arrays, ck, to, kept)
    stats: dict = {}
    rules = [(r".*", P())]
    arrays = sj.load(tmp, mesh_1d(), rules, dtype=to.lower(), stats=stats)
    _exact(arrays, ck, to, kept & set(arrays))
    assert set(arrays) == set(ck) and stats["groups"] == 1, stats
    assert stats["bytes_read"] == stats["read_bytes"], stats
    (tmp / "config.json").unlink()
    arrays = sj.load(tmp, mesh_1d(), rules, dtype=to.lower())
    _exact(arrays, ck, to, {k for k, (dt, _) in ck.items() if dt == "F8_E4M3"})


def test_target_dtype_keeps_integers(tmp_path: Path) -> None:
    """Integer and bool tensors keep their dtype under a float target, beside converted ones."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(3)
    t = {"a": rng.standard_normal((16, 8)).astype(np.float32),
         "ids": rng.integers(-5, 5, (16,), dtype=np.int32),
         "mask": rng.integers(0, 2, (8, 4)).astype(np.bool_),
         "b": rng.standard_normal((8,)).astype(np.float32)}
    save_file(t, str(tmp_path / "model.safetensors"))
    arrays = sj.load(tmp_path, mesh_1d(), [(r"^a$", P("model")), (r".*", P())], dtype="bf16")
    ck = {"a": ("F32", t["a"]), "b": ("F32", t["b"]), "ids": ("I32", t["ids"]),
          "mask": ("BOOL", t["mask"])}
    _exact(arrays, ck, "BF16", {"ids", "mask"})


def test_dma_mapped_slabs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the client implements dma_map, each slab is mapped once, when allocated, and
    unmapped when the load ends; the shards are the same bytes as with plain slabs."""
    path, want = make_big_ckpt(tmp_path / "d")
    _as_copying_devices(monkeypatch)
    fake = FakeClient()
    monkeypatch.setattr(jl, "clients", lambda devices: [fake])
    stats: dict = {}
    arrays = sj.load(path, mesh_1d(), staging=2 << 20, stats=stats)
    check_shards(arrays, want)
    assert stats["staging"] == "dma-mapped" and stats["dma"] == "mapped", stats
    assert stats["reused"] >= 5 and stats["dma_mapped_bytes"] == stats["slab_bytes"]
    assert len(fake.maps) == 2 and {n for _, n in fake.maps} == {(2 << 20) // 4}
    assert sorted(fake.unmaps) == sorted(a for a, _ in fake.maps)


def test_dma_turned_off_and_unmapped_on_failure(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """dma=False, or SHARDLOAD_JAX_DMA=0, never maps; a load that fails after mapping unmaps
    every slab before its error is raised; an unmap error is raised once all are unmapped."""
    path, want = make_big_ckpt(tmp_path / "o")
    _as_copying_devices(monkeypatch)
    fake = FakeClient()
    monkeypatch.setattr(jl, "clients", lambda devices: [fake])
    stats: dict = {}
    check_shards(sj.load(path, mesh_1d(), staging=2 << 20, dma=False, stats=stats), want)
    assert stats["staging"] == "plain" and stats["dma"] == "off" and stats["reused"] >= 5
    monkeypatch.setenv("SHARDLOAD_JAX_DMA", "0")
    sj.load(path, mesh_1d(), staging=2 << 20, stats=stats)
    assert stats["dma"] == "off" and fake.maps == []
    monkeypatch.delenv("SHARDLOAD_JAX_DMA")

    def stop(done: int, total: int) -> None:
        if done > total // 2:
            raise RuntimeError("stop here")
    with pytest.raises(RuntimeError, match="stop here"):
        sj.load(path, mesh_1d(), staging=2 << 20, progress=stop)
    assert len(fake.maps) == 2 and sorted(fake.unmaps) == sorted(a for a, _ in fake.maps)
    bad = FakeClient(RuntimeError("unmap failed"))
    monkeypatch.setattr(jl, "clients", lambda devices: [bad])
    with pytest.raises(RuntimeError, match="unmap failed"):
        sj.load(path, mesh_1d(), staging=2 << 20)
    assert len(bad.unmaps) == 2
    with pytest.raises(TypeError, match="dma must be None or a bool"):
        sj.load(path, mesh_1d(), dma="yes")  # type: ignore[arg-type]


def test_retired_slab_held_until_unmapped() -> None:
    """A slab a device adopted is retired (never loaded into again) but held until close() has
    unmapped it: a range freed while still registered (cuMemHostRegister) could come back as a
    later slab, which CUDA would refuse to register again."""
    from shardload.plan import Param
    fake = FakeClient()
    pool = jst.Staging([fake], 1 << 20, True)
    params = [Param("w", "BF16", (256, 256), 256 * 256 * 2, 0)]
    buf = pool.take(0, params)[0]
    addr = pool.slabs[0].ctypes.data  # type: ignore[union-attr]
    assert fake.maps == [(addr, 1 << 20)] and addr % jst.PAGE == 0 and buf.ctypes.data == addr
    pool.retire(0)
    assert pool.slabs[0] is None and [m.ctypes.data for m in pool.retired] == [addr]
    assert pool.close() is None and fake.unmaps == [addr] and pool.retired == []


def test_cpu_stats(tmp_path: Path) -> None:
    """On CPU devices the buffers are adopted: no slab, no dma_map tried, no byte copied."""
    path, _ = make_ckpt(tmp_path / "t", "llama")
    stats: dict = {}
    arrays = sj.load(path, mesh_2d(), stats=stats)
    held = sum(s.data.nbytes for a in arrays.values() for s in a.addressable_shards)
    assert stats["staging"] == "plain" and stats["dma"].startswith("unused"), stats
    assert stats["slabs"] == 0 and stats["copied_bytes"] == 0 and stats["adopted_bytes"] == held
    assert stats["read_bytes"] == sj.plan(path, mesh_2d()).read_bytes and stats["groups"] == 1


def test_cooperative_in_one_process(tmp_path: Path) -> None:
    """dist="cooperative" with one process: nothing is replicated across processes, so it loads
    as the independent way does and gathers nothing (test_jax_multihost.py runs two)."""
    path, want = make_ckpt(tmp_path / "c", "qwen3")
    stats: dict = {}
    arrays = sj.load(path, mesh_2d(), dist="cooperative", stats=stats)
    check_shards(arrays, want)
    assert stats["gathered_tensors"] == 0 and stats["gathered_bytes"] == 0, stats
    assert stats["bytes_read"] >= stats["read_bytes"] == sj.plan(path, mesh_2d()).read_bytes
    with pytest.raises(ValueError, match="dist 'mpi': expected 'independent' or 'cooperative'"):
        sj.load(path, mesh_2d(), dist="mpi")


def test_gathered_reads_keep_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What dist="cooperative" reads to gather is deleted once gathered, so it is memory beyond
    the arrays even on CPU devices, which adopt the buffers: those loads keep groups within the
    staging bound instead of 1 GiB ones (a whole 715 MB Llama's parts were alive at once in
    bench/jax_dist.py, 332-348 MiB above the arrays, 221-234 MiB with the bound). The "data" axis
    is made to look as if it spanned processes, so that one process reads with it and gathers."""
    monkeypatch.setattr(jsh, "_spanning_axes", lambda mesh: ("data",))
    path, want = make_big_ckpt(tmp_path / "g")
    fills: list = []
    _spy(monkeypatch, "fill_group", fills)
    stats: dict = {}
    arrays = sj.load(path, mesh_2d(), dist="cooperative", staging=2 << 20, stats=stats)
    check_shards(arrays, want)
    assert stats["gathered_tensors"] > 10 and stats["adopted_bytes"] > 0, stats
    bound = ((2 << 20) - (1 << 20)) // 2
    assert len(fills) > 4 and max(_group_bytes(args[1]) for args, _ in fills) <= bound


def test_gather_to_an_equivalent_sharding() -> None:
    """gather deletes what was read once moved, except where device_put to an equivalent
    sharding gave a new array over the same buffers (a one-device axis): deleting it deleted
    the result (found with a randomized run, dist="cooperative" and pinned_host)."""
    mesh = Mesh(np.array(jax.devices()[:1]), ("m",))
    x = np.arange(8, dtype=np.float32)
    for kind in (None, "pinned_host"):
        a = jax.device_put(x, NamedSharding(mesh, P("m"), memory_kind=kind))
        out = jl.gather(a, NamedSharding(mesh, P(None), memory_kind=kind))
        assert not out.is_deleted() and np.array_equal(np.asarray(out), x)
    a = jax.device_put(x, NamedSharding(mesh_2d(), P("data")))
    out = jl.gather(a, NamedSharding(mesh_2d(), P()))
    assert a.is_deleted() and np.array_equal(np.asarray(out), x)


def test_load_into(tmp_path: Path) -> None:
    """load_into takes each array's sharding, shape and dtype (converted on the way) and returns
    new arrays (JAX arrays are immutable); donate=True deletes the given ones first."""
    import jax.numpy as jnp
    path, want = make_ckpt(tmp_path / "i", "llama")
    mesh = mesh_2d()
    q, o = "model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"
    rows, cols = NamedSharding(mesh, P("model", None)), NamedSharding(mesh, P("data", "model"))
    given = {q: jnp.zeros(want[q].shape, jnp.float32, device=rows),
             o: jax.ShapeDtypeStruct(want[o].shape, jnp.bfloat16, sharding=cols)}
    out = sj.load_into(path, given)
    assert list(out) == [q, o] and out[q].sharding == rows and out[o].sharding == cols
    assert out[q].dtype == jnp.float32 and out[o].dtype == jnp.bfloat16
    check_shards({q: out[q]}, want, "F32")
    check_shards({o: out[o]}, want)
    assert not given[q].is_deleted() and not np.asarray(given[q]).any()
    sj.load_into(path, given, donate=True)
    assert given[q].is_deleted()
    with pytest.raises(ValueError, match=f"tensor '{q}': shape"):
        sj.load_into(path, {q: jax.ShapeDtypeStruct((2, 2), jnp.bfloat16, sharding=rows)})
    with pytest.raises(ValueError, match=r"tensor 'model.norm.weight' \(64,\): its PartitionSpec "
                       r"(P|PartitionSpec)\('data', 'model'\) has 2 entries for 1 dimension$"):
        sj.load(path, mesh, [(r"norm", P("data", "model")), (r".", P())])
    with pytest.raises(KeyError, match="'nope', which is not in the checkpoint"):
        sj.load_into(path, {"nope": given[o]})
    with pytest.raises(ValueError, match="no sharding"):
        sj.load_into(path, {o: jax.ShapeDtypeStruct(want[o].shape, jnp.bfloat16)})
    with pytest.raises(ValueError, match="dtype int8"):
        sj.load_into(path, {o: jax.ShapeDtypeStruct(want[o].shape, jnp.int8, sharding=cols)})


def test_load_into_checks_conversions_before_donating(tmp_path: Path) -> None:
    """A conversion the core cannot do (I32 to F32), or an option load refuses, is refused
    before donate deletes anything; targets of several dtypes are one C load (each byte read
    once: with one load per dtype, each read the other's tensors as gaps) with one rising
    (done, total); without x64 an I64 tensor loads into int32 targets when its values fit."""
    import jax.numpy as jnp
    from safetensors.numpy import save_file
    path = tmp_path / "m.safetensors"
    w, ids = np.arange(32, dtype=np.float32).reshape(8, 4), np.arange(8, dtype=np.int32)
    save_file({"w": w, "ids": ids, "pos": np.arange(8, dtype=np.int64)}, str(path))
    mesh = mesh_1d()
    rows, rep = NamedSharding(mesh, P("model")), NamedSharding(mesh, P())
    given = {"w": jnp.zeros((8, 4), jnp.float32, device=rows),
             "ids": jnp.zeros((8,), jnp.float32, device=rep)}
    with pytest.raises(ValueError, match="tensor 'ids': no conversion from I32 to F32"):
        sj.load_into(path, given, donate=True)
    assert not any(a.is_deleted() for a in given.values())
    given["ids"] = jnp.zeros((8,), jnp.int32, device=rep)
    for bad, err in [({"io": "bogus"}, ValueError), ({"threads": -1}, ValueError),
                     ({"progress": 3}, TypeError), ({"stats": []}, TypeError),
                     ({"read_gap": "x"}, TypeError), ({"dist": "x"}, ValueError),
                     ({"dma": 1}, TypeError), ({"staging": 1}, ValueError)]:
        with pytest.raises(err):
            sj.load_into(path, given, donate=True, **bad)
        assert not any(a.is_deleted() for a in given.values()), bad
    seen: list = []
    stats: dict = {}
    want = {"w": jax.ShapeDtypeStruct((8, 4), jnp.bfloat16, sharding=rows),
            "ids": jax.ShapeDtypeStruct((8,), jnp.int32, sharding=rep)}
    if not jax.config.jax_enable_x64:
        want["pos"] = jax.ShapeDtypeStruct((8,), jnp.int32, sharding=rep)
    out = sj.load_into(path, want, progress=lambda d, t: seen.append((d, t)), stats=stats)
    assert stats["groups"] == 1 and stats["bytes_read"] == stats["read_bytes"], stats
    assert np.array_equal(np.asarray(out["w"]).astype(np.float32), w)
    assert np.array_equal(np.asarray(out["ids"]), ids)
    assert "pos" not in out or np.array_equal(np.asarray(out["pos"]), np.arange(8))
    totals = {t for _, t in seen}
    assert len(totals) == 1 and seen[-1][0] == seen[-1][1] > 0, seen
    assert [d for d, _ in seen] == sorted(d for d, _ in seen), seen


def test_bad_arguments_before_anything(tmp_path: Path) -> None:
    """A mapping is no dtype of load or plan (load_into's per-tensor targets are internal: a
    plain dict was taken for them, sl_dtype numbers wrapped by ctypes into other dtypes); a bare
    rule is no list of rules; a config given with shardings is used and checked, never ignored;
    load_into of nothing is nothing."""
    from safetensors.numpy import save_file
    path = tmp_path / "m.safetensors"
    save_file({"w": np.arange(32, dtype=np.float32).reshape(8, 4)}, str(path))
    mesh, rules = mesh_1d(), [(".*", P())]
    for dt in ({"w": "bf16"}, {"w": 2**32 + 14}):
        with pytest.raises(ValueError, match="expected one of bf16, f16, f32"):
            sj.load(path, mesh, rules, dtype=dt)
        with pytest.raises(ValueError, match="expected one of bf16, f16, f32"):
            sj.plan(path, mesh, rules, dtype=dt)
    with pytest.raises(TypeError, match=r"rule 0: expected a \(regex, PartitionSpec\) pair"):
        sj.load(path, mesh, (".*", P()))
    with pytest.raises(Exception, match="nonexistent"):
        sj.load(path, mesh, rules, config=str(tmp_path / "nonexistent" / "config.json"))
    with pytest.raises(TypeError):
        sj.load(path, mesh, rules, config=42)
    assert sj.load_into(path, {}) == {}


def test_64_bit_types_keep_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without x64 JAX holds F64 and I64 as 32-bit types, copying a buffer to narrow it, so
    such buffers are host memory beyond the arrays: F64 is converted to F32 by the C core
    (the buffers adopted, half the bytes), and a load with I64 tensors keeps the staging bound
    from its first group (with 1 GiB groups, 256 MiB of F64 peaked at 384 MiB at 16 MiB)."""
    from safetensors.numpy import save_file
    if jax.config.jax_enable_x64:
        pytest.skip("x64 holds them as they are")
    rng = np.random.default_rng(5)
    f64 = {f"f{i}": rng.standard_normal((256, 512)) for i in range(4)}
    i64 = {f"i{i}": rng.integers(-9, 9, (256, 512), dtype=np.int64) for i in range(4)}
    save_file({**f64, **i64}, str(tmp_path / "model.safetensors"))
    fills: list = []
    _spy(monkeypatch, "fill_group", fills)
    stats: dict = {}
    arrays = sj.load(tmp_path, mesh_1d(), [(r"^f", P("model")), (r".*", P())], staging=2 << 20,
                     stats=stats)
    for k, v in f64.items():
        assert arrays[k].dtype == np.float32
        for s in arrays[k].addressable_shards:
            assert np.asarray(s.data).tobytes() == v[s.index].astype(np.float32).tobytes(), k
    for k, v in i64.items():
        assert np.array_equal(np.asarray(arrays[k]), v) and arrays[k].dtype == np.int32
    bound = ((2 << 20) - (1 << 20)) // 2   # a slab: a box's copies share one buffer in it
    width = {"F64": 4, "I64": 8}  # F64 held as F32

    def room(group: list) -> int:
        return sum(int(np.prod(b[3])) * width[t.dtype] for t, bs in group
                   for _, b in jg.distinct(bs))
    assert max(room(args[1]) for args, _ in fills) <= bound, stats
    assert stats["adopted_bytes"] >= sum(v.nbytes // 2 for v in f64.values()), stats


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="int64 is held as it is with x64")
def test_donate_checks_narrowed_values_first(tmp_path: Path) -> None:
    """load_into(donate=True) checks that an I64 tensor's values fit the int32 JAX holds it in
    before it deletes anything (the load's own check comes as the values arrive: too late)."""
    import jax.numpy as jnp
    from safetensors.numpy import save_file
    path = tmp_path / "i.safetensors"
    big = np.arange(3 << 18, dtype=np.int64)
    big[-1] = 2**40   # in the last chunk of 2 MiB
    save_file({"i": big, "w": np.ones(8, np.float32)}, str(path))
    mesh = mesh_1d()
    given = {"i": jax.device_put(jnp.zeros(big.shape, jnp.int32), NamedSharding(mesh, P("model"))),
             "w": jax.device_put(jnp.zeros(8, jnp.float32), NamedSharding(mesh, P()))}
    with pytest.raises(ValueError, match="tensor 'i': int64 values that int32 cannot hold"):
        sj.load_into(path, given, donate=True, staging=2 << 20)
    assert not any(a.is_deleted() for a in given.values())
    big[-1] = 7
    save_file({"i": big, "w": np.ones(8, np.float32), "f": np.arange(8, dtype=np.float64)}, str(path))
    given["f"] = jax.ShapeDtypeStruct((8,), np.float64, sharding=NamedSharding(mesh, P()))
    out = sj.load_into(path, given, donate=True, staging=2 << 20)   # F64 is no narrowed integer
    assert np.array_equal(np.asarray(out["i"]), big) and given["i"].is_deleted()
    assert np.array_equal(np.asarray(out["f"]), np.arange(8)) and out["f"].dtype == np.float32


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="int64 is held as it is with x64")
def test_int64_values_that_would_wrap(tmp_path: Path) -> None:
    """Without x64 JAX holds I64 as int32: values that fit load, others are an error naming the
    tensor, never wrapped numbers."""
    from safetensors.numpy import save_file
    path = tmp_path / "i.safetensors"
    save_file({"big": np.array([1099511627781, -34359738368], np.int64),
               "ok": np.array([5, -3], np.int64)}, str(path))
    mesh = mesh_1d()
    out = sj.load(path, mesh, {"ok": P()})
    assert out["ok"].dtype == np.int32 and list(np.asarray(out["ok"])) == [5, -3]
    with pytest.raises(ValueError, match="tensor 'big': int64 values that int32 cannot hold"):
        sj.load(path, mesh, {"big": P(), "ok": P()})


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="int64 is held as it is with x64")
@pytest.mark.parametrize("copying", [False, True])
def test_int64_shards_each_their_own_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            copying: bool) -> None:
    """Without x64 JAX narrows an int64 buffer into one int32 array, which a CPU device adopts
    when it happens to be aligned: where a box's copies share a buffer (replicated, or over the
    data axis), two devices were then one memory (the copies the load reports, and no shard
    owning its bytes). Every shard is its own memory, with the right values, over sizes whose
    int32 arrays land at various alignments."""
    from safetensors.numpy import save_file
    if copying:
        devices_copy(monkeypatch)
    rng = np.random.default_rng(3)
    sizes = [1, 7, 64, 100, 1000, 4096, 10000, 30000]
    ts = {f"t{k}": rng.integers(-100, 100, (8 * n,)).astype(np.int64) for k, n in enumerate(sizes)}
    save_file(ts, str(tmp_path / "i.safetensors"))
    for mesh, spec in ((mesh_1d(), P()), (mesh_2d(), P("model")), (mesh_2d(), P())):
        stats: dict = {}
        out = sj.load(tmp_path, mesh, {n: NamedSharding(mesh, spec) for n in ts}, stats=stats)
        ptrs = [s.data.unsafe_buffer_pointer() for a in out.values() for s in a.addressable_shards]
        assert len(set(ptrs)) == len(ptrs), (spec, stats)
        for n, a in out.items():
            assert a.dtype == np.int32 and np.array_equal(np.asarray(a), ts[n].astype(np.int32))
        held = sum(s.data.nbytes for a in out.values() for s in a.addressable_shards)
        assert stats["copied_bytes"] + stats["adopted_bytes"] == held * 2, stats  # int64 boxes


def test_an_axis_used_twice_names_the_tensor(tmp_path: Path) -> None:
    path, _ = make_ckpt(tmp_path / "d", "llama")
    q = "model.layers.0.self_attn.q_proj.weight"
    with pytest.raises(ValueError, match=f"tensor '{q}': "):
        sj.load(path, mesh_2d(), {q: P("model", "model")})


@pytest.mark.parametrize("kind", ["pinned_host", "unpinned_host"])
def test_memory_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Shardings that name a memory kind (host offloading: "pinned_host") get their shards in that
    memory, as make_array_from_single_device_arrays requires (it refused shards in the devices'
    default memory: "Memory kind mismatch"); every shard exact, through load, load_into and the
    slabs of devices that copy."""
    import jax.numpy as jnp
    mesh = mesh_2d()
    if kind not in {m.kind for m in mesh.devices.flat[0].addressable_memories()}:
        pytest.skip(f"this JAX's CPU devices have no {kind} memory")
    path, want = make_ckpt(tmp_path / "k", "qwen3")

    def pick(name: str, shape: tuple, dtype: str) -> NamedSharding:
        return NamedSharding(mesh, P("data", "model") if len(shape) == 2 else P(),
                             memory_kind=kind)

    def in_kind(arrays: dict) -> None:
        check_shards(arrays, want)
        assert {a.sharding.memory_kind for a in arrays.values()} == {kind}
        assert {s.data.sharding.memory_kind for a in arrays.values()
                for s in a.addressable_shards} == {kind}
    in_kind(sj.load(path, mesh, pick))
    q = "model.layers.0.self_attn.q_proj.weight"
    given = {q: jax.ShapeDtypeStruct(want[q].shape, jnp.bfloat16,
                                     sharding=pick(q, want[q].shape, "BF16"))}
    in_kind(sj.load_into(path, given))
    _as_copying_devices(monkeypatch)
    in_kind(sj.load(path, mesh, pick, staging=2 << 20))


def test_pieces_of_a_large_tensor() -> None:
    """A tensor over the group bound is cut into pieces of whole boxes only when its boxes split
    dimension 0 (disjoint byte ranges, no byte read twice); copies of a box stay together."""
    mesh = mesh_2d()
    shape = (1024, 64)

    class T:  # the field pieces reads
        pass
    tensor = T()
    tensor.shape = shape  # type: ignore[attr-defined]
    index = jsh.local_devices(mesh)
    rows = jsh.boxes("w", shape, NamedSharding(mesh, P("model", None)), index)
    pieces = jg.pieces(tensor, rows, 2, 40_000)  # 4 distinct boxes of 32 KiB, each on 2 devices
    assert [len(p) for p in pieces] == [2, 2, 2, 2]
    assert all(len({b[2] for _, b in p}) == 1 for p in pieces)  # a box and its copy
    assert sorted(d.id for p in pieces for d, _ in p) == sorted(d.id for d, _ in rows)
    assert len(jg.pieces(tensor, rows, 2, 70_000)) == 4  # 2 copies x 32 KiB fill a piece
    cols = jsh.boxes("w", shape, NamedSharding(mesh, P(None, "model")), index)
    assert jg.pieces(tensor, cols, 2, 40_000) == [cols]  # would read every row 4 times


def test_bands_of_boxes_over_the_bound() -> None:
    """A tensor whose boxes do not fit a group and cannot be cut into whole boxes (split along
    dimension 1, or one box over the bound) goes in bands where the devices assemble parts: the
    next rows of every box, the same number for each, a group's buffers (a box's copies share
    one) within the bound;
    every row of every box is loaded once, in order. Without bands, a group over the bound."""
    mesh = mesh_2d()
    shape, limit = (1000, 64), 40_000

    class T:  # the fields groups reads
        pass
    tensor = T()
    tensor.shape, tensor.dtype, tensor.name = shape, "BF16", "w"  # type: ignore[attr-defined]
    index = jsh.local_devices(mesh)

    def size(group: list) -> int:  # a buffer per distinct box (copies share it) of each entry
        return sum(jg.padded(int(np.prod(b[3])) * 2) for _, bs in group
                   for _, b in jg.distinct(bs))
    for spec in [P(None, "model"), P(), P("data", None)]:
        boxes = jsh.boxes("w", shape, NamedSharding(mesh, spec), index)
        assert max(map(size, jg.groups([(tensor, boxes)], lambda: limit, {}))) > limit
        got = list(jg.groups([(tensor, boxes)], lambda: limit, {}, lambda: True))
        assert len(got) > 1, spec
        rows: dict = {}
        for g in got:
            assert size(g) <= limit, spec
            for _, bs in g:
                assert len({b[3][0] for _, b in bs}) == 1  # one part shape per band
                for dev, b in bs:
                    rows.setdefault(dev, []).append((b[2][0], b[3][0]))
        for dev, (_, _, start, length) in boxes:
            parts = rows[dev]
            assert parts[0][0] == start[0] and sum(n for _, n in parts) == length[0]
            assert all(a + n == b for (a, n), (b, _) in zip(parts, parts[1:]))  # in order


def test_bands_that_fit_a_group_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bands of a tensor whose boxes split dimension 1 of three, two of which fit a group exactly
    (eight boxes of 32 KiB rows under the 512 KiB bound of a 2 MiB staging): each band is a group
    of its own (a plan holds one box of a tensor per device; two bands in one group were
    refused, SL_E_DUPLICATE), and a band takes every row that fits, padding counted exactly
    (two here, not one)."""
    rng = np.random.default_rng(9)
    w = rng.integers(0, 1 << 16, size=(8, 16, 4096), dtype=np.uint16)
    oracle.write_checkpoint(str(tmp_path), {"w": ("BF16", w)}, 1, random.Random(9))
    mesh = mesh_2d()
    _as_copying_devices(monkeypatch)
    stats: dict = {}
    arrays = sj.load(tmp_path, mesh, {"w": NamedSharding(mesh, P("data", "model", None))},
                     staging=2 << 20, stats=stats)
    check_shards(arrays, {"w": w})
    assert stats["groups"] == 2 and stats["parts"] == 16 and stats["assembled_boxes"] == 8, stats
    monkeypatch.setattr(jg, "_rows", lambda buffers, width, limit, k: 1)  # bands of half a group
    arrays = sj.load(tmp_path, mesh, {"w": NamedSharding(mesh, P("data", "model", None))},
                     staging=2 << 20, stats=stats)
    check_shards(arrays, {"w": w})
    assert stats["groups"] == 3 and stats["parts"] == 24, stats  # 1, 1, then the last 2 rows


@pytest.mark.parametrize("shape,spec,deep", [
    ((2, 256, 2048), P("data", None, "model"), 1), ((2, 256, 2048), P(None, "model"), 1),
    ((2, 256, 2048), P(), 1), ((2, 8, 65536), P("data", "model", None), 2)])
def test_rows_larger_than_a_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  shape: tuple, spec: P, deep: int) -> None:
    """Where one row of every box does not fit a group (a 3-D tensor's row can be hundreds of
    MiB: Llama 4's fused experts), the bands are a row's first elements along dimension 1, or
    2 where not even one element of dimension 1 fits: boxes still, in row-major order,
    assembled on the devices; no fresh host buffer over the bound (the old fallback:
    oversize_groups), every shard exact."""
    rng = np.random.default_rng(11)
    w = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    oracle.write_checkpoint(str(tmp_path), {"w": ("BF16", w)}, 1, random.Random(11))
    mesh = mesh_2d()
    fills: list = []
    _spy(monkeypatch, "fill_group", fills)
    put = _as_copying_devices(monkeypatch)
    stats: dict = {}
    arrays = sj.load(tmp_path, mesh, {"w": NamedSharding(mesh, spec)}, staging=2 << 20,
                     stats=stats)
    check_shards(arrays, {"w": w})
    bound = ((2 << 20) - (1 << 20)) // 2
    assert stats["oversize_groups"] == 0 and max(n for _, _, n in put) <= bound, stats
    assert stats["assembled_boxes"] == 8, stats
    sizes = {b[3] for args, _ in fills for _, bs in args[1] for _, b in bs}
    assert all(n[:deep] == (1,) * deep for n in sizes) and \
        any(n[deep] < arrays["w"].addressable_shards[0].data.shape[deep] for n in sizes), sizes


def test_parts_written_in_place() -> None:
    """Each device writes the parts of its box into one buffer, in place (the buffer donated:
    its address never changes, the finished box included, bitcast back to bf16), and bit for
    bit: bf16 NaNs with payloads survive (a bf16 update on XLA's CPU goes through f32)."""
    import warnings
    import jax.numpy as jnp
    devs = jax.devices()[:4]
    shape = (10, 6)
    bits = [np.arange(60, dtype=np.uint16).reshape(shape) * 97 + 0x3f00 + i for i in range(4)]
    for b in bits:
        b[0, :3] = [0x7f81, 0xffc3, 0x7fa5]  # NaNs: signalling, negative, with a payload
    parts = jp.Parts()
    addresses = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Some donated buffers were not usable"
        for r0, r1 in [(0, 4), (4, 8), (8, 10)]:
            done = parts.add([(d, ("w", k, (r0, 0), (r1 - r0, 6)), ("w", k, (0, 0), shape),
                               jax.device_put(bits[k][r0:r1].view(jp.view(jnp.bfloat16)), d),
                               np.dtype(jnp.bfloat16)) for k, d in enumerate(devs)])
            arrays = [a for _, _, a in done] or parts.arrays()
            addresses.append([a.unsafe_buffer_pointer() for a in arrays])
    assert len(done) == 4 and not parts.arrays()
    assert all(a == addresses[0] for a in addresses), addresses
    for k, (dev, name, a) in enumerate(done):
        assert (dev, name, a.dtype, a.shape) == (devs[k], "w", jnp.bfloat16, shape)
        assert np.array_equal(np.asarray(a).view(np.uint16), bits[k])
    assert parts.count == {"parts": 12, "assembled_boxes": 4}


@pytest.mark.parametrize("dtype,kind", [(None, None), ("F32", None), (None, "pinned_host")])
def test_copying_devices_assemble_bands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         dtype: str | None, kind: str | None) -> None:
    """On devices that copy, a box over the group bound (a replicated 2 MiB embedding under a
    512 KiB bound) and a tensor split along dimension 1 go through the slabs in bands of rows,
    each device writing its parts into one buffer: no fresh host buffer over the bound (the
    fallback this replaces), every shard exact and box-sized, in its dtype and memory kind."""
    path, want = make_big_ckpt(tmp_path / "b")
    mesh = mesh_2d()
    if kind and kind not in {m.kind for m in mesh.devices.flat[0].addressable_memories()}:
        pytest.skip(f"this JAX's CPU devices have no {kind} memory")

    def pick(name: str, shape: tuple, dt: str) -> NamedSharding:
        spec = (P() if "embed" in name else P(None, "model") if "down" in name
                else P("data", "model") if len(shape) == 2 else P())
        return NamedSharding(mesh, spec, memory_kind=kind)
    put = _as_copying_devices(monkeypatch)
    stats: dict = {}
    arrays = sj.load(path, mesh, pick, dtype=dtype, staging=2 << 20, stats=stats)
    check_shards(arrays, want, dtype)
    bound = ((2 << 20) - (1 << 20)) // 2
    assert stats["oversize_groups"] == 0 and stats["slabs"] == 2, stats
    assert max(n for _, _, n in put) <= bound
    embed = arrays["model.embed_tokens.weight"]
    assert stats["parts"] >= 8 * 5 and stats["assembled_boxes"] >= 8 * 2, stats
    assert all(s.data.shape == want["model.embed_tokens.weight"].shape
               for s in embed.addressable_shards)
    assert {s.data.dtype for a in arrays.values() for s in a.addressable_shards} == \
        {np.dtype("float32" if dtype else "bfloat16")}
    if kind:
        assert {s.data.sharding.memory_kind for a in arrays.values()
                for s in a.addressable_shards} == {kind}


def test_progress_and_loader_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress (reported from the loader thread) rises to the plan's read bytes over all the
    groups; an exception raised on the loader thread (here by the callback) is load's error."""
    import threading
    path, _ = make_ckpt(tmp_path / "g", "mistral")
    monkeypatch.setattr(jl, "adopts", lambda devices: False)
    seen: list[tuple[int, int]] = []
    sj.load(path, mesh_2d(), staging=2 << 20, progress=lambda d, t: seen.append((d, t)))
    total = sj.plan(path, mesh_2d()).read_bytes
    assert seen and {t for _, t in seen} == {total}
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == total
    before = threading.active_count()

    def stop(done: int, total: int) -> None:
        raise RuntimeError("stop here")
    with pytest.raises(RuntimeError, match="stop here"):
        sj.load(path, mesh_2d(), staging=2 << 20, progress=stop)
    assert threading.active_count() == before


def test_plan_only_devices_hold_their_boxes(tmp_path: Path) -> None:
    path, want = make_ckpt(tmp_path / "p", "mistral")
    p = sj.plan(path, mesh_2d())
    arrays = sj.load(path, mesh_2d())
    local = list(mesh_2d().devices.flat)
    for i, d in enumerate(local):
        held = sum(s.data.nbytes for a in arrays.values() for s in a.addressable_shards
                   if s.device == d)
        assert p.devices[i].bytes == held


def _sparse_checkpoint(path: Path, config: Path) -> None:
    """The tensors a config implies, headers only and zero data in a sparse file: plans of a
    16 GB model without 16 GB on disk."""
    params = shardload.plan(config=config, layout="spmd").devices[0].params
    header, off = {}, 0
    for q in params:
        header[q.name] = {"dtype": "BF16", "shape": list(q.shape), "data_offsets": [off, off + q.nbytes]}
        off += q.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.mkdir()
    f = path / "model.safetensors"
    f.write_bytes(struct.pack("<Q", len(h)) + h)
    os.truncate(f, 8 + len(h) + off)
    (path / "config.json").write_text(config.read_text())


def test_seed_figure_llama3_8b(tmp_path: Path) -> None:
    """On an 8-device mesh each device's arrays of Llama-3-8B total 2,008,031,232 bytes."""
    _sparse_checkpoint(tmp_path / "l8", CONFIGS / "llama-3-8b.json")
    p = sj.plan(tmp_path / "l8", mesh_1d())
    assert [d.bytes for d in p.devices] == [2_008_031_232] * 8


def test_errors(tmp_path: Path) -> None:
    path, _ = make_ckpt(tmp_path / "e", "llama")
    mesh = mesh_2d()
    inv = "model.layers.0.self_attn.rotary_emb.inv_freq"  # 4 elements over 8 devices
    with pytest.raises(ValueError, match=f"tensor '{inv}' .*JAX rejects its sharding"):
        sj.load(path, mesh, {inv: P(("data", "model"))})
    with pytest.raises(ValueError, match=r"tensor 'model.norm.weight' \(64,\): its PartitionSpec "
                       r"(P|PartitionSpec)\('data', 'model'\) has 2 entries for 1 dimension$"):
        sj.load(path, mesh, [(r"norm", P("data", "model")), (r".", P())])
    with pytest.raises(KeyError, match="'nope', which is not in the checkpoint"):
        sj.load(path, mesh, {"nope": P()})
    with pytest.raises(ValueError, match="no sharding rule matches"):
        sj.load(path, mesh, [(r"embed", P())])
    with pytest.raises(TypeError, match="expected a jax.sharding.Sharding"):
        sj.load(path, mesh, {"model.norm.weight": "model"})
    with pytest.raises(ValueError, match="tensor 'model.norm.weight': .*nope.* not found in mesh"):
        sj.load(path, mesh, {"model.norm.weight": P("nope")})
    for bad_mesh in ("mesh", None):
        with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh, got"):
            sj.load(path, bad_mesh)
        with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh, got"):
            sj.plan(path, bad_mesh)
    with pytest.raises(ValueError, match=r"dtype 'int3': .*\(or None for each tensor's checkpoint "
                       r"dtype\)$"):
        sj.load(path, mesh, dtype="int3")
    with pytest.raises(ValueError, match="threads must be at least 0, got -1$"):
        sj.load(path, mesh, threads=-1)
    bad = tmp_path / "bad"  # vocab 1001: the default rule's split of dim 0 does not divide
    with pytest.raises(ValueError, match="tensor 'model.embed_tokens.weight' .*JAX rejects"):
        bad.mkdir()
        cfg = dict(ARCHS["llama"], vocab_size=1001, torch_dtype="bfloat16")
        (bad / "config.json").write_text(json.dumps(cfg))
        ck = oracle.checkpoint_tensors("llama", cfg, "BF16", np.random.default_rng(1))
        oracle.write_checkpoint(str(bad), ck, 1, random.Random(1))
        sj.load(bad, mesh)


RSS_CODE = """
import os, resource, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np, shardload.jax as sj
from jax.sharding import Mesh
mesh = Mesh(np.array(jax.devices()).reshape(8), ("model",))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
arrays = sj.load(sys.argv[1], mesh, staging=64 << 20)
held = sum(s.data.nbytes for a in arrays.values() for s in a.addressable_shards)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(base, held, peak)
"""


@pytest.mark.skipif(os.environ.get("SL_SKIP_SLOW") == "1", reason="SL_SKIP_SLOW=1")
def test_host_memory_of_a_1gb_load(tmp_path: Path) -> None:
    """On CPU JAX's device memory is host memory: peak RSS stays within what the devices hold
    + staging (64 MiB) + 96 MiB above an idle process with JAX up (the issue's bound), and
    within half the staging (the buffers are the device arrays there)."""
    shardload.synth(CONFIGS / "qwen3-0.6b.json", tmp_path / "q", max_shard_size=1 << 29)
    r = subprocess.run([sys.executable, "-c", RSS_CODE, str(tmp_path / "q")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    base, held, peak = map(int, r.stdout.split())
    assert held >= 10**9, held
    print(f"1 GB JAX load: devices hold {held:,} B, peak RSS {peak:,} B, idle {base:,} B: "
          f"{(peak - base - held) / 2**20:.1f} MiB beyond the arrays")
    assert peak - base <= held + (64 << 20) + (96 << 20), (base, held, peak)
    # make bench's goal is the staging (64 MiB); the design leaves less: an eighth of it for the
    # engine and nothing for the buffers, which the CPU devices adopt (measured 4-5 MiB; 43 MiB
    # when every device_put copied)
    assert peak - base - held <= 32 << 20, (base, held, peak)
