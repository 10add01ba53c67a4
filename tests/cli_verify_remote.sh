#!/usr/bin/env bash
# cli_verify_remote.sh - `load --verify` from HTTP and S3 (issue 17 item 4, "from local disk, the
# HF cache and S3"): the same SHA-256 check in the same pass over ranged GETs, against a local
# sha256sum manifest. A verified remote load equals the local one; a byte flipped in any object
# fails the load with one line naming its URL. Loopback servers started and stopped here
# (tests/remote_lib.sh); skips without libcurl, libcrypto or moto (for the S3 half).
# Usage: cli_verify_remote.sh path/to/shardload
set -u
SL=${1:?usage: cli_verify_remote.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"

W="$T/www"
mkdir -p "$W"
tiny_config "$T/tiny.json"
"$SL" synth --config "$T/tiny.json" "$W/ck" --max-shard-size 600KB >/dev/null || { fail "synth"; finish; }
probe=$("$SL" load "$W/ck" --verify 2>&1)
if echo "$probe" | grep -q "has no SHA-256"; then echo "skip: built without libcrypto" >&2; exit 77; fi
(cd "$W/ck" && sha256sum -- *.safetensors >"$T/MANIFEST")
nfiles=$(ls "$W/ck"/*.safetensors | wc -l)
ref=$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)
# one bad copy per file: its last byte flipped
files=$(cd "$W/ck" && ls -- *.safetensors)
for f in $files; do
    cp -r "$W/ck" "$W/bad-$f"
    python3 -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-1] ^= 1; open(p, 'r+b').write(b)" \
        "$W/bad-$f/$f"
done

check() { # what URL-of-good URL-prefix-of-bad [load options...]
    local what=$1 good=$2 badp=$3
    shift 3
    out=$(timeout 60 "$SL" load "$good" "$@" --tp 2 --manifest "$T/MANIFEST" --checksums --json 2>"$T/err")
    [ "$(echo "$out" | sums)" = "$ref" ] || fail "$what: checksums differ: $(cat "$T/err")"
    [ "$(echo "$out" | nums verified_files)" = "$nfiles " ] || fail "$what: verified files: $out"
    for f in $files; do
        timeout 60 "$SL" load "$badp$f/" "$@" --tp 2 --manifest "$T/MANIFEST" >"$T/out" 2>"$T/err"
        one_line_error $? "$T/err" "$badp$f/$f: SHA-256 .* differs from .* (the manifest)" \
            || fail "$what, $f flipped: $(cat "$T/err")"
        timeout 60 "$SL" load "$badp$f/" "$@" --tp 2 >/dev/null 2>&1 || fail "$what, $f: fails unverified"
    done
}

# 1. HTTP
start_http "$W"
check http "$HTTP/ck/" "$HTTP/bad-"

# 2. S3 (moto), signed requests
start_moto
s3 user "$T/keys" && s3 upload models ck "$W/ck" || { fail "moto set-up"; finish; }
for f in $files; do s3 upload models "bad-$f" "$W/bad-$f" || fail "upload bad-$f"; done
read -r KEY SECRET <"$T/keys"
s3 auth 0 || { fail "moto auth"; finish; }
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_SHARED_CREDENTIALS_FILE="$T/none" \
    AWS_CONFIG_FILE="$T/none"
check s3 s3://models/ck/ s3://models/bad- --s3-endpoint "$S3E"

finish
echo "cli_verify_remote: ok"
