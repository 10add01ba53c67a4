#!/usr/bin/env bash
# cli_config_checks.sh - configs from anywhere (issue 18 items 7, 4, 3, 15):
#   7  a config no engine can run is SL_E_CONFIG naming the file and the key, for plan, load and
#      synth alike: more kv heads than heads, heads not a multiple of kv heads, an absurd head_dim,
#      a model of absurd size;
#   4  synth of an accepted but huge config is refused against the free space before a byte is
#      written (it once wrote until the disk was full);
#   3  a plan that would need gigabytes (100,000 layers at tp 1024, Llama-3-8B at spmd N=65,536)
#      is refused up front with the figures, fast and in little memory;
#   15 messages about the config or the checkpoint name it: divisibility, unknown architecture, no
#      dtype, missing weights (with the checkpoint tensors that are missing).
# Usage: cli_config_checks.sh path/to/shardload
set -u
SL=${1:?usage: cli_config_checks.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
CFG="${SL_SRC:-$(dirname "$0")/..}/tests/configs"
# A runaway plan or synth must not take the machine with it: the refusals run with memory and
# file size capped (4 GB, 2 GB), except under a sanitizer (its shadow memory needs the address space).
asan=0
nm "$SL" 2>/dev/null | grep -q __asan_init && asan=1

cfg() {   # file, fields overriding a small Llama (later keys win)
    "${SL_PY:-python3}" - "$1" "$2" <<'PY'
import json, sys
base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 1001, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
base.update(json.loads(sys.argv[2]))
json.dump({k: v for k, v in base.items() if v is not None}, open(sys.argv[1], "w"))
PY
}
refused() {   # what, expected exit, grep pattern, command...: one line on stderr matching it
    local what=$1 want=$2 pat=$3; shift 3
    local err rc
    err=$( { [ $asan = 1 ] || ulimit -v 4000000 -f 2000000; timeout 60 "$@"; } 2>&1 >/dev/null); rc=$?
    [ $rc -eq "$want" ] || fail "$what: exit $rc, expected $want: $(echo "$err" | head -c 300)"
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$what: not one line: $(echo "$err" | head -c 300)"
    echo "$err" | grep -qF -- "$pat" || fail "$what: message lacks '$pat': $(echo "$err" | head -c 300)"
}
all_refuse() {   # what, pattern, config: plan, load --format dummy and synth
    refused "plan: $1" 1 "$2" "$SL" plan --config "$3"
    refused "load: $1" 1 "$2" "$SL" load --format dummy --config "$3"
    refused "synth: $1" 1 "$2" "$SL" synth --config "$3" "$T/out"
    [ -z "$(ls -A "$T/out" 2>/dev/null)" ] || { fail "synth: $1: wrote into its output"; rm -rf "$T/out"; }
}

# item 7
cfg "$T/kv.json" '{"num_key_value_heads": 16}'
all_refuse "kv heads > heads" "$T/kv.json: config 'num_key_value_heads' 16 is larger than 'num_attention_heads' 8" "$T/kv.json"
cfg "$T/group.json" '{"num_key_value_heads": 3}'
all_refuse "heads not a multiple of kv heads" "$T/group.json: config 'num_attention_heads' 8 is not a multiple of 'num_key_value_heads' 3" "$T/group.json"
cfg "$T/hd.json" '{"head_dim": 1099511627776}'
all_refuse "head_dim 2^40" "$T/hd.json: config 'head_dim' is 1099511627776, above 65536" "$T/hd.json"
cfg "$T/huge.json" '{"hidden_size": 1048576, "intermediate_size": 4194304, "num_attention_heads": 8192, "num_key_value_heads": 8192, "num_hidden_layers": 1000}'
all_refuse "absurd size" "$T/huge.json: the config implies" "$T/huge.json"
cfg "$T/ok.json" '{"num_key_value_heads": 8}'
"$SL" plan --config "$T/ok.json" --tp 2 >/dev/null || fail "kv heads == heads is fine"
cfg "$T/mqa.json" '{"num_key_value_heads": 1}'
"$SL" plan --config "$T/mqa.json" --tp 4 >/dev/null || fail "one kv head is fine"

# item 4: about 3 TB in bf16, below the size limit, above any test machine's free space
cfg "$T/big.json" '{"hidden_size": 16384, "intermediate_size": 65536, "num_attention_heads": 128, "num_key_value_heads": 8, "num_hidden_layers": 400, "vocab_size": 128000}'
avail=$(df -B1 --output=avail "$T" | tail -1)
if [ "$avail" -lt 3000000000000 ]; then
    refused "synth larger than the disk" 1 "$T/big-out: the output needs" "$SL" synth --config "$T/big.json" "$T/big-out"
    [ -z "$(ls -A "$T/big-out" 2>/dev/null)" ] || fail "synth larger than the disk wrote $(ls "$T/big-out" | head -3)"
else
    echo "skipped synth larger than the disk: $avail bytes free"
fi

# item 3: a 251-byte config of 100,000 layers; and Llama-3-8B at spmd N=65,536
cfg "$T/deep.json" '{"hidden_size": 1024, "intermediate_size": 1024, "num_attention_heads": 1024, "num_key_value_heads": 1024, "vocab_size": 1024, "num_hidden_layers": 100000}'
t0=$(date +%s)
refused "plan 100,000 layers at tp 1024" 1 "above the planner's limit" "$SL" plan --config "$T/deep.json" --tp 1024
refused "load --format dummy 100,000 layers at tp 1024" 1 "$T/deep.json: a plan for 1024 devices" \
    "$SL" load --format dummy --config "$T/deep.json" --tp 1024
refused "plan llama-3-8b spmd 65536" 1 "$CFG/llama-3-8b.json: a plan for 65536 devices (tp 65536, pp 1, layout spmd) would hold 19070976 device parameters" \
    "$SL" plan --config "$CFG/llama-3-8b.json" --layout spmd --tp 65536
# A guard against growing into the plan before refusing it (minutes, tens of GB), not a speed
# test: the two 100,000-layer refusals build the config's 1.2M tensor names first, 1.7 s each in
# a release build and 10 s each under ASan on the 2-core VM when idle (22 s in all once, with
# other jobs running, against the 20 s this allowed before).
[ $(($(date +%s) - t0)) -le 90 ] || fail "the refusals took $(($(date +%s) - t0)) s"
"$SL" plan --config "$CFG/llama-3-8b.json" --tp 8 --pp 4 >/dev/null || fail "llama-3-8b tp 8 pp 4 still plans"
"$SL" plan --config "$CFG/llama-3-8b.json" --layout spmd --tp 3 >/dev/null || fail "llama-3-8b spmd 3 still plans"
# a 1.2 KB --rules table on DeepSeek-V3: 65,536 experts (a symbol default) in its one MoE layer
# ("freq": "hidden_size"), 917k tensors, at spmd 2 was 29 s and 4.3 GB (every layer and expert of
# every template named); now about a second and 0.5 GB
"${SL_PY:-python3}" - "$T/sparse_moe.json" <<'PY'
import json, sys
rules = [{"tensor": "model.embed_tokens.weight", "shape": ["V", "H"], "shard": "vocab", "place": "first"}]
rules += [{"tensor": "model.layers.{i}.mlp.experts.{e}.w%d.weight" % k, "shape": ["1", "1"], "shard": "replicated",
           "param": "model.layers.{i}.mlp.experts.w%d" % k} for k in range(7)]
json.dump({"symbols": {"E": {"key": "absent", "default": 65536}}, "moe": {"experts": "E", "freq": "hidden_size"},
           "rules": rules}, open(sys.argv[1], "w"))
PY
t0=$(date +%s)
( [ $asan = 1 ] || ulimit -v 2000000; timeout 120 "$SL" plan --config "$CFG/deepseek-v3.json" --rules "$T/sparse_moe.json" \
    --layout spmd --tp 2 >/dev/null ) || fail "one MoE layer of 65,536 experts at spmd 2 does not plan in 2 GB"
[ $asan = 1 ] || [ $(($(date +%s) - t0)) -le 20 ] || fail "one MoE layer of 65,536 experts took $(($(date +%s) - t0)) s"

# item 15: each message names the config or the checkpoint it is about
refused "divisibility" 1 "shardload: error: $CFG/llama-3-8b.json: num_attention_heads 32 is not divisible by tp 3" \
    "$SL" plan --config "$CFG/llama-3-8b.json" --tp 3
cfg "$T/arch.json" '{"architectures": ["GPT2LMHeadModel"]}'
refused "unknown architecture" 1 "shardload: error: $T/arch.json: architecture 'GPT2LMHeadModel' has no built-in rule table" \
    "$SL" plan --config "$T/arch.json"
cfg "$T/nodtype.json" '{"torch_dtype": null}'
refused "no dtype" 1 "shardload: error: $T/nodtype.json: the config has no torch_dtype (or dtype)" \
    "$SL" plan --config "$T/nodtype.json"
refused "pp above the layers" 1 "shardload: error: $T/ok.json: pp 3 is larger than num_hidden_layers 2" \
    "$SL" plan --config "$T/ok.json" --pp 3
tiny_config "$T/tiny.json"
"$SL" synth --config "$T/tiny.json" "$T/ck" --max-shard-size 200KB >/dev/null || fail "synth ck"
rm "$T/ck/model.safetensors.index.json"
victim=
for f in "$T"/ck/model-*.safetensors; do
    if "$SL" inspect "$f" | grep -q "model.layers.1.self_attn.k_proj.weight"; then victim=$f; fi
done
[ -n "$victim" ] && rm "$victim" || fail "no shard holds layer 1's k_proj"
refused "missing weights" 1 "shardload: error: $T/ck: Following weights were not initialized from checkpoint: {" \
    "$SL" plan "$T/ck" --tp 2
refused "missing weights names the checkpoint tensors" 1 "(checkpoint tensors missing: " "$SL" plan "$T/ck" --tp 2
refused "missing k_proj named" 1 "'model.layers.1.self_attn.k_proj.weight'" "$SL" load "$T/ck" --tp 2

finish
echo "cli_config_checks: all passed"
