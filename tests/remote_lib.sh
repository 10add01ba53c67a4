# remote_lib.sh - loopback servers for the remote-source tests (tests/cli_http*.sh, cli_s3*.sh,
# cli_verify_remote.sh), sourced after lib.sh with SL set. A build without libcurl skips them here
# (exit 77). Each server is started by the test, on a free port of 127.0.0.1, and stopped at exit
# (with lib.sh's $T).
#   start_http ROOT [ARGS]        tests/http_range_server.py: sets HTTP (http://127.0.0.1:PORT)
#   make_certs DIR                DIR/ca.pem (a CA made now, with openssl), DIR/srv.pem and
#                                 DIR/srv.key (a certificate it signed for 127.0.0.1 and
#                                 localhost), DIR/other.pem (another CA); exit 77 without openssl
#   start_https ROOT DIR [ARGS]   start_http over TLS with DIR's certificate: sets HTTPS
#                                 (https://127.0.0.1:PORT); each handshake in $T/tls.log
#   start_proxy PORT NAME ARGS    tests/fault_proxy.py in front of PORT: sets PROXY (its URL);
#                                 its log is $T/NAME.log; stop_proxy stops it
#   start_moto                    moto_server from .venv: sets S3E (its URL); exit 77 without moto
#   port_of URL                   the port of a loopback URL
#   wait_file FILE                until FILE exists (10 s at most)
#   www_ckpt                      W=$T/www holding W/ck: lib.sh's tiny config ($T/tiny.json) in
#                                 600 KB shards, the checkpoint the servers serve
#   static_fp8_ckpt DIR           a Mixtral with AutoFP8 static activation scales (per-expert input
#                                 scales, which the planner reads) in 64 KB shards, into DIR
# libcurl honours the proxy variables (docs/remote.md): the loopback servers are reached directly
unset http_proxy https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
SRC_DIR=$(cd "$TESTS_DIR/.." && pwd)
SERVERS=()
stop_servers() {
    for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${SERVERS[@]}"; do wait "$p" 2>/dev/null; done
}
trap 'stop_servers; rm -rf "$T"' EXIT
wait_file() {
    for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.05; done
    return 1
}
port_of() { echo "${1##*:}"; }
www_ckpt() {
    W="$T/www"
    mkdir -p "$W"
    tiny_config "$T/tiny.json"
    "$SL" synth --config "$T/tiny.json" "$W/ck" --max-shard-size 600KB >/dev/null || { fail "synth"; finish; }
}
static_fp8_ckpt() {
    cat >"$T/mxs.json" <<'JSON'
{"architectures":["MixtralForCausalLM"],"hidden_size":64,"intermediate_size":128,
 "num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":2,"vocab_size":130,
 "num_local_experts":6,"torch_dtype":"bfloat16",
 "quantization_config":{"quant_method":"fp8","activation_scheme":"static"}}
JSON
    "$SL" synth --config "$T/mxs.json" "$1" --max-shard-size 64KB >/dev/null
}
command -v python3 >/dev/null 2>&1 || { echo "skip: no python3 for the loopback servers" >&2; exit 77; }
start_http() {
    local root=$1; shift
    rm -f "$T/http.port"
    python3 "$TESTS_DIR/http_range_server.py" "$root" "$T/http.port" "$@" & SERVERS+=($!)
    wait_file "$T/http.port" || { echo "FAIL: http_range_server.py did not start" >&2; exit 1; }
    HTTP="http://127.0.0.1:$(cat "$T/http.port")"
}
start_proxy() {
    local up=$1 name=$2; shift 2
    rm -f "$T/$name.port" "$T/$name.log"
    python3 "$TESTS_DIR/fault_proxy.py" "$up" "$T/$name.port" --log "$T/$name.log" "$@" & PROXY_PID=$!
    SERVERS+=($PROXY_PID)
    wait_file "$T/$name.port" || { echo "FAIL: fault_proxy.py did not start" >&2; exit 1; }
    PROXY="http://127.0.0.1:$(cat "$T/$name.port")"
}
stop_proxy() { kill "$PROXY_PID" 2>/dev/null; wait "$PROXY_PID" 2>/dev/null; }
make_certs() {
    local d=$1 ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    command -v openssl >/dev/null 2>&1 || { echo "skip: no openssl to make a test certificate" >&2; exit 77; }
    mkdir -p "$d"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
        >"$d/srv.ext"
    { openssl req -x509 "${ec[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 -subj "/CN=shardload test CA" &&
        openssl req -x509 "${ec[@]}" -keyout "$d/other.key" -out "$d/other.pem" -days 2 -subj "/CN=another CA" &&
        openssl req "${ec[@]}" -keyout "$d/srv.key" -out "$d/srv.csr" -subj "/CN=127.0.0.1" &&
        openssl x509 -req -in "$d/srv.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
            -extfile "$d/srv.ext" -out "$d/srv.pem"; } >"$T/openssl.log" 2>&1 ||
        { echo "FAIL: openssl could not make the certificates: $(tail -2 "$T/openssl.log")" >&2; exit 1; }
}
start_https() {
    local root=$1 d=$2; shift 2
    rm -f "$T/https.port" "$T/tls.log"
    python3 "$TESTS_DIR/http_range_server.py" "$root" "$T/https.port" --tls "$d/srv.pem" "$d/srv.key" \
        --tls-log "$T/tls.log" "$@" & SERVERS+=($!)
    wait_file "$T/https.port" || { echo "FAIL: http_range_server.py --tls did not start" >&2; exit 1; }
    HTTPS="https://127.0.0.1:$(cat "$T/https.port")"
}
VPY="$SRC_DIR/.venv/bin/python"
start_moto() {
    if ! [ -x "$SRC_DIR/.venv/bin/moto_server" ] || ! "$VPY" -c 'import moto, boto3' 2>/dev/null; then
        echo "skip: no moto[server] in $SRC_DIR/.venv (pip install -r python/requirements-test.txt)" >&2
        exit 77
    fi
    local port
    port=$("$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    INITIAL_NO_AUTH_ACTION_COUNT=1000000000 "$SRC_DIR/.venv/bin/moto_server" -H 127.0.0.1 -p "$port" \
        >"$T/moto.log" 2>&1 & SERVERS+=($!)
    S3E="http://127.0.0.1:$port"
    for _ in $(seq 300); do
        curl -s -o /dev/null "$S3E/moto-api/" 2>/dev/null && return 0
        "$VPY" -c "import urllib.request; urllib.request.urlopen('$S3E/moto-api/')" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "FAIL: moto_server did not start: $(tail -3 "$T/moto.log")" >&2
    exit 1
}
s3() { "$VPY" "$TESTS_DIR/s3_setup.py" "$S3E" "$@"; }

probe=$("$SL" load http://127.0.0.1:1/x/ --remote-retries 0 2>&1)
if echo "$probe" | grep -q "built without it"; then echo "skip: built without libcurl" >&2; exit 77; fi
