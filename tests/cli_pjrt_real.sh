#!/usr/bin/env bash
# cli_pjrt_real.sh - `load --device pjrt` on a real PJRT plugin: XLA's CPU plugin from PyPI
# (xla-cpu-pjrt, PJRT 0.81, and lammps-jax-pjrt-cpu, the plugin built from jax 0.11.2's XLA, PJRT
# 0.115; both pinned in python/requirements-test.txt, installed into .venv by the test set-up).
# For each plugin found: checksums read back through the plugin equal the cpu backend's for tp 8
# and spmd 8 on a mesh of 8 CPU PJRT devices (the client is made with cpu_device_count 8), bf16
# and f32 targets, pp, small staging budgets (parameters assembled and streamed through the
# transfer manager) and dummy weights; allocations equal the plan's; stderr stays empty.
# Skipped (77) when no plugin is found: SL_PJRT_PLUGIN=path overrides the search.
# Usage: cli_pjrt_real.sh path/to/shardload
set -u
SL=${1:?usage: cli_pjrt_real.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}

plugins=()
if [ -n "${SL_PJRT_PLUGIN:-}" ]; then
    plugins=("$SL_PJRT_PLUGIN")
else
    for f in "$SRC"/.venv/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so \
             "$SRC"/.venv/lib/python3*/site-packages/lammps_jax_pjrt_cpu/*.so; do
        [ -f "$f" ] && plugins+=("$f")
    done
fi
if [ ${#plugins[@]} -eq 0 ]; then
    echo "skip: no PJRT CPU plugin in $SRC/.venv (pip install -r python/requirements-test.txt," \
         "or set SL_PJRT_PLUGIN=path/to/plugin.so)" >&2
    exit 77
fi

tiny_config "$T/tiny.json"
"$SL" synth --config "$T/tiny.json" "$T/ck" --max-shard-size 600KB >/dev/null 2>"$T/err" \
    || { echo "FAIL: synth: $(cat "$T/err")" >&2; exit 1; }
CK="$T/ck"
plan_bytes() { "$SL" plan "$CK" $(echo "$@" | sed 's/--staging [^ ]*//') --json | grep -o '"bytes":[0-9]*,"params"' | grep -o '[0-9]*' | tr '\n' ' '; }

for plugin in "${plugins[@]}"; do
    name=$(basename "$(dirname "$plugin")")
    for args in "--tp 8" "--layout spmd --tp 8" "--tp 8 --dtype f32" "--layout spmd --tp 4 --dtype f32" \
                "--tp 2 --pp 2" "--tp 1 --staging 64K" "--tp 2 --staging 256K --dtype f32" \
                "--tp 8 --staging 16K"; do
        ref=$("$SL" load "$CK" $args --checksums --json | sums)
        out=$("$SL" load "$CK" $args --device pjrt --pjrt-plugin "$plugin" --checksums --json 2>"$T/err") \
            || { fail "$name $args: $(head -c 600 "$T/err")"; continue; }
        [ -n "$ref" ] && [ "$(echo "$out" | sums)" = "$ref" ] || fail "$name $args: checksums differ from cpu"
        [ "$(echo "$out" | nums allocated_bytes)" = "$(plan_bytes $args)" ] || fail "$name $args: allocated != plan"
        [ -s "$T/err" ] && fail "$name $args: stderr: $(head -c 300 "$T/err")"
    done
    ref=$("$SL" load --format dummy --config "$T/tiny.json" --tp 4 --checksums --json | sums)
    out=$("$SL" load --format dummy --config "$T/tiny.json" --tp 4 --device pjrt --pjrt-plugin "$plugin" \
          --checksums --json 2>"$T/err") || fail "$name dummy: $(head -c 600 "$T/err")"
    [ "$(echo "$out" | sums)" = "$ref" ] || fail "$name dummy: checksums differ from cpu"
    echo "cli_pjrt_real: $plugin: checksums equal the cpu backend's"
done
finish
echo "cli_pjrt_real: ok"
