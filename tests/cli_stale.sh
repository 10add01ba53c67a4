#!/usr/bin/env bash
# cli_stale.sh - `synth` and `reshard` into a directory that holds an earlier run's output: the files
# that make a directory loadable (model.safetensors.index.json, config.json) are written last, so
# ones left by the earlier run must not survive into this run's output, or a failed run's mix of new
# and old files (or a single model.safetensors behind an old index) would load without an error.
# Usage: cli_stale.sh path/to/shardload
set -u
SL=${1:?usage: cli_stale.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"

cat > "$T/llama.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"hidden_size":128,"intermediate_size":256,
 "num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":3,"vocab_size":301,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16"}
JSON

# 1. synth: sharded, then a single file with another seed into the same directory. A folder
#    without an index loads every *.safetensors in it, so the old shards beside the new
#    model.safetensors would not load (before, synth wrote it anyway, and only a later open failed
#    with a duplicate tensor): refused before anything is written, the old checkpoint intact.
"$SL" synth --config "$T/llama.json" "$T/s" --max-shard-size 100KB --seed 1 >/dev/null || fail "synth sharded"
before=$(cd "$T/s" && sha256sum * | sha256sum)
"$SL" synth --config "$T/llama.json" "$T/s" --seed 7 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$T/s: holds model-000[0-9]*-of-[0-9]*\.safetensors, beside which this synth's one model.safetensors (no index) would not load" ||
    fail "synth single over sharded: $(cat "$T/err")"
[ "$(cd "$T/s" && sha256sum * | sha256sum)" = "$before" ] || fail "the refused synth changed the folder"
"$SL" inspect "$T/s" >/dev/null 2>&1 || fail "the earlier checkpoint no longer opens"

# 2. synth that fails half-way over a complete earlier run: no index or config.json may remain.
"$SL" synth --config "$T/llama.json" "$T/f" --max-shard-size 100KB --seed 1 >/dev/null || fail "synth f"
second=$(ls "$T"/f/model-00002-of-*.safetensors)
rm "$second" && mkdir -p "$second/blocked"   # the rename onto it fails
"$SL" synth --config "$T/llama.json" "$T/f" --max-shard-size 100KB --seed 7 >/dev/null 2>&1 &&
    fail "synth onto a blocked shard name succeeded"
[ -f "$T/f/model.safetensors.index.json" ] && fail "failed synth left an index: the mix of runs loads"
[ -f "$T/f/config.json" ] && fail "failed synth left a config.json: the directory looks complete"

# 3. synth into the directory that holds its own config: the config stays.
mkdir -p "$T/own" && cp "$T/llama.json" "$T/own/config.json"
"$SL" synth --config "$T/own/config.json" "$T/own" --seed 1 >/dev/null || fail "synth into the config's directory"
[ -f "$T/own/config.json" ] || fail "synth removed the config it copies"

# 4. reshard that fails at the end over a complete earlier reshard of the same mesh: device 0's
#    parts are already the new ones, device 1's are not, so no config.json may remain.
"$SL" synth --config "$T/llama.json" "$T/a" --max-shard-size 100KB --seed 1 >/dev/null || fail "synth a"
"$SL" synth --config "$T/llama.json" "$T/b" --max-shard-size 100KB --seed 7 >/dev/null || fail "synth b"
"$SL" reshard "$T/a" "$T/r" --tp 2 >/dev/null || fail "reshard a"
[ -f "$T/r/config.json" ] || fail "reshard wrote no config.json"
rm "$T/r/model-rank-1-part-0.safetensors" && mkdir -p "$T/r/model-rank-1-part-0.safetensors/blocked"
"$SL" reshard "$T/b" "$T/r" --tp 2 >/dev/null 2>&1 && fail "reshard onto a blocked part name succeeded"
[ -f "$T/r/config.json" ] && fail "failed reshard left the earlier run's config.json: the mix of runs loads"

# 5. reshard into the checkpoint's own directory keeps the checkpoint's config.json.
cp -r "$T/a" "$T/self"
"$SL" reshard "$T/self" "$T/self" --tp 2 >/dev/null 2>&1
[ -f "$T/self/config.json" ] || fail "reshard into the checkpoint's directory removed its config.json"

finish
echo "cli_stale: all passed"
