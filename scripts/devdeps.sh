#!/usr/bin/env bash
# devdeps.sh [DIR] - extracts (dpkg -x, no install) the Debian 12 development packages of jansson,
# xxhash and liburing into DIR (default .devdeps), for a machine where nothing can be installed
# (the device machine of bench/gpu_check.sh). Run it here, carry DIR along, then configure with
#   cmake -DCMAKE_PREFIX_PATH=$PWD/DIR/usr ...
# (CMakeLists.txt falls back to find_path/find_library when pkg-config is missing there).
set -euo pipefail
dir=${1:-.devdeps}
pkgs=(libjansson-dev libjansson4 libxxhash-dev libxxhash0 liburing-dev liburing2)

command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "devdeps: needs apt-get and dpkg (Debian)" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"   # apt-get download may fetch as the _apt user

if ! (cd "$tmp" && apt-get download -q "${pkgs[@]}" >/dev/null 2>&1); then
  echo "devdeps: download failed, running apt-get update" >&2
  apt-get update -qq >/dev/null
  (cd "$tmp" && apt-get download -q "${pkgs[@]}" >/dev/null)
fi
for deb in "$tmp"/*.deb; do
  dpkg -x "$deb" "$dir"
  echo "devdeps: $(basename "$deb") -> $dir"
done
# Relocatable .pc files (they say prefix=/usr): a pkg-config that finds them through
# CMAKE_PREFIX_PATH must point into DIR, wherever DIR is carried to.
for pc in "$dir"/usr/lib/*/pkgconfig/*.pc "$dir"/usr/lib/pkgconfig/*.pc; do
  [[ -f $pc ]] || continue
  up=$(realpath --relative-to="$(dirname "$pc")" "$dir/usr")
  sed -i -e "s|^prefix=/usr\$|prefix=\${pcfiledir}/$up|" -e '/^prefix=/!s|=/usr/|=${prefix}/|' "$pc"
done
echo "devdeps: headers and libraries:"
find "$dir" \( -name 'jansson*.h' -o -name 'xxhash.h' -o -name 'liburing.h' \
  -o -name 'lib*.so*' -o -name 'lib*.a' \) -printf '  %P\n' | sort
