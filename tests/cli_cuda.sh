#!/usr/bin/env bash
# cli_cuda.sh - the cuda backend without a GPU. (1) With no CUDA runtime or no GPU, `--device cuda`
# exits 1 with one line saying so. (2) With the host-memory stand-in tests/fake_cudart.c (loaded
# through SL_CUDART; it defers async copies to stream synchronization, so a missing fence gives
# wrong bytes), loads match the cpu backend's checksums at TP 4 (2 fake GPUs, --gpus) and TP 2
# with f32 conversion, allocations and cudaMemGetInfo deltas equal the plan's bytes, staging is
# registered once per process, async copies only come from registered memory, and nothing leaks,
# also when a runtime call fails mid-load (the stand-in's fault injection).
# Usage: cli_cuda.sh path/to/shardload   (FAKE_CUDART overrides the stand-in's path)
set -u
SL=${1:?usage: cli_cuda.sh SHARDLOAD}
FAKE=${FAKE_CUDART:-$(dirname "$SL")/tests/libfake_cudart.so}
. "$(dirname "$0")/lib.sh"
[ -f "$FAKE" ] || { echo "FAIL: fake CUDA runtime not found at $FAKE (set FAKE_CUDART)" >&2; exit 1; }

tiny_ckpt
# Runs shardload on the stand-in; the stand-in appends its counters to $T/log at exit.
fake() { rm -f "$T/log"; FAKE_CUDA_LOG="$T/log" SL_CUDART="$FAKE" "$SL" "$@"; }
counter() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" "$T/log"; }
# Counters every load must show: nothing leaked or misused.
check_clean() {
    [ -s "$T/log" ] || { fail "$1: no stand-in log"; return; }
    for k in live_allocs live_bytes async_unregistered register_errors nonportable live_registers \
             bad_ptr wrong_gpu pending_at_unregister pending_at_exit; do
        [ "$(counter $k)" = 0 ] || fail "$1: $k=$(counter $k) ($(cat "$T/log"))"
    done
}

# 1. no runtime, no GPU: exit 1, one line
SL_CUDART="$T/nonexistent/libcudart.so" "$SL" load "$CK" --device cuda >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "CUDA runtime not found" || fail "no runtime: $(cat "$T/err")"
FAKE_CUDA_GPUS=0 SL_CUDART="$FAKE" "$SL" load "$CK" --device cuda >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "no CUDA GPU" || fail "no GPU: $(cat "$T/err")"

# 1b. a real CUDA runtime, where the toolkit is installed: every entry point the backend uses
# resolves in it (a misspelt or missing symbol says "lacks"), and without a GPU or driver the load
# fails in one line; with a GPU it must load.
for real in /usr/local/cuda/lib64/libcudart.so.1[1-3] /usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.1[1-3]; do
    [ -f "$real" ] || continue
    SL_CUDART="$real" "$SL" load "$CK" --device cuda >/dev/null 2>"$T/err"
    rc=$?
    if grep -q "lacks" "$T/err"; then
        fail "real runtime $real: $(cat "$T/err")"
    elif [ $rc -ne 0 ] && ! one_line_error $rc "$T/err" "no CUDA GPU"; then
        fail "real runtime $real: rc $rc: $(cat "$T/err")"
    fi
    echo "cli_cuda: real runtime $real: $([ $rc -eq 0 ] && echo loaded || cat "$T/err")"
    # the optional entry points of conversions on the GPU (CUDA 12+), resolved by name
    case $real in *.so.1[23])
        for sym in cudaLibraryLoadData cudaLibraryGetKernel cudaLaunchKernel; do
            nm -D "$real" 2>/dev/null | grep -q " T $sym@" || fail "real runtime $real lacks $sym"
        done ;;
    esac
    break
done

