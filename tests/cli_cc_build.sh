#!/usr/bin/env bash
# cli_cc_build.sh - scripts/cc_build.sh, the cmake-free build that bench/gpu_check.sh falls back to
# on a GPU machine without cmake, still builds this tree: its CLI loads with the checksums of the
# cmake build's, its library exports what the cmake build's does, and an option it leaves out
# (remote sources: no libcurl) is refused with a message. Skipped in sanitizer builds (it builds
# without sanitizers: the release run covers it). Usage: cli_cc_build.sh path/to/shardload
set -u
SL=${1:?usage: cli_cc_build.sh SHARDLOAD}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
if [[ $(nm "$SL" 2>/dev/null) == *__asan_init* ]]; then
    echo "skip: sanitizer build"
    exit 77
fi
tiny_ckpt
CFLAGS=-O1 bash "$ROOT/scripts/cc_build.sh" "$T/cc" >"$T/log" 2>&1 || { cat "$T/log" >&2; fail "cc_build failed"; finish; }
CC_SL=$T/cc/shardload
ref=$("$SL" load "$CK" --tp 2 --checksums --json | sums)
out=$("$CC_SL" load "$CK" --tp 2 --checksums --json 2>"$T/err") || fail "load: $(cat "$T/err")"
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "checksums differ from the cmake build's"
lib=$(dirname "$SL")/libshardload.so
exports() { nm -D --defined-only "$1" | awk '$2 == "T" {print $3}' | sort; }
[ -f "$lib" ] && [ "$(exports "$T/cc/libshardload.so")" = "$(exports "$lib")" ] \
    || fail "exports differ: $(diff <(exports "$T/cc/libshardload.so") <(exports "$lib") | head -5)"
"$CC_SL" inspect http://127.0.0.1:9/ck >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "" && grep -qi "curl" "$T/err" || fail "remote without libcurl: $(cat "$T/err")"
finish
echo "cli_cc_build: ok"
