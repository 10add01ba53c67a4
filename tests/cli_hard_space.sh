#!/usr/bin/env bash
# cli_hard_space.sh - a write refused for lack of space leaves nothing (issue 18 items 4 and its
# loose ends): reshard's free-space check, on a real small file system (a 1 MiB tmpfs mounted in a
# private mount namespace: `unshare -rm` as any user where user namespaces are allowed, or as
# root), and synth's, which used to leave the empty OUTDIR it had created; a reshard that fails
# late leaves none of its finished parts.
set -u
SL="$1"
. "$(dirname "$0")/lib.sh"
tiny_ckpt

# synth: a config of about 3 TB, more than any test machine has free
cat >"$T/huge.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":16384,"intermediate_size":53248,
 "num_attention_heads":128,"num_key_value_heads":8,"num_hidden_layers":1000,"vocab_size":128256,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"head_dim":128}
JSON
"$SL" synth --config "$T/huge.json" "$T/s" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "bytes free: nothing was written" || fail "synth of 3 TB: $(cat "$T/err")"
[ ! -e "$T/s" ] || fail "synth refused for space left the OUTDIR it created: $(ls -A "$T/s")"
# OUTDIR's missing parents are made (as mkdir -p) and, when the write is refused, taken away
"$SL" synth --config "$T/huge.json" "$T/n1/n2/s" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "bytes free: nothing was written" || fail "nested synth of 3 TB: $(cat "$T/err")"
[ ! -e "$T/n1" ] || fail "synth refused for space left the parents it created: $(find "$T/n1")"
"$SL" synth --config "$T/tiny.json" "$T/m1/m2/ck" >/dev/null 2>"$T/err" || fail "nested synth: $(cat "$T/err")"
"$SL" reshard "$T/m1/m2/ck" "$T/m1/r1/r2/out" --tp 2 >/dev/null 2>"$T/err" || fail "nested reshard: $(cat "$T/err")"
a=$("$SL" load "$T/m1/m2/ck" --tp 2 --checksums | grep -v 'took\|GB/s\|staging\|requests')
b=$("$SL" load "$T/m1/r1/r2/out" --tp 2 --checksums | grep -v 'took\|GB/s\|staging\|requests')
[ -n "$a" ] && [ "$a" = "$b" ] || fail "the nested reshard's parameters differ from the nested synth's"
mkdir "$T/s2" && echo keep >"$T/s2/mine.txt"
# a directory that cannot be made below parents that were: the parents go again
long=$(printf 'x%.0s' $(seq 300))
"$SL" synth --config "$T/tiny.json" "$T/u1/u2/$long" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "cannot create directory: File name too long" || fail "synth, name too long: $(cat "$T/err")"
[ ! -e "$T/u1" ] || fail "a directory that could not be made left its parents: $(find "$T/u1")"
"$SL" synth --config "$T/tiny.json" "$T/s2/mine.txt/x" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "mine.txt/x: cannot create directory: Not a directory" ||
    fail "synth under a regular file: $(cat "$T/err")"
"$SL" synth --config "$T/huge.json" "$T/s2" >/dev/null 2>"$T/err" && fail "synth of 3 TB into s2 succeeded"
[ "$(ls -A "$T/s2")" = mine.txt ] || fail "synth into an existing OUTDIR removed or left files: $(ls -A "$T/s2")"

# a reshard that fails after its parts were finished leaves none of them, nor the OUTDIR it
# created: the config.json it writes last (the config it planned with) is 8 MB, over a file-size
# limit the parts are under (ulimit -f, SIGXFSZ ignored so that the write fails with EFBIG)
"${SL_PY:-python3}" - "$T/tiny.json" "$T/padded.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["padding"] = "x" * (8 << 20)
json.dump(cfg, open(sys.argv[2], "w"))
PY
(trap '' XFSZ; ulimit -f 4096; exec timeout 60 "$SL" reshard "$CK" "$T/rf" --tp 2 --config "$T/padded.json") \
    >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "rf/config.json.tmp.*: write failed: File too large" ||
    fail "reshard whose config.json cannot be written: $(cat "$T/err")"
[ ! -e "$T/rf" ] || fail "a failed reshard left: $(ls -A "$T/rf")"
# the config is read when the plan is made: a FIFO given as --config fails before anything is written
mkfifo "$T/fifo.json"
timeout 60 "$SL" reshard "$CK" "$T/rq" --tp 2 --config "$T/fifo.json" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "fifo.json: not a regular file (a FIFO)" || fail "reshard --config FIFO: $(cat "$T/err")"
[ ! -e "$T/rq" ] || fail "a reshard refused at plan time left: $(ls -A "$T/rq")"