# 2. TP 4 on 2 GPUs, small staging (many slot refills), both read engines: same bytes as cpu
plan4=$("$SL" plan "$CK" --tp 4 --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' ')
ref=$("$SL" load "$CK" --tp 4 --checksums --json | sums)
[ -n "$ref" ] || fail "no cpu checksums"
for eng in uring pread; do
    out=$(SL_IO_ENGINE=$eng fake load "$CK" --device cuda --tp 4 --gpus 0,1,1,0 --staging 256K \
          --checksums --json 2>"$T/err")
    rc=$?
    if [ $rc -ne 0 ] && grep -q "io_uring" "$T/err"; then continue; fi
    [ $rc -eq 0 ] || { fail "tp4 $eng: $(cat "$T/err")"; continue; }
    [ "$(echo "$out" | sums)" = "$ref" ] || fail "tp4 $eng: checksums differ from cpu"
    [ "$(echo "$out" | nums allocated_bytes)" = "$plan4" ] || fail "tp4 $eng: allocated != plan '$plan4'"
    before=($(echo "$out" | nums mem_free_before)) after=($(echo "$out" | nums mem_free_after))
    plan=($plan4) delta=""
    for d in 0 1 2 3; do delta="$delta$((before[d] - after[d])) "; done
    [ "$delta" = "$plan4" ] || fail "tp4 $eng: memGetInfo deltas '$delta' != plan '$plan4'"
    # devices 0 and 3 share GPU 0: device 3 sees device 0's allocation
    [ "${before[3]}" = "${after[0]}" ] || fail "tp4 $eng: device 3 is not on device 0's GPU"
    check_clean "tp4 $eng"
    [ "$(counter registers)" = 1 ] || fail "tp4 $eng: staging registered $(counter registers) times"
    [ "$(counter async)" -gt 0 ] || fail "tp4 $eng: no async copies"
    [ "$(counter copies_2d)" -gt 0 ] || fail "tp4 $eng: no 2-D copies"
    [ "$(counter mallocs)" = 4 ] || fail "tp4 $eng: $(counter mallocs) cudaMalloc calls"
    [ "$(echo "$out" | nums gpu)" = "0 1 1 0 " ] || fail "tp4 $eng: gpus '$(echo "$out" | nums gpu)' for --gpus 0,1,1,0"
    # slots are refilled after waiting for their own copies (events), not the whole stream
    [ "$(counter event_syncs)" -gt 0 ] || fail "tp4 $eng: no per-slot waits (event_syncs=0)"
done

# 3. TP 2 with f32 conversion (through the ring of page-locked pieces), default GPU mapping
ref=$("$SL" load "$CK" --tp 2 --dtype f32 --checksums --json | sums)
out=$(fake load "$CK" --device cuda --tp 2 --dtype f32 --staging 256K --checksums --json 2>"$T/err") \
    || fail "tp2 f32: $(cat "$T/err")"
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "tp2 f32: checksums differ from cpu"
plan2=$("$SL" plan "$CK" --tp 2 --dtype f32 --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' ')
[ "$(echo "$out" | nums allocated_bytes)" = "$plan2" ] || fail "tp2 f32: allocated != plan"
check_clean "tp2 f32"
# converted pieces go through a page-locked ring of the staging block: asynchronous, none synchronous
fake load "$CK" --device cuda --tp 2 --dtype f32 --staging 256K >/dev/null 2>"$T/err" || fail "tp2 f32 ring: $(cat "$T/err")"
check_clean "tp2 f32 ring"
[ "$(counter sync)" = 0 ] && [ "$(counter async)" -gt 0 ] ||
    fail "tp2 f32 ring: $(counter sync) synchronous, $(counter async) asynchronous copies"
# converted rows of column-split weights are gathered into ring pieces: a copy (and an event) per
# row would be over 2000 here (o_proj and down_proj: 256 rows each, 2 layers, 2 devices)
fake load "$CK" --device cuda --tp 2 --dtype f32 >/dev/null 2>"$T/err" || fail "tp2 f32 rows: $(cat "$T/err")"
[ "$(counter async)" -lt 200 ] && [ "$(counter event_syncs)" -lt 200 ] ||
    fail "tp2 f32 rows: $(counter async) copies, $(counter event_syncs) event waits (one per row?)"
check_clean "tp2 f32 rows"

