#!/usr/bin/env bash
# cli_pp_partition.sh - an explicit pipeline split, as vLLM's VLLM_PP_LAYER_PARTITION gives it:
# --pp-partition on plan, load and reshard, the variable itself where the option is not given
# (not for layout spmd, which has no stages; empty: unset), each stage's layers in plan --json and
# in what load places, the parts reshard stamps and the loads of them that must agree, and every
# refusal: a wrong count (a usage error naming the source), a wrong sum (naming the config, and
# the variable when it came from there), an entry that is no count of layers, a negative one.
# Usage: cli_pp_partition.sh path/to/shardload
set -u
SL=${1:?usage: cli_pp_partition.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
unset VLLM_PP_LAYER_PARTITION

# a 5-layer Llama: vLLM's default split at pp 3 is 2,2,1 (one each, the remainder 2 to stages
# P-2 and P-3)
cat >"$T/cfg.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,
 "num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":5,"vocab_size":100,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16"}
JSON
"$SL" synth --config "$T/cfg.json" "$T/ck" >/dev/null 2>"$T/err" || { echo "skip: synth: $(cat "$T/err")" >&2; exit 77; }

# layers DEVICE: the layer indices of a device's parameters in `plan --json` or `load --json`
# (stdin), "0 1 2"; and the stage split of plan --json
layers() {
    "${SL_PY:-python3}" -c '
import json, re, sys
r = json.load(sys.stdin)
d = [x for x in r["devices"] if x["index"] == int(sys.argv[1])][0]
print(" ".join(str(l) for l in sorted({int(m.group(1)) for p in d["params"]
                                        for m in [re.match(r"model\.layers\.(\d+)\.", p["name"])] if m})))' "$1"
}
split() { "${SL_PY:-python3}" -c 'import json, sys; print(json.load(sys.stdin)["pp_partition"])'; }
expect_eq() { [ "$2" = "$3" ] || fail "$1: '$2', expected '$3'"; }

# ---- plan: the option, the variable, the default -----------------------------------------------
"$SL" plan --config "$T/cfg.json" --tp 2 --pp 3 --json >"$T/p_def.json" || fail "plan default"
expect_eq "default split" "$(split <"$T/p_def.json")" "[2, 2, 1]"
"$SL" plan --config "$T/cfg.json" --tp 2 --pp 3 --pp-partition 3,0,2 --json >"$T/p.json" || fail "plan 3,0,2"
expect_eq "plan 3,0,2 split" "$(split <"$T/p.json")" "[3, 0, 2]"
expect_eq "plan 3,0,2 device 1" "$(layers 1 <"$T/p.json")" "0 1 2"
expect_eq "plan 3,0,2 device 2 (no layer)" "$(layers 2 <"$T/p.json")" ""
expect_eq "plan 3,0,2 device 5" "$(layers 5 <"$T/p.json")" "3 4"
VLLM_PP_LAYER_PARTITION=3,0,2 "$SL" plan --config "$T/cfg.json" --tp 2 --pp 3 --json >"$T/p_env.json" ||
    fail "plan with the variable"
cmp -s "$T/p.json" "$T/p_env.json" || fail "VLLM_PP_LAYER_PARTITION=3,0,2 planned otherwise than --pp-partition 3,0,2"
VLLM_PP_LAYER_PARTITION=1,1,3 "$SL" plan --config "$T/cfg.json" --tp 2 --pp 3 --pp-partition 3,0,2 \
    --json >"$T/p_both.json" || fail "plan with both"
cmp -s "$T/p.json" "$T/p_both.json" || fail "--pp-partition does not win over VLLM_PP_LAYER_PARTITION"
VLLM_PP_LAYER_PARTITION= "$SL" plan --config "$T/cfg.json" --tp 2 --pp 3 --json >"$T/p_empty.json" ||
    fail "plan with the variable empty"
cmp -s "$T/p_def.json" "$T/p_empty.json" || fail "an empty VLLM_PP_LAYER_PARTITION is not unset"
VLLM_PP_LAYER_PARTITION=3,0,2 "$SL" plan --config "$T/cfg.json" --tp 2 --layout spmd >/dev/null 2>"$T/err" ||
    fail "layout spmd with the variable set: $(cat "$T/err")"
"$SL" plan --config "$T/cfg.json" --pp 3 --pp-partition " 3, 0 ,2" --json | split >"$T/out" ||
    fail "spaces around entries"
expect_eq "spaces around entries (vLLM's int() takes them)" "$(cat "$T/out")" "[3, 0, 2]"
# every entry vLLM's int() takes: a sign, "-0", underscores between digits, leading zeros, any
# ASCII whitespace (a variable read from a file keeps its newline)
for v in "+3,+0,2" "3,-0,2" "0_3,0,0_0_2" "003,0,2" $'3,0,2\n' $'3\r,\v0\f,2'; do
    "$SL" plan --config "$T/cfg.json" --pp 3 --pp-partition "$v" --json 2>"$T/err" | split >"$T/out" ||
        fail "--pp-partition $(printf %q "$v"): $(cat "$T/err")"
    expect_eq "--pp-partition $(printf %q "$v")" "$(cat "$T/out")" "[3, 0, 2]"
done
VLLM_PP_LAYER_PARTITION=$'3,0,2\n' "$SL" plan --config "$T/cfg.json" --tp 2 --pp 3 --json >"$T/p_nl.json" ||
    fail "VLLM_PP_LAYER_PARTITION with a newline"
cmp -s "$T/p.json" "$T/p_nl.json" || fail "VLLM_PP_LAYER_PARTITION='3,0,2\n' planned otherwise than 3,0,2"
"$SL" plan --config "$T/cfg.json" --pp 3 --pp-partition 3,0,2 >"$T/out" || fail "plan text"
grep -qx "layers per stage: 3,0,2 (\[0, 3) \[3, 3) \[3, 5))" "$T/out" || fail "plan text: $(sed -n 3p "$T/out")"
# pp above the layers: only a partition can say where they go
"$SL" plan --config "$T/cfg.json" --pp 7 --pp-partition 1,1,1,0,0,1,1 --json | split >"$T/out" ||
    fail "pp 7 > 5 layers with a partition"
expect_eq "pp 7" "$(cat "$T/out")" "[1, 1, 1, 0, 0, 1, 1]"

# ---- refusals ----------------------------------------------------------------------------------
usage() {   # what, pattern, command...: exit 2, the pattern on stderr
    local what=$1 pat=$2 rc; shift 2
    "$@" >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$pat" "$T/err" || fail "$what: exit $rc: $(head -c 300 "$T/err")"
}
failed() {   # what, pattern, command...: exit 1, one line "shardload: error: ...pattern"
    local what=$1 pat=$2 rc; shift 2
    "$@" >/dev/null 2>"$T/err"; rc=$?
    one_line_error $rc "$T/err" "" && grep -qF -- "$pat" "$T/err" || fail "$what: exit $rc: $(head -c 300 "$T/err")"
}
P=("$SL" plan --config "$T/cfg.json" --pp 3)
usage "count" "shardload plan: --pp-partition '3,2' has 2 entries but --pp is 3: one count of layers per pipeline stage" \
    "${P[@]}" --pp-partition 3,2
usage "non-numeric" "--pp-partition '3,x,2': not a count of layers: 'x'" "${P[@]}" --pp-partition 3,x,2
usage "float" "--pp-partition '3,0.5,2': not a count of layers: '0.5'" "${P[@]}" --pp-partition 3,0.5,2
usage "negative" "--pp-partition '4,-1,2': a stage holds 0 or more layers, not '-1'" "${P[@]}" --pp-partition 4,-1,2
for v in "_3,0,2" "3_,0,2" "3,0,2__0" "3,+-0,2" "3,- 0,2" "3,+,2" "3,0x0,2"; do   # int() refuses them too
    usage "--pp-partition $v" "--pp-partition '$v': not a count of layers" "${P[@]}" --pp-partition "$v"
done
usage "empty entry" "--pp-partition '3,,2': an empty entry" "${P[@]}" --pp-partition 3,,2
usage "trailing comma (vLLM refuses it too)" "an empty entry" "${P[@]}" --pp-partition 1,2,2,
usage "layout spmd" "--pp-partition applies to layout tp only" \
    "$SL" plan --config "$T/cfg.json" --layout spmd --tp 2 --pp-partition 5
usage "variable's count" "VLLM_PP_LAYER_PARTITION '3,2' has 2 entries but --pp is 3: one count of layers per pipeline stage (unset it, or give --pp-partition for this mesh)" \
    env VLLM_PP_LAYER_PARTITION=3,2 "${P[@]}"
usage "variable at pp 1" "VLLM_PP_LAYER_PARTITION '3,2' has 2 entries but --pp is 1" \
    env VLLM_PP_LAYER_PARTITION=3,2 "$SL" plan --config "$T/cfg.json"
usage "variable not a list" "VLLM_PP_LAYER_PARTITION 'all': not a count of layers: 'all'" \
    env VLLM_PP_LAYER_PARTITION=all "${P[@]}"
failed "sum" "$T/cfg.json: pp_partition 3,1,2 places 6 layers but num_hidden_layers is 5" \
    "${P[@]}" --pp-partition 3,1,2
failed "variable's sum" "pp_partition 2,1,1 places 4 layers but num_hidden_layers is 5 (pp_partition from VLLM_PP_LAYER_PARTITION)" \
    env VLLM_PP_LAYER_PARTITION=2,1,1 "${P[@]}"
for cmd in plan load reshard; do
    "$SL" $cmd --help | grep -q -- "--pp-partition" || fail "$cmd --help lacks --pp-partition"
done
"$SL" load --help | grep -q "VLLM_PP_LAYER_PARTITION" || fail "load --help lacks VLLM_PP_LAYER_PARTITION"

# ---- load: what each device holds, and its bytes ------------------------------------------------
"$SL" load "$T/ck" --tp 2 --pp 3 --pp-partition 3,0,2 --checksums --json >"$T/l.json" || fail "load 3,0,2"
expect_eq "load 3,0,2 device 0" "$(layers 0 <"$T/l.json")" "0 1 2"
expect_eq "load 3,0,2 device 3" "$(layers 3 <"$T/l.json")" ""
expect_eq "load 3,0,2 device 4" "$(layers 4 <"$T/l.json")" "3 4"
VLLM_PP_LAYER_PARTITION=3,0,2 "$SL" load "$T/ck" --tp 2 --pp 3 --checksums --json >"$T/l_env.json" ||
    fail "load with the variable"
[ "$(sums <"$T/l.json")" = "$(sums <"$T/l_env.json")" ] || fail "load: the variable loads otherwise than the option"
# a layer's checksums are the same wherever the split puts it (layer 2: stage 0 here, stage 1 by
# default)
"$SL" load "$T/ck" --tp 2 --pp 3 --checksums --json >"$T/l_def.json" || fail "load default"
pick() { "${SL_PY:-python3}" -c '
import json, sys
r = json.load(sys.stdin)
print(sorted((p["name"], p["xxh3"]) for d in r["devices"] if d["index"] % 2 == 1 for p in d["params"]
             if p["name"].startswith("model.layers.2.")))'; }
[ "$(pick <"$T/l.json")" = "$(pick <"$T/l_def.json")" ] || fail "layer 2's shards differ between splits"

# ---- reshard: the stamp, and the loads of its parts ----------------------------------------------
VLLM_PP_LAYER_PARTITION=3,0,2 "$SL" reshard "$T/ck" "$T/rs" --tp 2 --pp 3 >/dev/null || fail "reshard 3,0,2"
ls "$T/rs" | grep -q "model-rank-2-" && fail "a stage of no layers got part files"
"$SL" inspect "$T/rs/model-rank-4-part-0.safetensors" --json | grep -q '"pp_partition":"3,0,2"' ||
    fail "reshard did not stamp pp_partition"
"$SL" load "$T/rs" --tp 2 --pp 3 --pp-partition 3,0,2 --checksums --json >"$T/lr.json" || fail "load the parts"
[ "$(sums <"$T/lr.json")" = "$(sums <"$T/l.json")" ] || fail "the parts load other bytes than the checkpoint"
failed "parts, default split" "pre-sharded with pp_partition 3,0,2 (layers per pipeline stage); this load asks for 2,2,1 (vLLM's default split): give --pp-partition 3,0,2" \
    "$SL" load "$T/rs" --tp 2 --pp 3
failed "parts, another split" "this load asks for 1,2,2: give --pp-partition 3,0,2" \
    "$SL" load "$T/rs" --tp 2 --pp 3 --pp-partition 1,2,2
"$SL" reshard "$T/ck" "$T/rs_def" --tp 2 --pp 3 --pp-partition 2,2,1 >/dev/null || fail "reshard 2,2,1"
"$SL" inspect "$T/rs_def/model-rank-0-part-0.safetensors" --json | grep -q '"pp_partition":' &&
    fail "the default split given explicitly was stamped"
"$SL" load "$T/rs_def" --tp 2 --pp 3 >/dev/null || fail "parts of the default split, loaded without a partition"
failed "default parts, a split" "pre-sharded with vLLM's default split of the layers over pipeline stages; this load asks for pp_partition 3,0,2" \
    "$SL" load "$T/rs_def" --tp 2 --pp 3 --pp-partition 3,0,2
finish
