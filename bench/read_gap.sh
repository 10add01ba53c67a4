#!/usr/bin/env bash
# bench/read_gap.sh CKPT [TP]: what reading only the needed bytes costs (docs/engine.md "Read
# once"). One rank's share (--devices 0 of --tp TP, default 8) loaded with the default gap and
# with --read-gap none, buffered and O_DIRECT, the files in the page cache, ROUNDS rounds
# interleaved (default 3). Writes bench/read_gap.jsonl and bench/read_gap.md: bytes read, read
# requests and the most in flight, seconds (min/median/max) and none's time over the default's.
set -euo pipefail
cd "$(dirname "$0")/.."
CK=${1:?usage: bench/read_gap.sh CKPT [TP]}
TP=${2:-8}
SL=${SL_CLI:-build/shardload}
ROUNDS=${ROUNDS:-3}
OUT=bench/read_gap.jsonl
: > "$OUT"
cat "$CK"/*.safetensors > /dev/null
for round in $(seq "$ROUNDS"); do
  for io in buffered direct; do
    for gap in default none; do
      extra=(); [[ $gap == none ]] && extra=(--read-gap none)
      json=$("$SL" load "$CK" --tp "$TP" --devices 0 --io "$io" "${extra[@]}" --json)
      printf '{"round":%d,"io":"%s","gap":"%s","result":%s}\n' "$round" "$io" "$gap" "$json" >> "$OUT"
    done
  done
done
python3 - "$OUT" "$CK" "$TP" "$ROUNDS" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "$(date -u +%Y-%m-%d)" > bench/read_gap.md <<'PY'
import json, statistics, sys
out, ck, tp, rounds, rev, day = sys.argv[1:]
rows = [json.loads(l) for l in open(out)]
by = {}
for r in rows:
    by.setdefault((r["io"], r["gap"]), []).append(r["result"])
print("## Reading only the needed bytes (bench/read_gap.sh)\n")
print(f"{day}, commit {rev}. `{ck}`, `shardload load CKPT --tp {tp} --devices 0 --io IO [--read-gap none] --json`, "
      f"files in the page cache, {rounds} interleaved rounds. Requests: `read_requests` "
      "(most in flight: `read_depth_peak`). Ratio: none's median seconds / the default's.\n")
print("| io | gaps | bytes read | requests (most in flight) | seconds min / median / max | ratio |")
print("|---|---|---|---|---|---|")
for io in ("buffered", "direct"):
    med = {}
    for gap in ("default", "none"):
        rs = by[(io, gap)]
        t = sorted(r["seconds"] for r in rs)
        med[gap] = statistics.median(t)
        r0 = rs[0]
        ratio = f"{med['none'] / med['default']:.2f}" if gap == "none" else ""
        print(f"| {io} | {gap} | {r0['bytes_read']:,} | {r0.get('read_requests', 0):,} "
              f"({r0.get('read_depth_peak', 0)}) | {t[0]:.3f} / {med[gap]:.3f} / {t[-1]:.3f} | {ratio} |")
PY
echo "bench: wrote bench/read_gap.md" >&2
