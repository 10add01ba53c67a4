#!/usr/bin/env bash
# cli_gpu_check_dry.sh - bench/gpu_check.sh, the script meant for a GPU machine, run through on the
# host-memory stand-in (GPU_FAKE=1) with a tiny model, so that a mistake in its plumbing (options
# it passes, the JSON it parses, the report and the RESULTS.md splice) shows here, not in the few
# minutes a GPU machine is lent for. Twice: the second run must replace the GPU section, not add one.
# The pjrt section (JAX's CUDA plugin on the GPU machine) runs on the tests' stand-in plugin as a
# CUDA one the first time and on XLA's CPU plugin from .venv the second (the stand-in again where
# .venv has none); a third run, out of time and with no plugin, checks the skip lines.
# Usage: cli_gpu_check_dry.sh path/to/shardload
set -u
SL=${1:?usage: cli_gpu_check_dry.sh SHARDLOAD}
SL=$(cd "$(dirname "$SL")" && pwd)/$(basename "$SL")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }   # each step needs the one before: stop at the first
tiny_config "$T/tiny.json"
printf '# Results\n\n## Earlier section\n\nkept\n' >"$T/RESULTS.md"
md=$T/work/gpu.md
real=$(ls "$ROOT"/.venv/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so 2>/dev/null | head -1)
# run 1 finds "JAX's CUDA plugin" (the stand-in, copied where JAX's wheel puts it) on python3's path
mkdir -p "$T/site/jax_plugins/xla_cuda13"
cp "$(dirname "$SL")/tests/libfake_pjrt.so" "$T/site/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
for i in 1 2; do
    plugin=
    [ "$i" = 2 ] && plugin=$real
    PYTHONPATH="$T/site" \
    GPU_FAKE=1 GPU_REPS=1 GPU_SL="$SL" GPU_CONFIG="$T/tiny.json" GPU_WORK="$T/work" GPU_PJRT_PLUGIN="$plugin" \
        GPU_RESULTS="$T/RESULTS.md" PY=/usr/bin/python3 OUT= bash "$ROOT/bench/gpu_check.sh" \
        >"$T/out" 2>"$T/err" || fail "run $i: $(tail -5 "$T/err")"
    [ -f "$md" ] || fail "no report"
    for tp in tp1 tp8; do   # checksums = cpu and = cuda, a speed, a memory delta where the plugin has one
        grep -Eq "^\| pjrt $tp \| [1-9][0-9]* \| yes \| yes \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| n/a \| [0-9.]+ \| " "$md" \
            || fail "run $i: no pjrt $tp row: $(grep -i pjrt "$md")"
    done
    if [ -z "$plugin" ]; then
        grep -q "^PJRT backend (\`--device pjrt --pjrt-plugin xla_cuda_plugin.so\`" "$md" \
            || fail "the plugin on python3's path was not found: $(grep -i pjrt "$md")"
        # one stand-in GPU holds all 8 mesh devices: its free memory drops by the plan's bytes
        grep -Eq "^\| pjrt tp8 .* \| ([0-9]+):\1 \| dma-mapped \| [0-9]+ \| direct [0-9]+ .*, [0-9]+ transfers \|$" "$md" || fail "stand-in: $(grep -i pjrt "$md")"
    else
        grep -q "^PJRT backend (\`--device pjrt --pjrt-plugin xla_cpu_pjrt.so\`, PJRT 0\.[0-9]*, table" "$md" &&
            grep -Eq "^\| pjrt tp1 .* \| n/a \| plain \(PJRT_Client_DmaMap is UNIMPLEMENTED in this plugin\) \| [0-9]+ \| direct [0-9]+ .* transfers \|$" "$md" \
            || fail "XLA's CPU plugin: $(grep -i pjrt "$md")"
    fi
done
for check in tp1 tp2 tp8 tp2_to_f32 tp2_to_f32_gpu tp8_gather; do
    grep -q "^| $check | [1-9][0-9]* | yes |" "$md" || fail "$check not checked equal: $(cat "$md")"
