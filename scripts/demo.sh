#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine, builds, and runs the demo:
# a multi-threaded service whose rare error events survive in an instance of
# their own while a hog event overwrites the top buffer (examples/service_demo.cc).
# The service also records an instance to build/service_demo.dat while it
# runs; the end shows that file as usrtrace report and trace-cmd report read it,
# then records the same program from outside (usrtrace record -- COMMAND), and
# last traces the functions of a program that has no usrtrace in it
# (examples/graph_demo.cc, built with patchable entries) with function_graph,
# and the latency tracer's worst request of a small service
# (examples/latency_demo.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DUSRTRACE_BUILD_TESTS=OFF -DUSRTRACE_BUILD_BENCH=OFF >/dev/null
cmake --build build --target service_demo graph_demo latency_demo usrtrace_cli usrtrace_preload
./build/examples/service_demo build/service_demo.dat "$@"
set +o pipefail  # head closes the pipe early
echo
echo "=== usrtrace report build/service_demo.dat (first lines) ==="
./build/tools/usrtrace report build/service_demo.dat | head -n 4
echo
echo "=== trace-cmd report build/service_demo.dat (first lines) ==="
trace-cmd report build/service_demo.dat 2>/dev/null | head -n 4
echo
echo "=== usrtrace record -B outside -e demo:error -o build/outside.dat -- service_demo ==="
echo "(the same program started and recorded from outside, through its control socket)"
./build/tools/usrtrace record -B outside -e demo:error -o build/outside.dat \
  -- ./build/examples/service_demo build/service_demo2.dat >/dev/null
./build/tools/usrtrace report build/outside.dat | head -n 4
echo "errors recorded from outside: $(./build/tools/usrtrace report build/outside.dat | grep -c ' error: ')"
echo
echo "=== usrtrace record -p function_graph -o build/graph.dat -- graph_demo ==="
echo "(a program without usrtrace, built with -fpatchable-function-entry; trace-cmd report's graph)"
./build/tools/usrtrace record -p function_graph -o build/graph.dat -- ./build/examples/graph_demo >/dev/null
trace-cmd report build/graph.dat 2>/dev/null | awk '{ i = index($0, "funcgraph_"); if (i) print substr($0, i + 16) }' |
  head -n 24
echo
echo "=== latency_demo: current_tracer section_request, the worst request with its trace ==="
./build/examples/latency_demo | head -n 36
