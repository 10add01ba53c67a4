#!/usr/bin/env bash
# cli_pjrt.sh - `load --device pjrt --pjrt-plugin PATH` end to end on the stand-in plugin
# tests/fake_pjrt*.c, whose copies read host memory late (so reusing a staging slot before its
# event gives wrong bytes and a counted violation): (1) checksums, read back through
# PJRT_Buffer_ToHostBuffer, equal the cpu backend's for tp, pp, spmd, f32 targets, small staging
# (parameters assembled and streamed) and dummy weights, allocations equal the plan's, and nothing
# is left in the plugin; (2) memory statistics where the plugin has them; (2b) the staging block
# DMA-mapped where the plugin can, plain where it cannot or the map fails; (3) a missing plugin, a
# library that is not one, a 0.56 or too old table, and no --pjrt-plugin are exit 1 with one line
# saying which; (4) a failing call (FAKE_PJRT_FAIL=NAME:N) is exit 1 with one line naming the
# device, the parameter and the call, and leaves nothing allocated.
# Usage: cli_pjrt.sh path/to/shardload   (FAKE_PJRT overrides the stand-in's path)
set -u
SL=${1:?usage: cli_pjrt.sh SHARDLOAD}
FAKE=${FAKE_PJRT:-$(dirname "$SL")/tests/libfake_pjrt.so}
. "$(dirname "$0")/lib.sh"
[ -f "$FAKE" ] || { echo "FAIL: stand-in PJRT plugin not found at $FAKE (set FAKE_PJRT)" >&2; exit 1; }

tiny_ckpt
# Runs shardload on the stand-in; the stand-in appends its counters to $T/log at exit.
fake() { rm -f "$T/log"; FAKE_PJRT_LOG="$T/log" "$SL" "$@"; }
counter() { tr ' ' '\n' <"$T/log" | sed -n "s/^$1=\(.*\)/\1/p"; }
check_clean() {
    [ -s "$T/log" ] || { fail "$1: no stand-in log"; return; }
    for k in violations live_error live_event live_client live_buffer live_tm live_dma queued; do
        [ "$(counter $k)" = 0 ] || fail "$1: $k=$(counter $k) ($(cat "$T/log"))"
    done
}
plan_bytes() { "$SL" plan "$CK" $(echo "$@" | sed 's/--staging [^ ]*//') --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' '; }

