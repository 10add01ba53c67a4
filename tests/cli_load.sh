#!/usr/bin/env bash
# cli_load.sh - end-to-end tests of `shardload load` on a small synthetic checkpoint:
# every engine and I/O mode gives the same bytes, allocated bytes equal the plan's, bytes read
# equal the checkpoint's, conversions and dummy loads are deterministic, faults exit 1 with one
# line naming the file, usage errors exit 2. Usage: cli_load.sh path/to/shardload
set -u
SL=${1:?usage: cli_load.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"

tiny_ckpt
json_field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" | head -1 | tr -d '"'; }

# 1. same checksums for every engine x io mode; bytes read once; allocations equal the plan
ref=""
for eng in pread uring; do
    for io in buffered direct auto; do
        out=$(SL_IO_ENGINE=$eng "$SL" load "$CK" --tp 2 --io $io --staging 1 --checksums --json 2>"$T/err")
        rc=$?
        if [ $rc -ne 0 ] && grep -q "io_uring" "$T/err"; then continue; fi
        [ $rc -eq 0 ] || { fail "load $eng $io: $(cat "$T/err")"; continue; }
        s=$(echo "$out" | sums)
        [ -n "$s" ] || fail "no checksums ($eng $io)"
        if [ -z "$ref" ]; then ref=$s; elif [ "$s" != "$ref" ]; then fail "checksums differ ($eng $io)"; fi
        if [ $io = buffered ]; then
            br=$(echo "$out" | json_field bytes_read)
            total=$(cat "$CK"/*.safetensors | wc -c)
            hdr=0
            for f in "$CK"/*.safetensors; do
                n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
                hdr=$((hdr + 8 + n))
            done
            [ "$br" = $((total - hdr)) ] || fail "bytes_read $br != data bytes $((total - hdr))"
        fi
    done
done
plan=$("$SL" plan "$CK" --tp 2 --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' ')
alloc=$("$SL" load "$CK" --tp 2 --json | grep -o '"allocated_bytes":[0-9]*' | grep -o '[0-9]*' | tr '\n' ' ')
[ -n "$plan" ] && [ "$plan" = "$alloc" ] || fail "allocated '$alloc' != plan '$plan'"

# 2. text report
out=$("$SL" load "$CK" --tp 2 --pp 2 2>&1) || fail "tp2 pp2: $out"
echo "$out" | grep -q "^Loading weights took [0-9.]* s" || fail "no timing line: $out"
echo "$out" | grep -q "device 3: .* bytes allocated" || fail "no device 3 line"
echo "$out" | grep -q "peak RSS" || fail "no peak RSS"

# 3. conversion: f32 load is deterministic and differs from bf16
a=$("$SL" load "$CK" --dtype f32 --checksums --json | sums)
b=$(SL_IO_ENGINE=pread "$SL" load "$CK" --dtype f32 --io direct --checksums --json | sums)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "f32 loads differ"
[ "$a" != "$("$SL" load "$CK" --checksums --json | sums)" ] || fail "f32 equals bf16"

# 4. dummy: no PATH with --config, deterministic, seed matters
d1=$("$SL" load --format dummy --config "$T/tiny.json" --tp 2 --checksums --json | sums)
d2=$("$SL" load --format dummy --config "$T/tiny.json" --tp 2 --checksums --json --threads 1 | sums)
d3=$("$SL" load --format dummy --config "$T/tiny.json" --tp 2 --checksums --json --seed 7 | sums)
[ -n "$d1" ] && [ "$d1" = "$d2" ] || fail "dummy not deterministic"
[ "$d1" != "$d3" ] || fail "dummy seed ignored"
out=$("$SL" load "$CK" --format dummy --json) || fail "dummy with PATH"
[ "$(echo "$out" | json_field bytes_read)" = 0 ] || fail "dummy read bytes"

# --numa binds each device's memory (node d % nodes) and changes no byte
n1=$("$SL" load "$CK" --tp 2 --numa --checksums --json | sums)
[ -n "$n1" ] && [ "$n1" = "$ref" ] || fail "--numa load differs"

# 5. faults: a shard truncated after synthesis -> exit 1, one line naming the file
cp -r "$CK" "$T/bad"
f=$(ls "$T"/bad/*.safetensors | head -1)
truncate -s -1000 "$f"
"$SL" load "$T/bad" --tp 2 >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -ne 1 ] || [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q "^shardload: error: " "$T/err"; then
    fail "truncated: rc $rc, stderr: $(cat "$T/err")"
fi
"$SL" load "$T/nonexistent" >/dev/null 2>&1; [ $? -eq 1 ] || fail "missing path should exit 1"
"$SL" load "$CK" --device cuda >/dev/null 2>"$T/err"; [ $? -eq 1 ] || fail "cuda should exit 1"

# 6. --devices: the mesh devices of one rank's process, reported by their mesh index, bytes as in
#    the whole load, only their bytes read
full=$("$SL" load "$CK" --tp 4 --io buffered --checksums --json) || fail "tp 4 load"
part=$("$SL" load "$CK" --tp 4 --io buffered --devices 3,1 --checksums --json) || fail "--devices 3,1"
python3 - "$full" "$part" <<'PY' || fail "--devices 3,1: not devices 3 and 1 of the whole load"
import json, sys
full, part = (json.loads(a) for a in sys.argv[1:])
by = {d["index"]: d for d in full["devices"]}
assert [d["index"] for d in part["devices"]] == [3, 1], part["devices"]
for d in part["devices"]:
    assert d == by[d["index"]], d["index"]   # allocated bytes and every parameter's checksum
assert 0 < part["bytes_read"] < full["bytes_read"], (part["bytes_read"], full["bytes_read"])
PY
out=$("$SL" load "$CK" --tp 4 --devices 2 2>&1) || fail "--devices 2: $out"
echo "$out" | grep -q "^device 2: .* bytes allocated" || fail "no device 2 line: $out"
! echo "$out" | grep -q "^device [013]:" || fail "devices not loaded are listed: $out"
"$SL" load "$CK" --tp 4 --devices 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "" || fail "--devices 4 of 4: $(cat "$T/err")"
"$SL" load "$CK" --tp 4 --devices 1,1 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "" || fail "--devices 1,1: $(cat "$T/err")"
for bad in "" "1,,2" "a" "-1"; do
    "$SL" load "$CK" --tp 4 --devices "$bad" >/dev/null 2>&1; [ $? -eq 2 ] || fail "--devices '$bad' should exit 2"
done
"$SL" load "$CK" --tp 4 --devices 0 --dist independent >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "devices is for one process" "$T/err" || fail "--devices with --dist: $(cat "$T/err")"
"$SL" reshard "$CK" "$T/rs" --tp 2 --devices 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "reshard --devices should exit 2"

# 7. usage
"$SL" load >/dev/null 2>&1; [ $? -eq 2 ] || fail "no PATH should exit 2"
"$SL" load "$CK" --io sideways >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --io should exit 2"
"$SL" load "$CK" --bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown option should exit 2"
"$SL" load --format dummy >/dev/null 2>&1; [ $? -eq 2 ] || fail "dummy without config should exit 2"
"$SL" load --format dummy --config "$T/tiny.json" --verify >/dev/null 2>&1; [ $? -eq 2 ] || fail "dummy with --verify should exit 2"
# an option of another device kind is a usage error, not ignored (--pjrt-plugin alone loaded on cpu)
for bad in "--pjrt-plugin /nonexistent.so" "--gpus 0" "--device cuda --numa" "--device pjrt --pjrt-plugin /x.so --gpus 0"; do
    # shellcheck disable=SC2086
    "$SL" load "$CK" --tp 2 $bad >/dev/null 2>"$T/err"
    [ $? -eq 2 ] && grep -q "goes with --device" "$T/err" || fail "load $bad: $(cat "$T/err")"
done
help=$("$SL" load --help) || fail "--help exit"
for o in --tp --pp --layout --dtype --device --io --threads --staging --format --seed --checksums \
         --json --config --rules --numa --gpus --devices; do
    echo "$help" | grep -q -- "$o" || fail "--help lacks $o"
done
# the usage lines (up to the first blank line) name the options described further down
usage() { "$SL" "$@" --help | sed '/^$/q'; }
for o in --verify --manifest --dist --devices-per-rank --read-gap --request --ep "remote options"; do
    usage load | grep -q -- "$o" || fail "load --help usage lacks $o"
done
usage synth | grep -q -- --write-manifest || fail "synth --help usage lacks --write-manifest"
# every command's help says its exit status (demo extra exits 2, too)
for cmd in inspect plan load reshard synth demo; do
    "$SL" $cmd --help | grep -q "^Exit status: 0 .*2 usage error" || fail "$cmd --help has no exit status"
done
"$SL" demo extra >/dev/null 2>&1; [ $? -eq 2 ] || fail "demo extra should exit 2"

finish
echo "cli_load: ok"
