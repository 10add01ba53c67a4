#!/usr/bin/env python3
"""The vLLM way of loading a Qwen3-MoE checkpoint at tensor parallelism T, with or without expert
parallelism, for bench/moe.sh (issue 16 item 6).

    moe_peer.py run CKPT T EP [--verify]     one load; prints one JSON line
    moe_peer.py report JSONL MD CKPT_BF16 CKPT_FP8 T   bench/moe.md from bench/moe.jsonl
    moe_peer.py rusage CMD...               runs CMD; prints its last JSON line with the child's
                                            CPU seconds and page faults added

`run` loops over the T ranks in one process. Each rank opens every file with safetensors'
safe_open(framework="pt"), and for every checkpoint tensor the rank needs reads it whole
(get_tensor, as vLLM's safetensors_weights_iterator yields it) and narrows + copy_s that rank's
part into its preallocated parameter (vLLM's weight_loader; FusedMoE's for the experts: w13_weight
[El, 2*Ip, H] gate rows then up rows, w2_weight [El, H, Ip], and the block scales beside them cut
the same way in 128x128 blocks). Under EP a rank skips the experts it does not hold (vLLM's expert
filter); without EP it reads every expert whole and keeps 1/T of its rows (columns for down_proj).
The layout is computed here from the config alone (docs/spec: vLLM's Qwen3-MoE layout); --verify
loads the same ranks with shardload.load and compares every parameter byte for byte (not timed).

Reported: seconds (parameters are torch.empty'd before the clock; first touch is in it), the bytes
of the whole tensors fetched (summed over ranks: what the loop asks safetensors for), the
process's storage reads (/proc/self/io read_bytes: from disk, so meaningful for cold runs), and the
loop's CPU seconds and minor faults (getrusage), which a busy machine disturbs less than seconds.
"""
from __future__ import annotations

import json
import math
import os
import resource
import statistics
import struct
import sys
import time
from collections import defaultdict

from python_peers import ckpt_files  # the checkpoint's files (bench/, this script's folder)

IDX = tuple  # an index: ints (select) and (start, stop) pairs (narrow), one per leading dim


def ckpt_tensors(ck: str) -> dict[str, tuple[str, list[int], int]]:
    """name -> (dtype, shape, bytes) from the safetensors headers."""
    out = {}
    for path in ckpt_files(ck):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
        h.pop("__metadata__", None)
        out.update({k: (v["dtype"], v["shape"], v["data_offsets"][1] - v["data_offsets"][0])
                    for k, v in h.items()})
    return out


def experts_of(E: int, T: int, r: int) -> range:
    """vLLM's EP placement (since PR #21497): the first E % T ranks take one extra expert."""
    base, extra = divmod(E, T)
    first = r * base + min(r, extra)
    return range(first, first + base + (r < extra))


