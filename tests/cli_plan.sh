#!/usr/bin/env bash
# cli_plan.sh - end-to-end tests of `shardload plan`: text and JSON output, exit codes, --rules.
# Usage: cli_plan.sh PATH/TO/shardload. Exit 0 pass, 1 fail.
set -u
SL="$1"
CFG="${SL_SRC:-$(dirname "$0")/..}/tests/configs"
RULES="${SL_SRC:-$(dirname "$0")/..}/rules"
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fail=1; fi; }

out=$("$SL" plan --config "$CFG/llama-3-8b.json" --tp 8)
check "text lists 8 devices of 2,008,031,232 bytes" '[ "$(grep -c " 2,008,031,232 " <<<"$out")" = 8 ]'
# --ep on a dense model is the plan without it, and the JSON says so (it printed the option)
out=$("$SL" plan --config "$CFG/llama-3-8b.json" --tp 2 --ep --json)
check "dense --ep plans no ep" 'grep -q "\"ep\":false" <<<"$out"'
out=$("$SL" plan --config "$CFG/llama-3-8b.json" --tp 8 --json)
check "json read_bytes null" 'grep -q "\"read_bytes\":null}" <<<"$out"'
check "json device bytes" '[ "$(grep -o "\"bytes\":2008031232," <<<"$out" | wc -l)" = 8 ]'
if [ -x "${SL_PY:-/usr/bin/python3}" ]; then
  check "json parses" '"${SL_PY:-/usr/bin/python3}" -c "import json,sys; d=json.load(sys.stdin); assert d[\"layout\"]==\"tp\" and d[\"tp\"]==8 and len(d[\"devices\"])==8 and d[\"devices\"][7][\"tp_rank\"]==7" <<<"$out"'
fi
out=$("$SL" plan --config "$CFG/qwen3-0.6b.json" --tp 2 --pp 3 --verbose)
check "verbose lists params" 'grep -q "model.layers.27.self_attn.q_norm.weight" <<<"$out"'
a=$("$SL" plan --config "$CFG/llama-3-8b.json" --tp 4 --pp 2 --json)
b=$("$SL" plan --config "$CFG/llama-3-8b.json" --tp 4 --pp 2 --json --rules "$RULES/example-llama.json")
check "--rules example-llama gives the built-in plan" '[ "$a" = "$b" ]'
out=$("$SL" plan --config "$CFG/llama-3-8b.json" --tp 8 --layout spmd --dtype f32 --json)
check "spmd f32" 'grep -q "\"layout\":\"spmd\",\"tp\":8,\"pp\":1,\"dtype\":\"F32\"" <<<"$out"'

err=$("$SL" plan --config "$CFG/qwen2-0.5b.json" --tp 4 2>&1 >/dev/null); rc=$?
check "divisibility exit 1" '[ $rc = 1 ]'
check "divisibility message names the config" '[ "$err" = "shardload: error: $CFG/qwen2-0.5b.json: num_attention_heads 14 is not divisible by tp 4" ]'
"$SL" plan --config "$CFG/llama-3-8b.json" --tp 0 >/dev/null 2>&1; rc=$?
check "bad --tp exit 2" '[ $rc = 2 ]'
"$SL" plan >/dev/null 2>&1; rc=$?
check "no input exit 2" '[ $rc = 2 ]'
"$SL" plan --config "$CFG/llama-3-8b.json" --layout spmd --pp 2 >/dev/null 2>&1; rc=$?
check "spmd with pp exit 2" '[ $rc = 2 ]'
"$SL" plan --config "$CFG/llama-3-8b.json" --bogus >/dev/null 2>&1; rc=$?
check "unknown option exit 2" '[ $rc = 2 ]'
"$SL" plan --help | grep -q -- "--layout" ; rc=$?
check "--help" '[ $rc = 0 ]'
"$SL" plan /nonexistent/ckpt >/dev/null 2>&1; rc=$?
check "missing checkpoint exit 1" '[ $rc = 1 ]'

# A --rules table's mistakes are one line naming the table and what is wrong (each once passed, or
# blamed the config; fuzz/corpus/fuzz_rules holds the inputs)
T=$(mktemp -d "${TMPDIR:-/tmp}/sl_cli_plan.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
  "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 256,
  "torch_dtype": "bfloat16"}' >"$T/cfg.json"
sed 's/}$/, "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}/' \
  "$T/cfg.json" >"$T/fp8.json"
rules_err() {   # what, table, the message after "shardload: error: "[, config (cfg.json)]
    echo "$2" >"$T/rules.json"
    want="shardload: error: $3"
    err=$("$SL" plan --config "${4:-$T/cfg.json}" --rules "$T/rules.json" 2>&1 >/dev/null); rc=$?
    check "$1: exit 1" '[ $rc = 1 ]'
    check "$1: message: $err" '[ "$err" = "$want" ]'
}
rules_err "symbol default above 2^40" '{"symbols": {"X": {"key": "absent", "default": 4611686018427387000}},
  "rules": [{"tensor": "a", "shape": ["X"], "shard": "replicated", "place": "first"}]}' \
  "$T/rules.json: rule table symbol 'X': \"default\" must be an integer in [0, 2^40]"
rules_err "tensor name above 512 bytes" "{\"rules\": [{\"tensor\": \"$(printf 'a%.0s' $(seq 600))\",
  \"shape\": [\"H\"], \"shard\": \"replicated\", \"place\": \"first\"}]}" \
  "$T/rules.json: rule '$(printf 'a%.0s' $(seq 156))...': tensor name is 600 bytes, above 512"
rules_err "too many parameters names the table and the rule" '{"rules": [{"tensor": "a", "shape": ["V*V*V*V*V*V"],
  "shard": "replicated", "place": "first"}]}' \
  "$T/cfg.json: $T/rules.json: the config implies 281474976710656 parameters, above the limit of 4398046511104 (hidden_size 64, intermediate_size 128, vocab_size 256, num_hidden_layers 2, head_dim 16; rule 'a' holds 281474976710656): no real model is this large"
rules_err "a first-stage and a per-layer rule name one tensor" '{"rules": [
  {"tensor": "model.layers.0.x", "shape": ["H"], "shard": "replicated", "place": "first"},
  {"tensor": "model.layers.{i}.x", "shape": ["H"], "shard": "replicated"}]}' \
  "$T/cfg.json: $T/rules.json: rules 'model.layers.0.x' and 'model.layers.{i}.x' both name checkpoint tensor 'model.layers.0.x'"
rules_err "a table rule named as an FP8 scale" '{"rules": [
  {"tensor": "model.layers.{i}.a.weight", "shape": ["H", "H"], "shard": "column"},
  {"tensor": "model.layers.{i}.a.weight_scale", "shape": ["1"], "shard": "replicated", "param": "model.layers.{i}.b"}]}' \
  "$T/fp8.json: $T/rules.json: rule 'model.layers.{i}.a.weight_scale' names checkpoint tensor 'model.layers.0.a.weight_scale', which is the FP8 scale quantization_config adds for rule 'model.layers.{i}.a.weight'" \
  "$T/fp8.json"
exit $fail
