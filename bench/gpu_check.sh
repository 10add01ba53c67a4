#!/usr/bin/env bash
# gpu_check.sh - the cuda backend on a real GPU, in one run of a few minutes: build shardload,
# synthesize a checkpoint (Llama-3-8B shapes, ~16 GB bf16), check cuda shards against the cpu
# backend (TP 1, 2 and 8), then measure, on the same files in the same run: shardload's load
# throughput from the page cache (default settings and a small sweep of engine, staging and request
# size) and from disk, device memory deltas, host peak RSS, pinned host-to-device bandwidth,
# safetensors.torch.load_file(device="cuda"), PyTorch's whole-tensor-then-narrow-and-copy per rank,
# and what the copy engine gives 1-D copies and narrow 2-D rows (bench/gpu_copy.c), the Python
# package on the GPU (bench/gpu_python.py: cuda views, load_into CUDA tensors), and the pjrt backend
# on JAX's CUDA plugin (jax_plugins/xla_cuda*/xla_cuda_plugin.so in python3's site-packages; TP 1
# and 8 onto the GPU, checksums against cpu and cuda, time, memory deltas, the ways each device's
# bytes went, TP 1 timed with the default assembly bound and with nearly everything streamed, the
# plugin's own RSS), bf16 -> f32 conversion with the ring grown for the helper threads against a
# variant build with the ring as before, and the conversion alone (bench/bench_convert.c, its ring
# table), and the disk's own rate (dd, O_DIRECT) for the cold loads. Writes the
# "GPU" section (bench/gpu_report.py) to bench/gpu.md and $OUT (or $GPU_WORK), and puts it into
# bench/RESULTS.md in place of the previous one (make bench keeps it).
#
# Needs: a C compiler (and cmake; without it, or should its build fail, scripts/cc_build.sh builds
# with the compiler alone), jansson and xxhash (liburing optional) either installed or extracted
# into .devdeps by scripts/devdeps.sh (for machines where nothing can be installed; should both
# builds fail, the binary and library built elsewhere from the same tree in .devbuild/), an NVIDIA
# driver and libcudart (found by shardload at run time, or searched here; SL_CUDART to pick one).
# The PyTorch parts need torch and safetensors in python3 and are reported as skipped without them.
#
# Knobs: GPU_CONFIG (default tests/configs/llama-3-8b.json), GPU_WORK (work dir, default
#        build-gpu), GPU_RESULTS (default bench/RESULTS.md), GPU_FAKE=1 (CPU dry run of this script
#        with the host-memory stand-in tests/fake_cudart.c; torch skipped; results stay in the work
#        dir), GPU_REPS (runs per measured setting, best kept; default 2), GPU_SL (an already
#        built shardload: no build; tests/cli_gpu_check_dry.sh uses it), GPU_COPY_MIB (bytes per
#        bench/gpu_copy.c measurement, default 1024), GPU_BUDGET_S (seconds after which the
#        remaining sections are skipped and the report written; default 450), GPU_PJRT_PLUGIN (the
#        PJRT plugin for the pjrt section instead of JAX's CUDA plugin found on python3's path; a
#        dry run where neither is uses the tests' stand-in tests/libfake_pjrt.so, as a CUDA plugin).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONFIG=${GPU_CONFIG:-$ROOT/tests/configs/llama-3-8b.json}
WORK=${GPU_WORK:-$ROOT/build-gpu}
if [ "${GPU_FAKE:-0}" = 1 ]; then   # a dry run does not touch the committed results
    RESULTS=${GPU_RESULTS:-$WORK/RESULTS.md} GPU_MD=$WORK/gpu-fake.md
else
    RESULTS=${GPU_RESULTS:-$ROOT/bench/RESULTS.md} GPU_MD=$ROOT/bench/gpu.md
fi
REPS=${GPU_REPS:-2}
PY=${PY:-python3}
BUILD=$WORK/build
SL=${GPU_SL:-$BUILD/shardload}
CK=$WORK/ck
mkdir -p "$WORK" || { echo "gpu_check: cannot create $WORK" >&2; exit 1; }
OUTD=${OUT:-$WORK}             # the device tool brings back what is under $OUT
LOG=$OUTD/gpu_check.jsonl
: >"$LOG"
exec 2> >(tee -a "$OUTD/gpu_check.log" >&2)   # the progress lines come back with the results
T0=$(date +%s)
say() { echo "gpu_check [$(($(date +%s) - T0))s]: $*" >&2; }
die() { say "error: $*"; exit 1; }
record() { echo "$1" >>"$LOG"; }
fails=0
bad() { say "FAIL: $*"; fails=$((fails + 1)); record "{\"fail\":$(jstr "$*")}"; }
jstr() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# ---- 1. environment --------------------------------------------------------------------------------
say "host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/{print int($2/1048576)" GiB"}' /proc/meminfo)"
say "tools: cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}'), cc $(${CC:-cc} -dumpfullversion 2>/dev/null), pkg-config $(command -v pkg-config || echo none)"
CMAKE_EXTRA=()
if [ -d "$ROOT/.devdeps/usr" ]; then
    CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$ROOT/.devdeps/usr")
    export LD_LIBRARY_PATH="$ROOT/.devdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "using the libraries extracted in .devdeps"