done
grep -q "^| cuda_tp1_default .*| warm | io_uring\|^| cuda_tp1_default .*| warm | pread" "$md" || fail "no warm default run"
grep -q "^| cuda_tp1_default .*| cold:" "$md" || fail "no cold run"
grep -Eq "^\| from disk: the disk itself \(dd iflag=direct bs=16M, [0-9]+ files at once, after fadvise\) \(GB/s\) \| ([0-9.]+|n/a \(.*\)) \|$" "$md" \
    || fail "no disk ceiling: $(grep -i disk "$md")"
grep -Eq "^The plugin alone \(a dummy load of a few KB through it\): peak RSS [0-9]+ MB\.$" "$md" \
    || fail "no plugin baseline: $(grep -i plugin "$md")"
grep -q "^| pjrt_tp1_assembly65536 --tp 1 SL_PJRT_ASSEMBLY=65536 | warm |" "$md" && grep -q "^| pjrt_tp8_assembly0 .*| warm |" "$md" \
    && grep -q "^| pjrt_tp1_assembly65536_nomap --tp 1 SL_PJRT_ASSEMBLY=65536 SL_PJRT_DMA_MAP=0 | warm |" "$md" \
    && grep -q "^| pjrt_tp8_assembly65536 .*| warm |" "$md" \
    || fail "no timed pjrt runs: $(grep -i pjrt_ "$md")"
grep -q "^| cuda_tp8_gather .*| warm |" "$md" && grep -q "^| cuda_tp8_to_f32 .*| warm |" "$md" || fail "no gather or converting TP 8 run"
grep -q "^| cuda_tp1_to_f32_gpu --dtype f32 SL_CUDA_CONVERT=gpu | warm |" "$md" &&
    grep -q "^| cuda_tp8_to_f32_gpu .*| warm |" "$md" || fail "no run converting on the GPU: $(grep -i to_f32 "$md")"
grep -q 'tp2_to_f32_gpu: device 0 "cuda_convert":"converted on the GPU: ' "$T/err" ||
    fail "the GPU conversion check did not say the kernels ran: $(grep -i convert "$T/err")"
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
# out of time (GPU_BUDGET_S=0): the checks run, every later section is skipped, the report is
# written; no plugin: the pjrt section says why it did not run
GPU_FAKE=1 GPU_REPS=1 GPU_BUDGET_S=0 GPU_SL="$SL" GPU_CONFIG="$T/tiny.json" GPU_WORK="$T/work" \
    GPU_PJRT_PLUGIN="$T/no_plugin.so" \
    GPU_RESULTS="$T/RESULTS.md" PY=/usr/bin/python3 OUT= bash "$ROOT/bench/gpu_check.sh" \
    >"$T/out" 2>"$T/err" || fail "budget 0: $(tail -5 "$T/err")"
grep -q "^| tp8 | [1-9][0-9]* | yes |" "$md" && grep -Eq "^Skipped for time \(GPU_BUDGET_S\): (python api \(at [0-9]+ s\); )?warm sweep, round 1 of 1" "$md" &&
    grep -q "cuda_tp8_to_f32 (at" "$md" && ! grep -q "^| cuda_tp1_default" "$md" || fail "budget 0: $(cat "$md")"
grep -q "^PJRT backend (\`--device pjrt\`): skipped: no jax_plugins/xla_cuda\*/xla_cuda_plugin.so on the path of .*, or GPU_PJRT_PLUGIN $T/no_plugin.so missing\.$" "$md" \
    || fail "no plugin: $(grep -i pjrt "$md")"
# a plugin but no time: skipped for time like the others
GPU_FAKE=1 GPU_REPS=1 GPU_BUDGET_S=0 GPU_SL="$SL" GPU_CONFIG="$T/tiny.json" GPU_WORK="$T/work" \
    GPU_RESULTS="$T/RESULTS.md" PY=/usr/bin/python3 OUT= bash "$ROOT/bench/gpu_check.sh" \
    >"$T/out" 2>"$T/err" || fail "budget 0, stand-in: $(tail -5 "$T/err")"
grep -q "pjrt (tp1, tp8) (at" "$md" && ! grep -q "^| pjrt tp1" "$md" || fail "budget 0, stand-in: $(grep -i 'pjrt\|skipped' "$md")"
echo "cli_gpu_check_dry: ok"
