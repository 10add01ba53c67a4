#!/usr/bin/env bash
# The Python-peer part of `make bench` (bench/run.sh calls it; it also runs on its own):
# sets up .venv (scripts/pyenv.sh: pinned python/requirements-test.txt and this tree's package),
# adds the peers pinned in python/requirements-bench.txt, then runs bench/python_peers.py on the
# same synthetic checkpoint as the C bench. Writes bench/python_peers.jsonl and bench/python_peers.md
# (bench/report.py puts the latter into RESULTS.md).
#
#   bash bench/python_peers.sh [CKPT_DIR]
#
# Without CKPT_DIR: bench/work/$BENCH_PY_CONFIG (default tinyllama-1.1b, the C bench's model;
# synthesized from ../shared/configs when missing). A quick run, for example:
#   BENCH_PY_CONFIG=qwen3-0.6b BENCH_ROUNDS=1 BENCH_PY_CACHE=hot bash bench/python_peers.sh
# Other knobs (BENCH_PY_TP, BENCH_PY_ONLY, BENCH_PY_VERIFY, SL_CLI): see bench/python_peers.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
SL=${SL_CLI:-build/shardload}
CONFIGS=${SL_CONFIGS:-../shared/configs}
CK=${1:-}
if [[ -z $CK ]]; then
  NAME=${BENCH_PY_CONFIG:-tinyllama-1.1b}
  CK=${BENCH_DIR:-bench/work}/$NAME
  [[ -x $SL ]] || { echo "python_peers: build first (make), or set SL_CLI" >&2; exit 1; }
  if [[ ! -f $CK/.complete ]]; then
    [[ -f $CONFIGS/$NAME.json ]] || { echo "python_peers: no config $CONFIGS/$NAME.json" >&2; exit 1; }
    rm -rf "$CK"
    mkdir -p "$(dirname "$CK")"
    echo "python_peers: synthesizing $NAME into $CK" >&2
    "$SL" synth --config "$CONFIGS/$NAME.json" "$CK" --max-shard-size 1GB
    touch "$CK/.complete"
  fi
fi
VENV=$VENV bash scripts/pyenv.sh
"$VENV/bin/pip" install -q --disable-pip-version-check -r python/requirements-bench.txt
SL_CLI=$SL exec "$VENV/bin/python" bench/python_peers.py "$CK"
