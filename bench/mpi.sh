#!/usr/bin/env bash
# bench/mpi.sh - multi-process loading on one host: 1, 2 and 4 ranks, both strategies, on a
# synthetic checkpoint (or CK=DIR), MPI_RUNS times each (default 3), from a hot page cache and,
# where this user may drop the page cache (root), for 2 ranks from a cold one too. Prints one
# JSON line per setting, the run with the median time:
#   {"bench":"mpi","cache":"hot|cold","ranks":N,"dist":"...","tp":T,"runs":R,"seconds":..,
#    "gbps":..,"bytes_read":..,"read_amplification":..,"bytes_exchanged":..,"read_requests":..,
#    "read_depth_peak":..}
# Usage: bench/mpi.sh [path/to/shardload]   (env: CK, TP (default 4), STAGING (MiB, default 64))
set -euo pipefail
SL=${1:-build/shardload}
command -v mpirun >/dev/null 2>&1 || { echo '{"bench":"mpi","skipped":"no mpirun"}'; exit 0; }
TP=${TP:-4}
STAGING=${STAGING:-64}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
T=$(mktemp -d "${TMPDIR:-/tmp}/sl_bench_mpi.XXXXXX")
trap 'rm -rf "$T"' EXIT
CK=${CK:-}
if [ -z "$CK" ]; then
    cat > "$T/cfg.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":1024,"intermediate_size":4096,
 "num_attention_heads":16,"num_key_value_heads":8,"num_hidden_layers":8,"vocab_size":32000,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"head_dim":64}
JSON
    "$SL" synth --config "$T/cfg.json" "$T/ck" --max-shard-size 100MB >/dev/null
    CK="$T/ck"
fi
num() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }
# One discarded run first: on a VM that hands freed memory back to its host, the first process to
# touch memory after a pause pays for it, and that would land on whichever run came first.
mpirun --allow-run-as-root --oversubscribe -np 1 "$SL" load "$CK" --tp "$TP" --devices-per-rank "$TP" \
    --staging "$STAGING" >/dev/null 2>&1 || true
RUNS=${MPI_RUNS:-3}
can_drop() { [ "$(id -u)" = 0 ] && sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
# setting: cache ranks dist
setting() {
    local cache=$1 np=$2 dist=$3 k=$(($TP / $2)) out
    : >"$T/runs"
    for ((i = 0; i < RUNS; i++)); do
        [ "$cache" = cold ] && can_drop
        out=$(mpirun --allow-run-as-root --oversubscribe -np "$np" "$SL" load "$CK" --tp "$TP" \
              --dist "$dist" --devices-per-rank "$k" --staging "$STAGING" --json)
        echo "$(echo "$out" | num seconds) $(echo "$out" | num gbps) $(echo "$out" | num bytes_read) $(echo "$out" | num read_amplification) $(echo "$out" | num bytes_exchanged) $(echo "$out" | num read_requests) $(echo "$out" | num read_depth_peak)" >>"$T/runs"
    done
    # the run with the median time
    read -r secs gbps bytes amp exch reqs depth <<<"$(sort -n "$T/runs" | sed -n "$(((RUNS + 1) / 2))p")"
    printf '{"bench":"mpi","cache":"%s","ranks":%d,"dist":"%s","tp":%d,"runs":%d,"seconds":%s,"gbps":%s,"bytes_read":%s,"read_amplification":%s,"bytes_exchanged":%s,"read_requests":%s,"read_depth_peak":%s}\n' \
        "$cache" "$np" "$dist" "$TP" "$RUNS" "$secs" "$gbps" "$bytes" "$amp" "$exch" "$reqs" "$depth"
}
# Hot: the files in the page cache first (a cold cache makes --io auto read O_DIRECT, which
# would leave it cold for every hot run).
find "$CK" -name '*.safetensors' -exec cat {} + >/dev/null
for np in 1 2 4; do
    [ $((TP / np * np)) -eq "$TP" ] || continue
    for dist in cooperative independent; do
        setting hot $np $dist
    done
done
if can_drop && [ $((TP / 2 * 2)) -eq "$TP" ]; then
    for dist in cooperative independent; do
        setting cold 2 $dist
    done
fi
