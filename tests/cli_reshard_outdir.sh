#!/usr/bin/env bash
# cli_reshard_outdir.sh - reshard's output directory and directories of two kinds (issue 18 items 1,
# 5, 12). A reshard refuses, before writing anything, an OUTDIR that
#   - holds a Hugging Face checkpoint (its index would make `load OUTDIR` load the old model),
#   - is, or contains, its own input (the input would be left unloadable),
#   - holds rank files of an earlier reshard for another --tp or more parts (unloadable mix);
# and `open` (inspect, plan, load) refuses a directory that mixes a Hugging Face checkpoint (index
# or shards) with rank files, whoever wrote it, instead of picking one kind.
# Usage: cli_reshard_outdir.sh path/to/shardload
set -u
SL=${1:?usage: cli_reshard_outdir.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
sums() { grep -o '"name":"[^"]*","xxh3":"[0-9a-f]*"' | tr -d '\n'; }

tiny_config "$T/cfg.json"
"$SL" synth --config "$T/cfg.json" "$T/v1" --max-shard-size 200KB --seed 1 >/dev/null || fail "synth v1"
"$SL" synth --config "$T/cfg.json" "$T/v2" --max-shard-size 200KB --seed 2 >/dev/null || fail "synth v2"
"$SL" synth --config "$T/cfg.json" "$T/one" --seed 3 >/dev/null || fail "synth one"

refused() {   # what, grep pattern, command...: exit 1, one line, matching
    local what=$1 pat=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 1 ] || fail "$what: exit $rc, expected 1: $err"
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$what: not one line: $err"
    echo "$err" | grep -q -- "$pat" || fail "$what: message lacks '$pat': $err"
}
listing() { find "$1" -maxdepth 1 -printf '%P %s %T@\n' | sort; }

# item 1: reshard v2 into a copy of v1 (a Hugging Face checkpoint): refused, nothing changed,
# and the old weights are not loaded as if they were v2's
cp -r "$T/v1" "$T/hf"
before=$(listing "$T/hf")
refused "reshard into a Hugging Face checkpoint" "holds a Hugging Face checkpoint" \
    "$SL" reshard "$T/v2" "$T/hf" --tp 2
[ "$before" = "$(listing "$T/hf")" ] || fail "the refused reshard changed $T/hf"
# the same with a single model.safetensors (no index)
cp -r "$T/one" "$T/hf1"
refused "reshard into a single-file checkpoint's directory" "holds a Hugging Face checkpoint (model.safetensors)" \
    "$SL" reshard "$T/v2" "$T/hf1" --tp 2

# item 1, open side: directories that mix the kinds, however they came about
"$SL" reshard "$T/v2" "$T/r2" --tp 2 >/dev/null || fail "reshard v2"
mkdir "$T/mixed" && cp "$T"/v1/* "$T/mixed/" && cp "$T"/r2/model-rank-*.safetensors "$T/mixed/"
for cmd in "inspect" "plan" "load"; do
    extra=; [ $cmd = inspect ] || extra="--tp 2"
    refused "$cmd index + rank files" "holds model.safetensors.index.json (a Hugging Face checkpoint) and pre-sharded rank files" \
        "$SL" $cmd "$T/mixed" $extra
done
rm "$T/mixed/model.safetensors.index.json"
refused "load shards + rank files" "mixes pre-sharded rank files such as model-rank-0-part-0.safetensors with other" \
    "$SL" load "$T/mixed" --tp 2
mkdir "$T/mixed1" && cp "$T"/one/* "$T/mixed1/" && cp "$T"/r2/model-rank-*.safetensors "$T/mixed1/"
refused "inspect model.safetensors + rank files" "mixes pre-sharded rank files" "$SL" inspect "$T/mixed1"
# each kind alone still loads, with the right weights
want=$("$SL" load "$T/v2" --tp 2 --checksums --json) || fail "load v2"
got=$("$SL" load "$T/r2" --tp 2 --checksums --json) || fail "load r2"
[ -n "$(echo "$want" | sums)" ] && [ "$(echo "$want" | sums)" = "$(echo "$got" | sums)" ] || fail "r2 is not v2"

# item 5: reshard into its own input, or a directory that contains it
cp -r "$T/v1" "$T/self"
before=$(listing "$T/self")
refused "reshard CKPT CKPT" "is or contains the checkpoint being resharded" "$SL" reshard "$T/self" "$T/self" --tp 2
refused "reshard CKPT CKPT/." "is or contains the checkpoint being resharded" "$SL" reshard "$T/self" "$T/self/." --tp 2
ln -s "$T/self" "$T/self-link"
refused "reshard CKPT via a link" "is or contains the checkpoint being resharded" "$SL" reshard "$T/self" "$T/self-link" --tp 2
[ "$before" = "$(listing "$T/self")" ] || fail "a refused reshard changed its input"
"$SL" load "$T/self" --tp 2 >/dev/null || fail "the input no longer loads"
mkdir -p "$T/outer/in" && cp "$T"/one/* "$T/outer/in/"
refused "reshard into a parent of the input" "is or contains the checkpoint being resharded" \
    "$SL" reshard "$T/outer/in" "$T/outer" --tp 2
refused "reshard a single file into its directory" "is or contains the checkpoint being resharded" \
    "$SL" reshard "$T/outer/in/model.safetensors" "$T/outer/in" --tp 2 --config "$T/cfg.json"
# a fresh directory inside the input is fine (the input's listing ignores directories)
"$SL" reshard "$T/self" "$T/self/tp2" --tp 2 >/dev/null || fail "reshard into a new directory inside the input"
"$SL" load "$T/self" --tp 2 >/dev/null || fail "the input with a subdirectory no longer loads"

# item 12: stale rank files of another mesh or more parts
"$SL" reshard "$T/v1" "$T/r" --tp 4 >/dev/null || fail "reshard --tp 4"
refused "reshard --tp 2 over --tp 4" "holds 2 rank file(s) that this reshard (2 devices) does not write, such as model-rank-2-part-0.safetensors" \
    "$SL" reshard "$T/v2" "$T/r" --tp 2
"$SL" load "$T/r" --tp 4 >/dev/null || fail "the refused reshard spoiled the --tp 4 output"
"$SL" reshard "$T/v1" "$T/p" --tp 2 --max-part-size 50KB >/dev/null || fail "reshard small parts"
nparts=$(ls "$T"/p/model-rank-0-part-*.safetensors | wc -l)
[ "$nparts" -gt 1 ] || fail "expected several parts per device, got $nparts"
refused "reshard with fewer parts over more" "does not write, such as model-rank-0-part-1.safetensors" \
    "$SL" reshard "$T/v2" "$T/p" --tp 2
# the same mesh and parts again: every file is overwritten, so it goes ahead
"$SL" reshard "$T/v2" "$T/p" --tp 2 --max-part-size 50KB >/dev/null || fail "reshard again over the same layout"
got=$("$SL" load "$T/p" --tp 2 --checksums --json) || fail "load p"
[ "$(echo "$want" | sums)" = "$(echo "$got" | sums)" ] || fail "p is not v2 after the second reshard"
# more devices than before: nothing stale either
"$SL" reshard "$T/v2" "$T/r2" --tp 4 >/dev/null || fail "reshard --tp 4 over --tp 2"

finish
echo "cli_reshard_outdir: all passed"
