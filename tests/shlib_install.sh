#!/usr/bin/env bash
# shlib_install.sh - the installed package works for a program outside the project: installs the
# build tree into a temporary prefix (cmake --install), then builds examples/load_to_cpu.c
#   1. with `cc $(pkg-config --cflags --libs shardload)`, against the installed libshardload.so.0 only,
#   2. statically, with libshardload.a and `pkg-config --static` (shardload.pc's Libs.private),
#   3. as a CMake project with find_package(shardload) and shardload::shardload,
# and runs each on a small synthetic checkpoint: four devices holding the bytes `load` allocates.
# Usage: shlib_install.sh BUILD_DIR path/to/shardload. Environment: SL_SRC (the source tree),
# SL_CC (default cc) and SL_SAN_FLAGS (a sanitizer build's flags, which programs that link its
# instrumented library need too), SL_CMAKE (default cmake).
set -u
BUILD=${1:?usage: shlib_install.sh BUILD_DIR SHARDLOAD}
SL=${2:?usage: shlib_install.sh BUILD_DIR SHARDLOAD}
. "$(dirname "$0")/lib.sh"
SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${SL_CC:-cc}
SAN=${SL_SAN_FLAGS:-}
CMAKE=${SL_CMAKE:-cmake}
EXAMPLE="$SRC/examples/load_to_cpu.c"

tiny_ckpt
want=$("$SL" load "$T/ck" --tp 4 --json | nums allocated_bytes)

P="$T/prefix"
"$CMAKE" --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1 ||
    { fail "cmake --install: $(cat "$T/install.log")"; finish; }
# GNUInstallDirs may have chosen lib/<multiarch> (a /usr prefix at configure time).
LIB=$(dirname "$(find "$P" -name shardload.pc -path '*/pkgconfig/*' | head -1)")
LIB=${LIB%/pkgconfig}
[ -f "$LIB/pkgconfig/shardload.pc" ] || { fail "no shardload.pc under $P: $(cd "$P" && find . | tr '\n' ' ')"; finish; }
major=$(sed -n 's/^#define SL_VERSION_MAJOR \([0-9]*\)$/\1/p' "$P/include/shardload.h")
version=$(sed -n 's/^#define SL_VERSION_STRING "\(.*\)"$/\1/p' "$P/include/shardload.h")
[ -n "$major" ] || fail "no installed header with SL_VERSION_MAJOR"
for f in "libshardload.so.$version" "libshardload.so.$major" libshardload.so libshardload.a \
         cmake/shardload/shardloadConfig.cmake cmake/shardload/shardloadConfigVersion.cmake \
         cmake/shardload/shardloadTargets.cmake; do
    [ -e "$LIB/$f" ] || fail "not installed: $LIB/$f"
done
[ -x "$P/bin/shardload" ] || fail "not installed: bin/shardload"
[ -L "$LIB/libshardload.so" ] && [ -L "$LIB/libshardload.so.$major" ] || fail "no soname symlinks"
readelf -d "$LIB/libshardload.so.$version" | grep -q "SONAME.*\[libshardload\.so\.$major\]" ||
    fail "soname is not libshardload.so.$major"
grep -q "^prefix=$P\$" "$LIB/pkgconfig/shardload.pc" || fail "shardload.pc: prefix is not $P: $(grep '^prefix' "$LIB/pkgconfig/shardload.pc")"

# check NAME BINARY [shared|static]: BINARY runs on the checkpoint and reports the plan's bytes,
# linked against the installed shared library (resolved from the prefix) or not linking it at all.
check() {
    local name=$1 bin=$2 how=$3 out got
    if [ "$how" = shared ]; then
        readelf -d "$bin" | grep -q "NEEDED.*\[libshardload\.so\.$major\]" || fail "$name: does not need libshardload.so.$major"
        LD_LIBRARY_PATH="$LIB" ldd "$bin" | grep -q "libshardload\.so\.$major => $LIB/" ||
            fail "$name: libshardload not resolved from $LIB: $(LD_LIBRARY_PATH="$LIB" ldd "$bin" | grep shardload)"
    elif readelf -d "$bin" | grep -q "NEEDED.*libshardload"; then
        fail "$name: a static link needs libshardload.so"
    fi
    out=$(LD_LIBRARY_PATH="$LIB" "$bin" "$T/ck" 2>&1) || { fail "$name: run failed: $out"; return; }
    got=$(echo "$out" | sed -n 's/^device [0-9]*: \([0-9]*\) bytes;.*/\1/p' | tr '\n' ' ')
    [ -n "$want" ] && [ "$got" = "$want" ] || { fail "$name: device bytes '$got', load allocates '$want': $out"; return; }
    echo "$name ($how): ran, devices hold ${got% } bytes"
}

# 1-2. pkg-config
if command -v pkg-config >/dev/null 2>&1; then
    export PKG_CONFIG_PATH="$LIB/pkgconfig"
    [ "$(pkg-config --modversion shardload)" = "$version" ] || fail "pkg-config --modversion: $(pkg-config --modversion shardload 2>&1)"
    flags=$(pkg-config --cflags --libs shardload) || fail "pkg-config --cflags --libs shardload"
    echo "pkg-config --cflags --libs shardload: $flags"
    # shellcheck disable=SC2086  # word splitting of the flags is meant
    if $CC $SAN -o "$T/pc_shared" "$EXAMPLE" $flags 2>"$T/err"; then
        check pkg-config "$T/pc_shared" shared
    else
        fail "cc load_to_cpu.c \$(pkg-config --cflags --libs shardload): $(cat "$T/err")"
    fi
    static=$(pkg-config --static --libs shardload | tr ' ' '\n' | grep -vx -- -lshardload | tr '\n' ' ')
    # shellcheck disable=SC2086
    if $CC $SAN -o "$T/pc_static" "$EXAMPLE" $(pkg-config --cflags shardload) "$LIB/libshardload.a" $static 2>"$T/err"; then
        check "pkg-config --static" "$T/pc_static" static
    else
        fail "static link with Libs.private ($static): $(cat "$T/err")"
    fi
else
    echo "pkg-config not found: the pkg-config builds are skipped" >&2
fi

# 3. find_package(shardload)
if command -v "$CMAKE" >/dev/null 2>&1; then
    mkdir -p "$T/consumer"
    cat >"$T/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(shardload $version REQUIRED CONFIG)
message(STATUS "shardload_DIR=\${shardload_DIR}")
add_executable(load_to_cpu "$EXAMPLE")
target_link_libraries(load_to_cpu PRIVATE shardload::shardload)
CMAKE
    if ! "$CMAKE" -S "$T/consumer" -B "$T/consumer/build" -DCMAKE_PREFIX_PATH="$P" \
            -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$SAN" -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
            >"$T/consumer.log" 2>&1; then
        fail "find_package(shardload): $(cat "$T/consumer.log")"
    elif ! grep -q "shardload_DIR=$LIB/cmake/shardload" "$T/consumer.log"; then
        fail "find_package found another shardload: $(grep shardload_DIR "$T/consumer.log")"
    elif ! "$CMAKE" --build "$T/consumer/build" >>"$T/consumer.log" 2>&1; then
        fail "building against shardload::shardload: $(cat "$T/consumer.log")"
    else
        check find_package "$T/consumer/build/load_to_cpu" shared
    fi
else
    echo "cmake not found: the find_package(shardload) build is skipped" >&2
fi
finish
