#!/usr/bin/env bash
# cli_http.sh - checkpoints over HTTP (issue 17 items 1, 2, 5): a loopback server with byte ranges,
# ETags and keep-alive (tests/http_range_server.py), started and stopped here. A directory URL with
# an index and a single .safetensors URL load equal to the same files loaded from disk, byte for
# byte, for several meshes, range sizes and connection counts, through the same bounded staging;
# each object byte is fetched once; a static-FP8 MoE checkpoint (expert input scales compared at
# plan time) loads equal to the local one, and unequal scales fail as locally; 403, 404, a refused
# connection, a missing index or config are one line naming the URL, never a password given in it.
# Usage: cli_http.sh path/to/shardload
set -u
SL=${1:?usage: cli_http.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"

www_ckpt
"$SL" synth --config "$T/tiny.json" "$W/one" --seed 9 >/dev/null || { fail "synth one"; finish; }
cp -r "$W/ck" "$W/denied"
cp -r "$W/ck" "$W/noconfig" && rm "$W/noconfig/config.json"
cp -r "$W/ck" "$W/badconfig" && sed -i 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 0/' "$W/badconfig/config.json"
cp -r "$W/ck" "$W/hole" && rm "$W/hole/model-00003-of-00006.safetensors"
mkdir "$W/noindex" && cp "$W/ck"/model-0000[1-6]-of-00006.safetensors "$W/ck/config.json" "$W/noindex/"
# shard names that are not URL-safe (the index accepts any bare file name): a space, '#', '?' and a
# '%' followed by hex digits, with a decoy 50A.safetensors for the last (what "50%41" decodes to)
cp -r "$W/ck" "$W/names"
python3 - "$W/names" <<'PY' || fail "names: shards not renamed"
import json, os, shutil, sys
d = sys.argv[1]
new = {"model-00001-of-00006.safetensors": "model 1.safetensors", "model-00002-of-00006.safetensors": "a#2.safetensors",
       "model-00003-of-00006.safetensors": "q?4.safetensors", "model-00004-of-00006.safetensors": "50%41.safetensors"}
ix = json.load(open(os.path.join(d, "model.safetensors.index.json")))
ix["weight_map"] = {k: new.get(v, v) for k, v in ix["weight_map"].items()}
json.dump(ix, open(os.path.join(d, "model.safetensors.index.json"), "w"))
for a, b in new.items():
    os.rename(os.path.join(d, a), os.path.join(d, b))
shutil.copy(os.path.join(d, "model-00005-of-00006.safetensors"), os.path.join(d, "50A.safetensors"))
PY
# static FP8 scales in several files (w1's and w3's input scales must be equal), and a copy where
# one expert's w3 input scale is twice its w1's
static_fp8_ckpt "$W/fp8" || fail "synth static fp8"
cp -r "$W/fp8" "$W/fp8bad"
BAD=model.layers.1.block_sparse_moe.experts.2
python3 - "$W/fp8bad" "$BAD.w3.input_scale" <<'PY' || fail "fp8bad: w3's input scale not rewritten"
import json, os, struct, sys
d, name = sys.argv[1:]
path = os.path.join(d, json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"][name])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    at = 8 + n + json.loads(f.read(n))[name]["data_offsets"][0]
    f.seek(at)
    v = struct.unpack("<f", f.read(4))[0]
    f.seek(at)
    f.write(struct.pack("<f", 2 * v))
PY
start_http "$W" --log "$T/http.log" --deny denied
L=(timeout 60 "$SL" load)

# 1. equal to the local load: meshes, ranges, connections
for mesh in "--tp 4" "--tp 2 --pp 2" "--tp 1 --dtype f32"; do
    refj=$("$SL" load "$W/ck" $mesh --io buffered --checksums --json)   # buffered: no O_DIRECT alignment bytes
    ref=$(echo "$refj" | sums)
    [ -n "$ref" ] || { fail "local $mesh"; continue; }
    for knobs in "" "--remote-range 64K --remote-connections 3" "--remote-range 4K --remote-connections 32 --staging 256K"; do
        : >"$T/http.log"
        out=$("${L[@]}" "$HTTP/ck/" $mesh $knobs --checksums --json 2>"$T/err")
        [ "$(echo "$out" | sums)" = "$ref" ] || fail "http $mesh $knobs: checksums differ: $(cat "$T/err")"
        echo "$out" | grep -q '"engine":"http"' || fail "http $mesh $knobs: engine is not http"
        # every data byte once: the ranges past the 8-byte length and the header (which start at
        # 0 and 8) add up to the bytes the local load reads
        read_b=$(echo "$out" | num bytes_read)
        served=$(awk '$2 == 206 && $4 != "-" && $4 > 8 {s += $3} END {print s + 0}' "$T/http.log")
        [ "$served" = "$read_b" ] && [ "$read_b" = "$(echo "$refj" | num bytes_read)" ] ||
            fail "http $mesh $knobs: data bytes served $served, read $read_b"
    done
done
# the same bounded staging: the peak stays within --staging
# the folder's index URL given for the folder (it said "no model.safetensors.index.json")
[ "$("${L[@]}" "$HTTP/ck/model.safetensors.index.json" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "the index URL for its folder: $(cat "$T/err")"
out=$("${L[@]}" "$HTTP/ck/" --tp 4 --remote-range 64K --staging 256K --json 2>"$T/err")
staging=$(echo "$out" | num staging_peak)
[ "${staging:-0}" -gt 0 ] && [ "$staging" -le $((256 << 10)) ] || fail "staging peak '$staging' over 256K"

# a range past any request (2^64 - 1): one GET per request, not a wrapped count of parts
[ "$("${L[@]}" "$HTTP/ck/" --tp 2 --remote-range 18446744073709551615 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "remote-range 2^64-1: $(cat "$T/err")"

# a single .safetensors URL, and a directory without an index is refused in one line
ref=$("$SL" load "$W/one/model.safetensors" --tp 2 --checksums --json | sums)
[ "$("${L[@]}" "$HTTP/one/model.safetensors" --tp 2 --checksums --json 2>"$T/err" | sums)" = "$ref" ] ||
    fail "single file URL: $(cat "$T/err")"
# the URL's path as given, "." and ".." segments included (the server resolves them, or not)
: >"$T/http.log"
[ "$("${L[@]}" "$HTTP/ck/./../one/model.safetensors" --tp 2 --checksums --json 2>"$T/err" | sums)" = "$ref" ] &&
    grep -q '^/ck/\./\.\./one/model\.safetensors ' "$T/http.log" || fail "dot segments: $(cat "$T/err") $(head -3 "$T/http.log")"
"${L[@]}" "$HTTP/noindex/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "noindex: no model.safetensors.index.json, and an HTTP directory cannot be listed" ||
    fail "no index: $(cat "$T/err")"

# those names are percent-encoded in the requests (they failed, or read 50A.safetensors), shown as
# the index writes them; the same through a query string below
ref=$("$SL" load "$W/names" --tp 2 --checksums --json | sums)
[ -n "$ref" ] && [ "$("${L[@]}" "$HTTP/names/" --tp 2 --checksums --json 2>"$T/err" | sums)" = "$ref" ] ||
    fail "names to encode: $(cat "$T/err")"
"$SL" inspect "$HTTP/names/" --json >"$T/out" 2>"$T/err" && grep -qF "\"$HTTP/names/q?4.safetensors\"" "$T/out" &&
    grep -qF "\"$HTTP/names/model 1.safetensors\"" "$T/out" || fail "names to encode, inspect: $(cat "$T/err")"

# inspect and plan take URLs
"$SL" inspect "$HTTP/ck/" >"$T/out" 2>"$T/err" && grep -q "$HTTP/ck/model-00001-of-00006.safetensors" "$T/out" ||
    fail "inspect: $(cat "$T/err")"
"$SL" plan "$HTTP/ck" --tp 4 >/dev/null 2>"$T/err" || fail "plan: $(cat "$T/err")"
# reshard from a URL writes the same files as from the folder, config.json included
"$SL" reshard "$W/ck" "$T/rs_local" --tp 2 >/dev/null 2>"$T/err" || fail "reshard local: $(cat "$T/err")"
"$SL" reshard "$HTTP/ck/" "$T/rs_http" --tp 2 --remote-range 64K >/dev/null 2>"$T/err" || fail "reshard http: $(cat "$T/err")"
for f in "$T"/rs_local/*; do
    cmp -s "$f" "$T/rs_http/$(basename "$f")" || fail "reshard http: $(basename "$f") differs"
done

# 2. a static-FP8 MoE checkpoint: the planner reads each expert's w1 and w3 input scales from the
# server (a few ranged GETs, at most one per file here: synth writes a file's F32 scalars
# together) and the load equals the local one; unequal scales fail as locally, naming both
# tensors (and the URL for the folder)
for mesh in "--tp 2" "--tp 4 --ep"; do
    ref=$("$SL" load "$W/fp8" $mesh --checksums --json | sums)
    [ -n "$ref" ] || { fail "static fp8 local $mesh"; continue; }
    [ "$("${L[@]}" "$HTTP/fp8/" $mesh --checksums --json 2>"$T/err" | sums)" = "$ref" ] ||
        fail "static fp8 over http $mesh: checksums differ: $(cat "$T/err")"
done
: >"$T/http.log"
"$SL" plan "$HTTP/fp8/" --tp 2 >/dev/null 2>"$T/err" || fail "static fp8 plan over http: $(cat "$T/err")"
files=$(ls "$W/fp8"/*.safetensors | wc -l)
gets=$(awk '$2 == 206 && $4 != "-" && $4 > 8' "$T/http.log" | wc -l)
[ "$gets" -ge 1 ] && [ "$gets" -le "$files" ] || fail "static fp8 plan: $gets scale GETs for $files files"
"$SL" load "$W/fp8bad" --tp 2 >/dev/null 2>"$T/lerr"
one_line_error $? "$T/lerr" "input_scales of w1 and w3 of a layer must be equal: checkpoint tensors '$BAD.w1.input_scale' (F32 0x[0-9a-f]*) and '$BAD.w3.input_scale' (F32 0x[0-9a-f]*) differ" ||
    fail "static fp8 unequal scales, local: $(cat "$T/lerr")"
"${L[@]}" "$HTTP/fp8bad/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$HTTP/fp8bad: input_scales of w1 and w3" &&
    [ "$(cat "$T/err")" = "$(sed "s|$W/fp8bad|$HTTP/fp8bad|" "$T/lerr")" ] ||
    fail "static fp8 unequal scales over http: '$(cat "$T/err")', locally '$(cat "$T/lerr")'"

# 3. one-line errors naming the URL
"${L[@]}" "$HTTP/hole/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$HTTP/hole/model-00003-of-00006.safetensors: not found (HTTP 404)" || fail "404: $(cat "$T/err")"
"${L[@]}" "$HTTP/denied/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "denied/model.safetensors.index.json: access denied (HTTP 403, AccessDenied)" ||
    fail "403: $(cat "$T/err")"
"${L[@]}" "$HTTP/noconfig/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "noconfig/config.json: not found (HTTP 404).*--config FILE" || fail "no config: $(cat "$T/err")"
# a remote config.json's messages name its URL, not where it was fetched to
"${L[@]}" "$HTTP/badconfig/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$HTTP/badconfig/config.json: config 'num_hidden_layers' is 0" ||
    fail "bad remote config: $(cat "$T/err")"
[ "$("${L[@]}" "$HTTP/noconfig/" --tp 2 --config "$W/ck/config.json" --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "--config with a URL: $(cat "$T/err")"
hostport=${HTTP#http://}
"${L[@]}" "http://user:s3cr3t@$hostport/hole/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "not found" && ! grep -q "s3cr3t" "$T/err" || fail "password in a message: $(cat "$T/err")"
# ETags longer than the loader keeps (300 characters): not kept, so not sent back cut in If-Match
# (a 412 for every GET); size and Last-Modified still identify the object
start_http "$W" --long-etag
[ "$("${L[@]}" "$HTTP/ck/" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "long ETags: $(cat "$T/err")"
# weak ETags: never sent in If-Match (compared strongly, they never match: a 412 for every GET),
# only compared with each response's
start_http "$W" --weak-etag
[ "$("${L[@]}" "$HTTP/ck/" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "weak ETags: $(cat "$T/err")"
# a server without ETag or Last-Modified: loaded, with one warning that a rewrite of the same size
# would go unnoticed (only the size identifies an object)
start_http "$W" --no-validators
[ "$("${L[@]}" "$HTTP/ck/" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "no validators: $(cat "$T/err")"
[ "$(wc -l <"$T/err")" = 1 ] && grep -q "^shardload: warning: $HTTP/ck/model-00001-of-00006.safetensors: the server sent no ETag or Last-Modified (6 of 6 files): a rewrite of the same size during the load would go unnoticed" "$T/err" ||
    fail "no validators: warning: $(cat "$T/err")"
# a server that gzips its ranges unasked (Content-Encoding: gzip): one line naming it, never the
# compressed bytes kept as the range's start (that load exited 0 with other weights)
start_http "$W" --content-encoding gzip
"${L[@]}" "$HTTP/ck/" --tp 2 --checksums --json >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$HTTP/ck/model-0000[0-9]-of-00006.safetensors: HTTP 206 with Content-Encoding 'gzip', which nothing asked for" ||
    fail "gzipped ranges: $(cat "$T/err")"
# ... but an encoding that names no compression (aws-chunked, which some S3-compatible stores keep
# from an upload and send beside the raw bytes) loads
start_http "$W" --content-encoding aws-chunked
[ "$("${L[@]}" "$HTTP/ck/" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "aws-chunked: $(cat "$T/err")"
# a redirect to a scheme curl may not follow is refused at once, not tried again (its code is also
# that of an "HTTP/0.9" reply, which is)
start_http "$W" --redirect "ftp://127.0.0.1:1/ck/model.safetensors.index.json"
"${L[@]}" "$HTTP/ck/" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "model.safetensors.index.json: Protocol \"ftp\" not supported" && ! grep -q "gave up after" "$T/err" ||
    fail "redirect to ftp: $(cat "$T/err")"
start_http "$W"
# libcurl's proxy variables apply, as for curl and the AWS CLI: through the proxy a host that
# cannot be reached directly (port 1) loads, its requests in the proxy's log; NO_PROXY bypasses it
start_proxy "$(port_of "$HTTP")" fwd --fault none
[ "$(http_proxy=$PROXY "${L[@]}" http://127.0.0.1:1/ck/ --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] && grep -q "^http://127.0.0.1:1/ck/model-00001" "$T/fwd.log" ||
    fail "http_proxy: $(cat "$T/err") $(head -2 "$T/fwd.log")"
http_proxy=$PROXY NO_PROXY=127.0.0.1 "${L[@]}" http://127.0.0.1:1/ck/ --tp 2 --remote-retries 0 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "http://127.0.0.1:1/ck/model.safetensors.index.json: GET: Failed to connect to 127.0.0.1 port 1 after [0-9]* ms: Couldn't connect to server" ||
    fail "NO_PROXY: $(cat "$T/err")"
stop_proxy
# a query string (an Azure SAS token) on a directory or a file URL: sent with every object's GET
# (the server refuses any other), never in a message or a file name
SAS="sv=2022-11-02&sr=c&sig=s3cr3tSig%2B%3D"
start_http "$W" --require-query "$SAS" --log "$T/sas.log"
[ "$("${L[@]}" "$HTTP/ck/?$SAS" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/ck" --tp 2 --checksums --json | sums)" ] || fail "SAS directory: $(cat "$T/err")"
[ "$("${L[@]}" "$HTTP/names/?$SAS" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/names" --tp 2 --checksums --json | sums)" ] || fail "SAS, names to encode: $(cat "$T/err")"
[ "$("${L[@]}" "$HTTP/one/model.safetensors?$SAS" --tp 2 --checksums --json 2>"$T/err" | sums)" = \
  "$("$SL" load "$W/one/model.safetensors" --tp 2 --checksums --json | sums)" ] || fail "SAS file: $(cat "$T/err")"
! grep -v " 206 \| 200 " "$T/sas.log" | grep -q . || fail "SAS: refused requests: $(grep -v ' 206 \| 200 ' "$T/sas.log")"
"$SL" inspect "$HTTP/ck?$SAS" --json >"$T/out" 2>"$T/err" && grep -q "\"$HTTP/ck/model-00001-of-00006.safetensors\"" "$T/out" &&
    ! grep -q "s3cr3t" "$T/out" || fail "SAS inspect: $(cat "$T/err") $(head -c 300 "$T/out")"
"${L[@]}" "$HTTP/hole/?$SAS" --tp 2 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$HTTP/hole/model-00003-of-00006.safetensors: not found (HTTP 404)" && ! grep -q "s3cr3t" "$T/err" ||
    fail "SAS 404: $(cat "$T/err")"
stop_servers
SERVERS=()
start=$(date +%s)
"${L[@]}" "$HTTP/ck/" --tp 2 --remote-retries 2 --remote-backoff-ms 10 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$HTTP/ck/model.safetensors.index.json: GET: Failed to connect to 127.0.0.1 port [0-9]* after [0-9]* ms: Couldn't connect to server (gave up after 3 tries)" ||
    fail "refused: $(cat "$T/err")"
[ $(($(date +%s) - start)) -lt 20 ] || fail "refused connection: retries not bounded"
finish
