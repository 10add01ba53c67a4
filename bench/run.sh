#!/usr/bin/env bash
# make bench: shardload against the machine's limits and the alternatives, on the same files, in
# one run, interleaved (A B C A B C ...) so that drift on a shared machine hits every contender alike.
# Writes bench/RESULTS.md, bench/results.jsonl, bench/mpi.jsonl, bench/ring.jsonl (ring_sim.sh)
# and bench/chart.png; RESULTS.md also carries bench/ring.md, bench/python_peers.md (python_peers.sh),
# bench/jax_peers.md and bench/jax_many.md (jax_peers.py), bench/jax_dist.md (jax_dist.py), bench/remote.md (remote.sh),
# bench/moe.md (moe.sh), bench/read_gap.md (read_gap.sh)
# and, when present, bench/gpu.md.
#
# Knobs: BENCH_CONFIG (a name in ../shared/configs, default tinyllama-1.1b, about 2.2 GB in bf16),
#        BENCH_SIZE (synthesize a larger model: a config name, overrides BENCH_CONFIG),
#        BENCH_ROUNDS (default 3), BENCH_TP (TP sizes, default "1 2 4 8"),
#        BENCH_ALT_TP (TP of the Python alternatives, default 4), BENCH_DIR (work dir).
set -euo pipefail
cd "$(dirname "$0")/.."
SL=build/shardload
BASE=build/bench/bench_baseline
CONFIGS=${SL_CONFIGS:-../shared/configs}
NAME=${BENCH_SIZE:-${BENCH_CONFIG:-tinyllama-1.1b}}
ROUNDS=${BENCH_ROUNDS:-3}
TPS=${BENCH_TP:-"1 2 4 8"}
ALT_TP=${BENCH_ALT_TP:-4}
WORK=${BENCH_DIR:-bench/work}
CK=$WORK/$NAME
OUT=bench/results.jsonl
PY=/usr/bin/python3

[[ -x $SL && -x $BASE ]] || { echo "bench: build first (make)" >&2; exit 1; }
[[ -f $CONFIGS/$NAME.json ]] || { echo "bench: no config $CONFIGS/$NAME.json" >&2; exit 1; }

if [[ ! -f $CK/.complete ]]; then
  rm -rf "$CK"
  mkdir -p "$WORK"
  echo "bench: synthesizing $NAME into $CK" >&2
  $SL synth --config "$CONFIGS/$NAME.json" "$CK" --max-shard-size 1GB
  touch "$CK/.complete"
