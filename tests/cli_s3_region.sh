#!/usr/bin/env bash
# cli_s3_region.sh - a bucket in another region than the one shardload asks: S3 answers 301
# PermanentRedirect, or 400 AuthorizationHeaderMalformed, naming the bucket's region in the header
# x-amz-bucket-region or the body's <Region> (tests/http_range_server.py --bucket-region answers so
# to a request whose SigV4 scope names another region). The open is done once more in the region S3
# named, with a warning saying so, and loads the same bytes as the local folder; --s3-region with
# the right region asks once. A bucket that S3 places elsewhere again after the retry fails in one
# line naming that region and the options that set it: no third try; so is a HEAD's 301 (no body,
# the header only) after the open. An IllegalLocationConstraintException, which names none, is
# followed by one HeadBucket, whose x-amz-bucket-region is the region to open in once more.
# A 307 TemporaryRedirect (a new bucket on the global endpoint) is handled as a 301, as botocore
# does: the region from its header, never its Location.
# Usage: cli_s3_region.sh path/to/shardload
set -u
SL=${1:?usage: cli_s3_region.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
unset AWS_REGION AWS_DEFAULT_REGION AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN
export AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null
export AWS_ACCESS_KEY_ID=AKIDTEST AWS_SECRET_ACCESS_KEY=secrettest

www_ckpt
want=$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)
[ -n "$want" ] || fail "local load"

# ANSWER: the server's --region-answer; each server is started for its case and stopped after it
region_case() {
    local answer=$1
    rm -f "$T/log"
    start_http "$W" --bucket-region eu-west-1 --region-answer "$answer" --log "$T/log"
    local L=(timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 --checksums --json)
    got=$("${L[@]}" 2>"$T/err" | sums)
    [ "$got" = "$want" ] || fail "$answer: not the local bytes: $(cat "$T/err")"
    grep -q "^shardload: warning: s3://ck: the bucket is in region 'eu-west-1', not 'us-east-1': opened in 'eu-west-1'" \
        "$T/err" || fail "$answer: no warning of the retry: $(cat "$T/err")"
    [ "$(awk '$2 != 200 && $2 != 206 { print $2 }' "$T/log" | tr '\n' ' ')" = "${answer%-body} " ] ||
        fail "$answer: not one wrong-region answer: $(cat "$T/log")"
    ! grep -q "^/trap/" "$T/log" || fail "$answer: the Location was followed: $(cat "$T/log")"
    rm -f "$T/log"
    got=$("${L[@]}" --s3-region eu-west-1 2>"$T/err" | sums)
    [ "$got" = "$want" ] || fail "$answer --s3-region: $(cat "$T/err")"
    [ ! -s "$T/err" ] || fail "$answer --s3-region: stderr: $(cat "$T/err")"
    [ "$(awk '$2 != 200 && $2 != 206' "$T/log" | wc -l)" = 0 ] || fail "$answer --s3-region: $(cat "$T/log")"
    stop_servers
    SERVERS=()
}
region_case 301
region_case 307   # TemporaryRedirect: re-signed for the region named, its Location never followed
region_case 400
region_case 400-body

# a bucket S3 places elsewhere again: one retry, then the answer, one line naming the region
start_http "$W" --bucket-region eu-west-1,ap-south-1 --log "$T/log"
rm -f "$T/log"
timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 >/dev/null 2>"$T/err"
rc=$?
one_line_error $rc "$T/err" "s3://ck/model.safetensors.index.json: the bucket is in region 'ap-south-1', not 'eu-west-1' (HTTP 301, PermanentRedirect, x-amz-bucket-region): give its region (--s3-region ap-south-1, Python's s3_region='ap-south-1', \$AWS_REGION, sl_load_opts.s3_region) (opened again in region 'eu-west-1', which S3 named when asked in 'us-east-1')" ||
    fail "moved bucket: rc $rc: $(cat "$T/err")"
[ "$(wc -l <"$T/log" | tr -d ' ')" = 2 ] || fail "moved bucket: not two requests: $(cat "$T/log")"
stop_servers
SERVERS=()

