#!/usr/bin/env bash
# The consumer test: installs the build into a prefix inside it, then builds
# and runs tests/consumer's programs four ways: find_package, pkg-config
# (shared), pkg-config --static, and add_subdirectory of the source tree;
# and the installed command records a program (tests/package/graph.c).
# Usage: run.sh CMAKE BUILD_DIR SOURCE_DIR CXX CC GENERATOR
set -euo pipefail
cmake=$1 build=$2 src=$3 cxx=$4 cc=$5 gen=$6
work=$build/consumer
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
consumer=$src/tests/consumer
compilers=(-DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc")

echo "--- install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null

echo "--- find_package"
"$cmake" -S "$consumer" -B "$work/find_package" -G "$gen" "${compilers[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
"$cmake" --build "$work/find_package"
"$work/find_package/consumer"
"$work/find_package/consumer_static"
"$work/find_package/consumer_c"
if readelf -d "$work/find_package/consumer_static" | grep 'libusrtrace\.so' >/dev/null; then
  echo "consumer_static needs libusrtrace.so"; exit 1
fi

echo "--- pkg-config"
pc=$(find "$prefix" -name usrtrace.pc)
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir usrtrace)
[[ "$(cd "$libdir" && pwd)" == "$(cd "$(dirname "$pc")/.." && pwd)" ]]
shared=(-Wl,-rpath,"$libdir")
# --static: usrtrace's own archive (-l:libusrtrace.a, since the .so sits
# beside it) plus its private dependencies.
static_libs=$(pkg-config --libs --static usrtrace | sed 's/-lusrtrace\b/-l:libusrtrace.a/')
"$cxx" -std=c++20 -o "$work/pc_shared" "$consumer/main.cc" $(pkg-config --cflags --libs usrtrace) "${shared[@]}"
"$cxx" -std=c++20 -o "$work/pc_static" "$consumer/main.cc" $(pkg-config --cflags --static usrtrace) $static_libs
"$cc" -std=c11 -o "$work/pc_c_shared" "$consumer/main_c.c" $(pkg-config --cflags --libs usrtrace) "${shared[@]}"
"$cc" -std=c11 -o "$work/pc_c_static" "$consumer/main_c.c" $(pkg-config --cflags --static usrtrace) $static_libs
for p in pc_shared pc_static pc_c_shared pc_c_static; do "$work/$p"; done
for p in pc_static pc_c_static; do
  if readelf -d "$work/$p" | grep 'libusrtrace\.so' >/dev/null; then echo "$p needs libusrtrace.so"; exit 1; fi
done

echo "--- the installed command records a command with the installed runtime"
# bin/usrtrace finds lib*/libusrtrace-preload.so beside it, whatever the
# prefix (the build tree's is only for the build tree's command).
[[ -x "$prefix/bin/usrtrace" ]]
preload=$(find "$prefix" -name libusrtrace-preload.so)
[[ -n "$preload" ]]
"$cc" -O1 -fpatchable-function-entry=5 -o "$work/graph" "$src/tests/package/graph.c"
(cd "$work" && env -u USRTRACE_PRELOAD "$prefix/bin/usrtrace" record -p function_graph -o graph.dat -- ./graph \
  >graph.out 2>graph.err)
grep -q '^4150$' "$work/graph.out"
calls=$("$prefix/bin/usrtrace" report "$work/graph.dat" | grep -c -- '--> pkg_leaf (2)' || true)
[[ $calls == 100 ]] || { echo "installed usrtrace recorded $calls calls of pkg_leaf, not 100"; exit 1; }

echo "--- add_subdirectory"
"$cmake" -S "$consumer" -B "$work/subdir" -G "$gen" "${compilers[@]}" \
  -DUSRTRACE_SOURCE_DIR="$src" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$work/subdir"
"$work/subdir/consumer"
"$work/subdir/consumer_static"
"$work/subdir/consumer_c"
echo "--- all consumers passed"
