#!/usr/bin/env bash
# cli_stdout.sh - output that cannot be written is a failure (issue 18 item 9): with stdout on a
# full device (/dev/full) every command that prints exits 1 with one line on stderr, instead of
# exit 0 and a truncated or missing listing. A command that fails for another reason keeps its
# own status and its one line.
# Usage: cli_stdout.sh path/to/shardload
set -u
SL=${1:?usage: cli_stdout.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
[ -w /dev/full ] || { echo "no /dev/full"; exit 77; }

tiny_config "$T/cfg.json"
"$SL" synth --config "$T/cfg.json" "$T/ck" >/dev/null || fail "synth"

full() {   # what, command...: exit 1 and exactly one line naming stdout
    local what=$1; shift
    local err rc
    err=$("$@" 2>&1 >/dev/full); rc=$?
    [ $rc -eq 1 ] || fail "$what > /dev/full: exit $rc, expected 1"
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$what > /dev/full: not one line: $err"
    case $err in "shardload: error: "*stdout*) ;; *) fail "$what > /dev/full: message: $err" ;; esac
}
full "inspect --json" "$SL" inspect "$T/ck" --json
full "inspect" "$SL" inspect "$T/ck"
full "plan" "$SL" plan --config "$T/cfg.json" --tp 2
full "plan --json" "$SL" plan "$T/ck" --tp 2 --json
full "load --json" "$SL" load "$T/ck" --tp 2 --json --checksums
full "--help" "$SL" --help
full "inspect --help" "$SL" inspect --help
full "--version" "$SL" --version

# a command that fails anyway: its own message and status, not a second line
err=$("$SL" inspect "$T/nothing" 2>&1 >/dev/full); rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ $err == *"$T/nothing"* ]] ||
    fail "failing inspect > /dev/full: rc $rc: $err"
"$SL" plan --bogus >/dev/full 2>/dev/null; [ $? -eq 2 ] || fail "usage error > /dev/full must stay exit 2"

# a good stdout is unchanged
"$SL" inspect "$T/ck" --json >"$T/out.json" || fail "inspect --json to a file"
[ -s "$T/out.json" ] || fail "inspect --json wrote nothing"

finish
echo "cli_stdout: all passed"
