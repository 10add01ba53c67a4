#!/usr/bin/env bash
# cli_hard_signals.sh - interrupted writes leave nothing behind (issue 18 item 8).
#   1. synth and reshard of a 358 MB model get SIGINT or SIGTERM while their temporary files are
#      being written: each ends by that signal (a shell sees 130 or 143) after one line on stderr,
#      and no *.tmp.* file is left (nor synth's OUTDIR, which it created, nor reshard's
#      config.json). Before, the signal killed the process and left GBs of temporaries behind.
#   2. the same for `reshard --dist` under mpirun, each rank signalled: every rank cancels and
#      removes its files, and the job fails. Before, the ranks died by the signal and left their
#      temporaries.
#   3. temporary files of a run that died (kill -9: nothing could clean up) are removed by the
#      next run of the same output names, unless a live writer holds them (flock), and other
#      names' are left alone.
set -u
set -m   # background jobs get SIGINT as from a terminal (without job control they ignore it)
SL="$1"
. "$(dirname "$0")/lib.sh"

cat >"$T/big.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":1024,"intermediate_size":4096,
 "num_attention_heads":16,"num_key_value_heads":4,"num_hidden_layers":8,"vocab_size":32000,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"head_dim":64}
JSON
"$SL" synth --config "$T/big.json" "$T/ck" --max-shard-size 100MB >/dev/null 2>"$T/err" ||
    { echo "skip: synth unavailable: $(cat "$T/err")" >&2; exit 77; }

tmps() { find "$1" -name '*.tmp.*' 2>/dev/null; }

