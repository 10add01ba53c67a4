"""The Python API end to end: every call, zero-copy views, their lifetime, threads, progress."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import shardload
from sl_fixtures import CONFIGS, TINY, ckpt_copy, cli, fake_cudart, tiny_ckpt, tiny_config  # noqa: F401


def test_import_needs_neither_torch_nor_jax() -> None:
    code = ("import sys, shardload; bad = [m for m in ('torch', 'jax') if m in sys.modules]; "
            "print(*bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_open(tiny_ckpt: Path) -> None:
    with shardload.open(tiny_ckpt) as ck:
        assert len(ck.files) == 4 and all(f.endswith(".safetensors") for f in ck.files)
        assert ck.total_bytes == sum(t.nbytes for t in ck.tensors)
        emb = next(t for t in ck.tensors if t.name == "model.embed_tokens.weight")
        assert (emb.dtype, emb.shape, emb.nbytes) == ("BF16", (1001, 256), 1001 * 256 * 2)
        assert emb.file in ck.files and emb.offset >= 8
        assert set(ck.metadata) == set(ck.files) and ck.warnings == []
    with pytest.raises(ValueError, match="closed"):
        _ = ck.handle


def test_read_one_tensor(ckpt_copy: Path) -> None:
    """Checkpoint.read(name): each tensor's bytes as an array of its dtype and shape, equal to
    the bytes the file's own header points at (read here with json and open(), not by
    shardload); the checkpoint's checks hold (unknown name, closed, a file changed since the
    open)."""
    want = {}
    for f in sorted(ckpt_copy.glob("*.safetensors")):
        raw = f.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        for name, e in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                lo, hi = e["data_offsets"]
                want[name] = (e["dtype"], tuple(e["shape"]), raw[8 + n + lo:8 + n + hi])
    with shardload.open(ckpt_copy) as ck:
        assert {t.name for t in ck.tensors} == set(want)
        for t in ck.tensors:
            a = ck.read(t.name)
            dt, shape, data = want[t.name]
            assert (a.shape, str(a.dtype), dt) == (shape, "bfloat16", "BF16"), t.name
            assert a.tobytes() == data, t.name
        with pytest.raises(KeyError, match="checkpoint has no tensor 'nope'"):
            ck.read("nope")
        f = ck.files[0]
        os.utime(f, ns=(0, 0))  # the file's identity is no longer the one opened
        name = next(t.name for t in ck.tensors if t.file == f)
        with pytest.raises(shardload.Error, match=f"{os.path.basename(f)}.*changed"):
            ck.read(name)
    with pytest.raises(ValueError, match="closed"):
        ck.read(name)


def test_an_open_checkpoint_in_place_of_a_path(tiny_ckpt: Path, tmp_path: Path) -> None:
    ck = shardload.open(tiny_ckpt)
    with shardload.load(ck, tp=2) as m, shardload.load(tiny_ckpt, tp=2) as want:
        assert m.checksums(1) == want.checksums(1)
    assert shardload.plan(ck, tp=4).total_bytes == shardload.plan(tiny_ckpt, tp=4).total_bytes
    shardload.reshard(ck, tmp_path / "r", tp=2)
    assert len(ck.tensors) > 0 and ck.handle   # used, not closed: the caller's to close
    ck.close()
    with pytest.raises(ValueError, match="checkpoint is closed"):
        shardload.load(ck, tp=2)


def _cpu_pjrt_plugin() -> str:
    found = sorted((Path(sys.prefix) / "lib").glob("python3*/site-packages/xla_plugins/xla_cpu_pjrt/*.so"))
    if not found:
        pytest.skip("no XLA CPU PJRT plugin in this environment (python/requirements-test.txt)")
    return str(found[0])


def test_pjrt_device_with_a_real_plugin(tiny_ckpt: Path) -> None:
    plugin = _cpu_pjrt_plugin()
    with shardload.load(tiny_ckpt, tp=2, device="pjrt", pjrt_plugin=plugin) as m, \
            shardload.load(tiny_ckpt, tp=2) as want:
        for d in range(2):
            assert m.checksums(d) == want.checksums(d)
            emb = next(p.name for p in m.params(d) if p.name.endswith("embed_tokens.weight"))
            assert np.array_equal(m.read(d, emb), want.numpy(d)[emb])
        # XLA's CPU plugin answers DmaMap with UNIMPLEMENTED: its staging is plain, and says why
        assert [dev["staging"].split(" ")[0] for dev in m.stats["devices"]] == ["plain", "plain"]
        assert all("staging" not in dev for dev in want.stats["devices"])
        assert all(dev["routes"].startswith("direct ") and "transfers" in dev["routes"]
                   for dev in m.stats["devices"]), m.stats["devices"]
        assert all("routes" not in dev for dev in want.stats["devices"])
        with pytest.raises(shardload.DeviceError, match=r"NumPy cannot view it; use \.read\(d, "
                           r"name\) or \.checksums\(d\)$"):
            m.numpy(0)   # (.torch and .dlpack cannot view PJRT buffers either)


def test_inspect_matches_cli(tiny_ckpt: Path, cli: str) -> None:
    want = json.loads(subprocess.run([cli, "inspect", str(tiny_ckpt), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    assert shardload.inspect(tiny_ckpt) == want


def test_plan_from_checkpoint(tiny_ckpt: Path) -> None:
    p = shardload.plan(tiny_ckpt, tp=2, pp=2)
    assert len(p.devices) == 4 and p.dtype == "BF16"
    assert [(d.index, d.tp_rank, d.pp_rank) for d in p.devices] == [
        (0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    assert p.total_bytes == sum(d.bytes for d in p.devices)
    assert p.read_bytes == shardload.open(tiny_ckpt).total_bytes
    for d in p.devices:
        offs = [q.offset for q in d.params]
        assert offs == sorted(offs) and sum(q.nbytes for q in d.params) == d.bytes
    qkv = p.devices[0].param("model.layers.0.self_attn.qkv_proj.weight")
    assert qkv.shape == ((8 // 2 + 2 // 2 * 2) * 32, 256)  # q heads of the rank + its k and v


def test_plan_from_config_alone() -> None:
    p = shardload.plan(config=CONFIGS / "llama-3-8b.json", tp=8)
    assert [d.bytes for d in p.devices] == [2_008_031_232] * 8  # the README's figure
    assert p.read_bytes is None
    f32 = shardload.plan(config=CONFIGS / "llama-3-8b.json", tp=8, dtype="f32")
    assert f32.dtype == "F32" and f32.total_bytes == 2 * p.total_bytes
    spmd = shardload.plan(config=CONFIGS / "llama-3-8b.json", tp=4, layout="spmd")
    assert spmd.layout == "spmd" and len(spmd.devices) == 4


def test_load_numpy_zero_copy(tiny_ckpt: Path) -> None:
    m = shardload.load(tiny_ckpt, tp=2)
    assert m.devices == [0, 1]
    for d in m.devices:
        arrays = m.numpy(d)
        assert list(arrays) == [q.name for q in m.plan.devices[d].params]
        for i, (name, a) in enumerate(arrays.items()):
            q = m.plan.devices[d].params[i]
            assert a.shape == q.shape and a.nbytes == q.nbytes and a.dtype.name == "bfloat16"
            assert a.ctypes.data == m._ptr(m._h(), d, i)  # the library's own pointer: no copy
        base = arrays[next(iter(arrays))].ctypes.data
        assert all(a.ctypes.data - base == q.offset
                   for a, q in zip(arrays.values(), m.plan.devices[d].params))
    s = m.stats
    assert s["bytes_read"] == shardload.open(tiny_ckpt).total_bytes
    assert [x["index"] for x in s["devices"]] == [0, 1]
    assert s["staging_peak"] <= 64 << 20 and s["io"] in ("direct", "buffered", "mixed")


def test_torch_and_dlpack_views(tiny_ckpt: Path) -> None:
    torch = pytest.importorskip("torch")
    m = shardload.load(tiny_ckpt, tp=2)
    ts = m.torch(1)
    for i, (name, t) in enumerate(ts.items()):
        assert t.dtype == torch.bfloat16 and t.data_ptr() == m._ptr(m._h(), 1, i)
        assert t.device.type == "cpu" and t.is_contiguous()
    name = "model.norm.weight"
    x = torch.from_dlpack(m.dlpack(1, name))
    assert x.data_ptr() == ts[name].data_ptr() and torch.equal(x, ts[name])
    assert torch.equal(ts[name].float(), torch.from_numpy(m.read(1, name).astype(np.float32)))
    with pytest.raises(KeyError):
        m.dlpack(1, "nope")


def test_views_outlive_the_model(tiny_ckpt: Path) -> None:
    m = shardload.load(tiny_ckpt, tp=2)
    want = {k: v.copy() for k, v in m.numpy(0).items()}
    views = m.numpy(0)
    cap = m.dlpack(0, "model.norm.weight")
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.numpy(0)
    del m
    gc.collect()
    for k, v in views.items():
        assert np.array_equal(v.view(np.uint16), want[k].view(np.uint16))
    del cap  # an unconsumed capsule frees its reference itself
    gc.collect()


def test_views_outlive_the_model_in_threads(tiny_ckpt: Path) -> None:
    ref = {k: v.copy() for k, v in shardload.load(tiny_ckpt, tp=2).numpy(1).items()}
    errors: list[str] = []

    def work() -> None:
        for _ in range(3):
            with shardload.load(tiny_ckpt, tp=2, devices=[1], progress=False) as m:
                views = m.numpy(1)
            gc.collect()
            for k, v in views.items():
                if not np.array_equal(v.view(np.uint16), ref[k].view(np.uint16)):
                    errors.append(k)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_options_of_another_device(tiny_ckpt: Path) -> None:
    """gpus= is for device='cuda' and pjrt_plugin= for 'pjrt': given to another, a ValueError
    (gpus= was ignored on cpu and pjrt)."""
    with pytest.raises(ValueError, match="gpus= goes with device='cuda'"):
        shardload.load(tiny_ckpt, tp=2, gpus=[0])
    with pytest.raises(ValueError, match="pjrt_plugin= goes with device='pjrt'"):
        shardload.load(tiny_ckpt, tp=2, pjrt_plugin="/x.so")


def test_close_while_another_thread_reads(tiny_ckpt: Path) -> None:
    """close() (and the GC) while another thread is in checksums() or read(): the call in
    progress keeps the weights alive and finishes right, later ones raise ValueError; the
    handle used to be taken out of its owner, which the close freed under the C call (a
    segfault in 5 of 5 runs). In a child process, so that a crash is a failure, not the end."""
    code = f"""
