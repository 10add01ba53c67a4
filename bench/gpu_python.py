#!/usr/bin/env python3
"""gpu_python.py CKPT - the Python package on a GPU, for bench/gpu_check.sh: shardload.load(...,
device="cuda") against the cpu backend (checksums), torch() views on the right GPU with the
library's pointers, load_into an engine's own CUDA tensors, and their times. Runs the package from
the source tree (PYTHONPATH=python, SHARDLOAD_LIBRARY=the build's libshardload.so): nothing to
install on the GPU machine. Also shardload.jax onto the GPUs (JAX's CUDA plugin) against its CPU
result, with its slabs DMA-mapped (client.dma_map) and plain, and the tpu-inference way (safe_open +
device_put per tensor). Knobs: GPU_JAX_LAYERS (default 8), GPU_JAX_REPS (default 2). Prints one JSON line
{"python": {...}}; the torch and JAX parts are reported as skipped where torch has no CUDA or JAX
no GPU (the dry run on the host-memory stand-in). GPU_JAX_PLATFORM=cpu runs the JAX part on JAX's CPU
devices instead (tests/python/test_gpu_scripts.py)."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, TypeVar

import shardload

T = TypeVar("T")

TP, DEVICES = 8, [0, 5]


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    t = time.perf_counter()
    v = fn()
    return v, time.perf_counter() - t


def torch_checks(ck: str, m: shardload.Model, r: dict[str, Any]) -> None:
    import torch
    gpus = torch.cuda.device_count()
    for k, d in enumerate(DEVICES):
        gpu = m.stats["devices"][k]["gpu"]
        views = m.torch(d)
        r.setdefault("views_on_gpu", True)
        r.setdefault("views_zero_copy", True)
        for i, (name, t) in enumerate(views.items()):
            r["views_on_gpu"] &= t.device == torch.device("cuda", gpu)
            r["views_zero_copy"] &= t.data_ptr() == m._ptr(m._h(), d, i)
    rank = DEVICES[-1]
    plan = m.plan
    torch.cuda.synchronize()
    mine = {q.name: torch.empty(q.shape, dtype=torch.bfloat16, device=f"cuda:{gpus - 1}")
            for q in plan.devices[rank].params}
    torch.cuda.synchronize()
    stats, r["load_into_s"] = timed(lambda: shardload.load_into(ck, mine, tp=TP, rank=rank))
    ref = shardload.load(ck, tp=TP, devices=[rank], device="cuda", gpus=[gpus - 1] * TP).torch(rank)
    r["load_into_equal"] = all(torch.equal(mine[k], ref[k]) for k in ref)
    r["load_into_bytes"] = stats["devices"][0]["allocated_bytes"]


JAX_LAYERS = int(os.environ.get("GPU_JAX_LAYERS", "8"))   # the embedding and this many layers
JAX_STAGING = 512 << 20   # for the dma / plain pair: slabs of 224 MiB hold Llama-3-8B's largest box
JAX_REPS = int(os.environ.get("GPU_JAX_REPS", "2"))
# "cpu": the JAX part on JAX's CPU devices, for the dry run (tests/python/test_gpu_scripts.py)
JAX_PLATFORM = os.environ.get("GPU_JAX_PLATFORM", "gpu")


def jax_checks(ck: str, r: dict[str, Any]) -> None:
    """shardload.jax onto the GPUs (one mesh axis over them) for the embedding and the first
    JAX_LAYERS layers, each load checked against the same load onto JAX's CPU device: with the
    default settings (jax_load_s), then with JAX_STAGING of staging with its two slabs DMA-mapped
    (client.dma_map, jax_dma_load_s) and plain (dma=False, jax_plain_load_s), interleaved, best of
    JAX_REPS; timed against the tpu-inference way (safe_open, then device_put(x, NamedSharding)
    per tensor). At the default 64 MiB staging most of Llama-3-8B's boxes on one GPU are larger
    than a slab: they go through the slabs in bands of rows, written into their buffers on the
    GPU (stats parts, assemble_seconds); the pair with 512 MiB has fewer of them."""
    import jax
    import numpy as np
    import shardload.jax as sj
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    gpus = jax.devices(JAX_PLATFORM)
    layers = tuple(f"model.layers.{i}." for i in range(JAX_LAYERS))
    names = [t.name for t in shardload.open(ck).tensors
             if t.name.startswith(("model.embed_tokens",) + layers)]
    mesh = Mesh(np.array(gpus), ("model",))
    specs = {n: NamedSharding(mesh, P("model") if n.endswith("proj.weight") or "embed" in n else P())
             for n in names}
    cpu = Mesh(np.array(jax.devices("cpu")[:1]), ("model",))
    ref = {n: np.asarray(a) for n, a in sj.load(ck, cpu, {n: NamedSharding(cpu, P()) for n in names}).items()}
    jax.block_until_ready(jax.device_put(np.ones(1 << 20, np.uint8), gpus[0]))  # the first put's set-up
    equal = []

    def run(**kw: Any) -> tuple[float, dict[str, Any], bool, int]:
        st: dict[str, Any] = {}
        arrays, s = timed(lambda: jax.block_until_ready(sj.load(ck, mesh, specs, stats=st, **kw)))
        equal.append(all(np.array_equal(np.asarray(arrays[n]).view(np.uint8), ref[n].view(np.uint8))
                         for n in names))
        on = all(sh.device.platform == JAX_PLATFORM for a in arrays.values() for sh in a.addressable_shards)
        nbytes = sum(a.nbytes for a in arrays.values())
        del arrays
        keep = ("staging", "dma", "groups", "slabs", "reused", "oversize_groups", "parts",
                "assembled_boxes", "copied_bytes", "c_load_seconds", "put_seconds",
                "assemble_seconds")
        return s, {k: st[k] for k in keep}, on, nbytes
    r["jax_load_s"], r["jax_stats"], r["jax_on_gpus"], r["jax_bytes"] = run()
    r["jax_staging"], r["jax_dma"] = r["jax_stats"]["staging"], r["jax_stats"]["dma"]
    times: dict[str, list[float]] = {"dma": [], "plain": []}
    for _ in range(JAX_REPS):
        for kind in times:
            s, st, on, _ = run(staging=JAX_STAGING, dma=kind == "dma")
            times[kind].append(s)
            r[f"jax_{kind}_stats"] = st
            r["jax_on_gpus"] &= on
    r["jax_pair_staging"] = JAX_STAGING
    r["jax_dma_load_s"], r["jax_plain_load_s"] = min(times["dma"]), min(times["plain"])
    r["jax_dma_load_all_s"], r["jax_plain_load_all_s"] = times["dma"], times["plain"]
    r["jax_equal_cpu"] = all(equal)   # every load above: default, dma-mapped and plain
    host_memory(ck, mesh, specs, ref, r)
    del ref
    from safetensors import safe_open

    def peer() -> dict[str, Any]:
        out: dict[str, Any] = {}
        by_file: dict[str, list[str]] = {}
        for t in shardload.open(ck).tensors:
            if t.name in specs:
                by_file.setdefault(t.file, []).append(t.name)
        for f, ns in by_file.items():
            with safe_open(f, framework="flax") as h:
                for n in ns:
                    out[n] = jax.device_put(h.get_tensor(n), specs[n])
        return jax.block_until_ready(out)
    _, r["jax_peer_device_put_s"] = timed(peer)


def host_memory(ck: str, mesh: Any, specs: dict[str, Any], ref: dict[str, Any],
                r: dict[str, Any]) -> None:
    """The same shardings with memory_kind "pinned_host" (JAX's host offloading): each shard in
    its GPU's pinned host memory, equal to the CPU result; or why not (a platform without it)."""
    import jax
    import numpy as np
    import shardload.jax as sj
    from jax.sharding import NamedSharding
    kinds = {m.kind for m in mesh.devices.flat[0].addressable_memories()}
    if "pinned_host" not in kinds:
        r["jax_pinned_skipped"] = f"no pinned_host memory (memories: {sorted(kinds)})"
        return
    pinned = {n: NamedSharding(mesh, s.spec, memory_kind="pinned_host") for n, s in specs.items()}
    try:
        arrays, r["jax_pinned_load_s"] = timed(lambda: jax.block_until_ready(sj.load(ck, mesh, pinned)))
    except Exception as e:  # noqa: BLE001 - reported, the rest of the check goes on
        r["jax_pinned_error"] = f"{type(e).__name__}: {e}"[:300]
        return
    r["jax_pinned_in_kind"] = all(sh.data.sharding.memory_kind == "pinned_host"
                                  for a in arrays.values() for sh in a.addressable_shards)
    r["jax_pinned_equal_cpu"] = all(np.array_equal(np.asarray(arrays[n]).view(np.uint8),
                                                   ref[n].view(np.uint8)) for n in arrays)


def jax_start(r: dict[str, Any]) -> bool:
    """JAX's devices, made first: its CUDA plugin loads and checks its own NVIDIA libraries, which
    torch's, loaded before them in the same process, could shadow. False (and why) without them."""
    try:
        import jax
        r["jax"] = jax.__version__
        if not jax.devices(JAX_PLATFORM):
            raise RuntimeError("no GPU devices")
    except Exception as e:  # noqa: BLE001 - no JAX or no CUDA plugin: reported, gpu_check says so
        r["jax_skipped"] = f"{type(e).__name__}: {e}"[:300]
        return False
    return True


def main() -> None:
    ck = sys.argv[1]
    r: dict[str, Any] = {"tp": TP, "devices": DEVICES}
    with_jax = jax_start(r)
    cpu, r["load_cpu_s"] = timed(lambda: shardload.load(ck, tp=TP, devices=DEVICES))
    m, r["load_cuda_s"] = timed(lambda: shardload.load(ck, tp=TP, devices=DEVICES, device="cuda"))
    r["bytes"] = sum(x["allocated_bytes"] for x in m.stats["devices"])
    r["checksums_equal"] = all(m.checksums(d) == cpu.checksums(d) for d in DEVICES)
    r["stats_seconds"] = m.stats["seconds"]
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch.cuda.is_available() is False")
    except ImportError as e:
        r["torch_skipped"] = str(e)
    else:
        torch_checks(ck, m, r)
    if with_jax:
        jax_checks(ck, r)
    print(json.dumps({"python": r}))


if __name__ == "__main__":
    main()
