#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine and runs every test:
#   1. g++, RelWithDebInfo, warnings as errors: all tests
#   2. clang++ (with -Wthread-safety), warnings as errors: all tests
#   3. g++ with AddressSanitizer + UndefinedBehaviorSanitizer: all tests
#   4. clang++ with ThreadSanitizer: all tests
# Usage: scripts/test.sh [gcc|clang|asan|tsan ...]   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

only=("$@")
run() {  # name, cmake args...
  local name=$1; shift
  if ((${#only[@]})) && [[ " ${only[*]} " != *" $name "* ]]; then return 0; fi
  echo "=== $name ==="
  cmake -S . -B "build-$name" -G Ninja -DUSRTRACE_BUILD_BENCH=OFF "$@" >/dev/null
  cmake --build "build-$name" -j "$jobs"
  (cd "build-$name" && ctest --output-on-failure -j "$jobs" --timeout 600)
}

run gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSRTRACE_BUILD_BENCH=ON
run clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo
run asan -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug -DUSRTRACE_SANITIZE=address
run tsan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSRTRACE_SANITIZE=thread
echo "=== all requested configurations passed ==="