import gc, threading, time, shardload
m = shardload.load({str(tiny_ckpt)!r}, tp=2, progress=False)
ref = m.checksums(0)
name = m.params(0)[0].name
want = m.read(0, name).tobytes()
bad, closed = [], []
def work():
    for _ in range(10 ** 6):   # until the close
        try:
            if m.checksums(0) != ref or m.read(0, name).tobytes() != want:
                bad.append(1)
        except ValueError:
            closed.append(1)
            return
t = threading.Thread(target=work)
t.start()
time.sleep(0.01)
m.close()
gc.collect()
junk = [bytearray(1 << 20) for _ in range(64)]
t.join()
assert not bad and closed, (bad, closed)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_concurrent_loads_agree(tiny_ckpt: Path) -> None:
    want = shardload.load(tiny_ckpt, tp=4).checksums(3)
    got: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda: got.append(
        shardload.load(tiny_ckpt, tp=4, staging=1 << 20).checksums(3))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 4


def test_devices_loads_only_those(tiny_ckpt: Path) -> None:
    full = shardload.load(tiny_ckpt, tp=4)
    m = shardload.load(tiny_ckpt, tp=4, devices=[3, 1])
    assert m.devices == [3, 1]
    assert [x["allocated_bytes"] for x in m.stats["devices"]] == [
        m.plan.devices[3].bytes, m.plan.devices[1].bytes]
    assert m.checksums(3) == full.checksums(3) and m.checksums(1) == full.checksums(1)
    one = shardload.load(tiny_ckpt, tp=4, devices=[2])
    assert one.stats["bytes_read"] < full.stats["bytes_read"]  # its own rows only
    with pytest.raises(IndexError, match="not loaded"):
        one.numpy(0)
    with pytest.raises(TypeError, match="mesh device must be an int, got str"):
        one.numpy("2")


