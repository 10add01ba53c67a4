#!/usr/bin/env bash
# cli_reshard.sh - end-to-end tests of `synth`, `reshard` and `demo`:
# synth is deterministic and bounded to its shard size; reshard writes model-rank-{d}-part-{p} files
# with the layout in __metadata__ and the tied embedding stored once as lm_head.weight; loading the
# resharded directory with the same mesh gives the same per-parameter checksums as loading the
# original checkpoint, reading only the devices' own bytes; a different mesh or a missing device
# file is a clear error. Usage: cli_reshard.sh path/to/shardload
set -u
SL=${1:?usage: cli_reshard.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
sums() { grep -o '"name":"[^"]*","xxh3":"[0-9a-f]*"' | tr -d '\n'; }
field() { grep -o "\"$1\":[0-9]*" | head -1 | grep -o '[0-9]*$'; }

cat > "$T/llama.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"hidden_size":128,"intermediate_size":256,
 "num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":3,"vocab_size":301,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16"}
JSON
cat > "$T/qwen3.json" <<'JSON'
{"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"intermediate_size":128,
 "num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":3,"vocab_size":200,
 "tie_word_embeddings":true,"torch_dtype":"bfloat16","head_dim":32}
JSON

# 1. synth: deterministic, shards bounded, index and config written
"$SL" synth --config "$T/llama.json" "$T/a" --max-shard-size 100KB >/dev/null || fail "synth a"
"$SL" synth --config "$T/llama.json" "$T/b" --max-shard-size 100KB >/dev/null || fail "synth b"
"$SL" synth --config "$T/llama.json" "$T/c" --max-shard-size 100KB --seed 7 >/dev/null || fail "synth c"
for f in "$T"/a/*.safetensors; do
    cmp -s "$f" "$T/b/$(basename "$f")" || fail "synth not deterministic: $(basename "$f")"
done
cmp -s "$T/a/model-00001-of-"*.safetensors "$T/c/model-00001-of-"*.safetensors && fail "seed ignored"
[ -f "$T/a/model.safetensors.index.json" ] && [ -f "$T/a/config.json" ] || fail "no index/config"
n=$(ls "$T"/a/*.safetensors | wc -l)
[ "$n" -gt 2 ] || fail "expected several shards, got $n"
"$SL" synth --config "$T/qwen3.json" "$T/q" --dtype f32 >/dev/null || fail "synth qwen3"
[ -f "$T/q/model.safetensors" ] && [ ! -f "$T/q/model.safetensors.index.json" ] || fail "single shard layout"
"$SL" inspect "$T/q" | grep -q "model.norm.weight  F32" || fail "synth --dtype f32"
"$SL" inspect "$T/q" | grep -q "lm_head.weight" && fail "a tied checkpoint has no lm_head.weight"
"$SL" synth "$T/x" >/dev/null 2>&1; [ $? -eq 2 ] || fail "synth without --config must exit 2"
"$SL" reshard "$T/a" "" --tp 2 >/dev/null 2>&1; [ $? -eq 2 ] || fail "reshard to an empty OUTDIR must exit 2"
# into another checkpoint's folder (shards of another count): refused, that checkpoint untouched
# (its index and config were replaced, its shards orphaned)
cp -r "$T/a" "$T/other"
"$SL" synth --config "$T/llama.json" "$T/other" --max-shard-size 200KB >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "other: holds model-[0-9-]*of-[0-9]*.safetensors, a file of another checkpoint" ||
    fail "synth over another checkpoint: $(cat "$T/err")"
cmp -s "$T/a/model.safetensors.index.json" "$T/other/model.safetensors.index.json" ||
    fail "a refused synth changed the other checkpoint's index"
# a rerun takes the earlier run's SHA256SUMS away (it called the new shards corrupt)
"$SL" synth --config "$T/llama.json" "$T/other" --max-shard-size 100KB --write-manifest >/dev/null 2>"$T/err" ||
    fail "synth --write-manifest: $(cat "$T/err")"
"$SL" synth --config "$T/llama.json" "$T/other" --max-shard-size 100KB --seed 3 >/dev/null 2>"$T/err" ||
    fail "synth again: $(cat "$T/err")"
[ ! -e "$T/other/SHA256SUMS" ] || fail "a synth rerun left the earlier run's SHA256SUMS"

# 2. reshard then load == load, for several meshes and both layouts, with and without conversion
check_mesh() {   # ckpt name, mesh args...
    local ck=$1; shift
    local out="$T/rs-$(basename "$ck")-$(echo "$@" | tr ' -' '_.')"
    "$SL" reshard "$ck" "$out" "$@" --max-part-size 20KB --staging 1 >/dev/null 2>"$T/err" ||
        { fail "reshard $ck $*: $(cat "$T/err")"; return; }
    local want got
    want=$("$SL" load "$ck" "$@" --checksums --json 2>"$T/err") || { fail "load $ck $*: $(cat "$T/err")"; return; }
    # buffered: --io auto reads files whose pages were evicted (tests running alongside) directly,
    # in aligned blocks, a few bytes more than the data
    got=$("$SL" load "$out" "$@" --io buffered --checksums --json 2>"$T/err") || { fail "load resharded $*: $(cat "$T/err")"; return; }
    [ -n "$(echo "$want" | sums)" ] && [ "$(echo "$want" | sums)" = "$(echo "$got" | sums)" ] ||
        fail "checksums differ after reshard ($ck $*)"
    # the resharded load reads exactly the devices' bytes: each file's data once
    local total
    total=$(echo "$want" | grep -o '"allocated_bytes":[0-9]*' | grep -o '[0-9]*$' | awk '{s += $1} END {print s}')
    [ "$(echo "$got" | field bytes_read)" = "$total" ] || fail "resharded load read $(echo "$got" | field bytes_read), devices hold $total"
    echo "$out"
}
check_mesh "$T/a" --tp 2 --pp 2 >/dev/null
check_mesh "$T/a" --tp 4 >/dev/null
check_mesh "$T/a" --tp 4 --layout spmd >/dev/null
r32=$(check_mesh "$T/a" --tp 2 --dtype f32)
# its config says what the parts hold: loaded without --dtype they are F32 as written (a config
# still saying bfloat16 made that load round them to BF16)
grep -q '"torch_dtype": *"float32"' "$r32/config.json" || fail "reshard --dtype f32 kept torch_dtype: $(grep -o '"torch_dtype"[^,]*' "$r32/config.json")"
[ "$("$SL" load "$r32" --tp 2 --checksums --json | sums)" = "$("$SL" load "$T/a" --tp 2 --dtype f32 --checksums --json | sums)" ] ||
    fail "the f32 reshard, loaded without --dtype, differs from an f32 load"
# --ep on a dense model is the plan without it: its reshard loads without --ep (its parts were
# stamped "with expert parallelism", refused by a load without it)
"$SL" reshard "$T/a" "$T/ep-dense" --tp 2 --ep >/dev/null 2>"$T/err" || fail "reshard --ep dense: $(cat "$T/err")"
"$SL" load "$T/ep-dense" --tp 2 >/dev/null 2>"$T/err" || fail "load of a dense --ep reshard: $(cat "$T/err")"
# and one an earlier build stamped "ep": "1" loads, with --ep or without
"${SL_PY:-python3}" - "$T/ep-dense" <<'PY'
import glob, json, struct, sys
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.setdefault("__metadata__", {})["ep"] = "1"
    text = json.dumps(head).encode()
    text += b" " * (-len(text) % 8)
    open(f, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
for ep in "" --ep; do
    # shellcheck disable=SC2086
    "$SL" load "$T/ep-dense" --tp 2 $ep >/dev/null 2>"$T/err" || fail "load $ep of a dense reshard stamped ep 1: $(cat "$T/err")"
done
# a rerun without --write-manifest takes the earlier run's SHA256SUMS away (it would call the new
# parts corrupt)
"$SL" reshard "$T/a" "$T/mf" --tp 2 --write-manifest >/dev/null 2>"$T/err" || fail "reshard --write-manifest: $(cat "$T/err")"
"$SL" reshard "$T/a" "$T/mf" --tp 2 --dtype f16 >/dev/null 2>"$T/err" || fail "reshard again: $(cat "$T/err")"
[ ! -e "$T/mf/SHA256SUMS" ] || fail "a rerun left the earlier run's SHA256SUMS"
rq=$(check_mesh "$T/q" --tp 2 --pp 3 --dtype bf16)
check_mesh "$T/q" --tp 1 >/dev/null
# the request size changes how the reads are cut, never the files written
r1=$(check_mesh "$T/a" --tp 4)
"$SL" reshard "$T/a" "$T/req4k" --tp 4 --max-part-size 20KB --staging 1 --request 4K >/dev/null 2>"$T/err" ||
    fail "reshard --request 4K: $(cat "$T/err")"
for f in "$r1"/*.safetensors; do
    cmp -s "$f" "$T/req4k/$(basename "$f")" || fail "--request 4K wrote a different $(basename "$f")"
done

# the output carries the config the parts were planned with: a single file planned with --config
# (no config.json beside it) gives a loadable directory, and --config wins over the checkpoint's own
mkdir -p "$T/one" && cp "$T/q/model.safetensors" "$T/one/"
"$SL" reshard "$T/one/model.safetensors" "$T/rs-one" --config "$T/qwen3.json" --tp 2 >/dev/null 2>"$T/err" ||
    fail "reshard a single file with --config: $(cat "$T/err")"
want=$("$SL" load "$T/one/model.safetensors" --config "$T/qwen3.json" --tp 2 --checksums --json 2>&1)
got=$("$SL" load "$T/rs-one" --tp 2 --io buffered --checksums --json 2>&1) ||
    fail "the resharded single file does not load on its own: $got"
[ -n "$(echo "$want" | sums)" ] && [ "$(echo "$want" | sums)" = "$(echo "$got" | sums)" ] ||
    fail "single file + --config: checksums differ after reshard"
sed 's/"vocab_size":301/"vocab_size":301, "shardload_test_marker":7/' "$T/llama.json" > "$T/llama-marked.json"
mkdir -p "$T/rs-marked" && : > "$T/rs-marked/config.json.tmp.AbC123"   # a run killed while writing it
"$SL" reshard "$T/a" "$T/rs-marked" --config "$T/llama-marked.json" --tp 2 >/dev/null 2>"$T/err" ||
    fail "reshard --config: $(cat "$T/err")"
grep -q '"shardload_test_marker": 7' "$T/rs-marked/config.json" ||
    fail "reshard --config wrote another config than the one it planned with"
ls -a "$T/rs-marked" | grep -q '\.tmp\.' && fail "a temporary config.json is left in the output"

# 3. file names, metadata and the tied embedding's name
[ -n "$rq" ] && [ -f "$rq/model-rank-5-part-0.safetensors" ] || fail "no model-rank-5-part-0 in $rq"
meta=$("$SL" inspect "$rq/model-rank-5-part-0.safetensors" --json)
for kv in '"layout":"tp"' '"tp":"2"' '"pp":"3"' '"device":"5"' '"format":"pt"'; do
    echo "$meta" | grep -q "$kv" || fail "metadata lacks $kv"
done
echo "$meta" | grep -q '"lm_head.weight"' || fail "last stage stores the tied embedding as lm_head.weight"
echo "$meta" | grep -q '"model.embed_tokens.weight"' && fail "tied embedding stored twice on the last stage"
"$SL" inspect "$rq/model-rank-0-part-0.safetensors" --json | grep -q '"model.embed_tokens.weight"' ||
    fail "stage 0 stores model.embed_tokens.weight"

# 4. errors: other mesh, missing device file, usage
out=$("$SL" load "$rq" --tp 4 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "pre-sharded for layout tp, tp 2, pp 3" || fail "mesh mismatch: rc $rc: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "mesh mismatch: more than one line"
# one device's file under another's name: the message says which device each means (it showed
# the file's alone, every figure of the mesh equal)
"$SL" reshard "$T/a" "$T/rs-dev" --tp 2 >/dev/null 2>&1 || fail "reshard tp 2"
cp "$T/rs-dev/model-rank-0-part-0.safetensors" "$T/rs-dev/model-rank-1-part-0.safetensors"
out=$("$SL" load "$T/rs-dev" --tp 2 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "model-rank-1-part-0.safetensors: pre-sharded for layout tp, tp 2, pp 1, device 0; its name and this load ask for layout tp, tp 2, pp 1, device 1" ||
    fail "device mismatch: rc $rc: $out"
rm "$rq"/model-rank-4-part-*.safetensors
out=$("$SL" load "$rq" --tp 2 --pp 3 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "not initialized" || fail "missing device file: rc $rc: $out"
# a device file whose tensor has a non-float dtype of the same size (I16 for BF16): a plan error
# naming the file, tensor and dtype, not a plan that only fails at load time
ri="$T/rs-i16"
"$SL" reshard "$T/a" "$T/rs-bf16" --tp 1 >/dev/null 2>&1 || fail "reshard tp 1"
mkdir -p "$ri" && cp "$T/rs-bf16/config.json" "$ri/"
"${SL_PY:-python3}" - "$T/rs-bf16/model-rank-0-part-0.safetensors" "$ri/model-rank-0-part-0.safetensors" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
n = int.from_bytes(b[:8], "little")
h = b[8:8 + n].decode()
i = h.index('"BF16"')
b[8:8 + n] = (h[:i] + '"I16" ' + h[i + 6:]).encode()
open(sys.argv[2], "wb").write(b)
PY
out=$("$SL" plan "$ri" --tp 1 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "model-rank-0-part-0.safetensors: tensor '.*' has dtype I16" ||
    fail "I16 tensor in a pre-sharded file: rc $rc: $out"
"$SL" reshard "$T/a" >/dev/null 2>&1; [ $? -eq 2 ] || fail "reshard without OUTDIR must exit 2"
"$SL" reshard --help | grep -q -- "--max-part-size" || fail "reshard --help"

# 5. demo
out=$("$SL" demo 2>&1) || fail "demo: $out"
echo "$out" | grep -q "Loading weights took" && echo "$out" | grep -q "device 1: " || fail "demo output: $out"

finish
echo "cli_reshard: all passed"
