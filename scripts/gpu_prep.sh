#!/usr/bin/env bash
# gpu_prep.sh - prepares, on this (Debian) machine, what bench/gpu_check.sh needs on a GPU machine
# where nothing can be installed: .devdeps (the Debian packages of jansson, xxhash and liburing,
# extracted by scripts/devdeps.sh) and .devbuild/shardload (a release build against them, used
# only if building there fails). Both are kept out of git through .git/info/exclude; carry them:
#   device run: command "GPU_REPS=2 timeout 545 bash bench/gpu_check.sh", carry [".devdeps", ".devbuild"]
# then, here: copy the returned gpu.md to bench/gpu.md and
#   python3 bench/gpu_report.py --splice bench/RESULTS.md bench/gpu.md
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .devdeps/usr/include ] || bash scripts/devdeps.sh .devdeps
b=$(mktemp -d)
trap 'rm -rf "$b"' EXIT
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DSL_BUILD_TESTS=OFF -DSL_WITH_MPI=OFF \
    -DCMAKE_PREFIX_PATH="$PWD/.devdeps/usr" >/dev/null
cmake --build "$b" -j"$(nproc)" >/dev/null
mkdir -p .devbuild
cp "$b/shardload" .devbuild/
mkdir -p .git/info
for d in /.devdeps/ /.devbuild/; do
    grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >>.git/info/exclude
done
echo "gpu_prep: .devdeps ($(du -sh .devdeps | cut -f1)) and .devbuild/shardload ready; carry both"