fi
if [ "${GPU_FAKE:-0}" = 1 ]; then
    export SL_CUDART=$(dirname "$SL")/tests/libfake_cudart.so FAKE_CUDA_GPUS=1 FAKE_CUDA_MEM=$((64 << 30))
    GPU_DESC="none (GPU_FAKE=1: host-memory stand-in, CPU dry run)"
    GPU_COPY_MIB=${GPU_COPY_MIB:-32}
else
    GPU_DESC=$(nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max \
               --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$GPU_DESC" ] || GPU_DESC=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
    [ -n "$GPU_DESC" ] || say "nvidia-smi found no GPU; the cuda loads below will say why they fail"
    if [ -z "${SL_CUDART:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so\.1[1-3]' &&
       ! ls /usr/local/cuda/lib64/libcudart.so.1[1-3]* >/dev/null 2>&1; then
        c=$(find /usr/local /opt /usr/lib -name 'libcudart.so.1[1-3]*' 2>/dev/null | sort -r | head -1)
        [ -n "$c" ] && export SL_CUDART=$c && say "CUDA runtime not on the loader's path; using $c"
    fi
fi
say "GPU: ${GPU_DESC:-unknown}; SL_CUDART=${SL_CUDART:-default search}"
record "{\"env\":{\"gpu\":$(jstr "${GPU_DESC:-unknown}"),\"cpus\":$(nproc),\"kernel\":$(jstr "$(uname -r)")}}"

# ---- 2. build --------------------------------------------------------------------------------------
tests=OFF
[ "${GPU_FAKE:-0}" = 1 ] && tests=ON
build() {
    command -v cmake >/dev/null || { echo "no cmake" >"$WORK/cmake.log"; return 1; }
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSL_BUILD_TESTS=$tests -DSL_WITH_MPI=OFF \
        "${CMAKE_EXTRA[@]}" >"$WORK/cmake.log" 2>&1 || return 1
    cmake --build "$BUILD" -j"$(nproc)" >"$WORK/build.log" 2>&1 || return 2
}
if [ -n "${GPU_SL:-}" ]; then true; else build; fi
case $? in
0) ;;
*) cp "$WORK/cmake.log" "$WORK/build.log" "$OUTD/" 2>/dev/null
   why=$(echo "$(tail -3 "$WORK/cmake.log") $(grep -m3 -i error "$WORK/build.log" 2>/dev/null)" | tr -s '\n ' '  ' | sed 's/ $//')
   # Without cmake (or with one that fails): the compiler alone (scripts/cc_build.sh), then a
   # binary built elsewhere from the same tree (see the header): either beats no run at all.
   if bash "$ROOT/scripts/cc_build.sh" "$BUILD" >"$WORK/cc_build.log" 2>&1; then
       say "cmake build failed ($why); built with scripts/cc_build.sh: $(tail -1 "$WORK/cc_build.log")"
   else
       cp "$WORK/cc_build.log" "$OUTD/" 2>/dev/null
       [ -x "$ROOT/.devbuild/shardload" ] || die "build failed: $why; cc_build: $(tail -2 "$WORK/cc_build.log" | tr '\n' ' ')"
       say "build failed here ($why; cc_build: $(tail -1 "$WORK/cc_build.log")); using .devbuild, built elsewhere from this tree"
       SL=$ROOT/.devbuild/shardload
   fi ;;
esac
say "built $SL ($(grep -o 'SL_HAVE_URING:[A-Z]*=[A-Z]*' "$BUILD/CMakeCache.txt" 2>/dev/null || echo io_uring ?))"

# ---- 2b. a variant for section 8: the conversion ring as it was before it grew for the helper
# threads (RD_RING_POOL_HELPERS out of reach: 4 MiB, so each 1 MiB piece of f32 elements is
# converted on one thread; the default build's pieces of 4 MiB are shared by up to 8 threads on a
# host of 4 CPUs or more): what sharing the conversion gains a bf16 -> f32 load. Not in dry runs
# nor with GPU_SL, unless GPU_VARIANTS=1.
SLV=
if { [ -z "${GPU_SL:-}" ] && [ "${GPU_FAKE:-0}" != 1 ]; } || [ "${GPU_VARIANTS:-0}" = 1 ] &&
   command -v cmake >/dev/null; then
    VB=$WORK/build-conv
    if cmake -S "$ROOT" -B "$VB" -DCMAKE_BUILD_TYPE=Release -DSL_BUILD_TESTS=OFF -DSL_WITH_MPI=OFF \
             "${CMAKE_EXTRA[@]}" "-DCMAKE_C_FLAGS=-DRD_RING_POOL_HELPERS=4096" \
             >"$WORK/cmake-conv.log" 2>&1 &&
       cmake --build "$VB" -j"$(nproc)" --target shardload_cli >"$WORK/build-conv.log" 2>&1; then
        SLV=$VB/shardload
        say "built the conversion variant $SLV"
    else
        say "conversion variant not built: $(tail -2 "$WORK/build-conv.log" 2>/dev/null | tr '\n' ' ')"
    fi
fi

# ---- 3. checkpoint ---------------------------------------------------------------------------------
[ -f "$CONFIG" ] || die "no config $CONFIG (set GPU_CONFIG)"
if [ ! -f "$CK/.complete" ]; then
    rm -rf "$CK"
    say "synthesizing $(basename "$CONFIG") into $CK"
    timeout 600 "$SL" synth --config "$CONFIG" "$CK" --max-shard-size 5GB >/dev/null || die "synth failed"
    touch "$CK/.complete"
