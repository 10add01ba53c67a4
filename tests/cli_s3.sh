#!/usr/bin/env bash
# cli_s3.sh - checkpoints in S3 (issue 17 items 1, 2, 5), from moto's S3 server on loopback (moto
# [server] in .venv, python/requirements-test.txt), started and stopped here, with its IAM checks
# on: every request must carry a SigV4 signature of an existing access key. s3://bucket/prefix/
# with an index, a prefix without one (ListObjectsV2), one object and a static-FP8 MoE checkpoint
# (expert input scales read at plan time) load equal to the local files, byte for byte, path-style
# and virtual-host; credentials from the environment, from a ~/.aws/credentials profile
# (AWS_PROFILE or --s3-profile), temporary ones with a session token;
# the endpoint from --s3-endpoint or AWS_ENDPOINT_URL; listed shards whose keys need XML and URL
# escapes (& space e-acute + % < CR); resets, 503s and truncated bodies through
# tests/fault_proxy.py are survived; a wrong secret, an unknown key, no key, a temporary key
# without its token, a missing prefix, bucket or object, an object replaced mid-load, and a
# listing that never ends, is truncated without a token or has a key that cannot be decoded fail
# in one line naming the s3:// URL, never a secret. --verify with a manifest passes the intact
# objects and catches a byte flipped in one (issue 17 item 4, "from S3").
# Usage: cli_s3.sh path/to/shardload
set -u
SL=${1:?usage: cli_s3.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
start_moto

tiny_config "$T/tiny.json"
"$SL" synth --config "$T/tiny.json" "$T/ck" --max-shard-size 600KB >/dev/null || { fail "synth"; finish; }
"$SL" synth --config "$T/tiny.json" "$T/one" --seed 5 >/dev/null || { fail "synth one"; finish; }
mkdir "$T/noindex" && cp "$T/ck"/model-0000[1-6]-of-00006.safetensors "$T/ck/config.json" "$T/noindex/"
# static FP8: the planner reads each expert's w1 and w3 input scales (signed ranged GETs)
static_fp8_ckpt "$T/fp8" || { fail "synth static fp8"; finish; }
# a copy with one byte flipped near the end of shard 2's data (for --verify)
cp -r "$T/ck" "$T/corrupt"
f2="$T/corrupt/model-00002-of-00006.safetensors"
sz=$(stat -c %s "$f2")
printf '\x5a' | dd of="$f2" bs=1 seek=$((sz - 3)) conv=notrunc status=none
(cd "$T/ck" && sha256sum ./*.safetensors | sed 's|  \./|  |') >"$T/manifest"
s3 user "$T/keys" && s3 upload models tinyllama "$T/ck" && s3 upload models flat "$T/noindex" &&
    s3 upload models single "$T/one" && s3 upload models "my dir" "$T/ck" && s3 upload models replaced "$T/ck" &&
    s3 upload models corrupt "$T/corrupt" && s3 upload models fp8static "$T/fp8" &&
    s3 upload models odd "$T/noindex" 'a&b c\u00e9+%<\r-' ||
    { fail "moto set-up"; finish; }
# a key with "." and ".." segments (S3 keys are names: dots/./b/../one is not dots/one, a decoy here)
for d in "dots/./b/.." dots; do s3 put models "$d/config.json" "$T/one/config.json" || fail "moto set-up, $d"; done
s3 put models "dots/./b/../one.safetensors" "$T/one/model.safetensors" &&
    s3 put models "dots/one.safetensors" "$T/ck/model-00001-of-00006.safetensors" || { fail "moto set-up, dots"; finish; }
s3 role "$T/rkeys" || { fail "moto role"; finish; }
s3 auth 0 || { fail "moto auth"; finish; }
read -r KEY SECRET <"$T/keys"
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_REGION AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_SHARED_CREDENTIALS_FILE="$T/none" \
    AWS_CONFIG_FILE="$T/none"
L=(timeout 60 "$SL" load --s3-endpoint "$S3E")
ref4=$("$SL" load "$T/ck" --tp 4 --checksums --json | sums)
ref2=$("$SL" load "$T/ck" --tp 2 --pp 2 --checksums --json | sums)

# 1. equal to the local load
[ "$("${L[@]}" s3://models/tinyllama/ --tp 4 --checksums --json 2>"$T/err" | sums)" = "$ref4" ] ||
    fail "s3 tp 4: $(cat "$T/err")"
[ "$("${L[@]}" s3://models/tinyllama --tp 2 --pp 2 --checksums --json --remote-range 64K --remote-connections 8 \
    2>"$T/err" | sums)" = "$ref2" ] || fail "s3 tp 2 pp 2, 64K ranges: $(cat "$T/err")"
[ "$("${L[@]}" s3://models/flat/ --tp 4 --checksums --json 2>"$T/err" | sums)" = "$ref4" ] ||
    fail "s3 listed (no index): $(cat "$T/err")"
[ "$("${L[@]}" "s3://models/my dir/" --tp 4 --checksums --json 2>"$T/err" | sums)" = "$ref4" ] ||
    fail "s3 key with a space: $(cat "$T/err")"
# listed shards whose keys hold '&', a space, an e-acute, '+', '%', '<' and a carriage return: the
# listing asks for encoding-type=url and decodes the keys exactly (before: S3 writes CR as &#13;,
# which the listing kept raw)
[ "$("${L[@]}" s3://models/odd/ --tp 4 --checksums --json 2>"$T/err" | sums)" = "$ref4" ] ||
    fail "s3 listed, keys with & space e-acute + % < CR: $(cat "$T/err")"
# the same listing as S3 writes it without encoding-type=url (or a server that ignores it): no
# <EncodingType>, the CR as &#13;, e-acute as &#233; (a proxy in front of moto rewrites the pages,
# as moto writes a CR raw; the other requests go through unchanged, signatures and all)
cat >"$T/s3_refs.py" <<'PY'
import html, http.client, http.server, re, socketserver, sys, urllib.parse
UP = int(sys.argv[1])
def as_s3(key):
    key = key.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "".join("&#%d;" % ord(c) if ord(c) < 0x20 or ord(c) > 0x7E else c for c in key)
def rewrite(body):
    s = body.decode()
    dec = urllib.parse.unquote_plus if "<EncodingType>url</EncodingType>" in s else html.unescape
    s = s.replace("<EncodingType>url</EncodingType>", "")
    return re.sub(r"<Key>(.*?)</Key>", lambda m: "<Key>%s</Key>" % as_s3(dec(m.group(1))), s, flags=re.S).encode()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_HEAD(self): self.fwd()
    def do_GET(self): self.fwd()
    def fwd(self):
        up = http.client.HTTPConnection("127.0.0.1", UP, timeout=60)
        up.request(self.command, self.path, headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
        r = up.getresponse()
        body = r.read()
        up.close()
        listing = self.command == "GET" and r.status == 200 and "list-type=2" in self.path
        body = rewrite(body) if listing else body
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "date", "server") and \
                    not (listing and k.lower() == "content-length"):
                self.send_header(k, v)
        if listing:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128
    def handle_error(self, *a): pass   # a client gone before the body
s = S(("127.0.0.1", 0), H)
open(sys.argv[2], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
"$VPY" "$T/s3_refs.py" "$(port_of "$S3E")" "$T/refs.port" & SERVERS+=($!)
wait_file "$T/refs.port" || fail "the rewriting proxy did not start"
[ "$(timeout 60 "$SL" load --s3-endpoint "http://127.0.0.1:$(cat "$T/refs.port")" s3://models/odd/ --tp 4 --checksums \
    --json 2>"$T/err" | sums)" = "$ref4" ] || fail "s3 listed, keys with &#13; and &#233;: $(cat "$T/err")"
[ "$("${L[@]}" s3://models/single/model.safetensors --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$T/one" --tp 2 --checksums --json | sums)" ] || fail "s3 single object: $(cat "$T/err")"
[ "$("${L[@]}" s3://models/fp8static/ --tp 4 --ep --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$T/fp8" --tp 4 --ep --checksums --json | sums)" ] || fail "s3 static fp8 MoE: $(cat "$T/err")"
# the key with dot segments as written (curl removed them and read dots/one.safetensors)
[ "$("${L[@]}" s3://models/dots/./b/../one.safetensors --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$T/one" --tp 2 --checksums --json | sums)" ] || fail "s3 key with . and .. segments: $(cat "$T/err")"
# virtual-host addressing (BUCKET.localhost: curl resolves *.localhost to the loopback itself)
VH=(timeout 60 "$SL" load --s3-endpoint "http://localhost:$(port_of "$S3E")" --s3-virtual-host --tp 4 --checksums --json)
[ "$("${VH[@]}" s3://models/tinyllama/ 2>"$T/err" | sums)" = "$ref4" ] || fail "virtual-host: $(cat "$T/err")"
[ "$("${VH[@]}" s3://models/flat/ 2>"$T/err" | sums)" = "$ref4" ] || fail "virtual-host, listed: $(cat "$T/err")"
[ "$(AWS_ENDPOINT_URL=$S3E timeout 60 "$SL" load s3://models/tinyllama/ --tp 4 --checksums --json 2>"$T/err" | sums)" = \
  "$ref4" ] || fail "AWS_ENDPOINT_URL: $(cat "$T/err")"
AWS_ENDPOINT_URL=$S3E "$SL" inspect s3://models/tinyllama/ >"$T/out" 2>"$T/err" &&
    grep -q "s3://models/tinyllama/model-00006-of-00006.safetensors" "$T/out" || fail "inspect: $(cat "$T/err")"
AWS_ENDPOINT_URL=$S3E "$SL" plan s3://models/flat/ --tp 4 >/dev/null 2>"$T/err" || fail "plan: $(cat "$T/err")"
# and the remote options, as load does (remote.md: plan and inspect take a URL)
"$SL" inspect s3://models/tinyllama/ --s3-endpoint "$S3E" --remote-range 64K >"$T/out" 2>"$T/err" &&
    grep -q "s3://models/tinyllama/model-00006-of-00006.safetensors" "$T/out" || fail "inspect --s3-endpoint: $(cat "$T/err")"
"$SL" plan s3://models/flat/ --tp 4 --s3-endpoint "$S3E" --s3-path-style --remote-retries 1 >/dev/null 2>"$T/err" ||
    fail "plan --s3-endpoint: $(cat "$T/err")"
"$SL" plan s3://models/flat/ --tp 4 --s3-endpoint "$S3E" --remote-connections 0 >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "remote-connections needs an integer" "$T/err" || fail "plan --remote-connections 0: $(cat "$T/err")"
# credentials from a profile of the shared credentials file
cat >"$T/credentials" <<CRED
[default]
aws_access_key_id = AKIANOTTHEONE0000000
aws_secret_access_key = nope
[loader]
aws_access_key_id = $KEY
aws_secret_access_key = $SECRET
CRED
P=(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE="$T/credentials")
[ "$("${P[@]}" AWS_PROFILE=loader "${L[@]}" s3://models/tinyllama/ --tp 4 --checksums --json 2>"$T/err" | sums)" = \
  "$ref4" ] || fail "AWS_PROFILE=loader: $(cat "$T/err")"
[ "$("${P[@]}" "${L[@]}" s3://models/tinyllama/ --tp 4 --s3-profile loader --checksums --json 2>"$T/err" | sums)" = \
  "$ref4" ] || fail "--s3-profile loader: $(cat "$T/err")"
"${P[@]}" "${L[@]}" s3://models/tinyllama/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/tinyllama/model.safetensors.index.json: access denied (HTTP 403, InvalidAccessKeyId)" ||
    fail "default profile's unknown key: $(cat "$T/err")"

# temporary credentials: the session token goes in x-amz-security-token, signed with the rest
read -r RKEY RSECRET RTOKEN <"$T/rkeys"
R=(env AWS_ACCESS_KEY_ID="$RKEY" AWS_SECRET_ACCESS_KEY="$RSECRET")
[ "$("${R[@]}" AWS_SESSION_TOKEN="$RTOKEN" "${L[@]}" s3://models/tinyllama/ --tp 4 --checksums --json 2>"$T/err" | sums)" = \
  "$ref4" ] || fail "session token: $(cat "$T/err")"
"${R[@]}" "${L[@]}" s3://models/tinyllama/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "access denied (HTTP 403" || fail "temporary key without its token: $(cat "$T/err")"
! grep -q "$RTOKEN" "$T/err" || fail "the token in a message"

# profiles read as botocore's RawConfigParser reads them: keys in any case and "key: value"; a
# line longer than any buffer (an STS token can be thousands of characters) read whole: a cut
# after 2047 characters made its tail a line of its own, here a wrong key; keys indented alike;
# a nested block's indented lines are not keys; the session token from the profile
long=$(printf '#%02046d' 0)
cat >"$T/credentials2" <<CRED
[caps]
AWS_ACCESS_KEY_ID: $KEY
Aws_Secret_Access_Key : $SECRET
[long]
${long}aws_access_key_id = AKIANOTTHEONE0000000
aws_access_key_id = $KEY
aws_secret_access_key = $SECRET
[indented]
  aws_access_key_id = $KEY
  aws_secret_access_key = $SECRET
[nested]
s3 =
    aws_access_key_id = AKIANOTTHEONE0000000
aws_access_key_id = $KEY
aws_secret_access_key = $SECRET
[temp]
aws_access_key_id = $RKEY
aws_secret_access_key = $RSECRET
aws_session_token = $RTOKEN
CRED
for prof in caps long indented nested temp; do
    [ "$(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE="$T/credentials2" \
        "${L[@]}" s3://models/tinyllama/ --tp 4 --s3-profile $prof --checksums --json 2>"$T/err" | sums)" = \
      "$ref4" ] || fail "profile $prof: $(cat "$T/err")"
done
# the config file's default profile as [default] or [profile default]: its endpoint_url is used
for hdr in "default" "profile default"; do
    printf '[%s]\nendpoint_url = %s\n' "$hdr" "$S3E" >"$T/config2"
    [ "$(AWS_CONFIG_FILE="$T/config2" timeout 60 "$SL" load s3://models/tinyllama/ --tp 4 --checksums --json \
        2>"$T/err" | sums)" = "$ref4" ] || fail "config [$hdr] endpoint_url: $(cat "$T/err")"
done

# 2. faults through the proxy (it forwards the signed requests unchanged)
for f in "reset --every 3" "503 --after 1 --count 4" "truncate --every 4"; do
    start_proxy "$(port_of "$S3E")" fault --fault $f
    out=$(timeout 60 "$SL" load s3://models/tinyllama/ --s3-endpoint "$PROXY" --tp 4 --checksums --json \
        --remote-range 64K --remote-backoff-ms 20 2>"$T/err")
    [ "$(echo "$out" | sums)" = "$ref4" ] || fail "s3 through '$f': $(cat "$T/err")"
    stop_proxy
done
# an object replaced (same size, other bytes: another ETag) after its header was read
"$VPY" -c "import sys; d = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(bytes(b ^ 0xFF for b in d))" \
    "$T/ck/model-00004-of-00006.safetensors" "$T/flipped"
start_proxy "$(port_of "$S3E")" replace --fault replace --after 4 \
    --replace-cmd "S3_SETUP_KEY=$KEY S3_SETUP_SECRET=$SECRET '$VPY' '$TESTS_DIR/s3_setup.py' '$S3E' put models replaced/model-00004-of-00006.safetensors '$T/flipped'"
timeout 60 "$SL" load s3://models/replaced/ --s3-endpoint "$PROXY" --tp 4 --remote-range 64K >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/replaced/model-00004-of-00006.safetensors: object changed since its header was read" ||
    fail "replaced mid-load: $(cat "$T/err")"
stop_proxy

# --verify (issue 17 item 4) from S3: the manifest's SHA-256 of every file, checked as it streams
out=$("${L[@]}" s3://models/tinyllama/ --tp 4 --checksums --json --verify --manifest "$T/manifest" 2>"$T/err")
[ "$(echo "$out" | sums)" = "$ref4" ] && echo "$out" | grep -q '"verified_files":6' || fail "verify from s3: $(cat "$T/err")"
"${L[@]}" s3://models/corrupt/ --tp 4 --verify --manifest "$T/manifest" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/corrupt/model-00002-of-00006.safetensors: SHA-256 .* differs" ||
    fail "flipped byte from s3: $(cat "$T/err")"
[ "$("${L[@]}" s3://models/corrupt/ --tp 4 --checksums --json 2>"$T/err" | sums)" != "$ref4" ] ||
    fail "the flipped byte should change the checksums without --verify"

# 3. one-line failures naming the object, never the secret
AWS_SECRET_ACCESS_KEY=wrong-secret-x "${L[@]}" s3://models/tinyllama/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/tinyllama/model.safetensors.index.json: access denied (HTTP 403, SignatureDoesNotMatch)" ||
    fail "wrong secret: $(cat "$T/err")"
! grep -q "wrong-secret-x\|$KEY" "$T/err" || fail "a credential in the message: $(cat "$T/err")"
AWS_ACCESS_KEY_ID=AKIAUNKNOWNUNKNOWN00 "${L[@]}" s3://models/tinyllama/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "(HTTP 403, InvalidAccessKeyId)" || fail "unknown key: $(cat "$T/err")"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "${L[@]}" s3://models/tinyllama/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "tinyllama/model.safetensors.index.json: access denied (HTTP 403" || fail "no key: $(cat "$T/err")"
"${L[@]}" s3://models/nothing/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/nothing: no \*.safetensors objects and no model.safetensors.index.json" ||
    fail "empty prefix: $(cat "$T/err")"
"${L[@]}" s3://nobucket/x/ --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://nobucket/: not found (HTTP 404, NoSuchBucket)" ||
    fail "no bucket: $(cat "$T/err")"
"${L[@]}" s3://models/single/missing.safetensors --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/single/missing.safetensors: not found (HTTP 404, NoSuchKey)" ||
    fail "no object: $(cat "$T/err")"
# a store whose listing never ends (it hands back the token it was given): refused, not looped
# over nor taken as a partial list
cat >"$T/loop_s3.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        page = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>models</Name>'
                b'<KeyCount>1</KeyCount><IsTruncated>%s</IsTruncated>%s</ListBucketResult>')
        if "list-type=2" in self.path and "prefix=loop" in self.path:
            code, body = 200, page % (b"true", b"<NextContinuationToken>same-token</NextContinuationToken>")
        elif "list-type=2" in self.path and "prefix=cut" in self.path:
            code, body = 200, page % (b"true", b"<Contents><Key>cut/a.safetensors</Key></Contents>")
        elif "list-type=2" in self.path and "prefix=nul" in self.path:
            code, body = 200, page % (b"false", b"<Contents><Key>nul/a&#0;.safetensors</Key></Contents>")
        else:
            code, body = 404, b'<?xml version="1.0"?><Error><Code>NoSuchKey</Code></Error>'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
python3 "$T/loop_s3.py" "$T/loop.port" & SERVERS+=($!)
wait_file "$T/loop.port" || fail "the looping listing server did not start"
timeout 60 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/loop.port")" \
    "$SL" inspect s3://models/loop/ >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "listing 'loop/': the server sent back the continuation token it was given (page 2)" ||
    fail "a listing that does not end: $(cat "$T/err")"
# a truncated page without a token to go on with, and a key that cannot be decoded: refused, not
# taken as the whole listing nor kept raw
NA=(timeout 60 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$T/loop.port")")
"${NA[@]}" "$SL" inspect s3://models/cut/ >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/: listing 'cut/', page 1: <IsTruncated> is true but the page has no <NextContinuationToken>" ||
    fail "a truncated page without a token: $(cat "$T/err")"
"${NA[@]}" "$SL" inspect s3://models/nul/ >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "s3://models/: listing 'nul/', page 1: <Contents> 1: <Key>: '&#0;' is not a reference to a character" ||
    fail "a key with &#0;: $(cat "$T/err")"
"$SL" load s3://models/tinyllama/ --s3-endpoint ftp://127.0.0.1 --tp 4 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "S3 endpoint 'ftp://127.0.0.1': expected http://HOST" || fail "bad endpoint: $(cat "$T/err")"
finish