# runs "$@" in the background, and sends signal $1 once a temporary file shows in $2
interrupt() {
    local sig=$1 dir=$2
    shift 2
    "$@" >"$T/out" 2>"$T/err" &
    local pid=$! i
    for ((i = 0; i < 2000; i++)); do
        [ -n "$(tmps "$dir")" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.005
    done
    kill -"$sig" "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
}

check_interrupted() { # what sig expected_rc cmd
    [ "$rc" -eq "$3" ] || fail "$1: exit status $rc after SIG$2, expected $3 (stderr: $(cat "$T/err"))"
    [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^shardload: error: $4 interrupted by SIG$2: .*removed" "$T/err" ||
        fail "$1: stderr is not one 'interrupted by SIG$2' line: $(cat "$T/err")"
}

for sig in INT TERM; do
    want=$((128 + $(kill -l "$sig")))
    rm -rf "$T/s"
    interrupt "$sig" "$T/s" "$SL" synth --config "$T/big.json" "$T/s" --max-shard-size 100MB
    check_interrupted "synth" "$sig" "$want" synth
    [ -z "$(tmps "$T/s")" ] || fail "synth SIG$sig left temporary files: $(tmps "$T/s" | head -3)"
    [ ! -e "$T/s" ] || fail "synth SIG$sig left the OUTDIR it created: $(ls "$T/s" | head -5)"

    rm -rf "$T/r"
    interrupt "$sig" "$T/r" "$SL" reshard "$T/ck" "$T/r" --tp 2
    check_interrupted "reshard" "$sig" "$want" reshard
    [ -z "$(tmps "$T/r")" ] || fail "reshard SIG$sig left temporary files: $(tmps "$T/r" | head -3)"
    [ ! -e "$T/r/config.json" ] || fail "reshard SIG$sig wrote config.json"
    ls "$T/r" 2>/dev/null | grep -q 'safetensors' && fail "reshard SIG$sig left part files: $(ls "$T/r")"
done

# 2. under mpirun: the signal goes to every rank, as a batch system's cancel (Slurm's scancel)
#    sends it; mpirun itself passes a SIGINT/SIGTERM on to the ranks about a second later, which
#    this test does not rely on (under ctest it did not always arrive before the run ended). The
#    reshard is slow (16 KiB staging, one thread: seconds) so that it is still running.
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent= OMPI_MCA_rmaps_base_oversubscribe=1
    RANK_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"   # as in cli_mpi.sh
    for sig in INT TERM; do
        rm -rf "$T/m"
        # no `timeout` around mpirun (it signals its whole process group); ctest bounds the test
        env ASAN_OPTIONS="$RANK_ASAN" mpirun --allow-run-as-root --oversubscribe -np 2 "$SL" reshard \
            --dist independent "$T/ck" "$T/m" --tp 2 --staging 16KiB --threads 1 >"$T/out" 2>"$T/err" &
        pid=$!
        for ((i = 0; i < 2000; i++)); do
            [ "$(tmps "$T/m" | wc -l)" -ge 2 ] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.005
        done
        ranks=$(pgrep -P "$pid" -f "reshard --dist independent $T/ck")
        [ "$(wc -w <<<"$ranks")" -eq 2 ] || fail "mpirun reshard: ranks not found (pgrep: $ranks)"
        kill -"$sig" $ranks 2>/dev/null
        wait "$pid"
        rc=$?
        [ "$rc" -ne 0 ] || fail "mpirun reshard SIG$sig: exit status 0"
        [ -z "$(tmps "$T/m")" ] || fail "mpirun reshard SIG$sig left temporary files: $(tmps "$T/m" | head -3)"
        ls "$T/m" 2>/dev/null | grep -q 'safetensors\|config.json' &&
            fail "mpirun reshard SIG$sig was not stopped, or left files: $(ls "$T/m" | tr '\n' ' ') (stdout: $(cat "$T/out"))"
    done
else
    echo "note: no mpirun, the MPI part is skipped" >&2
fi

# 3. stale temporaries: planted as a killed run leaves them, one held by a live writer (flock)
rm -rf "$T/ck"   # the 358 MB checkpoint: synth refuses to write another's shards over it
tiny_ckpt
mkdir -p "$T/s2" "$T/r2"
for f in model.safetensors.tmp.AbC123 model-00002-of-00009.safetensors.tmp.Zz9999 other.bin.tmp.Qq1234 \
         model.safetensors.tmp.LoCkEd; do
    echo junk >"$T/s2/$f"
done
flock "$T/s2/model.safetensors.tmp.LoCkEd" sleep 30 &
holder=$!
sleep 0.2
"$SL" synth --config "$T/tiny.json" "$T/s2" >/dev/null 2>"$T/err" || fail "synth over stale temporaries: $(cat "$T/err")"
[ ! -e "$T/s2/model.safetensors.tmp.AbC123" ] || fail "synth kept a stale temporary file of its own output"
[ -e "$T/s2/model.safetensors.tmp.LoCkEd" ] || fail "synth removed a temporary file a live writer holds"
[ -e "$T/s2/model-00002-of-00009.safetensors.tmp.Zz9999" ] || fail "synth removed another checkpoint's temporary file"
[ -e "$T/s2/other.bin.tmp.Qq1234" ] || fail "synth removed a file of another name"
kill -- -"$holder" 2>/dev/null
wait "$holder" 2>/dev/null

for f in model-rank-0-part-0.safetensors.tmp.AbC123 model-rank-1-part-0.safetensors.tmp.Xy7890 \
         model-rank-7-part-0.safetensors.tmp.Qq1234; do
    echo junk >"$T/r2/$f"
done
"$SL" reshard "$CK" "$T/r2" --tp 2 >/dev/null 2>"$T/err" || fail "reshard over stale temporaries: $(cat "$T/err")"
[ -z "$(ls "$T/r2" | grep 'rank-[01]-.*\.tmp\.')" ] || fail "reshard kept stale temporary files: $(ls "$T/r2")"
[ -e "$T/r2/model-rank-7-part-0.safetensors.tmp.Qq1234" ] || fail "reshard removed a device it does not write"
"$SL" load "$T/r2" --tp 2 >/dev/null 2>"$T/err" || fail "load after reshard: $(cat "$T/err")"
finish
