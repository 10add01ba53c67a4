# lib.sh - what the CLI tests (tests/cli_*.sh) share, sourced after they set SL:
#   T            a temporary folder, removed at exit
#   fail MSG     counts a failure (the script goes on, so one run lists them all); finish ends with
#                exit 1 when any was counted
#   tiny_config FILE [KV_HEADS]
#                a 2-layer Llama with hidden size 256 and a vocabulary of 1001, which no TP degree
#                divides, so every split pads (2 KV heads unless told)
#   tiny_ckpt    synthesizes tiny_config's model into $T/ck (shards of 600 KB, an index) and sets
#                CK; exit 77 (skip) when synth cannot run
#   one_line_error RC FILE PATTERN
#                true when RC is 1 and FILE is one "shardload: error: ...PATTERN" line
#   sums, nums   pick fields out of `load --json`: the parameter checksums, or the numbers of a field
T=$(mktemp -d "${TMPDIR:-/tmp}/sl_$(basename "$0" .sh).XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
finish() {
    [ "$fails" -eq 0 ] || { echo "$(basename "$0"): $fails failure(s)" >&2; exit 1; }
}
tiny_config() {
    cat >"$1" <<JSON
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":256,"intermediate_size":512,
 "num_attention_heads":8,"num_key_value_heads":${2:-2},"num_hidden_layers":2,"vocab_size":1001,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"head_dim":32}
JSON
}
sums() { grep -o '"xxh3":"[0-9a-f]*"' | tr -d '\n'; }
nums() { grep -o "\"$1\":[0-9]*" | grep -o '[0-9]*$' | tr '\n' ' '; }
num() { nums "$1" | cut -d' ' -f1; }   # the first one, without nums' trailing space
tiny_ckpt() {
    tiny_config "$T/tiny.json"
    if ! "$SL" synth --config "$T/tiny.json" "$T/ck" --max-shard-size 600KB >/dev/null 2>"$T/err"; then
        echo "skip: synth unavailable: $(cat "$T/err")" >&2
        exit 77
    fi
    CK="$T/ck"
}
# hub_snapshot MODELDIR COMMIT SRC: the files of SRC as MODELDIR's snapshot COMMIT, blobs named by
# sha256 and links to them, as huggingface_hub stores them (refs are the caller's)
hub_snapshot() {
    local f h
    mkdir -p "$1/blobs" "$1/snapshots/$2"
    for f in "$3"/*; do
        h=$(sha256sum "$f" | cut -c1-64)
        cp "$f" "$1/blobs/$h"
        ln -s "../../blobs/$h" "$1/snapshots/$2/$(basename "$f")"
    done
}
one_line_error() { # rc file pattern
    [ "$1" -eq 1 ] && [ "$(wc -l <"$2")" -eq 1 ] && grep -q "^shardload: error: .*$3" "$2"
}
