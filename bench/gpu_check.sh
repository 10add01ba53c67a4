#!/usr/bin/env bash
# gpu_check.sh - the cuda backend on a real GPU, in one run of a few minutes: build shardload,
# synthesize a checkpoint (~2.5 GB bf16), check cuda shards against the cpu backend (TP 1 and 2),
# measure load throughput from the page cache and from disk, the device memory deltas, pinned
# host-to-device bandwidth, safetensors.torch.load_file(device="cuda") and PyTorch's
# whole-tensor-then-narrow-and-copy per rank, and append a "GPU" section to bench/RESULTS.md.
#
# Needs: cmake, a C compiler, jansson and xxhash headers (liburing optional), an NVIDIA driver and
# libcudart (found by shardload at run time; SL_CUDART to pick one). The PyTorch parts need torch
# and safetensors in python3 and are skipped (reported as n/a) without them. Installs nothing.
#
# Knobs: GPU_CONFIG (default ../shared/configs/llama-3.2-1b.json), GPU_WORK (work dir, default
#        build-gpu), GPU_RESULTS (default bench/RESULTS.md), GPU_FAKE=1 (CPU dry run of this script:
#        the host-memory stand-in tests/fake_cudart.c instead of libcudart, torch skipped).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONFIG=${GPU_CONFIG:-$ROOT/../shared/configs/llama-3.2-1b.json}
WORK=${GPU_WORK:-$ROOT/build-gpu}
RESULTS=${GPU_RESULTS:-$ROOT/bench/RESULTS.md}
PY=${PY:-python3}
BUILD=$WORK/build
SL=$BUILD/shardload
CK=$WORK/ck
LOG=$WORK/gpu_check.jsonl
say() { echo "gpu_check: $*" >&2; }
die() { echo "gpu_check: error: $*" >&2; exit 1; }
mkdir -p "$WORK" || die "cannot create $WORK"
: > "$LOG"

# ---- 1. environment: say clearly what is missing -------------------------------------------------
have_header() { echo "#include <$1>" | ${CC:-cc} -E -x c - >/dev/null 2>&1; }
missing=""
for h in jansson.h:libjansson-dev xxhash.h:libxxhash-dev; do
    have_header "${h%%:*}" || missing="$missing ${h%%:*} (Debian: ${h#*:})"
done
have_header liburing.h && uring=yes || uring="no (pread engine will be used; Debian: liburing-dev)"
command -v cmake >/dev/null || missing="$missing cmake"
say "headers: jansson $(have_header jansson.h && echo yes || echo MISSING), xxhash" \
    "$(have_header xxhash.h && echo yes || echo MISSING), liburing $uring"
[ -z "$missing" ] || die "cannot build shardload here, missing:$missing"
if [ "${GPU_FAKE:-0}" = 1 ]; then
    export SL_CUDART=$BUILD/tests/libfake_cudart.so FAKE_CUDA_GPUS=2
    GPU_DESC="none (GPU_FAKE=1: host-memory stand-in, CPU dry run)"
else
    GPU_DESC=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$GPU_DESC" ] || say "nvidia-smi found no GPU; the cuda loads below will say why they fail"
fi
say "GPU: ${GPU_DESC:-unknown}; nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"

# ---- 2. build --------------------------------------------------------------------------------------
tests=OFF
[ "${GPU_FAKE:-0}" = 1 ] && tests=ON
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSL_BUILD_TESTS=$tests -DSL_WITH_MPI=OFF \
    >"$WORK/cmake.log" 2>&1 || die "cmake configure failed; see $WORK/cmake.log: $(tail -3 "$WORK/cmake.log")"
cmake --build "$BUILD" -j"$(nproc)" >"$WORK/build.log" 2>&1 \
    || die "build failed; see $WORK/build.log: $(grep -m3 -i error "$WORK/build.log")"

# ---- 3. checkpoint ---------------------------------------------------------------------------------
[ -f "$CONFIG" ] || die "no config $CONFIG (set GPU_CONFIG)"
if [ ! -f "$CK/.complete" ]; then
    rm -rf "$CK"
    say "synthesizing $(basename "$CONFIG") into $CK"
    "$SL" synth --config "$CONFIG" "$CK" --max-shard-size 1GB >/dev/null || die "synth failed"
    touch "$CK/.complete"
