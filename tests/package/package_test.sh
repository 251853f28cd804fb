#!/usr/bin/env bash
# The Debian packages as a user gets them:
#
#   package_test.sh BUILD_DIR SOURCE_DIR
#
# BUILD_DIR is a built tree configured with -DCMAKE_INSTALL_PREFIX=/usr.
#  1. `cpack -G DEB` there: usrtrace_*.deb and libusrtrace-dev_*.deb;
#  2. `apt-get install` of both (their dependencies from the archive);
#  3. in a mount namespace where BUILD_DIR and SOURCE_DIR are empty (the
#     installed files must need neither), from /usr only: the man pages; the
#     bash completion (tests/tools/completion_test.sh on the installed
#     script); `usrtrace record -p function_graph -- ./graph` of a C program
#     built with -fpatchable-function-entry=5, read by `usrtrace report` and
#     `trace-cmd report`, with its exact call counts; the upstream programs of
#     tests/realworld (PACKAGE_TEST_RW_BUILDS, default gcc-O0-patchable: Lua,
#     bzip2, pbzip2 and muparser) recorded by /usr/bin/usrtrace, their calls
#     per function equal to uftrace's; programs built against
#     the installed headers and libraries with find_package and pkg-config
#     (shared and static); and a `cmake --install --prefix` copy of the
#     build recording the same program with the runtime installed beside it;
#  4. `apt-get purge` of both, and no file they installed is left.
#
# Needs root (apt-get). Exits 77 (skipped) without it, without unshare, or
# when a usrtrace package is already installed (someone's own, not ours to
# replace). Each step names itself; a failure says which.
set -euo pipefail
[[ -n ${PACKAGE_TEST_TRACE:-} ]] && set -x

if [[ ${1:-} == --inside ]]; then
  inside=1
  shift
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
step=setup
trap 'echo "package_test: FAILED at step: $step" >&2' ERR

skip() {
  echo "package_test: SKIP: $*"
  exit 77
}

# ---- 3. inside the namespace: what a user of the installed packages runs.
if [[ -n ${inside:-} ]]; then
  work=$PACKAGE_TEST_WORK
  step="the build and source trees are hidden"
  mount -t tmpfs -o size=1m usrtrace-hidden "$build"
  mount -t tmpfs -o size=1m usrtrace-hidden "$src"
  [[ -z $(ls -A "$build") && -z $(ls -A "$src") ]]
  cd "$work"

  step="the command is /usr/bin/usrtrace"
  [[ $(command -v usrtrace) == /usr/bin/usrtrace ]]
  help=$(usrtrace --help)
  grep -q '^Subcommands:' <<<"$help"

  step="man pages"
  [[ $(man -w usrtrace-record) == /usr/share/man/man1/usrtrace-record.1* ]]
  page=$(MANWIDTH=100 man usrtrace-record 2>/dev/null)
  grep -q 'usrtrace-record - record a running process' <<<"$page"
  page=$(MANWIDTH=100 man usrtrace 2>/dev/null)
  grep -q 'SUBCOMMANDS' <<<"$page"
  for sub in extract list mount record recover report reset restart show snapshot start stat stop stream; do
    man -w "usrtrace-$sub" >/dev/null
  done

  step="a program built against the installed headers (pkg-config)"
  # shellcheck disable=SC2046
  g++ -std=c++20 -O2 -o traced traced.cc $(pkg-config --cflags --libs usrtrace)
  libs=$(ldd traced)
  grep -q 'libusrtrace.so.0 => .*/lib/x86_64-linux-gnu/libusrtrace.so.0 ' <<<"$libs"  # /lib is /usr/lib

  step="bash completion"
  bash completion_test.sh /usr/bin/usrtrace /usr/share/bash-completion/completions/usrtrace \
    "$work/traced" pkgtest hello

  step="record -p function_graph -- a program built with -fpatchable-function-entry=5"
  gcc -O1 -fpatchable-function-entry=5 -o graph graph.c
  usrtrace record -p function_graph -o graph.dat -- ./graph >record.out 2>record.err
  grep -q '^4150$' record.out  # the program's own output: it ran whole
  grep -q ' 0 events lost' record.err
  usrtrace report graph.dat >report.txt
  leaf=$(grep -c -- '--> pkg_leaf (2)' report.txt || true)
  leaf_exits=$(grep -c -- '<-- pkg_leaf (2)' report.txt || true)
  middle=$(grep -c -- '--> pkg_middle (1)' report.txt || true)
  [[ $leaf == 100 && $leaf_exits == 100 && $middle == 25 ]] ||
    { echo "usrtrace report: pkg_leaf $leaf/$leaf_exits (100), pkg_middle $middle (25)"; false; }
  step="trace-cmd reads what the installed command recorded"
  trace-cmd report -R graph.dat >report-R.txt 2>/dev/null
  leaf=$(grep -c 'funcgraph_entry: *func=pkg_leaf depth=2' report-R.txt || true)
  [[ $leaf == 100 ]] || { echo "trace-cmd report -R: pkg_leaf $leaf (100)"; false; }

  step="upstream programs recorded by /usr/bin/usrtrace, counts as uftrace's"
  # tests/realworld's corpus (Lua, bzip2, pbzip2, muparser: upstream releases,
  # pinned by hash) on one of its builds, with the installed command and
  # runtime: every function's calls as uftrace counts them, graphs that nest,
  # the general path's options (-l, -n, -g, --max-graph-depth, -c, -F).
  rc=0
  RW_BUILDS=$PACKAGE_TEST_RW_BUILDS bash realworld/realworld_test.sh "$work/realworld-run" /usr/bin/usrtrace \
    >realworld.log 2>&1 || rc=$?
  if ((rc == 77)); then
    echo "package_test: note: $(grep SKIP realworld.log)"
  elif ((rc != 0)); then
    cat realworld.log >&2
    false
  else
    grep -E 'counts as uftrace|main thread' realworld.log | sed 's/^/package_test: /'
  fi

  step="cmake --install --prefix: that copy records with its own runtime"
  (cd "$work" && env -u USRTRACE_PRELOAD prefix/bin/usrtrace record -p function_graph -o prefix.dat \
    -- ./graph >prefix.out 2>prefix.err)
  grep -q '^4150$' prefix.out
  leaf=$(prefix/bin/usrtrace report prefix.dat | grep -c -- '--> pkg_leaf (2)' || true)
  [[ $leaf == 100 ]] || { echo "prefix/bin/usrtrace: pkg_leaf $leaf (100)"; false; }

  step="find_package(usrtrace) from /usr"
  cmake -S consumer -B consumer-build -G Ninja >/dev/null
  cmake --build consumer-build >/dev/null
  consumer-build/consumer
  consumer-build/consumer_static
  consumer-build/consumer_c
  step="pkg-config, shared and static"
  # shellcheck disable=SC2046
  g++ -std=c++20 -o pc_shared consumer/main.cc $(pkg-config --cflags --libs usrtrace)
  static_libs=$(pkg-config --libs --static usrtrace | sed 's/-lusrtrace\b/-l:libusrtrace.a/')
  # shellcheck disable=SC2046,SC2086
  g++ -std=c++20 -o pc_static consumer/main.cc $(pkg-config --cflags --static usrtrace) $static_libs
  ./pc_shared
  ./pc_static
  if readelf -d pc_static | grep 'libusrtrace\.so' >/dev/null; then echo "pc_static needs libusrtrace.so"; false; fi
  echo "package_test: the installed packages work without the build and source trees"
  exit 0
