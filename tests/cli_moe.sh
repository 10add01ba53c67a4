#!/usr/bin/env bash
# cli_moe.sh - mixture-of-experts end to end through the CLI (issue 16, SHARDING-MOE-FP8.md):
# `plan --config` on the real Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 configs gives the spec's worked
# shapes; --rules with a copy of a built-in MoE table gives the built-in plan; `load --ep` equals
# `reshard --ep` then loading the rank files; MPI (independent and cooperative) with --ep gives the
# single-process checksums, cooperative reading each byte once; per-tensor and per-channel FP8
# through reshard; T > E and --ep with spmd fail with one line. Usage: cli_moe.sh path/to/shardload. Exit 0 pass, 1 fail.
set -u
SL=${1:?usage: cli_moe.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
SRC="${SL_SRC:-$(dirname "$0")/..}"
CFG="$SRC/tests/configs"

# 1. worked figures from the real configs
out=$("$SL" plan --config "$CFG/mixtral-8x7b.json" --tp 2 --ep --verbose) || fail "plan mixtral --ep"
grep -q "model.layers.0.block_sparse_moe.experts.w13_weight  *BF16  \[4, 28672, 4096\]" <<<"$out" ||
    fail "Mixtral T=2 --ep: w13_weight [4, 28672, 4096]"
out=$("$SL" plan --config "$CFG/qwen3-30b-a3b.json" --tp 2 --verbose) || fail "plan qwen3-moe"
grep -q "model.layers.0.self_attn.qkv_proj.weight  *BF16  \[2560, 2048\]" <<<"$out" || fail "Qwen3 qkv [2560, 2048]"
grep -q "model.layers.0.mlp.experts.w13_weight  *BF16  \[128, 768, 2048\]" <<<"$out" || fail "Qwen3 w13 [128, 768, 2048]"
out=$("$SL" plan --config "$CFG/deepseek-v3.json" --tp 8 --ep --verbose) || fail "plan deepseek-v3 --ep"
grep -q "model.layers.3.mlp.experts.w13_weight  *F8_E4M3 \[32, 4096, 7168\]" <<<"$out" || fail "DS-V3 --ep w13 [32, 4096, 7168]"
grep -q "model.layers.3.mlp.experts.w13_weight_scale_inv  *F32  *\[32, 32, 56\]" <<<"$out" || fail "DS-V3 --ep w13 scale"
grep -q "model.layers.0.self_attn.fused_qkv_a_proj.weight  *F8_E4M3 \[2112, 7168\]" <<<"$out" || fail "DS-V3 fused_qkv_a_proj"
out=$("$SL" plan --config "$CFG/deepseek-v3.json" --tp 8 --json) || fail "plan deepseek-v3 --json"
grep -q '"name":"model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv","dtype":"F32","shape":\[17,56\]' <<<"$out" ||
    fail "DS-V3 JSON: fused_qkv_a_proj scale F32 [17, 56]"

# 2. --rules can express the MoE tables: a copy of the built-in one plans the same
cp "$SRC/rules/qwen3_moe.json" "$T/my-rules.json"
a=$("$SL" plan --config "$CFG/qwen3-30b-a3b.json" --tp 4 --pp 2 --ep --json)
b=$("$SL" plan --config "$CFG/qwen3-30b-a3b.json" --tp 4 --pp 2 --ep --json --rules "$T/my-rules.json")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "--rules copy of qwen3_moe.json gives the built-in plan"

# 3. a small Mixtral: load --ep against reshard --ep + load of the rank files
cat >"$T/mx.json" <<JSON
{"architectures":["MixtralForCausalLM"],"hidden_size":64,"intermediate_size":128,
 "num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":2,"vocab_size":130,
 "num_local_experts":6,"torch_dtype":"bfloat16"}
JSON
"$SL" synth --config "$T/mx.json" "$T/ck" --max-shard-size 64KB >/dev/null || { fail "synth"; finish; }
# resharded CK (into OUT) loads to CK's checksums on the same mesh: roundtrip LABEL CK OUT MESH...
roundtrip() {
    local label=$1 ck=$2 out=$3 ref got
    shift 3
    ref=$("$SL" load "$ck" "$@" --checksums --json) || { fail "${label}load $*"; return; }
    rm -rf "$out"
    "$SL" reshard "$ck" "$out" "$@" >/dev/null || { fail "${label}reshard $*"; return; }
    got=$("$SL" load "$out" "$@" --checksums --json) || { fail "${label}load resharded $*"; return; }
    [ "$(sums <<<"$ref")" = "$(sums <<<"$got")" ] || fail "${label}$*: resharded files load to the same checksums"
}
for mesh in "--tp 4 --ep" "--tp 2 --pp 2 --ep" "--tp 2"; do
    roundtrip "" "$T/ck" "$T/rs" $mesh
done
# rank files say whether they hold EP's experts: loading them the other way is one line, not a
# shape error deep inside
"$SL" reshard "$T/ck" "$T/rs-ep" --tp 2 --ep >/dev/null || fail "reshard --ep"
"$SL" load "$T/rs-ep" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "model-rank-0-part-0.safetensors: pre-sharded with expert parallelism; asked for a load without it (give --ep too" \
    || fail "EP files loaded without --ep: $(cat "$T/err")"
"$SL" load "$T/rs" --tp 2 --ep >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "pre-sharded without expert parallelism; asked for a load with it" \
    || fail "plain files loaded with --ep: $(cat "$T/err")"
# --ep at T = 1 changes nothing: the plan is the one without it, so its parts carry no "ep" stamp
# and load either way, as do parts an earlier build stamped "ep": "1"
"$SL" plan "$T/ck" --tp 1 --ep --json | grep -q '"ep":false' || fail "plan --tp 1 --ep --json says no ep"
rm -rf "$T/rs1"
"$SL" reshard "$T/ck" "$T/rs1" --tp 1 --ep >/dev/null || fail "reshard --tp 1 --ep"
ref=$("$SL" load "$T/ck" --checksums --json)
for stamp in no yes; do
    [ $stamp = yes ] && python3 - "$T/rs1/model-rank-0-part-0.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"]["ep"] = "1"
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
    for ep in "" --ep; do
        got=$("$SL" load "$T/rs1" $ep --checksums --json) || { fail "tp 1 --ep parts (stamp $stamp) load '$ep'"; continue; }
        [ "$(sums <<<"$ref")" = "$(sums <<<"$got")" ] || fail "tp 1 --ep parts (stamp $stamp) load '$ep' to the checksums"
    done
