#!/usr/bin/env bash
# cli_messages.sh - what the CLI prints from files and paths is printable and bounded (issue 18
# item 6): the text listing of inspect shows control bytes in names, metadata and paths as \xNN
# and cuts a name at about 120 bytes (--json keeps every byte, escaped as JSON); an error is one
# line however many newlines a shard name or a path holds, so an index cannot forge a second
# "shardload: error:" line; usage errors escape what was typed.
# Usage: cli_messages.sh path/to/shardload
set -u
SL=${1:?usage: cli_messages.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
PY=${SL_PY:-python3}
command -v "$PY" >/dev/null || { echo "no python"; exit 77; }

printable() {   # what, file: no byte below 0x20 but newlines, no DEL
    LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$2" && fail "$1: raw control bytes: $(LC_ALL=C cat -v "$2" | head -c 300)"
}

"$PY" - "$T" <<'PY'
import json, os, struct, sys
root = sys.argv[1]
def st(path, tensors, meta=None):
    hdr, off = {}, 0
    if meta:
        hdr["__metadata__"] = meta
    for name, n in tensors:
        hdr[name] = {"dtype": "U8", "shape": [n], "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(off))
os.makedirs(f"{root}/ck")
st(f"{root}/ck/model.safetensors", [("evil\x1b[2J\nshardload: error: forged", 1), ("n" * 1000000, 1)],
   {"note": "bell\x07 and \x1b]0;title\x07"})
os.makedirs(f"{root}/ix")
json.dump({"weight_map": {"a": "x\nshardload: error: forged\x1b[0m.safetensors"}},
          open(f"{root}/ix/model.safetensors.index.json", "w"))
d = f"{root}/dir\x1b[31m\nred"
os.makedirs(d)
st(f"{d}/a.safetensors", [("w", 1)])
open(f"{d}/b.safetensors", "wb").write(b"\x01")
PY

# the text listing
"$SL" inspect "$T/ck" >"$T/list.txt" 2>"$T/err" || fail "inspect ck: $(cat "$T/err")"
printable "inspect listing" "$T/list.txt"
grep -qF 'evil\x1b[2J\x0ashardload: error: forged  U8' "$T/list.txt" || fail "escaped name missing: $(head -c 400 "$T/list.txt")"
grep -qF 'note = bell\x07 and \x1b]0;title\x07' "$T/list.txt" || fail "escaped metadata missing"
long=$(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$T/list.txt")
[ "$long" -lt 400 ] || fail "a 1 MB name gave a $long-byte line"
[ "$(wc -l <"$T/list.txt")" -eq 8 ] || fail "the listing has $(wc -l <"$T/list.txt") lines, expected 8"
# --json keeps the full names (JSON escapes)
"$SL" inspect "$T/ck" --json >"$T/list.json" || fail "inspect --json"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); n={t["name"] for t in d["tensors"]}; assert "n"*1000000 in n and "evil\x1b[2J\nshardload: error: forged" in n' "$T/list.json" ||
    fail "--json lost a name"

# errors are one printable line
for target in "$T/ix" "$T/dir"$'\e[31m\nred'; do
    "$SL" inspect "$target" >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 1 ] || fail "inspect $(printf %q "$target"): exit $rc"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "inspect $(printf %q "$target"): $(wc -l <"$T/err") lines: $(cat -v "$T/err")"
    printable "error for $(printf %q "$target")" "$T/err"
done
grep -qF 'dir\x1b[31m\x0ared/b.safetensors' "$T/err" || fail "the path is not shown escaped: $(cat -v "$T/err")"
"$SL" inspect $'--\e[31mbad' >/dev/null 2>"$T/err"; [ $? -eq 2 ] || fail "usage error exit"
printable "usage error" "$T/err"
"$SL" $'\e[31mcmd' >/dev/null 2>"$T/err"
printable "unknown command" "$T/err"

# an error is one write() of its line, a usage error one of its two: stderr is unbuffered, and a
# line written a byte at a time (a write each) was cut by another rank's output under mpirun
# (LeakSanitizer stops with lines of its own under ptrace: leaks are checked by the other runs)
if command -v strace >/dev/null && strace -qq -e trace=write -o "$T/trace" true 2>/dev/null; then
    ASAN_OPTIONS=detect_leaks=0 strace -qq -e trace=write -o "$T/trace" "$SL" load "$T/no"$'\x01'"such" --tp 2 >/dev/null 2>&1
    [ "$(grep -c '^write(2, ' "$T/trace")" = 1 ] || fail "error line: not one write: $(head -5 "$T/trace")"
    ASAN_OPTIONS=detect_leaks=0 strace -qq -e trace=write -o "$T/trace" "$SL" load --bogus$'\x02' >/dev/null 2>&1
    [ "$(grep -c '^write(2, ' "$T/trace")" = 1 ] || fail "usage error: not one write: $(head -5 "$T/trace")"
    ASAN_OPTIONS=detect_leaks=0 strace -qq -s 256 -e trace=write -o "$T/trace" "$SL" bogus$'\x03' >/dev/null 2>&1   # its line, then the help
    grep -m1 '^write(2, ' "$T/trace" | grep -q "unknown command 'bogus.*'\\\\n\", " ||
        fail "unknown command: its line not one write: $(head -3 "$T/trace")"
else
    echo "cli_messages: no working strace: the writes of an error line not counted" >&2
fi

finish
echo "cli_messages: all passed"
