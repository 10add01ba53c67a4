#!/usr/bin/env bash
# cli_hard_files.sh - open files stay bounded (issue 18 item 11). A checkpoint of 311 shards (one
# tensor each, with an index) is loaded and resharded under `ulimit -n 64`: the loader keeps only
# a few files open at once (read_files.c), and a reshard into hundreds of parts keeps only a few
# part files open. Each gives the checksums of an unlimited run. Before, every shard was opened at
# once: "Too many open files".
set -u
SL="$1"
. "$(dirname "$0")/lib.sh"

cat >"$T/many.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,
 "num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":34,"vocab_size":256,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"head_dim":16}
JSON
"$SL" synth --config "$T/many.json" "$T/ck" --max-shard-size 1B >/dev/null 2>"$T/err" ||
    { echo "skip: synth unavailable: $(cat "$T/err")" >&2; exit 77; }
n=$(ls "$T/ck" | grep -c '\.safetensors$')
[ "$n" -ge 300 ] || fail "expected 300 or more shards, got $n"

"$SL" load "$T/ck" --tp 2 --checksums --json >"$T/ref.json" 2>"$T/err" || fail "unlimited load: $(cat "$T/err")"
want=$(sums <"$T/ref.json")
[ -n "$want" ] || fail "no checksums in the reference load"

limited() { (ulimit -n 64 && "$@"); }

# load, with each I/O engine and mode
for io in "--io buffered" "--io auto" "--io direct"; do
    for eng in io_uring pread; do
        # shellcheck disable=SC2086
        if ! SL_IO_ENGINE=$eng limited "$SL" load "$T/ck" --tp 2 $io --checksums --json >"$T/out.json" 2>"$T/err"; then
            fail "load $io $eng under ulimit -n 64: $(cat "$T/err")"
        elif [ "$(sums <"$T/out.json")" != "$want" ]; then
            fail "load $io $eng under ulimit -n 64: other checksums"
        fi
    done
done
# small requests and many slots: more reads in flight than the open-file budget
limited "$SL" load "$T/ck" --tp 2 --staging 64 --request 4096B --checksums --json >"$T/out.json" 2>"$T/err" ||
    fail "load with many slots under ulimit -n 64: $(cat "$T/err")"
[ "$(sums <"$T/out.json")" = "$want" ] || fail "load with many slots: other checksums"

# reshard: the 311 input files, then hundreds of output parts (one parameter each)
limited "$SL" reshard "$T/ck" "$T/r1" --tp 2 >/dev/null 2>"$T/err" || fail "reshard under ulimit -n 64: $(cat "$T/err")"
limited "$SL" load "$T/r1" --tp 2 --checksums --json >"$T/out.json" 2>"$T/err" || fail "load of the reshard: $(cat "$T/err")"
[ "$(sums <"$T/out.json")" = "$want" ] || fail "reshard under ulimit -n 64: other checksums"
limited "$SL" reshard "$T/ck" "$T/r2" --tp 2 --max-part-size 1B >/dev/null 2>"$T/err" ||
    fail "reshard into many parts under ulimit -n 64: $(cat "$T/err")"
parts=$(ls "$T/r2" 2>/dev/null | grep -c '^model-rank-.*\.safetensors$')
[ "$parts" -ge 300 ] || fail "expected 300 or more parts, got $parts"
ls "$T/r2" | grep -q '\.tmp\.' && fail "reshard left temporary files: $(ls "$T/r2" | grep '\.tmp\.' | head -3)"
limited "$SL" load "$T/r2" --tp 2 --checksums --json >"$T/out.json" 2>"$T/err" || fail "load of the many parts: $(cat "$T/err")"
[ "$(sums <"$T/out.json")" = "$want" ] || fail "many-part reshard: other checksums"
finish
