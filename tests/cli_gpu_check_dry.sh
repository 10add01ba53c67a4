#!/usr/bin/env bash
# cli_gpu_check_dry.sh - bench/gpu_check.sh, the script meant for a GPU machine, run through on the
# host-memory stand-in (GPU_FAKE=1) with a tiny model, so that a mistake in its plumbing (options
# it passes, the JSON it parses, the report and the RESULTS.md splice) shows here, not in the few
# minutes a GPU machine is lent for. Twice: the second run must replace the GPU section, not add one.
# Usage: cli_gpu_check_dry.sh path/to/shardload
set -u
SL=${1:?usage: cli_gpu_check_dry.sh SHARDLOAD}
SL=$(cd "$(dirname "$SL")" && pwd)/$(basename "$SL")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }   # each step needs the one before: stop at the first
tiny_config "$T/tiny.json"
printf '# Results\n\n## Earlier section\n\nkept\n' >"$T/RESULTS.md"
for i in 1 2; do
    GPU_FAKE=1 GPU_REPS=1 GPU_SL="$SL" GPU_CONFIG="$T/tiny.json" GPU_WORK="$T/work" \
        GPU_RESULTS="$T/RESULTS.md" PY=/usr/bin/python3 OUT= bash "$ROOT/bench/gpu_check.sh" \
        >"$T/out" 2>"$T/err" || fail "run $i: $(tail -5 "$T/err")"
done
md=$T/work/gpu.md
[ -f "$md" ] || fail "no report"
for check in tp1 tp2 tp8 tp2_to_f32 tp8_gather; do
    grep -q "^| $check | [1-9][0-9]* | yes |" "$md" || fail "$check not checked equal: $(cat "$md")"
done
grep -q "^| cuda_tp1_default .*| warm | io_uring\|^| cuda_tp1_default .*| warm | pread" "$md" || fail "no warm default run"
grep -q "^| cuda_tp1_default .*| cold:" "$md" || fail "no cold run"
grep -q "^| cuda_tp8_gather .*| warm |" "$md" && grep -q "^| cuda_tp8_to_f32 .*| warm |" "$md" || fail "no gather or converting TP 8 run"
grep -q "^| 2-D, rows 1024 of 8192 | [0-9.]* |" "$md" && grep -q "^| 1-D, 16 MiB copies |" "$md" \
    || fail "no copy-engine table (bench/gpu_copy.c): $(cat "$md")"
if [[ $(nm -D "$(dirname "$SL")/libshardload.so") == *" U __asan_init"* ]]; then
    echo "cli_gpu_check_dry: sanitizer build: the Python API section is skipped by design"
else
    grep -q "^Python API (.*cuda checksums = cpu: yes" "$md" || fail "no Python API line: $(cat "$md")"
fi
grep -q "Failures: 0" "$md" || fail "failures reported: $(cat "$md")"
[ "$(grep -c '^## GPU' "$T/RESULTS.md")" = 1 ] || fail "RESULTS.md has $(grep -c '^## GPU' "$T/RESULTS.md") GPU sections"
grep -q "^kept" "$T/RESULTS.md" || fail "the splice lost the other sections"
[ -f "$ROOT/bench/gpu-fake.md" ] && fail "a dry run wrote into bench/"
# out of time (GPU_BUDGET_S=0): the checks run, every later section is skipped, the report is written
GPU_FAKE=1 GPU_REPS=1 GPU_BUDGET_S=0 GPU_SL="$SL" GPU_CONFIG="$T/tiny.json" GPU_WORK="$T/work" \
    GPU_RESULTS="$T/RESULTS.md" PY=/usr/bin/python3 OUT= bash "$ROOT/bench/gpu_check.sh" \
    >"$T/out" 2>"$T/err" || fail "budget 0: $(tail -5 "$T/err")"
grep -q "^| tp8 | [1-9][0-9]* | yes |" "$md" && grep -Eq "^Skipped for time \(GPU_BUDGET_S\): (python api \(at [0-9]+ s\); )?warm sweep, round 1 of 1" "$md" &&
    grep -q "cuda_tp8_to_f32 (at" "$md" && ! grep -q "^| cuda_tp1_default" "$md" || fail "budget 0: $(cat "$md")"
echo "cli_gpu_check_dry: ok"