fi

# ---- outside: build, install, run the above, purge.
[[ $(id -u) == 0 ]] || skip "needs root (apt-get install, a mount namespace)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
for p in usrtrace libusrtrace-dev; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    skip "package $p is already installed; not replacing it"
  fi
done
grep -q '^CMAKE_INSTALL_PREFIX:PATH=/usr$' "$build/CMakeCache.txt" ||
  { echo "package_test: $build is not configured with -DCMAKE_INSTALL_PREFIX=/usr"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/usrtrace-package.XXXXXX")
installed=0
cleanup() {
  if ((installed)); then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq usrtrace libusrtrace-dev >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

step="cpack -G DEB"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/debs" >/dev/null)
runtime=$(ls "$work"/debs/usrtrace_*_amd64.deb)
dev=$(ls "$work"/debs/libusrtrace-dev_*_amd64.deb)
info=$(dpkg-deb -I "$runtime")
grep -q '^ Depends:.*libtraceevent1' <<<"$info"
info=$(dpkg-deb -I "$dev")
grep -q '^ Depends: usrtrace (= ' <<<"$info"
files=$( (dpkg-deb -c "$runtime"; dpkg-deb -c "$dev") | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }')
for f in /usr/bin/usrtrace /usr/lib/x86_64-linux-gnu/libusrtrace-preload.so \
  /usr/share/man/man1/usrtrace-record.1 /usr/share/bash-completion/completions/usrtrace \
  /usr/include/usrtrace/usrtrace.h /usr/lib/x86_64-linux-gnu/pkgconfig/usrtrace.pc; do
  grep -qxF "$f" <<<"$files" || { echo "package_test: no $f in the packages"; false; }
done

step="the license (MIT, LICENSE), as share/doc/PACKAGE/copyright"
for d in usrtrace libusrtrace-dev; do
  grep -qxF "/usr/share/doc/$d/copyright" <<<"$files" || { echo "package_test: no copyright file in $d"; false; }
done

step="apt-get install ./usrtrace_*.deb ./libusrtrace-dev_*.deb"
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$runtime" "$dev" >/dev/null

step="the installed copyright files are the MIT text of LICENSE"
for d in usrtrace libusrtrace-dev; do
  cmp -s "$src/LICENSE" "/usr/share/doc/$d/copyright" || { echo "package_test: /usr/share/doc/$d/copyright is not LICENSE"; false; }
  grep -q "^MIT License$" "/usr/share/doc/$d/copyright" || { echo "package_test: $d's copyright is not MIT"; false; }
done

step="cmake --install into a prefix"
cmake --install "$build" --prefix "$work/prefix" >/dev/null

step="the installed packages, with the trees hidden"
cp "$src/tests/package/traced.cc" "$src/tests/package/graph.c" "$src/tests/tools/completion_test.sh" "$work/"
cp -r "$src/tests/consumer" "$work/consumer"
cp -r "$src/tests/realworld" "$work/realworld"
PACKAGE_TEST_WORK=$work PACKAGE_TEST_RW_BUILDS=${PACKAGE_TEST_RW_BUILDS:-gcc-O0-patchable} unshare -m --propagation private bash "$0" --inside "$build" "$src"

step="apt-get purge leaves nothing behind"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq usrtrace libusrtrace-dev >/dev/null
installed=0
left=""
while read -r f; do
  [[ -e $f || -L $f ]] && left+=" $f"
done <<<"$files"
[[ -z $left ]] || { echo "package_test: left after purge:$left"; false; }
[[ ! -e /usr/lib/x86_64-linux-gnu/cmake/usrtrace && ! -e /usr/include/usrtrace ]] ||
  { echo "package_test: directories left after purge"; false; }
echo "package_test: all passed"