def test_checksums_match_the_cli(tiny_ckpt: Path, cli: str) -> None:
    out = subprocess.run([cli, "load", str(tiny_ckpt), "--tp", "2", "--checksums", "--json"],
                         check=True, capture_output=True, text=True).stdout
    rep = json.loads(out)
    m = shardload.load(tiny_ckpt, tp=2)
    assert set(m.stats) - {"devices"} <= set(rep)
    for dev in rep["devices"]:
        assert {p["name"]: int(p["xxh3"], 16) for p in dev["params"]} == m.checksums(dev["index"])


def test_checksums_are_xxh3_of_the_bytes(tiny_ckpt: Path) -> None:
    import oracle_shards
    m = shardload.load(tiny_ckpt, tp=2)
    sums = m.checksums(0)
    for name, a in m.numpy(0).items():
        assert "%016x" % sums[name] == oracle_shards.xxh3(a.view(np.uint16))


def test_dtype_conversion(tiny_ckpt: Path) -> None:
    import oracle_shards
    bf = shardload.load(tiny_ckpt, tp=2).numpy(0)
    f32 = shardload.load(tiny_ckpt, tp=2, dtype="float32").numpy(0)
    for k in bf:
        assert f32[k].dtype == np.float32
        assert np.array_equal(f32[k], oracle_shards.bf16_to_f32(bf[k].view(np.uint16)))


