#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine and runs every test:
#   1. gcc: g++, RelWithDebInfo, the benchmarks built: all tests, the
#      real-programs corpus and the installed-package consumers among them
#      (they need a build without a sanitizer); then the Debian packages made
#      from it, installed, used without the build tree and purged
#      (tests/package/package_test.sh)
#   2. asan: g++ with AddressSanitizer + UndefinedBehaviorSanitizer, Debug
#      (assertions on): all tests
#   3. tsan: clang++ with ThreadSanitizer and -Wthread-safety: all tests,
#      the libFuzzer targets' bounded runs (ASan, their own) and clang-tidy
# Three builds, not four: a plain clang build ran the gcc build's tests on
# clang's code, which the TSan build runs too, and CI's time (2 cores, under
# an hour) has no room for it. It is one argument away.
# Every configuration treats warnings as errors (USRTRACE_WERROR, off by
# default for users). Debug information is line tables only (gcc -g1,
# clang -gline-tables-only): what sanitizer reports, backtraces and the
# tests read (symbols come from .symtab, unwinding from .eh_frame), for a
# third less compile time than full -g; users' builds keep CMake's -g.
# CI's limit is time.
# Usage: scripts/test.sh [gcc|asan|tsan|clang ...]   (default: the first three)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

only=("$@")
run() {  # name, cmake args...
  local name=$1; shift
  if ((${#only[@]})); then
    [[ " ${only[*]} " == *" $name "* ]] || return 0
  elif [[ $name == clang ]]; then
    return 0
  fi
  echo "=== $name ==="
  cmake -S . -B "build-$name" -G Ninja -DUSRTRACE_BUILD_BENCH=OFF -DUSRTRACE_WERROR=ON "$@" >/dev/null
  cmake --build "build-$name" -j "$jobs"
  (cd "build-$name" && ctest --output-on-failure -j "$jobs" --timeout 600)
  if [[ $name == gcc ]]; then
    echo "=== gcc: the Debian packages ==="
    bash tests/package/package_test.sh "build-$name" .
  fi
}

gcc_rel=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
clang_rel=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG")
run gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSRTRACE_BUILD_BENCH=ON \
  -DCMAKE_INSTALL_PREFIX=/usr "${gcc_rel[@]}"
run asan -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Debug -DUSRTRACE_SANITIZE=address \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1
run tsan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSRTRACE_SANITIZE=thread \
  "${clang_rel[@]}"

# Not in the default run (named only):
run clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo "${clang_rel[@]}"
echo "=== all requested configurations passed ==="