fi
FILES=$(ls "$CK"/*.safetensors)
CK_BYTES=$(cat $FILES | wc -c)
say "checkpoint: $(echo $FILES | wc -w) files, $CK_BYTES bytes"
record "{\"checkpoint\":{\"config\":\"$(basename "$CONFIG")\",\"bytes\":$CK_BYTES,\"files\":$(echo $FILES | wc -w)}}"

# ---- helpers ---------------------------------------------------------------------------------------
# A device machine is lent for minutes: past GPU_BUDGET_S seconds (default 450) the sections still
# to come are skipped (recorded as such) so that the report is always written.
BUDGET=${GPU_BUDGET_S:-450}
in_time() { [ $(($(date +%s) - T0)) -lt "$BUDGET" ]; }
late() {   # late WHAT: 0 (and WHAT recorded as skipped) once the budget is spent
    in_time && return 1
    say "skipping $1: $(($(date +%s) - T0)) s used of GPU_BUDGET_S=$BUDGET"
    record "{\"skipped\":$(jstr "$1"),\"elapsed_s\":$(($(date +%s) - T0))}"
}
nums() { grep -o "\"$1\":[0-9]*" | cut -d: -f2 | tr '\n' ' '; }
sums() { grep -o '"xxh3":"[0-9a-f]*"' | tr -d '\n' | md5sum | cut -c1-16; }
# Evicts the checkpoint from the page cache: drop_caches as root on the GPU machine, else (and in
# dry runs, which share a machine with other work) fadvise(DONTNEED) on the files alone.
evict() {
    sync
    if [ "${GPU_FAKE:-0}" != 1 ] && [ "$(id -u)" = 0 ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
        echo drop_caches
    else
        "$PY" -c 'import os,sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
print("fadvise")' $FILES
    fi
}
warm() { cat $FILES >/dev/null; }
# The ways device 0's bytes went, from a pjrt load's --json ("" for other backends).
routes0() { grep -o '"pjrt_routes":"[^"]*' | head -1 | cut -d'"' -f4; }
# run LABEL CACHE ENV-ENGINE -- shardload load arguments: one timed process, one JSON record.
# RUN_SL: another shardload; RUN_ENV: variables for it (env words: the PJRT plugin's libraries);
# RUN_NOTE: words added to the recorded arguments (a variable that changed the run).
run() {
    local label=$1 cache=$2 eng=$3 out t1 t2 routes
    shift 4
    t1=$(date +%s.%N)
    out=$(env ${RUN_ENV:-} SL_IO_ENGINE=$eng timeout 300 "${RUN_SL:-$SL}" load "$CK" "$@" --json 2>"$WORK/err") \
        || { bad "$label: $(cat "$WORK/err")"; return 1; }
    t2=$(date +%s.%N)
    out=$(echo "$out" | sed 's/,"params":\[[^]]*\]//g')
    record "{\"run\":\"$label\",\"cache\":\"$cache\",\"env_engine\":\"$eng\",\"args\":$(jstr "$*${RUN_NOTE:+ $RUN_NOTE}"),\"wall_s\":$(awk "BEGIN{print $t2 - $t1}"),\"out\":$out}"
    routes=$(echo "$out" | routes0)
    say "$label: $(echo "$out" | grep -o '"gbps":[0-9.]*'), $(echo "$out" | grep -o '"gbps_after_setup":[0-9.]*'), setup $(echo "$out" | grep -o '"setup_seconds":[0-9.]*' | cut -d: -f2) s, engine $(echo "$out" | grep -o '"engine":"[^"]*"' | cut -d'"' -f4)${routes:+; device 0: $routes}"
}

# ---- 4. correctness: cuda vs cpu; allocations and memory deltas --------------------------------------
# check LABEL -- ARGS: the same load on cpu and cuda, checksums, allocations and memory deltas.
check() {
    local label=$1 cpu cuda n ok plan alloc before after p deltas d ndev
    shift 2
    cpu=$(timeout 300 "$SL" load "$CK" "$@" --checksums --json 2>"$WORK/err") || { bad "cpu load $label: $(cat "$WORK/err")"; return; }
    cuda=$(timeout 300 "$SL" load "$CK" "$@" --device cuda --checksums --json 2>"$WORK/err") || { bad "cuda load $label: $(cat "$WORK/err")"; return; }
    # kept for the pjrt section, which compares with both on the same TP
    echo "$cpu" | sums >"$WORK/sums.$label.cpu"
    echo "$cuda" | sums >"$WORK/sums.$label.cuda"
    echo "$cuda" | sed 's/,"params":\[[^]]*\]//g' >"$WORK/load.$label.cuda.json"
    n=$(echo "$cpu" | grep -o '"xxh3"' | wc -l)
    [ "$n" -gt 0 ] && [ "$(echo "$cpu" | sums)" = "$(echo "$cuda" | sums)" ] && ok=yes || { ok=no; bad "$label: cuda checksums differ from cpu"; }
    plan=$("$SL" plan "$CK" "$@" --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' ')
    alloc=$(echo "$cuda" | nums allocated_bytes)
    [ "$alloc" = "$plan" ] || bad "$label: allocated '$alloc' != plan '$plan'"
    before=($(echo "$cuda" | nums mem_free_before)) after=($(echo "$cuda" | nums mem_free_after))
    p=($plan) deltas="" ndev=${#p[@]}
    for ((d = 0; d < ndev; d++)); do deltas="$deltas$((before[d] - after[d])):${p[d]} "; done
    record "{\"check\":\"$label\",\"params\":$n,\"checksums_equal\":\"$ok\",\"delta_plan\":\"${deltas% }\"}"
    say "$label: $n parameter checksums equal cpu: $ok; device memory delta:plan per device: $deltas"
}
warm
for tp in 1 2 8; do check tp$tp -- --tp $tp; done

# ---- 4b. the Python package (bench/gpu_python.py), from the source tree over the build's .so ---------
# JAX would otherwise take 75% of the GPU at its first use, beside the cuda loads and torch's
# tensors of the same process.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
PYLIB=$(dirname "$SL")/libshardload.so
if [ ! -e "$PYLIB" ]; then
    bad "python: no $PYLIB next to $SL"
elif [[ $(nm -D "$PYLIB" 2>/dev/null) == *" U __asan_init"* ]]; then   # no pipe: pipefail + grep -q
    # A sanitizer build's library needs its runtime loaded first, which python is not built with.
    say "python: skipped ($PYLIB is a sanitizer build)"
    record '{"python_skipped":"sanitizer build of libshardload.so"}'
elif ! late "python api"; then
    out=$(PYTHONPATH="$ROOT/python" SHARDLOAD_LIBRARY="$PYLIB" timeout 300 "$PY" "$ROOT/bench/gpu_python.py" "$CK" \
          2>"$WORK/py.err") || { bad "python api: $(tail -3 "$WORK/py.err")"; out=; }
    if [ -n "$out" ]; then
        record "$out"
        say "python: $out"
        grep -q '"checksums_equal": true' <<<"$out" || bad "python: cuda checksums differ from cpu"
        grep -q '"load_into_equal": false\|"views_zero_copy": false\|"views_on_gpu": false\|"jax_equal_cpu": false\|"jax_on_gpus": false' <<<"$out" &&
            bad "python: views or load_into wrong: $out"
        # on a GPU the JAX part must have run whole: onto the GPUs, pinned host memory, DMA-mapped slabs
        if [ "${GPU_FAKE:-0}" != 1 ]; then
            grep -q '"jax_skipped"\|"jax_pinned_error"\|"jax_pinned_equal_cpu": false\|"jax_pinned_in_kind": false' <<<"$out" &&
                bad "python: the JAX part did not run whole: $(grep -o '"jax_skipped": "[^"]*"\|"jax_pinned_error": "[^"]*"' <<<"$out")"
            grep -q '"jax_dma": "mapped"' <<<"$out" || bad "python: JAX's slabs not DMA-mapped: $(grep -o '"jax_dma": "[^"]*"' <<<"$out")"
        fi
    fi
fi

# ---- 4c. the pjrt backend on JAX's CUDA plugin --------------------------------------------------------
# The plugin is found without importing jax (its import would make a client of its own): a
# jax_plugins/xla_cuda*/xla_cuda_plugin.so on python3's path. Mesh device d goes onto PJRT device
# d % count, so TP 8 puts all 8 on one GPU; the backend makes the CUDA client with preallocate
# false (allocator bfc), so the memory statistics show the buffers. Checksums are compared with the
# cpu and cuda loads of section 4 (same TP), speed with that cuda load.
find_pjrt_plugin() {
    "$PY" - <<'PYEOF'
import glob, os, sys
for d in sys.path:
    for f in sorted(glob.glob(os.path.join(d or ".", "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so"))):
        print(os.path.abspath(f)); sys.exit(0)
PYEOF
}
# PJRT version and table size of a plugin, read from GetPjrtApi's table (offsets 0, 32, 36) without
# initializing it.
pjrt_version() {
    "$PY" - "$1" <<'PYEOF' 2>/dev/null || echo "?"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=getattr(ctypes, "RTLD_LOCAL", 0))
lib.GetPjrtApi.restype = ctypes.c_void_p
api = lib.GetPjrtApi()
size = ctypes.c_size_t.from_address(api).value
major, minor = ctypes.c_int.from_address(api + 32).value, ctypes.c_int.from_address(api + 36).value
print(f"{major}.{minor}, table {size} bytes")
PYEOF
}
# pjrt_check LABEL PLUGIN -- ARGS: one pjrt load with checksums, against section 4's cpu and cuda.
pjrt_check() {
    local label=$1 plugin=$2 out ok_cpu ok_cuda n plan before after p d mb ma total cu staging v
    shift 3
    out=$(timeout 300 env $PJRT_ENV "$SL" load "$CK" "$@" --device pjrt --pjrt-plugin "$plugin" --checksums \
          --json 2>"$WORK/err")
    local rc=$? libs site
    # the plugin's CUDA libraries from the nvidia-* wheels, as JAX preloads them (notes section 9):
    # a failed dlopen (libcudart.so.13 not found) or client (the libraries XLA loads at run time)
    site=$(dirname "$(dirname "$(dirname "$plugin")")")
    libs=$(ls -d "$site"/nvidia/*/lib "$site"/nvidia/*/*/lib 2>/dev/null | paste -sd:)
    if [ "$rc" != 0 ] && [ -z "$PJRT_ENV" ] && [ -n "$libs" ]; then
        say "pjrt: $(head -c 300 "$WORK/err"); retrying with LD_LIBRARY_PATH=$libs"
        PJRT_ENV="LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        local first
        first=$(head -c 300 "$WORK/err")
        out=$(timeout 300 env $PJRT_ENV "$SL" load "$CK" "$@" --device pjrt --pjrt-plugin "$plugin" --checksums \
              --json 2>"$WORK/err")
        record "{\"pjrt_finding\":$(jstr "without the nvidia-* wheels' libraries: $first; with LD_LIBRARY_PATH=$libs: $([ -n "$out" ] && echo loaded || head -c 300 "$WORK/err")")}"
    fi
    [ -n "$out" ] || { bad "pjrt load $label: $(head -c 600 "$WORK/err")"; return; }
    n=$(echo "$out" | grep -o '"xxh3"' | wc -l)
    ok_cpu=no ok_cuda=no
    [ -f "$WORK/sums.$label.cpu" ] || ok_cpu="not run"
    [ -f "$WORK/sums.$label.cuda" ] || ok_cuda="not run"
    [ "$n" -gt 0 ] && [ "$(echo "$out" | sums)" = "$(cat "$WORK/sums.$label.cpu" 2>/dev/null)" ] && ok_cpu=yes
    [ "$n" -gt 0 ] && [ "$(echo "$out" | sums)" = "$(cat "$WORK/sums.$label.cuda" 2>/dev/null)" ] && ok_cuda=yes
    [ "$ok_cpu" = yes ] || bad "pjrt $label: checksums differ from cpu ($ok_cpu)"
    [ "$ok_cuda" = yes ] || [ "$ok_cuda" = "not run" ] || bad "pjrt $label: checksums differ from cuda"
    out=$(echo "$out" | sed 's/,"params":\[[^]]*\]//g')
    plan=$("$SL" plan "$CK" "$@" --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' ')
    [ "$(echo "$out" | nums allocated_bytes)" = "$plan" ] || bad "pjrt $label: allocated != plan '$plan'"
    # every mesh device may share one GPU: the delta that counts is the GPU's, across the load
    before=($(echo "$out" | nums mem_free_before)) after=($(echo "$out" | nums mem_free_after))
    p=($plan) total=0 mb="" ma=""
    for ((d = 0; d < ${#p[@]}; d++)); do total=$((total + p[d])); done
    for v in ${before[@]+"${before[@]}"}; do [ -z "$mb" ] || [ "$v" -gt "$mb" ] && mb=$v; done
    for v in ${after[@]+"${after[@]}"}; do [ -z "$ma" ] || [ "$v" -lt "$ma" ] && ma=$v; done
    cu=$(cat "$WORK/load.$label.cuda.json" 2>/dev/null || echo '{}')
    staging=$(echo "$out" | grep -o '"staging_memory":"[^"]*' | head -1 | cut -d'"' -f4-)
    record "{\"pjrt\":\"$label\",\"params\":$n,\"equal_cpu\":\"$ok_cpu\",\"equal_cuda\":\"$ok_cuda\",\"plan_bytes\":$total,\"mem_delta\":$([ -n "$mb" ] && [ -n "$ma" ] && echo $((mb - ma)) || echo null),\"staging\":$(jstr "$staging"),\"out\":$out,\"cuda\":$cu}"
    say "pjrt $label: $n checksums = cpu: $ok_cpu, = cuda: $ok_cuda; $(echo "$out" | grep -o '"gbps_after_setup":[0-9.]*') (cuda $(echo "$cu" | grep -o '"gbps_after_setup":[0-9.]*' | cut -d: -f2)); memory delta $([ -n "$mb" ] && [ -n "$ma" ] && echo $((mb - ma)) || echo n/a) of $total plan bytes; staging ${staging:-n/a}; device 0: $(echo "$out" | routes0)"
}
PJRT_ENV=
PJRT=${GPU_PJRT_PLUGIN:-}
[ -n "$PJRT" ] || PJRT=$(find_pjrt_plugin)
if [ "${GPU_FAKE:-0}" = 1 ]; then   # the dry run: the stand-in (unless found or given), as a CUDA plugin
    [ -n "$PJRT" ] || PJRT=$(dirname "$SL")/tests/libfake_pjrt.so
    export FAKE_PJRT_KIND=cuda FAKE_PJRT_STATS=1 FAKE_PJRT_GPUS=1   # one GPU, as on the machine lent
fi
if [ -z "$PJRT" ] || [ ! -f "$PJRT" ]; then
    why="no jax_plugins/xla_cuda*/xla_cuda_plugin.so on the path of $PY (pip install jax[cuda13]), or GPU_PJRT_PLUGIN ${PJRT:+$PJRT }missing"
    say "pjrt: skipped: $why"
    record "{\"pjrt_skipped\":$(jstr "$why")}"
elif ! late "pjrt (tp1, tp8)"; then
    ver=$(pjrt_version "$PJRT")
    say "pjrt: plugin $PJRT (PJRT $ver); exports $(nm -D --defined-only "$PJRT" 2>/dev/null | grep -o ' GetPjrtApi[@A-Za-z0-9_.]*$' | tr -d ' ' | paste -sd, | grep . || echo 'no GetPjrtApi'); $(readelf -d "$PJRT" 2>/dev/null | grep -i 'path' | tr -s ' ' | head -2 | tr '\n' ' ')"
    record "{\"pjrt_plugin\":$(jstr "$PJRT"),\"pjrt_version\":$(jstr "$ver")}"
    warm
    pjrt_check tp1 "$PJRT" -- --tp 1
    late "pjrt tp8" || pjrt_check tp8 "$PJRT" -- --tp 8
    # Timed alone (no checksums), the most telling first. The default assembly bound against every
    # parameter over 64 KiB streamed from the DMA-mapped staging (SL_PJRT_ASSEMBLY=65536): XLA's
    # GPU client DMAs straight from mapped memory but copies a malloc'd assembly block into its own
    # pinned pool on one thread first (docs/engine.md, "PJRT backend"), so streaming
    # everything should win; if it is still ~8 GB/s, the per-transfer cost is the cap, which
    # 16 MiB pieces (--staging 256 --request 16) would show, and a latency-bound one (the engine
    # refills a slot after its done event, which the plugin fires from a host callback) would
    # scale with the staging (--staging 1024: 64 pieces in flight instead of 16). Then the same unmapped
    # (SL_PJRT_DMA_MAP=0: does the plugin see our memory as pinned?), everything assembled (that
    # path's own rate and RSS), and TP 8 both ways.
    while IFS='|' read -r name knobs args; do
        late "pjrt timed $name" && break
        RUN_ENV="$PJRT_ENV $knobs" RUN_NOTE="$knobs" \
            run "pjrt_$name" warm "" -- $args --device pjrt --pjrt-plugin "$PJRT" </dev/null
    done <<'RUNS'
tp1_assembly0|SL_PJRT_ASSEMBLY=0|--tp 1
tp1_assembly65536|SL_PJRT_ASSEMBLY=65536|--tp 1
tp1_assembly65536_stg256_req16|SL_PJRT_ASSEMBLY=65536|--tp 1 --staging 256 --request 16
tp1_assembly65536_stg1024_req16|SL_PJRT_ASSEMBLY=65536|--tp 1 --staging 1024 --request 16
tp1_assembly65536_nomap|SL_PJRT_ASSEMBLY=65536 SL_PJRT_DMA_MAP=0|--tp 1
tp1_assembly_all|SL_PJRT_ASSEMBLY=17179869184|--tp 1
tp8_assembly0|SL_PJRT_ASSEMBLY=0|--tp 8
tp8_assembly65536|SL_PJRT_ASSEMBLY=65536|--tp 8
RUNS
    # The plugin's own host memory: a load of a few KB of dummy weights through it (its libraries
    # and client), against which the peak RSS of the loads above is read.
    printf '%s' '{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":1,"vocab_size":128,"torch_dtype":"bfloat16"}' >"$WORK/pjrt_tiny.json"
    if late "pjrt baseline" ; then true
    elif out=$(timeout 120 env $PJRT_ENV "$SL" load --format dummy --config "$WORK/pjrt_tiny.json" \
               --device pjrt --pjrt-plugin "$PJRT" --json 2>"$WORK/err"); then
        rss=$(echo "$out" | grep -o '"peak_rss_bytes":[0-9]*' | cut -d: -f2)
        record "{\"pjrt_baseline\":{\"peak_rss_bytes\":${rss:-null}}}"
        say "pjrt: a dummy load of a few KB through the plugin peaks at ${rss:-?} bytes RSS"
    else
        bad "pjrt baseline: $(head -c 300 "$WORK/err")"
    fi
fi

# ---- 5. shardload throughput from the page cache ------------------------------------------------------
warm
for ((i = 0; i < REPS; i++)); do
    late "warm sweep, round $((i + 1)) of $REPS" && break
    run cuda_tp1_default warm "" -- --device cuda
    run cuda_tp1_uring_inline warm uring-inline -- --device cuda
    run cuda_tp1_pread warm pread -- --device cuda
    run cuda_tp1_req8 warm "" -- --device cuda --request 8
    run cuda_tp1_req16 warm "" -- --device cuda --request 16   # 3 slots: the default before slots followed CPUs
    run cuda_tp1_stg256 warm "" -- --device cuda --staging 256
    run cuda_tp1_stg256_pread warm pread -- --device cuda --staging 256 --request 8
    run cuda_tp1_stg1024 warm "" -- --device cuda --staging 1024 --request 16
    run cuda_tp2_default warm "" -- --device cuda --tp 2
    run cuda_tp8_default warm "" -- --device cuda --tp 8   # narrow rows: 2-D copies
    SL_GATHER_ROWS=65536 run cuda_tp8_gather warm "" -- --device cuda --tp 8   # ... gathered on the host
    run cpu_tp1_default warm "" --
done

# ---- 6. PyTorch on the same files (skipped without torch) ------------------------------------------------
warm
PYT=$(cat <<'PYEOF'
import json, os, sys, time
mode, files = sys.argv[1], sys.argv[2:]
try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    if not torch.cuda.is_available():
        raise ImportError("torch.cuda.is_available() is False")
except Exception as e:  # torch missing on CPU hosts: report, do not fail
    print(json.dumps({"torch_skipped": str(e)}))
    sys.exit(0)
nbytes = sum(os.path.getsize(f) for f in files)
torch.zeros(1, device="cuda")  # CUDA context up before timing, as a serving process has it
def timed(fn, n):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return min(ts)
def lf():
    for f in files:
        d = load_file(f, device="cuda"); del d
    torch.cuda.empty_cache()
if mode == "cold":
    print(json.dumps({"torch": torch.__version__, "load_file_cold_s": timed(lf, 1), "bytes": nbytes}))
    sys.exit(0)
buf = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
dst = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
h2d = (1 << 30) / timed(lambda: dst.copy_(buf, non_blocking=True), 5) / 1e9
del buf, dst
torch.cuda.empty_cache()
# vLLM's default loader: every rank reads whole tensors, narrows dim 0 to its shard, copies it
gpus = torch.cuda.device_count()
def narrow(tp=2):
    for f in files:
        with safe_open(f, "pt", device="cpu") as h:
            for k in h.keys():
                t = h.get_tensor(k)
                for r in range(tp):
                    s = t.narrow(0, r * (t.shape[0] // tp), t.shape[0] // tp) if t.dim() and t.shape[0] % tp == 0 else t
                    s.to(f"cuda:{r % gpus}")
    torch.cuda.empty_cache()
t_lf = timed(lf, int(os.environ.get("GPU_REPS", "2")))
t_nc = timed(narrow, 1)
print(json.dumps({"torch": torch.__version__, "h2d_pinned_gbps": h2d, "load_file_s": t_lf,
                  "narrow_tp2_s": t_nc, "bytes": nbytes}))
PYEOF
)
if late "torch (page cache)"; then
    out='{"torch_skipped":"time budget"}'
else
    out=$(timeout 400 "$PY" -c "$PYT" warm $FILES 2>"$WORK/torch.err") || out="{\"torch_skipped\":$(jstr "python failed: $(tail -2 "$WORK/torch.err")")}"
    record "$out"
    say "torch (page cache): $out"
fi

# ---- 6b. the copy engine as the backend drives it (bench/gpu_copy.c): 1-D copies from registered
# memory by chunk size, and narrow rows as 2-D copies against a host gather -----------------------
# Built next to shardload when the build had tests (with its sanitizers: a dry run's stand-in may
# be an ASan build), else compiled here.
GC=$(dirname "$SL")/bench/gpu_copy
[ -x "$GC" ] || GC=$WORK/gpu_copy
: >"$WORK/gpu_copy.err"
if late "gpu_copy"; then
    true
elif [ -x "$GC" ] || ${CC:-cc} -std=c11 -O2 -o "$GC" "$ROOT/bench/gpu_copy.c" -ldl 2>"$WORK/gpu_copy.err"; then
    if gc=$(timeout 120 "$GC" "${GPU_COPY_MIB:-1024}" 3 2>>"$WORK/gpu_copy.err"); then
        while read -r l; do record "$l"; done <<<"$gc"
        say "copy engine: $(echo "$gc" | grep -o '"copy":"[a-z0-9]*","[a-z]*":[0-9]*\|"gbps":[0-9.]*' | paste -sd' ')"
    else
        bad "gpu_copy: $(tail -2 "$WORK/gpu_copy.err")"
    fi
else
    say "gpu_copy not built: $(head -3 "$WORK/gpu_copy.err")"
fi

# ---- 7. from disk ------------------------------------------------------------------------------------
# The disk's own rate first: every file read at once with dd (O_DIRECT, 16 MiB blocks), the
# ceiling for the cold loads below.
if ! late "disk ceiling"; then
    how=$(evict)
    t1=$(date +%s.%N)
    pids=()   # waited for by pid: a bare wait would also wait for the tee of stderr above
    for f in $FILES; do dd if="$f" of=/dev/null bs=16M iflag=direct status=none 2>>"$WORK/dd.err" & pids+=($!); done
    ok=1
    for p in "${pids[@]}"; do wait "$p" || ok=0; done
    t2=$(date +%s.%N)
    how="dd iflag=direct bs=16M, $(echo $FILES | wc -w) files at once, after $how"
    if [ "$ok" = 1 ]; then
        gbps=$(awk "BEGIN{printf \"%.3f\", $CK_BYTES / ($t2 - $t1) / 1e9}")
        record "{\"disk\":{\"gbps\":$gbps,\"how\":\"$how\"}}"
        say "disk: $gbps GB/s ($how)"
    else   # tmpfs and some file systems refuse O_DIRECT: no figure rather than a wrong one
        record "{\"disk\":{\"gbps\":null,\"how\":\"$how\",\"why\":$(jstr "$(head -c 200 "$WORK/dd.err")")}}"
        say "disk: not measured: $(head -c 200 "$WORK/dd.err")"
    fi
fi
late "cold: cuda default" || { how=$(evict); run cuda_tp1_default cold:$how "" -- --device cuda; }
late "cold: cuda staging 256" || { how=$(evict); run cuda_tp1_stg256 cold:$how "" -- --device cuda --staging 256; }
late "cold: cpu default" || { how=$(evict); run cpu_tp1_default cold:$how "" --; }
if ! grep -q torch_skipped <<<"$out" && ! late "cold: torch"; then
    how=$(evict)
    out=$(timeout 300 "$PY" -c "$PYT" cold $FILES 2>>"$WORK/torch.err") || out="{\"torch_skipped\":\"cold run failed\"}"
    record "${out%\}},\"cache\":\"cold:$how\"}"
    say "torch (from disk): $out"
fi

# ---- 8. conversion on the way (bf16 checkpoint to f32 devices: host conversion into the ring of
# page-locked pieces), and narrow rows gathered on the host (SL_GATHER_ROWS) instead of 2-D copies --
in_time && warm
late "check tp2_to_f32" || check tp2_to_f32 -- --tp 2 --dtype f32
# Converted on the GPU (SL_CUDA_CONVERT=gpu: the 16-bit bytes cross the link, a kernel of
# src/device/cuda_kernels.cu widens them): never run on a GPU before; first the same bytes as the
# cpu backend's and the devices saying the kernels ran, then its speed against the host's.
if ! late "check tp2_to_f32_gpu"; then
    SL_CUDA_CONVERT=gpu check tp2_to_f32_gpu -- --tp 2 --dtype f32
    conv=$(grep -o '"cuda_convert":"[^"]*"' "$WORK/load.tp2_to_f32_gpu.cuda.json" | head -1)
    record "{\"cuda_convert\":$(jstr "${conv:-none}")}"
    say "tp2_to_f32_gpu: device 0 $conv"
    case $conv in *"converted on the GPU"*) ;; *) bad "tp2_to_f32_gpu: not converted on the GPU: ${conv:-no cuda_convert}" ;; esac
fi
late "cuda_tp1_to_f32_gpu" || RUN_ENV="SL_CUDA_CONVERT=gpu" RUN_NOTE="SL_CUDA_CONVERT=gpu" \
    run cuda_tp1_to_f32_gpu warm "" -- --device cuda --dtype f32
late "cuda_tp8_to_f32_gpu" || RUN_ENV="SL_CUDA_CONVERT=gpu" RUN_NOTE="SL_CUDA_CONVERT=gpu" \
    run cuda_tp8_to_f32_gpu warm "" -- --device cuda --tp 8 --dtype f32   # rows gathered unconverted
late "check tp8_gather" || SL_GATHER_ROWS=65536 check tp8_gather -- --tp 8
late "cuda_tp1_to_f32" || run cuda_tp1_to_f32 warm "" -- --device cuda --dtype f32
late "cuda_tp8_to_f32" || run cuda_tp8_to_f32 warm "" -- --device cuda --tp 8 --dtype f32   # rows gathered into pieces
late "cuda_tp1_to_f32_stg256" || run cuda_tp1_to_f32_stg256 warm "" -- --device cuda --dtype f32 --staging 256
if [ -n "$SLV" ] && ! late "conversion variant"; then   # section 2b's build: the same bytes, then its speed
    want=$(cat "$WORK/sums.tp2_to_f32.cpu" 2>/dev/null)
    got=$(timeout 300 "$SLV" load "$CK" --tp 2 --dtype f32 --device cuda --checksums --json 2>"$WORK/err" | sums)
    [ -n "$want" ] && [ "$got" = "$want" ] || bad "conversion variant: checksums differ from cpu ($(head -c 200 "$WORK/err"))"
    RUN_SL=$SLV run cuda_tp1_to_f32_ring_onethread warm "" -- --device cuda --dtype f32
    late "conversion variant, again" || run cuda_tp1_to_f32_again warm "" -- --device cuda --dtype f32
    late "conversion variant, TP 8" ||
        RUN_SL=$SLV run cuda_tp8_to_f32_ring_onethread warm "" -- --device cuda --tp 8 --dtype f32
    late "conversion variant, staging 256" ||
        RUN_SL=$SLV run cuda_tp1_to_f32_ring_onethread_stg256 warm "" -- --device cuda --dtype f32 --staging 256
fi

# ---- 8b. the conversion alone (bench/bench_convert.c, compiled here: its ring table): bf16 -> f32
# through a ring of 4 pieces, the plain ring's pieces (256 Ki elements, one thread) against the
# pieces of the ring grown for the helper threads (shared by them), on this host's CPUs ------------
BC=$WORK/bench_convert
BC_N=$((32 << 20))
[ "${GPU_FAKE:-0}" = 1 ] && BC_N=$((4 << 20))   # a dry run checks the plumbing
if ! late "bench_convert"; then
    if ${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -I"$ROOT/include" -I"$ROOT/src" -o "$BC" "$ROOT/bench/bench_convert.c" \
           "$ROOT/src/load/convert.c" "$ROOT/src/common/sl_pool.c" "$ROOT/src/common/sl_dtype.c" -lpthread \
           2>"$WORK/bench_convert.err" && bc=$(timeout 120 "$BC" "$BC_N" 3 2>>"$WORK/bench_convert.err"); then
        ring=$(echo "$bc" | sed -n 's/^ring bf16 -> f32, pieces of \([0-9]*\) Ki elements (\([0-9]*\) threads*): *\([0-9.]*\) G.*/{"piece_ki":\1,"threads":\2,"geps":\3}/p' | paste -sd,)
        record "{\"convert_ring\":[$ring]}"
        say "conversion alone: $(echo "$bc" | grep '^ring' | paste -sd';')"
    else
        say "bench_convert not run: $(head -3 "$WORK/bench_convert.err")"
    fi
fi

# ---- 9. report ---------------------------------------------------------------------------------------
"$PY" "$ROOT/bench/gpu_report.py" "$LOG" "$fails" >"$OUTD/gpu.md" || die "could not write the report"
[ "$OUTD/gpu.md" -ef "$GPU_MD" ] || cp "$OUTD/gpu.md" "$GPU_MD"
"$PY" "$ROOT/bench/gpu_report.py" --splice "$RESULTS" "$GPU_MD" || die "could not update $RESULTS"
cat "$GPU_MD"
say "wrote $GPU_MD (and $OUTD/gpu.md) and put it into $RESULTS as its GPU section"
[ "$fails" = 0 ] || die "$fails failures (see above)"
say "ok"
