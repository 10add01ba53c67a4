#!/usr/bin/env bash
# cli_inspect.sh - end-to-end tests of `shardload inspect`: exit codes 0/1/2, the one-line error
# format, and --json parsed by Python's json module.
# Usage: bash cli_inspect.sh path/to/shardload   (env: SL_PY = python3 to use)
set -u
SL=${1:?usage: cli_inspect.sh path/to/shardload}
PY=${SL_PY:-/usr/bin/python3}
[[ -x $PY ]] || { echo "no python at $PY"; exit 77; }
T=$(mktemp -d /tmp/sl_cli_inspect_XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# H(json) + K zero bytes
mk() { "$PY" - "$1" "$2" "$3" <<'PYEOF'
import struct, sys
path, js, zeros = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
open(path, "wb").write(struct.pack("<Q", len(js)) + js + bytes(zeros))
PYEOF
}

mk "$T/good.safetensors" '{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"s":{"dtype":"F32","shape":[],"data_offsets":[8,12]}}' 12
mk "$T/bad.safetensors" '{"model.layers.3.mlp.up_proj.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}}' 4

# exit 0 and a readable listing
out=$("$SL" inspect "$T/good.safetensors"); rc=$?
[[ $rc == 0 ]] || fail "valid file: exit $rc"
grep -q 'BF16' <<<"$out" && grep -q '\[2, 2\]' <<<"$out" && grep -q 'format = pt' <<<"$out" \
  || fail "text output lacks dtype/shape/metadata: $out"

# exit 1 with exactly one line: shardload: error: <file>: <what>
err=$("$SL" inspect "$T/bad.safetensors" 2>&1 >/dev/null); rc=$?
[[ $rc == 1 ]] || fail "invalid file: exit $rc"
[[ $(printf '%s\n' "$err" | wc -l) == 1 ]] || fail "error is not one line: $err"
want="shardload: error: $T/bad.safetensors: tensor 'model.layers.3.mlp.up_proj.weight': data_offsets [0, 4] but dtype BF16 and shape [2, 2] need 8 bytes"
[[ $err == "$want" ]] || fail "error text: got '$err' want '$want'"

err=$("$SL" inspect "$T/missing.safetensors" 2>&1 >/dev/null); rc=$?
[[ $rc == 1 && $err == "shardload: error: $T/missing.safetensors: "* ]] || fail "missing file: $rc $err"

# a directory with an index: the error names the shard
mkdir "$T/ck"
mk "$T/ck/model-00001-of-00001.safetensors" '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}' 1
printf '{"weight_map":{"a":"model-00001-of-00001.safetensors","b":"model-00001-of-00001.safetensors"}}' \
  >"$T/ck/model.safetensors.index.json"
err=$("$SL" inspect "$T/ck" 2>&1 >/dev/null); rc=$?
[[ $rc == 1 && $err == "shardload: error: $T/ck/model-00001-of-00001.safetensors: tensor 'b'"* ]] \
  || fail "index error: $rc $err"

# usage errors: exit 2
"$SL" inspect >/dev/null 2>&1; [[ $? == 2 ]] || fail "no PATH should exit 2"
"$SL" inspect --bogus "$T/good.safetensors" >/dev/null 2>&1; [[ $? == 2 ]] || fail "unknown option should exit 2"
"$SL" inspect a b >/dev/null 2>&1; [[ $? == 2 ]] || fail "two paths should exit 2"
"$SL" inspect --help | grep -q 'usage: shardload inspect' || fail "--help"

# --json
"$SL" inspect "$T/good.safetensors" --json >"$T/out.json" || fail "--json exit"
"$PY" - "$T/out.json" "$T/good.safetensors" <<'PYEOF' || fail "--json content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["files"] == [sys.argv[2]], d["files"]
t = {x["name"]: x for x in d["tensors"]}
assert set(t) == {"w", "s"}, t
assert t["w"]["dtype"] == "BF16" and t["w"]["shape"] == [2, 2] and t["w"]["nbytes"] == 8
assert t["s"]["shape"] == [] and t["s"]["nbytes"] == 4
assert t["w"]["file"] == sys.argv[2]
hdr = int.from_bytes(open(sys.argv[2], "rb").read(8), "little")
assert t["w"]["offset"] == 8 + hdr and t["s"]["offset"] == 16 + hdr, (t, hdr)
assert d["total_bytes"] == 12
assert d["metadata"][sys.argv[2]] == {"format": "pt"}
PYEOF

# names that need JSON escaping survive the round trip
mk "$T/esc.safetensors" '{"q\"\\\u0001\u00e9":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}' 1
"$SL" inspect --json "$T/esc.safetensors" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert d["tensors"][0]["name"]=="q\"\\\x01\u00e9", d' \
  || fail "escaped name in --json"

# I7: an index total_size that disagrees with the shards is a warning (one line, exit 0), not an error
mkdir -p "$T/idx"
mk "$T/idx/model-00001-of-00002.safetensors" '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}' 4
mk "$T/idx/model-00002-of-00002.safetensors" '{"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}' 8
for size in 12 999; do
  echo "{\"metadata\":{\"total_size\":$size},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00002-of-00002.safetensors\"}}" \
    >"$T/idx/model.safetensors.index.json"
  "$SL" inspect --json "$T/idx" >"$T/out" 2>"$T/err" || fail "total_size $size: exit $?"
  "$PY" -c 'import json,sys; w=json.load(open(sys.argv[1]))["warnings"]; assert len(w) == (sys.argv[2] != "12"), w; assert all("total_size is 999" in x for x in w), w' "$T/out" "$size" \
    || fail "total_size $size: JSON warnings: $(cat "$T/out")"
  if [ $size = 12 ]; then
    [ ! -s "$T/err" ] || fail "matching total_size warned: $(cat "$T/err")"
  else
    [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^shardload: warning: .*model.safetensors.index.json: metadata.total_size is 999 but the shards hold 12 bytes" "$T/err" \
      || fail "total_size 999: $(cat "$T/err")"
  fi
done
# a folder's index given for the folder opens the folder (it was read as a safetensors file:
# "header length ... exceeds the limit")
"$SL" inspect --json "$T/idx/model.safetensors.index.json" >"$T/out2" 2>"$T/err" &&
    [ "$(grep -o '"tensors":.*' "$T/out2")" = "$(grep -o '"tensors":.*' "$T/out")" ] ||
    fail "the index for its folder: $(cat "$T/err")"

if ((fails)); then echo "$fails failure(s)"; exit 1; fi
echo "cli_inspect: all checks passed"