# 3a. SL_CUDA_CONVERT=gpu: bf16 -> f32 on the (stand-in's) GPU, the host sending the 16-bit bytes,
# whole runs (TP 1) and column splits gathered unconverted into ring pieces (TP 4); the same bytes
# as the host's conversion (the stand-in runs the kernels' own element functions, which
# test_cuda_kernels checks against the host's for every input), every converted element through
# a kernel, and the GPU's scratch freed by the load's end (live_bytes: only the model's). Where
# the runtime refuses the PTX (FAKE_CUDA_NO_KERNELS) the host converts, with the same bytes.
for tp in 1 4; do
    ref=$("$SL" load "$CK" --tp $tp --dtype f32 --checksums --json | sums)
    want=$("$SL" plan "$CK" --tp $tp --dtype f32 --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | paste -sd+ | bc)
    out=$(SL_CUDA_CONVERT=gpu FAKE_CUDA_GPUS=4 fake load "$CK" --device cuda --tp $tp --dtype f32 --checksums --json 2>"$T/err") \
        || fail "convert on gpu, tp $tp: $(cat "$T/err")"
    [ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "convert on gpu, tp $tp: checksums differ from cpu"
    # every element but the vocabulary's padding rows (1001 padded to 1024, in embed_tokens and
    # lm_head, 256 wide), which are zeroed, not converted
    [ "$(counter libraries)" = 1 ] && [ "$(counter launches)" -gt 0 ] &&
        [ "$(counter converted)" = $((want / 4 - 2 * (1024 - 1001) * 256)) ] ||
        fail "convert on gpu, tp $tp: not every element through a kernel ($want bytes): $(cat "$T/log")"
    [ "$(echo "$out" | grep -o '"cuda_convert":"converted on the GPU: [0-9]* elements, [0-9]* kernels"' | wc -l)" = $tp ] ||
        fail "convert on gpu, tp $tp: the devices do not say so: $out"
    check_clean "convert on gpu, tp $tp"
    # refused when the library is loaded (EAGER) or, by default (LAZY), at the first launch, where
    # the backend's launch of no elements finds out before any byte relies on a kernel
    for mode in EAGER LAZY; do
        out=$(CUDA_MODULE_LOADING=$mode FAKE_CUDA_NO_KERNELS=1 SL_CUDA_CONVERT=gpu FAKE_CUDA_GPUS=4 fake load "$CK" \
              --device cuda --tp $tp --dtype f32 --checksums --json 2>"$T/err") || fail "no kernels, $mode, tp $tp: $(cat "$T/err")"
        [ "$(echo "$out" | sums)" = "$ref" ] && [ "$(counter launches)" = 0 ] && [ "$(counter last_error)" = 0 ] ||
            fail "no kernels, $mode, tp $tp: $(cat "$T/log")"
        why='cudaLibraryLoadData of the conversion kernels: a PTX JIT'
        [ $mode = EAGER ] || why='the driver refused the conversion kernels: cudaLaunchKernel: a PTX JIT'
        [ "$(echo "$out" | grep -o "\"cuda_convert\":\"converted on the host: $why" | wc -l)" = $tp ] ||
            fail "no kernels, $mode, tp $tp: the devices do not say why: $out"
        check_clean "no kernels, $mode, tp $tp"
    done
done
SL_CUDA_CONVERT=yes "$SL" load "$CK" --tp 2 >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "SL_CUDA_CONVERT 'yes': give gpu or host" "$T/err" || fail "SL_CUDA_CONVERT=yes: $(cat "$T/err")"

# 3b. SL_GATHER_ROWS (a benchmark knob): narrow same-dtype rows gathered on the host instead of
# 2-D copies, same bytes
ref=$("$SL" load "$CK" --tp 4 --checksums --json | sums)
out=$(SL_GATHER_ROWS=65536 fake load "$CK" --device cuda --tp 4 --checksums --json 2>"$T/err") \
    || fail "gather: $(cat "$T/err")"
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "gather: checksums differ from cpu"
[ "$(counter copies_2d)" = 0 ] && [ "$(counter async)" -gt 0 ] || fail "gather: $(cat "$T/log")"
check_clean "gather"
# a value that is not a number of bytes is a usage error, not silently 0 or 2^64 - 1
for v in abc -1 12x; do
    SL_GATHER_ROWS=$v "$SL" load "$CK" --tp 4 >/dev/null 2>"$T/err"
    [ $? -eq 2 ] && grep -q "SL_GATHER_ROWS '$v': give a number of bytes" "$T/err" || fail "SL_GATHER_ROWS='$v': $(cat "$T/err")"
done
# so is an engine SL_IO_ENGINE does not name (it was a failure, exit 1, from the library)
for v in bogus PREAD uring2; do
    SL_IO_ENGINE=$v "$SL" load "$CK" --tp 4 >/dev/null 2>"$T/err"
    [ $? -eq 2 ] && grep -q "SL_IO_ENGINE '$v': give pread, uring or uring-inline" "$T/err" || fail "SL_IO_ENGINE='$v': $(cat "$T/err")"
done

# 4. dummy weights (worker threads write through the backend; padding zeroed) match cpu
ref=$("$SL" load --format dummy --config "$T/tiny.json" --tp 2 --pp 2 --checksums --json | sums)
out=$(fake load --format dummy --config "$T/tiny.json" --tp 2 --pp 2 --device cuda --checksums --json \
      2>"$T/err") || fail "dummy: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] || fail "dummy: checksums differ from cpu"
check_clean "dummy"

# 5. reports: text line for cuda, no memory figures for cpu
out=$(fake load "$CK" --device cuda --tp 2 2>&1) || fail "text: $out"
echo "$out" | grep -q "^device 1: GPU 1 free memory .* bytes (.* used)" || fail "no GPU memory line: $out"
"$SL" load "$CK" --tp 2 --json | grep -q mem_free_before && fail "cpu reports GPU memory"

# 5b. the ring: slots are reused after their own copies (events); streams are synchronized at the
# end (fence, unpin, free: 3 per device) and after zeroing vocabulary padding (embed and lm_head:
# 2 here), never once per chunk
out=$(fake load "$CK" --device cuda --tp 2 --staging 256K --json 2>"$T/err") || fail "ring: $(cat "$T/err")"
check_clean "ring"
[ "$(counter event_syncs)" -gt 20 ] || fail "ring: $(counter event_syncs) event waits for a 256K staging"
[ "$(counter syncs)" -le 8 ] || fail "ring: $(counter syncs) stream synchronizations (at most 8 expected)"

# 5c. `shardload demo` (make demo) adds the cuda load when a GPU is there, and says so when not
out=$(fake demo 2>&1) || fail "demo: $out"
echo "$out" | grep -q "^== shardload load .* --tp 2 --device cuda" && echo "$out" | grep -q "^device 1: GPU 1 free memory" \
    || fail "demo on the stand-in: no cuda load: $out"
out=$(SL_CUDART="$T/nonexistent/libcudart.so" "$SL" demo 2>&1) || fail "demo without a runtime: $out"
echo "$out" | grep -q "no CUDA GPU here" || fail "demo without a runtime: $out"

# 5d. examples/load_to_gpu.c (built next to the CLI): device addresses and GPUs through the API
EX=$(dirname "$SL")/load_to_gpu
if [ -x "$EX" ]; then
    rm -f "$T/log"
    out=$(FAKE_CUDA_LOG="$T/log" SL_CUDART="$FAKE" "$EX" "$CK" 2 2>&1) || fail "load_to_gpu: $out"
    echo "$out" | grep -q "^device 1 on GPU 1: [0-9]* parameters, [0-9]* bytes; .* at 0x" || fail "load_to_gpu: $out"
    check_clean "load_to_gpu"
    out=$(SL_CUDART="$T/nonexistent/libcudart.so" "$EX" "$CK" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "no CUDA GPU" \
        || fail "load_to_gpu without a runtime: $out"
fi

# 6. runtime failures (FAKE_CUDA_FAIL=NAME:N fails the N-th call of NAME), at each kind of call the
# load makes: exit 1 with one line naming the device, the GPU and the call; nothing left allocated,
# registered or queued (a copy still reading staging when it is unmapped would be a wild DMA on a
# real GPU). The stand-in counts the injection, so a case cannot pass by never failing.
for c in "cudaStreamCreate:2" "cudaMalloc:2" "cudaMemsetAsync:1" "cudaMemcpyAsync:5" \
         "cudaMemcpy2DAsync:3" "cudaEventCreateWithFlags:2" "cudaEventRecord:4" \
         "cudaEventSynchronize:3" "cudaStreamSynchronize:1" "cudaSetDevice:30" \
         "cudaMemcpyAsync:7 --dtype f32" "cudaEventSynchronize:2 --dtype f32" "cudaMemcpy:3 --format dummy"; do
    spec=${c%% *} extra=""
    [ "$spec" = "$c" ] || extra=${c#* }
    FAKE_CUDA_FAIL=$spec fake load "$CK" --device cuda --tp 2 --staging 256K $extra >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "cuda device [0-9] (GPU [0-9]): ${spec%%:*}.* failed" || fail "fault $c: $(cat "$T/err")"
    [ "$(counter injected)" = 1 ] || fail "fault $c: the stand-in injected $(counter injected) failures"
    check_clean "fault $c"
done
# ... and with conversions on the GPU: a kernel launch or a copy into the scratch that fails is
# the load's error; a library the runtime refuses, scratch it cannot allocate or a first launch
# (of no elements, before any byte relies on a kernel) that fails is tolerated (the host
# converts: same bytes), and taken off the runtime's last error. Each device's first two launches
# are those of no elements, all made while the load sizes its staging (it asks each device whether
# it converts), so at TP 2 the 5th launch is the first conversion.
for c in "cudaLaunchKernel:5" "cudaMemcpyAsync:4"; do
    SL_CUDA_CONVERT=gpu FAKE_CUDA_FAIL=$c fake load "$CK" --device cuda --tp 2 --staging 256K --dtype f32 >/dev/null 2>"$T/err"
    one_line_error $? "$T/err" "cuda device [0-9] (GPU [0-9]): ${c%%:*}.* failed" || fail "fault $c, convert on gpu: $(cat "$T/err")"
    [ "$(counter injected)" = 1 ] || fail "fault $c, convert on gpu: the stand-in injected $(counter injected) failures"
    check_clean "fault $c, convert on gpu"
done
ref=$("$SL" load "$CK" --tp 2 --dtype f32 --checksums --json | sums)
for c in "cudaLibraryLoadData:1|converted on the host: cudaLibraryLoadData of the conversion kernels: unspecified launch failure" \
         "cudaMalloc:3|converted on the host: no 8388608 bytes of GPU scratch" \
         "cudaLaunchKernel:1|converted on the host: the driver refused the conversion kernels: cudaLaunchKernel: unspecified launch failure"; do
    spec=${c%%|*}
    out=$(SL_CUDA_CONVERT=gpu FAKE_CUDA_FAIL=$spec fake load "$CK" --device cuda --tp 2 --staging 256K --dtype f32 \
          --checksums --json 2>"$T/err") || fail "tolerated $spec: $(cat "$T/err")"
    [ "$(echo "$out" | sums)" = "$ref" ] && [ "$(counter injected)" = 1 ] && [ "$(counter last_error)" = 0 ] ||
        fail "tolerated $spec: $(cat "$T/log")"
    echo "$out" | grep -qF "\"cuda_convert\":\"${c#*|}" || fail "tolerated $spec: the device does not say so: $out"
    check_clean "tolerated $spec"
done
# out of device memory: the second device of GPU 0 does not fit
FAKE_CUDA_MEM=2000000 fake load "$CK" --device cuda --tp 2 --gpus 0,0 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "cuda device 1 (GPU 0): cudaMalloc of [0-9]* bytes failed: out of memory ([0-9]* bytes free)" \
    || fail "out of memory: $(cat "$T/err")"
check_clean "out of memory"
# staging that cannot be page-locked (cudaHostRegister refused: locked-memory limits) still loads,
# with synchronous copies
ref=$("$SL" load "$CK" --tp 2 --checksums --json | sums)
out=$(FAKE_CUDA_FAIL=cudaHostRegister:1 fake load "$CK" --device cuda --tp 2 --staging 256K --checksums --json 2>"$T/err") \
    || fail "unregistered staging: $(cat "$T/err")"
[ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "unregistered staging: checksums differ from cpu"
[ "$(counter injected)" = 1 ] && [ "$(counter async)" = 0 ] && [ "$(counter sync)" -gt 0 ] \
    || fail "unregistered staging: $(cat "$T/log")"
check_clean "unregistered staging"
# the tolerated failure is taken off the runtime's last error (a process sharing the runtime,
# PyTorch, would see it at its next cudaGetLastError), and the load's end waits for the
# synchronous copies, which leave pageable memory on the legacy default stream: a real
# cudaMemcpy may return before its DMA lands
[ "$(counter last_error)" = 0 ] || fail "unregistered staging left the runtime's last error $(counter last_error)"
echo "$out" | grep -q '"staging_memory":"plain (cudaHostRegister: unspecified launch failure)"' ||
    fail "unregistered staging: not reported: $(echo "$out" | grep -o '"staging_memory":"[^"]*"' | head -1)"
out=$(fake load "$CK" --device cuda --tp 2 --staging 256K --json 2>"$T/err") || fail "page-locked: $(cat "$T/err")"
[ "$(echo "$out" | grep -o '"staging_memory":"page-locked"' | wc -l)" = 2 ] || fail "page-locked staging not reported: $out"
[ "$(counter legacy_syncs)" -gt 0 ] || fail "unregistered staging: the legacy default stream was never synchronized"

# 7. --gpus errors
fake load "$CK" --device cuda --tp 2 --gpus 0,5 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "GPU 5" || fail "--gpus 0,5: $(cat "$T/err")"
fake load "$CK" --device cuda --tp 2 --gpus 1 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "--gpus" || fail "--gpus too short: $(cat "$T/err")"
fake load "$CK" --device cuda --tp 2 --gpus 0,1,1 >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "--gpus lists 3 GPUs for a mesh of 2 devices" || fail "--gpus too long: $(cat "$T/err")"
fake load "$CK" --device cuda --gpus 0,x >/dev/null 2>&1; [ $? -eq 2 ] || fail "--gpus 0,x should exit 2"
fake load "$CK" --device cuda --gpus 0,,1 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--gpus 0,,1 should exit 2"
"$SL" load --help | grep -q -- "--gpus" || fail "--help lacks --gpus"

finish
echo "cli_cuda: ok"
