#!/usr/bin/env bash
# cli_http_faults.sh - faults between the loader and an HTTP server (issue 17 items 2, 5), injected
# by tests/fault_proxy.py on loopback in front of tests/http_range_server.py: connection resets
# mid-range, truncated bodies, 503 bursts, 429 with Retry-After, stalled responses (the stall
# timeout) are survived with checksums equal to the local load; a server that keeps failing, a
# reset with retries off, and an object replaced mid-load (ETag/Last-Modified change: If-Match
# answers 412) fail in one line naming the object, within bounded time. Only the stall cases use a
# short stall timeout (1 s), with stalls well past it (curl's low-speed check, used before,
# averages over 5 s and noticed one 4 s after a 32 KiB burst). The others allow 10 s without a
# byte, so that a healthy response that a loaded machine (parallel ctest on 2 cores) delays is not
# taken for a stall and retried (which the byte counts would see). Servers that fail for good (501, 505) are not retried; other 5xx are.
# Usage: cli_http_faults.sh path/to/shardload
set -u
SL=${1:?usage: cli_http_faults.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"

www_ckpt
start_http "$W"
UP=$(port_of "$HTTP")
ref=$("$SL" load "$W/ck" --tp 4 --checksums --json | sums)
# 64 KiB ranges: about 50 data GETs for the proxy to break; short backoff
KNOBS=(--remote-range 64K --remote-backoff-ms 20 --remote-timeout-ms 10000)
L=(timeout 120 "$SL" load --tp 4 --checksums --json "${KNOBS[@]}")
STALL_TIMEOUT=(--remote-timeout-ms 1000)   # after KNOBS: the later value wins
# requests the proxy broke: the log's fourth field names the fault ("-" for none)
broken() { awk '$4 != "-"' "$T/$1.log" | wc -l; }

# 1. survived, equal checksums
survive() { # name fault-args... (LX: more load options)
    local name=$1; shift
    start_proxy "$UP" "$name" "$@"
    out=$("${L[@]}" ${LX:-} "$PROXY/ck/" 2>"$T/err")
    rc=$?
    stop_proxy
    [ $rc -eq 0 ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "$name: rc $rc, checksums differ: $(cat "$T/err")"
    [ "$(broken "$name")" -gt 0 ] || fail "$name: the proxy broke nothing"
    # the load counts what it asked for again (every broken data range, at least once; headers503's
    # five 503s all meet the open's GETs, which come before the load and are not its retries)
    [ "$name" = headers503 ] || [ "$(echo "$out" | num remote_retries)" -gt 0 ] && [ "$(echo "$out" | num remote_restarts)" = 0 ] ||
        fail "$name: retries not counted: $(echo "$out" | grep -o '"remote_re[a-z]*":[0-9]*' | tr '\n' ' ')"
    [ ! -s "$T/err" ] || fail "$name: stderr not empty: $(cat "$T/err")"
}
survive reset --fault reset --every 3
survive truncate --fault truncate --every 4
survive burst503 --fault 503 --after 2 --count 4
survive burst507 --fault 507 --after 2 --count 2
survive tooMany --fault 429 --every 7 --count 2
# each stalled range resumed from the first byte it did not get (its first byte + the bytes sent
# before the stall), on another connection, within BOUND s of the stall's start
# (shards with headers of one size have the same offsets: a range is its path and first byte)
resumed_within() { # name bound
    awk -v bound="$2" '$4 == "stall" {want[$1 " " ($5 + $3)] = $6} $4 == "-" && $5 != "-" {got[$1 " " $5] = $6}
         END {n = 0; for (b in want) {n++; if (!(b in got)) {print "no resume at " b; bad = 1}
                                       else if (got[b] - want[b] > bound) {print "resumed " got[b] - want[b] " s after the stall at " b; bad = 1}}
              exit bad || n != 3}' "$T/$1.log" ||
        fail "$1: the 3 stalled ranges were not resumed where they stopped within $2 s: $(grep stall "$T/$1.log")"
}
# Stalls among other traffic: resumed 1.03 s after their start with the 1 s timeout here (curl's
# low-speed check, used before, took 4.0 s), well before the 10 s stall ends.
LX="${STALL_TIMEOUT[*]}" survive stall --fault stall --every 9 --count 3 --stall 10
resumed_within stall 7
# Stalls close together (every third range), the other connections soon idle: the stall check runs when curl
# polls, and a retry used to wait for the poll's whole second: 3.0 s after the stall's start
# (timeouts of 0.5 and 2 s: 2.5 and 4.0 s). Now within a quarter of the timeout of it, and the
# retry at its backoff: 1.03 s here. (The 3 s bound the case above had, failing once in `ctest
# -j2`, may have met this: a stall at the load's end, with nothing else running.)
LX="${STALL_TIMEOUT[*]}" survive stall3 --fault stall --every 3 --count 3 --stall 10
resumed_within stall3 2.5
# That the stall is noticed by the timeout and not by curl's check is the "no byte for 1000 ms"
# message below.
survive mixed --fault reset --every 2 --count 10
# a server that sends fewer bytes than asked, and says so in its Content-Range: the rest is asked for
survive crshort --fault crshort --every 3
# ... and leaves bytes past its response on the connection, which curl reads as an "HTTP/0.9" reply
# to the next request: asked for again on another connection (it failed the load, "Unsupported
# protocol")
survive crjunk --fault crjunk --every 3
# the open's GETs too (the 8-byte lengths and the headers, fetched many at once)
survive headers --fault reset --every 2 --min-bytes 0
survive headers503 --fault 503 --count 5 --min-bytes 0
# a range cut short resumes from the first byte not received: the halves the proxy sent before
# closing are not asked for again, so the data bytes sent add up to the bytes loaded (a truncated
# body, whose bytes all arrive; after a reset the kernel drops what was not read yet)
start_proxy "$UP" resume --fault truncate --every 2
"${L[@]}" "$PROXY/ck/" >"$T/out" 2>"$T/err" || fail "resume: $(cat "$T/err")"
stop_proxy
need=$(num bytes_read <"$T/out")
served=$(awk '$2 == 206 && $5 != "-" && $5 > 8 {s += $3} END {print s + 0}' "$T/resume.log")
[ "$served" = "$need" ] || fail "resume: data bytes sent $served (broken ones included), loaded $need"

# 2. clean failures, one line, bounded
start_proxy "$UP" always503 --fault 503
start=$(date +%s)
"${L[@]}" "$PROXY/ck/" --remote-retries 3 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "ck/model-0000[1-6]-of-00006.safetensors: bytes [0-9]*-[0-9]*: HTTP 503 (gave up after 4 tries)" ||
    fail "always 503: $(cat "$T/err")"
[ $(($(date +%s) - start)) -lt 30 ] || fail "always 503: not bounded"
stop_proxy
start_proxy "$UP" notimpl --fault 501 --after 3 --count 1
"${L[@]}" "$PROXY/ck/" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "ck/model-0000[1-6]-of-00006.safetensors: HTTP 501$" || fail "501: $(cat "$T/err")"
[ "$(grep -c ' 501 ' "$T/notimpl.log")" = 1 ] || fail "501: not one try: $(grep ' 501 ' "$T/notimpl.log")"
stop_proxy
start_proxy "$UP" noretry --fault reset --every 5
"${L[@]}" "$PROXY/ck/" --remote-retries 0 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "safetensors: bytes [0-9]*-[0-9]*: .*(gave up after 1 tries)" || fail "retries 0: $(cat "$T/err")"
stop_proxy
# a Content-Range that disagrees with the body (it says half, the body is whole) or with the
# request (it runs to the object's end): one line, not retried. Before, the body was taken for the
# bytes asked for, whatever the Content-Range said
start_proxy "$UP" crhalf --fault crhalf --after 3 --count 1 --min-bytes 65536
"${L[@]}" "$PROXY/ck/" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "safetensors: HTTP 206 of Content-Length [0-9]* for Content-Range bytes [0-9]*-[0-9]* ([0-9]* bytes)" ||
    fail "Content-Range end before the body's: $(cat "$T/err")"
stop_proxy
start_proxy "$UP" crpast --fault crpast --after 3 --count 1 --min-bytes 65536
"${L[@]}" "$PROXY/ck/" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "safetensors: asked for bytes [0-9]*-[0-9]*, the server's Content-Range is bytes [0-9]*-[0-9]*/[0-9]*" ||
    fail "Content-Range end past the request: $(cat "$T/err")"
[ "$(awk '$4 == "crpast"' "$T/crpast.log" | wc -l)" = 1 ] || fail "crpast: not one range broken: $(cat "$T/crpast.log")"
stop_proxy
# every data GET stalls before its first body byte: no try progresses, so retries 1 is 2 tries
start_proxy "$UP" stallfail --fault stall --stall-bytes 0 --stall 60
start=$(date +%s)
"${L[@]}" "${STALL_TIMEOUT[@]}" "$PROXY/ck/" --remote-retries 1 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "safetensors: bytes [0-9]*-[0-9]*: no byte for 1000 ms (gave up after 2 tries)" ||
    fail "stall, retries 1: $(cat "$T/err")"
[ $(($(date +%s) - start)) -lt 40 ] || fail "stall, retries 1: not bounded"
stop_proxy
# a server that trickles for 60 s, timeout 1 s, retries 2: each try ends as a stall does, 3 tries,
# within seconds
trickle() { # label fault reason
    start_proxy "$UP" "$2" --fault "$2" --stall 60
    start=$(date +%s)
    timeout 40 "$SL" load "$PROXY/ck/" --tp 2 "${KNOBS[@]}" "${STALL_TIMEOUT[@]}" --remote-retries 2 >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "safetensors: bytes [0-9]*-[0-9]*: $3 (gave up after 3 tries)" ||
        fail "$1: $(cat "$T/err")"
    [ $(($(date +%s) - start)) -lt 15 ] || fail "$1: not bounded ($(($(date +%s) - start)) s)"
    stop_proxy
}
# headers a line every 0.2 s, never a body: no body byte is progress. Before, each header line
# reset the timeout: the range lived as long as the server went on (60 s here, then again per try)
trickle "header trickle" hdrdrip "no byte for 1000 ms"
# a body a byte every 0.2 s (never a stall): under 1 kB/s over a timeout window. Before, such a
# range lived for weeks (its bytes at 5 a second), each try's few bytes resetting the retries
trickle "body trickle" bodydrip "under 1000 bytes/s for 1000 ms"
# One range served at 16 KB/s (a slow node: far above a trickle), the others at loopback speed:
# it is asked for again from where it had got to, on a new connection, once it is 5 s old
# (XF_LAG_MIN_MS), and the load ends in seconds with equal checksums. Before, that range alone
# held the load for 16 s (256 KiB at 16 KB/s); on a real store, a 16 MiB range for 17 minutes.
LAG=(--remote-range 256K --remote-backoff-ms 20 --remote-timeout-ms 10000)
start_proxy "$UP" laggard --fault slow --rate 16384 --after 6 --count 1 --min-bytes 262144
start=$(date +%s%N)
out=$(timeout 60 "$SL" load "$PROXY/ck/" --tp 4 --checksums --json "${LAG[@]}" 2>"$T/err")
rc=$?
took=$((($(date +%s%N) - start) / 1000000))
stop_proxy
[ $rc -eq 0 ] && [ "$(echo "$out" | sums)" = "$ref" ] && [ ! -s "$T/err" ] ||
    fail "laggard: rc $rc, checksums differ or stderr: $(cat "$T/err")"
# the slow range's path and first byte; its restart: a GET of the same path starting inside it
read -r lpath lfirst < <(awk '$4 == "slow" {print $1, $5}' "$T/laggard.log")
awk -v p="$lpath" -v f="$lfirst" '$1 == p && $4 == "-" && $5 > f && $5 < f + 262144 {n++} END {exit n != 1}' \
    "$T/laggard.log" || fail "laggard: not asked for again from inside the range once: $(cat "$T/laggard.log")"
echo "cli_http_faults: laggard: the load took $took ms"
[ "$took" -lt 12000 ] || fail "laggard: the load took $took ms (the slow range alone: 16 s)"
[ "$(echo "$out" | num remote_restarts)" = 1 ] && [ "$(echo "$out" | num remote_retries)" = 0 ] ||
    fail "laggard: restart not counted: $(echo "$out" | grep -o '"remote_re[a-z]*":[0-9]*' | tr '\n' ' ')"
# Every range slow alike (200 KB/s each; 1.3 s for 256 KiB): none is a laggard against the others, none is restarted:
# as many data GETs as ranges, each at its own first byte.
start_proxy "$UP" alike --fault slow --rate 200000 --min-bytes 65536
out=$(timeout 60 "$SL" load "$PROXY/ck/" --tp 4 --checksums --json "${LAG[@]}" 2>"$T/err")
rc=$?
stop_proxy
[ $rc -eq 0 ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "alike: rc $rc: $(cat "$T/err")"
[ "$(echo "$out" | num remote_restarts)" = 0 ] || fail "alike: restarts counted: $(echo "$out" | grep -o '"remote_re[a-z]*":[0-9]*' | tr '\n' ' ')"
# (a file's last range, under 64 KiB, is not throttled)
awk '$5 != "-" && $5 > 8 {n++; if (($1 " " $5) in seen) dup = 1; seen[$1 " " $5] = 1; slow += $4 == "slow"}
     END {exit slow < 6 || dup}' "$T/alike.log" ||
    fail "alike: a range was asked for twice: $(cat "$T/alike.log")"
# a server that answers no data GET at all (not even a status line): SIGTERM stops a reshard within
# a second or two, by the signal, its files removed. Before, the engine's wait never looked at the
# stop, and the reshard went on for the timeout's tries (10 s x 6 here) before failing
start_proxy "$UP" hang --fault hang --stall 30
"$SL" reshard "$PROXY/ck/" "$T/rs_hang" --tp 2 "${KNOBS[@]}" >/dev/null 2>"$T/err" &
pid=$!
sleep 1
start=$(date +%s%N)
kill -TERM "$pid"
wait "$pid"
rc=$?
took=$((($(date +%s%N) - start) / 1000000))
stop_proxy
[ "$rc" -eq 143 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "reshard interrupted by SIGTERM" "$T/err" ||
    fail "hang, SIGTERM: exit $rc, stderr: $(cat "$T/err")"
[ "$took" -lt 3000 ] || fail "hang, SIGTERM: the reshard ended $took ms after the signal"
ls "$T/rs_hang" 2>/dev/null | grep -q safetensors && fail "hang, SIGTERM: files left: $(ls "$T/rs_hang")"
# an object replaced (rewritten in place, same size) after its header was read
cp -r "$W/ck" "$W/ckr"
start_proxy "$UP" replace --fault replace --after 5 --replace "$W/ckr/model-00003-of-00006.safetensors"
"${L[@]}" "$PROXY/ckr/" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "ckr/model-00003-of-00006.safetensors: object changed since its header was read" ||
    fail "replaced: $(cat "$T/err")"
stop_proxy
# a server that ignores If-Match: the response's ETag, then its size, give the change away
stop_servers
SERVERS=()
start_http "$W" --no-if-match
UP=$(port_of "$HTTP")
rm -rf "$W/ckr" && cp -r "$W/ck" "$W/ckr"
start_proxy "$UP" etag --fault replace --after 5 --replace "$W/ckr/model-00003-of-00006.safetensors"
"${L[@]}" "$PROXY/ckr/" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "ckr/model-00003-of-00006.safetensors: object changed since its header was read (ETag was \".*\", now \".*\"): not loaded" ||
    fail "replaced, no If-Match: $(cat "$T/err")"
stop_proxy
rm -rf "$W/ckr" && cp -r "$W/ck" "$W/ckr"
start_proxy "$UP" grown --fault replace --after 5 --replace-cmd "echo more >> '$W/ckr/model-00002-of-00006.safetensors'"
"${L[@]}" "$PROXY/ckr/" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "ckr/model-00002-of-00006.safetensors: object changed since its header was read (size was [0-9]* bytes, now [0-9]*)" ||
    fail "grown, no If-Match: $(cat "$T/err")"
stop_proxy
finish