fi
FILES=$(ls "$CK"/*.safetensors)
CK_BYTES=$(cat $FILES | wc -c)
say "checkpoint: $(echo $FILES | wc -w) files, $CK_BYTES bytes"

# ---- helpers ---------------------------------------------------------------------------------------
field() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }
nums() { grep -o "\"$1\":[0-9]*" | cut -d: -f2 | tr '\n' ' '; }
sums() { grep -o '"xxh3":"[0-9a-f]*"' | tr -d '\n' | xxh_digest; }
xxh_digest() { md5sum | cut -c1-16; }
# Evicts the checkpoint from the page cache: drop_caches as root, else fadvise(DONTNEED).
evict() {
    sync
    if [ "$(id -u)" = 0 ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
        echo drop_caches
    else
        "$PY" - $FILES <<'PYEOF'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
print("fadvise")
PYEOF
    fi
}
warm() { cat $FILES >/dev/null; }
record() { echo "$1" >>"$LOG"; }
fails=0
bad() { say "FAIL: $*"; fails=$((fails + 1)); }

# ---- 4. correctness: cuda vs cpu, TP 1 and 2; allocations and memory deltas ------------------------
warm
declare -A MEMDELTA
for tp in 1 2; do
    cpu=$("$SL" load "$CK" --tp $tp --checksums --json) || die "cpu load tp $tp failed"
    cuda=$("$SL" load "$CK" --tp $tp --device cuda --checksums --json) || die "cuda load tp $tp failed"
    [ "$(echo "$cpu" | sums)" = "$(echo "$cuda" | sums)" ] && ok=yes || { ok=no; bad "tp $tp: cuda checksums differ from cpu"; }
    plan=$("$SL" plan "$CK" --tp $tp --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' ')
    alloc=$(echo "$cuda" | nums allocated_bytes)
    [ "$alloc" = "$plan" ] || bad "tp $tp: allocated '$alloc' != plan '$plan'"
    before=($(echo "$cuda" | nums mem_free_before)) after=($(echo "$cuda" | nums mem_free_after))
    p=($plan) deltas=""
    for ((d = 0; d < tp; d++)); do deltas="$deltas$((before[d] - after[d]))/${p[d]} "; done
    MEMDELTA[$tp]=$deltas
    record "{\"check\":\"tp$tp\",\"checksums_equal\":\"$ok\",\"plan\":\"$plan\",\"alloc\":\"$alloc\",\"mem_delta_over_plan\":\"$deltas\"}"
    say "tp $tp: checksums equal $ok; memory delta/plan per device: $deltas"
done

# ---- 5. throughput: page cache and disk --------------------------------------------------------------
load_gbps() { # label tp mode
    [ "$3" = cold ] && how=$(evict) || { warm; how=warm; }
    out=$("$SL" load "$CK" --tp "$2" --device cuda --json) || { bad "$1 load failed"; echo 0; return; }
    g=$(echo "$out" | field gbps) s=$(echo "$out" | field seconds)
    record "{\"run\":\"$1\",\"tp\":$2,\"cache\":\"$how\",\"gbps\":$g,\"seconds\":$s}"
    say "$1: $g GB/s ($s s, cache $how)"
    echo "$g"
}
WARM1=$(load_gbps cuda_tp1_warm 1 warm)
WARM2=$(load_gbps cuda_tp2_warm 2 warm)
COLD1=$(load_gbps cuda_tp1_cold 1 cold)
CPU1=$(warm; "$SL" load "$CK" --json | field gbps)

# ---- 6. PyTorch baselines (skipped without torch) -----------------------------------------------------
warm
TORCH=$("$PY" - "$CK" $FILES <<'PYEOF' 2>"$WORK/torch.err"
import json, os, sys, time
try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    if not torch.cuda.is_available():
        raise ImportError("torch.cuda.is_available() is False")
except Exception as e:  # torch missing on CPU hosts: report, do not fail
    print(json.dumps({"skipped": str(e)}))
    sys.exit(0)
files = sys.argv[2:]
nbytes = sum(os.path.getsize(f) for f in files)
def best(fn, n=3):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return min(ts)
# pinned host-to-device bandwidth, 1 GiB buffer
buf = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
h2d = (1 << 30) / best(lambda: buf.to("cuda", non_blocking=True)) / 1e9
del buf
# safetensors load_file(device="cuda"), whole checkpoint
def lf():
    for f in files:
        d = load_file(f, device="cuda"); del d
t_lf = best(lf, 2)
# whole tensor to host, then narrow dim 0 per rank and copy (vLLM's default loader), TP 2
gpus = torch.cuda.device_count()
def narrow(tp=2):
    for f in files:
        with safe_open(f, "pt", device="cpu") as h:
            for k in h.keys():
                t = h.get_tensor(k)
                for r in range(tp):
                    s = t.narrow(0, r * (t.shape[0] // tp), t.shape[0] // tp) if t.dim() and t.shape[0] % tp == 0 else t
                    s.to(f"cuda:{r % gpus}")
t_nc = best(narrow, 2)
print(json.dumps({"h2d_gbps": h2d, "load_file_s": t_lf, "load_file_gbps": nbytes / t_lf / 1e9,
                  "narrow_tp2_s": t_nc, "narrow_tp2_gbps": nbytes / t_nc / 1e9, "torch": torch.__version__}))
PYEOF
)
[ -n "$TORCH" ] || TORCH='{"skipped":"python failed: see torch.err"}'
record "$TORCH"
say "torch: $TORCH"

# ---- 7. RESULTS.md ------------------------------------------------------------------------------------
"$PY" - "$RESULTS" "$LOG" "$GPU_DESC" "$CK_BYTES" "$WARM1" "$WARM2" "$COLD1" "$CPU1" "$fails" \
    "$(basename "$CONFIG")" <<'PYEOF' || die "could not write the results"
import json, sys, time
out, log, gpu, ck, w1, w2, c1, cpu1, fails, cfg = sys.argv[1:]
rows = [json.loads(l) for l in open(log) if l.strip()]
t = next((r for r in rows if "skipped" in r or "h2d_gbps" in r), {"skipped": "not run"})
w1, w2, c1, cpu1 = float(w1 or 0), float(w2 or 0), float(c1 or 0), float(cpu1 or 0)
na = lambda x: "n/a" if x is None else f"{x:.2f}"
h2d = t.get("h2d_gbps")
lines = [f"\n## GPU ({time.strftime('%Y-%m-%d')}, {cfg}, {int(ck) / 1e9:.2f} GB bf16)\n",
         f"GPU: {gpu}. Torch: {t.get('torch', 'n/a (' + t.get('skipped', '') + ')')}. "
         f"Correctness failures: {fails}.\n",
         "| measure | value |", "|---|---|",
         f"| shardload cuda TP 1, page cache (GB/s) | {w1:.2f} |",
         f"| shardload cuda TP 2, page cache (GB/s) | {w2:.2f} |",
         f"| shardload cuda TP 1, from disk (GB/s) | {c1:.2f} |",
         f"| shardload cpu TP 1, page cache (GB/s) | {cpu1:.2f} |",
         f"| pinned H2D bandwidth, torch (GB/s) | {na(h2d)} |",
         f"| shardload TP 1 warm / pinned H2D | {na(w1 / h2d if h2d else None)} |",
         f"| safetensors load_file(device='cuda') (GB/s) | {na(t.get('load_file_gbps'))} |",
         f"| speed-up of shardload TP 1 over load_file | {na(w1 / t['load_file_gbps'] if t.get('load_file_gbps') else None)} |",
         f"| torch whole-tensor, narrow, copy per rank, TP 2 (GB/s) | {na(t.get('narrow_tp2_gbps'))} |",
         f"| speed-up of shardload TP 2 over narrow-and-copy | {na(w2 / t['narrow_tp2_gbps'] if t.get('narrow_tp2_gbps') else None)} |"]
for r in rows:
    if r.get("check"):
        lines.append(f"| {r['check']}: checksums equal cpu / memory delta over plan bytes per device | "
                     f"{r['checksums_equal']} / {r['mem_delta_over_plan'].strip()} |")
with open(out, "a") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
say "appended the GPU section to $RESULTS"
[ "$fails" = 0 ] || die "$fails correctness failures (see above)"
say "ok"