class Layout:
    """params[r] = {name: (shape, dtype)}; ops[r] = [(ckpt_name, param, dst, src)] with dst/src
    as IDX (one entry per leading dim; trailing dims whole)."""

    def __init__(self, ck: str, T: int, ep: bool) -> None:
        with open(os.path.join(ck, "config.json")) as f:
            c = json.load(f)
        self.tensors = ckpt_tensors(ck)
        H, nh, K, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        E, I, V = c["num_experts"], c["moe_intermediate_size"], c["vocab_size"]
        q = c.get("quantization_config") or {}
        self.block = tuple(q["weight_block_size"]) if q.get("quant_method") == "fp8" else None
        kl, rep = (K // T, 1) if T <= K else (1, T // K)
        qr, kvr = nh // T * D, kl * D
        Vp = math.ceil(V / 64) * 64
        nv = Vp // T
        Ip = I if ep else I // T
        self.T, self.ep = T, ep
        self.model_dt = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[
            c.get("torch_dtype") or c.get("dtype") or "bfloat16"]
        self.params: list[dict[str, tuple[tuple[int, ...], str]]] = [{} for _ in range(T)]
        self.ops: list[list[tuple[str, str, IDX, IDX]]] = [[] for _ in range(T)]
        self.zeros: list[tuple[int, str, IDX]] = []
        self.expert_bytes = sum(b for n, (_, _, b) in self.tensors.items() if ".mlp.experts." in n)
        for name, (dt, shape, _) in self.tensors.items():
            if name.endswith("_scale_inv"):
                continue                      # placed with its weight
            base, _, leaf = name.rpartition(".")
            for r in range(T):
                if name in ("model.embed_tokens.weight", "lm_head.weight"):
                    a, b = min(r * nv, V), min((r + 1) * nv, V)
                    self._add(r, name, name, (nv, H), ((0, b - a),), ((a, b),))
                    if b - a < nv:
                        self.zeros.append((r, name, ((b - a, nv),)))
                elif base.endswith(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")):
                    p = base.rsplit(".", 1)[0] + ".qkv_proj.weight"
                    which = base[-6]
                    if which == "q":
                        dst, src = (0, qr), (r * qr, (r + 1) * qr)
                    else:
                        o, blk = (qr if which == "k" else qr + kvr), r // rep
                        dst, src = (o, o + kvr), (blk * kvr, (blk + 1) * kvr)
                    self._add(r, name, p, (qr + 2 * kvr, H), (dst,), (src,))
                elif base.endswith("self_attn.o_proj"):
                    cols = shape[1] // T
                    self._add(r, name, name, (H, cols), ((0, H), (0, cols)),
                              ((0, H), (r * cols, (r + 1) * cols)))
                elif ".mlp.experts." in name:
                    e = int(base.split(".mlp.experts.")[1].split(".")[0])
                    held = experts_of(E, T, r) if ep else range(E)
                    if e not in held:
                        continue
                    j, t = e - held.start, (0 if ep else r)
                    moe = base.split(".experts.")[0] + ".experts."
                    if base.endswith(("gate_proj", "up_proj")):
                        o = 0 if base.endswith("gate_proj") else Ip
                        self._add(r, name, moe + "w13_weight", (len(held), 2 * Ip, H),
                                  (j, (o, o + Ip), (0, H)), ((t * Ip, (t + 1) * Ip), (0, H)))
                    else:
                        self._add(r, name, moe + "w2_weight", (len(held), H, Ip),
                                  (j, (0, H), (0, Ip)), ((0, H), (t * Ip, (t + 1) * Ip)))
                elif len(shape) == 1 or base.endswith("mlp.gate"):   # norms, the router: whole
                    self._add(r, name, name, tuple(shape), tuple((0, n) for n in shape),
                              tuple((0, n) for n in shape))
                else:
                    raise SystemExit(f"moe_peer: no rule for checkpoint tensor {name!r}")

    def _add(self, r: int, ck: str, p: str, shape: tuple[int, ...], dst: IDX, src: IDX) -> None:
        dt = self.tensors[ck][0]
        self.params[r].setdefault(p, (shape, dt if dt.startswith("F8_") else self.model_dt))
        self.ops[r].append((ck, p, dst, src))
        sc = ck + "_scale_inv"
        if sc not in self.tensors:
            return
        if self.block is None:
            raise SystemExit(f"moe_peer: {sc} in a checkpoint without an fp8 quantization_config")
        bn, bk = self.block

        def blocks(idx: IDX, dims: tuple[int, ...]) -> IDX:
            """idx (one entry a dim of dims) in blocks: the last two dims by bn and bk."""
            idx = tuple(idx) + tuple((0, n) for n in dims[len(idx):])
            out = list(idx[:-2])
            for x, blk, n in zip(idx[-2:], (bn, bk), dims[-2:]):
                if x[0] % blk or (x[1] % blk and x[1] != n):
                    raise SystemExit(f"moe_peer: {ck}: slice {x} is not a multiple of block {blk} "
                                     "(vLLM refuses this mesh)")
                out.append((x[0] // blk, -(-x[1] // blk)))
            return tuple(out)

        sshape = shape[:-2] + (-(-shape[-2] // bn), -(-shape[-1] // bk))
        self.params[r].setdefault(p + "_scale_inv", (sshape, "F32"))
        self.ops[r].append((sc, p + "_scale_inv", blocks(dst, shape),
                            blocks(src, tuple(self.tensors[ck][1]))))

    def param_bytes(self) -> int:
        esz = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}
        return sum(math.prod(s) * esz[d] for p in self.params for s, d in p.values())


def sub(t, idx: IDX):
    """t narrowed by idx: an int selects, a (start, stop) pair narrows (vLLM's narrow)."""
    dim = 0
    for x in idx:
        if isinstance(x, int):
            t = t.select(dim, x)
        else:
            t = t.narrow(dim, x[0], x[1] - x[0])
            dim += 1
    return t


def proc_io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def run(ck: str, T: int, ep: bool, verify: bool) -> dict:
    import torch
    from safetensors import safe_open
    tdt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F8_E4M3": torch.float8_e4m3fn}
    lay = Layout(ck, T, ep)
    files = ckpt_files(ck)
    params = [{n: torch.empty(s, dtype=tdt[d]) for n, (s, d) in lay.params[r].items()} for r in range(T)]
    by_ck: list[dict[str, list]] = [defaultdict(list) for _ in range(T)]
    for r in range(T):
        for ckn, p, dst, src in lay.ops[r]:
            by_ck[r][ckn].append((p, dst, src))
    io0 = proc_io()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    fetched = 0
    for r in range(T):                           # each rank in turn, as T processes would
        mine = by_ck[r]
        for f in files:
            with safe_open(f, framework="pt") as so:
                for k in so.keys():
                    if k not in mine:            # EP: an expert this rank does not hold
                        continue
                    whole = so.get_tensor(k)     # the whole tensor, as vLLM's iterator yields it
                    fetched += whole.numel() * whole.element_size()
                    for p, dst, src in mine[k]:
                        sub(params[r][p], dst).copy_(sub(whole, src))
                    del whole
        for rr, p, dst in lay.zeros:
            if rr == r:
                sub(params[r][p], dst).zero_()
    secs = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    io1 = proc_io()
    res: dict = {"seconds": secs, "bytes_fetched": fetched, "read_bytes": io1["read_bytes"] - io0["read_bytes"],
           "rchar": io1["rchar"] - io0["rchar"], "param_bytes": lay.param_bytes(),
           "expert_bytes": lay.expert_bytes, "cpu_user": ru1.ru_utime - ru0.ru_utime,
           "cpu_sys": ru1.ru_stime - ru0.ru_stime, "minflt": ru1.ru_minflt - ru0.ru_minflt,
           "peak_rss_bytes": ru1.ru_maxrss * 1024}
    if verify:
        res["verified"] = compare(ck, T, ep, params)
    return res


def rusage(cmd: list[str]) -> dict:
    """cmd's last stdout line (JSON) with its CPU seconds and page faults (os.wait4: the child's
    own rusage, whole process) added."""
    import subprocess
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert p.stdout is not None   # a pipe
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"moe_peer: {cmd[0]} exited with {code}")
    res = json.loads(out.strip().splitlines()[-1])
    res.update(cpu_user=ru.ru_utime, cpu_sys=ru.ru_stime, minflt=ru.ru_minflt, majflt=ru.ru_majflt)
    return res


def compare(ck: str, T: int, ep: bool, params: list) -> dict:
    """Every parameter of every rank equals shardload.load's, byte for byte."""
    import torch

    import shardload
    n = b = 0
    for r in range(T):
        m = shardload.load(ck, tp=T, ep=ep, devices=[r], progress=False)
        theirs = m.torch(r)
        if set(theirs) != set(params[r]):
            raise SystemExit(f"moe_peer: rank {r}: parameter names differ from shardload's: "
                             f"{sorted(set(theirs) ^ set(params[r]))[:4]}")
        for name, t in theirs.items():
            mine = params[r][name]
            if tuple(t.shape) != tuple(mine.shape) or t.dtype != mine.dtype:
                raise SystemExit(f"moe_peer: rank {r} {name}: {tuple(mine.shape)} {mine.dtype}, "
                                 f"shardload {tuple(t.shape)} {t.dtype}")
            if not torch.equal(t.contiguous().view(torch.uint8), mine.contiguous().view(torch.uint8)):
                raise SystemExit(f"moe_peer: rank {r} {name}: bytes differ from shardload's")
            n += 1
            b += t.numel() * t.element_size()
        del theirs
        m.close()
    return {"params": n, "bytes": b}


# ---- the report ----------------------------------------------------------------------------------

def gb(x: float) -> str:
    return "%.2f GB" % (x / 1e9)


def disturbed(runs: list[dict], size: dict[str, int]) -> list[str]:
    """A note naming the hot runs that found their files partly out of the page cache (another
    process dropped it after the warm-up): shardload's --io auto then reads some files with
    O_DIRECT ("io" not "buffered"), the vLLM way reads from disk (read_bytes)."""
    bad = []
    for r in runs:
        res = r["result"]
        if r["cache"] != "hot":
            continue
        if r["who"] == "shardload" and res.get("io", "buffered") != "buffered":
            why = "io %s" % res.get("io")
        elif r["who"] == "vllm-way" and res.get("read_bytes", 0) > 0.01 * size[r["ckpt"]]:
            why = "%s from disk" % gb(res["read_bytes"])
        else:
            continue
        bad.append("%s%s %s round %d (%s)" % (r["ckpt"], " EP" if r["ep"] else "", r["who"], r["round"], why))
    if not bad:
        return []
    return ["", "Hot runs that were partly cold (another process dropped the page cache after the "
            "warm-up): " + "; ".join(bad) + "."]


def report(jsonl: str, md: str, ck_bf16: str, ck_fp8: str, T: int) -> None:
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    cks = {"bf16": ck_bf16, "fp8": ck_fp8}
    size = {k: sum(b for _, _, b in ckpt_tensors(v).values()) for k, v in cks.items()}
    experts = {k: sum(b for n, (_, _, b) in ckpt_tensors(v).items() if ".mlp.experts." in n)
               for k, v in cks.items()}
    meta: dict = next((r for r in rows if r.get("kind") == "meta"), {})
    runs = [r for r in rows if r.get("kind") == "load"]
    by: dict = defaultdict(dict)          # (ckpt, ep, cache, who) -> round -> result
    for r in runs:
        by[(r["ckpt"], r["ep"], r["cache"], r["who"])][r["round"]] = r["result"]
    rounds = sorted({r["round"] for r in runs})
    L = ["## MoE: expert parallelism and FP8 (bench/moe.sh, issue 16 item 6)", "",
         "Synthetic Qwen3-MoE checkpoints (`shardload synth` of `../shared/configs/qwen3-30b-a3b.json` "
         "with %s; every expert has Qwen3-30B-A3B's real shapes: gate/up `[768, 2048]`, down "
         "`[2048, 768]`): bf16 %s (experts %s), block-FP8 (128x128, F32 scales) %s (experts %s). "
         "T = %d in one process, %d interleaved round(s) (order rotated), hot (files read into the page "
         "cache first) and cold (page cache dropped). shardload: `shardload load CK --tp %d [--ep] --json` "
         "(default `--io auto`: buffered when cached, O_DIRECT when not); "
         "the vLLM way: bench/moe_peer.py (torch %s, safetensors %s), the 4 ranks one after the other in "
         "one process, each opening the files with `safe_open` and reading every tensor it needs whole "
         "(`get_tensor`), then `narrow` + `copy_` into preallocated parameters in vLLM's layout; under EP a "
         "rank skips the experts it does not hold. Its ranks share one process and so one page cache: "
         "cold, the first rank's reads come from disk and the others' from the cache (as T processes on "
         "one host would; on T hosts each would read its bytes from storage). The speed-up is the vLLM "
         "way's seconds over shardload's, per round, whatever it is; the table shows every round. "
         "safetensors' get_tensor returns a tensor over the file's mmap, so a whole tensor is asked for "
         "but only the pages its narrow touches are faulted in (for down_proj's column cut, all of them): "
         "the 'asked for' column is that logical count, disk reads are /proc/self/io read_bytes." % (
             meta.get("derived", "fewer layers and experts"), gb(size["bf16"]), gb(experts["bf16"]),
             gb(size["fp8"]), gb(experts["fp8"]), T, len(rounds), T, meta.get("torch", "?"),
             meta.get("safetensors", "?")), "",
         "| checkpoint | EP | cache | shardload s (median) | vLLM way s (median) | speed-up: vLLM way s / shardload s, > 1: shardload faster (median; per round) | CPU s user + sys, shardload / vLLM way (median) | minor faults, shardload / vLLM way (median) | shardload bytes read | vLLM way: whole tensors asked for | vLLM way: disk reads (cold) |",
         "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ckn in ("bf16", "fp8"):
        for ep in (0, 1):
            for cache in ("hot", "cold"):
                a, b = by.get((ckn, ep, cache, "shardload")), by.get((ckn, ep, cache, "vllm-way"))
                if not a or not b:
                    continue
                ratios = [b[k]["seconds"] / a[k]["seconds"] for k in a if k in b]
                med = lambda d, f: statistics.median(f(x) for x in d.values())
                flt = lambda x: x.get("minflt", math.nan)
                L.append("| %s | %s | %s | %.2f | %.2f | **%.2fx** (%s) | %.2f + %.2f / %.2f + %.2f | %.0f / %.0f | %s | %s | %s |" % (
                    ckn, "yes" if ep else "no", cache, med(a, lambda x: x["seconds"]),
                    med(b, lambda x: x["seconds"]), statistics.median(ratios),
                    ", ".join("%.2f" % x for x in ratios),
                    med(a, lambda x: x.get("cpu_user", math.nan)), med(a, lambda x: x.get("cpu_sys", math.nan)),
                    med(b, lambda x: x.get("cpu_user", math.nan)), med(b, lambda x: x.get("cpu_sys", math.nan)),
                    med(a, flt), med(b, flt), gb(med(a, lambda x: x["bytes_read"])),
                    gb(med(b, lambda x: x["bytes_fetched"])),
                    gb(med(b, lambda x: x["read_bytes"])) if cache == "cold" else "-"))
    L += disturbed(runs, size)
    for r in rows:
        if r.get("kind") == "refused":
            L += ["", "%s at T = %d without EP: refused, as vLLM refuses it: `%s`" % (
                r["ckpt"], T, r["message"])]
    ver = [r for r in rows if r.get("kind") == "verify"]
    if ver:
        L += ["", "Same bytes: " + "; ".join(
            "%s%s: %d parameters, %s, equal byte for byte to shardload.load's" % (
                r["ckpt"], " EP" if r["ep"] else "", r["result"]["verified"]["params"],
                gb(r["result"]["verified"]["bytes"])) for r in ver) + " (moe_peer.py run --verify, "
              "every rank's every parameter compared)."]
    mpi = [r for r in rows if r.get("kind") == "mpi"]
    if mpi:
        L += ["", "Under MPI (`mpirun -np %d shardload load CK --tp %d [--ep] --dist D --devices-per-rank 1 "
              "--json`, hot, one run each): bytes each rank read." % (T, T), "",
              "| checkpoint | EP | dist | seconds | bytes read per rank | sum | expert bytes / T | all of it |",
              "|---|---|---|---:|---|---:|---:|---:|"]
        for r in mpi:
            res = r["result"]
            if "error" in res:
                L.append("| %s | %s | %s | failed: %s | | | | |" % (r["ckpt"], "yes" if r["ep"] else "no",
                                                                    r["dist"], res["error"]))
                continue
            per = [x["bytes_read"] for x in res["ranks"]]
            L.append("| %s | %s | %s | %.2f | %s | %s | %s | %s |" % (
                r["ckpt"], "yes" if r["ep"] else "no", r["dist"], res["seconds"],
                ", ".join(gb(x) for x in per), gb(sum(per)), gb(experts[r["ckpt"]] / T), gb(size[r["ckpt"]])))
        L += ["", "Independent without EP: every rank reads part of every expert, its rows of gate/up "
              "but whole rows of down_proj (its columns are strided pieces of each row, read as spans), "
              "so about twice its share here; with EP a rank reads only its E/T experts, whole: about 1/T "
              "of the expert bytes (the column above), plus its share of attention and embeddings. "
              "Cooperative reads each byte once across the job either way."]
    L += ["", "Machine: %s. %s" % (meta.get("machine", "?"), meta.get("note", "")), "",
          "First touch, most of the hot spread: shardload's cpu destinations are its own mappings "
          "advised MADV_HUGEPAGE (2 MiB pages, populated by a helper thread while the reads run), the "
          "vLLM way's parameters are torch.empty (4 KiB pages on a kernel whose THP mode is `madvise`, "
          "as this VM's). This VM (Firecracker) reports free memory to its host (virtio-balloon free "
          "page reporting: free 2 MiB blocks are handed back), and every run here starts after a "
          "drop_caches that frees the page cache: a fresh 2 MiB page is then often one the host took "
          "back, and faults in 5-7x slower than one still backed. Measured with a C program that "
          "maps and touches 2.2 GB after the same preparation (system seconds, 14 rounds interleaved): "
          "huge pages 1.8-2.9 s in 12 (0.8-1.0 s in 2 that followed a run which had just freed as "
          "much), 0.36-0.38 s when one process touches a second 2.2 GB right after freeing the first; "
          "4 KiB pages 0.85-1.5 s, 3.3-3.4 s in 2 (they seem to find fragments smaller than a block "
          "mostly, which are never handed back). shardload's own hot EP bf16 load, same preparation, five "
          "interleaved rounds: 2.89-3.04 CPU s with huge pages, 1.46-1.54 with 4 KiB pages (a build "
          "without the advice); two rounds after a process that had just freed 2.3 GB: 1.44-1.79 "
          "against 1.59-1.89. The CPU and fault "
          "columns show it (shardload: about 1,070 huge-page faults; the vLLM way: about 540,000 "
          "small ones); user/sys is split by the tick, so read their sum. On a host that keeps its "
          "memory backed (bare metal, a VM without free page reporting), huge pages are the faster first touch."]
    with open(md, "w") as f:
        f.write("\n".join(L).rstrip() + "\n")


def main() -> None:
    a = sys.argv[1:]
    if a and a[0] == "run" and len(a) in (4, 5):
        print(json.dumps(run(a[1], int(a[2]), a[3] == "1", len(a) == 5 and a[4] == "--verify")))
    elif a and a[0] == "rusage" and len(a) > 1:
        print(json.dumps(rusage(a[1:])))
    elif a and a[0] == "report" and len(a) == 6:
        report(a[1], a[2], a[3], a[4], int(a[5]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
