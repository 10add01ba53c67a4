#!/usr/bin/env bash
# cli_mpi.sh - `shardload load` over MPI (issue 6, docs/mpi.md) with 2 and 4 ranks on one host:
# per-device checksums equal the single-process load for both strategies (TP 4 and TP 2 x PP 2,
# 1 and 2 devices per rank); cooperative reads each byte once over all ranks (sum of the ranks'
# bytes_read == the single-process bytes_read), sends a rank no more bytes than its devices hold,
# and keeps each rank's staging within --staging;
# independent ranks read no more than one process would; a truncated shard fails every rank
# with one error line naming the file, without hanging. `reshard` over MPI writes, over all ranks,
# the same files as one process, byte for byte, and fails as cleanly. Skips (77) without mpirun
# or MPI.
# Usage: cli_mpi.sh path/to/shardload
set -u
SL=${1:?usage: cli_mpi.sh SHARDLOAD}
command -v mpirun >/dev/null 2>&1 || { echo "skip: no mpirun" >&2; exit 77; }
. "$(dirname "$0")/lib.sh"

# Containers often have no usable network interface: shared memory and self are enough here.
export OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent= OMPI_MCA_rmaps_base_oversubscribe=1
# Under ASan (make test-asan) leak detection is off for the ranks only: Open MPI's components are
# dlopen'd, leak at exit and are unloaded before LeakSanitizer reports, so their frames show as
# "<unknown module>" and cannot be suppressed by name. ASan's memory errors and UBSan stay on, and
# the single-process loads below keep leak detection.
RANK_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$RANK_ASAN" timeout 60 mpirun --allow-run-as-root --oversubscribe)

tiny_config "$T/tiny.json" 4
"$SL" synth --config "$T/tiny.json" "$T/ck" --max-shard-size 600KB >/dev/null || { fail "synth"; exit 1; }
CK="$T/ck"
probe=$("${MPIRUN[@]}" -np 1 "$SL" load "$CK" --dist cooperative 2>&1)
if echo "$probe" | grep -q "built without it"; then echo "skip: built without MPI" >&2; exit 77; fi

allocs() { grep -o '"allocated_bytes":[0-9]*' | tr '\n' ' '; }
# "bytes_read" values: the job's total first, then one per rank
reads() { grep -o '"bytes_read":[0-9]*' | grep -o '[0-9]*' | tr '\n' ' '; }
json_num() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }

