#!/usr/bin/env bash
# cli_cuda_ptx.sh - the PTX the library embeds (src/device/cuda_kernels_ptx.c) is what
# scripts/cuda_ptx.sh makes of src/device/cuda_kernels.cu with this machine's nvcc, when it is the
# release that made the file; it declares PTX ISA 8.0, which CUDA 12 drivers take; and ptxas (the
# CUDA toolkit's assembler) accepts it for the oldest and a recent GPU (sm_75, sm_90): a kernel
# edited without regenerating, or PTX the driver's JIT would refuse, fails here rather than on a
# GPU (where the load would fall back to converting on the host). Skipped (77) without the
# toolkit. Usage: cli_cuda_ptx.sh path/to/shardload
set -u
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CUDA_BIN:-/usr/local/cuda/bin}
[ -x "$BIN/nvcc" ] && [ -x "$BIN/ptxas" ] || { echo "skip: no CUDA toolkit at $BIN" >&2; exit 77; }
# the embedded PTX, back to a file: the C string literal's lines, unquoted
sed -n 's/^    "\(.*\)\\n"$/\1/p' "$ROOT/src/device/cuda_kernels_ptx.c" | sed 's/\\"/"/g; s/\\\\/\\/g' >"$T/k.ptx"
grep -q '^\.version ' "$T/k.ptx" || fail "no PTX found in cuda_kernels_ptx.c"
# a CUDA 12 driver JIT-compiles PTX of ISA 8.0 at most (scripts/cuda_ptx.sh says why 8.0)
isa=$(sed -n 's/^\.version \([0-9]*\.[0-9]*\)$/\1/p' "$T/k.ptx")
[ "$isa" = 8.0 ] || fail "the embedded PTX declares ISA $isa, not 8.0: a CUDA 12 driver would refuse it"
for arch in sm_75 sm_90; do
    "$BIN/ptxas" -arch=$arch "$T/k.ptx" -o "$T/k_$arch.cubin" 2>"$T/err" || fail "ptxas -arch=$arch: $(cat "$T/err")"
done
made=$(sed -n '1s/.*(release \([0-9.]*\)).*/\1/p' "$ROOT/src/device/cuda_kernels_ptx.c")
have=$("$BIN/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
if [ "$made" = "$have" ]; then
    NVCC="$BIN/nvcc" bash "$ROOT/scripts/cuda_ptx.sh" --check 2>"$T/err" || fail "$(cat "$T/err")"
else
    echo "cli_cuda_ptx: nvcc $have, the file was made by $made: not compared"
fi
finish
