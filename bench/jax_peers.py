#!/usr/bin/env python3
"""jax_peers.py CKPT OUT_JSONL OUT_MD - shardload.jax.load against the ways JAX users load a
safetensors checkpoint onto a mesh, on the same files and mesh in one run (make bench):

  shardload.jax   shardload.jax.load(path, mesh, specs)
  device_put      the tpu-inference way: per file safe_open(framework="flax"), per tensor
                  jax.device_put(x, NamedSharding(mesh, spec))
  orbax           orbax-checkpoint's v1 loader with its SAFETENSORS layout and the same target
                  shardings (ocp.load with an abstract state), when the installed version has it

The mesh is 8 virtual CPU devices (XLA_FLAGS, set here), one axis "model"; the shardings are
shardload's default (the planner's spmd rule), given to every contender. Each run is a fresh
subprocess (its own peak RSS), rounds interleaved, hot (page cache warm) and cold (caches dropped,
as root). On CPU the devices' memory is host memory, so "beyond" is peak RSS minus the bytes the
devices hold minus an idle process with the same imports.

Knobs: BENCH_ROUNDS (default 3); BENCH_JAX_CONTENDERS (comma-separated, default all three);
BENCH_JAX_TITLE (the report's heading, default "JAX peers"). make bench also runs it on an
MoE-shaped checkpoint of small tensors (Qwen3-30B-A3B's 48 layers of 128 experts, 18,867
tensors, 150,000 shards on 8 devices): what each contender costs per tensor and per shard.

Two measurements of the path for devices that copy (GPU, TPU), on CPU, outside make bench:
  jax_peers.py --group-cost CKPT   one C load of a ~28 MiB group (the bound at 64 MiB staging)
                                   into fresh host buffers vs into buffers already touched (the
                                   slabs), engine staging 1 and 8 MiB: ms and minor page faults
  jax_peers.py --copying CKPT      shardload.jax.load with every CPU device_put made to copy
                                   (buffers 16 bytes off XLA's alignment), dma=None vs dma=False,
                                   each run a fresh process: seconds and the load's stats
                                   (BENCH_JAX_MESH=2,4: a (data, model) mesh instead of 8
                                   devices on one axis; the default rule replicates over data)
Each prints JSON lines, BENCH_ROUNDS rounds (default 3), with the load average.
"""
import json
import os
import statistics
import subprocess
import sys
import time

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))

CHILD = r"""
import json, os, resource, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding
import shardload, shardload.jax as sj, shardload.jax._shardings as jsh
path, how = sys.argv[1], sys.argv[2]
mesh = Mesh(np.array(jax.devices()[:8]), ("model",))
with shardload.open(path) as ck:
    specs = {n: NamedSharding(mesh, s) for n, s in jsh.default_specs(ck, mesh, None, None)[0].items()}
    files = {}
    for t in ck.tensors:
        if t.name in specs:
            files.setdefault(t.file, []).append(t.name)
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
if how == "shardload.jax":
    out = sj.load(path, mesh, specs)
elif how == "device_put":
    from safetensors import safe_open
    out = {}
    for f, names in files.items():
        with safe_open(f, framework="flax") as h:
            for n in names:
                out[n] = jax.device_put(h.get_tensor(n), specs[n])
elif how == "orbax":
    from orbax.checkpoint import v1 as ocp
    with ocp.Context(checkpoint_layout=ocp.options.CheckpointLayout.SAFETENSORS):
        meta = ocp.metadata(path).metadata
        abstract = {n: jax.ShapeDtypeStruct(meta[n].shape, meta[n].dtype, sharding=specs[n])
                    for n in specs}
        out = ocp.load(path, abstract_state=abstract)
else:
    raise SystemExit("unknown contender " + how)
jax.block_until_ready(out)
sec = time.perf_counter() - t0
held = sum(s.data.nbytes for a in out.values() for s in a.addressable_shards)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": sec, "held": held, "peak_rss": peak, "idle_rss": idle,
                  "tensors": len(out)}))
"""

