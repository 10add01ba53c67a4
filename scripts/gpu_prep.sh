#!/usr/bin/env bash
# gpu_prep.sh - prepares, on this (Debian) machine, what bench/gpu_check.sh needs on a GPU machine
# where nothing can be installed: .devdeps (the Debian packages of jansson, xxhash and liburing,
# extracted by scripts/devdeps.sh) and .devbuild/ (shardload and libshardload.so, built against
# them by scripts/cc_build.sh without libcurl, libcrypto or MPI, so that they need no more there;
# used only if both ways of building there fail). Both are kept out of git through
# .git/info/exclude; carry them:
#   device run: command "GPU_REPS=1 GPU_BUDGET_S=480 bash bench/gpu_check.sh" with timeout_s 590,
#   carry [".devdeps", ".devbuild"] (on an H200, 2026-12-04: 288 s after a 35 s start)
# then, here: copy the returned gpu.md and gpu_check.jsonl into bench/ and
#   python3 bench/gpu_report.py --splice bench/RESULTS.md bench/gpu.md
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .devdeps/usr/include ] || bash scripts/devdeps.sh .devdeps
bash scripts/cc_build.sh .devbuild >/dev/null
rm -rf .devbuild/obj
ex=$(git rev-parse --git-path info/exclude)   # a worktree's .git is a file
mkdir -p "$(dirname "$ex")"
for d in /.devdeps/ /.devbuild/; do
    grep -qxF "$d" "$ex" 2>/dev/null || echo "$d" >>"$ex"
done
echo "gpu_prep: .devdeps ($(du -sh .devdeps | cut -f1)) and .devbuild ($(du -sh .devbuild | cut -f1)) ready; carry both"
