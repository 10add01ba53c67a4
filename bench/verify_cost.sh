#!/usr/bin/env bash
# verify_cost.sh - what --verify costs (issue 17 item 4): `shardload load tl4 --tp 4` plain, by
# XXH3 blocks (the manifest --write-manifest wrote) and by SHA-256 (its sha256sum lines alone),
# hot and cold, ROUNDS rounds, the order rotated each round. Each run follows a process that
# touched and freed 3 GB, so that the run's fresh memory is backed: this VM hands free memory back
# to its host, and the first process to touch it afterwards pays 2-5x for its page faults, which
# otherwise lands on whichever mode runs first. Cold needs root (drop_caches).
# Usage: bench/verify_cost.sh path/to/shardload [workdir]   (prints one line per run)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SL=$(readlink -f "${1:?usage: verify_cost.sh SHARDLOAD [WORKDIR]}"); W=${2:-/tmp/sl-verify-cost}
ROUNDS=${ROUNDS:-5} PY=${PY:-$ROOT/.venv/bin/python} CONFIGS=${SL_CONFIGS:-$ROOT/../shared/configs}
mkdir -p "$W" && cd "$W" || exit 1
[ -d tl4 ] || "$SL" synth --config "$CONFIGS/tinyllama-1.1b.json" tl4 --max-shard-size 600MB \
    --write-manifest >/dev/null || exit 1
grep -v '^#' tl4/SHA256SUMS > sha.txt
touch3g() { "$PY" -c "import numpy as np; a=np.ones(3<<30, np.uint8); a[::4096].sum()"; }
run() { # mode cache
  local args=""
  case $1 in blocks) args="--manifest tl4/SHA256SUMS";; sha) args="--manifest sha.txt";; esac
  if [ $2 = cold ]; then sync; echo 3 > /proc/sys/vm/drop_caches; else cat tl4/*.safetensors > /dev/null; fi
  touch3g
  /usr/bin/time -f "%U %S" -o tm $SL load tl4 --tp 4 $args --json > out.json 2>err || { echo "FAIL $1 $2: $(cat err)"; return; }
  echo "$1 $2 s=$("$PY" -c "import json;print(json.load(open('out.json'))['seconds'])") cpu=$(cat tm) load=$(cut -d' ' -f1 /proc/loadavg)"
}
modes=(plain blocks sha)
for r in $(seq $ROUNDS); do for c in hot cold; do for k in 0 1 2; do run ${modes[$(( (k + r) % 3 ))]} $c; done; done; done
