#!/usr/bin/env bash
# cc_build.sh OUTDIR - builds the CLI (OUTDIR/shardload) and the shared library
# (OUTDIR/libshardload.so, what the Python package loads) with the C compiler alone, for a machine
# without cmake: the GPU machine of bench/gpu_check.sh, which tries CMake first. The same sources
# and defines as CMakeLists.txt, with only what this needs: jansson and xxhash (installed, or
# extracted into .devdeps by scripts/devdeps.sh), liburing when its header is found; no libcurl,
# libcrypto or MPI (remote sources, SHA-256 --verify and --dist say so when asked for).
# tests/cli_cc_build.sh builds with it and loads a checkpoint, so it keeps up with the tree.
# Knobs: CC (default cc), CFLAGS (default -O2), JOBS (default nproc).
set -euo pipefail
out=${1:?usage: cc_build.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
mkdir -p "$out/obj"
out=$(cd "$out" && pwd)
inc=(-I"$root/include" -I"$root/src")
lib=()
dev=$root/.devdeps/usr
if [ -d "$dev/include" ]; then
    inc+=(-I"$dev/include")
    for d in "$dev"/lib/x86_64-linux-gnu "$dev"/lib; do [ -d "$d" ] && lib+=(-L"$d" -Wl,-rpath,"$d"); done
fi
defs=(-D_GNU_SOURCE -DSL_BUILDING_LIBRARY)
has_header() { echo "#include <$1>" | "$cc" "${inc[@]}" -E -x c - >/dev/null 2>&1; }
for h in jansson.h xxhash.h; do
    has_header "$h" || { echo "cc_build: <$h> not found (Debian: libjansson-dev, libxxhash-dev; or scripts/devdeps.sh)" >&2; exit 1; }
done
uring=0
if has_header liburing.h; then
    uring=1 defs+=(-DSL_WITH_URING=1)
fi
# CMakeLists.txt's selection: every layer's sources, the io engines that are built in, stubs for
# the rest.
srcs=()
for f in "$root"/src/{common,format,ckpt,plan,io,device,load,tools}/*.c; do
    case $(basename "$f") in
    io_uring.c) [ "$uring" = 1 ] || continue ;;
    http_get.c | http_many.c | http_pool.c | http_xfer.c | io_http.c) continue ;;
    esac
    srcs+=("$f")
done
srcs+=("$root/src/mpi/mpi_stub.c")
flags=(-std=c11 ${CFLAGS:--O2} -fPIC -fvisibility=hidden -pthread)
# in parallel, one object per source, named after its folder and file
export cc out flags_s="${flags[*]}" defs_s="${defs[*]}" inc_s="${inc[*]}"
printf '%s\0' "${srcs[@]}" | xargs -0 -n1 -P"${JOBS:-$(nproc)}" bash -c \
    'o=$out/obj/$(basename "$(dirname "$0")")_$(basename "${0%.c}").o; $cc $flags_s $defs_s $inc_s -c "$0" -o "$o"'
objs=("$out"/obj/*.o)
libs=("${lib[@]}" -ljansson -lxxhash -pthread -ldl -lm)
[ "$uring" = 1 ] && libs=("${lib[@]}" -luring "${libs[@]:${#lib[@]}}")
"$cc" -shared -o "$out/libshardload.so" -Wl,-soname,libshardload.so.0 -Wl,--no-undefined "${objs[@]}" "${libs[@]}"
ln -sf libshardload.so "$out/libshardload.so.0"
"$cc" -std=c11 ${CFLAGS:--O2} -D_GNU_SOURCE -pthread "${inc[@]}" -o "$out/shardload" "$root"/cli/*.c "${objs[@]}" "${libs[@]}"
echo "cc_build: $out/shardload and $out/libshardload.so (io_uring: $([ "$uring" = 1 ] && echo yes || echo no); no libcurl, libcrypto or MPI)"