# a wrong-region answer that names no region (400 IllegalLocationConstraintException): S3 is
# asked once with a HeadBucket (its x-amz-bucket-region, here on a 400 as for an opt-in region's
# bucket), and the open is done once more in the region it names, as botocore does
rm -f "$T/log"
start_http "$W" --bucket-region af-south-1 --region-answer 400-none --log "$T/log"
got=$(timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 --checksums --json 2>"$T/err" | sums)
[ "$got" = "$want" ] || fail "no region named, HeadBucket: not the local bytes: $(cat "$T/err")"
grep -q "^shardload: warning: s3://ck: the bucket is in region 'af-south-1', not 'us-east-1': opened in 'af-south-1', as S3 named it to a HeadBucket (--s3-region af-south-1 saves a round trip)$" \
    "$T/err" || fail "no region named, HeadBucket: no warning of the retry: $(cat "$T/err")"
[ "$(awk '$2 != 200 && $2 != 206 { print $1, $2 }' "$T/log" | tr '\n' ' ')" = \
    "/ck/model.safetensors.index.json 400 /ck/ 400 " ] ||
    fail "no region named, HeadBucket: not one answer and one HeadBucket: $(cat "$T/log")"
stop_servers
SERVERS=()

# ... and a HeadBucket that names none either: two requests, and the line says to give the region
rm -f "$T/log"
start_http "$W" --bucket-region af-south-1 --region-answer 400-none --no-head-bucket-region --log "$T/log"
timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 >/dev/null 2>"$T/err"
rc=$?
one_line_error $rc "$T/err" "s3://ck/model.safetensors.index.json: the bucket is not in region 'us-east-1' (HTTP 400, IllegalLocationConstraintException; S3 named no region): give its region (--s3-region REGION, Python's s3_region=, \$AWS_REGION, sl_load_opts.s3_region)$" ||
    fail "no region named: rc $rc: $(cat "$T/err")"
[ "$(cut -d' ' -f1,2 "$T/log" | tr '\n' ' ')" = "/ck/model.safetensors.index.json 400 /ck/ 400 " ] ||
    fail "no region named: not one request and one HeadBucket: $(cat "$T/log")"
stop_servers
SERVERS=()
# ... the HeadBucket is tried once: it only improves an error in hand (one the host leaves
# unanswered was asked again up to --remote-retries times, each waiting out the timeout: 6 x 30 s
# by default). The server logs each HeadBucket when it answers, 1.5 s late.
rm -f "$T/log"
start_http "$W" --bucket-region af-south-1 --region-answer 400-none --no-head-bucket-region --head-bucket-stall 1.5 --log "$T/log"
timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 --remote-timeout-ms 500 --remote-backoff-ms 10 >/dev/null 2>"$T/err"
rc=$?
one_line_error $rc "$T/err" "s3://ck/model.safetensors.index.json: the bucket is not in region 'us-east-1' (HTTP 400, IllegalLocationConstraintException; S3 named no region): give its region" ||
    fail "HeadBucket unanswered: rc $rc: $(cat "$T/err")"
sleep 2
[ "$(grep -c '^/ck/ ' "$T/log")" = 1 ] || fail "HeadBucket unanswered: not asked once: $(cat "$T/log")"
stop_servers
SERVERS=()

# an AuthorizationHeaderMalformed that names no region is a malformed header, not a wrong region
# (botocore redirects it neither): one request, no HeadBucket, S3's code, no region claimed
rm -f "$T/log"
start_http "$W" --bucket-region af-south-1 --region-answer 400-malformed --log "$T/log"
timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 >/dev/null 2>"$T/err"
rc=$?
one_line_error $rc "$T/err" "s3://ck/model.safetensors.index.json: HTTP 400, AuthorizationHeaderMalformed$" ||
    fail "malformed header: rc $rc: $(cat "$T/err")"
[ "$(wc -l <"$T/log" | tr -d ' ')" = 1 ] || fail "malformed header: not one request: $(cat "$T/log")"
stop_servers
SERVERS=()

# after the open nothing is asked again: --verify's HEAD (the store's SHA-256), answered 301 with
# the header and no body, as S3 answers a HEAD, is the one line naming the region from the header
start_http "$W" --bucket-region eu-west-1 --region-head-only --log "$T/log"
timeout 60 "$SL" load s3://ck/ --s3-endpoint "$HTTP" --tp 2 --verify >/dev/null 2>"$T/err"
rc=$?
one_line_error $rc "$T/err" "s3://ck/model-0000[1-6]-of-00006.safetensors: the bucket is in region 'eu-west-1', not 'us-east-1' (HTTP 301, x-amz-bucket-region): give its region (--s3-region eu-west-1, Python's s3_region='eu-west-1', \$AWS_REGION, sl_load_opts.s3_region)$" ||
    fail "HEAD: rc $rc: $(cat "$T/err")"
finish
