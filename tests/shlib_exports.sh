#!/usr/bin/env bash
# shlib_exports.sh - libshardload.so exports exactly the public API: every function that
# include/shardload.h declares, and nothing else (internal st_*, ck_*, sl_rd_*, ... stay hidden).
# Usage: shlib_exports.sh path/to/libshardload.so path/to/shardload.h
set -u
SO=${1:?usage: shlib_exports.sh LIBSHARDLOAD_SO SHARDLOAD_H}
HDR=${2:?usage: shlib_exports.sh LIBSHARDLOAD_SO SHARDLOAD_H}
. "$(dirname "$0")/lib.sh"
command -v nm >/dev/null 2>&1 || { echo "skip: nm not found (binutils)" >&2; exit 77; }

# Public names: each `sl_name(` of the header once its comments are removed (sed -z reads the
# file as one line, so the pattern spans comment lines).
sed -z 's:/\*[^*]*\*\+\([^/*][^*]*\*\+\)*/::g' "$HDR" | grep -oE '\bsl_[a-z0-9_]+ *\(' |
    tr -d ' (' | sort -u >"$T/public"
[ -s "$T/public" ] || fail "no sl_ declarations found in $HDR"

# Exported: the defined dynamic symbols, less what the toolchain itself puts there (the
# sanitizers' module and ODR markers in an ASan build).
nm -D --defined-only "$SO" >"$T/nm" || { fail "nm -D $SO failed"; finish; }
awk '{print $NF}' "$T/nm" | sed 's/@.*//' |
    grep -vE '^(_init|_fini|_edata|_end|__bss_start|__(odr_)?asan.*|___asan.*|__sancov.*|__ubsan.*)$' |
    sort -u >"$T/exported"

extra=$(comm -13 "$T/public" "$T/exported")
missing=$(comm -23 "$T/public" "$T/exported")
[ -z "$extra" ] || fail "exported but not declared in $(basename "$HDR") ($(echo "$extra" | wc -l)):" $extra
[ -z "$missing" ] || fail "declared in $(basename "$HDR") but not exported ($(echo "$missing" | wc -l)):" $missing
echo "$(wc -l <"$T/exported") symbols exported, $(wc -l <"$T/public") functions declared"
finish
