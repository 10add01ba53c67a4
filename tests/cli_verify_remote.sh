#!/usr/bin/env bash
# cli_verify_remote.sh - `load --verify` from HTTP and S3 (issue 17 item 4, "from local disk, the
# HF cache and S3"): the same SHA-256 check in the same pass over ranged GETs, against a local
# sha256sum manifest. A verified remote load equals the local one; a byte flipped in any object
# fails the load with one line naming its URL. The store's own SHA-256 (objects put with
# ChecksumAlgorithm SHA256, x-amz-checksum-sha256) verifies without a manifest, catches a byte
# flipped on the way (tests/fault_proxy.py --fault flip: the stored checksum is the original's) and
# a manifest that disagrees with it; a multipart upload's composite checksum is not taken for the
# file's. Loopback servers started and stopped here (tests/remote_lib.sh); skips without libcurl,
# libcrypto or moto (for the S3 half).
# Usage: cli_verify_remote.sh path/to/shardload
set -u
SL=${1:?usage: cli_verify_remote.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"

www_ckpt
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

# 3. the store's SHA-256 as the digest (x-amz-checksum-sha256 of a HEAD with checksum mode on)
S=(timeout 60 "$SL" load --s3-endpoint "$S3E" --tp 2)
export S3_SETUP_KEY=$KEY S3_SETUP_SECRET=$SECRET   # s3_setup.py signs from now on
s3 upload-sha256 models sha "$W/ck" || fail "upload with SHA-256"
out=$("${S[@]}" s3://models/sha/ --verify --checksums --json 2>"$T/err")
[ "$(echo "$out" | sums)" = "$ref" ] && [ "$(echo "$out" | nums verified_files)" = "$nfiles " ] ||
    fail "verify by the store's SHA-256: $(cat "$T/err") $out"
"${S[@]}" s3://models/ck/ --verify >/dev/null 2>"$T/err"   # put without SHA256 (boto3's CRC32)
one_line_error $? "$T/err" "s3://models/ck/model-00001-of-00006.safetensors: --verify knows no SHA-256" ||
    fail "no SHA-256 in the store: $(cat "$T/err")"
# one byte flipped between the store and the loader: the stored checksum is the original's
start_proxy "$(port_of "$S3E")" flip --fault flip --count 1 --after 2
timeout 60 "$SL" load s3://models/sha/ --s3-endpoint "$PROXY" --tp 2 --remote-range 64K --verify >/dev/null 2>"$T/err"
one_line_error $? "$T/err" \
    "s3://models/sha/model-0000[1-6]-of-00006.safetensors: SHA-256 .* differs from .* (the store's x-amz-checksum-sha256)" ||
    fail "flipped on the way: $(cat "$T/err")"
[ "$(grep -c ' flip ' "$T/flip.log")" = 1 ] || fail "the proxy flipped $(grep -c ' flip ' "$T/flip.log") bytes"
stop_proxy
# a manifest that disagrees with the store: refused before any data is read
awk 'NR == 1 { $0 = (substr($0, 1, 1) == "0" ? "1" : "0") substr($0, 2) } { print }' "$T/MANIFEST" >"$T/MANIFEST.bad"
first=$(head -1 "$T/MANIFEST" | awk '{print $2}')
"${S[@]}" s3://models/sha/ --manifest "$T/MANIFEST.bad" >/dev/null 2>"$T/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
    grep -q "s3://models/sha/$first: SHA-256 .* in the manifest, .* in the store (x-amz-checksum-sha256)" "$T/err" ||
    fail "manifest against the store: $(cat "$T/err")"
# a multipart upload's checksum is COMPOSITE (the hash of its parts' hashes): not the file's
tiny_config "$T/big.json" && sed -i 's/"vocab_size":1001/"vocab_size":12000/' "$T/big.json"
"$SL" synth --config "$T/big.json" "$W/big" >/dev/null || fail "synth big"
[ "$(stat -c %s "$W/big/model.safetensors")" -gt $((10 << 20)) ] || fail "big is not over 2 parts of 5 MiB"
s3 put-multipart models mp/model.safetensors "$W/big/model.safetensors" && s3 put models mp/config.json "$W/big/config.json" ||
    fail "multipart upload"
"${S[@]}" s3://models/mp/model.safetensors --verify >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/mp/model.safetensors: --verify knows no SHA-256" ||
    fail "multipart: $(cat "$T/err")"
(cd "$W/big" && sha256sum model.safetensors >"$T/MANIFEST.big")
"${S[@]}" s3://models/mp/model.safetensors --manifest "$T/MANIFEST.big" >/dev/null 2>"$T/err" ||
    fail "multipart with a manifest: $(cat "$T/err")"

finish
echo "cli_verify_remote: ok"
