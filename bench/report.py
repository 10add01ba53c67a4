#!/usr/bin/python3
"""Turns bench/results.jsonl into bench/RESULTS.md and a PNG chart (gnuplot).

Leads with ratios computed per round (interleaved runs on a noisy machine: absolute times drift,
per-round ratios hold), then memory figures, then the raw min/median/max table and the machine.
usage: report.py results.jsonl RESULTS.md chart.png MODEL ALT_TP HAVE_TORCH [mpi.jsonl]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from typing import Any


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)   # (cache, name) -> round -> row
    for r in rows:
        by[(r["cache"], r["name"])][r["round"]] = r
    return by


def gbps(row):
    res = row["result"]
    if "gbps" in res:
        return res["gbps"]
    return res["bytes_read"] / res["seconds"] / 1e9


def secs(row):
    return row["result"]["seconds"]


def mmm(vals):
    return "%.3f / %.3f / %.3f" % (min(vals), statistics.median(vals), max(vals))


def per_round_ratio(by, num, den, f):
    """Median over rounds of f(num)/f(den); den may be a list (the best of them per round)."""
    dens = den if isinstance(den, list) else [den]
    out = []
    for rnd, row in by.get(num, {}).items():
        d = [f(by[k][rnd]) for k in dens if rnd in by.get(k, {})]
        if d:
            out.append(f(row) / max(d))
    return out


def machine():
    cores = os.cpu_count()
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    df = subprocess.run(["df", "-h", "--output=source,fstype,size", "."], capture_output=True,
                        text=True).stdout.strip().splitlines()[-1]
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                  if l.startswith("model name")), "unknown cpu")
    line = "%d cores (%s), %.1f GiB RAM, storage: %s" % (cores or 0, model, int(mem) / 2**20, df)
    cmdline = open("/proc/cmdline").read()
    if "page_reporting" in cmdline:
        line += ("\n\nThis VM reports free memory to its host (`page_reporting` on the kernel command line): "
                 "memory a process frees is handed back within seconds, and the next process to touch it "
                 "faults into the host. First touch of 2.2 GB then costs anywhere from ~0.1 s to ~2 s, for "
                 "every contender alike, which is why single rounds swing and the ratios are medians of "
                 "per-round ratios.")
    return line


def chart(by, png):
    if not shutil.which("gnuplot"):
        return False
    names = sorted(k for k in by if k[0] != "none")
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        for i, k in enumerate(names):
            vals = [gbps(r) for r in by[k].values()]
            f.write('%d "%s (%s)" %.4f\n' % (i, k[1], k[0], statistics.median(vals)))
        dat = f.name
    script = """set terminal pngcairo size 1100,600 noenhanced