# 1. same bytes as cpu
for args in "--tp 4" "--tp 2 --pp 2" "--layout spmd --tp 8" "--tp 2 --dtype f32" \
            "--tp 1 --staging 64K" "--tp 2 --staging 16K --dtype f32" "--tp 4 --staging 256K"; do
    ref=$("$SL" load "$CK" $args --checksums --json | sums)
    out=$(fake load "$CK" $args --device pjrt --pjrt-plugin "$FAKE" --checksums --json 2>"$T/err") \
        || { fail "$args: $(cat "$T/err")"; continue; }
    [ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "$args: checksums differ from cpu"
    [ "$(echo "$out" | nums allocated_bytes)" = "$(plan_bytes $args)" ] || fail "$args: allocated != plan"
    [ "$(counter bfhb)" -gt 0 ] || fail "$args: no BufferFromHostBuffer"
    check_clean "$args"
done
# the ways in: whole parameters from rows with a pitch; streamed chunks when the bound is small
fake load "$CK" --tp 2 --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err" || fail "tp2: $(cat "$T/err")"
[ "$(counter bfhb_strided)" -gt 0 ] && [ "$(counter transfers)" = 0 ] || fail "tp2: $(cat "$T/log")"
fake load "$CK" --tp 1 --staging 64K --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err" \
    || fail "tp1 64K: $(cat "$T/err")"
[ "$(counter transfers)" -gt 0 ] || fail "tp1 64K: nothing streamed: $(cat "$T/log")"
# narrow rows of a streamed parameter come gathered into ring pieces, also when the parameter is
# several ops (a Mixtral's stacked experts, one op each, 512-byte rows): 785 transfers with a
# TransferData per row of the experts, 42 gathered (a staging whose chunks hold whole experts)
cat >"$T/mx.json" <<JSON
{"architectures":["MixtralForCausalLM"],"hidden_size":256,"intermediate_size":512,
 "num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":1,"vocab_size":130,
 "num_local_experts":4,"torch_dtype":"bfloat16"}
JSON
"$SL" synth --config "$T/mx.json" "$T/mx" >/dev/null 2>"$T/err" || fail "synth mixtral: $(cat "$T/err")"
ref=$("$SL" load "$T/mx" --tp 2 --checksums --json | sums)
out=$(fake load "$T/mx" --tp 2 --staging 2M --device pjrt --pjrt-plugin "$FAKE" --checksums --json \
      2>"$T/err") || fail "mixtral: $(cat "$T/err")"
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "mixtral: checksums differ from cpu"
[ "$(counter transfers)" -gt 0 ] && [ "$(counter transfers)" -lt 300 ] \
    || fail "mixtral: narrow expert rows not gathered: $(cat "$T/log")"
check_clean "mixtral"
# a TPU-like tiled layout: no raw chunks, the same bytes
ref=$("$SL" load "$CK" --tp 1 --staging 64K --checksums --json | sums)
out=$(FAKE_PJRT_TILED=1 fake load "$CK" --tp 1 --staging 64K --device pjrt --pjrt-plugin "$FAKE" \
      --checksums --json 2>"$T/err") || fail "tiled: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] && [ "$(counter transfers)" = 0 ] || fail "tiled: $(cat "$T/log")"
check_clean "tiled"
# dummy weights (worker threads write; the padding is zeroed over the values afterwards)
ref=$("$SL" load --format dummy --config "$T/tiny.json" --tp 2 --pp 2 --checksums --json | sums)
out=$(fake load --format dummy --config "$T/tiny.json" --tp 2 --pp 2 --device pjrt \
      --pjrt-plugin "$FAKE" --checksums --json 2>"$T/err") || fail "dummy: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] || fail "dummy: checksums differ from cpu"
check_clean "dummy"

# 2. memory statistics: free memory before and after each device's buffers, where the plugin
# reports them (FAKE_PJRT_STATS=1); none otherwise (XLA's CPU plugin: UNIMPLEMENTED)
out=$(FAKE_PJRT_STATS=1 fake load "$CK" --tp 2 --device pjrt --pjrt-plugin "$FAKE" --json 2>"$T/err") \
    || fail "stats: $(cat "$T/err")"
before=($(echo "$out" | nums mem_free_before)) after=($(echo "$out" | nums mem_free_after))
delta="$((before[0] - after[0])) $((before[1] - after[1])) "
[ "$delta" = "$(plan_bytes --tp 2)" ] || fail "stats: deltas '$delta' != plan '$(plan_bytes --tp 2)'"
echo "$out" | grep -q '"gpu":' && fail "stats: a pjrt device reported as a CUDA GPU: $out"
out=$(FAKE_PJRT_STATS=1 fake load "$CK" --tp 2 --device pjrt --pjrt-plugin "$FAKE" 2>"$T/err") \
    || fail "stats text: $(cat "$T/err")"
echo "$out" | grep -q "^device 1: free memory .* bytes (.* used)" || fail "stats text: $out"
echo "$out" | grep -q "GPU -1" && fail "stats text names GPU -1: $out"
fake load "$CK" --tp 2 --device pjrt --pjrt-plugin "$FAKE" --json | grep -q mem_free_before \
    && fail "no stats: memory figures reported"

# 2b. the staging block: DMA-mapped once per client where the plugin's DmaMap works (every mapped
# range unmapped at the end), plain where it is missing (FAKE_PJRT_DMA=0), UNIMPLEMENTED (3, as on
# XLA's CPU plugins) or fails (2: a clean fallback, with the reason); the same bytes each way
ref=$("$SL" load "$CK" --tp 4 --checksums --json | sums)
for m in "1:dma-mapped" "0:plain (the plugin has no PJRT_Client_DmaMap)" \
         "3:plain (PJRT_Client_DmaMap is UNIMPLEMENTED" "2:plain: PJRT_Client_DmaMap failed: fake_pjrt: "; do
    out=$(FAKE_PJRT_DMA=${m%%:*} fake load "$CK" --tp 4 --device pjrt --pjrt-plugin "$FAKE" --checksums \
          --json 2>"$T/err") || { fail "dma ${m%%:*}: $(cat "$T/err")"; continue; }
    [ "$(echo "$out" | sums)" = "$ref" ] || fail "dma ${m%%:*}: checksums differ from cpu"
    n=$(echo "$out" | grep -oF "\"staging_memory\":\"${m#*:}" | wc -l)
    [ "$n" = 4 ] || fail "dma ${m%%:*}: $n of 4 devices say '${m#*:}': $out"
    want=$([ "${m%%:*}" = 1 ] && echo 1 || echo 0)
    [ "$(counter dma_maps)" = "$want" ] && [ "$(counter dma_unmaps)" = "$want" ] \
        || fail "dma ${m%%:*}: $(cat "$T/log")"
    check_clean "dma ${m%%:*}"
done
# SL_PJRT_DMA_MAP=0 (a benchmark knob): never mapped, though the plugin could; a bad value is a usage error
out=$(SL_PJRT_DMA_MAP=0 fake load "$CK" --tp 4 --device pjrt --pjrt-plugin "$FAKE" --checksums --json 2>"$T/err") ||
    fail "SL_PJRT_DMA_MAP=0: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] || fail "SL_PJRT_DMA_MAP=0: checksums differ from cpu"
[ "$(echo "$out" | grep -oF '"staging_memory":"plain (not mapped: opts.pjrt_dma_map)"' | wc -l)" = 4 ] &&
    [ "$(counter dma_maps)" = 0 ] || fail "SL_PJRT_DMA_MAP=0: mapped anyway: $out $(cat "$T/log")"
check_clean "SL_PJRT_DMA_MAP=0"
SL_PJRT_DMA_MAP=yes "$SL" load "$CK" --tp 2 >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "SL_PJRT_DMA_MAP 'yes': give 0" "$T/err" || fail "SL_PJRT_DMA_MAP=yes: $(cat "$T/err")"
fake load "$CK" --tp 2 --device pjrt --pjrt-plugin "$FAKE" | grep -q "^device 1: staging dma-mapped$" \
    || fail "text output lacks the staging line"
"$SL" load "$CK" --tp 2 --json | grep -q staging_memory && fail "cpu reports a staging_memory"

# 3. plugins that cannot be used
"$SL" load "$CK" --device pjrt >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "device 'pjrt' needs a PJRT plugin (--pjrt-plugin PATH" || fail "no plugin: $(cat "$T/err")"
"$SL" load "$CK" --device pjrt --pjrt-plugin "$T/nonexistent.so" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "cannot load plugin $T/nonexistent.so" || fail "missing: $(cat "$T/err")"
NOT=$(dirname "$SL")/tests/libfake_cudart.so
if [ -f "$NOT" ]; then
    "$SL" load "$CK" --device pjrt --pjrt-plugin "$NOT" >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "is not a PJRT plugin (it exports no GetPjrtApi)" || fail "not a plugin: $(cat "$T/err")"
fi
for v in "56:whose table has slot 69 moved" "40:PJRT API 0.40; shardload needs 0.57 or later"; do
    FAKE_PJRT_MINOR=${v%%:*} fake load "$CK" --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "${v#*:}" || fail "minor ${v%%:*}: $(cat "$T/err")"
done
FAKE_PJRT_STRUCT_SIZE=600 fake load "$CK" --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "PJRT_Api is 600 bytes" || fail "short table: $(cat "$T/err")"
# a CPU plugin that refuses the mesh's device count but makes clients of its default 4: the mesh's
# devices go 4 to a client (each on device d % 4 of it), 2 clients for 8, the cpu backend's bytes
ref=$("$SL" load "$CK" --layout spmd --tp 8 --checksums --json | sums)
out=$(FAKE_PJRT_CPU_MAX=4 fake load "$CK" --layout spmd --tp 8 --device pjrt --pjrt-plugin "$FAKE" \
      --checksums --json 2>"$T/err") || fail "count refused, tp 8: $(cat "$T/err")"
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "count refused, tp 8: checksums differ from cpu"
[ "$(counter clients_made)" = 2 ] || fail "count refused, tp 8: $(counter clients_made) clients made, want 2"
check_clean "count refused, tp 8"
# a CPU plugin that refuses the mesh's device count (the stand-in takes 64 at most): said at the
# first client, with the plugin's message (the backend made a client per mesh device until the
# 17th failed: "more than 16 PJRT clients in use"; now 16 clients of 4 serve up to 64)
fake load "$CK" --layout spmd --tp 65 --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "device 'pjrt': a mesh of 65 devices on the CPU plugin, which makes 4; asked for them: PJRT_Client_Create failed: fake_pjrt: bad device count" ||
    fail "device count refused: $(cat "$T/err")"

# 4. a failing call: one line naming the device, the call (and the parameter), nothing left
for c in "Client_Create:1" "Client_AddressableDevices:1" "Client_BufferFromHostBuffer:7" \
         "Event_Await:9" "Buffer_ToHostBuffer:3" "Client_CreateBuffersForAsyncHostToDevice:2" \
         "AsyncHostToDeviceTransferManager_TransferData:5" "Event_Await:40"; do
    FAKE_PJRT_FAIL=$c fake load "$CK" --device pjrt --pjrt-plugin "$FAKE" --tp 2 --staging 64K \
        --checksums >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "\(pjrt device [0-9]\|device 'pjrt'\): .*PJRT_.* failed: fake_pjrt: injected failure of PJRT_${c%%:*} .*(INTERNAL)" \
        || fail "fault $c: $(cat "$T/err")"
    [ "$(counter injected)" = 1 ] || fail "fault $c: the stand-in injected $(counter injected) failures"
    check_clean "fault $c"
done
FAKE_PJRT_FAIL=Client_BufferFromHostBuffer:1 fake load "$CK" --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "pjrt device 0: PJRT_Client_BufferFromHostBuffer for parameter '.*' failed" \
    || fail "fault names the parameter: $(cat "$T/err")"
FAKE_PJRT_FAIL=Plugin_Initialize:1 fake load "$CK" --device pjrt --pjrt-plugin "$FAKE" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "device 'pjrt': plugin .*: PJRT_Plugin_Initialize failed" || fail "init: $(cat "$T/err")"
check_clean "init"

"$SL" load --help | grep -q -- "--pjrt-plugin PATH" || fail "--help lacks --pjrt-plugin"
finish
echo "cli_pjrt: ok"