def test_progress(tiny_ckpt: Path) -> None:
    seen: list[tuple[int, int]] = []
    shardload.load(tiny_ckpt, tp=2, staging=1 << 20, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))

    def boom(done: int, total: int) -> None:
        raise RuntimeError("stop")
    with pytest.raises(RuntimeError, match="stop"):
        shardload.load(tiny_ckpt, tp=2, progress=boom)
    shardload.load(tiny_ckpt, progress=False)


def test_dummy_from_config(tiny_config: Path, cli: str) -> None:
    m = shardload.load(config=tiny_config, dummy=True, tp=2, seed=7)
    again = shardload.load(config=tiny_config, dummy=True, tp=2, seed=7)
    assert m.checksums(1) == again.checksums(1)
    assert m.checksums(1) != shardload.load(config=tiny_config, dummy=True, tp=2).checksums(1)
    rep = json.loads(subprocess.run(
        [cli, "load", "--config", str(tiny_config), "--format", "dummy", "--tp", "2", "--seed",
         "7", "--checksums", "--json"], check=True, capture_output=True, text=True).stdout)
    assert {p["name"]: int(p["xxh3"], 16) for p in rep["devices"][1]["params"]} == m.checksums(1)


def test_reshard_then_load(tiny_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "tp2"
    shardload.reshard(tiny_ckpt, out, tp=2)
    assert sorted(p.name for p in out.glob("*.safetensors"))[0].startswith("model-rank-0-part-")
    assert shardload.load(out, tp=2).checksums(1) == shardload.load(tiny_ckpt, tp=2).checksums(1)


def test_synth(tmp_path: Path) -> None:
    shardload.synth(CONFIGS / "qwen3-0.6b.json", tmp_path / "q", dtype="bf16", seed=3,
                    max_shard_size=None)
    assert shardload.open(tmp_path / "q").total_bytes > 1 << 30
    with pytest.raises(shardload.PlanError) as e:
        shardload.synth(tmp_path / "missing.json", tmp_path / "x")
    assert "missing.json" in e.value.message


def test_load_into(tiny_ckpt: Path) -> None:
    torch = pytest.importorskip("torch")
    plan = shardload.plan(tiny_ckpt, tp=4)
    for rank in range(4):
        mine = {q.name: torch.full(q.shape, 7, dtype=torch.bfloat16)
                for q in plan.devices[rank].params}
        ptrs = {k: t.data_ptr() for k, t in mine.items()}
        stats = shardload.load_into(tiny_ckpt, mine, tp=4, rank=rank, staging=1 << 20)
        assert stats["devices"] == [{"index": rank, "allocated_bytes": plan.devices[rank].bytes}]
        ref = shardload.load(tiny_ckpt, tp=4, devices=[rank]).torch(rank)
        for k, t in mine.items():
            assert t.data_ptr() == ptrs[k] and torch.equal(t, ref[k]), k


def test_load_into_numpy(tiny_ckpt: Path) -> None:
    import ml_dtypes
    plan = shardload.plan(tiny_ckpt, tp=2, dtype="f32")
    mine = {q.name: np.zeros(q.shape, np.float32) for q in plan.devices[1].params}
    shardload.load_into(tiny_ckpt, mine, tp=2, rank=1, dtype="f32")
    ref = shardload.load(tiny_ckpt, tp=2, devices=[1], dtype="f32").numpy(1)
    assert all(np.array_equal(mine[k], ref[k]) for k in ref)
    bf = {q.name: np.zeros(q.shape, ml_dtypes.bfloat16)
          for q in shardload.plan(tiny_ckpt, tp=2).devices[0].params}
    shardload.load_into(tiny_ckpt, bf, tp=2, rank=0)
    ref0 = shardload.load(tiny_ckpt, tp=2, devices=[0]).numpy(0)
    assert all(np.array_equal(bf[k].view(np.uint16), ref0[k].view(np.uint16)) for k in ref0)


def test_fake_cuda(tiny_ckpt: Path, fake_cudart: str) -> None:
    """device="cuda" on the host-memory stand-in, in a child process (a runtime stays loaded)."""
    code = f"""
import shardload, numpy as np
cpu = shardload.load({str(tiny_ckpt)!r}, tp=2)
m = shardload.load({str(tiny_ckpt)!r}, tp=2, device="cuda", gpus=[1, 0])
assert [x["gpu"] for x in m.stats["devices"]] == [1, 0], m.stats
# the CLI's --json fields: the GPU's free memory before and after the device's allocation
assert all(x["mem_free_before"] - x["mem_free_after"] >= x["allocated_bytes"] > 0
           for x in m.stats["devices"]), m.stats
assert all("mem_free_before" not in x for x in cpu.stats["devices"]), cpu.stats
for d in (0, 1):
    assert m.checksums(d) == cpu.checksums(d)
    v = m._view(d, 0, m.plan.devices[d].params[0])
    assert v.__dlpack_device__() == (2, 1 - d)
name = "model.norm.weight"
assert np.array_equal(m.read(1, name).view(np.uint16), cpu.numpy(1)[name].view(np.uint16))
try:
    m.numpy(0)
    raise SystemExit("numpy() of device memory did not fail")
except shardload.DeviceError as e:
    assert "torch" in e.message
print("ok")
"""
    env = dict(os.environ, SL_CUDART=fake_cudart, FAKE_CUDA_GPUS="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_gil_released_while_loading(tiny_ckpt: Path) -> None:
    """Another Python thread runs while loads are in the library: ctypes drops the GIL."""
    sys.setswitchinterval(0.1)  # a thread holding the GIL keeps it for 100 ms
    try:
        stop = threading.Event()
        ticks = [0]

        def spin() -> None:
            while not stop.is_set():
                ticks[0] += 1
        t = threading.Thread(target=spin)
        t.start()
        gil_free = 0
        for _ in range(10):
            before = ticks[0]
            shardload.load(tiny_ckpt, tp=2, staging=1 << 20, progress=False)
            gil_free += ticks[0] > before
        stop.set()
        t.join()
    finally:
        sys.setswitchinterval(0.005)
    # With a long switch interval the spinner runs inside a load only if the load lets go of the
    # GIL (a load here takes a few ms).
    assert gil_free >= 8, gil_free


def test_plan_from_boxes(tmp_path: Path) -> None:
    """Plan.from_boxes: each device's parameters are its boxes in order, of their tensors'
    dtypes or the targets given (a scalar, a 1-D and a 2-D tensor, names not ASCII); boxes
    that are not counts of elements, or whose start and length differ in length, are a
    ValueError before the C planner sees them; describe=False checks and totals the plan with
    no parameter read back."""
    from safetensors.numpy import save_file
    from shardload._dtypes import VALUE
    save_file({"s": np.array(3.0, np.float32), "v.é": np.arange(6, dtype=np.float32),
               "m": np.arange(12, dtype=np.float32).reshape(3, 4)}, str(tmp_path / "a.safetensors"))
    boxes = [("m", 1, (1, 0), (2, 4)), ("s", 0, (), ()), ("v.é", 0, (2,), (3,)),
             ("m", 0, (0, 2), (3, 2))]
    with shardload.open(tmp_path) as ck:
        p = shardload.Plan.from_boxes(ck, boxes, 2, targets={"m": VALUE["BF16"], "s": -1,
                                                             "v.é": -1})
        got = [[(q.name, q.dtype, q.shape, q.nbytes) for q in d.params] for d in p.devices]
        assert got == [[("s", "F32", (), 4), ("v.é", "F32", (3,), 12), ("m", "BF16", (3, 2), 12)],
                       [("m", "BF16", (2, 4), 16)]]
        quiet = shardload.Plan.from_boxes(ck, boxes, 2, describe=False)
        assert quiet.devices == [] and quiet.read_bytes == p.read_bytes > 0
        with pytest.raises(ValueError, match="start and length differ"):
            shardload.Plan.from_boxes(ck, [("m", 0, (0, 0), (3,))], 1)
        for bad in [("m", 0, (-1, 0), (3, 4)), ("m", 0, (1.7, 0), (2, 4)),
                    ("m", 0, (0, 0), ("3", 4)), ("m", 0, (0, 0), (3, 2**64))]:
            with pytest.raises(ValueError, match="not a count of elements"):
                shardload.Plan.from_boxes(ck, [bad], 1)
        for dev in (0.0, 2**32, "0"):
            with pytest.raises(ValueError, match="not a mesh device's index"):
                shardload.Plan.from_boxes(ck, [("m", dev, (0, 0), (3, 4))], 1)
        assert "2 devices" in repr(quiet)
        with pytest.raises(shardload.Error, match="m"):
            shardload.Plan.from_boxes(ck, [("m", 0, (2, 0), (2, 4))], 1)  # past row 3


def test_plan_describe_false_reads_one_device(tiny_ckpt: Path) -> None:
    with shardload.open(tiny_ckpt) as ck:
        full = shardload.Plan(ck, tp=2)
        quiet = shardload.Plan(ck, tp=2, describe=False)
        assert quiet.devices == [] and quiet.total_bytes == full.total_bytes
        assert quiet.device(1) == full.devices[1] and full.device(0) == full.devices[0]
        with pytest.raises(IndexError, match="device 2: the plan has 2 devices"):
            quiet.device(2)
        quiet.close()
        with pytest.raises(ValueError, match="closed"):
            quiet.device(0)