done
"$SL" plan "$T/ck" --tp 2 --ep --json | grep -q '"ep":true' || fail "plan --json says ep"
"$SL" plan "$T/ck" --tp 2 --json | grep -q '"ep":false' || fail "plan --json says no ep"
noep=$("$SL" load "$T/ck" --tp 4 --checksums --json)
withep=$("$SL" load "$T/ck" --tp 4 --ep --checksums --json)
[ "$(sums <<<"$noep")" != "$(sums <<<"$withep")" ] || fail "--ep changes the experts' placement"

# 3b. per-tensor (compressed-tensors, static input scales) and per-channel (fbgemm) FP8 Mixtrals:
# load equals reshard + a load of the rank files, whose 1-D [El] and [k] scales load back as written
pt='{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"g":{"targets":["Linear"],
 "weights":{"num_bits":8,"type":"float","strategy":"tensor"},"input_activations":{"num_bits":8,"type":"float",
 "strategy":"tensor","dynamic":false}}},"ignore":["lm_head"]}'
for q in "$pt" '{"quant_method":"fbgemm_fp8","modules_to_not_convert":["lm_head"]}'; do
    sed "s|\"torch_dtype\"|\"quantization_config\":$(tr -d '\n' <<<"$q"),\"torch_dtype\"|" "$T/mx.json" >"$T/mxq.json"
    [ -d "$T/ckq" ] && mv "$T/ckq" "$T/ckpt"   # the per-tensor one, for MPI below
    rm -rf "$T/ckq"
    "$SL" synth --config "$T/mxq.json" "$T/ckq" --max-shard-size 64KB >/dev/null || { fail "synth $q"; continue; }
    for mesh in "--tp 4 --ep" "--tp 2 --pp 2"; do
        roundtrip "fp8 " "$T/ckq" "$T/rsq" $mesh
    done
done
# a parameter of its own dtype in a bf16 plan (DeepSeek's F32 e_score_correction_bias) loads back
# from the rank files too
python3 -c "import json, sys; sys.path.insert(0, '$(dirname "$0")'); import oracle_shards as o
json.dump(dict(o.MOE_ARCHS['deepseek_v3'], torch_dtype='bfloat16'), open('$T/ds.json', 'w'))" &&
    "$SL" synth --config "$T/ds.json" "$T/ds" >/dev/null || fail "deepseek synth"
