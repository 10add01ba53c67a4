#!/usr/bin/env bash
# cli_hf_cache.sh - checkpoints named hf://org/name[@revision] (issue 17 item 3): resolved in a
# Hugging Face hub cache laid out as huggingface_hub lays it out (refs/<rev> -> a commit,
# snapshots/<commit>/ of links into blobs/ named by sha256), without network. Loads equal the
# same files loaded from a plain folder, for a branch, a tag, a commit and the snapshot folder
# itself; the cache folder is found as huggingface_hub finds it (HF_HUB_CACHE, HF_HOME,
# XDG_CACHE_HOME, HOME); every wrong reference is one error line naming it, and none reaches
# outside the cache or blocks on a FIFO.
# Usage: cli_hf_cache.sh path/to/shardload
set -u
SL=${1:?usage: cli_hf_cache.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"

C1=1111111111111111111111111111111111111111
C2=2222222222222222222222222222222222222222
tiny_config "$T/tiny.json"
"$SL" synth --config "$T/tiny.json" "$T/a" --max-shard-size 600KB >/dev/null || { fail "synth a"; finish; }
"$SL" synth --config "$T/tiny.json" "$T/b" --seed 7 >/dev/null || { fail "synth b"; finish; }

M="$T/hub/models--org--tiny"
hub_snapshot "$M" $C1 "$T/a"
hub_snapshot "$M" $C2 "$T/b"
mkdir -p "$M/refs"
echo $C1 >"$M/refs/main"
printf '%s' $C2 >"$M/refs/v2"
export HF_HUB_CACHE="$T/hub"
unset HUGGINGFACE_HUB_CACHE HF_HOME

load_sums() { "$SL" load "$1" --tp 2 --checksums --json 2>"$T/err" | sums; }
ref_a=$(load_sums "$T/a") ref_b=$(load_sums "$T/b")
[ -n "$ref_a" ] && [ "$ref_a" != "$ref_b" ] || fail "the two checkpoints must differ"

# 1. branch (default main), tag, commit, snapshot folder
[ "$(load_sums hf://org/tiny)" = "$ref_a" ] || fail "hf://org/tiny: $(cat "$T/err")"
[ "$(load_sums hf://org/tiny@main)" = "$ref_a" ] || fail "@main: $(cat "$T/err")"
[ "$(load_sums hf://org/tiny@v2)" = "$ref_b" ] || fail "@v2: $(cat "$T/err")"
[ "$(load_sums hf://org/tiny@$C2)" = "$ref_b" ] || fail "@commit: $(cat "$T/err")"
[ "$(load_sums "$M/snapshots/$C1")" = "$ref_a" ] || fail "snapshot folder: $(cat "$T/err")"
"$SL" plan hf://org/tiny --tp 2 >/dev/null 2>"$T/err" || fail "plan: $(cat "$T/err")"
"$SL" inspect hf://org/tiny@v2 2>"$T/err" | grep -q "snapshots/$C2/" || fail "inspect: $(cat "$T/err")"
"$SL" reshard hf://org/tiny "$T/rs" --tp 2 >/dev/null 2>"$T/err" || fail "reshard: $(cat "$T/err")"
[ "$(load_sums "$T/rs")" = "$ref_a" ] || fail "reshard of hf://org/tiny: $(cat "$T/err")"

# 2. the cache folder as huggingface_hub finds it
mkdir -p "$T/home/hub" "$T/xdg/huggingface" "$T/user/.cache/huggingface"
ln -s "$T/hub/models--org--tiny" "$T/home/hub/models--org--tiny"
ln -s "$T/hub" "$T/xdg/huggingface/hub"
ln -s "$T/hub" "$T/user/.cache/huggingface/hub"
[ "$(HF_HUB_CACHE= HF_HOME="$T/home" load_sums hf://org/tiny)" = "$ref_a" ] || fail "HF_HOME: $(cat "$T/err")"
[ "$(HF_HUB_CACHE= XDG_CACHE_HOME="$T/xdg" load_sums hf://org/tiny)" = "$ref_a" ] || fail "XDG_CACHE_HOME: $(cat "$T/err")"
[ "$(env -u HF_HUB_CACHE -u XDG_CACHE_HOME HOME="$T/user" "$SL" load hf://org/tiny --tp 2 --checksums --json \
     2>"$T/err" | sums)" = "$ref_a" ] || fail "HOME: $(cat "$T/err")"
HF_HUB_CACHE="$T/none" HF_HOME="$T/home" "$SL" load hf://org/tiny >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "not in the Hugging Face cache $T/none " || fail "HF_HUB_CACHE first: $(cat "$T/err")"

# 3. references that must fail: one line, naming the reference and what is missing
bad() { # pattern ref
    "$SL" load "$2" >"$T/out" 2>"$T/err"
    one_line_error $? "$T/err" "$1" || fail "$2: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "$2: printed a result"
}
bad "hf://org/nope: not in the Hugging Face cache .*models--org--nope" hf://org/nope
bad "hf://org/tiny@v3: no revision 'v3'" hf://org/tiny@v3
bad "snapshot 3333333333333333333333333333333333333333 is not in the cache" hf://org/tiny@3333333333333333333333333333333333333333
bad "the model must be org/name or name" "hf://../hub/models--org--tiny"
bad "the model must be org/name or name" "hf://org/tiny/x"
bad "the model must be org/name or name" "hf://org//tiny"
bad "the model must be org/name or name" "hf://"
bad "the revision must be a branch, tag or commit" "hf://org/tiny@../../../etc"
bad "the revision must be a branch, tag or commit" "hf://org/tiny@"
bad 'hf://org/t\\x1bi: the model must be' "hf://org/t$(printf '\033')i"
echo "not a commit" >"$M/refs/broken"
bad "refs/broken: does not hold a 40-digit commit hash" hf://org/tiny@broken
echo 4444444444444444444444444444444444444444 >"$M/refs/gone"
bad "snapshot 4444444444444444444444444444444444444444 is not in the cache" hf://org/tiny@gone
mkfifo "$M/refs/fifo"
timeout 10 "$SL" load hf://org/tiny@fifo >/dev/null 2>"$T/err"
rc=$?
[ $rc -ne 124 ] || fail "a FIFO ref blocked"
one_line_error $rc "$T/err" "not a regular file" || fail "FIFO ref: $(cat "$T/err")"
# a snapshot whose link points at a missing blob: the checkpoint open names the file
rm "$M/blobs/$(basename "$(readlink "$M/snapshots/$C2/config.json")")"
"$SL" load hf://org/tiny@v2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "config.json" || fail "missing blob: $(cat "$T/err")"

finish
echo "cli_hf_cache: ok"
