#!/usr/bin/env bash
# The remote-source part of `make bench` (issue 17 item 6; bench/run.sh calls it, BENCH_REMOTE=0
# skips it): a synthetic Llama of about 130 MB (small, because moto's S3 server serves about 15 MB/s
# here), loaded from local files, the loopback HTTP server and moto's S3, and read from the same S3
# objects by runai-model-streamer (runai-model-streamer-s3, python/requirements-bench.txt). Writes
# bench/remote.jsonl and bench/remote.md (report.py puts it into RESULTS.md).
#   bash bench/remote.sh      (SL_CLI, BENCH_ROUNDS, BENCH_TP, BENCH_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
SL=${SL_CLI:-build/shardload}
VENV=${VENV:-.venv}
[[ -x $SL ]] || { echo "remote: build first (make), or set SL_CLI" >&2; exit 1; }
CK=${BENCH_DIR:-bench/work}/remote-llama
if [[ ! -f $CK/.complete ]]; then
  rm -rf "$CK"
  mkdir -p "$CK"
  cat >"$CK.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":1024,"intermediate_size":2816,
 "num_attention_heads":16,"num_key_value_heads":4,"num_hidden_layers":4,"vocab_size":8000,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"head_dim":64}
JSON
  "$SL" synth --config "$CK.json" "$CK" --max-shard-size 40MB >/dev/null
  touch "$CK/.complete"
fi
VENV=$VENV bash scripts/pyenv.sh
"$VENV/bin/pip" install -q --disable-pip-version-check -r python/requirements-bench.txt
"$VENV/bin/python" bench/remote.py "$CK" "$SL" bench/remote.jsonl bench/remote.md
