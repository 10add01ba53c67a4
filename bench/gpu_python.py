#!/usr/bin/env python3
"""gpu_python.py CKPT - the Python package on a GPU, for bench/gpu_check.sh: shardload.load(...,
device="cuda") against the cpu backend (checksums), torch() views on the right GPU with the
library's pointers, load_into an engine's own CUDA tensors, and their times. Runs the package from
the source tree (PYTHONPATH=python, SHARDLOAD_LIBRARY=the build's libshardload.so): nothing to
install on the GPU machine. Prints one JSON line {"python": {...}}; the torch parts are reported as
skipped when torch has no CUDA (the dry run on the host-memory stand-in)."""
import json
import sys
import time

import shardload

TP, DEVICES = 8, [0, 5]


def timed(fn):
    t = time.perf_counter()
    v = fn()
    return v, time.perf_counter() - t


def torch_checks(ck, m, r):
    import torch
    gpus = torch.cuda.device_count()
    for k, d in enumerate(DEVICES):
        gpu = m.stats["devices"][k]["gpu"]
        views = m.torch(d)
        r.setdefault("views_on_gpu", True)
        r.setdefault("views_zero_copy", True)
        for i, (name, t) in enumerate(views.items()):
            r["views_on_gpu"] &= t.device == torch.device("cuda", gpu)
            r["views_zero_copy"] &= t.data_ptr() == m._ptr(d, i)
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


def main():
    ck = sys.argv[1]
    r = {"tp": TP, "devices": DEVICES}
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
    print(json.dumps({"python": r}))


if __name__ == "__main__":
    main()