CONTENDERS = os.environ.get("BENCH_JAX_CONTENDERS", "shardload.jax,device_put,orbax").split(",")
TITLE = os.environ.get("BENCH_JAX_TITLE", "JAX peers")


GROUP_COST = r"""
import ctypes, json, os, resource, sys, time
import numpy as np
from shardload.checkpoint import Checkpoint
from shardload.plan import Plan
from shardload.model import _load_opts, _run, _set_list
ck, rounds = Checkpoint(sys.argv[1]), int(sys.argv[2])
boxes, n = [], 0
for t in ck.tensors:
    nb = int(np.prod(t.shape)) * 2
    if len(t.shape) == 2 and "embed" not in t.name and n + nb <= 28 << 20:
        boxes.append((t.name, 0, (0, 0), tuple(t.shape)))
        n += nb
plan = Plan.from_boxes(ck, boxes, 1, None)
def load(bufs, staging):
    row = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    table = (ctypes.POINTER(ctypes.c_void_p) * 1)(ctypes.cast(row, ctypes.POINTER(ctypes.c_void_p)))
    o = _load_opts("cpu", "auto", staging, 0, False, 1234)
    _set_list(o, [row], "devices", "n_devices", [0])
    o.param_dest, o.n_param_dest = table, 1
    f, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    _run(ck, plan, o, False)
    return time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f
fresh = lambda: [np.empty(p.nbytes, np.uint8) for p in plan.devices[0].params]
kept = fresh()
load(kept, 1 << 20)
for r in range(rounds):
    for staging in (1 << 20, 8 << 20):
        for kind in ("fresh", "reused"):
            s, faults = load(fresh() if kind == "fresh" else kept, staging)
            print(json.dumps({"round": r, "group_bytes": n, "engine_staging": staging, "dest": kind,
                              "ms": 1e3 * s, "minor_faults": faults, "loadavg": os.getloadavg()[0]}))
"""

COPYING = r"""
import json, os, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np
from jax.sharding import Mesh
import shardload.jax as sj, shardload.jax._loader as jl, shardload.jax._staging as jst
def misaligned(shape, dtype, nbytes):
    raw = np.empty(nbytes + 128, np.uint8)
    off = -raw.ctypes.data % 64 + 16
    return raw[off:off + nbytes].view(dtype).reshape(shape)
jst.host_buffer, jl.adopts = misaligned, lambda devices: False
jst.slab = lambda nbytes: misaligned((nbytes,), np.uint8, nbytes)
shape = [int(n) for n in os.environ.get("BENCH_JAX_MESH", "8").split(",")]
mesh = Mesh(np.array(jax.devices()[:8]).reshape(shape), ("data", "model")[-len(shape):])
jax.block_until_ready(jax.device_put(np.ones(1 << 20, np.uint8), jax.devices()[0]))
st, t = {}, time.perf_counter()
jax.block_until_ready(sj.load(sys.argv[1], mesh, dma=None if sys.argv[2] == "auto" else False, stats=st))
print(json.dumps({"dma_arg": sys.argv[2], "wall_seconds": time.perf_counter() - t, **st}))
"""


def side_measure(mode, ck):
    for r in range(ROUNDS):
        if mode == "--group-cost":
            if r == 0:
                subprocess.run([sys.executable, "-c", GROUP_COST, ck, str(ROUNDS)], check=True)
            continue
        for dma in ("auto", "off"):
            p = subprocess.run([sys.executable, "-c", COPYING, ck, dma], capture_output=True,
                               text=True, check=True)
            row = json.loads(p.stdout.strip().splitlines()[-1])
            print(json.dumps({"round": r, "loadavg": os.getloadavg()[0], **row}), flush=True)


def files_of(ck):
    return [os.path.join(ck, f) for f in sorted(os.listdir(ck)) if f.endswith(".safetensors")]


def drop_caches(ck):
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def warm(ck):
    for f in files_of(ck):
        with open(f, "rb") as h:
            while h.read(16 << 20):
                pass


