#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine, builds, and runs the demo:
# a multi-threaded service whose rare error events survive in an instance of
# their own while a hog event overwrites the top buffer (examples/service_demo.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DUSRTRACE_BUILD_TESTS=OFF -DUSRTRACE_BUILD_BENCH=OFF >/dev/null
cmake --build build --target service_demo
./build/examples/service_demo "$@"
