#!/usr/bin/env bash
# cli_https.sh - checkpoints over https (issue 17 item 1): tests/http_range_server.py behind TLS on
# loopback, with a CA and a server certificate made here by the openssl CLI. With the CA given
# (--ca-bundle, or $CURL_CA_BUNDLE) a directory URL and a single .safetensors URL load equal to the
# local files; a certificate that is not trusted (the system's CAs, another CA) fails in one line
# naming the URL and curl's reason, after one handshake (a TLS verification failure is not
# retried); an unreadable CA file is refused before any request.
# Usage: cli_https.sh path/to/shardload
set -u
SL=${1:?usage: cli_https.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
unset CURL_CA_BUNDLE AWS_CA_BUNDLE SSL_CERT_FILE SSL_CERT_DIR

www_ckpt
"$SL" synth --config "$T/tiny.json" "$W/one" --seed 3 >/dev/null || { fail "synth one"; finish; }
make_certs "$T/pki"
start_https "$W" "$T/pki"
L=(timeout 60 "$SL" load --remote-retries 3 --remote-backoff-ms 50)

# 1. equal to the local load
ref=$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)
out=$("${L[@]}" "$HTTPS/ck/" --ca-bundle "$T/pki/ca.pem" --tp 2 --checksums --json 2>"$T/err")
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "https dir: $(cat "$T/err")"
echo "$out" | grep -q '"engine":"http"' || fail "https: engine is not http: $out"
[ "$(CURL_CA_BUNDLE="$T/pki/ca.pem" "${L[@]}" "$HTTPS/ck/" --tp 2 --remote-range 64K --remote-connections 4 \
    --checksums --json 2>"$T/err" | sums)" = "$ref" ] || fail "https, CURL_CA_BUNDLE, 64K ranges: $(cat "$T/err")"
ref1=$("$SL" load "$W/one" --tp 2 --checksums --json | sums)
[ "$("${L[@]}" "$HTTPS/one/model.safetensors" --ca-bundle "$T/pki/ca.pem" --tp 2 --checksums --json 2>"$T/err" |
    sums)" = "$ref1" ] || fail "https single file: $(cat "$T/err")"
grep -q '^failed' "$T/tls.log" && fail "a handshake failed with the CA given: $(grep '^failed' "$T/tls.log" | head -3)"

# 2. not trusted: one line naming the URL, one handshake (not retried)
url="$HTTPS/one/model.safetensors"
for ca in "" "$T/pki/other.pem"; do
    : >"$T/tls.log"
    "${L[@]}" "$url" ${ca:+--ca-bundle "$ca"} --tp 2 >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "$url: TLS certificate not trusted (SSL certificate problem: .*)" ||
        fail "untrusted (CA '${ca:-system}'): $(cat "$T/err")"
    n=$(wc -l <"$T/tls.log")
    [ "$n" -eq 1 ] || fail "untrusted (CA '${ca:-system}'): $n handshakes, want 1 (no retries): $(cat "$T/tls.log")"
done
# a CA file that cannot be read: refused before any request
: >"$T/tls.log"
"${L[@]}" "$HTTPS/ck/" --ca-bundle "$T/pki/missing.pem" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "CA bundle '$T/pki/missing.pem': cannot read it" || fail "missing CA file: $(cat "$T/err")"
[ ! -s "$T/tls.log" ] || fail "a request with an unreadable CA file"
finish
echo "cli_https: ok"
