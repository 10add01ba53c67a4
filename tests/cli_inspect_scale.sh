#!/usr/bin/env bash
# cli_inspect_scale.sh - opening and listing a checkpoint is linear in files + tensors (issue 18
# item 14): 10,000 shards of 20 tensors each, listed as text, take about as long as --json (the
# text listing once counted each file's tensors by walking every tensor: 6 to 9 s here against
# 0.3 s), and opening them through an index stays within a few times that.
# Usage: cli_inspect_scale.sh path/to/shardload
set -u
SL=${1:?usage: cli_inspect_scale.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
PY=${SL_PY:-python3}
command -v "$PY" >/dev/null || { echo "no python"; exit 77; }
N=10000 K=20

"$PY" - "$T" "$N" "$K" <<'PY'
import json, os, struct, sys
root, n, k_tensors = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(f"{root}/plain"); os.makedirs(f"{root}/indexed")
wmap = {}
for i in range(n):
    names = [f"f{i}.t{k}" for k in range(k_tensors)]
    hdr = json.dumps({t: {"dtype": "U8", "shape": [1], "data_offsets": [k, k + 1]}
                      for k, t in enumerate(names)}).encode()
    hdr += b" " * (-len(hdr) % 8)
    name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
    with open(f"{root}/plain/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + bytes(k_tensors))
    os.link(f"{root}/plain/{name}", f"{root}/indexed/{name}")
    wmap.update({t: name for t in names})
json.dump({"metadata": {"total_size": k_tensors * n}, "weight_map": wmap},
          open(f"{root}/indexed/model.safetensors.index.json", "w"))
PY
[ -f "$T/indexed/model.safetensors.index.json" ] || { fail "could not write the checkpoint"; finish; }

ms() { date +%s%N | cut -c1-13; }
timed() {   # out-file, command...: the fastest of 3 runs in milliseconds (other tests may be
            # running alongside); a failure is counted
    local out=$1; shift
    local t0 t1 best=
    for _ in 1 2 3; do
        t0=$(ms)
        "$@" >"$out" 2>"$T/err" || { fail "$*: $(head -c 300 "$T/err")"; break; }
        t1=$(ms)
        [ -z "$best" ] || [ $((t1 - t0)) -lt "$best" ] && best=$((t1 - t0))
    done
    echo "${best:-0}"
}
json=$(timed "$T/plain.json" "$SL" inspect "$T/plain" --json)
text=$(timed "$T/plain.txt" "$SL" inspect "$T/plain")
ijson=$(timed "$T/indexed.json" "$SL" inspect "$T/indexed" --json)
echo "inspect of $N files of $K tensors: --json ${json} ms, text ${text} ms; with an index: --json ${ijson} ms"
# linear: the same work as --json, give or take the formatting (generous for loaded machines). The
# index adds one parse of its 200,000 entries, about 2x; this bound is a guard only (the quadratic
# match of entries to shards, fixed with the listing, cost 0.5 to 1.5 s more here, within noise of
# it). Under a sanitizer the library's code is slower and jansson's is not: looser ratios there.
tf=4 tc=1500 xf=5 xc=1500
nm "$SL" 2>/dev/null | grep -q __asan_init && tf=4 tc=2000 xf=4 xc=2000
[ "$text" -le $((tf * json + tc)) ] || fail "text listing took ${text} ms against ${json} ms for --json"
[ "$ijson" -le $((xf * json + xc)) ] || fail "opening with an index took ${ijson} ms against ${json} ms without"
grep -q "^total: $N files, $((K * N)) tensors, 200,000 data bytes" "$T/plain.txt" ||
    fail "text totals: $(tail -1 "$T/plain.txt")"
grep -q "model-10000-of-10000.safetensors  .* bytes  $K tensors$" "$T/plain.txt" ||
    fail "text lists the last file's $K tensors: $(grep -m1 'model-10000' "$T/plain.txt")"
[ "$(grep -c "  $K tensors\$" "$T/plain.txt")" -eq "$N" ] || fail "every file lists $K tensors"
grep -q '/indexed/model-00001-of-10000.safetensors"' "$T/indexed.json" || fail "the indexed listing lacks its first shard"

finish
echo "cli_inspect_scale: all passed"
