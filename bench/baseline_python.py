#!/usr/bin/python3
"""Python loaders that `make bench` compares shardload with, on the same files in the same run.

  baseline_python.py numpy CKPT_DIR T   numpy.memmap of each file, then per rank: slice the rank's
                                        part of every tensor and copy it into new memory
  baseline_python.py torch CKPT_DIR T   what vLLM's default loader does per rank: materialize the
                                        whole tensor on CPU (as safetensors' get_tensor does), then
                                        narrow it to the rank's part and copy into the parameter

Each prints one JSON line: seconds, bytes placed, peak RSS. The rank's part is the TP cut of
SHARDING.md without fusing (column-parallel rows, row-parallel columns for o_proj/down_proj,
1-D tensors replicated): the same bytes shardload places, in the same number of ranks.
"""
import json
import os
import resource
import struct
import sys
import time


def headers(ckdir):
    idx = os.path.join(ckdir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(x for x in os.listdir(ckdir) if x.endswith(".safetensors"))
    for name in files:
        path = os.path.join(ckdir, name)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
        h.pop("__metadata__", None)
        yield path, 8 + n, h


def rank_slice(name, shape, T, r):
    """Index tuple of rank r's part."""
    if len(shape) == 1:
        return (slice(None),)
    if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
        c = shape[1] // T
        return (slice(None), slice(r * c, (r + 1) * c))
    c = -(-shape[0] // T)
    return (slice(r * c, min((r + 1) * c, shape[0])), slice(None))


def run_numpy(ckdir, T):
    import numpy as np
    keep, nbytes = [], 0
    for r in range(T):                      # each rank is its own loader, as in a TP job
        for path, start, h in headers(ckdir):
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            for name, t in h.items():
                b, e = t["data_offsets"]
                esz = {"BF16": 2, "F16": 2, "F32": 4}[t["dtype"]]
                arr = mm[start + b:start + e].view("<u%d" % esz).reshape(t["shape"])
                part = np.array(arr[rank_slice(name, t["shape"], T, r)])
                nbytes += part.nbytes
                keep.append(part)
    return nbytes


def run_torch(ckdir, T):
    import torch
    dt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    keep, nbytes = [], 0
    for r in range(T):                      # each rank reads every tensor whole, as vLLM's ranks do
        for path, start, h in headers(ckdir):
            with open(path, "rb") as f:
                for name, t in h.items():
                    b, e = t["data_offsets"]
                    f.seek(start + b)
                    whole = torch.frombuffer(bytearray(f.read(e - b)),
                                             dtype=dt[t["dtype"]]).reshape(t["shape"])
                    part = whole[rank_slice(name, t["shape"], T, r)]
                    param = torch.empty(part.shape, dtype=part.dtype)
                    param.copy_(part)
                    nbytes += param.numel() * param.element_size()
                    keep.append(param)
                    del whole
    return nbytes


def main():
    mode, ckdir, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t0 = time.monotonic()
    nbytes = {"numpy": run_numpy, "torch": run_torch}[mode](ckdir, T)
    dt = time.monotonic() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "seconds": dt, "bytes": nbytes, "gbps": nbytes / dt / 1e9,
                      "peak_rss_bytes": rss}))


if __name__ == "__main__":
    main()