roundtrip "deepseek " "$T/ds" "$T/ds-rs" --tp 2
out=$("$SL" plan --config "$T/mxq.json" --tp 2 --verbose) || fail "plan fbgemm"
grep -q "model.layers.0.block_sparse_moe.experts.w13_weight_scale  *F32  *\[6, 128, 1\]" <<<"$out" ||
    fail "fbgemm Mixtral T=2: w13_weight_scale [6, 128, 1]"

# 4. MPI with --ep (skipped without mpirun or an MPI build)
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent= OMPI_MCA_rmaps_base_oversubscribe=1
    MPIRUN=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 60 mpirun
            --allow-run-as-root --oversubscribe)
    probe=$("${MPIRUN[@]}" -np 1 "$SL" load "$T/ck" --dist cooperative 2>&1)
    if ! grep -q "built without it" <<<"$probe"; then
        ref=$("$SL" load "$T/ck" --tp 4 --ep --io buffered --checksums --json)
        for dist in independent cooperative; do
            out=$("${MPIRUN[@]}" -np 4 "$SL" load "$T/ck" --tp 4 --ep --io buffered --dist $dist --checksums --json) ||
                { fail "mpirun $dist --ep"; continue; }
            [ "$(sums <<<"$ref")" = "$(sums <<<"$out")" ] || fail "MPI $dist --ep: checksums equal one process"
        done
        total=$(num bytes_read <<<"$out")
        [ "$total" = "$(num bytes_read <<<"$ref")" ] || fail "cooperative --ep reads each byte once"
        # a block-FP8 checkpoint (DeepSeek shapes, the oracle's config): F8_E4M3 weights and F32
        # scales over the ranks equal one process (which the oracle checks bit for bit)
        python3 -c "import json, sys; sys.path.insert(0, '$(dirname "$0")'); import oracle_shards as o
c = dict(o.FP8_ARCHS['deepseek_v3'], torch_dtype='bfloat16'); json.dump(c, open('$T/fp8.json', 'w'))" \
            && "$SL" synth --config "$T/fp8.json" "$T/fp8" --max-shard-size 300KB >/dev/null || fail "fp8 synth"
        for ep in "" --ep; do
            ref=$("$SL" load "$T/fp8" --tp 2 $ep --checksums --json)
            for dist in independent cooperative; do
                out=$("${MPIRUN[@]}" -np 2 "$SL" load "$T/fp8" --tp 2 $ep --dist $dist --checksums --json) ||
                    { fail "fp8 mpirun $dist $ep"; continue; }
                [ -n "$(sums <<<"$ref")" ] && [ "$(sums <<<"$ref")" = "$(sums <<<"$out")" ] \
                    || fail "fp8 MPI $dist $ep: checksums differ from one process"
            done
        done
        # per-tensor scales and static input scales ([El] per rank under EP) over the ranks
        ref=$("$SL" load "$T/ckpt" --tp 2 --ep --checksums --json)
        for dist in independent cooperative; do
            out=$("${MPIRUN[@]}" -np 2 "$SL" load "$T/ckpt" --tp 2 --ep --dist $dist --checksums --json) ||
                { fail "per-tensor fp8 mpirun $dist"; continue; }
            [ -n "$(sums <<<"$ref")" ] && [ "$(sums <<<"$ref")" = "$(sums <<<"$out")" ] \
                || fail "per-tensor fp8 MPI $dist: checksums differ from one process"
        done
    fi
fi

# 5. errors: one line, exit 1
# T > E: vLLM's error for Qwen2-MoE and Qwen3-MoE (Mixtral and DeepSeek take it: test_plan_moe,
# oracle_shards)
"$SL" plan --config "$CFG/qwen3-30b-a3b.json" --tp 256 >/dev/null 2>"$T/err"; rc=$?
one_line_error $rc "$T/err" "Tensor parallel size 256 is greater than the number of experts 128" || fail "T > E: $(cat "$T/err")"
"$SL" plan --config "$CFG/qwen3-30b-a3b.json" --tp 256 --ep >/dev/null 2>"$T/err"; rc=$?
one_line_error $rc "$T/err" "greater than the number of experts 128" || fail "T > E with --ep: $(cat "$T/err")"
"$SL" plan --config "$T/mx.json" --tp 2 --ep --layout spmd >/dev/null 2>"$T/err"; rc=$?
one_line_error $rc "$T/err" "layout tp only" || fail "--ep with spmd: $(cat "$T/err")"
"$SL" plan --help | grep -q -- "--ep" || fail "plan --help mentions --ep"
"$SL" load --help | grep -q -- "--ep" || fail "load --help mentions --ep"
finish