def run(ck, how):
    p = subprocess.run([sys.executable, "-c", CHILD, ck, how], capture_output=True, text=True,
                       timeout=1800)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    if sys.argv[1] in ("--group-cost", "--copying"):
        return side_measure(sys.argv[1], sys.argv[2])
    ck, out_jsonl, out_md = sys.argv[1:4]
    rows = []
    broken = {}
    cold_ok = True
    for r in range(ROUNDS):
        for cache in ("hot", "cold"):
            for how in CONTENDERS:
                if how in broken:
                    continue
                if cache == "hot":
                    warm(ck)
                else:
                    cold_ok = drop_caches(ck) and cold_ok
                load = os.getloadavg()[0]
                res = run(ck, how)
                if "error" in res:
                    broken[how] = res["error"]
                    print(f"jax_peers: {how}: not run: {res['error']}", file=sys.stderr)
                    continue
                rows.append({"round": r, "cache": cache, "name": how, "loadavg": load, **res})
                print(f"jax_peers: round {r} {cache} {how}: {res['seconds']:.2f} s", file=sys.stderr)
    with open(out_jsonl, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(out_md, "w") as f:
        f.write(report(rows, broken, cold_ok, ck))


def report(rows, broken, cold_ok, ck):
    size = sum(os.path.getsize(f) for f in files_of(ck))
    tensors = max((x.get("tensors", 0) for x in rows), default=0)
    out = [f"\n## {TITLE} ({time.strftime('%Y-%m-%d')})\n",
           f"Produced by `make bench` (`bench/jax_peers.py`): {os.path.basename(ck)}, "
           f"{size / 1e9:.2f} GB in {len(files_of(ck))} files, {tensors:,} tensors loaded, "
           f"onto a mesh of 8 virtual CPU devices "
           f"(one axis), shardload's default shardings given to every contender; median of "
           f"{ROUNDS} interleaved rounds, each run a fresh process."
           + ("" if cold_ok else " Cold runs could not drop the page cache (not root): they are warm.")
           + "\n",
           "\"shardload faster\" is the median of the contender's seconds over shardload.jax's, "
           "and in brackets the median of the same ratio taken within each round (runs next to "
           "each other in time, which a busy machine swings less).",
           ""]
    la = [x["loadavg"] for x in rows if "loadavg" in x]
    if la:
        busy = statistics.median(la) > (os.cpu_count() or 1) / 2
        out += ["Machine load (1-minute load average when each run started, other processes "
                f"included): median {statistics.median(la):.2f}, max {max(la):.2f} on "
                f"{os.cpu_count()} cores."
                + (" Other work shared the machine during this run: single runs swing widely "
                   "(see the min-max ranges); the memory figures do not." if busy else ""), ""]
    out += ["| contender | cache | seconds (min-max) | GB/s | peak RSS | beyond the device arrays | "
            "shardload faster |", "|---|---|---|---|---|---|---|"]
    for cache in ("hot", "cold"):
        ref = [x["seconds"] for x in rows if x["cache"] == cache and x["name"] == "shardload.jax"]
        ref_s = statistics.median(ref) if ref else None
        for how in CONTENDERS:
            xs = [x for x in rows if x["cache"] == cache and x["name"] == how]
            if not xs:
                continue
            s = [x["seconds"] for x in xs]
            med = statistics.median(s)
            peak = max(x["peak_rss"] for x in xs)
            beyond = max(x["peak_rss"] - x["held"] - x["idle_rss"] for x in xs)
            ratio = ""
            if ref_s and how != "shardload.jax":
                own = {x["round"]: x["seconds"] for x in rows
                       if x["cache"] == cache and x["name"] == "shardload.jax"}
                per = [x["seconds"] / own[x["round"]] for x in xs if x["round"] in own]
                ratio = f"{med / ref_s:.2f}x" + (f" ({statistics.median(per):.2f}x)" if per else "")
            out.append(f"| {how} | {cache} | {med:.2f} ({min(s):.2f}-{max(s):.2f}) | "
                       f"{size / med / 1e9:.2f} | {peak / 2**20:,.0f} MiB | {beyond / 2**20:,.0f} MiB | "
                       f"{ratio} |")
    for how, why in broken.items():
        out.append(f"\n{how}: not run: {why}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
