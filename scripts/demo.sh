#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine, builds, and runs the demo:
# a program that records events from three threads and prints its trace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DUSRTRACE_BUILD_TESTS=OFF -DUSRTRACE_BUILD_BENCH=OFF >/dev/null
cmake --build build --target ring_buffer_demo
./build/examples/ring_buffer_demo "$@"