# reshard into a 1 MiB file system: the checkpoint's devices need about 2.5 MB
mkdir -p "$T/mnt"
cat >"$T/in_ns.sh" <<'SH'
set -u
mount -t tmpfs -o size=1m tmpfs "$2" || exit 77
"$1" reshard "$3" "$2/out" --tp 2 >/dev/null 2>"$4"
rc=$?
ls -A "$2" >"$5"
exit $rc
SH
args=("$SL" "$T/mnt" "$CK" "$T/err" "$T/left")
if unshare -rm true 2>/dev/null; then
    unshare -rm bash "$T/in_ns.sh" "${args[@]}"
    rc=$?
elif [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    unshare -m bash "$T/in_ns.sh" "${args[@]}"
    rc=$?
else
    rc=77
fi
if [ $rc -eq 77 ]; then
    echo "skip: cannot mount a small tmpfs here (no user or mount namespace); synth checks passed" >&2
    [ "$fails" -eq 0 ] || finish
    exit 77
fi
one_line_error $rc "$T/err" "/out: the output needs [0-9]* bytes but its file system has [0-9]* bytes free: nothing was written" ||
    fail "reshard into 1 MiB: exit $rc: $(cat "$T/err")"
[ ! -s "$T/left" ] || fail "reshard refused for space left: $(cat "$T/left")"

# the same reshard again into its complete output on a 4 MiB file system: its parts (2.5 MB) do
# not fit beside the ones they would replace, which stay until every new part is written. It is
# refused before it writes, and the first output still loads the same (the old parts' bytes were
# counted as free, so the run began, filled the disk, and had already removed config.json)
cat >"$T/in_ns2.sh" <<'SH'
set -u
mount -t tmpfs -o size=4m tmpfs "$2" || exit 77
"$1" reshard "$3" "$2/out" --tp 2 >/dev/null 2>"$4" || exit 3
"$1" load "$2/out" --tp 2 --checksums --json >"$5.a" 2>>"$4" || exit 4
"$1" reshard "$3" "$2/out" --tp 2 >/dev/null 2>"$4"
echo $? >"$5.rc"
"$1" load "$2/out" --tp 2 --checksums --json >"$5.b" 2>>"$4.load"
rm -rf "$2/out"
# synth again into its output with about 100 KB free: refused before it writes, the first output
# whole (the shards it replaces free their space one at a time, all but one counted)
"$1" synth --config "$6" "$2/s" --max-shard-size 600KB >/dev/null 2>"$4.s" || exit 5
"$1" load "$2/s" --checksums --json >"$5.sa" 2>>"$4.s" || exit 6
head -c $(( $(df -B1 --output=avail "$2" | tail -1) - 100000 )) /dev/zero >"$2/fill"
"$1" synth --config "$6" "$2/s" --max-shard-size 600KB --seed 9 >/dev/null 2>"$4.s"
echo $? >"$5.src"
"$1" load "$2/s" --checksums --json >"$5.sb" 2>>"$4.load"
SH
args=("$SL" "$T/mnt" "$CK" "$T/err2" "$T/again" "$T/tiny.json")
if unshare -rm true 2>/dev/null; then unshare -rm bash "$T/in_ns2.sh" "${args[@]}"; else unshare -m bash "$T/in_ns2.sh" "${args[@]}"; fi
one_line_error "$(cat "$T/again.rc" 2>/dev/null)" "$T/err2" "/out: the output needs [0-9]* bytes but its file system has [0-9]* bytes free: nothing was written" ||
    fail "second reshard into 4 MiB: exit $(cat "$T/again.rc" 2>/dev/null): $(cat "$T/err2")"
[ -s "$T/again.a" ] && [ "$(sums <"$T/again.a")" = "$(sums <"$T/again.b")" ] ||
    fail "the first reshard's output no longer loads the same: $(cat "$T/err2.load" 2>/dev/null)"
one_line_error "$(cat "$T/again.src" 2>/dev/null)" "$T/err2.s" "/s: the output needs [0-9]* bytes but its file system has [0-9]* bytes free: nothing was written" ||
    fail "second synth into a full disk: exit $(cat "$T/again.src" 2>/dev/null): $(cat "$T/err2.s")"
[ -s "$T/again.sa" ] && [ "$(sums <"$T/again.sa")" = "$(sums <"$T/again.sb")" ] ||
    fail "the first synth's output no longer loads the same: $(cat "$T/err2.load" 2>/dev/null)"
finish