fi
[[ $CK != *" "* ]] || { echo "bench: the work directory must not contain spaces" >&2; exit 1; }
FILES=("$CK"/*.safetensors)

have_torch=0
$PY -c 'import torch' 2>/dev/null && have_torch=1
have_numpy=0
$PY -c 'import numpy' 2>/dev/null && have_numpy=1

drop_caches() {
  sync
  if ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
    $BASE dropcache "${FILES[@]}"
  fi
}
warm() { cat "${FILES[@]}" > /dev/null; }
# Every run starts from the same free memory: a loader that frees gigabytes of 4 KiB pages (mmap+copy)
# leaves the next run's huge-page faults stalling on compaction. Compacting before each run gives
# every contender, baselines included, the same start. Needs root; otherwise runs go as they come.
compact() { sync; { echo 1 > /proc/sys/vm/compact_memory; } 2>/dev/null || true; }
resident() { fincore --bytes --noheadings --raw -o RES "${FILES[@]}" 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }

# record ROUND TEMP NAME JSON: one line of results.jsonl, with page-cache growth for cold runs.
record() {
  printf '{"round":%s,"cache":"%s","name":"%s","cache_growth":%s,"result":%s}\n' "$1" "$2" "$3" "$4" "$5" >> "$OUT"
}

run_hot() {   # round name command...
  local r=$1 n=$2; shift 2
  warm
  compact
  local j; j=$("$@") || { echo "bench: $n failed" >&2; exit 1; }
  record "$r" hot "$n" 0 "$(tail -n 1 <<<"$j")"
}

run_cold() {
  local r=$1 n=$2; shift 2
  drop_caches
  compact
  local before after j
  before=$(resident)
  j=$("$@") || { echo "bench: $n failed" >&2; exit 1; }
  after=$(resident)
  record "$r" cold "$n" "$((after - before))" "$(tail -n 1 <<<"$j")"
}

: > "$OUT"
echo "bench: memcpy bandwidth" >&2
record 0 none memcpy 0 "$($BASE memcpy 1024)"
# The contenders of a round, as "kind name command..." lines. Each round runs them in a rotated
# order: on this kind of VM a run sometimes pays a large first-touch penalty depending on what ran
# just before it, and rotating spreads that over every contender instead of always hitting the same.
contenders() {
  echo "hot seq $BASE seq ${FILES[*]}"
  for t in $TPS; do echo "hot shardload-tp$t $SL load $CK --tp $t --io buffered --json"; done
  if ((have_numpy)); then echo "hot numpy-tp$ALT_TP $PY bench/baseline_python.py numpy $CK $ALT_TP"; fi
  if ((have_torch)); then echo "hot torch-tp$ALT_TP $PY bench/baseline_python.py torch $CK $ALT_TP"; fi
  echo "hot mmapcopy $BASE mmapcopy $CK"
  echo "cold direct $BASE direct ${FILES[*]}"
  for t in $TPS; do echo "cold shardload-tp$t-direct $SL load $CK --tp $t --io direct --json"; done
  echo "cold shardload-tp$ALT_TP-buffered $SL load $CK --tp $ALT_TP --io buffered --json"
  echo "cold mmapcopy $BASE mmapcopy $CK"
}
mapfile -t RUNS < <(contenders)
for r in $(seq 1 "$ROUNDS"); do
  echo "bench: round $r/$ROUNDS" >&2
  n=${#RUNS[@]}
  for k in $(seq 0 $((n - 1))); do
    read -r -a run <<<"${RUNS[$(((k + (r - 1) * 3) % n))]}"
    if [[ ${run[0]} == hot ]]; then run_hot "$r" "${run[1]}" "${run[@]:2}"; else run_cold "$r" "${run[1]}" "${run[@]:2}"; fi
  done
done

echo "bench: MPI ranks 1, 2, 4 (hot)" >&2
warm
CK="$CK" TP="$ALT_TP" bash bench/mpi.sh "$SL" > bench/mpi.jsonl || echo '{"bench":"mpi","skipped":"failed"}' > bench/mpi.jsonl

echo "bench: cuda staging ring on the host-memory stand-in" >&2
bash bench/ring_sim.sh "$CK" >/dev/null || echo "bench: ring_sim failed" >&2

# ---- Python peers (bench/python_peers.sh; issue 13 item 5) ----------------------------------------
# shardload's Python API against safetensors, fastsafetensors, runai-model-streamer and the vLLM way,
# in .venv, on the same files: writes bench/python_peers.{jsonl,md}, which report.py puts into
# RESULTS.md. BENCH_PY=0 skips it (RESULTS.md then keeps the last python_peers.md).
if [[ ${BENCH_PY:-1} != 0 ]]; then
  echo "bench: Python peers (bench/python_peers.sh)" >&2
  if ! SL_CLI=$SL bash bench/python_peers.sh "$CK"; then
    echo "bench: python peers failed" >&2
    printf '## Python peers (bench/python_peers.py, issue 13 item 5)\n\nNot run: bench/python_peers.sh failed in this run (see its output).\n' > bench/python_peers.md
  fi
fi
# ---- end of Python peers --------------------------------------------------------------------------

# ---- JAX peers (bench/jax_peers.py; issue 14 item 5) -----------------------------------------------
# shardload.jax.load against safe_open + device_put per tensor and orbax-checkpoint's safetensors
# loader, on 8 virtual CPU devices, same files: bench/jax_peers.{jsonl,md}. BENCH_JAX=0 skips it.
if [[ ${BENCH_JAX:-1} != 0 ]]; then
  echo "bench: JAX peers (bench/jax_peers.py)" >&2
  if ! { scripts/pyenv.sh && .venv/bin/pip install -q -r python/requirements-bench.txt &&
         .venv/bin/python bench/jax_peers.py "$CK" bench/jax_peers.jsonl bench/jax_peers.md; }; then
    echo "bench: jax peers failed" >&2
    printf '## JAX peers (bench/jax_peers.py, issue 14 item 5)\n\nNot run: it failed in this run (see its output).\n' > bench/jax_peers.md
  fi
fi

# ---- JAX, many small tensors (bench/jax_peers.py on an MoE-shaped checkpoint) ---------------------
# Qwen3-30B-A3B's tensor list (48 layers of 128 experts: 18,867 tensors) with tiny dimensions, so
# that what a contender costs per tensor and per shard shows, not the bytes: shardload.jax against
# device_put per tensor (orbax left out: it takes minutes here). bench/jax_many.{jsonl,md}.
# BENCH_JAX_MANY=0 skips it.
if [[ ${BENCH_JAX_MANY:-1} != 0 ]]; then
  echo "bench: JAX, many small tensors (bench/jax_peers.py)" >&2
  MANY=$WORK/qwen3-30b-a3b-small
  if [[ ! -f $MANY/.complete ]]; then
    rm -rf "$MANY"
    python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.update(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256); json.dump(c, open(sys.argv[2], "w"))' \
      "$CONFIGS/qwen3-30b-a3b.json" "$WORK/qwen3-30b-a3b-small.json"
    $SL synth --config "$WORK/qwen3-30b-a3b-small.json" "$MANY" >/dev/null && touch "$MANY/.complete"
  fi
  if ! { scripts/pyenv.sh &&
         BENCH_JAX_CONTENDERS=shardload.jax,device_put BENCH_JAX_TITLE="JAX, many small tensors" \
         .venv/bin/python bench/jax_peers.py "$MANY" bench/jax_many.jsonl bench/jax_many.md; }; then
    echo "bench: jax many failed" >&2
    printf '## JAX, many small tensors (bench/jax_peers.py)\n\nNot run: it failed in this run (see its output).\n' > bench/jax_many.md
  fi
fi

# ---- JAX, two processes (bench/jax_dist.py) ----------------------------------------------------------
# shardload.jax.load in a two-process jax.distributed job on this machine, dist "independent"
# against "cooperative": seconds, bytes each process read, gather seconds: bench/jax_dist.{jsonl,md}.
# BENCH_JAX_DIST=0 skips it.
if [[ ${BENCH_JAX_DIST:-1} != 0 ]]; then
  echo "bench: JAX, two processes (bench/jax_dist.py)" >&2
  if ! { scripts/pyenv.sh &&
         .venv/bin/python bench/jax_dist.py "$CK" bench/jax_dist.jsonl bench/jax_dist.md; }; then
    echo "bench: jax dist failed" >&2
    printf '## JAX, two processes (bench/jax_dist.py)\n\nNot run: it failed in this run (see its output).\n' > bench/jax_dist.md
  fi
fi

# ---- remote sources (bench/remote.sh; issue 17 item 6) ---------------------------------------------
# shardload from local files, loopback HTTP and moto's S3, and runai-model-streamer from the same S3
# objects: bench/remote.{jsonl,md}. BENCH_REMOTE=0 skips it.
if [[ ${BENCH_REMOTE:-1} != 0 ]]; then
  echo "bench: remote sources (bench/remote.sh)" >&2
  if ! SL_CLI=$SL bash bench/remote.sh; then
    echo "bench: remote sources failed" >&2
    printf '## Remote sources (bench/remote.py, issue 17 item 6)\n\nNot run: bench/remote.sh failed in this run (see its output).\n' > bench/remote.md
  fi
fi

# ---- MoE: expert parallelism and FP8 (bench/moe.sh; issue 16 item 6) -------------------------------
# synthetic Qwen3-MoE checkpoints (bf16 2.2 GB, block-FP8 1.2 GB) at T 4 with and without --ep,
# shardload against the vLLM way (bench/moe_peer.py), hot and cold, bytes per MPI rank:
# bench/moe.{jsonl,md}. BENCH_MOE=0 skips it; BENCH_MOE_LAYERS etc. make it larger (see moe.sh).
if [[ ${BENCH_MOE:-1} != 0 ]]; then
  echo "bench: MoE (bench/moe.sh)" >&2
  if ! SL_CLI=$SL bash bench/moe.sh; then
    echo "bench: moe failed" >&2
    printf '## MoE: expert parallelism and FP8 (bench/moe.sh, issue 16 item 6)\n\nNot run: bench/moe.sh failed in this run (see its output).\n' > bench/moe.md
  fi
fi

# ---- reading only the needed bytes (bench/read_gap.sh): --read-gap none against the default ----
echo "bench: read gaps (bench/read_gap.sh)" >&2
if ! SL_CLI=$SL bash bench/read_gap.sh "$CK"; then
  echo "bench: read_gap failed" >&2
  printf '## Reading only the needed bytes (bench/read_gap.sh)\n\nNot run: bench/read_gap.sh failed in this run (see its output).\n' > bench/read_gap.md
fi

$PY bench/report.py "$OUT" bench/RESULTS.md bench/chart.png "$NAME" "$ALT_TP" "$have_torch" bench/mpi.jsonl
echo "bench: wrote bench/RESULTS.md and bench/chart.png" >&2
