#!/usr/bin/env bash
# cli_units.sh - one rule for --staging and --request (issue 18 item 13): a plain number is MiB
# whatever its size, a number with a unit is that size, and the result lies in [4 KiB, 1 TiB]
# (a plain number above 1,048,576 was silently taken as bytes: --staging 1048577 was 1 MiB).
# The rule is in --help of load and reshard.
# Usage: cli_units.sh path/to/shardload
set -u
SL=${1:?usage: cli_units.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
peak() { grep -o '"staging_peak":[0-9]*' | grep -o '[0-9]*$'; }

tiny_config "$T/cfg.json"
"$SL" synth --config "$T/cfg.json" "$T/ck" >/dev/null || fail "synth"

# the same budget written four ways
ref=$("$SL" load "$T/ck" --tp 2 --staging 2 --request 1 --json | peak)
[ -n "$ref" ] && [ "$ref" -le $((2 << 20)) ] || fail "--staging 2: peak '$ref' over 2 MiB"
for s in "2M 1M" "2MiB 1024K" "2097152B 1048576B"; do
    set -- $s
    got=$("$SL" load "$T/ck" --tp 2 --staging "$1" --request "$2" --json | peak)
    [ "$got" = "$ref" ] || fail "--staging $1 --request $2: peak $got, --staging 2 --request 1 gave $ref"
done

# plain numbers are MiB however large: past 1 TiB they are refused, not read as bytes
usage() {   # what, args...: exit 2 with the rule in the message
    local what=$1; shift
    local err rc
    err=$("$SL" "$@" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
    echo "$err" | grep -q "plain number" || fail "$what: message does not give the rule: $err"
}
usage "--staging 1048577 (MiB)" load "$T/ck" --staging 1048577
usage "--staging 2097152 (2 MiB in bytes, once)" load "$T/ck" --staging 2097152
usage "--request 1048577" load "$T/ck" --request 1048577
usage "--staging 0" load "$T/ck" --staging 0
usage "--staging 4095B" load "$T/ck" --staging 4095B
usage "--staging 2T" load "$T/ck" --staging 2T
usage "--staging -1" load "$T/ck" --staging -1
usage "--staging 1.5" load "$T/ck" --staging 1.5
usage "reshard --staging 1048577" reshard "$T/ck" "$T/out" --staging 1048577
[ -e "$T/out" ] && fail "a refused reshard created its output directory"

# the rule is documented where the options are
for cmd in load reshard; do
    "$SL" $cmd --help | tr -s ' \n' ' ' | grep -q "a plain number is MiB" || fail "$cmd --help does not state the rule"
done

finish
echo "cli_units: all passed"
