#!/usr/bin/env bash
# ring_sim.sh CHECKPOINT - how well the cuda backend's staging ring keeps the host-to-device link
# busy, measured without a GPU: loads CHECKPOINT (in the page cache) with --device cuda on the
# host-memory stand-in tests/fake_cudart.c in its timed mode (one copy engine per GPU moving
# FAKE_CUDA_GBPS), and reports the engine's busy time over the load time after device setup.
# 1.0 means the link never waited for reads. Settings compared: the defaults, smaller requests
# (more slots in the same budget), a larger budget, and the defaults with whole-stream waits
# (FAKE_CUDA_EVENTS_AS_STREAM: what fencing the stream before each slot refill gives), and the
# defaults with a bf16 -> f32 conversion (host conversion through the ring of pinned pieces; the
# link then carries twice the bytes), and TP 8 on the one modelled GPU, plain and converted (column
# splits: narrow rows, as 2-D copies or, converted, packed into ring pieces).
# Writes bench/ring.jsonl and bench/ring.md (bench/report.py puts it into RESULTS.md).
# Knobs: RING_GBPS (modelled link speeds, default "2 8 16"), RING_ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
CK=${1:?usage: ring_sim.sh CHECKPOINT_DIR}
SL=build/shardload
FAKE=build/tests/libfake_cudart.so
PY=/usr/bin/python3
ROUNDS=${RING_ROUNDS:-3}
SPEEDS=${RING_GBPS:-"2 8 16"}
OUTJ=bench/ring.jsonl
[[ -x $SL && -f $FAKE ]] || { echo "ring_sim: build with tests first (make)" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
: >"$OUTJ"
bytes=$(cat "$CK"/*.safetensors | wc -c)   # also warms the page cache

settings=("default|" "request 8 MiB|--request 8" "request 4 MiB|--request 4" "staging 256 MiB|--staging 256"
          "default, whole-stream waits|" "default, converted to f32 on the way|--dtype f32"
          "TP 8 on one GPU (narrow rows as 2-D copies)|--tp 8"
          "TP 8 on one GPU, converted to f32 (rows gathered into pieces)|--tp 8 --dtype f32")
for ((r = 0; r < ROUNDS; r++)); do
  for gbps in $SPEEDS; do
    for s in "${settings[@]}"; do
      name=${s%%|*} args=${s#*|}
      env=(FAKE_CUDA_GBPS="$gbps" FAKE_CUDA_GPUS=1 FAKE_CUDA_MEM=$((64 << 30)) FAKE_CUDA_LOG="$T/log"
           SL_CUDART="$FAKE")
      [[ $name == *whole-stream* ]] && env+=(FAKE_CUDA_EVENTS_AS_STREAM=1)
      rm -f "$T/log"
      # shellcheck disable=SC2086
      out=$(env "${env[@]}" "$SL" load "$CK" --device cuda $args --json)
      busy=$(sed -n 's/.*engine_busy_s=\([0-9.]*\).*/\1/p' "$T/log")
      echo "{\"setting\":\"$name\",\"gbps_link\":$gbps,\"busy_s\":$busy,\"bytes\":$bytes,\"load\":$out}" >>"$OUTJ"
      echo "ring_sim: $gbps GB/s link, $name: busy ${busy} s, $(echo "$out" | grep -o '"seconds":[0-9.]*,"setup_seconds":[0-9.]*')" >&2
    done
  done
done

$PY - "$OUTJ" >bench/ring.md <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    after = r["load"]["seconds"] - r["load"]["setup_seconds"]
    groups.setdefault((r["gbps_link"], r["setting"]), []).append((r["busy_s"] / after, after, r["load"]["staging_peak"]))
n = len(next(iter(groups.values())))
print("\n## cuda staging ring on the host-memory stand-in (no GPU)\n")
print(f"`bash bench/ring_sim.sh` (part of `make bench`): {rows[0]['bytes'] / 1e9:.2f} GB from the page cache, "
      "TP 1 unless said, `--device cuda` on tests/fake_cudart.c with one modelled copy engine of the given speed. "
      "Link utilization = engine busy time / load time after device setup (1.0: the link never waited "
      f"for reads). Median of {n} interleaved runs; this machine's reads bound it at the higher speed.\n")
print("| link GB/s | setting | link utilization | load s after setup | staging peak MB |")
print("|---|---|---|---|---|")
for (gbps, name), v in groups.items():
    print(f"| {gbps} | {name} | {statistics.median(x[0] for x in v):.2f} | "
          f"{statistics.median(x[1] for x in v):.2f} | {max(x[2] for x in v) / 1e6:.0f} |")
PYEOF
cat bench/ring.md
