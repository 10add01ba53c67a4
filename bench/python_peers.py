#!/usr/bin/env python3
"""shardload's Python API against the Python loaders an engine would otherwise use (issue 13 item 5).

    .venv/bin/python bench/python_peers.py CKPT_DIR      # bench/python_peers.sh sets .venv up first

Every contender runs in its own fresh subprocess (so peak RSS is that contender's, from wait4's
ru_maxrss), on the same files, in interleaved rounds (every contender once a round, in a seeded
shuffle of the list), hot (files read into the page cache, then memory compacted) or cold (page
cache dropped, then compacted). That preparation runs right before the load starts: a Python
child imports and allocates first, says "ready" and waits for the parent's "go"; the CLI starts
once it is done. Every contender ends with the same bytes in
memory the process owns: the plan's parameters in vLLM's layout (SHARDING.md: fused qkv_proj and
gate_up_proj, vocab padded to 64, kv heads replicated), per rank, filled.

Scopes (the `scope` column):
  all    one process holds every one of the T ranks' shards. Peers read each tensor whole, once,
         through their own API, and copy each rank's slice into that rank's preallocated
         parameter (vLLM's weight_loader: narrow, then copy into the right rows of the fused
         parameter); the vLLM way opens the files once per rank and get_slice()s that rank's part.
         shardload: shardload.load(path, tp=T) (all devices); the CLI `load --tp T --json`.
  rank0  one process is rank 0 of T, as an engine's rank is: the same peers copying rank 0's
         slices only; shardload.load(path, tp=T, devices=[0]) and shardload.load_into(path,
         tensors, tp=T, rank=0). At T=1 the two scopes are the same and only `all` is run.

Contenders: safetensors.safe_open + get_tensor (framework="pt"), safetensors.torch.load_file,
fastsafetensors (SafeTensorsFileLoader on cpu, nogds=True, one file at a time as vLLM's iterator
does), runai-model-streamer (SafetensorsStreamer, device="cpu", default owned tensors), the vLLM
way (safe_open + get_slice + copy per rank), shardload.load, shardload.load_into, the CLI. At T=1
also fastsafetensors and runai "native": the library's own tensors (checkpoint names, unfused, no
copy into parameters): what transformers-style users keep.

Times exclude interpreter start-up and imports; they include allocating the destination (for
shardload.load, inside the library; peers' and load_into's parameters are torch.empty'd before
the clock starts, their first touch is in it) and, for shardload.load, making the torch views.
"beyond shards" = peak RSS - bytes of the shards the process holds - RSS of the same process
after its imports and before loading (for the CLI, no baseline is subtracted).

Knobs (environment): BENCH_ROUNDS (3), BENCH_PY_TP ("1 4"), BENCH_PY_CACHE ("hot cold"),
BENCH_PY_ONLY (comma-separated contender names), BENCH_PY_SEED (1: the order's shuffle), BENCH_PY_VERIFY (1: in round 1 every hot run
hashes its shards and the report checks them against shardload.load's), SL_CLI (build/shardload),
BENCH_PY_OUT (bench/python_peers.jsonl), BENCH_PY_MD (bench/python_peers.md).

Also: python_peers.py --child NAME CKPT_DIR TP SCOPE VERIFY (one run; prints one JSON line) and
python_peers.py --report JSONL MD (rewrite the table from a results file).
"""
from __future__ import annotations

import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STAGING = 64 << 20              # shardload's default staging budget (load(staging=...) default)
MIB = 1 << 20

# name -> (label, kind): kind "peer" (goal ratios apply), "native", "shardload", "cli"
CONTENDERS = {
    "safetensors.get_tensor": ("safetensors safe_open + get_tensor", "peer"),
    "safetensors.load_file": ("safetensors load_file", "peer"),
    "fastsafetensors": ("fastsafetensors (cpu, nogds)", "peer"),
    "runai": ("runai-model-streamer (cpu)", "peer"),
    "vllm-way": ("vLLM way: safe_open + get_slice + copy, per rank", "peer"),
    "fastsafetensors.native": ("fastsafetensors, own tensors (unfused, no copy)", "native"),
    "runai.native": ("runai-model-streamer, own tensors (unfused, no copy)", "native"),
    "shardload.load": ("shardload.load", "shardload"),
    "shardload.load_into": ("shardload.load_into", "shardload"),
    "cli": ("CLI `shardload load --json`", "cli"),
}
PEERS = [n for n, (_, k) in CONTENDERS.items() if k == "peer"]