set output '%s'
set style fill solid 0.8
set boxwidth 0.7
set ylabel 'GB/s (median of rounds)'
set xtics rotate by -40 font ',9'
set title 'shardload vs limits and alternatives'
set grid ytics
plot '%s' using 1:3:xtic(2) with boxes notitle
""" % (png, dat)
    ok = subprocess.run(["gnuplot"], input=script, text=True).returncode == 0
    os.unlink(dat)
    return ok


def mpi_section(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    out = ["", "## MPI: ranks on one host (bench/mpi.sh, median of 3 runs each)", ""]
    if not rows or "skipped" in rows[0]:
        return out + ["Not run: %s." % (rows[0].get("skipped") if rows else "no output")]
    out += ["| cache | ranks | strategy | seconds | GB/s | bytes read | read amplification | "
            "bytes exchanged | read requests | most in flight |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append("| %s | %d | %s | %.3f | %.3f | %d | %.2f | %d | %s | %s |" % (
            r.get("cache", "hot"), r["ranks"], r["dist"], r["seconds"], r["gbps"], r["bytes_read"],
            r["read_amplification"], r["bytes_exchanged"], r.get("read_requests", ""),
            r.get("read_depth_peak", "")))
    return out + ["", "Ranks share this machine's 2 cores, so more ranks cannot be faster here; the byte "
                  "counts show the strategies: cooperative reads each byte once across the job. "
                  "Cold: the page cache dropped before each run (as root)."]


def main():
    src, out, png, model, alt_tp, have_torch = sys.argv[1:7]
    by = load(src)
    tps = sorted({int(k[1].split("-tp")[1].split("-")[0]) for k in by if k[1].startswith("shardload-tp")})
    L = ["# Benchmark results", "",
         "Model: synthetic `%s` (from `../shared/configs/%s.json`), written by `shardload synth`." % (model, model),
         "Command: `make bench` (bench/run.sh). Runs interleaved, %d rounds; ratios are medians of per-round ratios." %
         len(by.get(("hot", "seq"), {})), "", "## Ratios", "",
         "| comparison | median ratio | per round |", "|---|---:|---|"]

    def ratio_row(label, num, den, f=gbps):
        rs = per_round_ratio(by, num, den, f)
        if rs:
            L.append("| %s | **%.2fx** | %s |" % (label, statistics.median(rs), ", ".join("%.2f" % x for x in rs)))

    for t in tps:
        ratio_row("hot, TP=%d: shardload / best of (sequential 16 MiB reads, mmap+copy)" % t,
                  ("hot", "shardload-tp%d" % t), [("hot", "seq"), ("hot", "mmapcopy")])
    for t in tps:
        ratio_row("cold, TP=%d: shardload --io direct / sequential O_DIRECT reads" % t,
                  ("cold", "shardload-tp%d-direct" % t), ("cold", "direct"))
    inv = lambda row: 1.0 / secs(row)   # speed-up = their seconds / ours
    ratio_row("hot, TP=%s: speed-up over numpy memmap + per-rank slice + copy" % alt_tp,
              ("hot", "shardload-tp%s" % alt_tp), ("hot", "numpy-tp%s" % alt_tp), inv)
    if have_torch == "1":
        ratio_row("hot, TP=%s: speed-up over PyTorch whole-tensor-then-narrow per rank (vLLM default)" % alt_tp,
                  ("hot", "shardload-tp%s" % alt_tp), ("hot", "torch-tp%s" % alt_tp), inv)
    else:
        L.append("| PyTorch alternative | not run | python3-torch did not install on this machine |")
    ratio_row("hot: speed-up over mmap + copy per tensor (C rendition of the safetensors libraries, 1 rank)",
              ("hot", "shardload-tp1"), ("hot", "mmapcopy"), inv)

    L += ["", "## Memory", "",
          "| run | device bytes | peak RSS | RSS - device bytes | page-cache growth |", "|---|---:|---:|---:|---:|"]
    for k in sorted(by):
        if not k[1].startswith("shardload"):
            continue
        for rnd, row in sorted(by[k].items())[:1]:
            res = row["result"]
            dev = sum(d["allocated_bytes"] for d in res.get("devices", []))
            rss = res["peak_rss_bytes"]
            L.append("| %s (%s) | %d | %d | %.1f MiB | %.1f MiB |" % (
                k[1], k[0], dev, rss, (rss - dev) / 2**20, row["cache_growth"] / 2**20))
    L += ["", "RSS - device bytes is host memory beyond the destination buffers (staging budget 64 MiB by default).",
          "Page-cache growth: resident bytes of the checkpoint files after a cold run minus before (fincore).", "",
          "## All runs (seconds: min / median / max; GB/s median)", "",
          "| run | cache | seconds | GB/s | peak RSS (MiB) |", "|---|---|---|---:|---:|"]
    for k in sorted(by):
        rows = list(by[k].values())
        L.append("| %s | %s | %s | %.3f | %.0f |" % (
            k[1], k[0], mmm([secs(r) for r in rows]), statistics.median([gbps(r) for r in rows]),
            max(r["result"].get("peak_rss_bytes", 0) for r in rows) / 2**20))
    if len(sys.argv) > 7 and os.path.exists(sys.argv[7]):
        L += mpi_section(sys.argv[7])
    L += ["", "## Machine", "", machine(), ""]
    if chart(by, png):
        L += ["![throughput](chart.png)", ""]
    # Sections written by other scripts (bench/ring_sim.sh here; bench/gpu_check.sh on a GPU machine,
    # whose figures this machine cannot renew) are kept, not lost, when this file is rewritten.
    here = os.path.dirname(os.path.abspath(out))
    for extra in ("ring.md", "python_peers.md", "jax_peers.md", "jax_many.md", "jax_dist.md", "remote.md", "moe.md",
                  "read_gap.md", "gpu.md"):   # python_peers.md: bench/python_peers.sh
        path = os.path.join(here, extra)
        if os.path.exists(path):
            L += [open(path).read().rstrip(), ""]
    open(out, "w").write("\n".join(L))


if __name__ == "__main__":
    main()
