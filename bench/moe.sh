#!/usr/bin/env bash
# The MoE part of `make bench` (issue 16 item 6; bench/run.sh calls it, BENCH_MOE=0 skips it):
# synthetic Qwen3-MoE checkpoints with Qwen3-30B-A3B's real expert shapes (fewer layers, experts and
# a smaller vocabulary, written as a derived config into the work dir), in bf16 and in block-FP8,
# loaded at T 4 with and without --ep by shardload and by the vLLM way (bench/moe_peer.py: safe_open,
# every needed tensor whole, narrow + copy_), hot and cold, in interleaved rounds; then the bytes
# each MPI rank reads (--dist independent and cooperative), and a byte-for-byte comparison of what
# both sides loaded. Writes bench/moe.jsonl and bench/moe.md (report.py puts it into RESULTS.md).
#
#   bash bench/moe.sh
#
# Knobs: BENCH_MOE_LAYERS_BF16 (3), BENCH_MOE_LAYERS_FP8 (6) (BENCH_MOE_LAYERS sets both),
# BENCH_MOE_EXPERTS (64), BENCH_MOE_VOCAB (32768): the default is a 2.19 GB bf16 / 2.20 GB FP8 pair
# (FP8 experts are half the bytes, so twice the layers for the same size; issue 16 asks >= 2 GB of
# each), 12 minutes for 3 rounds on the 2-core VM shared at load average 9-11 (the 2.2 GB / 1.2 GB
# pair before took about 4 at load 1.5-4); BENCH_MOE_LAYERS=12 makes them about 8.0 GB / 4.1 GB.
# BENCH_MOE_ROUNDS (3), BENCH_MOE_TP (4), BENCH_DIR (bench/work), SL_CLI (build/shardload),
# VENV (.venv; BENCH_MOE_PYENV=0 uses it as it is instead of running scripts/pyenv.sh),
# BENCH_MOE_NOTE (a sentence for the report, e.g. what else ran on the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
SL=${SL_CLI:-build/shardload}
VENV=${VENV:-.venv}
CONFIGS=${SL_CONFIGS:-../shared/configs}
declare -A LAYERS=([bf16]=${BENCH_MOE_LAYERS_BF16:-${BENCH_MOE_LAYERS:-3}}
                   [fp8]=${BENCH_MOE_LAYERS_FP8:-${BENCH_MOE_LAYERS:-6}})
EXPERTS=${BENCH_MOE_EXPERTS:-64}
VOCAB=${BENCH_MOE_VOCAB:-32768}
ROUNDS=${BENCH_MOE_ROUNDS:-3}
TP=${BENCH_MOE_TP:-4}
WORK=${BENCH_DIR:-bench/work}
OUT=${BENCH_MOE_OUT:-bench/moe.jsonl}
MD=${BENCH_MOE_MD:-bench/moe.md}
BASE=build/bench/bench_baseline
[[ -x $SL ]] || { echo "moe: build first (make), or set SL_CLI" >&2; exit 1; }
if [[ ${BENCH_MOE_PYENV:-1} != 0 ]]; then VENV=$VENV bash scripts/pyenv.sh; fi
PY=$VENV/bin/python
PEER=bench/moe_peer.py

# The derived configs: Qwen3-30B-A3B with LAYERS[q] layers, EXPERTS experts, VOCAB tokens; the FP8
# one adds the quantization_config of Qwen3-30B-A3B-FP8 (128x128 blocks, as tests/oracle_shards.py's).
declare -A CK
for q in bf16 fp8; do
  tag=qwen3moe-L${LAYERS[$q]}-E$EXPERTS-V$VOCAB
  CK[$q]=$WORK/$tag-$q
  if [[ ! -f ${CK[$q]}/.complete ]]; then
    rm -rf "${CK[$q]}"
    mkdir -p "$WORK"
    python3 - "$CONFIGS/qwen3-30b-a3b.json" "$WORK/$tag-$q.json" "${LAYERS[$q]}" "$EXPERTS" "$VOCAB" "$q" <<'PY'
import json, sys
src, dst, layers, experts, vocab, q = sys.argv[1:]
c = json.load(open(src))
c.update(num_hidden_layers=int(layers), max_window_layers=int(layers), num_experts=int(experts),
         num_experts_per_tok=min(c["num_experts_per_tok"], int(experts)), vocab_size=int(vocab))
if q == "fp8":
    c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]}
json.dump(c, open(dst, "w"), indent=2)
PY
    echo "moe: synthesizing $tag-$q into ${CK[$q]}" >&2
    "$SL" synth --config "$WORK/$tag-$q.json" "${CK[$q]}" --max-shard-size 1GB >/dev/null
    touch "${CK[$q]}/.complete"
  fi
done