# 1. checksums, allocations and bytes read against one process
for mesh in "--tp 4" "--tp 2 --pp 2"; do
    ref=$("$SL" load "$CK" $mesh --io buffered --checksums --json) || { fail "single $mesh"; continue; }
    ref_sums=$(echo "$ref" | sums)
    ref_alloc=$(echo "$ref" | allocs)
    ref_read=$(echo "$ref" | json_num bytes_read)
    for np_k in "4 1" "2 2"; do
        set -- $np_k
        np=$1 k=$2
        for dist in cooperative independent; do
            what="np $np K $k $mesh $dist"
            out=$("${MPIRUN[@]}" -np "$np" "$SL" load "$CK" $mesh --io buffered --checksums --json \
                  --dist $dist --devices-per-rank "$k" 2>"$T/err")
            [ $? -eq 0 ] || { fail "$what: $(cat "$T/err")"; continue; }
            [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$what: not one JSON line (rank 0 only)"
            [ "$(echo "$out" | sums)" = "$ref_sums" ] || fail "$what: checksums differ"
            [ "$(echo "$out" | allocs)" = "$ref_alloc" ] || fail "$what: allocations differ"
            read -r -a r <<<"$(echo "$out" | reads)"
            [ ${#r[@]} -eq $((np + 1)) ] || { fail "$what: ${#r[@]} bytes_read values"; continue; }
            sum=0
            for x in "${r[@]:1}"; do sum=$((sum + x)); done
            [ "$sum" = "${r[0]}" ] || fail "$what: total ${r[0]} != sum of ranks $sum"
            echo "$out" | grep -q '"read_amplification":[0-9]' || fail "$what: no read_amplification"
            # the job's read requests are the ranks' sum, its depth their largest, each rank's > 0
            read -r -a q <<<"$(echo "$out" | grep -o '"read_requests":[0-9]*' | cut -d: -f2 | tr '\n' ' ')"
            read -r -a dp <<<"$(echo "$out" | grep -o '"read_depth_peak":[0-9]*' | cut -d: -f2 | tr '\n' ' ')"
            if [ ${#q[@]} -ne $((np + 1)) ] || [ ${#dp[@]} -ne $((np + 1)) ]; then
                fail "$what: ${#q[@]} read_requests, ${#dp[@]} read_depth_peak values"
            else
                qs=0 dmax=0
                for ((i = 1; i <= np; i++)); do
                    [ "${q[i]}" -gt 0 ] && [ "${dp[i]}" -gt 0 ] || fail "$what: rank $((i - 1)) sent ${q[i]} requests, depth ${dp[i]}"
                    qs=$((qs + q[i]))
                    [ "${dp[i]}" -gt "$dmax" ] && dmax=${dp[i]}
                done
                [ "$qs" = "${q[0]}" ] && [ "$dmax" = "${dp[0]}" ] ||
                    fail "$what: job ${q[0]} requests depth ${dp[0]}, ranks' sum $qs and largest $dmax"
            fi
            # the single-process figures too: the job's peak RSS is the largest rank's, each
            # rank's at least what its devices hold (host memory here)
            read -r -a rss <<<"$(echo "$out" | grep -o '"peak_rss_bytes":[0-9]*' | cut -d: -f2 | tr '\n' ' ')"
            read -r -a dev <<<"$(echo "$out" | allocs | grep -o '[0-9]*' | tr '\n' ' ')"
            rmax=0
            for ((i = 1; i < ${#rss[@]}; i++)); do
                [ "${rss[i]}" -gt "$rmax" ] && rmax=${rss[i]}
                held=0
                for ((d = (i - 1) * k; d < i * k; d++)); do held=$((held + dev[d])); done
                [ "${rss[i]}" -ge "$held" ] || fail "$what: rank $((i - 1)) peak RSS ${rss[i]} < its devices' $held"
            done
            [ ${#rss[@]} -eq $((np + 1)) ] && [ "${rss[0]}" = "$rmax" ] ||
                fail "$what: peak_rss_bytes ${rss[*]} (job first, then each rank)"
            for key in setup_seconds gbps_after_setup; do
                [ "$(echo "$out" | grep -o "\"$key\":[0-9]" | wc -l)" -ge 1 ] || fail "$what: no $key"
            done
            if [ $dist = cooperative ]; then
                [ "$sum" = "$ref_read" ] || fail "$what: ranks read $sum, one process $ref_read"
                [ "$(echo "$out" | json_num bytes_exchanged)" -gt 0 ] || fail "$what: nothing exchanged"
                # only the bytes a rank's devices read travel to it: never more than they hold
                read -r -a got <<<"$(echo "$out" | grep -o '"bytes_received":[0-9]*' | cut -d: -f2 | tr '\n' ' ')"
                read -r -a dev <<<"$(echo "$out" | allocs | grep -o '[0-9]*' | tr '\n' ' ')"
                for ((q = 0; q < np; q++)); do
                    held=0
                    for ((d = q * k; d < (q + 1) * k; d++)); do held=$((held + dev[d])); done
                    [ "${got[q]}" -le "$held" ] || fail "$what: rank $q received ${got[q]} bytes for devices holding $held"
                done
            else
                for x in "${r[@]:1}"; do
                    [ "$x" -le "$ref_read" ] || fail "$what: a rank read $x > $ref_read"
                done
                [ "$sum" -ge "$ref_read" ] || fail "$what: ranks read $sum < $ref_read"
            fi
        done
    done
done

# 2. cooperative under a small staging budget: many rounds, same bytes, staging bounded
ref=$("$SL" load "$CK" --tp 4 --io buffered --checksums --json | sums)
out=$("${MPIRUN[@]}" -np 4 "$SL" load "$CK" --tp 4 --io buffered --checksums --json --staging 256K 2>"$T/err") ||
    fail "staging 256K: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] || fail "staging 256K: checksums differ"
for x in $(echo "$out" | grep -o '"staging_peak":[0-9]*' | cut -d: -f2); do
    [ "$x" -le 262144 ] || fail "staging 256K: a rank's staging peak is $x"
done

# 2a. a budget too small for cooperative's slots (one per rank and one more, 16 KiB at least,
# beside the conversion ring) is refused with the least one that holds them, and that one loads
"${MPIRUN[@]}" -np 4 "$SL" load "$CK" --tp 4 --io buffered --json --staging 64K >/dev/null 2>"$T/err" &&
    fail "staging 64K over 4 ranks: loaded"
least=$(grep -o -- '--staging [0-9]*K' "$T/err" | head -1 | cut -d' ' -f2)
grep -q 'dist cooperative over 4 ranks: a staging budget of 65536 bytes is too small' "$T/err" &&
    [ -n "$least" ] || fail "staging 64K over 4 ranks: $(cat "$T/err")"
out=$("${MPIRUN[@]}" -np 4 "$SL" load "$CK" --tp 4 --io buffered --checksums --json --staging "$least" 2>"$T/err") ||
    fail "staging $least: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] || fail "staging $least: checksums differ"

# 2b. the same on the cuda stand-in (async copies out of the read slots while the next chunk is
# read into the other): bytes equal, nothing misused
FAKE=$(dirname "$SL")/tests/libfake_cudart.so
if [ -f "$FAKE" ]; then
    out=$(SL_CUDART="$FAKE" FAKE_CUDA_GPUS=2 "${MPIRUN[@]}" -np 2 "$SL" load "$CK" --tp 4 --devices-per-rank 2 \
          --device cuda --io buffered --checksums --json --staging 256K 2>"$T/err") || fail "cuda: $(cat "$T/err")"
    [ "$(echo "$out" | sums)" = "$ref" ] || fail "cuda: checksums differ from one cpu process"
    # converting on the way: pieces go through each rank's ring of page-locked pieces, rows
    # gathered, asynchronously (one synchronous copy per row before: over 500 per rank here)
    ref32=$("$SL" load "$CK" --tp 4 --dtype f32 --checksums --json | sums)
    out=$(SL_CUDART="$FAKE" FAKE_CUDA_GPUS=2 "${MPIRUN[@]}" -np 2 "$SL" load "$CK" --tp 4 --devices-per-rank 2 \
          --device cuda --dtype f32 --checksums --json 2>"$T/err") || fail "cuda f32: $(cat "$T/err")"
    [ -n "$ref32" ] && [ "$(echo "$out" | sums)" = "$ref32" ] || fail "cuda f32: checksums differ from one cpu process"
    rm -f "$T/log"
    SL_CUDART="$FAKE" FAKE_CUDA_GPUS=2 FAKE_CUDA_LOG="$T/log" "${MPIRUN[@]}" -np 2 "$SL" load "$CK" --tp 4 \
        --devices-per-rank 2 --device cuda --dtype f32 >/dev/null 2>"$T/err" || fail "cuda f32 copies: $(cat "$T/err")"
    [ "$(grep -c ' sync=0 ' "$T/log")" = 2 ] && [ "$(grep -c ' async=[1-9][0-9]* ' "$T/log")" = 2 ] \
        && [ "$(grep -c ' live_allocs=0 .*live_registers=0 ' "$T/log")" = 2 ] \
        || fail "cuda f32 copies: $(cat "$T/log")"
fi

# 2c. the pjrt backend under MPI (the PJRT stand-in; each rank opens its own client): both
# strategies give one process's bytes, and every rank destroys what its plugin made
PJ=$(dirname "$SL")/tests/libfake_pjrt.so
if [ -f "$PJ" ]; then
    for dist in cooperative independent; do
        rm -f "$T"/pjlog.*
        out=$("${MPIRUN[@]}" -np 2 bash -c 'FAKE_PJRT_LOG="$0.$OMPI_COMM_WORLD_RANK" "$@"' "$T/pjlog" \
              "$SL" load "$CK" --tp 4 --devices-per-rank 2 --dist $dist --device pjrt --pjrt-plugin "$PJ" \
              --staging 256K --checksums --json 2>"$T/err") || fail "pjrt $dist: $(cat "$T/err")"
        [ "$(echo "$out" | sums)" = "$ref" ] || fail "pjrt $dist: checksums differ from one cpu process"
        for r in 0 1; do
            for k in violations live_error live_event live_client live_buffer live_tm; do
                grep -q " $k=0\( \|$\)\|^$k=0 " "$T/pjlog.$r" 2>/dev/null \
                    || fail "pjrt $dist: rank $r: $k not 0: $(cat "$T/pjlog.$r" 2>&1)"
            done
        done
    done
fi

# 3. text report on rank 0 only
out=$("${MPIRUN[@]}" -np 2 "$SL" load "$CK" --tp 2 2>&1) || fail "text report: $out"
[ "$(echo "$out" | grep -c '^Loading weights took')" -eq 1 ] || fail "text report: $out"
echo "$out" | grep -q "^rank 1: devices 1-1, read .* read requests, at most [1-9][0-9]* in flight$" ||
    fail "no per-rank line: $out"
echo "$out" | grep -q "read amplification" || fail "no read amplification: $out"

# 4. failures end every rank with exit 1 and one error line, without hanging
cp -r "$CK" "$T/bad"
f=$(ls "$T/bad"/*.safetensors | sed -n 3p)
truncate -s -1000 "$f"
each_rank() { "${MPIRUN[@]}" -np "$1" bash -c '"$@"; echo "rank-exit $?" >&2' _ "${@:2}"; }
for dist in cooperative independent; do
    each_rank 4 "$SL" load "$T/bad" --tp 4 --dist $dist >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc -ne 124 ] || fail "truncated ($dist): mpirun timed out"
    [ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 4 ] || fail "truncated ($dist): not every rank exit 1: $(cat "$T/err")"
    [ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] || fail "truncated ($dist): not one error line: $(cat "$T/err")"
    grep '^shardload: error:' "$T/err" | grep -q "$(basename "$f")" || fail "truncated ($dist): file not named"
done
# ranks given different options (one rank's --staging, --dist, mesh, --manifest): every rank
# fails in one agreed line, at once (the job hung in mismatched collectives, or loaded an
# incoherent mesh); ones that change nothing the ranks share (a --request of the default, or
# --staging under independent) still load
"$SL" synth --config "$T/tiny.json" "$T/mck" --max-shard-size 600KB --write-manifest >/dev/null || fail "synth --write-manifest"
one_rank() { # ckpt dist "rank 1's options"
    "${MPIRUN[@]}" -np 2 bash -c 'x=; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && x=$3; "$0" load "$1" --tp 2 --dist "$2" $x; echo "rank-exit $?" >&2' \
        "$SL" "$1" "$2" "$3" >"$T/out" 2>"$T/err"
}
for same in "cooperative --request 16" "independent --staging 32"; do
    one_rank "$CK" ${same%% *} "${same#* }"
    [ "$(grep -c '^rank-exit 0$' "$T/err")" -eq 2 ] || fail "rank 1 with ${same#* } (${same%% *}) refused: $(cat "$T/err")"
done
# two checkpoints of the same shapes and sizes (another seed: a fine-tune of the same model), one
# per rank at the same path (each rank's ./ck, from another folder): the ranks' byte samples
# differ, so neither loads a mix of the two
"$SL" synth --config "$T/tiny.json" "$T/ck2" --max-shard-size 600KB --seed 99 >/dev/null || fail "synth --seed"
mkdir -p "$T/host0" "$T/host1" && ln -sfn "$CK" "$T/host0/ck" && ln -sfn "$T/ck2" "$T/host1/ck"
for dist in cooperative independent; do
    "${MPIRUN[@]}" -np 2 bash -c 'cd "$1/host$OMPI_COMM_WORLD_RANK" && "$0" load ck --tp 2 --dist "$2"; echo "rank-exit $?" >&2' \
        "$(cd "$(dirname "$SL")" && pwd)/$(basename "$SL")" "$T" $dist >"$T/out" 2>"$T/err"
    [ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 2 ] && grep -q "differ from another rank's" "$T/err" \
        || fail "two checkpoints of one shape ($dist): $(cat "$T/err")"
done
for odd in "--staging 200K" "--manifest $T/mck/SHA256SUMS"; do
    one_rank "$T/mck" cooperative "$odd"
    [ $? -ne 124 ] || { fail "rank 1 with $odd: mpirun timed out"; continue; }
    [ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 2 ] && [ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] &&
        grep -q "differ from another rank's" "$T/err" || fail "rank 1 with $odd: $(cat "$T/err")"
done
# a pipeline split (--pp-partition, VLLM_PP_LAYER_PARTITION) is the mesh's too: the ranks load the
# single process's bytes with it, and a rank given another one is refused
for dist in cooperative independent; do
    out=$("${MPIRUN[@]}" -np 2 "$SL" load "$CK" --pp 2 --pp-partition 2,0 --dist $dist --checksums --json 2>"$T/err") &&
        [ "$(sums <<<"$out")" = "$("$SL" load "$CK" --pp 2 --pp-partition 2,0 --checksums --json | sums)" ] ||
        fail "--pp-partition 2,0 ($dist): $(cat "$T/err")"
    "${MPIRUN[@]}" -np 2 bash -c 'x=; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && x=2,0; VLLM_PP_LAYER_PARTITION=$x "$0" load "$1" --pp 2 --dist "$2"; echo "rank-exit $?" >&2' \
        "$SL" "$CK" $dist >"$T/out" 2>"$T/err"
    [ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 2 ] && [ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] &&
        grep -q "^shardload: error: ranks differ in --pp-partition: (vLLM's default) on rank 0; 2,0 on rank 1 (" "$T/err" ||
        fail "rank 1 with another split ($dist): $(cat "$T/err")"
done
# what the command line says the ranks must share is compared first, in the job's first
# collective (cli_job.c): the field that differs, each value and its ranks. The report's options
# among them: each rank renders its own devices into rank 0's report (a rank given other
# --checksums or --json mixed its text into JSON, or left its devices' checksums out, exit 0)
for odd in "--dist independent:--dist: cooperative on rank 0; independent on rank 1" \
           "--tp 4 --devices-per-rank 2:--tp: 2 on rank 0; 4 on rank 1" \
           "--checksums --json:--checksums: off on rank 0; on on rank 1" \
           "--json:--json: off on rank 0; on on rank 1"; do
    one_rank "$T/mck" cooperative "${odd%%:*}"
    [ $? -ne 124 ] || { fail "rank 1 with ${odd%%:*}: mpirun timed out"; continue; }
    [ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 2 ] && [ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] &&
        grep -q "^shardload: error: ranks differ in ${odd#*:} (every rank of the job runs the same command" "$T/err" ||
        fail "rank 1 with ${odd%%:*}: $(cat "$T/err")"
done
# ranks running different commands: every rank fails at once with one line naming the commands
# and their ranks. Each case hung in Open MPI before (timeout 124): a `plan` rank exited 0 without
# joining the job, so the `load` ranks waited in MPI_Init for ever; `load` and `reshard` met in
# different collectives; a rank that printed its help left like the `plan` one.
one_cmd() { # "rank 1's command line" (word-split), then the expected rest of the error line
    "${MPIRUN[@]}" -np 3 bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then "$0" $3; else "$0" load "$1" --tp 3 --dist "$2"; fi; echo "rank-exit $?" >&2' \
        "$SL" "$T/ck3" cooperative "$1" >"$T/out" 2>"$T/err"
}
tiny_config "$T/tiny3.json" 3   # 12 heads of 32 over 3 KV heads, vocabulary padded to 1152: a mesh of 3
sed -i 's/"hidden_size":256/"hidden_size":384/; s/"num_attention_heads":8/"num_attention_heads":12/; s/"vocab_size":1001/"vocab_size":1100/; s/"intermediate_size":512/"intermediate_size":768/' "$T/tiny3.json"
"$SL" synth --config "$T/tiny3.json" "$T/ck3" --max-shard-size 600KB >/dev/null && "$SL" plan "$T/ck3" --tp 3 >/dev/null ||
    fail "ck3 does not plan at --tp 3"
for cmd in "plan $T/ck3 --tp 3:plan on rank 1" "reshard $T/ck3 $T/rs-mixed --tp 3:reshard on rank 1" \
           "inspect $T/ck3:inspect on rank 1" "load --help:load (ended with exit 0 before the job began) on rank 1" \
           "load $T/ck3 --tp 3 --bogus:load (ended with exit 2 before the job began) on rank 1"; do
    start=$(date +%s)
    one_cmd "${cmd%%:*}"
    rc=$?
    [ $rc -ne 124 ] || { fail "rank 1 runs ${cmd%%:*}: mpirun timed out"; continue; }
    [ $(($(date +%s) - start)) -lt 30 ] || fail "rank 1 runs ${cmd%%:*}: took $(($(date +%s) - start)) s"
    grep -q "^shardload: error: ranks differ in the command: load on ranks 0, 2; ${cmd#*:} (every rank" "$T/err" &&
        [ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] && ! grep -q '^rank-exit 0$' "$T/err" ||
        fail "rank 1 runs ${cmd%%:*}: $(cat "$T/err")"
done
[ -e "$T/rs-mixed/config.json" ] && fail "a reshard rank among load ranks wrote its output"
# a host's copy of the checkpoint may live at another path (node-local disks): paths are not
# compared, what they hold is (the signature compared them as given, and refused this job)
cp -r "$T/ck3" "$T/ck3-copy"
want=$("$SL" load "$T/ck3" --tp 3 --checksums --json | sums)
for dist in cooperative independent; do
    out=$("${MPIRUN[@]}" -np 3 bash -c 'c=$1; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && c=$1-copy; "$0" load "$c" --tp 3 --dist "$2" --checksums --json'         "$SL" "$T/ck3" $dist 2>"$T/err") && [ "$(sums <<<"$out")" = "$want" ] ||
        fail "a copy of the checkpoint at another path on rank 1 ($dist): $(cat "$T/err")"
done
# another checkpoint on one rank: refused once opened, in one line
one_cmd "load $CK --tp 3 --dist cooperative"
[ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] && ! grep -q '^rank-exit 0$' "$T/err" ||
    fail "rank 1 loads another checkpoint: $(cat "$T/err")"
# OUTDIRs that differ only in a control byte, which a signature shows as '?': told apart by the
# hash of the value as given (they compared equal: each rank wrote its part into its own folder,
# and rank 0 reported the reshard written, exit 0)
"${MPIRUN[@]}" -np 2 bash -c 'o=$(printf "%s/rs-ctl\\$((OMPI_COMM_WORLD_RANK + 1))" "$2"); "$0" reshard "$1" "$o" --tp 2 --dist cooperative; echo "rank-exit $?" >&2' \
    "$SL" "$CK" "$T" >"$T/out" 2>"$T/err"
[ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 2 ] && grep -q "^shardload: error: ranks differ in OUTDIR: $T/rs-ctl[?] (xxh3 [0-9a-f]*) on rank 0; $T/rs-ctl[?] (xxh3 [0-9a-f]*) on rank 1 (" "$T/err" ||
    fail "OUTDIRs differing in a control byte: $(cat "$T/err")"
[ -z "$(ls -d "$T"/rs-ctl* 2>/dev/null)" ] || fail "OUTDIRs differing in a control byte: written"
# commands that use no MPI still run on every rank (each its own output), once the ranks agree
out=$("${MPIRUN[@]}" -np 2 "$SL" plan "$CK" --tp 2 2>"$T/err") && [ "$(echo "$out" | grep -c '^total bytes')" -eq 2 ] ||
    fail "plan on every rank: $out $(cat "$T/err")"
# dummy weights planned from a checkpoint's tensors, as one process plans them (every rank
# failed: "a plan needs a checkpoint")
for dist in cooperative independent; do
    out=$("${MPIRUN[@]}" -np 2 "$SL" load "$CK" --tp 2 --format dummy --dist $dist --checksums --json 2>"$T/err") &&
        [ "$(sums <<<"$out")" = "$("$SL" load "$CK" --tp 2 --format dummy --checksums --json | sums)" ] ||
        fail "dummy of a checkpoint ($dist): $(cat "$T/err")"
done
"${MPIRUN[@]}" -np 2 "$SL" load "$CK" --tp 4 --devices-per-rank 1 >"$T/out" 2>"$T/err"
[ $? -ne 0 ] && grep -q "^shardload: error: .*2 ranks x 1 devices per rank != the mesh's 4" "$T/err" ||
    fail "rank/device mismatch: $(cat "$T/err")"

# 6. reshard over MPI: the ranks' files together are the single-process reshard's, byte for byte
same_dir() { # REF OUT WHAT: same file names, every file identical
    [ "$(ls "$1")" = "$(ls "$2")" ] || { fail "$3: file sets differ: $(ls "$2" | tr '\n' ' ')"; return; }
    for f in "$1"/*; do cmp -s "$f" "$2/$(basename "$f")" || fail "$3: $(basename "$f") differs"; done
}
for mesh in "--tp 4" "--tp 2 --pp 2"; do
    tag=$(echo "$mesh" | tr -d ' -')
    "$SL" reshard "$CK" "$T/ref-$tag" $mesh --max-part-size 300KB >/dev/null || { fail "reshard $mesh"; continue; }
    for np_k in "4 1" "2 2"; do
        set -- $np_k
        for dist in cooperative independent; do
            what="reshard np $1 K $2 $mesh $dist"
            out="$T/rs-$tag-$1-$dist"
            "${MPIRUN[@]}" -np "$1" "$SL" reshard "$CK" "$out" $mesh --max-part-size 300KB \
                --dist $dist --devices-per-rank "$2" --staging 256K >"$T/out" 2>"$T/err" ||
                { fail "$what: $(cat "$T/err")"; continue; }
            [ "$(grep -c '^wrote 4 devices' "$T/out")" -eq 1 ] || fail "$what: not one line from rank 0"
            same_dir "$T/ref-$tag" "$out" "$what"
        done
    done
    ref=$("$SL" load "$CK" $mesh --checksums --json | sums)
    got=$("$SL" load "$T/rs-$tag-4-cooperative" $mesh --checksums --json | sums)
    [ -n "$ref" ] && [ "$got" = "$ref" ] || fail "reshard $mesh: loading the output gives other checksums"
done
for dist in cooperative independent; do
    each_rank 4 "$SL" reshard "$T/bad" "$T/rs-bad-$dist" --tp 4 --dist $dist >"$T/out" 2>"$T/err"
    [ $? -ne 124 ] || fail "reshard truncated ($dist): mpirun timed out"
    [ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 4 ] || fail "reshard truncated ($dist): not every rank exit 1: $(cat "$T/err")"
    [ "$(grep -c '^shardload: error:' "$T/err")" -eq 1 ] || fail "reshard truncated ($dist): not one error line: $(cat "$T/err")"
    ls "$T/rs-bad-$dist"/*.safetensors >/dev/null 2>&1 && fail "reshard truncated ($dist): part files left behind"
done
# a failure on one rank only (rank 3 cannot put its part in place) ends every rank, and rank 0
# writes no config.json
mkdir -p "$T/rs-r3/model-rank-3-part-0.safetensors"
each_rank 4 "$SL" reshard "$CK" "$T/rs-r3" --tp 4 >"$T/out" 2>"$T/err"
[ $? -ne 124 ] || fail "reshard rank 3: mpirun timed out"
[ "$(grep -c '^rank-exit 1$' "$T/err")" -eq 4 ] || fail "reshard rank 3: not every rank exit 1: $(cat "$T/err")"
[ "$(grep -c '^shardload: error: rank 3: ' "$T/err")" -eq 1 ] || fail "reshard rank 3: not one error line: $(cat "$T/err")"
[ -e "$T/rs-r3/config.json" ] && fail "reshard rank 3: config.json written"

# 7. without mpirun nothing changes: no ranks in the report
"$SL" load "$CK" --tp 2 --json | grep -q '"ranks"' && fail "single-process JSON has ranks"

finish
echo "cli_mpi: ok"
