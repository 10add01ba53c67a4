#!/usr/bin/env python3
"""gpu_report.py LOG FAILS - the markdown "GPU" section of bench/RESULTS.md from the JSON lines that
bench/gpu_check.sh wrote: correctness, shardload's throughput per setting (best of the runs), and
the ratios to pinned host-to-device bandwidth and to PyTorch on the same files. Standard library
only.

gpu_report.py --splice RESULTS SECTION - replaces the "## GPU" section of RESULTS (or appends one)
with the file SECTION; bench/report.py keeps bench/gpu.md when it rewrites RESULTS."""
import json
import os
import re
import sys
import time
from typing import Any


DEVICE_ARGS = re.compile(r"--device (cuda|pjrt --pjrt-plugin \S+)")


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


def ratio(a, b):
    return a / b if a and b else None


def best_runs(rows):
    """Best run per (label, cache), by throughput after device setup."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if "run" not in r:
            continue
        key = (r["run"], r["cache"])
        o = r["out"]
        cur = best.get(key)
        if cur is None or o["gbps_after_setup"] > cur["out"]["gbps_after_setup"]:
            best[key] = dict(r, n=(cur["n"] + 1 if cur else 1))
        else:
            cur["n"] += 1
    return best


def python_line(p):
    """One paragraph on the Python package (bench/gpu_python.py)."""
    yn = {True: "yes", False: "NO"}
    line = (f"Python API (`shardload.load(..., tp={p['tp']}, devices={p['devices']}, device=\"cuda\")`, "
            f"{p['bytes'] / 1e9:.2f} GB): cuda checksums = cpu: {yn[p['checksums_equal']]}; "
            f"load {p['load_cuda_s']:.2f} s (library's own figure {p['stats_seconds']:.2f} s)")
    if "torch_skipped" in p:
        line += f"; torch parts skipped ({p['torch_skipped']})"
    else:
        line += (f"; torch views on the right GPU: {yn[p['views_on_gpu']]}, zero-copy: "
                 f"{yn[p['views_zero_copy']]}; `load_into` CUDA tensors ({p['load_into_bytes'] / 1e9:.2f} GB) "
                 f"{p['load_into_s']:.2f} s, equal: {yn[p['load_into_equal']]}")
    if "jax_skipped" in p:
        return line + f"; JAX skipped ({p['jax_skipped']}).\n"
    if "jax_load_s" in p:
        line += (f"; `shardload.jax.load` onto the GPUs ({p['jax_bytes'] / 1e9:.2f} GB) "
                 f"{p['jax_load_s']:.2f} s, equal to its CPU result: {yn[p['jax_equal_cpu']]}, "
                 f"on GPUs: {yn[p['jax_on_gpus']]}; safe_open + device_put per tensor "
                 f"{p['jax_peer_device_put_s']:.2f} s ({fmt(ratio(p['jax_peer_device_put_s'], p['jax_load_s']))}x)"
                 f"; staging {p.get('jax_staging', '?')} ({p.get('jax_dma', '?')})")
    if "jax_dma_load_s" in p:
        line += (f"; with {p['jax_pair_staging'] >> 20} MiB staging, slabs DMA-mapped "
                 f"{p['jax_dma_load_s']:.2f} s (staging {p.get('jax_dma_stats', {}).get('staging', '?')}) "
                 f"vs plain (dma=False) {p['jax_plain_load_s']:.2f} s "
                 f"({fmt(ratio(p['jax_plain_load_s'], p['jax_dma_load_s']))}x)")
    if "jax_pinned_load_s" in p:
        line += (f"; into pinned host memory (memory_kind \"pinned_host\") {p['jax_pinned_load_s']:.2f} s, "
                 f"in that memory: {yn[p['jax_pinned_in_kind']]}, equal: {yn[p['jax_pinned_equal_cpu']]}")
    elif "jax_pinned_error" in p or "jax_pinned_skipped" in p:
        line += f"; pinned host memory: {p.get('jax_pinned_error') or p.get('jax_pinned_skipped')}"
    return line + ".\n"


def pjrt_lines(rows, h2d):
    """The pjrt backend on JAX's CUDA plugin (gpu_check.sh section 4c), or why it was skipped."""
    skipped = next((r["pjrt_skipped"] for r in rows if "pjrt_skipped" in r), None)
    if skipped:
        return [f"PJRT backend (`--device pjrt`): skipped: {skipped}.\n"]
    plugin = next((r for r in rows if "pjrt_plugin" in r), None)
    runs = [r for r in rows if "pjrt" in r]
    if not plugin and not runs:
        return []
    name = os.path.basename(plugin["pjrt_plugin"]) if plugin else "?"
    ver = plugin.get("pjrt_version", "?") if plugin else "?"
    out = [f"PJRT backend (`--device pjrt --pjrt-plugin {name}`, PJRT {ver}; mesh device d on PJRT "
           "device d % count, so TP 8 shares the one GPU; client made with preallocate false): "
           "checksums read back through the plugin, against the cpu and cuda loads of the same TP; "
           "speed after device setup against that cuda load and against pinned host-to-device "
           "bandwidth (torch, section 6; n/a without it); GPU memory delta from "
           "PJRT_Device_MemoryStats (largest free before, smallest after, over the mesh devices).\n"]
    for r in rows:
        if "pjrt_finding" in r:
            out.append(f"Finding: {r['pjrt_finding']}\n")
    if runs:
        out += ["| run | parameters | checksums = cpu | = cuda | GB/s after setup | cuda GB/s "
                "after setup | pjrt / cuda | pjrt / pinned H2D | setup s | GPU memory delta : plan "
                "bytes | staging | peak RSS MB | device 0 |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in runs:
            o, c = r["out"], r.get("cuda") or {}
            delta = "n/a" if r.get("mem_delta") is None else f"{r['mem_delta']}:{r['plan_bytes']}"
            out.append(f"| pjrt {r['pjrt']} | {r['params']} | {r['equal_cpu']} | {r['equal_cuda']} | "
                       f"{o['gbps_after_setup']:.2f} | {fmt(c.get('gbps_after_setup'))} | "
                       f"{fmt(ratio(o['gbps_after_setup'], c.get('gbps_after_setup')))} | "
                       f"{fmt(ratio(o['gbps_after_setup'], h2d))} | "
                       f"{o['setup_seconds']:.2f} | {delta} | {r.get('staging') or 'n/a'} | "
                       f"{fmt(o.get('peak_rss_bytes', 0) / 1e6, '.0f')} | "
                       f"{(o.get('devices') or [{}])[0].get('pjrt_routes', 'n/a')} |")
        base = next((r["pjrt_baseline"] for r in rows if "pjrt_baseline" in r), None)
        if base and base.get("peak_rss_bytes"):
            out.append(f"\nThe plugin alone (a dummy load of a few KB through it): peak RSS "
                       f"{base['peak_rss_bytes'] / 1e6:.0f} MB.")
        out.append("")
    return out


def main():
    rows = load(sys.argv[1])
    fails = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    fails = max(fails, sum(1 for r in rows if "fail" in r))   # a subshell's failures too
    env: dict[str, Any] = next((r["env"] for r in rows if "env" in r), {})
    ck: dict[str, Any] = next((r["checkpoint"] for r in rows if "checkpoint" in r), {})
    warm: dict[str, Any] = next((r for r in rows if "h2d_pinned_gbps" in r or "torch_skipped" in r), {})
    cold: dict[str, Any] = next((r for r in rows if "load_file_cold_s" in r), {})
    nbytes = ck.get("bytes", 0)
    out = []
    out.append(f"\n## GPU ({time.strftime('%Y-%m-%d')}): {ck.get('config', '?')}, "
               f"{nbytes / 1e9:.2f} GB bf16 in {ck.get('files', '?')} files\n")
    out.append(f"Produced by `bash bench/gpu_check.sh`. GPU: {env.get('gpu', '?')}; {env.get('cpus', '?')} "
               f"CPUs; kernel {env.get('kernel', '?')}; torch "
               f"{warm.get('torch', 'n/a (' + warm.get('torch_skipped', 'not run') + ')')}. "
               f"Failures: {fails}.\n")
    for r in rows:   # what failed, in the script's words (the first lines of each)
        if "fail" in r:
            out.append("Failed: " + " / ".join(x.strip() for x in r["fail"].splitlines()[-3:]) + "\n")
    skipped = [f"{r['skipped']} (at {r['elapsed_s']} s)" for r in rows if "skipped" in r]
    if skipped:
        out.append("Skipped for time (GPU_BUDGET_S): " + "; ".join(skipped) + ".\n")
    checks = [r for r in rows if "check" in r]
    if checks:
        out += ["| check | parameters | cuda checksums = cpu | device memory delta : plan bytes, per device |",
                "|---|---|---|---|"]
        for r in checks:
            out.append(f"| {r['check']} | {r['params']} | {r['checksums_equal']} | {r['delta_plan']} |")
        out.append("")
    py = next((r["python"] for r in rows if "python" in r), None)
    if py:
        out.append(python_line(py))
    conv = next((r["cuda_convert"] for r in rows if "cuda_convert" in r), None)
    if conv:   # SL_CUDA_CONVERT=gpu's check: where tp2_to_f32_gpu's device 0 converted
        out.append(f"Conversions with SL_CUDA_CONVERT=gpu (check tp2_to_f32_gpu, device 0): {conv}\n")
    h2d_row: dict[str, Any] = next((r for r in rows if "h2d_pinned_gbps" in r), {})
    out += pjrt_lines(rows, h2d_row.get("h2d_pinned_gbps"))
    best = best_runs(rows)
    if best:
        out += ["Throughput: checkpoint bytes read / time. `whole load` is sl_load from the call to the "
                "last byte on the devices; `after setup` leaves out opening the devices (CUDA runtime and "
                "context start-up, cudaMalloc), a fixed cost a serving process pays once; `process` is the "
                "CLI's wall-clock time, planning and teardown included. Best of the runs shown.\n",
                "| run | cache | engine | GB/s whole load | GB/s after setup | setup s | process s | "
                "peak RSS MB | staging peak MB | runs |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for (label, cache), r in best.items():
            o = r["out"]
            args = " ".join(DEVICE_ARGS.sub("", r["args"]).split())   # the device is in the label
            out.append(f"| {label} {args} | {cache} | {o['engine']}, "
                       f"{o['io']} | {o['gbps']:.2f} | {o['gbps_after_setup']:.2f} | {o['setup_seconds']:.2f} | "
                       f"{r['wall_s']:.2f} | {o['peak_rss_bytes'] / 1e6:.0f} | {o['staging_peak'] / 1e6:.0f} | "
                       f"{r['n']} |")
        out.append("")
    copies = [r for r in rows if "copy" in r]
    if copies:
        one_d = {r["chunk"]: r["gbps"] for r in copies if r["copy"] == "1d"}
        out += ["Copy engine as the backend drives it (bench/gpu_copy.c: memory mmap'd and page-locked "
                "with cudaHostRegister, as the staging block is; one stream). 1-D: GB/s by copy size. "
                "Narrow rows (W of every P bytes, TP 8 column splits of Llama-3-8B are 1 KiB of 8 KiB "
                "and 3.5 KiB of 28 KiB): one cudaMemcpy2DAsync per 16 MiB of source, against gathering "
                "the rows on the host with memcpy (one thread), which would then still need its 1-D copy.\n",
                "| copy | GB/s | fraction of 1-D 16 MiB |", "|---|---|---|"]
        ref = one_d.get(16 << 20)
        for r in copies:
            what = (f"1-D, {r['chunk'] >> 20} MiB copies" if r["copy"] == "1d" else
                    f"{'2-D' if r['copy'] == '2d' else 'host gather'}, rows {r['width']} of {r['pitch']}")
            out.append(f"| {what} | {r['gbps']:.2f} | {fmt(ratio(r['gbps'], ref))} |")
        out.append("")
    h2d = warm.get("h2d_pinned_gbps")
    lf = nbytes / warm["load_file_s"] / 1e9 if warm.get("load_file_s") else None
    nc = nbytes / warm["narrow_tp2_s"] / 1e9 if warm.get("narrow_tp2_s") else None
    lfc = nbytes / cold["load_file_cold_s"] / 1e9 if cold.get("load_file_cold_s") else None

    def g(label, cache="warm", key="gbps_after_setup"):
        r = best.get((label, cache)) or next((v for (k, c), v in best.items()
                                              if k == label and c.startswith(cache)), None)
        return r["out"][key] if r else None

    def wall_gbps(label, cache="warm"):
        r = best.get((label, cache)) or next((v for (k, c), v in best.items()
                                              if k == label and c.startswith(cache)), None)
        return nbytes / r["wall_s"] / 1e9 if r and r["wall_s"] else None

    cuda_warm = [(k[0], v["out"]["gbps_after_setup"]) for k, v in best.items()
                 if k[1] == "warm" and k[0].startswith("cuda_tp1")]
    top = max(cuda_warm, key=lambda x: x[1]) if cuda_warm else (None, None)
    ring: list[dict[str, Any]] = next((r["convert_ring"] for r in rows if "convert_ring" in r), [])
    ring_desc = " / ".join(f"{p['piece_ki']} Ki elements on {p['threads']} thread(s)" for p in ring) or "(not run)"
    ring_vals = " / ".join(fmt(p["geps"]) for p in ring) or "n/a"
    conv = [v for v in (g('cuda_tp1_to_f32'), g('cuda_tp1_to_f32_again')) if v is not None]
    conv_shared = max(conv) if conv else None
    out += ["| comparison (same files, same run) | value |", "|---|---|",
            f"| pinned host-to-device bandwidth, torch, 1 GiB copy (GB/s) | {fmt(h2d)} |",
            f"| shardload cuda TP 1, default settings, page cache, after setup (GB/s) | {fmt(g('cuda_tp1_default'))} |",
            f"| ... as a fraction of pinned H2D bandwidth (target >= 0.80) | {fmt(ratio(g('cuda_tp1_default'), h2d))} |",
            f"| best setting ({top[0]}) as a fraction of pinned H2D | {fmt(ratio(top[1], h2d))} |",
            f"| safetensors load_file(device='cuda'), page cache, warm process (GB/s) | {fmt(lf)} |",
            f"| shardload default (after setup) / load_file (target >= 2) | {fmt(ratio(g('cuda_tp1_default'), lf))} |",
            f"| shardload default, whole CLI process incl. CUDA start-up / load_file | {fmt(ratio(wall_gbps('cuda_tp1_default'), lf))} |",
            f"| torch whole tensor, narrow, copy per rank, TP 2 (GB/s) | {fmt(nc)} |",
            f"| shardload TP 2 (after setup) / narrow-and-copy | {fmt(ratio(g('cuda_tp2_default'), nc))} |",
            f"| bf16 -> f32 TP 1, conversion shared by the helpers (default; best of two runs around the variant's) (GB/s) | {fmt(conv_shared)} |",
            f"| ... with each ring piece converted on one thread (the variant build, as before) (GB/s) | {fmt(g('cuda_tp1_to_f32_ring_onethread'))} |",
            f"| ... shared / one thread | {fmt(ratio(conv_shared, g('cuda_tp1_to_f32_ring_onethread')))} |",
            f"| conversion alone (bench_convert), ring pieces {ring_desc} (G elements/s) | {ring_vals} |",
            f"| from disk: shardload cuda TP 1 default (GB/s, after setup) | {fmt(g('cuda_tp1_default', 'cold'))} |",
            f"| from disk: safetensors load_file(device='cuda') (GB/s) | {fmt(lfc)} |",
            f"| from disk: shardload / load_file | {fmt(ratio(g('cuda_tp1_default', 'cold'), lfc))} |"]
    disk = next((r["disk"] for r in rows if "disk" in r), None)
    if disk:
        why = f" ({disk['why'].strip()})" if disk.get("why") else ""
        out += [f"| from disk: the disk itself ({disk['how']}) (GB/s) | {fmt(disk['gbps'])}{why} |",
                f"| from disk: shardload / the disk | {fmt(ratio(g('cuda_tp1_default', 'cold'), disk['gbps']))} |"]
    print("\n".join(out))


def splice(results, section):
    old = open(results).read().split("\n") if os.path.exists(results) else []
    keep, skipping = [], False
    for line in old:
        if line.startswith("## "):
            skipping = line.startswith("## GPU")
        if not skipping:
            keep.append(line)
    text = "\n".join(keep).rstrip() + "\n\n" + open(section).read().strip() + "\n"
    open(results, "w").write(text)


if __name__ == "__main__":
    if sys.argv[1] == "--splice":
        splice(sys.argv[2], sys.argv[3])
    else:
        main()