files() { ls "${CK[$1]}"/*.safetensors; }
drop_caches() {
  sync
  if ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
    # shellcheck disable=SC2046
    $BASE dropcache $(files bf16) $(files fp8)
  fi
}
compact() { sync; { echo 1 > /proc/sys/vm/compact_memory; } 2>/dev/null || true; }
# "hot": only this checkpoint's files in the page cache (the other one dropped), then compacted
prepare() {   # cache ckpt
  drop_caches
  # shellcheck disable=SC2046
  if [[ $1 == hot ]]; then cat $(files "$2") > /dev/null; fi
  compact
}
record() { echo "$1" >> "$OUT"; }

: > "$OUT"
machine="$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, load average before the run $(cut -d' ' -f1-3 /proc/loadavg)"
record "$(python3 -c 'import json, sys; k = ["derived", "machine", "torch", "safetensors", "note"]
print(json.dumps(dict(kind="meta", **dict(zip(k, sys.argv[1:])))))' \
  "${LAYERS[bf16]} layers (bf16), ${LAYERS[fp8]} layers (FP8), $EXPERTS experts, vocabulary $VOCAB" "$machine" \
  "$($PY -c 'import torch; print(torch.__version__)')" "$($PY -c 'import safetensors; print(safetensors.__version__)')" \
  "${BENCH_MOE_NOTE:-}")"

# FP8 at T 4 without EP: vLLM's block divisibility error (768 / 4 = 192 rows is not whole 128-blocks)
if msg=$("$SL" load "${CK[fp8]}" --tp "$TP" --json 2>&1 >/dev/null); then
  RUNS_FP8_NOEP=1
else
  RUNS_FP8_NOEP=0
  record "$(python3 -c 'import json,sys; print(json.dumps({"kind":"refused","ckpt":"fp8","message":sys.argv[1].strip()}))' "$msg")"
fi

# contenders: "ckpt ep who"
contenders() {
  for ep in 0 1; do
    echo "bf16 $ep shardload"; echo "bf16 $ep vllm-way"
    if ((ep == 1 || RUNS_FP8_NOEP)); then echo "fp8 $ep shardload"; echo "fp8 $ep vllm-way"; fi
  done
}
mapfile -t RUNS < <(contenders)
n=${#RUNS[@]}
for r in $(seq 1 "$ROUNDS"); do
  echo "moe: round $r/$ROUNDS" >&2
  for cache in hot cold; do
    for k in $(seq 0 $((n - 1))); do
      read -r ck ep who <<<"${RUNS[$(((k + (r - 1) * 3) % n))]}"
      epf=(); ((ep)) && epf=(--ep)
      prepare "$cache" "$ck"
      if [[ $who == shardload ]]; then
        # --io auto (the default): buffered when the files are cached, O_DIRECT when they are not
        # under moe_peer.py rusage: the process's CPU seconds and page faults join its JSON line
        j=$(python3 "$PEER" rusage "$SL" load "${CK[$ck]}" --tp "$TP" "${epf[@]}" --json)
      else
        j=$("$PY" "$PEER" run "${CK[$ck]}" "$TP" "$ep" | tail -n 1)
      fi
      record "{\"kind\":\"load\",\"round\":$r,\"cache\":\"$cache\",\"ckpt\":\"$ck\",\"ep\":$ep,\"who\":\"$who\",\"result\":$j}"
    done
  done
done

echo "moe: comparing what both sides loaded" >&2
for run in "bf16 0" "bf16 1" "fp8 1"; do
  read -r ck ep <<<"$run"
  j=$("$PY" "$PEER" run "${CK[$ck]}" "$TP" "$ep" --verify | tail -n 1)
  record "{\"kind\":\"verify\",\"ckpt\":\"$ck\",\"ep\":$ep,\"result\":$j}"
done

if command -v mpirun >/dev/null 2>&1; then
  echo "moe: MPI, $TP ranks" >&2
  export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
  for run in "bf16 0" "bf16 1" "fp8 1"; do
    read -r ck ep <<<"$run"
    epf=(); ((ep)) && epf=(--ep)
    for dist in independent cooperative; do
      prepare hot "$ck"
      if ! j=$(mpirun --allow-run-as-root --oversubscribe -np "$TP" "$SL" load "${CK[$ck]}" --tp "$TP" \
               "${epf[@]}" --dist $dist --devices-per-rank 1 --json 2>&1 | tail -n 1) || [[ $j != "{"* ]]; then
        j=$(python3 -c 'import json,sys; print(json.dumps({"error":sys.argv[1][:200]}))' "$j")
      fi
      record "{\"kind\":\"mpi\",\"ckpt\":\"$ck\",\"ep\":$ep,\"dist\":\"$dist\",\"result\":$j}"
    done
  done
fi
"$PY" "$PEER" report "$OUT" "$MD" "${CK[bf16]}" "${CK[fp8]}" "$TP"
echo "moe: wrote $OUT and $MD" >&2
