#!/usr/bin/env bash
# The consumer test: installs the build into a prefix inside it, then builds
# and runs tests/consumer's programs four ways: find_package, pkg-config
# (shared), pkg-config --static, and add_subdirectory of the source tree.
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
if readelf -d "$work/find_package/consumer_static" | grep -q 'libusrtrace\.so'; then
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
  if readelf -d "$work/$p" | grep -q 'libusrtrace\.so'; then echo "$p needs libusrtrace.so"; exit 1; fi
done

echo "--- add_subdirectory"
"$cmake" -S "$consumer" -B "$work/subdir" -G "$gen" "${compilers[@]}" \
  -DUSRTRACE_SOURCE_DIR="$src" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$work/subdir"
"$work/subdir/consumer"
"$work/subdir/consumer_static"
"$work/subdir/consumer_c"
echo "--- all consumers passed"
