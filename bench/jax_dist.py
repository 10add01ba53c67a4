#!/usr/bin/env python3
"""jax_dist.py CKPT OUT_JSONL OUT_MD - shardload.jax.load in a two-process jax.distributed job on
this machine (make bench): dist="independent" against dist="cooperative", same files and mesh.

Each run starts two fresh processes (loopback coordinator, gloo collectives), each with 4 virtual
CPU devices, one global (2, 4) mesh with axes ("data", "model"); the shardings are the default
spmd rule on "model", so every tensor is replicated over "data", that is across the processes:
independent, each process reads all of it; cooperative, each reads its half and XLA all-gathers
the halves over "data". Per process: seconds of the load (arrays ready), the bytes its engine read
(stats["bytes_read"]), the bytes it read from storage (/proc/self/io read_bytes: cold, the page
cache dropped as root, each process's O_DIRECT reads), the gather's seconds, and peak RSS minus
the bytes its devices hold (on CPU device memory is host memory). Rounds interleaved, hot and cold.

On one machine the two processes share a disk and a page cache and their "interconnect" is gloo
over TCP loopback on the same cores: the gather here costs what it would not over ICI or NVLink,
and the storage saved is this disk's, where on several hosts it would be each host's.

Knobs: BENCH_ROUNDS (default 2).
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from jax_peers import drop_caches, files_of, warm  # this folder: the same cache handling

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
MODES = ("independent", "cooperative")

CHILD = r"""
import json, os, resource, sys, time
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, numpy as np
port, pid, path, dist = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=pid, initialization_timeout=120)
import shardload.jax as sj
from jax.sharding import Mesh
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
def disk():
    with open("/proc/self/io") as f:
        return next(int(v) for k, v in (ln.split(": ") for ln in f.read().splitlines())
                    if k == "read_bytes")
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
d0, t0, st = disk(), time.perf_counter(), {}
arrays = sj.load(path, mesh, dist=dist, stats=st)
for a in arrays.values():
    a.block_until_ready()
secs = time.perf_counter() - t0
held = sum(s.data.nbytes for a in arrays.values() for s in a.addressable_shards)
print(json.dumps({"pid": pid, "seconds": secs, "bytes_read": st["bytes_read"], "disk": disk() - d0,
                  "gather_s": st["gather_seconds"], "gathered": st["gathered_tensors"],
                  "tensors": len(arrays), "held": held, "idle_rss": idle,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
jax.distributed.shutdown()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(ck, dist):
    """The two processes of one load; their JSON lines, or an error."""
    port = str(free_port())
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, port, str(pid), ck, dist],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for pid in (0, 1)]
    out = []
    try:
        for p in procs:
            so, se = p.communicate(timeout=900)
            if p.returncode != 0:
                return {"error": (se.strip().splitlines() or ["failed"])[-1][:300]}
            out.append(json.loads(so.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {"procs": out}


def main():
    ck, out_jsonl, out_md = sys.argv[1:4]
    rows, broken, cold_ok = [], {}, True
    for r in range(ROUNDS):
        for cache in ("hot", "cold"):
            for dist in MODES:
                if dist in broken:
                    continue
                if cache == "hot":
                    warm(ck)
                else:
                    cold_ok = drop_caches(ck) and cold_ok
                load = os.getloadavg()[0]
                res = job(ck, dist)
                if "error" in res:
                    broken[dist] = res["error"]
                    print(f"jax_dist: {dist}: not run: {res['error']}", file=sys.stderr)
                    continue
                secs = max(p["seconds"] for p in res["procs"])
                rows.append({"round": r, "cache": cache, "dist": dist, "loadavg": load,
                             "seconds": secs, "procs": res["procs"]})
                print(f"jax_dist: round {r} {cache} {dist}: {secs:.2f} s", file=sys.stderr)
    with open(out_jsonl, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(out_md, "w") as f:
        f.write(report(rows, broken, cold_ok, ck))


def gb(x):
    return f"{x / 1e9:.2f}"


def report(rows, broken, cold_ok, ck):
    size = sum(os.path.getsize(f) for f in files_of(ck))
    out = [f"\n## JAX, two processes: dist independent and cooperative ({time.strftime('%Y-%m-%d')})\n",
           f"Produced by `bench/jax_dist.py` (in `make bench`): {os.path.basename(ck)}, "
           f"{gb(size)} GB in {len(files_of(ck))} files; two jax.distributed processes on this "
           "machine (loopback coordinator, gloo collectives), 4 virtual CPU devices each, a global "
           "(2, 4) mesh (\"data\", \"model\"), the default spmd rule on \"model\": every tensor is "
           "replicated across the processes. Independent: each process reads all of it. "
           "Cooperative: each reads its half and XLA all-gathers the halves over \"data\". Seconds: "
           "the slower process, arrays ready; the byte columns give process 0 / process 1. Disk: "
           "/proc/self/io read_bytes (cold: page cache dropped; O_DIRECT reads). Beyond: peak RSS "
           "minus the bytes the process's devices hold minus the process before the load (CPU "
           f"device memory is host memory). Median of {ROUNDS} interleaved rounds."
           + ("" if cold_ok else " Cold runs could not drop the page cache (not root): they are warm.")
           + "\n",
           "On one machine both processes share the disk and the page cache, and gloo over TCP "
           "loopback on the same two cores stands in for the devices' interconnect: the gather "
           "costs here what it would not over ICI or NVLink, and the storage saved is one disk's, "
           "where on several hosts it is every host's.", ""]
    la = [x["loadavg"] for x in rows]
    if la:
        out += [f"Machine load (1-minute load average when each run started): median "
                f"{statistics.median(la):.2f}, max {max(la):.2f} on {os.cpu_count()} cores.", ""]
    out += ["| cache | dist | seconds (min-max) | gather s | engine read per process, GB | "
            "disk read per process, GB | beyond the arrays, MiB | tensors gathered |",
            "|---|---|---|---:|---|---|---|---:|"]
    for cache in ("hot", "cold"):
        for dist in MODES:
            xs = [x for x in rows if x["cache"] == cache and x["dist"] == dist]
            if not xs:
                continue
            s = [x["seconds"] for x in xs]
            last = xs[-1]["procs"]
            g = statistics.median(max(p["gather_s"] for p in x["procs"]) for x in xs)
            beyond = max(p["peak_rss"] - p["held"] - p["idle_rss"] for x in xs for p in x["procs"])
            out.append(f"| {cache} | {dist} | {statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f}) | "
                       f"{g:.2f} | {' / '.join(gb(p['bytes_read']) for p in last)} | "
                       f"{' / '.join(gb(p['disk']) for p in last)} | {beyond / 2**20:,.0f} | "
                       f"{last[0]['gathered']} of {last[0]['tensors']} |")
    for dist, why in broken.items():
        out.append(f"\n{dist}: not run: {why}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
