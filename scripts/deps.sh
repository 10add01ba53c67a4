#!/usr/bin/env bash
# Installs (as root, with apt-get) or names the Debian 12 packages shardload needs.
#   scripts/deps.sh build   - compiler, cmake, jansson, xxhash, liburing, libcurl (remote checkpoints),
#                             libssl (SHA-256: --verify, manifests; the build leaves it out quietly
#                             where it is missing, and libcurl4-openssl-dev only suggests it)
#   scripts/deps.sh test    - build + python3-numpy (oracle) + clang (fuzz replay under sanitizers)
#                             + Open MPI (tests/cli_mpi.sh)
#   scripts/deps.sh bench   - test + gnuplot (and python3-torch if it installs: optional)
set -euo pipefail
what=${1:-build}

need_build=(gcc:gcc cmake:cmake pkg-config:pkg-config make:make)
need_pkgs=(libjansson-dev liburing-dev libxxhash-dev libcurl4-openssl-dev libssl-dev)
missing=()

for pair in "${need_build[@]}"; do
  cmd=${pair%%:*}; pkg=${pair##*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
for pkg in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [[ $what == test || $what == bench ]]; then
  /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || missing+=(python3-numpy)
  command -v clang >/dev/null 2>&1 || missing+=(clang)
  # The sanitizer runtimes are only a Recommends of clang's packages, which --no-install-recommends
  # skips: without them nothing links with -fsanitize (make test-asan, make fuzz).
  echo 'int main(void) { return 0; }' |
    clang -x c -fsanitize=address,undefined - -o /dev/null >/dev/null 2>&1 || missing+=(libclang-rt-dev)
  command -v xxd >/dev/null 2>&1 || missing+=(xxd)
  command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
  dpkg-query -W -f='${Status}' libopenmpi-dev 2>/dev/null | grep -q "install ok installed" ||
    missing+=(libopenmpi-dev)
fi
if [[ $what == bench ]]; then
  command -v gnuplot >/dev/null 2>&1 || missing+=(gnuplot-nox)
fi

# Optional: the PyTorch alternative of `make bench`. Its absence is reported in RESULTS.md.
optional_torch() {
  [[ $what == bench && $(id -u) -eq 0 ]] || return 0
  /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 && return 0
  echo "shardload: trying to install python3-torch (optional, for the bench's PyTorch baseline)" >&2
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch >/dev/null 2>&1 ||
    echo "shardload: python3-torch did not install; the bench reports it as not run" >&2
}

if ((${#missing[@]} == 0)); then
  optional_torch
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "shardload: missing Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "shardload: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
optional_torch