def contenders(tps: list[int], only: set[str] | None) -> list[tuple[int, str, str]]:
    out = []
    for t in tps:
        scopes = ["all"] if t == 1 else ["all", "rank0"]
        for s in scopes:
            names = list(PEERS)
            if t == 1:
                names += ["fastsafetensors.native", "runai.native"]
            names.append("shardload.load")
            if s == "rank0" or t == 1:
                names.append("shardload.load_into")
            if s == "all":
                names.append("cli")
            out += [(t, s, n) for n in names if only is None or n in only]
    return out


# ---- the checkpoint and vLLM's tp layout, computed here independently of shardload -------------

def ckpt_files(ck: str) -> list[str]:
    idx = os.path.join(ck, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
    else:
        names = sorted(x for x in os.listdir(ck) if x.endswith(".safetensors"))
    return [os.path.join(ck, n) for n in names]


def ckpt_tensors(ck: str) -> dict[str, tuple[str, list[int]]]:
    """name -> (dtype, shape) from the safetensors headers."""
    import struct
    out = {}
    for path in ckpt_files(ck):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
        h.pop("__metadata__", None)
        out.update({k: (v["dtype"], v["shape"]) for k, v in h.items()})
    return out


class Layout:
    """vLLM's tensor-parallel layout of a Llama/Mistral/Qwen2/Qwen3 checkpoint at T ranks:
    params[r] = {name: shape}; ops[ckpt_name] = [(rank, param, dst_index, src_index)];
    zeros = [(rank, param, dst_index)] (vocab padding rows, zero-filled as vLLM does)."""

    def __init__(self, ck: str, T: int) -> None:
        with open(os.path.join(ck, "config.json")) as f:
            c = json.load(f)
        H, nh = c["hidden_size"], c["num_attention_heads"]
        K = c.get("num_key_value_heads") or nh
        D = c.get("head_dim") or H // nh
        I, V = c["intermediate_size"], c["vocab_size"]
        tied = bool(c.get("tie_word_embeddings", False))
        kl, rep = (K // T, 1) if T <= K else (1, T // K)
        qr, kvr, ir = nh // T * D, kl * D, I // T
        Vp = math.ceil(V / 64) * 64
        nv = Vp // T
        self.T = T
        self.dtype = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[
            c.get("torch_dtype") or c.get("dtype") or "bfloat16"]
        self.params: list[dict[str, tuple[int, ...]]] = [{} for _ in range(T)]
        self.ops: dict[str, list[tuple]] = defaultdict(list)
        self.zeros: list[tuple] = []
        self.skipped: set[str] = set()
        A = slice(None)
        for name, (_dt, shape) in ckpt_tensors(ck).items():
            if "rotary_emb." in name or (tied and name == "lm_head.weight"):
                self.skipped.add(name)
                continue
            base, _, leaf = name.rpartition(".")        # leaf: weight / bias
            for r in range(T):
                if name in ("model.embed_tokens.weight", "lm_head.weight"):
                    a, b = min(r * nv, V), min((r + 1) * nv, V)
                    self._param(r, name, (nv, H))
                    self._op(name, r, name, (slice(0, b - a),), (slice(a, b), A))
                    if b - a < nv:
                        self.zeros.append((r, name, (slice(b - a, nv),)))
                elif base.endswith(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")):
                    p = base.rsplit(".", 1)[0] + ".qkv_proj." + leaf
                    rows = qr + 2 * kvr
                    self._param(r, p, (rows, H) if leaf == "weight" else (rows,))
                    which = base[-6]                        # q / k / v
                    if which == "q":
                        dst, src = (0, qr), (r * qr, (r + 1) * qr)
                    else:
                        o = qr if which == "k" else qr + kvr
                        blk = r // rep
                        dst, src = (o, o + kvr), (blk * kvr, (blk + 1) * kvr)
                    self._op(name, r, p, (slice(*dst),), (slice(*src),) + (A,) * (len(shape) - 1))
                elif base.endswith(("mlp.gate_proj", "mlp.up_proj")):
                    p = base.rsplit(".", 1)[0] + ".gate_up_proj." + leaf
                    self._param(r, p, (2 * ir, H))
                    o = 0 if base.endswith("gate_proj") else ir
                    self._op(name, r, p, (slice(o, o + ir),), (slice(r * ir, (r + 1) * ir), A))
                elif base.endswith(("self_attn.o_proj", "mlp.down_proj")) and leaf == "weight":
                    cols = shape[1] // T
                    self._param(r, name, (shape[0], cols))
                    self._op(name, r, name, (A,), (A, slice(r * cols, (r + 1) * cols)))
                elif len(shape) == 1 and "norm" in name:
                    self._param(r, name, tuple(shape))
                    self._op(name, r, name, (A,), (A,))
                else:
                    raise SystemExit(f"python_peers: no tp rule for checkpoint tensor {name!r}")

    def _param(self, r: int, name: str, shape: tuple[int, ...]) -> None:
        self.params[r].setdefault(name, shape)

    def _op(self, ck_name: str, r: int, p: str, dst: tuple, src: tuple) -> None:
        self.ops[ck_name].append((r, p, dst, src))

    def nbytes(self, ranks: list[int]) -> int:
        esz = {"BF16": 2, "F16": 2, "F32": 4}[self.dtype]
        return sum(math.prod(s) * esz for r in ranks for s in self.params[r].values())


def check_layout(ck: str, T: int) -> None:
    """The layout above agrees with shardload.plan (names, shapes, dtypes) for every rank."""
    import shardload
    lay, plan = Layout(ck, T), shardload.plan(ck, tp=T)
    for r in range(T):
        mine = {n: tuple(s) for n, s in lay.params[r].items()}
        theirs = {p.name: tuple(p.shape) for p in plan.devices[r].params}
        if mine != theirs:
            diff = sorted(set(mine.items()) ^ set(theirs.items()))[:4]
            raise SystemExit(f"python_peers: tp={T} rank {r}: layout differs from shardload.plan: {diff}")
        dts = {p.dtype for p in plan.devices[r].params}
        if dts != {lay.dtype}:
            raise SystemExit(f"python_peers: plan dtypes {dts}, layout {lay.dtype}")


# ---- one contender, in a child process ---------------------------------------------------------

def rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def digest(t) -> str:
    import hashlib
    import torch
    return hashlib.sha1(t.contiguous().view(torch.uint8).reshape(-1).numpy().data).hexdigest()


def child(name: str, ck: str, T: int, scope: str, verify: bool) -> dict:
    import resource

    import torch
    ranks = list(range(T)) if scope == "all" else [0]
    lay = Layout(ck, T)
    files = ckpt_files(ck)
    tdt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[lay.dtype]
    params: dict[int, dict[str, torch.Tensor]] = {}
    native: dict[str, torch.Tensor] = {}
    res: dict = {}
    cpu0 = [0.0]

    def ready() -> None:
        """Imports done, destination allocated: tell the parent, which prepares the page cache
        (warm or dropped) and compacts memory now, and wait for its go."""
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("python_peers: no go from the parent")

    def start() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu0[0] = ru.ru_utime + ru.ru_stime
        return time.monotonic()

    def alloc() -> None:
        for r in ranks:
            params[r] = {n: torch.empty(s, dtype=tdt) for n, s in lay.params[r].items()}

    def fill(ck_name: str, whole: torch.Tensor) -> None:
        ops = lay.ops.get(ck_name)
        if ops is None:
            if ck_name in lay.skipped:
                return
            raise SystemExit(f"unexpected tensor {ck_name}")
        for r, p, dst, src in ops:
            if r in params:
                params[r][p][dst].copy_(whole[src])

    def zero_pad() -> None:
        for r, p, dst in lay.zeros:
            if r in params:
                params[r][p][dst].zero_()

    if name == "safetensors.get_tensor":
        from safetensors import safe_open
        alloc()
        ready()
        base = rss_now()
        t0 = start()
        for f in files:
            with safe_open(f, framework="pt") as so:
                for k in so.keys():
                    fill(k, so.get_tensor(k))
        zero_pad()
    elif name == "safetensors.load_file":
        from safetensors.torch import load_file
        alloc()
        ready()
        base = rss_now()
        t0 = start()
        for f in files:
            sd = load_file(f)
            for k in list(sd):
                fill(k, sd.pop(k))
            del sd
        zero_pad()
    elif name in ("fastsafetensors", "fastsafetensors.native"):
        from fastsafetensors import SafeTensorsFileLoader, SingleGroup
        if name == "fastsafetensors":
            alloc()
        ready()
        base = rss_now()
        t0 = start()
        for f in files:          # vLLM's fastsafetensors_weights_iterator: pg.size() files at a time
            loader = SafeTensorsFileLoader(SingleGroup(), "cpu", nogds=True)
            loader.add_filenames({0: [f]})
            fb = loader.copy_files_to_device()
            for k in list(fb.key_to_rank_lidx.keys()):
                t = fb.get_tensor(k)
                if name == "fastsafetensors":
                    fill(k, t)
                else:
                    native[k] = t
            fb.close()
            loader.close()
        if name == "fastsafetensors":
            zero_pad()
    elif name in ("runai", "runai.native"):
        from runai_model_streamer import SafetensorsStreamer
        if name == "runai":
            alloc()
        ready()
        base = rss_now()
        t0 = start()
        with SafetensorsStreamer() as st:      # vLLM's runai_safetensors_weights_iterator
            st.stream_files(files, device="cpu")
            for k, t in st.get_tensors():
                if name == "runai":
                    fill(k, t)
                else:
                    native[k] = t
            del t
        if name == "runai":
            zero_pad()
    elif name == "vllm-way":
        from safetensors import safe_open
        alloc()
        ready()
        base = rss_now()
        t0 = start()
        for r in ranks:                        # each rank opens the files and takes its part
            for f in files:
                with safe_open(f, framework="pt") as so:
                    for k in so.keys():
                        sl = None
                        for rr, p, dst, src in lay.ops.get(k, ()):
                            if rr == r:
                                sl = sl if sl is not None else so.get_slice(k)
                                params[r][p][dst].copy_(sl[src])
            for rr, p, dst in lay.zeros:
                if rr == r:
                    params[r][p][dst].zero_()
    elif name == "shardload.load":
        import shardload
        ready()
        base = rss_now()
        t0 = start()
        m = shardload.load(ck, tp=T, devices=None if scope == "all" else [0], progress=False)
        t1 = time.monotonic()
        for d in m.devices:
            params[d] = m.torch(d)
        res.update(load_seconds=t1 - t0, lib_seconds=m.stats["seconds"], io=m.stats["io"],
                   bytes_read=m.stats["bytes_read"], staging_peak=m.stats["staging_peak"],
                   held=sorted(m.devices))
        m.close()
    elif name == "shardload.load_into":
        import shardload
        alloc()
        ready()
        base = rss_now()
        t0 = start()
        st = shardload.load_into(ck, params[0], tp=T, rank=0, progress=False)
        res.update(load_seconds=time.monotonic() - t0, lib_seconds=st["seconds"], io=st["io"],
                   bytes_read=st["bytes_read"], staging_peak=st["staging_peak"])
    else:
        raise SystemExit(f"unknown contender {name}")
    dt = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    res["cpu_seconds"] = ru.ru_utime + ru.ru_stime - cpu0[0]
    if native:
        shard = sum(t.numel() * t.element_size() for t in native.values())
    else:
        shard = sum(t.numel() * t.element_size() for r in params for t in params[r].values())
    res.update(seconds=dt, shard_bytes=shard, baseline_rss=base, ranks=sorted(params) or [0])
    res["peak_rss_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if verify:
        if native:                       # fused params = their sources in row order (T = 1)
            import hashlib
            dig = {}
            for p, shape in lay.params[0].items():
                h = hashlib.sha1()
                srcs = sorted((dst[0].start or 0, k) for k, ops in lay.ops.items()
                              for (_r, pp, dst, _s) in ops if pp == p)
                for _, k in srcs:
                    h.update(native[k].contiguous().view(torch.uint8).reshape(-1).numpy().data)
                pad = [dst for (_r, pp, dst) in lay.zeros if pp == p]
                for dst in pad:
                    n = (dst[0].stop - dst[0].start) * math.prod(shape[1:]) * \
                        {"BF16": 2, "F16": 2, "F32": 4}[lay.dtype]
                    h.update(bytes(n))
                dig[p] = h.hexdigest()
            res["digests"] = {"0": dig}
        else:
            res["digests"] = {str(r): {p: digest(t) for p, t in params[r].items()} for r in params}
    return res


# ---- the parent: interleaved rounds -------------------------------------------------------------

def drop_caches(files: list[str]) -> str:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for p in files:
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        return "fadvise"


def compact() -> None:
    os.sync()
    try:
        with open("/proc/sys/vm/compact_memory", "w") as f:
            f.write("1\n")
    except OSError:
        pass


def warm(files: list[str]) -> None:
    buf = bytearray(16 * MIB)
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def run_child(argv: list[str], timeout: float, prep, handshake: bool
              ) -> tuple[int, str, str, int, float, float]:
    """Runs one contender: (exit code, stdout, stderr, ru_maxrss bytes of the child, wall seconds,
    CPU seconds). prep() (page cache and compaction) runs right before the load starts: for a
    Python child once it has imported and allocated and says "ready" (it then waits for "go"), for
    the CLI before it starts, so that every contender starts loading right after the same steps."""
    import tempfile
    with tempfile.TemporaryFile() as err:
        if not handshake:
            prep()
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                             cwd=ROOT)
        assert p.stdin is not None and p.stdout is not None   # both are pipes
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        out = ""
        if handshake:
            line = p.stdout.readline().decode()
            if line.strip() == "ready":
                prep()
                try:
                    p.stdin.write(b"go\n")
                    p.stdin.flush()
                except BrokenPipeError:
                    pass
            else:
                out = line
        p.stdin.close()
        out += p.stdout.read().decode()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        p.stdout.close()
        err.seek(0)
        return (p.returncode, out, err.read().decode(errors="replace"), ru.ru_maxrss * 1024, wall,
                ru.ru_utime + ru.ru_stime)


def bench(ck: str) -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    tps = [int(x) for x in os.environ.get("BENCH_PY_TP", "1 4").split()]
    caches = os.environ.get("BENCH_PY_CACHE", "hot cold").split()
    only = set(os.environ["BENCH_PY_ONLY"].split(",")) if os.environ.get("BENCH_PY_ONLY") else None
    verify = os.environ.get("BENCH_PY_VERIFY", "1") == "1"
    seed = int(os.environ.get("BENCH_PY_SEED", "1"))
    cli = os.environ.get("SL_CLI", os.path.join(ROOT, "build", "shardload"))
    out_path = os.environ.get("BENCH_PY_OUT", os.path.join(HERE, "python_peers.jsonl"))
    md_path = os.environ.get("BENCH_PY_MD", os.path.join(HERE, "python_peers.md"))
    files = ckpt_files(ck)
    for t in tps:
        check_layout(ck, t)
    runs = [(c, t, s, n) for c in caches for (t, s, n) in contenders(tps, only)]
    if any(r[3] == "cli" for r in runs) and not os.access(cli, os.X_OK):
        raise SystemExit(f"python_peers: no CLI at {cli} (make, or set SL_CLI)")
    rel = os.path.relpath(ck, ROOT)
    meta_ck = ck if rel.startswith("..") else rel
    meta = {"meta": True, "ckpt": meta_ck, "rounds": rounds, "tps": tps,
            "seed": seed, "command": " ".join(
                ["%s=%s" % (k, v) for k, v in sorted(os.environ.items())
                 if k.startswith(("BENCH_", "SL_CLI", "SHARDLOAD_")) and k not in ("BENCH_PY_OUT", "BENCH_PY_MD")]
                + [os.path.relpath(sys.executable, ROOT), "bench/python_peers.py", meta_ck]),
            "caches": caches, "checkpoint_bytes": sum(os.path.getsize(f) for f in files),
            "versions": versions(), "machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "cli": cli, "commit": os.environ.get("BENCH_PY_COMMIT") or git_head(),
            "library": os.environ.get("SHARDLOAD_LIBRARY") or "the package's own"}
    t_start = time.monotonic()
    with open(out_path, "w") as out:
        out.write(json.dumps(meta) + "\n")
        for rnd in range(1, rounds + 1):
            n = len(runs)
            # A seeded shuffle each round, not a rotation: on this kind of VM a run's first touch
            # of memory costs more or less depending on what ran just before it, and a rotation
            # keeps every contender behind the same neighbour in every round.
            order = list(runs)
            random.Random(seed * 1000 + rnd).shuffle(order)
            print(f"python_peers: round {rnd}/{rounds}, {n} runs", file=sys.stderr, flush=True)
            for cache, t, scope, name in order:
                how: list[str | float] = []

                def prep(cache: str = cache) -> None:
                    if cache == "hot":
                        warm(files)
                        how.append("warm")
                    else:
                        how.append(drop_caches(files))
                    compact()
                    how.append(os.getloadavg()[0])

                v = verify and rnd == 1 and cache == "hot"
                if name == "cli":
                    argv = [cli, "load", ck, "--tp", str(t), "--json"]
                else:
                    argv = [sys.executable, os.path.abspath(__file__), "--child", name, ck, str(t),
                            scope, "1" if v else "0"]
                rc, so, se, maxrss, wall, cpu = run_child(argv, 600, prep, name != "cli")
                row = {"round": rnd, "cache": cache, "cache_prep": how[0] if how else None,
                       "tp": t, "scope": scope, "name": name, "rc": rc, "peak_rss": maxrss,
                       "wall": wall, "loadavg": how[1] if len(how) > 1 else os.getloadavg()[0]}
                if rc != 0:
                    row["error"] = (se.strip().splitlines() or ["exit %d" % rc])[-1][:300]
                    print(f"python_peers: {name} tp={t} {scope} {cache} failed: {row['error']}",
                          file=sys.stderr, flush=True)
                else:
                    res = json.loads(so.strip().splitlines()[-1])
                    if name == "cli":
                        res = {"seconds": res["seconds"], "lib_seconds": res["seconds"],
                               "load_seconds": res["seconds"], "io": res["io"],
                               "bytes_read": res["bytes_read"], "staging_peak": res.get("staging_peak"),
                               "shard_bytes": sum(d["allocated_bytes"] for d in res["devices"]),
                               "baseline_rss": 0, "peak_rss_self": res["peak_rss_bytes"],
                               "cpu_seconds": cpu}
                    row.update(res)
                    print(f"python_peers:   {cache} tp={t} {scope:5} {name:24} {res['seconds']:7.3f} s "
                          f"peak {maxrss / MIB:6.0f} MiB", file=sys.stderr, flush=True)
                out.write(json.dumps(row) + "\n")
                out.flush()
    print(f"python_peers: {time.monotonic() - t_start:.0f} s in all", file=sys.stderr)
    report(out_path, md_path)


def git_head() -> str | None:
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    return r.stdout.strip() or None


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out: dict[str, str | None] = {"python": platform.python_version()}
    for p in ("torch", "numpy", "safetensors", "fastsafetensors", "runai-model-streamer", "shardload"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def machine() -> str:
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown cpu")
    return "%d cores (%s), %.1f GiB RAM" % (os.cpu_count() or 0, cpu, int(mem) / 2**20)


# ---- the report ---------------------------------------------------------------------------------

def report(src: str, md: str) -> None:
    rows = [json.loads(l) for l in open(src) if l.strip()]
    meta: dict[str, Any] = next((r for r in rows if r.get("meta")), {})
    runs = [r for r in rows if not r.get("meta")]
    by: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in runs:
        by[(r["cache"], r["tp"], r["scope"], r["name"])][r["round"]] = r
    ok = lambda r: r.get("rc") == 0
    # Verification: every hot round-1 run with digests, against shardload.load's of the same tp.
    ref: dict[int, dict] = {}
    for r in runs:
        if ok(r) and r["name"] == "shardload.load" and r["scope"] == "all" and "digests" in r:
            ref[r["tp"]] = r["digests"]
    verdict: dict[tuple, str] = {}
    for r in runs:
        if not ok(r) or "digests" not in r:
            continue
        key = (r["tp"], r["scope"], r["name"])
        if r["tp"] not in ref:
            verdict[key] = "no reference"
            continue
        same = all(ref[r["tp"]].get(rk) == d for rk, d in r["digests"].items())
        verdict[key] = "same bytes" if same else "**DIFFERENT BYTES**"

    def ratio(num: tuple, den: tuple, fn=lambda a, b: a["seconds"] / b["seconds"]) -> list[float]:
        out = []
        for rnd, a in by.get(num, {}).items():
            b = by.get(den, {}).get(rnd)
            if b and ok(a) and ok(b) and b["seconds"] > 0:
                out.append(fn(a, b))
        return out

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    def medf(xs: list[float]) -> float:   # xs known not to be empty
        return statistics.median(xs)

    def beyond(r: dict) -> int:
        return r["peak_rss"] - r["shard_bytes"] - r["baseline_rss"]

    n_rounds = meta.get("rounds", max((r["round"] for r in runs), default=0))
    L = ["## Python peers (bench/python_peers.py, issue 13 item 5)", ""]
    L += [("Checkpoint `%s` (%.2f GB of safetensors files), %d interleaved rounds, each contender in "
           "its own fresh process. torch %s, safetensors %s, fastsafetensors %s, runai-model-streamer "
           "%s, shardload %s (commit %s); %s; started %s.") % (
        meta.get("ckpt", "?"), meta.get("checkpoint_bytes", 0) / 1e9, n_rounds,
        *(meta.get("versions", {}).get(k) for k in ("torch", "safetensors", "fastsafetensors",
                                                      "runai-model-streamer", "shardload")),
        meta.get("commit"), meta.get("machine", "?"), meta.get("started", "?")), ""]
    if meta.get("command"):
        L += ["Run: `%s`%s." % (meta["command"], " (%s)" % meta["command_note"]
                                if meta.get("command_note") else ""), ""]
    L += ["Every contender ends with the same bytes in memory it owns: the plan's parameters in "
          "vLLM's layout (fused qkv/gate_up), per rank. Scope `all`: one process holds all T ranks' "
          "shards (peers read each tensor whole once and copy each rank's slice into its "
          "preallocated parameter); `rank0`: the process is rank 0 of T and holds rank 0's shard "
          "only. Peer rows at T=1 marked native keep the library's own tensors (checkpoint names, "
          "unfused). Seconds exclude interpreter start and imports. GB/s = shard bytes placed / "
          "seconds. CPU s = user + system time of all the process's threads over the timed part (CLI: "
          "its whole process), median: less sensitive than seconds to other load on the machine. "
          "Beyond shards = peak RSS - shard bytes - the process's RSS after imports "
          "(CLI: nothing subtracted); for the safetensors rows it includes the checkpoint pages "
          "mapped into the process (safetensors 0.8 hands out views of a private mmap, so every "
          "byte copied is first faulted in as a mapped file page). Ratio columns: this run's "
          "seconds / shardload.load's (or load_into's) in the same round, cache, T and scope, "
          "median over rounds (> 1: shardload faster). Bytes: in round 1 (hot) every contender "
          "hashed its shards; same bytes = equal to shardload.load's, parameter by parameter.", ""]
    la = [r["loadavg"] for r in runs if "loadavg" in r]
    if la:
        busy = statistics.median(la) > (os.cpu_count() or 1) / 2
        L += ["Machine load (1-minute load average when each run started, other processes "
              "included): median %.2f, max %.2f on %s cores.%s" % (
                  statistics.median(la), max(la), os.cpu_count(),
                  " Other work shared the machine during this run: single runs swing widely "
                  "(see the min-max ranges), and ratios within about 2x of each other can change "
                  "sides from one full run to the next; the byte and memory figures do not." if busy else ""),
              ""]
    L += ["| cache | T | scope | contender | seconds med (min-max) | GB/s | CPU s | peak RSS MiB | "
          "beyond shards MiB | its s / shardload.load's | its s / load_into's | bytes |",
          "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    order = {n: i for i, n in enumerate(CONTENDERS)}
    keys = sorted(by, key=lambda k: (k[0] != "hot", k[1], k[2] != "all", order.get(k[3], 99)))
    for k in keys:
        cache, t, scope, name = k
        good = [r for r in by[k].values() if ok(r)]
        label = CONTENDERS.get(name, (name,))[0]
        if name == "shardload.load":
            label += "(tp=%d)" % t if scope == "all" else "(tp=%d, devices=[0])" % t
        elif name == "shardload.load_into":
            label += "(tp=%d, rank=0)" % t
        elif name == "cli":
            label = "CLI `shardload load --tp %d --json`" % t
        if not good:
            err = next((r.get("error") for r in by[k].values()), "?")
            L.append("| %s | %d | %s | %s | failed: %s | | | | | | | |" % (cache, t, scope, label, err))
            continue
        secs = [r["seconds"] for r in good]
        sm = statistics.median(secs)
        gb = statistics.median([r["shard_bytes"] / r["seconds"] / 1e9 for r in good])
        su = med(ratio(k, (cache, t, scope, "shardload.load")))
        sli = med(ratio(k, (cache, t, scope, "shardload.load_into")))
        fmt = lambda x: "**%.2fx**" % x if x is not None else ""
        cpu = [r["cpu_seconds"] for r in good if "cpu_seconds" in r]
        L.append("| %s | %d | %s | %s | %.3f (%.3f-%.3f) | %.2f | %s | %.0f | %.0f | %s | %s | %s |" % (
            cache, t, scope, label, sm, min(secs), max(secs), gb,
            "%.2f" % statistics.median(cpu) if cpu else "",
            max(r["peak_rss"] for r in good) / MIB, max(beyond(r) for r in good) / MIB,
            fmt(su) if name != "shardload.load" else "1", fmt(sli) if name != "shardload.load_into" else
            ("1" if sli is not None else ""), verdict.get((t, scope, name), "")))
    failed = [r for r in runs if not ok(r)]
    if failed:
        L += ["", "%d run(s) failed; their rows count only the runs that finished." % len(failed)]
    L += ["", "How each peer was driven (the way vLLM's weight iterators drive them): safetensors 0.8's "
          "get_tensor, get_slice and load_file return zero-copy views of a private mmap of the file, so "
          "the bytes are read (page faults, kernel readahead) by the copy into the parameter; "
          "fastsafetensors reads one file at a time into its own host buffer (pread through a bounce "
          "buffer: nogds, no CUDA); runai-model-streamer streams all files with its defaults "
          "(RUNAI_STREAMER_MEMORY_LIMIT unset, owned tensors). shardload runs with its defaults (io auto: "
          "buffered when the files are in the page cache, else O_DIRECT; staging 64 MiB). "
          "shardload.load_into fills torch.empty() tensors allocated before the clock starts: their "
          "first touch (4 KiB page faults of the engine's memory) happens inside load_into, whereas "
          "shardload.load allocates its own buffers (huge pages where the kernel allows) and faults "
          "them in ahead of the copies."]

    # Goals
    L += ["", "### Goals (issue 13 item 5)", "", "| goal | measured (median of per-round ratios) | met? |",
          "|---|---|---|"]
    caches = meta.get("caches") or sorted({k[0] for k in by})
    tps = meta.get("tps") or sorted({k[1] for k in by})
    for cache in caches:
        for t in tps:
            rs = ratio((cache, t, "all", "shardload.load"), (cache, t, "all", "cli"),
                       lambda a, b: a["load_seconds"] / b["seconds"])
            lib = ratio((cache, t, "all", "shardload.load"), (cache, t, "all", "cli"),
                        lambda a, b: a["lib_seconds"] / b["seconds"])
            over = [r["load_seconds"] - r["lib_seconds"] for r in by.get((cache, t, "all", "shardload.load"), {}).values()
                    if ok(r)]
            if rs:
                L.append("| %s, T=%d: shardload.load(tp=%d) within 5%% of the CLI's load time (load() "
                         "wall / CLI's `seconds`) | %.3f (per round %s); the library's own `seconds` "
                         "inside load() / CLI's: %.3f; load() wall - library seconds (the Python "
                         "layer: open, plan, options): median %.1f ms | %s |" % (
                             cache, t, t, medf(rs), ", ".join("%.2f" % x for x in rs), medf(lib),
                             1e3 * medf(over), "yes" if medf(rs) <= 1.05 else "**no**"))
    for cache in caches:
        for t in tps:
            goal = 2.0 if t > 1 else 1.2
            for scope in (["all", "rank0"] if t > 1 else ["all"]):
                got = []
                for peer in PEERS + (["fastsafetensors.native", "runai.native"] if t == 1 else []):
                    rs = ratio((cache, t, scope, peer), (cache, t, scope, "shardload.load"))
                    if rs:
                        got.append((peer, medf(rs)))
                if got:
                    missed = [p for p, x in got if x < goal]
                    L.append("| %s, T=%d, %s: shardload.load >= %.1fx each peer | %s | %s |" % (
                        cache, t, scope, goal, ", ".join("%s %.3fx" % (p, x) for p, x in got),
                        "yes" if not missed else "**no** (%s)" % ", ".join(missed)))
    for name in ("shardload.load", "shardload.load_into", "cli"):
        worst = [(beyond(r), k) for k in keys if k[3] == name for r in by[k].values() if ok(r)]
        if worst:
            b, k = max(worst)
            L.append("| %s: host memory beyond the shards <= staging (64 MiB) + 64 MiB | worst "
                     "%.1f MiB (%s, T=%d, %s) over %d runs | %s |" % (
                         name, b / MIB, k[0], k[1], k[2], len(worst),
                         "yes" if b <= STAGING + 64 * MIB else "**no**"))
    L.append("")
    with open(md, "w") as f:
        f.write("\n".join(L))


def main() -> None:
    a = sys.argv[1:]
    if a and a[0] == "--child":
        name, ck, t, scope, v = a[1:6]
        print(json.dumps(child(name, ck, int(t), scope, v == "1")))
    elif a and a[0] == "--report":
        report(a[1], a[2])
    elif len(a) == 1:
        bench(os.path.abspath(a[0]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
